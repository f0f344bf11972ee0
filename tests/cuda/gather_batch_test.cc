// The CUDA batch path without a GPU: PlanBatch's layout, PackInput / UnpackTask, and
// RunBatchOnHost, which runs the kernel's per-unit code (gather_unit.h) over every unit of a
// batch on the CPU. Random batches of every fixed-size dtype must agree with the reference
// byte for byte, and bad indices must give the CPU's exact message. Resident params (a
// table's device copy, here a host pointer standing for the device address) take no space in
// the input buffer and are read in place.

#include "core/cuda/gather_batch.h"

#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/gather_plan.h"
#include "core/index_math.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/reference_gather.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::cuda {
namespace {

using testing::GatherRequest;
using testing::IsOk;
using testing::Rng;

absl::StatusOr<core::GatherPlan> Plan(const GatherRequest& r) {
  return r.nd ? core::PlanGatherNd(r.params.view(), r.indices.view(), r.batch_dims)
              : core::PlanGather(r.params.view(), r.indices.view(), r.axis, r.batch_dims);
}

// Runs `requests` as one batch through the host twin of the device pass (or `run`); returns
// each task's result. Tasks marked in `resident` read their params in place, as from a resident
// table's device copy (the host pointer stands for the device address). How a batch's units are run
// over host copies of its buffers: RunBatchOnHost, or another order of the same steps.
using BatchRunner =
    std::function<void(const BatchLayout& layout, const uint8_t* input, uint8_t* output)>;

std::vector<absl::StatusOr<core::Tensor>> RunBatch(const std::vector<GatherRequest>& requests,
                                                   bool force_64bit = false,
                                                   const std::vector<bool>& resident = {},
                                                   BatchRunner run = RunBatchOnHost) {
  std::vector<core::GatherPlan> plans;
  std::vector<core::TensorView> params, indices;
  for (const GatherRequest& r : requests) {
    plans.push_back(*Plan(r));
    params.push_back(r.params.view());
    indices.push_back(r.indices.view());
  }
  std::vector<const core::GatherPlan*> plan_ptrs;
  std::vector<const core::TensorView*> param_ptrs, index_ptrs;
  for (size_t i = 0; i < plans.size(); ++i) {
    plan_ptrs.push_back(&plans[i]);
    param_ptrs.push_back(&params[i]);
    index_ptrs.push_back(&indices[i]);
  }
  std::vector<const void*> resident_ptrs;
  for (size_t i = 0; i < resident.size(); ++i) {
    resident_ptrs.push_back(resident[i] ? params[i].data.data() : nullptr);
  }
  BatchLayout layout = PlanBatch(plan_ptrs, resident_ptrs);
  if (force_64bit) layout.fits_32bit = false;
  std::vector<uint8_t> input(layout.input_bytes, 0xAB), output(layout.output_bytes, 0xCD);
  PackInput(layout, param_ptrs, index_ptrs, input.data());
  ResetFlags(layout, output.data());
  run(layout, input.data(), output.data());
  std::vector<absl::StatusOr<core::Tensor>> results;
  for (size_t i = 0; i < plans.size(); ++i) {
    auto out = core::Tensor::Allocate(plans[i].dtype, plans[i].output_shape);
    const absl::Status status = UnpackTask(layout, static_cast<int>(i), plans[i], indices[i],
                                           output.data(), out->mutable_bytes().data());
    if (status.ok()) {
      results.push_back(*std::move(out));
    } else {
      results.push_back(status);
    }
  }
  return results;
}

// A random request that the GPU serves: fixed-size dtype, output rows and non-empty slices.
GatherRequest RandomGpuRequest(Rng& rng, bool bad) {
  static constexpr core::DataType kTypes[] = {
      core::DataType::kBool,    core::DataType::kInt8,      core::DataType::kUint16,
      core::DataType::kFloat16, core::DataType::kBfloat16,  core::DataType::kInt32,
      core::DataType::kFloat32, core::DataType::kInt64,     core::DataType::kFloat64,
      core::DataType::kUint64,  core::DataType::kComplex64, core::DataType::kComplex128};
  while (true) {
    const core::DataType dtype = kTypes[testing::UniformInt(rng, 0, std::size(kTypes) - 1)];
    const core::DataType index_dtype =
        testing::Chance(rng, 0.5) ? core::DataType::kInt32 : core::DataType::kInt64;
    testing::RandomRequestOptions options;
    options.zero_probability = 0;
    GatherRequest r = testing::Chance(rng, 0.4)
                          ? testing::RandomGatherNdRequest(dtype, index_dtype, rng, options)
                          : testing::RandomGatherRequest(dtype, index_dtype, rng, options);
    auto plan = Plan(r);
    if (!plan.ok() || plan->output_rows() == 0 || plan->slice == 0) continue;
    if (bad) testing::InjectOutOfRangeIndices(r, 1 + testing::UniformInt(rng, 0, 2), rng);
    return r;
  }
}

TEST(VectorBytes, IsTheWidestPowerOfTwoDividingTheSlice) {
  EXPECT_EQ(VectorBytes(1), 1u);
  EXPECT_EQ(VectorBytes(6), 2u);
  EXPECT_EQ(VectorBytes(12), 4u);
  EXPECT_EQ(VectorBytes(24), 8u);
  EXPECT_EQ(VectorBytes(48), 16u);
  EXPECT_EQ(VectorBytes(4096), 16u);
}

// The unrolled kernel (gather_kernel.cu) on the host: a grid of `blocks` blocks of `threads`
// threads, block b taking tiles of kGroup x threads units, each thread running GatherUnitGroup
// on its units of each tile (spaced `threads` apart). Every task's vector_bytes is W.
constexpr int kGroup = 4;  // gather_kernel.h's kGatherUnroll

template <typename I, int W>
void RunUnrolledGridAs(const BatchLayout& layout, const uint8_t* in, uint8_t* out, I blocks,
                       I threads) {
  const auto* descs = reinterpret_cast<const GatherDesc*>(in + layout.descs_offset);
  const auto* dims = reinterpret_cast<const int64_t*>(in + layout.dims_offset);
  auto* flags = reinterpret_cast<unsigned long long*>(out + layout.flags_offset);
  const int n = static_cast<int>(layout.descs.size());
  const I total = static_cast<I>(layout.total_units);
  const I tile = kGroup * threads;
  for (I b = 0; b < blocks; ++b) {
    for (I x = 0; x < threads; ++x) {
      for (I base = b * tile + x; base < total; base += blocks * tile) {
        GatherUnitGroup<I, kGroup, MemcpyChunk<W>>(descs, n, dims, base, threads, total, in, out,
                                                   flags);
      }
    }
  }
}

template <typename I>
void RunUnrolledGrid(const BatchLayout& layout, const uint8_t* in, uint8_t* out, I blocks,
                     I threads) {
  switch (layout.uniform_vector_bytes) {
    case 16:
      return RunUnrolledGridAs<I, 16>(layout, in, out, blocks, threads);
    case 8:
      return RunUnrolledGridAs<I, 8>(layout, in, out, blocks, threads);
    case 4:
      return RunUnrolledGridAs<I, 4>(layout, in, out, blocks, threads);
    case 2:
      return RunUnrolledGridAs<I, 2>(layout, in, out, blocks, threads);
    case 1:
      return RunUnrolledGridAs<I, 1>(layout, in, out, blocks, threads);
    default:
      FAIL() << "the unrolled kernel needs tasks of one vector width";
  }
}

// A plan of `dtype` params [rows, width] gathered along axis 0 by `n` int32 indices.
struct SimpleTask {
  GatherRequest request;
  core::GatherPlan plan;
  SimpleTask(core::DataType dtype, int64_t width, Rng& rng) {
    request.params = testing::RandomTensor(dtype, {5, width}, rng);
    request.indices = testing::MakeIndices(core::DataType::kInt32, {3}, {4, 0, -2});
    request.axis = 0;
    plan = *Plan(request);
  }
};

BatchLayout PlanOf(const std::vector<const SimpleTask*>& tasks) {
  std::vector<const core::GatherPlan*> plans;
  for (const SimpleTask* t : tasks) plans.push_back(&t->plan);
  return PlanBatch(plans);
}

TEST(GatherSliceFitsKernel, ARowMustSplitIntoAtMostUint32MaxChunks) {
  constexpr int64_t kMax = UINT32_MAX;
  EXPECT_TRUE(GatherSliceFitsKernel(1));
  EXPECT_FALSE(GatherSliceFitsKernel(int64_t{1} << 40));  // 2^36 chunks of 16 bytes
  EXPECT_FALSE(GatherSliceFitsKernel((kMax + 1) * 16));   // 2^32 chunks of 16 bytes
  EXPECT_TRUE(GatherSliceFitsKernel(kMax * 16));          // UINT32_MAX chunks of 16 bytes
  EXPECT_TRUE(GatherSliceFitsKernel(kMax));               // odd: UINT32_MAX chunks of 1 byte
  EXPECT_FALSE(GatherSliceFitsKernel(kMax + 2));          // odd: 2^32 + 1 chunks of 1 byte
  EXPECT_FALSE(GatherSliceFitsKernel((kMax + 2) * 2));    // 2^32 + 1 chunks of 2 bytes
  EXPECT_TRUE(GatherSliceFitsKernel(int64_t{3} << 31));   // 3 * 2^27 chunks of 16 bytes
}

TEST(PlanBatch, UniformVectorBytesIsTheTasksCommonWidthOrZero) {
  Rng rng(5);
  const SimpleTask wide(core::DataType::kFloat32, 8, rng);    // rows of 32 bytes: 16
  const SimpleTask wide2(core::DataType::kFloat64, 6, rng);   // rows of 48 bytes: 16
  const SimpleTask narrow(core::DataType::kFloat32, 3, rng);  // rows of 12 bytes: 4
  const SimpleTask odd(core::DataType::kInt8, 7, rng);        // rows of 7 bytes: 1
  EXPECT_EQ(PlanOf({&wide}).uniform_vector_bytes, 16u);
  EXPECT_EQ(PlanOf({&wide, &wide2, &wide}).uniform_vector_bytes, 16u);
  EXPECT_EQ(PlanOf({&narrow}).uniform_vector_bytes, 4u);
  EXPECT_EQ(PlanOf({&odd, &odd}).uniform_vector_bytes, 1u);
  EXPECT_EQ(PlanOf({&wide, &narrow}).uniform_vector_bytes, 0u);
  EXPECT_EQ(PlanOf({&wide, &wide2, &odd}).uniform_vector_bytes, 0u);
  EXPECT_EQ(PlanOf({&narrow, &wide, &narrow}).uniform_vector_bytes, 0u);
}

// LocateGatherUnit's shortcuts (one chunk per row, outer 1) give what the general arithmetic
// (core/index_math.h's DecomposeOutputRow) gives.
TEST(LocateGatherUnit, AgreesWithTheIndexMath) {
  for (int64_t outer : {1, 2, 5}) {
    for (int64_t num_indices : {1, 3, 7}) {
      for (uint32_t chunks : {1u, 2u, 9u}) {
        GatherDesc d{};
        d.outer = outer;
        d.num_indices = num_indices;
        d.chunks_per_row = chunks;
        const uint64_t units = uint64_t{2} * outer * num_indices * chunks;  // batch 2
        for (uint64_t u = 0; u < units; ++u) {
          const GatherUnitSite<uint32_t> s32 =
              LocateGatherUnit<uint32_t>(d, static_cast<uint32_t>(u));
          const GatherUnitSite<uint64_t> s64 = LocateGatherUnit<uint64_t>(d, u);
          const int64_t r = static_cast<int64_t>(u / chunks);
          const core::RowSource source = core::DecomposeOutputRow(r, outer, num_indices);
          EXPECT_EQ(s64.r, static_cast<uint64_t>(r));
          EXPECT_EQ(s64.chunk, u % chunks);
          EXPECT_EQ(s64.block, static_cast<uint64_t>(source.block));
          EXPECT_EQ(s64.tuple, static_cast<uint64_t>(source.tuple));
          EXPECT_EQ(s32.r, s64.r);
          EXPECT_EQ(s32.chunk, s64.chunk);
          EXPECT_EQ(s32.block, s64.block);
          EXPECT_EQ(s32.tuple, s64.tuple);
        }
      }
    }
  }
}

TEST(FindTask, FindsTheTaskHoldingEachUnit) {
  std::vector<GatherDesc> descs(4);
  const uint64_t begins[] = {0, 5, 5, 9};  // task 1 has no units
  for (int i = 0; i < 4; ++i) descs[i].unit_begin = begins[i];
  EXPECT_EQ(FindTask(descs.data(), 4, 0), 0);
  EXPECT_EQ(FindTask(descs.data(), 4, 4), 0);
  EXPECT_EQ(FindTask(descs.data(), 4, 5), 2);
  EXPECT_EQ(FindTask(descs.data(), 4, 8), 2);
  EXPECT_EQ(FindTask(descs.data(), 4, 9), 3);
  EXPECT_EQ(FindTask(descs.data(), 4, 100), 3);
}

TEST(PlanBatch, RegionsAreAlignedAndDisjoint) {
  Rng rng(11);
  std::vector<GatherRequest> requests;
  for (int i = 0; i < 8; ++i) requests.push_back(RandomGpuRequest(rng, false));
  std::vector<core::GatherPlan> plans;
  std::vector<const core::GatherPlan*> ptrs;
  for (const auto& r : requests) plans.push_back(*Plan(r));
  for (const auto& p : plans) ptrs.push_back(&p);
  const BatchLayout layout = PlanBatch(ptrs);
  uint64_t in_end = layout.dims_offset + layout.dims.size() * sizeof(int64_t);
  uint64_t out_end = layout.descs.size() * sizeof(uint64_t);
  uint64_t units = 0;
  for (size_t i = 0; i < plans.size(); ++i) {
    const GatherDesc& d = layout.descs[i];
    EXPECT_EQ(d.params_offset % kRegionAlignment, 0u);
    EXPECT_EQ(d.indices_offset % kRegionAlignment, 0u);
    EXPECT_EQ(d.output_offset % kRegionAlignment, 0u);
    EXPECT_GE(d.params_offset, in_end);
    EXPECT_GE(d.indices_offset, d.params_offset + requests[i].params.bytes().size());
    in_end = d.indices_offset + requests[i].indices.bytes().size();
    EXPECT_GE(d.output_offset, out_end);
    out_end = d.output_offset + plans[i].output_bytes;
    EXPECT_EQ(d.unit_begin, units);
    EXPECT_EQ(d.units, static_cast<uint64_t>(plans[i].output_rows()) * d.chunks_per_row);
    EXPECT_EQ(d.chunks_per_row * d.vector_bytes, plans[i].slice_bytes());
    units += d.units;
  }
  EXPECT_LE(in_end, layout.input_bytes);
  EXPECT_LE(out_end, layout.output_bytes);
  EXPECT_EQ(layout.total_units, units);
  EXPECT_TRUE(layout.fits_32bit);
}

TEST(RunBatchOnHost, RandomBatchesAgreeWithTheReference) {
  Rng rng(2024);
  for (int batch = 0; batch < 600; ++batch) {
    std::vector<GatherRequest> requests;
    const int n = static_cast<int>(testing::UniformInt(rng, 1, 8));
    for (int i = 0; i < n; ++i)
      requests.push_back(RandomGpuRequest(rng, testing::Chance(rng, 0.2)));
    const bool force_64bit = batch % 3 == 0;
    const auto results = RunBatch(requests, force_64bit);
    for (int i = 0; i < n; ++i) {
      SCOPED_TRACE(requests[i].DebugString());
      EXPECT_TRUE(testing::AgreesWithReference(results[i], testing::RunReference(requests[i])));
    }
  }
}

// The unrolled kernel's per-thread work (GatherUnitGroup), over grids of every shape (one
// thread, tiles straddling tasks, threads with fewer than kGroup units, more threads than
// units), on batches of one vector width: the reference's bytes and errors.
TEST(GatherUnitGroup, SimulatedGridsAgreeWithTheReference) {
  Rng rng(2026);
  int batches = 0;
  while (batches < 300) {
    std::vector<GatherRequest> requests;
    std::vector<bool> resident;
    uint32_t width = 0;
    const int n = static_cast<int>(testing::UniformInt(rng, 1, 6));
    for (int tries = 0; tries < 60 && static_cast<int>(requests.size()) < n; ++tries) {
      GatherRequest r = RandomGpuRequest(rng, testing::Chance(rng, 0.2));
      const uint32_t w = VectorBytes(Plan(r)->slice_bytes());
      if (width != 0 && w != width) continue;
      width = w;
      requests.push_back(std::move(r));
      resident.push_back(testing::Chance(rng, 0.3));
    }
    const bool wide = batches % 2 == 0;
    const auto blocks = static_cast<uint32_t>(testing::UniformInt(rng, 1, 5));
    const auto threads = static_cast<uint32_t>(testing::UniformInt(rng, 1, 9));
    const auto results = RunBatch(requests, wide, resident,
                                  [&](const BatchLayout& layout, const uint8_t* in, uint8_t* out) {
                                    if (layout.fits_32bit) {
                                      RunUnrolledGrid<uint32_t>(layout, in, out, blocks, threads);
                                    } else {
                                      RunUnrolledGrid<uint64_t>(layout, in, out, blocks, threads);
                                    }
                                  });
    for (size_t i = 0; i < requests.size(); ++i) {
      SCOPED_TRACE(requests[i].DebugString());
      EXPECT_TRUE(testing::AgreesWithReference(results[i], testing::RunReference(requests[i])));
    }
    ++batches;
  }
}

TEST(PlanBatch, ResidentParamsTakeNoSpaceInTheInputBuffer) {
  Rng rng(12);
  std::vector<GatherRequest> requests;
  for (int i = 0; i < 6; ++i) requests.push_back(RandomGpuRequest(rng, false));
  std::vector<core::GatherPlan> plans;
  std::vector<const core::GatherPlan*> ptrs;
  std::vector<core::TensorView> params, indices;
  std::vector<const core::TensorView*> param_ptrs, index_ptrs;
  std::vector<const void*> resident;
  for (const auto& r : requests) {
    plans.push_back(*Plan(r));
    params.push_back(r.params.view());
    indices.push_back(r.indices.view());
  }
  for (size_t i = 0; i < plans.size(); ++i) {
    ptrs.push_back(&plans[i]);
    param_ptrs.push_back(&params[i]);
    index_ptrs.push_back(&indices[i]);
    resident.push_back(params[i].data.data());
  }
  const BatchLayout layout = PlanBatch(ptrs, resident);
  uint64_t expected =
      (layout.dims_offset + layout.dims.size() * sizeof(int64_t) + kRegionAlignment - 1) /
      kRegionAlignment * kRegionAlignment;
  for (size_t i = 0; i < plans.size(); ++i) {
    EXPECT_EQ(layout.descs[i].params_address, reinterpret_cast<uint64_t>(resident[i]));
    EXPECT_EQ(layout.descs[i].indices_offset, expected);
    expected += (requests[i].indices.bytes().size() + kRegionAlignment - 1) / kRegionAlignment *
                kRegionAlignment;
  }
  EXPECT_EQ(layout.input_bytes, expected);  // descriptors, dims and indices only
  const std::vector<uint8_t> tables = PackTables(layout);
  for (const Piece& piece : InputPieces(layout, tables, param_ptrs, index_ptrs)) {
    for (const core::TensorView& p : params) EXPECT_NE(piece.src, p.data.data());
  }
}

TEST(RunBatchOnHost, ResidentAndCopiedParamsMixedAgreeWithTheReference) {
  Rng rng(2025);
  for (int batch = 0; batch < 300; ++batch) {
    std::vector<GatherRequest> requests;
    std::vector<bool> resident;
    const int n = static_cast<int>(testing::UniformInt(rng, 1, 8));
    for (int i = 0; i < n; ++i) {
      requests.push_back(RandomGpuRequest(rng, testing::Chance(rng, 0.2)));
      resident.push_back(testing::Chance(rng, 0.5));
    }
    const auto results = RunBatch(requests, batch % 3 == 0, resident);
    for (int i = 0; i < n; ++i) {
      SCOPED_TRACE(requests[i].DebugString());
      EXPECT_TRUE(testing::AgreesWithReference(results[i], testing::RunReference(requests[i])));
    }
  }
}

TEST(RunBatchOnHost, BadIndexGivesTheCpuMessage) {
  std::vector<GatherRequest> requests;
  GatherRequest r;
  r.params = testing::MakeTensor<float>({3, 2}, {1, 2, 3, 4, 5, 6});
  r.indices = testing::MakeIndices(core::DataType::kInt64, {2, 2}, {0, 2, 7, -4});
  r.axis = 0;
  requests.push_back(std::move(r));
  GatherRequest ok;
  ok.params = testing::MakeTensor<int32_t>({4}, {10, 20, 30, 40});
  ok.indices = testing::MakeIndices(core::DataType::kInt32, {2}, {-1, 0});
  requests.push_back(std::move(ok));
  const auto results = RunBatch(requests);
  EXPECT_THAT(results[0].status(), testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                                     "indices[1,0] = 7 is not in [-3, 3)"));
  ASSERT_THAT(results[1].status(), IsOk());
  EXPECT_THAT(results[1]->values<int32_t>(), ::testing::ElementsAre(40, 10));
}

TEST(RunBatchOnHost, WideRowsUseSixteenByteChunks) {
  GatherRequest r;
  std::vector<double> values(4 * 40);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i);
  r.params = testing::MakeTensor<double>({4, 40}, values);  // rows of 320 bytes
  r.indices = testing::MakeIndices(core::DataType::kInt32, {3}, {3, -4, 1});
  r.axis = 0;
  std::vector<GatherRequest> requests;
  requests.push_back(r.Clone());
  const auto results = RunBatch(requests);
  ASSERT_THAT(results[0].status(), IsOk());
  EXPECT_TRUE(testing::AgreesWithReference(results[0], testing::RunReference(r)));
}

}  // namespace
}  // namespace tensorcompute::cuda
