// Compact tables (core/table_storage.h, core/compact_row.h): the conversions against a plain
// reference of the formulas written here, byte for byte (the NumPy reference of the same
// formulas checks them end to end: tests/client/compact_tables_test.py), the encoder fed in
// pieces, the layouts and their errors, and every lookup on a compact table equal to the same
// lookup on the float32 table its stored values mean.

#include "core/table_storage.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/compact_row.h"
#include "core/embedding_bag.h"
#include "core/embedding_bag_kernels.h"
#include "core/embedding_bag_simd.h"
#include "core/gather.h"
#include "core/half_float.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "tests/testing/random_embedding_bag.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/status_matchers.h"

// Abseil 20220623 has no status macros for tests; these read as the later ones do.
#define ASSERT_OK(expr) ASSERT_THAT((expr), ::tensorcompute::testing::IsOk())
#define EXPECT_OK(expr) EXPECT_THAT((expr), ::tensorcompute::testing::IsOk())

namespace tensorcompute::core {
namespace {

using ::testing::HasSubstr;
using testing::Rng;
using testing::UniformInt;

constexpr float kMax = std::numeric_limits<float>::max();
constexpr float kInf = std::numeric_limits<float>::infinity();

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// The reference of INT8_ROWWISE for one row, written from the formula: bias = the first
// minimum, scale = range / 255, code = lrintf((x - bias) * (255 / (range + 1e-8f))).
std::vector<uint8_t> ReferenceRowwise8(const std::vector<float>& row) {
  const float bias = *std::min_element(row.begin(), row.end());
  const float range = *std::max_element(row.begin(), row.end()) - bias;
  const float scale = range / 255.0f;
  const float inverse = 255.0f / (range + 1e-8f);
  std::vector<uint8_t> out(row.size() + 8);
  for (size_t d = 0; d < row.size(); ++d) {
    const float shifted = row[d] - bias;
    const float scaled = shifted * inverse;
    out[d] = static_cast<uint8_t>(std::lrintf(scaled));
  }
  std::memcpy(out.data() + row.size(), &scale, 4);
  std::memcpy(out.data() + row.size() + 4, &bias, 4);
  return out;
}

// The float32 value a stored element means (the reference of the lookups' reads).
std::vector<float> ReferenceDequantized(TableEncoding encoding, const uint8_t* row, int64_t dim) {
  std::vector<float> out(static_cast<size_t>(dim));
  for (int64_t d = 0; d < dim; ++d) {
    if (encoding == TableEncoding::kFloat16) {
      uint16_t h;
      std::memcpy(&h, row + 2 * d, 2);
      out[d] = HalfToFloat(h);
    } else {
      float scale, bias;
      std::memcpy(&scale, row + dim, 4);
      std::memcpy(&bias, row + dim + 4, 4);
      const float product = static_cast<float>(row[d]) * scale;
      out[d] = product + bias;
    }
  }
  return out;
}

// Random finite rows with what the issue names: constant rows, negative zeros, float32's
// extremes (one sign per row, so a row's width stays finite), tiny and huge spreads.
std::vector<float> RandomRow(int64_t dim, Rng& rng) {
  std::vector<float> row(static_cast<size_t>(dim));
  const int64_t kind = UniformInt(rng, 0, 9);
  const float c = static_cast<float>(UniformInt(rng, -1000, 1000)) / 7.0f;
  for (int64_t d = 0; d < dim; ++d) {
    float v;
    switch (kind) {
      case 0:  // constant
        v = c;
        break;
      case 1:  // zeros of both signs, and small values
        v = testing::Chance(rng, 0.5) ? (testing::Chance(rng, 0.5) ? -0.0f : 0.0f)
                                      : static_cast<float>(UniformInt(rng, -3, 3)) * 1e-30f;
        break;
      case 2:  // float32's largest, positive
        v = testing::Chance(rng, 0.3) ? kMax : static_cast<float>(UniformInt(rng, 0, 1000));
        break;
      case 3:  // and negative
        v = testing::Chance(rng, 0.3) ? -kMax : static_cast<float>(UniformInt(rng, -1000, 0));
        break;
      default:
        v = static_cast<float>(UniformInt(rng, -1 << 20, 1 << 20)) / 4096.0f *
            (kind == 4 ? 1e-6f : 1.0f);
    }
    row[d] = v;
  }
  return row;
}

TEST(TableStorageKinds, NamesParseAndLayouts) {
  EXPECT_EQ(TableStorageName(TableStorage::kInt8RowwisePrequantized), "INT8_ROWWISE_PREQUANTIZED");
  EXPECT_EQ(TableStorageFlagName(TableStorage::kInt8Rowwise), "int8-rowwise");
  EXPECT_EQ(ParseTableStorage("int8-rowwise"), TableStorage::kInt8Rowwise);
  EXPECT_EQ(ParseTableStorage("FLOAT16"), TableStorage::kFloat16);
  EXPECT_EQ(ParseTableStorage("as-is"), TableStorage::kAsIs);
  EXPECT_EQ(ParseTableStorage("int4"), std::nullopt);
  EXPECT_EQ(TableStorageChoices(), "as-is, float16, int8-rowwise, int8-rowwise-prequantized");

  TableLayout f16 = *PlanTableLayout("t", TableStorage::kFloat16, DataType::kFloat32, {5, 3});
  EXPECT_EQ(f16.stored_dtype, DataType::kFloat16);
  EXPECT_EQ(f16.stored_shape, (Shape{5, 3}));
  EXPECT_EQ(f16.sent_bytes, 60);
  EXPECT_EQ(f16.stored_bytes, 30);
  EXPECT_TRUE(f16.encodes());
  TableLayout q = *PlanTableLayout("t", TableStorage::kInt8Rowwise, DataType::kFloat32, {5, 64});
  EXPECT_EQ(q.stored_dtype, DataType::kUint8);
  EXPECT_EQ(q.stored_shape, (Shape{5, 72}));
  EXPECT_EQ(q.stored_bytes, 5 * 72);
  EXPECT_EQ(q.logical_shape, (Shape{5, 64}));
  TableLayout pre =
      *PlanTableLayout("t", TableStorage::kInt8RowwisePrequantized, DataType::kUint8, {5, 72});
  EXPECT_FALSE(pre.encodes());
  EXPECT_EQ(pre.logical_dtype, DataType::kFloat32);
  EXPECT_EQ(pre.logical_shape, (Shape{5, 64}));
  EXPECT_EQ(pre.stored_bytes, 5 * 72);
  TableLayout as_is = *PlanTableLayout("t", TableStorage::kAsIs, DataType::kInt32, {4});
  EXPECT_EQ(as_is.stored_shape, (Shape{4}));
  EXPECT_EQ(LogicalShape(TableStorage::kInt8Rowwise, {5, 72}), (Shape{5, 64}));
  EXPECT_EQ(LogicalDtype(TableStorage::kFloat16, DataType::kFloat16), DataType::kFloat32);
}

TEST(TableStorageKinds, LayoutErrors) {
  EXPECT_THAT(PlanTableLayout("t", TableStorage::kInt8Rowwise, DataType::kInt32, {4}),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                "tensor 't': INT8_ROWWISE storage takes a float32 table "
                                "[rows, dim], got int32 [4]"));
  EXPECT_THAT(PlanTableLayout("t", TableStorage::kFloat16, DataType::kFloat64, {4, 2}),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("FLOAT16 storage")));
  EXPECT_THAT(PlanTableLayout("t", TableStorage::kInt8Rowwise, DataType::kFloat32, {4, 0}),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("needs at least one column")));
  EXPECT_THAT(
      PlanTableLayout("t", TableStorage::kInt8RowwisePrequantized, DataType::kUint8, {4, 8}),
      testing::StatusIs(absl::StatusCode::kInvalidArgument,
                        HasSubstr("takes uint8 [rows, dim + 8]")));
  EXPECT_THAT(
      PlanTableLayout("t", TableStorage::kInt8RowwisePrequantized, DataType::kFloat32, {4, 16}),
      testing::StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("got float32 [4,16]")));
  EXPECT_THAT(PlanTableLayout("t", static_cast<TableStorage>(9), DataType::kFloat32, {4, 2}),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("unknown storage 9; expected AS_IS (0)")));
  // rows x (dim + 8) past int64 where rows x dim x 4 is not.
  EXPECT_THAT(
      PlanTableLayout("t", TableStorage::kInt8Rowwise, DataType::kFloat32, {int64_t{1} << 60, 1}),
      testing::StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overflows")));
}

