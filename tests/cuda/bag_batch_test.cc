// The CUDA EmbeddingBag path without a GPU: PlanBagBatch's layout, PackBagInput /
// UnpackBagTask, and RunBagBatchOnHost, which runs the kernel's per-unit code (bag_unit.h)
// over every unit of a batch on the CPU. Random batches over every mode, params dtype, index
// and offsets dtype, weights or not, offsets (with and without include_last_offset) and fixed
// bags, empty bags, padding_idx, negative indices and 1 to 4096 bags must give
// core::ExecuteEmbeddingBag's bytes exactly, and out-of-range indices its exact error.
// Resident params (a table's device copy; here a host pointer standing for the device
// address) take no space in the input buffer and are read in place.

#include "core/cuda/bag_batch.h"

#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/embedding_bag.h"
#include "core/table_storage.h"
#include "tests/testing/random_embedding_bag.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::cuda {
namespace {

using core::DataType;
using core::EmbeddingBagMode;
using testing::BagForm;
using testing::EmbeddingBagCase;
using testing::IsOk;
using testing::RandomBagOptions;
using testing::Rng;

constexpr DataType kFloatTypes[] = {DataType::kFloat16, DataType::kBfloat16, DataType::kFloat32,
                                    DataType::kFloat64};
constexpr EmbeddingBagMode kModes[] = {EmbeddingBagMode::kSum, EmbeddingBagMode::kMean,
                                       EmbeddingBagMode::kMax, EmbeddingBagMode::kSqrtn};
constexpr BagForm kForms[] = {BagForm::kOffsets, BagForm::kIncludeLastOffset, BagForm::kFixed};

// Tasks of a batch: plans and the views they were made from.
struct PlannedTasks {
  std::vector<core::EmbeddingBagPlan> plans;
  std::vector<core::TensorView> params, indices, offsets, weights;
  void Add(core::EmbeddingBagPlan plan, core::TensorView p, core::TensorView i,
           core::TensorView o = {}, core::TensorView w = {}) {
    plans.push_back(std::move(plan));
    params.push_back(p);
    indices.push_back(i);
    offsets.push_back(o);
    weights.push_back(w);
  }
};

// Runs `batch` as one batch through the host twin of the device pass; returns each task's
// result. Tasks marked in `resident` read their params in place (the host pointer stands for
// the device address of a resident copy). `input_bytes`, if given, receives the buffer's size.
std::vector<absl::StatusOr<core::Tensor>> RunPlanned(PlannedTasks& batch,
                                                     const std::vector<bool>& resident = {},
                                                     uint64_t* input_bytes = nullptr) {
  const size_t n = batch.plans.size();
  const std::vector<core::EmbeddingBagPlan>& plans = batch.plans;
  std::vector<core::TensorView>&params = batch.params, &indices = batch.indices,
  &offsets = batch.offsets, &weights = batch.weights;
  std::vector<BagTaskInputs> tasks(n);
  for (size_t i = 0; i < n; ++i) {
    tasks[i].plan = &plans[i];
    tasks[i].params = &params[i];
    tasks[i].indices = &indices[i];
    tasks[i].offsets = plans[i].fixed_bags() ? nullptr : &offsets[i];
    tasks[i].weights = plans[i].weighted() ? &weights[i] : nullptr;
    if (i < resident.size() && resident[i]) tasks[i].resident_params = params[i].data.data();
  }
  const BagLayout layout = PlanBagBatch(tasks);
  if (input_bytes != nullptr) *input_bytes = layout.input_bytes;
  // Garbage around every region, as fresh device memory would hold.
  std::vector<uint8_t> input(layout.input_bytes, 0xAB), output(layout.output_bytes, 0xCD);
  PackBagInput(layout, tasks, input.data());
  ResetBagFlags(layout, output.data());
  RunBagBatchOnHost(layout, input.data(), output.data());
  std::vector<absl::StatusOr<core::Tensor>> results;
  for (size_t i = 0; i < n; ++i) {
    absl::StatusOr<core::Tensor> out =
        core::Tensor::Allocate(plans[i].dtype, plans[i].output_shape);
    const absl::Status status = UnpackBagTask(layout, static_cast<int>(i), tasks[i], output.data(),
                                              out->mutable_bytes().data());
    if (status.ok()) {
      results.push_back(*std::move(out));
    } else {
      results.push_back(status);
    }
  }
  return results;
}

// RunPlanned of random requests (each planned as its case says).
std::vector<absl::StatusOr<core::Tensor>> RunBatch(const std::vector<EmbeddingBagCase>& requests,
                                                   const std::vector<bool>& resident = {},
                                                   uint64_t* input_bytes = nullptr) {
  PlannedTasks batch;
  for (const EmbeddingBagCase& r : requests) {
    absl::StatusOr<core::EmbeddingBagPlan> plan = r.Plan();
    EXPECT_THAT(plan, IsOk()) << r.DebugString();
    if (!plan.ok()) return {};
    batch.Add(*std::move(plan), r.params.view(), r.indices.view(), r.offsets_view(),
              r.weights_view());
  }
  return RunPlanned(batch, resident, input_bytes);
}

// Whether the host twin's answer is the CPU's: the same error, or the same bytes.
::testing::AssertionResult SameAsCpu(const absl::StatusOr<core::Tensor>& got,
                                     const EmbeddingBagCase& request) {
  const absl::StatusOr<core::Tensor> cpu = request.Expected();
  if (got.ok() != cpu.ok() || (!got.ok() && got.status() != cpu.status())) {
    return ::testing::AssertionFailure()
           << request.DebugString() << "\n twin: " << got.status() << "\n  cpu: " << cpu.status();
  }
  if (got.ok() && !core::IdenticalTensors(got->view(), cpu->view())) {
    return ::testing::AssertionFailure()
           << request.DebugString() << ": the twin's bytes differ from the CPU's";
  }
  return ::testing::AssertionSuccess();
}

TEST(BagChunks, SixteenBytesOfElementsPerUnitAndOneUnitForEmptyRows) {
  EXPECT_EQ(BagChunkElements(2), 8);
  EXPECT_EQ(BagChunkElements(4), 4);
  EXPECT_EQ(BagChunkElements(8), 2);
  EXPECT_EQ(BagChunksPerBag(64, 4), 16u);
  EXPECT_EQ(BagChunksPerBag(65, 4), 17u);
  EXPECT_EQ(BagChunksPerBag(1, 2), 1u);
  EXPECT_EQ(BagChunksPerBag(3, 8), 2u);
  EXPECT_EQ(BagChunksPerBag(0, 4), 1u);
}

TEST(PlanBagBatch, RegionsAreAlignedAndInBufferOrder) {
  Rng rng(1);
  std::vector<EmbeddingBagCase> requests;
  for (BagForm form : kForms) {
    RandomBagOptions options;
    options.form = form;
    options.weighted = true;
    options.bags = 5;
    requests.push_back(RandomEmbeddingBagCase(options, rng));
  }
  std::vector<core::EmbeddingBagPlan> plans;
  for (const EmbeddingBagCase& r : requests) plans.push_back(*r.Plan());
  std::vector<core::TensorView> views;
  views.reserve(4 * requests.size());
  std::vector<BagTaskInputs> tasks;
  for (size_t i = 0; i < requests.size(); ++i) {
    BagTaskInputs t;
    t.plan = &plans[i];
    t.params = &views.emplace_back(requests[i].params.view());
    t.indices = &views.emplace_back(requests[i].indices.view());
    const core::TensorView& o = views.emplace_back(requests[i].offsets_view());
    t.offsets = plans[i].fixed_bags() ? nullptr : &o;
    t.weights = &views.emplace_back(requests[i].weights_view());
    tasks.push_back(t);
  }
  const BagLayout layout = PlanBagBatch(tasks);
  uint64_t in = 0, out = 0, units = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const BagDesc& d = layout.descs[i];
    for (uint64_t offset :
         {d.params_offset, d.indices_offset, d.offsets_offset, d.weights_offset, d.output_offset}) {
      EXPECT_EQ(offset % kRegionAlignment, 0u);
    }
    EXPECT_GE(d.params_offset, in);
    EXPECT_GE(d.indices_offset, d.params_offset + tasks[i].params->data.size());
    EXPECT_GE(d.offsets_offset, d.indices_offset + tasks[i].indices->data.size());
    EXPECT_GE(d.weights_offset,
              d.offsets_offset + (d.offset_bytes == 0 ? 0 : tasks[i].offsets->data.size()));
    in = d.weights_offset + tasks[i].weights->data.size();
    EXPECT_GE(d.output_offset, out);
    out = d.output_offset + plans[i].output_bytes;
    EXPECT_EQ(d.unit_begin, units);
    EXPECT_EQ(d.units, static_cast<uint64_t>(plans[i].bags) * d.chunks_per_bag);
    units += d.units;
    EXPECT_EQ(d.offset_bytes == 0, plans[i].fixed_bags());
  }
  EXPECT_LE(in, layout.input_bytes);
  EXPECT_LE(out, layout.output_bytes);
  EXPECT_EQ(layout.total_units, units);
}

