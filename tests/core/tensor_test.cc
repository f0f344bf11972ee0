// Tests of core/tensor.h: ValidateDataType's and ValidateTensor's rules and wording,
// IdenticalTensors, and the owning Tensor (allocation, copies, moves that keep string views
// valid).

#include "core/tensor.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "tests/testing/random_tensor.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::core {
namespace {

using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::MakeStrings;
using ::tensorcompute::testing::MakeTensor;
using ::tensorcompute::testing::StatusIs;
using ::testing::AllOf;
using ::testing::Eq;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

TensorView BytesView(DataType dtype, const Shape& shape, const std::vector<uint8_t>& bytes) {
  return TensorView{dtype, shape, bytes, {}};
}

TEST(ValidateTensor, AcceptsWellFormedTensors) {
  const Tensor f = MakeTensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_THAT(ValidateTensor(f.view(), "params", 32), IsOk());
  const Tensor s = MakeStrings({2}, {"a", ""});
  EXPECT_THAT(ValidateTensor(s.view(), "params", 32), IsOk());
  const Tensor empty = *Tensor::Allocate(DataType::kInt8, {0, 7});
  EXPECT_THAT(ValidateTensor(empty.view(), "params", 32), IsOk());
  const Tensor scalar = MakeTensor<int64_t>({}, {5});
  EXPECT_THAT(ValidateTensor(scalar.view(), "indices", 0), IsOk());
}

TEST(ValidateTensor, DataTooShortNamesBothByteCounts) {
  const std::vector<uint8_t> bytes(23);
  EXPECT_THAT(ValidateTensor(BytesView(DataType::kFloat32, {2, 3}, bytes), "params", 32),
              StatusIs(kInvalid, AllOf(StartsWith("params"), HasSubstr("23"), HasSubstr("24"),
                                       HasSubstr("[2,3]"), HasSubstr("float32"))));
}

TEST(ValidateTensor, DataTooLongNamesBothByteCounts) {
  const std::vector<uint8_t> bytes(25);
  EXPECT_THAT(ValidateTensor(BytesView(DataType::kFloat32, {2, 3}, bytes), "indices", 32),
              StatusIs(kInvalid, AllOf(StartsWith("indices"), HasSubstr("25"), HasSubstr("24"))));
}

TEST(ValidateTensor, ExactWordingOfByteCountMismatch) {
  const std::vector<uint8_t> bytes(7);
  EXPECT_THAT(
      ValidateTensor(BytesView(DataType::kInt16, {2, 2}, bytes), "params", 32),
      StatusIs(kInvalid,
               "params: data has 7 bytes but shape [2,2] of int16 needs 4 elements x 2 bytes "
               "= 8 bytes"));
}

TEST(ValidateTensor, StringCountMismatch) {
  std::string a = "a", b = "b", c = "c";
  const std::vector<const std::string*> ptrs = {&a, &b, &c};
  TensorView v;
  v.dtype = DataType::kString;
  v.shape = {2};
  v.strings = ptrs;
  EXPECT_THAT(ValidateTensor(v, "params", 32),
              StatusIs(kInvalid, AllOf(StartsWith("params"), HasSubstr("3 strings"),
                                       HasSubstr("[2]"), HasSubstr("2 elements"))));
  v.shape = {4};
  EXPECT_THAT(ValidateTensor(v, "params", 32),
              StatusIs(kInvalid, AllOf(HasSubstr("3 strings"), HasSubstr("4 elements"))));
}

TEST(ValidateTensor, StringTensorWithDataBytesIsRejected) {
  const std::vector<uint8_t> bytes(4);
  TensorView v = BytesView(DataType::kString, {}, bytes);
  std::string s;
  const std::vector<const std::string*> ptrs = {&s};
  v.strings = ptrs;
  EXPECT_THAT(ValidateTensor(v, "params", 32),
              StatusIs(kInvalid, AllOf(StartsWith("params"), HasSubstr("4 bytes"))));
}

TEST(ValidateTensor, NumericTensorWithStringsIsRejected) {
  std::string s;
  const std::vector<const std::string*> ptrs = {&s};
  const std::vector<uint8_t> bytes(4);
  TensorView v = BytesView(DataType::kInt32, {1}, bytes);
  v.strings = ptrs;
  EXPECT_THAT(
      ValidateTensor(v, "indices", 32),
      StatusIs(kInvalid, AllOf(StartsWith("indices"), HasSubstr("int32"), HasSubstr("1 strings"))));
}

TEST(ValidateTensor, NumericTensorWithStringsMessageReadsAsEnglish) {
  std::string s;
  const std::vector<const std::string*> ptrs = {&s, &s};
  const std::vector<uint8_t> bytes(8);
  TensorView v = BytesView(DataType::kInt32, {2}, bytes);
  v.strings = ptrs;
  EXPECT_THAT(ValidateTensor(v, "indices", 32),
              StatusIs(kInvalid, Eq("indices: an int32 tensor carries its values in data, but "
                                    "has 2 strings; expected 0")));
  v.dtype = DataType::kFloat64;
  EXPECT_THAT(ValidateTensor(v, "params", 32),
              StatusIs(kInvalid, Eq("params: a float64 tensor carries its values in data, but "
                                    "has 2 strings; expected 0")));
}

TEST(ValidateTensor, NegativeDimensionNamesTheDimension) {
  EXPECT_THAT(ValidateTensor(BytesView(DataType::kInt8, {2, -1, 3}, {}), "params", 32),
              StatusIs(kInvalid, AllOf(StartsWith("params"), HasSubstr("dimension 1"),
                                       HasSubstr("-1"), HasSubstr("[2,-1,3]"))));
}

TEST(ValidateTensor, UnknownAndUnspecifiedDtypes) {
  EXPECT_THAT(ValidateTensor(BytesView(static_cast<DataType>(99), {}, {}), "params", 32),
              StatusIs(kInvalid, AllOf(StartsWith("params"), HasSubstr("unknown dtype 99"),
                                       HasSubstr("float32"))));
  EXPECT_THAT(ValidateTensor(BytesView(DataType::kUnspecified, {}, {}), "indices", 32),
              StatusIs(kInvalid, AllOf(StartsWith("indices"), HasSubstr("unspecified"))));
}

TEST(ValidateDataType, AcceptsEveryKnownTypeAndNamesTheOthers) {
  for (DataType dtype : kAllDataTypes) EXPECT_THAT(ValidateDataType(dtype, "params"), IsOk());
  const std::string known =
      "bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, bfloat16, "
      "float32, float64, complex64, complex128, string";
  EXPECT_THAT(ValidateDataType(static_cast<DataType>(17), "params"),
              StatusIs(kInvalid, Eq("params: unknown dtype 17; expected one of " + known)));
  EXPECT_THAT(ValidateDataType(DataType::kUnspecified, "indices"),
              StatusIs(kInvalid, Eq("indices: dtype is unspecified; expected one of " + known)));
}

TEST(ValidateTensor, RankAboveMaximum) {
  const std::vector<uint8_t> bytes(1);
  EXPECT_THAT(ValidateTensor(BytesView(DataType::kInt8, {1, 1, 1}, bytes), "params", 2),
              StatusIs(kInvalid, AllOf(StartsWith("params"), HasSubstr("rank 3"),
                                       HasSubstr("maximum rank 2"))));
  EXPECT_THAT(ValidateTensor(BytesView(DataType::kInt8, {1, 1}, bytes), "params", 2), IsOk());
}

TEST(ValidateTensor, ElementCountOverflow) {
  EXPECT_THAT(ValidateTensor(BytesView(DataType::kInt8, {int64_t{1} << 62, 4}, {}), "params", 32),
              StatusIs(kInvalid, AllOf(StartsWith("params"), HasSubstr("too many elements"),
                                       HasSubstr("[4611686018427387904,4]"))));
  // Zero elements, but a nonzero part that overflows: rejected by design, and the message
  // does not claim that an empty tensor has too many elements.
  EXPECT_THAT(
      ValidateTensor(BytesView(DataType::kInt8, {0, int64_t{1} << 62, 4}, {}), "params", 32),
      StatusIs(kInvalid, Eq("params: shape [0,4611686018427387904,4]: the product of its nonzero "
                            "dimensions must fit in int64, even though a dimension is 0 (the "
                            "tensor is empty)")));
}

TEST(ValidateTensor, ByteCountOverflowOfAFittingElementCount) {
  // 2^62 elements fit int64, but 2^62 x 4 bytes do not.
  EXPECT_THAT(ValidateTensor(BytesView(DataType::kFloat32, {int64_t{1} << 62}, {}), "params", 32),
              StatusIs(kInvalid, AllOf(HasSubstr("0 bytes"), HasSubstr("more than 2^63"))));
}

TEST(IdenticalTensors, ComparesDtypeShapeAndBytes) {
  const Tensor a = MakeTensor<int32_t>({2, 2}, {1, 2, 3, 4});
  EXPECT_TRUE(IdenticalTensors(a.view(), a.view()));
  EXPECT_TRUE(IdenticalTensors(a.view(), MakeTensor<int32_t>({2, 2}, {1, 2, 3, 4}).view()));
  EXPECT_FALSE(IdenticalTensors(a.view(), MakeTensor<int32_t>({2, 2}, {1, 2, 3, 5}).view()));
  EXPECT_FALSE(IdenticalTensors(a.view(), MakeTensor<int32_t>({4}, {1, 2, 3, 4}).view()));
  EXPECT_FALSE(IdenticalTensors(a.view(), MakeTensor<uint32_t>({2, 2}, {1, 2, 3, 4}).view()));
  EXPECT_TRUE(IdenticalTensors(Tensor::Allocate(DataType::kInt8, {0})->view(),
                               Tensor::Allocate(DataType::kInt8, {0})->view()));
  EXPECT_FALSE(IdenticalTensors(Tensor::Allocate(DataType::kInt8, {0})->view(),
                                Tensor::Allocate(DataType::kInt8, {0, 1})->view()));
}

TEST(IdenticalTensors, ComparesStringsByValue) {
  const Tensor a = MakeStrings({3}, {"x", "", std::string("\0y", 2)});
  EXPECT_TRUE(IdenticalTensors(a.view(), a.Clone().view()));
  EXPECT_FALSE(IdenticalTensors(a.view(), MakeStrings({3}, {"x", "", "\0z"}).view()));
  EXPECT_FALSE(IdenticalTensors(a.view(), MakeStrings({3}, {"x", "", ""}).view()));
}

TEST(Tensor, DefaultIsEmptyFloat32Vector) {
  const Tensor t;
  EXPECT_EQ(t.dtype(), DataType::kFloat32);
  EXPECT_EQ(t.shape(), Shape({0}));
  EXPECT_EQ(t.num_elements(), 0);
  EXPECT_TRUE(t.bytes().empty());
  EXPECT_THAT(ValidateTensor(t.view(), "t", 32), IsOk());
}

TEST(Tensor, AllocateSizesStorageForEveryDtype) {
  for (DataType d : kAllDataTypes) {
    absl::StatusOr<Tensor> t = Tensor::Allocate(d, {2, 3});
    ASSERT_THAT(t, IsOk()) << DataTypeName(d);
    EXPECT_EQ(t->num_elements(), 6);
    if (d == DataType::kString) {
      EXPECT_EQ(t->strings(), std::vector<std::string>(6));
      EXPECT_TRUE(t->bytes().empty());
    } else {
      EXPECT_EQ(t->bytes().size(), 6 * ElementSize(d));
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t->bytes().data()) % 64, 0u);
    }
    EXPECT_THAT(ValidateTensor(t->view(), "t", 32), IsOk());
  }
}