TEST(TableStorageFloat16, RoundsToNearestEvenAndRefusesOverflow) {
  // 1 + 2^-11 is halfway between 1 and the next float16: the tie goes to even (1); 1 + 3 *
  // 2^-11 goes up. 65504 is the largest float16; 65519.99 still rounds to it; 65520 would be
  // infinity. -0, infinities and NaN stay.
  const std::vector<float> row = {
      1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65504.0f, -65519.99f, -0.0f, kInf,
      -kInf,           std::nanf("")};
  std::vector<uint8_t> out(row.size() * 2);
  ASSERT_OK(EncodeFloat16Row("t", 0, row.data(), static_cast<int64_t>(row.size()), out.data()));
  std::vector<uint16_t> h(row.size());
  std::memcpy(h.data(), out.data(), out.size());
  EXPECT_EQ(h[0], 0x3c00);
  EXPECT_EQ(h[1], 0x3c02);
  EXPECT_EQ(h[2], 0x7bff);
  EXPECT_EQ(h[3], 0xfbff);
  EXPECT_EQ(h[4], 0x8000);
  EXPECT_EQ(h[5], 0x7c00);
  EXPECT_EQ(h[6], 0xfc00);
  EXPECT_EQ(h[7] & 0x7e00, 0x7e00);
  for (float big : {65520.0f, -70000.0f, kMax}) {
    const std::vector<float> bad = {0.0f, big};
    EXPECT_THAT(EncodeFloat16Row("t", 3, bad.data(), 2, out.data()),
                testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("tensor 't': element [3, 1] = ")));
  }
  const std::vector<float> bad = {70000.0f};
  EXPECT_THAT(EncodeFloat16Row("t", 0, bad.data(), 1, out.data()),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                "tensor 't': element [0, 0] = 70000 is beyond float16's range "
                                "(largest finite 65504); FLOAT16 storage would make it infinite"));
}