// Every mode x dtype x weights x form, 1 to 4096 bags: one batch of seven tasks per
// combination, the twin's bytes equal to core::ExecuteEmbeddingBag's.
TEST(RunBagBatchOnHost, RandomBatchesGiveTheCpusBytes) {
  Rng rng(0xe3b);
  const int64_t bag_counts[] = {1, 2, 3, 7, 33, 130, 4096};
  int checked = 0;
  for (EmbeddingBagMode mode : kModes) {
    for (DataType dtype : kFloatTypes) {
      for (bool weighted : {false, true}) {
        if (weighted && mode == EmbeddingBagMode::kMax) continue;
        for (BagForm form : kForms) {
          std::vector<EmbeddingBagCase> requests;
          for (int64_t bags : bag_counts) {
            RandomBagOptions options;
            options.mode = mode;
            options.dtype = dtype;
            options.weighted = weighted;
            options.form = form;
            options.bags = bags;
            options.zero_dim_probability = 0.05;
            if (bags == 4096) options.max_dim = 20;  // keeps the test under a second
            requests.push_back(RandomEmbeddingBagCase(options, rng));
          }
          const std::vector<absl::StatusOr<core::Tensor>> got = RunBatch(requests);
          ASSERT_EQ(got.size(), requests.size());
          for (size_t i = 0; i < requests.size(); ++i) {
            ASSERT_THAT(got[i], IsOk()) << requests[i].DebugString();
            ASSERT_TRUE(SameAsCpu(got[i], requests[i]));
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, (4 * 4 * 2 - 4) * 3 * 7);
  std::cout << "random EmbeddingBag tasks checked on the host twin: " << checked << std::endl;
}

// Wide rows (several units per bag, a partial last unit) and long bags.
TEST(RunBagBatchOnHost, WideRowsAndLongBags) {
  Rng rng(0x1de);
  std::vector<EmbeddingBagCase> requests;
  for (int i = 0; i < 24; ++i) {
    RandomBagOptions options;
    options.mode = kModes[i % 4];
    options.dtype = kFloatTypes[(i / 4) % 4];
    options.weighted = i % 3 == 0 && options.mode != EmbeddingBagMode::kMax;
    options.form = kForms[i % 3];
    options.bags = testing::UniformInt(rng, 1, 40);
    options.max_dim = 300;
    options.max_bag_size = 64;
    requests.push_back(RandomEmbeddingBagCase(options, rng));
  }
  const std::vector<absl::StatusOr<core::Tensor>> got = RunBatch(requests);
  ASSERT_EQ(got.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) ASSERT_TRUE(SameAsCpu(got[i], requests[i]));
}

// Out-of-range values at random positions (and always a later one): each task's error is the
// CPU's, naming its lowest bad position; the other tasks of the batch are unaffected.
TEST(RunBagBatchOnHost, BadIndicesGiveTheCpusError) {
  Rng rng(0xbad);
  int bad = 0;
  for (int round = 0; round < 12; ++round) {
    std::vector<EmbeddingBagCase> requests;
    for (int i = 0; i < 16; ++i) {
      RandomBagOptions options;
      options.mode = kModes[i % 4];
      options.dtype = kFloatTypes[(i + round) % 4];
      options.weighted = i % 2 == 1 && options.mode != EmbeddingBagMode::kMax;
      options.form = kForms[(i + round) % 3];
      options.bags = testing::UniformInt(rng, 1, round % 2 ? 600 : 12);
      options.zero_dim_probability = 0.1;
      EmbeddingBagCase r = RandomEmbeddingBagCase(options, rng);
      const int64_t n = r.indices.num_elements();
      if (i % 3 != 2 && n > 0) {
        const int64_t rows = r.params.shape()[0];
        const int64_t pos = testing::UniformInt(rng, 0, n - 1);
        testing::SetIndexValue(r.indices, pos,
                               testing::RandomOutOfRangeValue(rows, r.indices.dtype(), rng));
        if (pos + 1 < n) testing::SetIndexValue(r.indices, n - 1, -rows - 1);
        ++bad;
      }
      requests.push_back(std::move(r));
    }
    const std::vector<absl::StatusOr<core::Tensor>> got = RunBatch(requests);
    ASSERT_EQ(got.size(), requests.size());
    for (size_t i = 0; i < requests.size(); ++i) ASSERT_TRUE(SameAsCpu(got[i], requests[i]));
  }
  EXPECT_GT(bad, 100);
}

// Bags much longer than the rows a unit has in flight (kBagRowsInFlight), of lengths that are
// and are not multiples of it, with padding rows and weights: the CPU's bytes (the order of
// the additions is the CPU's whatever the grouping).
TEST(RunBagBatchOnHost, LongBagsGiveTheCpusBytes) {
  Rng rng(0x10a9);
  int checked = 0;
  for (EmbeddingBagMode mode : kModes) {
    for (DataType dtype : kFloatTypes) {
      std::vector<EmbeddingBagCase> requests;
      for (int i = 0; i < 3; ++i) {
        RandomBagOptions options;
        options.mode = mode;
        options.dtype = dtype;
        options.weighted = i == 1 && mode != EmbeddingBagMode::kMax;
        options.form = kForms[i];
        options.bags = testing::UniformInt(rng, 1, 3);
        options.max_rows = 200;
        options.max_dim = 24;
        options.max_bag_size = 3000;
        options.empty_bag_probability = 0;
        options.padding_probability = 0.8;
        requests.push_back(RandomEmbeddingBagCase(options, rng));
      }
      const std::vector<absl::StatusOr<core::Tensor>> got = RunBatch(requests);
      ASSERT_EQ(got.size(), requests.size());
      for (size_t i = 0; i < requests.size(); ++i) {
        ASSERT_THAT(got[i], IsOk()) << requests[i].DebugString();
        ASSERT_TRUE(SameAsCpu(got[i], requests[i]));
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 4 * 4 * 3);
}

// A bad value after padding rows and good rows of the same group of rows in flight, and
// another later: the unit stops at the first, which is the error, as on the CPU.
TEST(RunBagBatchOnHost, TheFirstBadValueOfAGroupOfRowsIsTheError) {
  std::vector<EmbeddingBagCase> requests(2);
  requests[0].params = testing::MakeTensor<float>({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  // Fixed bags of 5: bag 1 holds positions 5..9; padding row 3 at 5 and 6, bad 4 at 8, -9 at 9.
  requests[0].indices =
      testing::MakeIndices(DataType::kInt64, {2, 5}, {0, 1, 2, 3, 0, 3, -1, 2, 4, -9});
  requests[0].options.padding_idx = 3;
  requests[1].params = requests[0].params.Clone();
  requests[1].indices = testing::MakeIndices(DataType::kInt32, {7}, {1, 2, 3, 0, 1, 2, 7});
  requests[1].offsets = testing::MakeIndices(DataType::kInt32, {2}, {0, 3});
  requests[1].options.mode = EmbeddingBagMode::kMax;
  const std::vector<absl::StatusOr<core::Tensor>> got = RunBatch(requests);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_THAT(got[0], testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                        ::testing::Eq("indices[1,3] = 4 is not in [-4, 4)")));
  EXPECT_THAT(got[1], testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                        ::testing::Eq("indices[6] = 7 is not in [-4, 4)")));
  for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(SameAsCpu(got[i], requests[i]));
}

// A RawPiece holds a piece's elements in order, whatever their size and count.
TEST(RawPiece, FetchKeepsTheElementsInOrder) {
  uint8_t row[16];
  for (int i = 0; i < 16; ++i) row[i] = static_cast<uint8_t>(0x10 + i * 7);
  for (int n = 0; n <= 4; ++n) {
    bag_internal::RawPiece bytes, halves;
    bag_internal::FetchRaw<1, 4>(row, n, bytes);
    bag_internal::FetchRaw<2, 4>(row, n, halves);
    for (int k = 0; k < 4; ++k) {
      EXPECT_EQ(bag_internal::RawBits<1>(bytes, k), k < n ? row[k] : 0) << n << " " << k;
      uint16_t h = 0;
      if (k < n) std::memcpy(&h, row + 2 * k, 2);
      EXPECT_EQ(bag_internal::RawBits<2>(halves, k), h) << n << " " << k;
    }
  }
  for (int n = 0; n <= 2; ++n) {
    bag_internal::RawPiece doubles;
    bag_internal::FetchRaw<8, 2>(row, n, doubles);
    for (int k = 0; k < 2; ++k) {
      uint64_t v = 0;
      if (k < n) std::memcpy(&v, row + 8 * k, 8);
      EXPECT_EQ(bag_internal::RawBits<8>(doubles, k), v) << n << " " << k;
    }
  }
}

TEST(RunBagBatchOnHost, TheErrorHasTheCpusWords) {
  std::vector<EmbeddingBagCase> requests(2);
  requests[0].params = testing::MakeTensor<float>({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  requests[0].indices = testing::MakeIndices(DataType::kInt32, {2, 3}, {0, 1, 2, 3, -5, 9});
  requests[1].params = requests[0].params.Clone();
  requests[1].indices = testing::MakeIndices(DataType::kInt64, {4}, {3, -4, 1, 4});
  requests[1].offsets = testing::MakeIndices(DataType::kInt32, {2}, {0, 2});
  const std::vector<absl::StatusOr<core::Tensor>> got = RunBatch(requests);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_THAT(got[0], testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                        ::testing::Eq("indices[1,1] = -5 is not in [-4, 4)")));
  EXPECT_THAT(got[1], testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                        ::testing::Eq("indices[3] = 4 is not in [-4, 4)")));
  for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(SameAsCpu(got[i], requests[i]));
}

// Resident params are read in place and take no room in the input buffer.
TEST(RunBagBatchOnHost, ResidentParamsAreReadInPlace) {
  Rng rng(0x7ab1e);
  std::vector<EmbeddingBagCase> requests;
  for (int i = 0; i < 8; ++i) {
    RandomBagOptions options;
    options.mode = kModes[i % 4];
    options.dtype = kFloatTypes[i % 4];
    options.form = kForms[i % 3];
    options.bags = 50;
    options.max_rows = 400;
    requests.push_back(RandomEmbeddingBagCase(options, rng));
  }
  uint64_t inline_bytes = 0, resident_bytes = 0;
  const std::vector<absl::StatusOr<core::Tensor>> inline_got =
      RunBatch(requests, {}, &inline_bytes);
  const std::vector<absl::StatusOr<core::Tensor>> resident_got =
      RunBatch(requests, std::vector<bool>(requests.size(), true), &resident_bytes);
  ASSERT_EQ(resident_got.size(), requests.size());
  uint64_t params_bytes = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(SameAsCpu(inline_got[i], requests[i]));
    ASSERT_TRUE(SameAsCpu(resident_got[i], requests[i]));
    params_bytes += requests[i].params.bytes().size();
  }
  EXPECT_GE(inline_bytes - resident_bytes, params_bytes);
}

// Compact tables (issue 24): pooled lookups of every mode and unpooled gathers on float16 and
// 8-bit row-wise tables of widths that split into several units (and a partial one), inline
// and resident, give the CPU's bytes and its errors.
TEST(RunBagBatchOnHost, CompactTablesGiveTheCpusBytes) {
  Rng rng(0xc0ac7);
  int checked = 0;
  for (core::TableStorage storage :
       {core::TableStorage::kFloat16, core::TableStorage::kInt8Rowwise}) {
    for (int64_t dim : {1, 3, 4, 13, 64}) {
      const int64_t rows = testing::UniformInt(rng, 1, 60);
      std::vector<float> values(static_cast<size_t>(rows * dim));
      for (float& v : values) {  // some -0: a gather keeps its sign, a sum of it does not
        v = testing::Chance(rng, 0.1)
                ? -0.0f
                : static_cast<float>(testing::UniformInt(rng, -4000, 4000)) / 64;
      }
      const core::Tensor table = testing::MakeTensor<float>({rows, dim}, values);
      const core::TableLayout layout =
          *core::PlanTableLayout("t", storage, DataType::kFloat32, table.shape());
      core::Tensor stored = *core::Tensor::Allocate(layout.stored_dtype, layout.stored_shape);
      core::TableEncoder encoder("t", layout, stored.mutable_bytes().data());
      ASSERT_THAT(encoder.Append(table.view().data), IsOk());
      const core::TableEncoding encoding = core::EncodingOf(storage);
      std::vector<EmbeddingBagCase> cases;
      std::vector<core::Tensor> gather_indices;
      PlannedTasks batch;
      for (EmbeddingBagMode mode : kModes) {
        for (bool weighted : {false, true}) {
          if (weighted && mode == EmbeddingBagMode::kMax) continue;
          RandomBagOptions options;
          options.mode = mode;
          options.weighted = weighted;
          options.form = kForms[checked % 3];
          options.bags = testing::UniformInt(rng, 1, 40);
          options.params = &table;  // its shape; the values read are the stored ones
          cases.push_back(RandomEmbeddingBagCase(options, rng));
        }
      }
      for (int g = 0; g < 3; ++g) {
        gather_indices.push_back(
            testing::RandomIndices(DataType::kInt64, testing::RandomShape(g, rng, 6), {rows}, rng));
      }
      // One bad index in the last gather (when it has a position).
      if (gather_indices.back().num_elements() > 0) {
        testing::SetIndexValue(gather_indices.back(), gather_indices.back().num_elements() - 1,
                               rows);
      }
      for (const EmbeddingBagCase& c : cases) {
        core::EmbeddingBagOptions options = c.options;
        options.params_encoding = encoding;
        const core::TensorView offsets = c.offsets_view(), weights = c.weights_view();
        absl::StatusOr<core::EmbeddingBagPlan> plan =
            core::PlanEmbeddingBag(stored.view(), c.indices.view(), c.offsets ? &offsets : nullptr,
                                   c.weights ? &weights : nullptr, options);
        ASSERT_THAT(plan, IsOk()) << c.DebugString();
        batch.Add(*std::move(plan), stored.view(), c.indices.view(), offsets, weights);
      }
      for (const core::Tensor& indices : gather_indices) {
        absl::StatusOr<core::EmbeddingBagPlan> plan =
            core::PlanUnpooledGather(stored.view(), encoding, indices.view(), 0, 0);
        ASSERT_THAT(plan, IsOk());
        batch.Add(*std::move(plan), stored.view(), indices.view());
      }
      for (bool resident : {false, true}) {
        const std::vector<absl::StatusOr<core::Tensor>> got =
            RunPlanned(batch, std::vector<bool>(batch.plans.size(), resident));
        ASSERT_EQ(got.size(), batch.plans.size());
        for (size_t i = 0; i < got.size(); ++i) {
          const core::EmbeddingBagPlan& plan = batch.plans[i];
          core::Tensor cpu = *core::Tensor::Allocate(plan.dtype, plan.output_shape);
          const absl::Status status = core::ExecuteEmbeddingBag(
              plan, batch.params[i], batch.indices[i],
              plan.fixed_bags() ? nullptr : &batch.offsets[i],
              plan.weighted() ? &batch.weights[i] : nullptr, cpu.mutable_view());
          const std::string what = absl::StrCat(core::TableStorageName(storage), " dim ", dim,
                                                " task ", i, plan.unpooled ? " (gather)" : "");
          ASSERT_EQ(got[i].status(), status) << what;
          if (status.ok()) {
            ASSERT_TRUE(core::IdenticalTensors(got[i]->view(), cpu.view())) << what;
          }
          ++checked;
        }
      }
    }
  }
  std::cout << "compact-table tasks checked on the host twin: " << checked << std::endl;
}

}  // namespace
}  // namespace tensorcompute::cuda
