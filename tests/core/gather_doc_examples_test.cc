// Every Gather example of the TensorFlow and ONNX docs
// (https://www.tensorflow.org/api_docs/python/tf/gather and
// https://onnx.ai/onnx/operators/onnx__Gather.html, Gather-13) as a test, checked through
// core::Gather and through the reference, with int32 and int64 indices.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/gather.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/reference_gather.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::core {
namespace {

using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::MakeIndices;
using ::tensorcompute::testing::MakeStrings;
using ::tensorcompute::testing::MakeTensor;
using ::tensorcompute::testing::ReferenceGather;
using ::tensorcompute::testing::TensorDebugString;

// Runs the example with int32 and with int64 indices, through core and the reference.
void ExpectGather(const Tensor& params, const Shape& indices_shape,
                  const std::vector<int64_t>& indices_values, std::optional<int64_t> axis,
                  int64_t batch_dims, const Tensor& expected) {
  for (DataType index_dtype : {DataType::kInt32, DataType::kInt64}) {
    SCOPED_TRACE(DataTypeName(index_dtype));
    const Tensor indices = MakeIndices(index_dtype, indices_shape, indices_values);
    const absl::StatusOr<Tensor> got = Gather(params.view(), indices.view(), axis, batch_dims);
    ASSERT_THAT(got, IsOk());
    EXPECT_TRUE(IdenticalTensors(got->view(), expected.view()))
        << "core: " << TensorDebugString(got->view())
        << "\nexpected: " << TensorDebugString(expected.view());
    const absl::StatusOr<Tensor> ref =
        ReferenceGather(params.view(), indices.view(), axis, batch_dims);
    ASSERT_THAT(ref, IsOk());
    EXPECT_TRUE(IdenticalTensors(ref->view(), expected.view()))
        << "reference: " << TensorDebugString(ref->view())
        << "\nexpected: " << TensorDebugString(expected.view());
  }
}

// ---- ONNX Gather-13 ----

TEST(OnnxGatherDocs, Example1Axis0) {
  const Tensor data = MakeTensor<float>({3, 2}, {1.0f, 1.2f, 2.3f, 3.4f, 4.5f, 5.7f});
  const Tensor expected =
      MakeTensor<float>({2, 2, 2}, {1.0f, 1.2f, 2.3f, 3.4f, 2.3f, 3.4f, 4.5f, 5.7f});
  ExpectGather(data, {2, 2}, {0, 1, 1, 2}, 0, 0, expected);
  ExpectGather(data, {2, 2}, {0, 1, 1, 2}, std::nullopt, 0, expected);  // default axis
}

TEST(OnnxGatherDocs, Example2Axis1) {
  const Tensor data =
      MakeTensor<float>({3, 3}, {1.0f, 1.2f, 1.9f, 2.3f, 3.4f, 3.9f, 4.5f, 5.7f, 5.9f});
  const Tensor expected = MakeTensor<float>({3, 1, 2}, {1.0f, 1.9f, 2.3f, 3.9f, 4.5f, 5.9f});
  ExpectGather(data, {1, 2}, {0, 2}, 1, 0, expected);
  ExpectGather(data, {1, 2}, {0, 2}, -1, 0, expected);  // the same axis counted from the end
}

TEST(OnnxGatherDocs, NegativeIndices) {
  std::vector<float> arange(10);
  for (int i = 0; i < 10; ++i) arange[i] = static_cast<float>(i);
  ExpectGather(MakeTensor<float>({10}, arange), {3}, {0, -9, -10}, 0, 0,
               MakeTensor<float>({3}, {0.0f, 1.0f, 0.0f}));
}

// ---- tf.gather ----

Tensor P0ToP5() { return MakeStrings({6}, {"p0", "p1", "p2", "p3", "p4", "p5"}); }

TEST(TfGatherDocs, ScalarIndexGivesAScalar) {
  ExpectGather(P0ToP5(), {}, {3}, std::nullopt, 0, MakeStrings({}, {"p3"}));
}

TEST(TfGatherDocs, VectorOfIndices) {
  ExpectGather(P0ToP5(), {2}, {3, 1}, std::nullopt, 0, MakeStrings({2}, {"p3", "p1"}));
}

Tensor Params4x3() {
  return MakeTensor<float>({4, 3}, {0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32});
}

TEST(TfGatherDocs, RowsOfAMatrix) {
  ExpectGather(Params4x3(), {2}, {3, 1}, std::nullopt, 0,
               MakeTensor<float>({2, 3}, {30, 31, 32, 10, 11, 12}));
}

TEST(TfGatherDocs, ColumnsOfAMatrixWithAxis1) {
  const Tensor expected = MakeTensor<float>({4, 2}, {2, 1, 12, 11, 22, 21, 32, 31});
  ExpectGather(Params4x3(), {2}, {2, 1}, 1, 0, expected);
  ExpectGather(Params4x3(), {2}, {2, 1}, -1, 0, expected);
}

TEST(TfGatherDocs, OutputShapeFormulaForA4dParamsAnd2dIndices) {
  // params.shape (5, 6, 7, 8), indices.shape (10, 11), axis 2 -> (5, 6, 10, 11, 8), and
  // output[a, b, i, j, c] = params[a, b, indices[i, j], c].
  ::tensorcompute::testing::Rng rng(20240601);
  const Tensor params =
      ::tensorcompute::testing::RandomTensor(DataType::kFloat32, {5, 6, 7, 8}, rng);
  for (DataType index_dtype : {DataType::kInt32, DataType::kInt64}) {
    const Tensor indices = ::tensorcompute::testing::RandomIndices(index_dtype, {10, 11}, {7}, rng);
    const absl::StatusOr<Tensor> got = Gather(params.view(), indices.view(), 2, 0);
    ASSERT_THAT(got, IsOk());
    EXPECT_EQ(got->shape(), Shape({5, 6, 10, 11, 8}));
    const absl::Span<const uint32_t> p = params.values<uint32_t>();  // compare bit patterns
    const absl::Span<const uint32_t> out = got->values<uint32_t>();
    int64_t o = 0;
    for (int a = 0; a < 5; ++a) {
      for (int b = 0; b < 6; ++b) {
        for (int i = 0; i < 10; ++i) {
          for (int j = 0; j < 11; ++j) {
            int64_t v = ::tensorcompute::testing::ReadIndexValue(indices.view(), i * 11 + j);
            if (v < 0) v += 7;
            for (int c = 0; c < 8; ++c, ++o) {
              ASSERT_EQ(out[o], p[((a * 6 + b) * 7 + v) * 8 + c]) << a << b << i << j << c;
            }
          }
        }
      }
    }
    const absl::StatusOr<Tensor> ref = ReferenceGather(params.view(), indices.view(), 2, 0);
    ASSERT_THAT(ref, IsOk());
    EXPECT_TRUE(IdenticalTensors(ref->view(), got->view()));
  }
}

TEST(TfGatherDocs, BatchDims1) {
  const Tensor params = MakeTensor<int32_t>({3, 5}, {0, 0, 1, 0, 2, 3, 0, 0, 0, 4, 0, 5, 0, 6, 0});
  const Tensor expected = MakeTensor<int32_t>({3, 2}, {1, 2, 3, 4, 5, 6});
  const std::vector<int64_t> indices = {2, 4, 0, 4, 1, 3};
  ExpectGather(params, {3, 2}, indices, 1, 1, expected);
  ExpectGather(params, {3, 2}, indices, std::nullopt, 1, expected);  // axis defaults to 1
  ExpectGather(params, {3, 2}, indices, 1, -1, expected);            // -1 counts from rank(indices)
  ExpectGather(params, {3, 2}, indices, -1, 1, expected);
}

TEST(TfGatherDocs, BatchDimsZeroOnTheSameDataGathersWholeRows) {
  // Without batch_dims, every row gets every index: output shape [3, 3, 2].
  const Tensor params = MakeTensor<int32_t>({3, 5}, {0, 0, 1, 0, 2, 3, 0, 0, 0, 4, 0, 5, 0, 6, 0});
  ExpectGather(params, {3, 2}, {2, 4, 0, 4, 1, 3}, 1, 0,
               MakeTensor<int32_t>({3, 3, 2}, {1, 2, 0, 2, 0, 0,  //
                                               0, 4, 3, 4, 0, 0,  //
                                               0, 0, 0, 0, 5, 6}));
}

}  // namespace
}  // namespace tensorcompute::core