TEST(TableStorageRowwise8, MatchesTheFormulaOnRandomRowsOfEveryWidth) {
  Rng rng(2401);
  for (int64_t dim : {1, 2, 3, 7, 8, 31, 64, 100, 255, 256, 1000, 1024}) {
    for (int rep = 0; rep < 30; ++rep) {
      const std::vector<float> row = RandomRow(dim, rng);
      std::vector<uint8_t> out(static_cast<size_t>(dim) + 8);
      ASSERT_OK(EncodeRowwise8Row("t", 0, row.data(), dim, out.data()));
      ASSERT_EQ(out, ReferenceRowwise8(row)) << "dim " << dim << " rep " << rep;
    }
  }
}

TEST(TableStorageRowwise8, ConstantRowsAndSignedZeros) {
  // max = min: scale 0, every code 0, and each value reads back as the bias exactly.
  const std::vector<float> constant(5, -3.25f);
  std::vector<uint8_t> out(13);
  ASSERT_OK(EncodeRowwise8Row("t", 0, constant.data(), 5, out.data()));
  for (int d = 0; d < 5; ++d) EXPECT_EQ(out[d], 0);
  for (float v : ReferenceDequantized(TableEncoding::kRowwise8, out.data(), 5)) {
    EXPECT_EQ(v, -3.25f);
  }
  // The bias is the first minimum in row order: -0 before +0 keeps -0, and the reverse +0.
  const std::vector<float> zeros = {-0.0f, 0.0f, 0.0f};
  ASSERT_OK(EncodeRowwise8Row("t", 0, zeros.data(), 3, out.data()));
  float bias;
  std::memcpy(&bias, out.data() + 3 + 4, 4);
  EXPECT_EQ(Bits(bias), 0x80000000u);
  const std::vector<float> zeros2 = {0.0f, -0.0f};
  ASSERT_OK(EncodeRowwise8Row("t", 0, zeros2.data(), 2, out.data()));
  std::memcpy(&bias, out.data() + 2 + 4, 4);
  EXPECT_EQ(Bits(bias), 0u);
}

TEST(TableStorageRowwise8, TiesRoundToEven) {
  // Width 255: 1e-8 is lost in 255 + 1e-8f, so the inverse scale is exactly 1 and x - min is
  // the code before rounding: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, 254.5 -> 254 (lrintf, not
  // round-half-up).
  const std::vector<float> row = {0.0f, 0.5f, 1.5f, 2.5f, 254.5f, 255.0f};
  std::vector<uint8_t> out(row.size() + 8);
  ASSERT_OK(EncodeRowwise8Row("t", 0, row.data(), 6, out.data()));
  EXPECT_THAT(std::vector<uint8_t>(out.begin(), out.begin() + 6),
              ::testing::ElementsAre(0, 0, 2, 2, 254, 255));
  EXPECT_EQ(out, ReferenceRowwise8(row));
}

