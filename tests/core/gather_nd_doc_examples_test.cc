// Every GatherNd example of the TensorFlow and ONNX docs
// (https://www.tensorflow.org/api_docs/python/tf/gather_nd,
// https://www.tensorflow.org/api_docs/python/tf/compat/v1/gather_nd and
// https://onnx.ai/onnx/operators/onnx__GatherND.html) as a test, checked through core::GatherNd
// and through the reference, with int32 and int64 indices.

#include <cstdint>
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
using ::tensorcompute::testing::ReferenceGatherNd;
using ::tensorcompute::testing::TensorDebugString;

// Runs the example with int32 and with int64 indices, through core and the reference.
void ExpectGatherNd(const Tensor& params, const Shape& indices_shape,
                    const std::vector<int64_t>& indices_values, int64_t batch_dims,
                    const Tensor& expected) {
  for (DataType index_dtype : {DataType::kInt32, DataType::kInt64}) {
    SCOPED_TRACE(DataTypeName(index_dtype));
    const Tensor indices = MakeIndices(index_dtype, indices_shape, indices_values);
    const absl::StatusOr<Tensor> got = GatherNd(params.view(), indices.view(), batch_dims);
    ASSERT_THAT(got, IsOk());
    EXPECT_TRUE(IdenticalTensors(got->view(), expected.view()))
        << "core: " << TensorDebugString(got->view())
        << "\nexpected: " << TensorDebugString(expected.view());
    const absl::StatusOr<Tensor> ref = ReferenceGatherNd(params.view(), indices.view(), batch_dims);
    ASSERT_THAT(ref, IsOk());
    EXPECT_TRUE(IdenticalTensors(ref->view(), expected.view()))
        << "reference: " << TensorDebugString(ref->view())
        << "\nexpected: " << TensorDebugString(expected.view());
  }
}

// [['a', 'b'], ['c', 'd']]
Tensor Abcd() { return MakeStrings({2, 2}, {"a", "b", "c", "d"}); }

// [[['a0', 'b0'], ['c0', 'd0']], [['a1', 'b1'], ['c1', 'd1']]]
Tensor Abcd01() { return MakeStrings({2, 2, 2}, {"a0", "b0", "c0", "d0", "a1", "b1", "c1", "d1"}); }

// ---- tf.gather_nd (TF 2) and tf.compat.v1.gather_nd ----

TEST(TfGatherNdDocs, SimpleIndexingIntoAMatrix) {
  ExpectGatherNd(Abcd(), {2, 2}, {0, 0, 1, 1}, 0, MakeStrings({2}, {"a", "d"}));
}

TEST(TfGatherNdDocs, SliceIndexingIntoAMatrix) {
  ExpectGatherNd(Abcd(), {2, 1}, {1, 0}, 0, MakeStrings({2, 2}, {"c", "d", "a", "b"}));
}

TEST(TfGatherNdDocs, IndexingIntoA3TensorDepth1) {
  ExpectGatherNd(Abcd01(), {1, 1}, {1}, 0, MakeStrings({1, 2, 2}, {"a1", "b1", "c1", "d1"}));
}

TEST(TfGatherNdDocs, IndexingIntoA3TensorDepth2) {
  ExpectGatherNd(Abcd01(), {2, 2}, {0, 1, 1, 0}, 0, MakeStrings({2, 2}, {"c0", "d0", "a1", "b1"}));
}

TEST(TfGatherNdDocs, IndexingIntoA3TensorDepth3) {
  ExpectGatherNd(Abcd01(), {2, 3}, {0, 0, 1, 1, 0, 1}, 0, MakeStrings({2}, {"b0", "b1"}));
}

TEST(TfGatherNdDocs, BatchedIndexingIntoAMatrix) {
  ExpectGatherNd(Abcd(), {2, 1, 2}, {0, 0, 0, 1}, 0, MakeStrings({2, 1}, {"a", "b"}));
}

