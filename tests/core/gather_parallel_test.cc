// Large requests on the ThreadPool versus inline: byte-identical outputs above and below
// ExecuteOptions::min_parallel_bytes and streaming_store_bytes, forced splitting of
// mid-size requests, the lowest bad position from a split request, ExecuteGather into
// caller-owned (and misaligned) buffers, and concurrent callers sharing one pool.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/gather.h"
#include "core/thread_pool.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/reference_gather.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::core {
namespace {

using ::tensorcompute::testing::AgreesWithReference;
using ::tensorcompute::testing::ExpectedBadIndexMessage;
using ::tensorcompute::testing::GatherRequest;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::RandomGatherNdRequest;
using ::tensorcompute::testing::RandomGatherRequest;
using ::tensorcompute::testing::RandomIndices;
using ::tensorcompute::testing::RandomRequestOptions;
using ::tensorcompute::testing::RandomTensor;
using ::tensorcompute::testing::ReadIndexValue;
using ::tensorcompute::testing::Rng;
using ::tensorcompute::testing::RunReference;
using ::tensorcompute::testing::SetIndexValue;
using ::tensorcompute::testing::StatusIs;

ThreadPool& Pool() {
  static ThreadPool* const pool = new ThreadPool(4);
  return *pool;
}

absl::StatusOr<Tensor> RunCore(const GatherRequest& req, const ExecuteOptions& execute) {
  GatherOptions options;
  options.execute = execute;
  return req.nd ? GatherNd(req.params.view(), req.indices.view(), req.batch_dims, options)
                : Gather(req.params.view(), req.indices.view(), req.axis, req.batch_dims, options);
}

ExecuteOptions Inline() { return ExecuteOptions{}; }
ExecuteOptions Pooled(int64_t min_parallel_bytes = ExecuteOptions{}.min_parallel_bytes) {
  ExecuteOptions o;
  o.pool = &Pool();
  o.min_parallel_bytes = min_parallel_bytes;
  return o;
}

// Runs `req` inline and pooled (default thresholds, and every request split), with streaming
// stores at their default threshold and off; all outputs must be byte-identical. Returns the
// inline output.
Tensor ExpectPoolMatchesInline(const GatherRequest& req) {
  absl::StatusOr<Tensor> inline_out = RunCore(req, Inline());
  EXPECT_THAT(inline_out, IsOk()) << req.DebugString();
  if (!inline_out.ok()) return Tensor();
  for (int64_t min_parallel : {ExecuteOptions{}.min_parallel_bytes, int64_t{1}}) {
    for (int64_t streaming : {ExecuteOptions{}.streaming_store_bytes, int64_t{0}}) {
      ExecuteOptions o = Pooled(min_parallel);
      o.streaming_store_bytes = streaming;
      const absl::StatusOr<Tensor> pooled = RunCore(req, o);
      EXPECT_TRUE(AgreesWithReference(pooled, inline_out))
          << req.DebugString() << " min_parallel_bytes=" << min_parallel
          << " streaming_store_bytes=" << streaming;
    }
  }
  return *std::move(inline_out);
}

// An independent check of a GatherNd-shaped result without batch dims: output row i (of
// `slice` elements) is params row fold(indices[i, 0..depth-1]) of params viewed as
// [rows, slice]. Gather along axis 0 is depth 1.
void ExpectRowsGathered(const Tensor& params, const Tensor& indices, int64_t depth,
                        const Tensor& out) {
  int64_t slice = 1;
  for (size_t d = depth; d < params.shape().size(); ++d) slice *= params.shape()[d];
  const int64_t tuples = indices.num_elements() / depth;
  const size_t esize = ElementSize(params.dtype());
  for (int64_t i = 0; i < tuples; ++i) {
    int64_t row = 0;
    for (int64_t k = 0; k < depth; ++k) {
      const int64_t dim = params.shape()[k];
      const int64_t v = ReadIndexValue(indices.view(), i * depth + k);
      row = row * dim + (v < 0 ? v + dim : v);
    }
    if (params.dtype() == DataType::kString) {
      for (int64_t j = 0; j < slice; ++j) {
        ASSERT_EQ(out.strings()[i * slice + j], params.strings()[row * slice + j]) << i;
      }
    } else {
      ASSERT_EQ(std::memcmp(out.bytes().data() + i * slice * esize,
                            params.bytes().data() + row * slice * esize, slice * esize),
                0)
          << "output row " << i;
    }
  }
}

GatherRequest Gather2d(DataType dtype, DataType index_dtype, int64_t rows, int64_t slice, int64_t n,
                       Rng& rng) {
  GatherRequest req;
  req.params = RandomTensor(dtype, {rows, slice}, rng);
  req.indices = RandomIndices(index_dtype, {n}, {rows}, rng);
  req.axis = 0;
  return req;
}

TEST(GatherParallel, LargeGathersMatchInlineForEveryElementSize) {
  Rng rng(1);
  struct Case {
    DataType dtype;
    int64_t slice;
    int64_t n;
  };
  const Case cases[] = {
      {DataType::kInt8, 1, 4 << 20},       // 4 MiB of 1-byte elements
      {DataType::kFloat64, 1, 1200000},    // 9.6 MiB of 8-byte elements
      {DataType::kFloat32, 64, 12000},     // 3 MiB, 256-byte slices
      {DataType::kFloat32, 64, 40000},     // 10 MiB: streaming stores
      {DataType::kComplex128, 3, 200000},  // 9.6 MiB, 48-byte slices: streaming
      {DataType::kInt16, 7, 700000},       // 9.8 MiB, 14-byte slices: no streaming
      {DataType::kBfloat16, 1, 300000},    // 600 KiB of 2-byte elements
      {DataType::kUint32, 1025, 2100},     // 8.6 MiB, long odd slices
  };
  for (const Case& c : cases) {
    for (DataType index_dtype : {DataType::kInt32, DataType::kInt64}) {
      const GatherRequest req = Gather2d(c.dtype, index_dtype, 4096, c.slice, c.n, rng);
      SCOPED_TRACE(req.DebugString());
      const Tensor out = ExpectPoolMatchesInline(req);
      ExpectRowsGathered(req.params, req.indices, 1, out);
    }
  }
}

TEST(GatherParallel, LargeStringGatherMatchesInline) {
  Rng rng(2);
  const GatherRequest req = Gather2d(DataType::kString, DataType::kInt64, 1000, 2, 100000, rng);
  const Tensor out = ExpectPoolMatchesInline(req);
  ExpectRowsGathered(req.params, req.indices, 1, out);
}

TEST(GatherParallel, LargeGatherNdMatchesInline) {
  Rng rng(3);
  GatherRequest req;
  req.nd = true;
  req.params = RandomTensor(DataType::kFloat32, {64, 64, 16}, rng);
  req.indices = RandomIndices(DataType::kInt32, {180000, 2}, {64, 64}, rng);  // 11 MiB
  const Tensor out = ExpectPoolMatchesInline(req);
  ExpectRowsGathered(req.params, req.indices, 2, out);

  GatherRequest batched;  // batch_dims 1: [8, 512, 32] uint16, 8 x 20000 rows of 64 bytes
  batched.nd = true;
  batched.batch_dims = 1;
  batched.params = RandomTensor(DataType::kUint16, {8, 512, 32}, rng);
  batched.indices = RandomIndices(DataType::kInt64, {8, 20000, 1}, {512}, rng);
  ExpectPoolMatchesInline(batched);
}

TEST(GatherParallel, LargeBatchedGatherWithOuterDimsMatchesInline) {
  Rng rng(4);
  GatherRequest req;  // [4, 16, 256, 8] int32, axis 2, batch_dims 1: output 6 MiB
  req.params = RandomTensor(DataType::kInt32, {4, 16, 256, 8}, rng);
  req.indices = RandomIndices(DataType::kInt64, {4, 3000}, {256}, rng);
  req.axis = -2;
  req.batch_dims = 1;
  ExpectPoolMatchesInline(req);
}

TEST(GatherParallel, ForcedSplittingOfMidSizeRandomRequestsMatchesReference) {
  // Outputs of up to 200K elements: most span several 64 KiB chunks of the pool.
  Rng rng(5);
  RandomRequestOptions options;
  options.max_params_rank = 4;
  options.max_indices_rank = 3;
  options.max_dim = 60;
  options.zero_probability = 0.02;
  options.max_elements = 200000;
  int passed = 0, split = 0;
  for (int i = 0; i < 64; ++i) {
    const DataType dtype = kAllDataTypes[i % std::size(kAllDataTypes)];
    const DataType index_dtype = i % 3 ? DataType::kInt64 : DataType::kInt32;
    GatherRequest req;
    for (int attempt = 0; attempt < 1000; ++attempt) {  // keep the large ones
      req = i % 2 ? RandomGatherNdRequest(dtype, index_dtype, rng, options)
                  : RandomGatherRequest(dtype, index_dtype, rng, options);
      const absl::StatusOr<GatherPlan> plan =
          req.nd ? PlanGatherNd(req.params.view(), req.indices.view(), req.batch_dims)
                 : PlanGather(req.params.view(), req.indices.view(), req.axis, req.batch_dims);
      if (plan.ok() && plan->output_bytes >= (int64_t{128} << 10)) break;
    }
    const absl::StatusOr<Tensor> want = RunReference(req);
    ExecuteOptions forced = Pooled(1);
    forced.streaming_store_bytes = 1;
    ASSERT_TRUE(AgreesWithReference(RunCore(req, forced), want)) << req.DebugString();
    ASSERT_TRUE(AgreesWithReference(RunCore(req, Inline()), want)) << req.DebugString();
    ++passed;
    // gather.cc's chunks copy at least 64 KiB: twice that means the pool really split it.
    if (want.ok() && (want->bytes().size() >= (size_t{128} << 10) ||
                      want->num_elements() >= (int64_t{32} << 10))) {
      ++split;
    }
  }
  ::testing::Test::RecordProperty("randomized_cases", passed);
  std::cout << "randomized cases passed: " << passed << " (mid-size, " << split << " split)"
            << std::endl;
  EXPECT_GE(split, 16);
}

// Writes out-of-range values at `bad_positions` of req.indices and expects every execution
// variant to report the lowest of them.
void ExpectLowestBadPosition(GatherRequest req, std::vector<int64_t> bad_positions, int64_t dim) {
  for (int64_t p : bad_positions) SetIndexValue(req.indices, p, dim + p % 5);
  const int64_t lowest = *std::min_element(bad_positions.begin(), bad_positions.end());
  const std::string want = ExpectedBadIndexMessage(req.indices.shape(), lowest,
                                                   ReadIndexValue(req.indices.view(), lowest), dim);
  for (const ExecuteOptions& o : {Inline(), Pooled(), Pooled(1)}) {
    EXPECT_THAT(RunCore(req, o), StatusIs(absl::StatusCode::kInvalidArgument, want))
        << req.DebugString();
  }
}

TEST(GatherParallel, SplitRequestReportsTheLowestBadPosition) {
  Rng rng(6);
  constexpr int64_t kN = 1 << 20;  // 16 MiB of 16-byte rows: split, streaming stores
  const GatherRequest req = Gather2d(DataType::kFloat32, DataType::kInt64, 1000, 4, kN, rng);
  ExpectLowestBadPosition(req.Clone(), {kN - 1}, 1000);  // the very last
  ExpectLowestBadPosition(req.Clone(), {kN - 1, kN / 2 + 7}, 1000);
  ExpectLowestBadPosition(req.Clone(), {2 * kN / 3, kN / 2, kN / 3 + 1, kN - 2}, 1000);
  ExpectLowestBadPosition(req.Clone(), {kN - 5, 0}, 1000);  // the very first
}

TEST(GatherParallel, SplitElementGatherReportsTheLowestBadPosition) {
  Rng rng(7);
  constexpr int64_t kN = 3 << 20;  // 3 MiB of int8 elements, int32 indices
  const GatherRequest req = Gather2d(DataType::kInt8, DataType::kInt32, 77, 1, kN, rng);
  ExpectLowestBadPosition(req.Clone(), {kN - 1, 2 * kN / 3, kN / 2 + 1}, 77);
}

TEST(GatherParallel, SplitGatherNdReportsTheLowestBadComponent) {
  Rng rng(8);
  GatherRequest req;
  req.nd = true;
  req.params = RandomTensor(DataType::kFloat64, {100, 50, 4}, rng);  // 32-byte rows
  req.indices = RandomIndices(DataType::kInt64, {400000, 2}, {100, 50}, rng);
  // Position 2t + 1 is the second component of tuple t (dimension 50).
  ExpectLowestBadPosition(req.Clone(), {2 * 399999 + 1, 2 * 300001 + 1, 2 * 250000 + 1}, 50);
}

TEST(GatherParallel, SplitStringGatherReportsTheLowestBadPosition) {
  Rng rng(9);
  const GatherRequest req = Gather2d(DataType::kString, DataType::kInt32, 100, 1, 300000, rng);
  ExpectLowestBadPosition(req.Clone(), {299999, 250000, 260000}, 100);
}

TEST(GatherParallel, EmptyOutputStillChecksEveryIndexAcrossThePool) {
  // Slices of zero elements: nothing to copy, but 200000 indices to check, split in chunks.
  Rng rng(10);
  const GatherRequest req = Gather2d(DataType::kFloat32, DataType::kInt64, 10, 0, 200000, rng);
  ExpectLowestBadPosition(req.Clone(), {199999, 150000}, 10);
  GatherRequest outer_empty;  // params [0, 10] gathered on axis 1: no output rows at all
  outer_empty.params = RandomTensor(DataType::kInt16, {0, 10}, rng);
  outer_empty.indices = RandomIndices(DataType::kInt32, {200000}, {10}, rng);
  outer_empty.axis = 1;
  ExpectLowestBadPosition(outer_empty.Clone(), {123457, 199998, 180000}, 10);
}

TEST(ExecuteGather, WritesIntoACallerOwnedMisalignedSlot) {
  Rng rng(11);
  const GatherRequest req = Gather2d(DataType::kFloat32, DataType::kInt64, 512, 16, 9000, rng);
  const Tensor want = *RunCore(req, Inline());
  const GatherPlan plan = *PlanGather(req.params.view(), req.indices.view(), req.axis, 0);
  ASSERT_EQ(plan.output_bytes, 9000 * 64);

  // Views may point anywhere: indices and params 1 or 8 bytes off their alignment, the output
  // 8 bytes off (so streaming stores must not assume 16-byte alignment).
  for (size_t offset : {size_t{1}, size_t{8}}) {
    std::vector<uint8_t> index_bytes(req.indices.bytes().size() + offset);
    std::memcpy(index_bytes.data() + offset, req.indices.bytes().data(),
                req.indices.bytes().size());
    TensorView indices = req.indices.view();
    indices.data = absl::MakeConstSpan(index_bytes).subspan(offset);
    std::vector<uint8_t> out_bytes(plan.output_bytes + 8);
    MutableTensorView out{DataType::kFloat32,
                          plan.output_shape,
                          absl::MakeSpan(out_bytes).subspan(8, plan.output_bytes),
                          {}};
    // Params too: one byte off for element copies, eight for slices.
    std::vector<uint8_t> params_bytes(req.params.bytes().size() + offset);
    std::memcpy(params_bytes.data() + offset, req.params.bytes().data(), req.params.bytes().size());
    TensorView params = req.params.view();
    params.data = absl::MakeConstSpan(params_bytes).subspan(offset);
    for (const ExecuteOptions& base : {Inline(), Pooled(1)}) {
      ExecuteOptions o = base;
      o.streaming_store_bytes = 1;
      ASSERT_THAT(ExecuteGather(plan, params, indices, out, o), IsOk());
      EXPECT_EQ(std::memcmp(out.data.data(), want.bytes().data(), plan.output_bytes), 0)
          << "offset " << offset;
    }
  }
}

// `req` (params [700, slice]) gathered from params aligned and `offset_off` bytes off, inline and
// pooled, with and without streaming stores, against the reference; then its lowest bad position.
void ExpectEveryCopyPath(GatherRequest req, DataType dtype, size_t offset_off) {
  for (size_t offset : {size_t{0}, offset_off}) {
    std::vector<uint8_t> params_bytes(req.params.bytes().size() + offset);
    std::memcpy(params_bytes.data() + offset, req.params.bytes().data(), req.params.bytes().size());
    TensorView params = req.params.view();
    params.data = absl::MakeConstSpan(params_bytes).subspan(offset);
    const GatherPlan plan = *PlanGather(params, req.indices.view(), 0, 0);
    for (const ExecuteOptions& base : {Inline(), Pooled(1)}) {
      for (int64_t streaming : {int64_t{0}, int64_t{1}}) {
        ExecuteOptions o = base;
        o.streaming_store_bytes = streaming;
        Tensor out = *Tensor::Allocate(dtype, plan.output_shape);
        ASSERT_THAT(ExecuteGather(plan, params, req.indices.view(), out.mutable_view(), o), IsOk());
        ExpectRowsGathered(req.params, req.indices, 1, out);
      }
    }
  }
  ExpectLowestBadPosition(std::move(req), {2999, 1234, 1500}, 700);
}

// Slices of 16 to 256 bytes that are a multiple of 16 are copied by fixed-size copiers (with
// and without streaming stores); their neighbours by the general ones. Every way, from params
// aligned and 8 bytes off, with an out-of-range value the lowest bad position reported.
TEST(GatherParallel, FixedSizeSlicesMatchTheReferenceEveryWayTheyAreCopied) {
  Rng rng(13);
  for (int64_t slice_bytes : {16, 32, 48, 64, 80, 128, 192, 256, 272}) {
    for (DataType dtype : {DataType::kInt8, DataType::kFloat32, DataType::kComplex128}) {
      const int64_t slice = slice_bytes / static_cast<int64_t>(ElementSize(dtype));
      const DataType index_dtype = slice_bytes % 32 ? DataType::kInt32 : DataType::kInt64;
      GatherRequest req = Gather2d(dtype, index_dtype, 700, slice, 3000, rng);
      ExpectEveryCopyPath(std::move(req), dtype, 8);
    }
  }
}

// Slices of 1, 2, 4 and 8 bytes take the single element's copier whatever their element count
// ([rows, 2] float32 as [rows] float64); their neighbours of 3, 6, 12 and 16 bytes the others.
// Every way, from params aligned and 1 byte off, with the lowest bad position reported.
TEST(GatherParallel, SmallSlicesMatchTheReferenceEveryWayTheyAreCopied) {
  Rng rng(14);
  for (int64_t slice_bytes : {1, 2, 3, 4, 6, 8, 12, 16}) {
    for (DataType dtype : {DataType::kInt8, DataType::kFloat16, DataType::kFloat32}) {
      const int64_t esize = static_cast<int64_t>(ElementSize(dtype));
      if (slice_bytes % esize != 0) continue;
      const DataType index_dtype = slice_bytes % 2 ? DataType::kInt32 : DataType::kInt64;
      GatherRequest req = Gather2d(dtype, index_dtype, 700, slice_bytes / esize, 3000, rng);
      ExpectEveryCopyPath(std::move(req), dtype, 1);
    }
  }
}

TEST(GatherParallel, ConcurrentCallersShareOnePool) {
  Rng rng(12);
  const GatherRequest req = Gather2d(DataType::kUint64, DataType::kInt32, 2048, 32, 4000, rng);
  const Tensor want = *RunCore(req, Inline());  // 1 MiB: split on the pool
  std::vector<std::thread> callers;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&] {
      for (int i = 0; i < 10; ++i) {
        const absl::StatusOr<Tensor> got = RunCore(req, Pooled());
        if (!got.ok() || !IdenticalTensors(got->view(), want.view())) mismatches.fetch_add(1);
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace tensorcompute::core