TEST(TableStorageRowwise8, RefusesWhatItCannotQuantize) {
  std::vector<uint8_t> out(16);
  const std::vector<float> nan_row = {1.0f, std::nanf(""), 2.0f};
  EXPECT_THAT(EncodeRowwise8Row("t", 4, nan_row.data(), 3, out.data()),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                "tensor 't': element [4, 1] = nan is not finite; INT8_ROWWISE "
                                "storage quantizes finite values only"));
  const std::vector<float> inf_row = {-kInf};
  EXPECT_THAT(EncodeRowwise8Row("t", 0, inf_row.data(), 1, out.data()),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("= -inf")));
  const std::vector<float> wide = {-kMax, 0.0f, kMax};
  EXPECT_THAT(EncodeRowwise8Row("t", 2, wide.data(), 3, out.data()),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("tensor 't': row 2 spans [")));
}

// A random float32 table [rows, dim] of RandomRow rows.
Tensor RandomTable(int64_t rows, int64_t dim, Rng& rng, bool float16_range) {
  Tensor t = *Tensor::Allocate(DataType::kFloat32, {rows, dim});
  auto* p = reinterpret_cast<float*>(t.mutable_bytes().data());
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> row = RandomRow(dim, rng);
    for (float& v : row) {
      if (float16_range && std::fabs(v) > 60000.0f) v = std::copysign(60000.0f, v);
    }
    std::copy(row.begin(), row.end(), p + r * dim);
  }
  return t;
}

// `table` in its stored form, fed to the encoder in random pieces.
Tensor Encode(const Tensor& table, TableStorage storage, Rng& rng) {
  const TableLayout layout = *PlanTableLayout("t", storage, DataType::kFloat32, table.shape());
  Tensor stored = *Tensor::Allocate(layout.stored_dtype, layout.stored_shape);
  TableEncoder encoder("t", layout, stored.mutable_bytes().data());
  absl::Span<const uint8_t> bytes = table.view().data;
  while (!bytes.empty()) {
    const size_t n = std::min<size_t>(bytes.size(), UniformInt(rng, 0, 700));
    EXPECT_OK(encoder.Append(bytes.subspan(0, n)));
    bytes.remove_prefix(n);
  }
  return stored;
}

// Prequantized rows are stored as sent, so their scale and bias are checked: a NaN or an
// infinity would dequantize to NaNs whose bits differ between a CPU and a GPU.
TEST(TableStorageRowwise8, PrequantizedRowsNeedAFiniteScaleAndBias) {
  constexpr int64_t kRows = 4, kDim = 3, kRowBytes = kDim + kRowwise8Trailer;
  std::vector<uint8_t> bytes(kRows * kRowBytes, 7);
  auto set_trailer = [&bytes](int64_t row, float scale, float bias) {
    std::memcpy(bytes.data() + row * kRowBytes + kDim, &scale, 4);
    std::memcpy(bytes.data() + row * kRowBytes + kDim + 4, &bias, 4);
  };
  for (int64_t r = 0; r < kRows; ++r) set_trailer(r, 0.5f, -1.0f);
  core::TensorView view;
  view.dtype = DataType::kUint8;
  view.shape = {kRows, kRowBytes};
  view.data = absl::MakeConstSpan(bytes);
  EXPECT_OK(CheckStoredRows("q", TableStorage::kInt8RowwisePrequantized, view));
  set_trailer(2, std::numeric_limits<float>::quiet_NaN(), 0.0f);
  EXPECT_THAT(
      CheckStoredRows("q", TableStorage::kInt8RowwisePrequantized, view),
      testing::StatusIs(absl::StatusCode::kInvalidArgument,
                        HasSubstr("tensor 'q': row 2 has scale nan and bias 0; "
                                  "INT8_ROWWISE_PREQUANTIZED rows need a finite scale and bias")));
  set_trailer(2, 0.5f, 0.0f);
  set_trailer(3, 1.0f, -std::numeric_limits<float>::infinity());
  EXPECT_THAT(CheckStoredRows("q", TableStorage::kInt8RowwisePrequantized, view),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("row 3 has scale 1 and bias -inf")));
  // The other kinds were checked as they were converted (or hold anything, as sent).
  EXPECT_OK(CheckStoredRows("q", TableStorage::kAsIs, view));
}