TEST(TfGatherNdDocs, BatchedSliceIndexingIntoAMatrix) {
  ExpectGatherNd(Abcd(), {2, 1, 1}, {1, 0}, 0, MakeStrings({2, 1, 2}, {"c", "d", "a", "b"}));
}

TEST(TfGatherNdDocs, BatchedIndexingIntoA3TensorDepth1) {
  ExpectGatherNd(Abcd01(), {2, 1, 1}, {1, 0}, 0,
                 MakeStrings({2, 1, 2, 2}, {"a1", "b1", "c1", "d1", "a0", "b0", "c0", "d0"}));
}

TEST(TfGatherNdDocs, BatchedIndexingIntoA3TensorDepth2) {
  ExpectGatherNd(Abcd01(), {2, 2, 2}, {0, 1, 1, 0, 0, 0, 1, 1}, 0,
                 MakeStrings({2, 2, 2}, {"c0", "d0", "a1", "b1", "a0", "b0", "c1", "d1"}));
}

TEST(TfGatherNdDocs, BatchedIndexingIntoA3TensorDepth3) {
  ExpectGatherNd(Abcd01(), {2, 2, 3}, {0, 0, 1, 1, 0, 1, 0, 1, 1, 1, 1, 0}, 0,
                 MakeStrings({2, 2}, {"b0", "b1", "d0", "c1"}));
}

TEST(TfGatherNdDocs, BatchDims1RowPerBatch) {
  ExpectGatherNd(Abcd01(), {2, 1}, {1, 0}, 1, MakeStrings({2, 2}, {"c0", "d0", "a1", "b1"}));
}

TEST(TfGatherNdDocs, BatchDims1WithAnExtraIndexDimension) {
  ExpectGatherNd(Abcd01(), {2, 1, 1}, {1, 0}, 1, MakeStrings({2, 1, 2}, {"c0", "d0", "a1", "b1"}));
}

TEST(TfGatherNdDocs, BatchDims1Depth2) {
  ExpectGatherNd(Abcd01(), {2, 1, 2}, {1, 0, 0, 1}, 1, MakeStrings({2, 1}, {"c0", "b1"}));
}

TEST(TfCompatV1GatherNdDocs, GatheringSlicesCollectsRowsOfAMatrix) {
  ExpectGatherNd(MakeStrings({2, 3}, {"a", "b", "c", "d", "e", "f"}), {2, 1}, {1, 0}, 0,
                 MakeStrings({2, 3}, {"d", "e", "f", "a", "b", "c"}));
}

TEST(TfCompatV1GatherNdDocs, BatchLocationInTheIndexGivesShape5x3) {
  const Tensor zeros = MakeTensor<float>({5, 7, 3}, std::vector<float>(105, 0.0f));
  ExpectGatherNd(zeros, {5, 2}, {0, 1, 1, 0, 2, 4, 3, 2, 4, 1}, 0,
                 MakeTensor<float>({5, 3}, std::vector<float>(15, 0.0f)));
}

TEST(TfCompatV1GatherNdDocs, BatchDimsOmitsTheLocationAndGivesShape5x3) {
  const Tensor zeros = MakeTensor<float>({5, 7, 3}, std::vector<float>(105, 0.0f));
  ExpectGatherNd(zeros, {5, 1}, {1, 0, 4, 2, 1}, 1,
                 MakeTensor<float>({5, 3}, std::vector<float>(15, 0.0f)));
}

TEST(TfCompatV1GatherNdDocs, ZeroIndicesWithBatchDimsGiveShape5x3) {
  const Tensor zeros = MakeTensor<float>({5, 7, 3}, std::vector<float>(105, 0.0f));
  ExpectGatherNd(zeros, {5, 1}, std::vector<int64_t>(5, 0), 1,
                 MakeTensor<float>({5, 3}, std::vector<float>(15, 0.0f)));
}

