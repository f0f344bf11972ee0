// CudaExecutor::UpdateRows (core/cuda/cuda_executor.h): rows of a resident table rewritten in
// its device copy. Compiled into cuda_test (a real GPU; skipped, visibly, without one) and into
// cuda_fake_test (the fake runtime, whose scatter and gather kernels are their host twins). After
// each update every row of the table is read back by a gather through the executor on the device
// copy (the tasks' params views show zeros on the host, so a gather that did not read the copy
// comes back wrong), concurrently on several streams, and compared byte for byte with a host
// mirror updated by memcpy. Rows of every copy width (row sizes not a multiple of 4 included),
// updates of one row to several staging windows, rows larger than a staging buffer, no rows,
// and the argument errors. Faults (CUDA errors, lost devices) are in cuda_fake_fault_test.cc.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/cuda/cuda_executor.h"
#include "core/dtype.h"
#include "core/gather_plan.h"
#include "tests/cuda/executor_fixture.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::cuda {
namespace {

using ::tensorcompute::cuda::test_support::kBatchTimeout;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::RandomTensor;
using ::tensorcompute::testing::Rng;
using ::tensorcompute::testing::StatusIs;
using ::tensorcompute::testing::UniformInt;
using ::testing::HasSubstr;

// A resident table on device 0 and what it should hold.
struct LiveTable {
  std::shared_ptr<const core::ResidentTensor> entry;  // tensor: as uploaded
  core::Tensor expected;  // the uploaded bytes with every update applied by memcpy
  core::Tensor zeros;     // what the gathers' params views show on the host
  int64_t rows = 0;
  int64_t row_bytes = 0;
};

// Uploads `tensor` (rank >= 1, rows >= 1) to device 0.
std::unique_ptr<LiveTable> Upload(CudaExecutor& executor, core::Tensor tensor) {
  absl::StatusOr<core::DeviceCopy> copy = executor.UploadTable(0, tensor);
  EXPECT_THAT(copy, IsOk());
  if (!copy.ok()) return nullptr;
  auto table = std::make_unique<LiveTable>();
  table->rows = tensor.shape()[0];
  table->row_bytes = static_cast<int64_t>(tensor.bytes().size()) / table->rows;
  table->expected = tensor.Clone();
  table->zeros = tensor.Clone();
  std::memset(table->zeros.mutable_bytes().data(), 0, table->zeros.mutable_bytes().size());
  auto entry = std::make_shared<core::ResidentTensor>();
  entry->name = "live";
  entry->tensor = std::move(tensor);
  entry->device = "gpu:0";
  entry->device_copy = *std::move(copy);
  table->entry = std::move(entry);
  return table;
}

// Writes random bytes to `rows` of `table` through UpdateRows, and to its mirror by memcpy.
absl::Status UpdateRandomly(CudaExecutor& executor, LiveTable& table,
                            const std::vector<int64_t>& rows, Rng& rng) {
  std::vector<uint8_t> packed(rows.size() * table.row_bytes);
  for (uint8_t& b : packed) b = static_cast<uint8_t>(rng());
  for (size_t i = 0; i < rows.size(); ++i) {
    std::memcpy(table.expected.mutable_bytes().data() + rows[i] * table.row_bytes,
                packed.data() + i * table.row_bytes, table.row_bytes);
  }
  return executor.UpdateRows(table.entry->device_copy, rows, table.row_bytes, packed);
}

// `count` distinct rows of [0, rows), in random order.
std::vector<int64_t> DistinctRows(int64_t rows, int64_t count, Rng& rng) {
  std::vector<int64_t> all(rows);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(count);
  return all;
}

// One gather of every row of `table`, in order, on its device copy.
struct ReadBack {
  core::Tensor indices;
  core::Tensor output;
  absl::Status got = absl::UnknownError("done was never called");
  absl::Notification finished;
};

// Starts `n` read-backs of `table` as `n` batches at once (they spread over the streams), waits
// for all, and checks each against the mirror, byte for byte.
void ExpectGathersReadTheMirror(CudaExecutor& executor, const LiveTable& table, int n) {
  std::vector<std::unique_ptr<ReadBack>> reads;
  for (int k = 0; k < n; ++k) {
    auto read = std::make_unique<ReadBack>();
    read->indices = *core::Tensor::Allocate(core::DataType::kInt64, {table.rows});
    for (int64_t r = 0; r < table.rows; ++r) {
      std::memcpy(read->indices.mutable_bytes().data() + r * sizeof(r), &r, sizeof(r));
    }
    absl::StatusOr<core::GatherPlan> plan =
        core::PlanGather(table.zeros.view(), read->indices.view(), 0, 0);
    ASSERT_THAT(plan, IsOk());
    read->output = *core::Tensor::Allocate(plan->dtype, plan->output_shape);
    auto task = std::make_unique<batching::Task>();
    task->plan = *plan;
    task->params = table.zeros.view();
    task->table = table.entry;
    task->indices = read->indices.view();
    task->output = read->output.mutable_view();
    task->done = [r = read.get()](absl::Status status) { r->got = std::move(status); };
    batching::Batch batch;
    batch.push_back(std::move(task));
    executor.Run(std::move(batch), [r = read.get()] { r->finished.Notify(); });
    reads.push_back(std::move(read));
  }
  for (size_t k = 0; k < reads.size(); ++k) {
    ASSERT_TRUE(reads[k]->finished.WaitForNotificationWithTimeout(kBatchTimeout));
    ASSERT_THAT(reads[k]->got, IsOk());
    const absl::Span<const uint8_t> want = table.expected.bytes();
    const absl::Span<const uint8_t> have = reads[k]->output.bytes();
    ASSERT_EQ(have.size(), want.size());
    const auto [at_want, at_have] = std::mismatch(want.begin(), want.end(), have.begin());
    EXPECT_EQ(at_want, want.end()) << "read-back " << k << ": first difference in row "
                                   << (at_want - want.begin()) / table.row_bytes;
  }
}

class CudaExecutorUpdateTest : public test_support::CudaExecutorFixture {};

// Rows of 1, 2, 4, 8 and 16-byte chunks, odd widths among them (7, 6, 20, 24, 80 and 1 bytes);
// each table is updated three times (a few rows, one row, half the rows), and read back after
// each update by four gathers on different streams.
TEST_F(CudaExecutorUpdateTest, LaterGathersOnEveryStreamReadTheUpdatedRows) {
  CudaExecutorOptions options;
  options.streams_per_device = 4;
  std::unique_ptr<CudaExecutor> executor = MakeExecutor(options);
  ASSERT_NE(executor, nullptr);
  Rng rng(0x11fe);
  struct Shape {
    core::DataType dtype;
    int64_t rows;
    int64_t dim;
  };
  for (const Shape s :
       {Shape{core::DataType::kInt8, 301, 7}, Shape{core::DataType::kFloat16, 200, 3},
        Shape{core::DataType::kFloat32, 100, 5}, Shape{core::DataType::kFloat64, 64, 3},
        Shape{core::DataType::kComplex128, 40, 5}, Shape{core::DataType::kUint8, 10, 1}}) {
    SCOPED_TRACE(::testing::Message()
                 << core::DataTypeName(s.dtype) << " [" << s.rows << ", " << s.dim << "]");
    std::unique_ptr<LiveTable> table =
        Upload(*executor, RandomTensor(s.dtype, {s.rows, s.dim}, rng));
    ASSERT_NE(table, nullptr);
    for (const int64_t count : {UniformInt(rng, 2, 9), int64_t{1}, s.rows / 2}) {
      ASSERT_THAT(UpdateRandomly(*executor, *table, DistinctRows(s.rows, count, rng), rng), IsOk());
      ExpectGathersReadTheMirror(*executor, *table, 4);
    }
  }
}

// 150,000 rows of 256 bytes (about 39 MiB with their row numbers): three staging windows of
// 63,550 rows, the third reusing the first's buffers. Every row is rewritten, in random order;
// then a tenth of them again.
TEST_F(CudaExecutorUpdateTest, AnUpdateLargerThanAStagingBufferGoesInWindows) {
  std::unique_ptr<CudaExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  Rng rng(0x3a1d);
  const int64_t rows = 150000;
  std::unique_ptr<LiveTable> table =
      Upload(*executor, RandomTensor(core::DataType::kUint32, {rows, 64}, rng));
  ASSERT_NE(table, nullptr);
  ASSERT_THAT(UpdateRandomly(*executor, *table, DistinctRows(rows, rows, rng), rng), IsOk());
  ExpectGathersReadTheMirror(*executor, *table, 2);
  ASSERT_THAT(UpdateRandomly(*executor, *table, DistinctRows(rows, rows / 10, rng), rng), IsOk());
  ExpectGathersReadTheMirror(*executor, *table, 2);
}

// Rows of 16 MiB and 3 bytes do not fit a staging window: each is copied on its own.
TEST_F(CudaExecutorUpdateTest, RowsLargerThanAStagingBufferAreCopiedOneByOne) {
  std::unique_ptr<CudaExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  Rng rng(0xb16);
  const int64_t row_bytes = (int64_t{16} << 20) + 3;
  std::unique_ptr<LiveTable> table =
      Upload(*executor, RandomTensor(core::DataType::kUint8, {3, row_bytes}, rng));
  ASSERT_NE(table, nullptr);
  ASSERT_THAT(UpdateRandomly(*executor, *table, {2, 0}, rng), IsOk());
  ExpectGathersReadTheMirror(*executor, *table, 1);
}

TEST_F(CudaExecutorUpdateTest, NoRowsChangeNothingAndBadArgumentsAreRefused) {
  std::unique_ptr<CudaExecutor> executor = MakeExecutor();
  ASSERT_NE(executor, nullptr);
  Rng rng(0xa4c);
  std::unique_ptr<LiveTable> table =
      Upload(*executor, RandomTensor(core::DataType::kFloat32, {16, 4}, rng));
  ASSERT_NE(table, nullptr);
  EXPECT_THAT(executor->UpdateRows(table->entry->device_copy, {}, table->row_bytes, {}), IsOk());
  const std::vector<uint8_t> packed(16, 0);
  core::DeviceCopy elsewhere = table->entry->device_copy;
  elsewhere.gpu = 7;
  EXPECT_THAT(executor->UpdateRows(elsewhere, {1}, 16, packed),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("GPU 7 is not one of")));
  EXPECT_THAT(executor->UpdateRows(table->entry->device_copy, {1, 2}, 16, packed),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cannot have 16 bytes")));
  ExpectGathersReadTheMirror(*executor, *table, 1);  // as uploaded
}

}  // namespace
}  // namespace tensorcompute::cuda