TEST(TableEncoder, PiecesOfAnySizeGiveTheRowsEncodedWhole) {
  Rng rng(2402);
  for (TableStorage storage : {TableStorage::kFloat16, TableStorage::kInt8Rowwise}) {
    for (int64_t dim : {1, 3, 16, 100}) {
      const Tensor table = RandomTable(17, dim, rng, true);
      const Tensor stored = Encode(table, storage, rng);
      const int64_t row_bytes = StoredRowBytes(EncodingOf(storage), dim, 0);
      for (int64_t r = 0; r < 17; ++r) {
        std::vector<uint8_t> want(static_cast<size_t>(row_bytes));
        const auto* row = reinterpret_cast<const float*>(table.view().data.data()) + r * dim;
        if (storage == TableStorage::kFloat16) {
          ASSERT_OK(EncodeFloat16Row("t", r, row, dim, want.data()));
        } else {
          ASSERT_OK(EncodeRowwise8Row("t", r, row, dim, want.data()));
        }
        ASSERT_EQ(0,
                  std::memcmp(want.data(), stored.view().data.data() + r * row_bytes, want.size()))
            << TableStorageName(storage) << " dim " << dim << " row " << r;
      }
    }
  }
}

TEST(TableEncoder, NamesTheFirstBadElementAcrossPieces) {
  const TableLayout layout =
      *PlanTableLayout("emb", TableStorage::kFloat16, DataType::kFloat32, {3, 2});
  std::vector<uint8_t> stored(layout.stored_bytes);
  TableEncoder encoder("emb", layout, stored.data());
  const std::vector<float> values = {1, 2, 3, 1e6f, 5, 6};
  const auto* bytes = reinterpret_cast<const uint8_t*>(values.data());
  ASSERT_OK(encoder.Append({bytes, 10}));  // row 0 and half of row 1
  EXPECT_THAT(encoder.Append({bytes + 10, 14}),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("tensor 'emb': element [1, 1] = 1e+06")));
}

// The float32 table that a stored table means, row by row.
Tensor Dequantized(const Tensor& stored, TableEncoding encoding) {
  const int64_t rows = stored.shape()[0];
  const int64_t dim =
      encoding == TableEncoding::kRowwise8 ? stored.shape()[1] - 8 : stored.shape()[1];
  const int64_t row_bytes = StoredRowBytes(encoding, dim, 0);
  Tensor out = *Tensor::Allocate(DataType::kFloat32, {rows, dim});
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> row =
        ReferenceDequantized(encoding, stored.view().data.data() + r * row_bytes, dim);
    std::memcpy(out.mutable_bytes().data() + r * dim * 4, row.data(), dim * 4);
  }
  return out;
}

std::string Hex(const Tensor& t) {
  return std::string(reinterpret_cast<const char*>(t.view().data.data()), t.view().data.size());
}

TEST(CompactLookups, EmbeddingBagEqualsTheDequantizedFloat32Table) {
  Rng rng(2403);
  ThreadPool pool(2);
  for (TableStorage storage : {TableStorage::kFloat16, TableStorage::kInt8Rowwise}) {
    for (int64_t dim : {1, 5, 8, 64, 130}) {
      const Tensor table = RandomTable(UniformInt(rng, 1, 50), dim, rng, true);
      const Tensor stored = Encode(table, storage, rng);
      const Tensor meaning = Dequantized(stored, EncodingOf(storage));
      for (EmbeddingBagMode mode : {EmbeddingBagMode::kSum, EmbeddingBagMode::kMean,
                                    EmbeddingBagMode::kMax, EmbeddingBagMode::kSqrtn}) {
        for (bool weighted : {false, true}) {
          if (weighted && mode == EmbeddingBagMode::kMax) continue;
          for (testing::BagForm form :
               {testing::BagForm::kOffsets, testing::BagForm::kIncludeLastOffset,
                testing::BagForm::kFixed}) {
            testing::RandomBagOptions o;
            o.mode = mode;
            o.weighted = weighted;
            o.form = form;
            o.bags = UniformInt(rng, 0, 40);
            o.max_bag_size = 9;
            o.params = &meaning;
            const testing::EmbeddingBagCase c = testing::RandomEmbeddingBagCase(o, rng);
            const Tensor want = *c.Expected();
            EmbeddingBagOptions options = c.options;
            options.params_encoding = EncodingOf(storage);
            const TensorView offsets = c.offsets_view();
            const TensorView weights = c.weights_view();
            for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
              absl::StatusOr<Tensor> got =
                  EmbeddingBag(stored.view(), c.indices.view(), c.offsets ? &offsets : nullptr,
                               c.weights ? &weights : nullptr, options, p);
              ASSERT_OK(got.status()) << c.DebugString();
              ASSERT_EQ(got->dtype(), DataType::kFloat32);
              ASSERT_EQ(got->shape(), want.shape());
              ASSERT_EQ(Hex(*got), Hex(want))
                  << TableStorageName(storage) << " " << c.DebugString();
            }
          }
        }
      }
    }
  }
}