TEST(Tensor, AllocateRejectsBadRequests) {
  EXPECT_THAT(Tensor::Allocate(DataType::kUnspecified, {1}), StatusIs(kInvalid));
  EXPECT_THAT(Tensor::Allocate(static_cast<DataType>(99), {1}), StatusIs(kInvalid));
  EXPECT_THAT(Tensor::Allocate(DataType::kInt8, {-1}), StatusIs(kInvalid, HasSubstr("[-1]")));
  EXPECT_THAT(Tensor::Allocate(DataType::kInt8, {int64_t{1} << 62, 4}), StatusIs(kInvalid));
  EXPECT_THAT(Tensor::Allocate(DataType::kFloat64, {int64_t{1} << 62}), StatusIs(kInvalid));
}

TEST(Tensor, FromBytesCopiesAndChecksTheCount) {
  std::vector<uint8_t> bytes = {1, 2, 3, 4, 5, 6};
  absl::StatusOr<Tensor> t = Tensor::FromBytes(DataType::kUint16, {3}, bytes);
  ASSERT_THAT(t, IsOk());
  bytes[0] = 99;  // a copy, not a view
  EXPECT_THAT(t->values<uint16_t>(), ::testing::ElementsAre(0x0201, 0x0403, 0x0605));
  EXPECT_THAT(Tensor::FromBytes(DataType::kUint16, {2}, bytes),
              StatusIs(kInvalid, AllOf(HasSubstr("6 bytes"), HasSubstr("4 bytes"))));
  EXPECT_THAT(Tensor::FromBytes(DataType::kUint16, {4}, bytes), StatusIs(kInvalid));
  EXPECT_THAT(Tensor::FromBytes(DataType::kString, {}, {}), StatusIs(kInvalid));
}