TEST(TfCompatV1GatherNdDocs, BatchExamplesPickTheRightRowsOfNonzeroParams) {
  // The docs' shape-only examples again, with params[i, j, k] = 100 i + 10 j + k so that the
  // values show which rows were picked: both forms must pick params[i, row_i, :].
  std::vector<float> values;
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 7; ++j) {
      for (int k = 0; k < 3; ++k) values.push_back(100.0f * i + 10.0f * j + k);
    }
  }
  const Tensor params = MakeTensor<float>({5, 7, 3}, values);
  const std::vector<int64_t> rows = {1, 0, 4, 2, 1};
  std::vector<float> want;
  for (int i = 0; i < 5; ++i) {
    for (int k = 0; k < 3; ++k) want.push_back(100.0f * i + 10.0f * rows[i] + k);
  }
  const Tensor expected = MakeTensor<float>({5, 3}, want);
  ExpectGatherNd(params, {5, 2}, {0, 1, 1, 0, 2, 4, 3, 2, 4, 1}, 0, expected);
  ExpectGatherNd(params, {5, 1}, rows, 1, expected);
}

// ---- ONNX GatherND-13 ----

Tensor Onnx2x2() { return MakeTensor<int32_t>({2, 2}, {0, 1, 2, 3}); }
Tensor Onnx2x2x2() { return MakeTensor<int32_t>({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7}); }

TEST(OnnxGatherNdDocs, Example1ScalarsFromAMatrix) {
  ExpectGatherNd(Onnx2x2(), {2, 2}, {0, 0, 1, 1}, 0, MakeTensor<int32_t>({2}, {0, 3}));
}

TEST(OnnxGatherNdDocs, Example2RowsOfAMatrix) {
  ExpectGatherNd(Onnx2x2(), {2, 1}, {1, 0}, 0, MakeTensor<int32_t>({2, 2}, {2, 3, 0, 1}));
}

TEST(OnnxGatherNdDocs, Example3RowsOfA3Tensor) {
  ExpectGatherNd(Onnx2x2x2(), {2, 2}, {0, 1, 1, 0}, 0, MakeTensor<int32_t>({2, 2}, {2, 3, 4, 5}));
}

TEST(OnnxGatherNdDocs, Example4IndicesWithAnExtraDimension) {
  ExpectGatherNd(Onnx2x2x2(), {2, 1, 2}, {0, 1, 1, 0}, 0,
                 MakeTensor<int32_t>({2, 1, 2}, {2, 3, 4, 5}));
}

TEST(OnnxGatherNdDocs, Example5BatchDims1) {
  ExpectGatherNd(Onnx2x2x2(), {2, 1}, {1, 0}, 1, MakeTensor<int32_t>({2, 2}, {2, 3, 4, 5}));
}

TEST(OnnxGatherNdDocs, CodeExampleInt32) {
  ExpectGatherNd(Onnx2x2(), {2, 2}, {0, 0, 1, 1}, 0, MakeTensor<int32_t>({2}, {0, 3}));
}

TEST(OnnxGatherNdDocs, CodeExampleFloat32) {
  ExpectGatherNd(MakeTensor<float>({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7}), {2, 1, 2}, {0, 1, 1, 0}, 0,
                 MakeTensor<float>({2, 1, 2}, {2, 3, 4, 5}));
}

TEST(OnnxGatherNdDocs, CodeExampleInt32BatchDim1) {
  ExpectGatherNd(Onnx2x2x2(), {2, 1}, {1, 0}, 1, MakeTensor<int32_t>({2, 2}, {2, 3, 4, 5}));
}

TEST(OnnxGatherNdDocs, NegativeIndicesCountFromTheEnd) {
  // "within bounds [-s, s-1] along axis of size s": -1 is the last, -s the first.
  ExpectGatherNd(Onnx2x2(), {3, 2}, {-1, -2, -2, -1, 1, -2}, 0,
                 MakeTensor<int32_t>({3}, {2, 1, 2}));
  ExpectGatherNd(Onnx2x2x2(), {2, 1}, {-1, -2}, 1, MakeTensor<int32_t>({2, 2}, {2, 3, 4, 5}));
}

}  // namespace
}  // namespace tensorcompute::core