TEST(CompactLookups, GatherReadsRowsExactlyAsStored) {
  Rng rng(2404);
  for (TableStorage storage : {TableStorage::kFloat16, TableStorage::kInt8Rowwise}) {
    for (int64_t dim : {1, 3, 64, 200}) {
      const int64_t rows = UniformInt(rng, 1, 30);
      Tensor table = RandomTable(rows, dim, rng, true);
      if (storage == TableStorage::kFloat16) {  // NaN, -0 and infinities travel as stored
        auto* p = reinterpret_cast<float*>(table.mutable_bytes().data());
        p[0] = -0.0f;
        p[dim * rows - 1] = std::nanf("");
        if (dim * rows > 2) p[1] = -kInf;
      }
      const Tensor stored = Encode(table, storage, rng);
      const Tensor meaning = Dequantized(stored, EncodingOf(storage));
      for (int rank : {0, 1, 2, 3}) {
        const Shape shape = testing::RandomShape(rank, rng, 5);
        const DataType index_dtype =
            testing::Chance(rng, 0.5) ? DataType::kInt32 : DataType::kInt64;
        const Tensor indices = testing::RandomIndices(index_dtype, shape, {rows}, rng);
        const Tensor want = *Gather(meaning.view(), indices.view(), 0, 0);
        for (std::optional<int64_t> axis :
             {std::optional<int64_t>(), std::optional<int64_t>(0), std::optional<int64_t>(-2)}) {
          absl::StatusOr<EmbeddingBagPlan> plan =
              PlanUnpooledGather(stored.view(), EncodingOf(storage), indices.view(), axis, 0);
          ASSERT_OK(plan.status());
          EXPECT_EQ(plan->output_shape, want.shape());
          Tensor got = *Tensor::Allocate(DataType::kFloat32, plan->output_shape);
          ASSERT_OK(ExecuteEmbeddingBag(*plan, stored.view(), indices.view(), nullptr, nullptr,
                                        got.mutable_view()));
          ASSERT_EQ(Hex(got), Hex(want)) << TableStorageName(storage) << " dim " << dim;
        }
      }
    }
  }
}

TEST(CompactLookups, GatherErrors) {
  Rng rng(2405);
  const Tensor table = RandomTable(4, 3, rng, true);
  const Tensor stored = Encode(table, TableStorage::kInt8Rowwise, rng);
  const Tensor indices = testing::MakeIndices(DataType::kInt64, {2, 2}, {0, 1, 3, -5});
  EXPECT_THAT(PlanUnpooledGather(stored.view(), TableEncoding::kRowwise8, indices.view(), 1, 0),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                "Gather on a compact table reads whole rows: axis must be 0 (or "
                                "-2), got axis 1"));
  EXPECT_THAT(PlanUnpooledGather(stored.view(), TableEncoding::kRowwise8, indices.view(), 0, 1),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("batch_dims must be 0, got 1")));
  EXPECT_THAT(PlanUnpooledGather(table.view(), TableEncoding::kRowwise8, indices.view(), 0, 0),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("must be uint8 [rows, dim + 8]")));
  const Tensor floats = testing::MakeTensor<float>({1}, {0});
  EXPECT_THAT(PlanUnpooledGather(stored.view(), TableEncoding::kRowwise8, floats.view(), 0, 0),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                "indices must be int32 or int64, got float32"));
  PlanOptions small;
  small.max_output_bytes = 47;  // 4 rows of 3 float32 = 48 bytes
  EXPECT_THAT(
      PlanUnpooledGather(stored.view(), TableEncoding::kRowwise8, indices.view(), 0, 0, small),
      testing::StatusIs(absl::StatusCode::kResourceExhausted));
  // A bad index is named as Gather names it, by its position in indices' own shape.
  EmbeddingBagPlan plan =
      *PlanUnpooledGather(stored.view(), TableEncoding::kRowwise8, indices.view(), 0, 0);
  Tensor out = *Tensor::Allocate(DataType::kFloat32, plan.output_shape);
  EXPECT_THAT(
      ExecuteEmbeddingBag(plan, stored.view(), indices.view(), nullptr, nullptr,
                          out.mutable_view()),
      testing::StatusIs(absl::StatusCode::kInvalidArgument, "indices[1,1] = -5 is not in [-4, 4)"));
  EXPECT_THAT(
      Gather(table.view(), indices.view(), 0, 0),
      testing::StatusIs(absl::StatusCode::kInvalidArgument, "indices[1,1] = -5 is not in [-4, 4)"));
}

