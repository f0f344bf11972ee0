#include "core/dtype.h"

#include "absl/strings/str_cat.h"

namespace tensorcompute::core {
namespace {

struct TypeInfo {
  const char* name;
  size_t size;
};

// Indexed by the enum value.
constexpr TypeInfo kTypeInfo[] = {
    {"unspecified", 0}, {"bool", 1},     {"int8", 1},    {"int16", 2},   {"int32", 4},
    {"int64", 8},       {"uint8", 1},    {"uint16", 2},  {"uint32", 4},  {"uint64", 8},
    {"float16", 2},     {"bfloat16", 2}, {"float32", 4}, {"float64", 8}, {"complex64", 8},
    {"complex128", 16}, {"string", 0},
};
static_assert(sizeof(kTypeInfo) / sizeof(kTypeInfo[0]) == kLastDataType + 1);

bool InEnum(DataType dtype) {
  const auto v = static_cast<int32_t>(dtype);
  return v >= 0 && v <= kLastDataType;
}

}  // namespace

std::optional<DataType> DataTypeFromInt(int64_t value) {
  if (value < kFirstDataType || value > kLastDataType) return std::nullopt;
  return static_cast<DataType>(value);
}

size_t ElementSize(DataType dtype) {
  return InEnum(dtype) ? kTypeInfo[static_cast<int32_t>(dtype)].size : 0;
}

std::string DataTypeName(DataType dtype) {
  if (!InEnum(dtype)) return absl::StrCat("dtype(", static_cast<int32_t>(dtype), ")");
  return kTypeInfo[static_cast<int32_t>(dtype)].name;
}

std::optional<DataType> DataTypeFromName(absl::string_view name) {
  for (int32_t v = kFirstDataType; v <= kLastDataType; ++v) {
    if (name == kTypeInfo[v].name) return static_cast<DataType>(v);
  }
  return std::nullopt;
}

}  // namespace tensorcompute::core
