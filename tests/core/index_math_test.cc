// Tests of core/index_math.h, the arithmetic shared by the CPU and CUDA kernels, against
// brute force.

#include "core/index_math.h"

#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace tensorcompute::core {
namespace {

constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// NormalizeIndex's result, with -1 standing for "rejected" (and *out left unchanged).
int64_t Normalized(int64_t v, int64_t dim) {
  int64_t out = -1;
  const bool ok = NormalizeIndex(v, dim, &out);
  EXPECT_EQ(ok, out != -1) << "v=" << v << " dim=" << dim;
  return out;
}

TEST(NormalizeIndex, InRangeValuesMapToZeroThroughDimMinusOne) {
  EXPECT_EQ(Normalized(0, 5), 0);
  EXPECT_EQ(Normalized(4, 5), 4);
  EXPECT_EQ(Normalized(-1, 5), 4);
  EXPECT_EQ(Normalized(-5, 5), 0);
  EXPECT_EQ(Normalized(0, 1), 0);
  EXPECT_EQ(Normalized(-1, 1), 0);
}

TEST(NormalizeIndex, RejectsEverythingOutsideMinusDimToDim) {
  EXPECT_EQ(Normalized(5, 5), -1);   // dim
  EXPECT_EQ(Normalized(-6, 5), -1);  // -dim - 1
  EXPECT_EQ(Normalized(1, 1), -1);
  EXPECT_EQ(Normalized(-2, 1), -1);
  EXPECT_EQ(Normalized(kMax, 5), -1);
  EXPECT_EQ(Normalized(kMin, 5), -1);
}

TEST(NormalizeIndex, DimZeroAcceptsNothing) {
  for (int64_t v : {int64_t{0}, int64_t{-1}, int64_t{1}, kMin, kMax}) {
    EXPECT_EQ(Normalized(v, 0), -1) << v;
  }
}

TEST(NormalizeIndex, ExtremeDimensions) {
  EXPECT_EQ(Normalized(kMax - 1, kMax), kMax - 1);
  EXPECT_EQ(Normalized(kMax, kMax), -1);
  EXPECT_EQ(Normalized(-kMax, kMax), 0);
  EXPECT_EQ(Normalized(kMin, kMax), -1);  // kMin + kMax = -1: still below zero
  EXPECT_EQ(Normalized(-1, kMax), kMax - 1);
}

TEST(NormalizeIndex, LeavesOutputUnchangedOnRejection) {
  int64_t out = 1234;
  EXPECT_FALSE(NormalizeIndex(7, 3, &out));
  EXPECT_EQ(out, 1234);
  EXPECT_FALSE(NormalizeIndex(-4, 3, &out));
  EXPECT_EQ(out, 1234);
}

TEST(NormalizeIndex, MatchesBruteForceOnSmallRanges) {
  for (int64_t dim = 0; dim <= 6; ++dim) {
    for (int64_t v = -10; v <= 10; ++v) {
      const int64_t expected = (v >= 0 && v < dim) ? v : (v < 0 && v >= -dim) ? dim + v : -1;
      EXPECT_EQ(Normalized(v, dim), expected) << "v=" << v << " dim=" << dim;
    }
  }
}

TEST(DecomposeOutputRow, MatchesNestedLoops) {
  for (int64_t batch : {1, 2, 3}) {
    for (int64_t outer : {1, 2, 5}) {
      for (int64_t num_indices : {1, 3, 4}) {
        int64_t r = 0;
        for (int64_t b = 0; b < batch; ++b) {
          for (int64_t o = 0; o < outer; ++o) {
            for (int64_t n = 0; n < num_indices; ++n, ++r) {
              const RowSource s = DecomposeOutputRow(r, outer, num_indices);
              EXPECT_EQ(s.block, b * outer + o) << r;
              EXPECT_EQ(s.tuple, b * num_indices + n) << r;
            }
          }
        }
      }
    }
  }
}

TEST(ParamsSliceOffset, IsTheRowMajorOffsetOfARow) {
  // params viewed as [blocks, rows, slice]: element (block, row, 0).
  EXPECT_EQ(ParamsSliceOffset(0, 4, 0, 3), 0);
  EXPECT_EQ(ParamsSliceOffset(0, 4, 1, 3), 3);
  EXPECT_EQ(ParamsSliceOffset(2, 4, 3, 3), (2 * 4 + 3) * 3);
  EXPECT_EQ(ParamsSliceOffset(1, 1, 0, 1), 1);
}

TEST(AccumulateRow, FoldsATupleIntoItsRowMajorRow) {
  const std::vector<int64_t> dims = {3, 4, 2};
  int64_t expected = 0;
  for (int64_t i = 0; i < dims[0]; ++i) {
    for (int64_t j = 0; j < dims[1]; ++j) {
      for (int64_t k = 0; k < dims[2]; ++k, ++expected) {
        int64_t row = 0;
        row = AccumulateRow(row, dims[0], i);
        row = AccumulateRow(row, dims[1], j);
        row = AccumulateRow(row, dims[2], k);
        EXPECT_EQ(row, expected) << i << "," << j << "," << k;
      }
    }
  }
}

TEST(AccumulateRow, DepthOneGivesTheIndexItself) {
  for (int64_t c = 0; c < 7; ++c) EXPECT_EQ(AccumulateRow(0, 7, c), c);
}

}  // namespace
}  // namespace tensorcompute::core