TEST(CompactLookups, EmbeddingBagWeightsAreFloat32AndParamsMustBeStored) {
  Rng rng(2406);
  const Tensor table = RandomTable(4, 3, rng, true);
  const Tensor stored = Encode(table, TableStorage::kFloat16, rng);
  const Tensor indices = testing::MakeIndices(DataType::kInt64, {2, 2}, {0, 1, 3, 2});
  const std::vector<uint8_t> one_half_zeros = {0x00, 0x3c, 0, 0, 0, 0, 0, 0};
  const Tensor half_weights = *Tensor::FromBytes(DataType::kFloat16, {2, 2}, one_half_zeros);
  const TensorView hw = half_weights.view();
  EmbeddingBagOptions options;
  options.params_encoding = TableEncoding::kFloat16;
  EXPECT_THAT(PlanEmbeddingBag(stored.view(), indices.view(), nullptr, &hw, options),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                "per_sample_weights must be float32 (the params' dtype), got "
                                "float16"));
  EXPECT_THAT(PlanEmbeddingBag(table.view(), indices.view(), nullptr, nullptr, options),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("a float16-encoded table's params must be float16")));
  const EmbeddingBagPlan plan =
      *PlanEmbeddingBag(stored.view(), indices.view(), nullptr, nullptr, options);
  EXPECT_EQ(plan.dtype, DataType::kFloat32);
  EXPECT_EQ(plan.row_bytes, 6);
  EXPECT_EQ(plan.output_bytes, 2 * 3 * 4);
  EXPECT_EQ(plan.work_bytes, 4 * 6 + 2 * 12);
}

// The vector kernel (core/embedding_bag_simd.h) reads compact rows as the generic one does:
// every mode, weights and gathers, at the widths it serves (1-8 registers in one pass, wider
// rows in several) and the first it does not, byte for byte.
TEST(CompactLookups, VectorKernelEqualsTheGenericOne) {
  Rng rng(2408);
  for (TableStorage storage : {TableStorage::kFloat16, TableStorage::kInt8Rowwise}) {
    for (int64_t dim : {8, 16, 24, 32, 64, 72, 136, 256, 1024, 1032}) {
      Tensor table = RandomTable(UniformInt(rng, 1, 40), dim, rng, true);
      const Tensor stored = Encode(table, storage, rng);
      const TableEncoding encoding = EncodingOf(storage);
      const Tensor meaning = Dequantized(stored, encoding);
      for (int mode = 0; mode < 5; ++mode) {  // 4: an unpooled gather
        for (bool weighted : {false, true}) {
          if (weighted && mode >= 2 && mode != 3) continue;
          testing::RandomBagOptions o;
          o.mode = static_cast<EmbeddingBagMode>(mode == 4 ? 0 : mode);
          o.weighted = weighted && mode != 4;
          o.form = mode == 4 ? testing::BagForm::kFixed : testing::BagForm::kOffsets;
          o.bags = UniformInt(rng, 1, 30);
          o.params = &meaning;
          const testing::EmbeddingBagCase c = testing::RandomEmbeddingBagCase(o, rng);
          EmbeddingBagOptions options = c.options;
          options.params_encoding = encoding;
          const TensorView offsets = c.offsets_view(), weights = c.weights_view();
          const Tensor flat = *Tensor::FromBytes(c.indices.dtype(), {c.indices.num_elements()},
                                                 c.indices.view().data);
          const EmbeddingBagPlan plan =
              mode == 4 ? *PlanUnpooledGather(stored.view(), encoding, flat.view(), 0, 0)
                        : *PlanEmbeddingBag(stored.view(), c.indices.view(),
                                            c.offsets ? &offsets : nullptr,
                                            c.weights ? &weights : nullptr, options);
          BagViews views;
          views.params = stored.view().data.data();
          views.indices = (mode == 4 ? flat : c.indices).view().data.data();
          if (!plan.fixed_bags()) {
            views.offsets = offsets.data.data();
            views.num_offsets = offsets.shape[0];
          }
          if (plan.weighted()) views.weights = weights.data.data();
          Tensor generic = *Tensor::Allocate(DataType::kFloat32, plan.output_shape);
          Tensor best = *Tensor::Allocate(DataType::kFloat32, plan.output_shape);
          views.output = generic.mutable_bytes().data();
          ASSERT_EQ(ReduceBags(plan, views, 0, plan.bags, false, BagKernel::kGeneric), -1);
          views.output = best.mutable_bytes().data();
          ASSERT_EQ(ReduceBags(plan, views, 0, plan.bags, false, BagKernel::kBest), -1);
          ASSERT_EQ(Hex(best), Hex(generic))
              << TableStorageName(storage) << " dim " << dim << " mode " << mode
              << (BagVectorKernelServes(plan) ? " (vector)" : " (generic twice)");
        }
      }
    }
  }
}

