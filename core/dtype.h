// File: core/dtype.h
//
// The element types tensorcompute serves. The numeric values equal those of the wire enum
// tensorcompute.v1.DataType, so translation between the two is a checked cast.
//
// Gather only moves elements, so what matters about a type is its size: the kernels dispatch
// on ElementSize() (1, 2, 4, 8 or 16 bytes), plus a separate path for strings.
// Everything here is a pure function; thread-safe.

#ifndef TENSORCOMPUTE_CORE_DTYPE_H_
#define TENSORCOMPUTE_CORE_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace tensorcompute::core {

enum class DataType : int32_t {
  kUnspecified = 0,
  kBool = 1,  // one byte, 0 or 1
  kInt8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kUint8 = 6,
  kUint16 = 7,
  kUint32 = 8,
  kUint64 = 9,
  kFloat16 = 10,
  kBfloat16 = 11,
  kFloat32 = 12,
  kFloat64 = 13,
  kComplex64 = 14,   // (real, imag) float32 pair
  kComplex128 = 15,  // (real, imag) float64 pair
  kString = 16,      // variable-length byte strings
};

// The smallest and largest valid (specified) values.
inline constexpr int32_t kFirstDataType = 1;
inline constexpr int32_t kLastDataType = 16;

// Returns the DataType with wire number `value`, or nullopt if `value` names no type
// (DT_UNSPECIFIED = 0 included).
std::optional<DataType> DataTypeFromInt(int64_t value);

// Returns the size in bytes of one element: 1, 2, 4, 8 or 16; 0 for kString and
// kUnspecified (strings have no fixed size).
size_t ElementSize(DataType dtype);

// Returns the lower-case NumPy-style name ("float32", "bfloat16", "string", ...);
// "unspecified" for kUnspecified and "dtype(<n>)" for an out-of-enum value.
std::string DataTypeName(DataType dtype);

// Parses a name as DataTypeName() prints it. Returns nullopt for an unknown name.
std::optional<DataType> DataTypeFromName(absl::string_view name);

// Returns true for kInt32 and kInt64, the two index types.
inline bool IsIndexType(DataType dtype) {
  return dtype == DataType::kInt32 || dtype == DataType::kInt64;
}

// Every specified type, in enum order (for tests and documentation).
inline constexpr DataType kAllDataTypes[] = {
    DataType::kBool,    DataType::kInt8,      DataType::kInt16,      DataType::kInt32,
    DataType::kInt64,   DataType::kUint8,     DataType::kUint16,     DataType::kUint32,
    DataType::kUint64,  DataType::kFloat16,   DataType::kBfloat16,   DataType::kFloat32,
    DataType::kFloat64, DataType::kComplex64, DataType::kComplex128, DataType::kString,
};

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_DTYPE_H_