TEST(Tensor, FromValuesCopiesTypedValues) {
  const std::vector<int16_t> values = {-1, 2, 300};
  const Tensor t = Tensor::FromValues<int16_t>(DataType::kInt16, {3}, values);
  EXPECT_EQ(t.dtype(), DataType::kInt16);
  EXPECT_THAT(t.values<int16_t>(), ::testing::ElementsAre(-1, 2, 300));
}

TEST(Tensor, FromValuesWithNoValuesMakesAnEmptyTensor) {
  // An empty std::vector's data() is null; FromValues must not pass it to memcpy (UBSan:
  // "null pointer passed as argument 2, which is declared to never be null").
  const std::vector<float> none;
  const Tensor t = Tensor::FromValues<float>(DataType::kFloat32, {2, 0}, none);
  EXPECT_EQ(t.shape(), Shape({2, 0}));
  EXPECT_EQ(t.num_elements(), 0);
}

TEST(Tensor, FromStringsChecksTheCount) {
  absl::StatusOr<Tensor> t = Tensor::FromStrings({2}, {"ab", ""});
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->dtype(), DataType::kString);
  EXPECT_THAT(t->strings(), ::testing::ElementsAre("ab", ""));
  EXPECT_THAT(Tensor::FromStrings({3}, {"a", "b"}),
              StatusIs(kInvalid, AllOf(HasSubstr("2 strings"), HasSubstr("3 elements"))));
}