TEST(CompactLookups, GroupOfGathersAndBagsOnOneTableEqualsEachAlone) {
  Rng rng(2407);
  ThreadPool pool(2);
  const Tensor table = RandomTable(40, 16, rng, true);
  const Tensor stored = Encode(table, TableStorage::kInt8Rowwise, rng);
  const Tensor meaning = Dequantized(stored, TableEncoding::kRowwise8);
  std::vector<testing::EmbeddingBagCase> cases;
  std::vector<Tensor> gather_indices;
  std::vector<EmbeddingBagPlan> plans;
  std::vector<Tensor> outputs, wants;
  for (int j = 0; j < 12; ++j) {
    if (j % 2 == 0) {
      testing::RandomBagOptions o;
      o.bags = UniformInt(rng, 0, 30);
      o.params = &meaning;
      o.weighted = j % 4 == 0;
      cases.push_back(testing::RandomEmbeddingBagCase(o, rng));
    } else {
      gather_indices.push_back(
          testing::RandomIndices(DataType::kInt64, {UniformInt(rng, 0, 50)}, {40}, rng));
    }
  }
  plans.reserve(12);
  std::vector<EmbeddingBagJob> jobs;
  size_t bag_i = 0, gather_i = 0;
  for (int j = 0; j < 12; ++j) {
    EmbeddingBagJob job;
    job.params = stored.view();
    if (j % 2 == 0) {
      const testing::EmbeddingBagCase& c = cases[bag_i++];
      EmbeddingBagOptions options = c.options;
      options.params_encoding = TableEncoding::kRowwise8;
      const TensorView offsets = c.offsets_view(), weights = c.weights_view();
      plans.push_back(*PlanEmbeddingBag(stored.view(), c.indices.view(),
                                        c.offsets ? &offsets : nullptr,
                                        c.weights ? &weights : nullptr, options));
      job.indices = c.indices.view();
      job.offsets = offsets;
      job.per_sample_weights = weights;
      wants.push_back(*c.Expected());
    } else {
      const Tensor& indices = gather_indices[gather_i++];
      plans.push_back(
          *PlanUnpooledGather(stored.view(), TableEncoding::kRowwise8, indices.view(), 0, 0));
      job.indices = indices.view();
      wants.push_back(*Gather(meaning.view(), indices.view(), 0, 0));
    }
    outputs.push_back(*Tensor::Allocate(DataType::kFloat32, plans.back().output_shape));
    job.plan = &plans.back();
    job.output = outputs.back().mutable_view();
    jobs.push_back(job);
  }
  const std::vector<absl::Status> statuses = ExecuteEmbeddingBagGroup(jobs, &pool, 1);
  for (int j = 0; j < 12; ++j) {
    ASSERT_OK(statuses[j]);
    EXPECT_EQ(Hex(outputs[j]), Hex(wants[j])) << "job " << j;
  }
}

}  // namespace
}  // namespace tensorcompute::core
