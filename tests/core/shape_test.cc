// Tests of core/shape.h: checked arithmetic and the text forms used in error messages.

#include "core/shape.h"

#include <cstdint>
#include <limits>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tensorcompute::core {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t k2To62 = int64_t{1} << 62;

TEST(CheckedMul, MultipliesOrReportsOverflow) {
  EXPECT_EQ(CheckedMul(0, kMax), 0);
  EXPECT_EQ(CheckedMul(1, kMax), kMax);
  EXPECT_EQ(CheckedMul(3, 7), 21);
  EXPECT_EQ(CheckedMul(int64_t{1} << 31, int64_t{1} << 31), int64_t{1} << 62);
  EXPECT_EQ(CheckedMul(2, k2To62), std::nullopt);  // 2^63
  EXPECT_EQ(CheckedMul(kMax, 2), std::nullopt);
  EXPECT_EQ(CheckedMul(int64_t{1} << 32, int64_t{1} << 32), std::nullopt);
}

TEST(CheckedNumElements, ScalarHasOneElement) { EXPECT_EQ(CheckedNumElements({}), 1); }

TEST(CheckedNumElements, MultipliesDimensions) {
  EXPECT_EQ(CheckedNumElements({2, 3, 4}), 24);
  EXPECT_EQ(CheckedNumElements({kMax}), kMax);
  EXPECT_EQ(CheckedNumElements({k2To62, 1, 1}), k2To62);
}

TEST(CheckedNumElements, ZeroDimensionGivesZeroElements) {
  EXPECT_EQ(CheckedNumElements({0}), 0);
  EXPECT_EQ(CheckedNumElements({3, 0, 5}), 0);
  EXPECT_EQ(CheckedNumElements({0, k2To62}), 0);  // nonzero part 2^62 fits
}

TEST(CheckedNumElements, RejectsNegativeDimensions) {
  EXPECT_EQ(CheckedNumElements({-1}), std::nullopt);
  EXPECT_EQ(CheckedNumElements({2, -3}), std::nullopt);
  EXPECT_EQ(CheckedNumElements({0, -1}), std::nullopt);
}

TEST(CheckedNumElements, RejectsOverflow) {
  EXPECT_EQ(CheckedNumElements({k2To62, 2}), std::nullopt);
  EXPECT_EQ(CheckedNumElements({int64_t{1} << 32, int64_t{1} << 32}), std::nullopt);
  EXPECT_EQ(CheckedNumElements({kMax, 2}), std::nullopt);
}

TEST(CheckedNumElements, RejectsOverflowOfNonzeroDimsEvenWithAZero) {
  // By design: every sub-range of an accepted shape must have a product that fits.
  EXPECT_EQ(CheckedNumElements({0, k2To62, 4}), std::nullopt);
  EXPECT_EQ(CheckedNumElements({k2To62, 4, 0}), std::nullopt);
}

TEST(Product, MultipliesASubRange) {
  const Shape s = {2, 3, 4, 5};
  EXPECT_EQ(Product(s, 0, 4), 120);
  EXPECT_EQ(Product(s, 1, 3), 12);
  EXPECT_EQ(Product(s, 2, 2), 1);  // empty range
  EXPECT_EQ(Product(s, 3, 4), 5);
}

TEST(ShapeToString, PrintsBracketedCommaList) {
  EXPECT_EQ(ShapeToString({}), "[]");
  EXPECT_EQ(ShapeToString({0}), "[0]");
  EXPECT_EQ(ShapeToString({2, 3, 4}), "[2,3,4]");
  EXPECT_EQ(ShapeToString({-1, kMax}), "[-1,9223372036854775807]");
}

TEST(FlatPositionToString, ScalarIsEmpty) { EXPECT_EQ(FlatPositionToString(0, {}), ""); }

TEST(FlatPositionToString, RowMajorMultiIndex) {
  EXPECT_EQ(FlatPositionToString(0, {5}), "[0]");
  EXPECT_EQ(FlatPositionToString(4, {5}), "[4]");
  EXPECT_EQ(FlatPositionToString(0, {2, 3}), "[0,0]");
  EXPECT_EQ(FlatPositionToString(2, {2, 3}), "[0,2]");
  EXPECT_EQ(FlatPositionToString(3, {2, 3}), "[1,0]");
  EXPECT_EQ(FlatPositionToString(5, {2, 3}), "[1,2]");
  EXPECT_EQ(FlatPositionToString(23, {2, 3, 4}), "[1,2,3]");
  EXPECT_EQ(FlatPositionToString(13, {2, 3, 4}), "[1,0,1]");
  EXPECT_EQ(FlatPositionToString(1, {1, 1, 2, 1}), "[0,0,1,0]");
}

TEST(FlatPositionToString, EveryPositionOfAShapeIsDistinct) {
  const Shape s = {3, 1, 4, 2};
  std::set<std::string> seen;
  for (int64_t p = 0; p < 24; ++p) seen.insert(FlatPositionToString(p, s));
  EXPECT_EQ(seen.size(), 24u);
}

}  // namespace
}  // namespace tensorcompute::core
