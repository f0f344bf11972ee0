// Tests of core/dtype.h: wire numbers, element sizes, names.

#include "core/dtype.h"

#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tensorcompute::core {
namespace {

TEST(DataType, AllDataTypesListsEveryWireNumberOnceInOrder) {
  int32_t expected = kFirstDataType;
  for (DataType d : kAllDataTypes) EXPECT_EQ(static_cast<int32_t>(d), expected++);
  EXPECT_EQ(expected, kLastDataType + 1);
}

TEST(DataType, FromIntAcceptsExactlyTheSpecifiedTypes) {
  for (DataType d : kAllDataTypes) {
    EXPECT_EQ(DataTypeFromInt(static_cast<int32_t>(d)), d);
  }
  EXPECT_EQ(DataTypeFromInt(0), std::nullopt);  // DT_UNSPECIFIED
  EXPECT_EQ(DataTypeFromInt(-1), std::nullopt);
  EXPECT_EQ(DataTypeFromInt(17), std::nullopt);
  EXPECT_EQ(DataTypeFromInt(99), std::nullopt);
  EXPECT_EQ(DataTypeFromInt(int64_t{1} << 32 | 1), std::nullopt);  // no truncation to 1
  EXPECT_EQ(DataTypeFromInt(INT64_MIN), std::nullopt);
}

TEST(DataType, ElementSizeOfEveryType) {
  EXPECT_EQ(ElementSize(DataType::kBool), 1u);
  EXPECT_EQ(ElementSize(DataType::kInt8), 1u);
  EXPECT_EQ(ElementSize(DataType::kInt16), 2u);
  EXPECT_EQ(ElementSize(DataType::kInt32), 4u);
  EXPECT_EQ(ElementSize(DataType::kInt64), 8u);
  EXPECT_EQ(ElementSize(DataType::kUint8), 1u);
  EXPECT_EQ(ElementSize(DataType::kUint16), 2u);
  EXPECT_EQ(ElementSize(DataType::kUint32), 4u);
  EXPECT_EQ(ElementSize(DataType::kUint64), 8u);
  EXPECT_EQ(ElementSize(DataType::kFloat16), 2u);
  EXPECT_EQ(ElementSize(DataType::kBfloat16), 2u);
  EXPECT_EQ(ElementSize(DataType::kFloat32), 4u);
  EXPECT_EQ(ElementSize(DataType::kFloat64), 8u);
  EXPECT_EQ(ElementSize(DataType::kComplex64), 8u);
  EXPECT_EQ(ElementSize(DataType::kComplex128), 16u);
  EXPECT_EQ(ElementSize(DataType::kString), 0u);
  EXPECT_EQ(ElementSize(DataType::kUnspecified), 0u);
  EXPECT_EQ(ElementSize(static_cast<DataType>(99)), 0u);
  EXPECT_EQ(ElementSize(static_cast<DataType>(-3)), 0u);
}

TEST(DataType, NamesAreNumPyStyle) {
  EXPECT_EQ(DataTypeName(DataType::kBool), "bool");
  EXPECT_EQ(DataTypeName(DataType::kInt8), "int8");
  EXPECT_EQ(DataTypeName(DataType::kUint64), "uint64");
  EXPECT_EQ(DataTypeName(DataType::kFloat16), "float16");
  EXPECT_EQ(DataTypeName(DataType::kBfloat16), "bfloat16");
  EXPECT_EQ(DataTypeName(DataType::kFloat32), "float32");
  EXPECT_EQ(DataTypeName(DataType::kFloat64), "float64");
  EXPECT_EQ(DataTypeName(DataType::kComplex64), "complex64");
  EXPECT_EQ(DataTypeName(DataType::kComplex128), "complex128");
  EXPECT_EQ(DataTypeName(DataType::kString), "string");
  EXPECT_EQ(DataTypeName(DataType::kUnspecified), "unspecified");
  EXPECT_EQ(DataTypeName(static_cast<DataType>(99)), "dtype(99)");
  EXPECT_EQ(DataTypeName(static_cast<DataType>(-1)), "dtype(-1)");
}

TEST(DataType, NameRoundTripsForEveryType) {
  std::set<std::string> names;
  for (DataType d : kAllDataTypes) {
    const std::string name = DataTypeName(d);
    EXPECT_EQ(DataTypeFromName(name), d) << name;
    names.insert(name);
  }
  EXPECT_EQ(names.size(), std::size(kAllDataTypes));  // all distinct
}

TEST(DataType, FromNameRejectsUnknownNames) {
  EXPECT_EQ(DataTypeFromName("unspecified"), std::nullopt);
  EXPECT_EQ(DataTypeFromName(""), std::nullopt);
  EXPECT_EQ(DataTypeFromName("float"), std::nullopt);
  EXPECT_EQ(DataTypeFromName("Float32"), std::nullopt);
  EXPECT_EQ(DataTypeFromName("float32 "), std::nullopt);
  EXPECT_EQ(DataTypeFromName("dtype(99)"), std::nullopt);
}

TEST(DataType, IndexTypesAreInt32AndInt64Only) {
  for (DataType d : kAllDataTypes) {
    EXPECT_EQ(IsIndexType(d), d == DataType::kInt32 || d == DataType::kInt64) << DataTypeName(d);
  }
  EXPECT_FALSE(IsIndexType(DataType::kUnspecified));
}

}  // namespace
}  // namespace tensorcompute::core