TEST(Tensor, CloneIsADeepCopy) {
  Tensor a = MakeTensor<int64_t>({2}, {7, 8});
  const Tensor b = a.Clone();
  a.mutable_bytes()[0] = 0;
  EXPECT_THAT(b.values<int64_t>(), ::testing::ElementsAre(7, 8));
  Tensor s = MakeStrings({2}, {"p", "q"});
  const Tensor t = s.Clone();
  *s.mutable_view().strings[0] = "changed";
  EXPECT_THAT(t.strings(), ::testing::ElementsAre("p", "q"));
  EXPECT_TRUE(IdenticalTensors(t.view(), t.Clone().view()));
}

TEST(Tensor, MoveKeepsStringViewsValid) {
  Tensor a = MakeStrings({3}, {"one", "two", "a string long enough to live on the heap"});
  const TensorView before = a.view();
  Tensor b = std::move(a);
  const TensorView after = b.view();
  ASSERT_EQ(after.strings.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(after.strings[i], before.strings[i]);  // same objects
    EXPECT_EQ(after.strings[i], &b.strings()[i]);
  }
  Tensor c;
  c = std::move(b);
  EXPECT_EQ(*c.view().strings[2], "a string long enough to live on the heap");
  EXPECT_EQ(c.view().strings[0], &c.strings()[0]);
}

TEST(Tensor, ViewsDescribeTheStorage) {
  Tensor t = MakeTensor<float>({3}, {1.5f, 2.5f, 3.5f});
  const TensorView v = t.view();
  EXPECT_EQ(v.dtype, DataType::kFloat32);
  EXPECT_EQ(v.rank(), 1);
  EXPECT_EQ(v.data.data(), t.bytes().data());
  EXPECT_EQ(v.data.size(), 12u);
  const MutableTensorView m = t.mutable_view();
  EXPECT_EQ(m.data.data(), t.bytes().data());
  EXPECT_TRUE(m.strings.empty());
}

}  // namespace
}  // namespace tensorcompute::core
