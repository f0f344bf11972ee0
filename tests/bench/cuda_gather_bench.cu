// The batch kernels on device-resident data against a device-to-device copy of the same bytes,
// measured in the same run (docs/gpu-results.md). No PCIe transfer is timed: this is the
// kernels' own efficiency; end-to-end figures come from `tensorcompute load` against the
// server (the GPU kit, tools/gpu_kit.sh).
//
// Gathers (float32 params of --params_mib MiB, random rows, int32 indices, one task per launch,
// output of --output_mib MiB): rows of 4 B (scalar gather: elements/s), 64 B, 1 KiB, 64 KiB;
// a batch of 32 tasks of rows of 256 B (one launch over a descriptor table of 32). Each case is
// run with the unrolled kernel (LaunchArgs::unroll = kGatherUnroll) and the one-unit kernel
// (unroll 1), each timed against its own D2D copy of the output's size.
//
// EmbeddingBag (bag_kernel.h): tables of --bag_table_mib MiB (default 1024) read in place as a
// resident table's device copy is, --bag_lookups random int64 indices (default 262,144) in bags
// of 32 with int64 offsets: SUM, MEAN, MAX and SQRTN of float32 rows of 256 B; weighted SUM
// (float32 weights); SUM of float16 and of bfloat16 rows of 256 B; SUM of a float32 table of
// dim 64 stored as float16 (128 B rows) and as 8-bit row-wise (72 B rows); SUM over bags of
// 1024 and of 8192 (--long_bag_lookups indices, default 4,194,304); and the gather of the
// same rows as the first case (same table, same indices), with both gather kernels. Reported:
// rows read per second, their stored bytes per second, and the ratio to a D2D copy of as many
// bytes.
//
// Each point: --repetitions timed runs of --iterations launches (cudaEvent timing), the first
// run a warmup; tables show medians. Every output is checked against the kernels' host twins
// (RunBatchOnHost, RunBagBatchOnHost) before its row is printed; a mismatch exits 1. Device
// memory stays under ~5 GiB with the defaults.
//
// Run: build/tests/bench/cuda_gather_bench [--repetitions 5 --iterations 20]

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "core/cuda/bag_batch.h"
#include "core/cuda/bag_kernel.h"
#include "core/cuda/gather_batch.h"
#include "core/cuda/gather_kernel.h"
#include "core/embedding_bag.h"
#include "core/gather_plan.h"
#include "core/tensor.h"

namespace {

namespace core = tensorcompute::core;
namespace cuda = tensorcompute::cuda;
using core::DataType;
using core::EmbeddingBagMode;
using core::Tensor;

#define CHECK_CUDA(expr)                                                                      \
  do {                                                                                        \
    const cudaError_t e = (expr);                                                             \
    if (e != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorName(e)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

int Flag(int argc, char** argv, const char* name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  }
  return fallback;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Run {
  int repetitions;
  int iterations;
  int sm_count;
};

// Device memory freed on scope exit.
struct DeviceBuffer {
  uint8_t* data = nullptr;
  explicit DeviceBuffer(uint64_t bytes) {
    CHECK_CUDA(cudaMalloc(&data, std::max<uint64_t>(bytes, 1)));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { CHECK_CUDA(cudaFree(data)); }
};

// Fills `bytes` fast (a table of a GiB from std::mt19937_64 would take seconds): xorshift64*.
// `word(x)` maps each random 64-bit value to the 8 bytes stored.
template <typename Word>
void Fill(absl::Span<uint8_t> bytes, uint64_t seed, const Word& word) {
  uint64_t s = seed | 1;
  for (size_t i = 0; i + 8 <= bytes.size(); i += 8) {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    const uint64_t v = word(s * 0x2545F4914F6CDD1DULL);
    std::memcpy(bytes.data() + i, &v, 8);
  }
}

// Values in [1, 2) of each element type, so that sums stay finite.
uint64_t Float32Pair(uint64_t r) { return (r & 0x007FFFFF007FFFFFULL) | 0x3F8000003F800000ULL; }
uint64_t Half4(uint64_t r) { return (r & 0x03FF03FF03FF03FFULL) | 0x3C003C003C003C00ULL; }
uint64_t Bfloat4(uint64_t r) { return (r & 0x007F007F007F007FULL) | 0x3F803F803F803F80ULL; }

// Times `launch` and a D2D copy of `bytes` from `src` to `dst`, each over `iterations` calls
// per repetition (the first repetition a warmup); returns the medians in GB/s of `bytes`.
template <typename Launch>
std::pair<double, double> TimeAgainstCopy(const Launch& launch, double bytes, uint8_t* dst,
                                          const uint8_t* src, const Run& run) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  std::vector<double> kernel, copy;
  for (int rep = 0; rep < run.repetitions + 1; ++rep) {
    float ms = 0;
    CHECK_CUDA(cudaEventRecord(start));
    for (int i = 0; i < run.iterations; ++i) launch();
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    if (rep > 0) kernel.push_back(bytes * run.iterations / (ms * 1e-3) / 1e9);
    CHECK_CUDA(cudaEventRecord(start));
    for (int i = 0; i < run.iterations; ++i) {
      CHECK_CUDA(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice));
    }
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    if (rep > 0) copy.push_back(bytes * run.iterations / (ms * 1e-3) / 1e9);
  }
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  return {Median(kernel), Median(copy)};
}

// Exits unless the device's output buffer (copied back) matches `expected` in every task's
// flag and output region.
void CheckOutput(const char* what, const uint8_t* device_out, uint64_t output_bytes,
                 uint64_t flags_offset, const std::vector<std::pair<uint64_t, uint64_t>>& regions,
                 const std::vector<uint8_t>& expected) {
  std::vector<uint8_t> got(output_bytes);
  CHECK_CUDA(cudaMemcpy(got.data(), device_out, output_bytes, cudaMemcpyDeviceToHost));
  bool same = std::memcmp(got.data() + flags_offset, expected.data() + flags_offset,
                          regions.size() * sizeof(uint64_t)) == 0;
  for (const auto& [offset, bytes] : regions) {
    same = same && std::memcmp(got.data() + offset, expected.data() + offset, bytes) == 0;
  }
  if (!same) {
    std::fprintf(stderr, "%s: the device's output differs from the host twin's\n", what);
    std::exit(1);
  }
}

// ---- Gathers ----

struct GatherResult {
  double gbps[2];  // unroll kGatherUnroll, unroll 1
  double copy_gbps[2];
};

// Times both gather kernels on a batch already on the device (`d_in`, its `layout`), against
// D2D copies of `bytes`, and checks each output against the host twin run over `host_layout`
// and `host_in` (the same batch with host addresses for resident params).
GatherResult TimeGatherKernels(const char* name, const cuda::BatchLayout& layout,
                               const uint8_t* d_in, const cuda::BatchLayout& host_layout,
                               const std::vector<uint8_t>& host_in,
                               const std::vector<uint64_t>& task_output_bytes, double bytes,
                               const Run& run) {
  std::vector<uint8_t> expected(layout.output_bytes, 0);
  cuda::ResetFlags(host_layout, expected.data());
  cuda::RunBatchOnHost(host_layout, host_in.data(), expected.data());
  std::vector<std::pair<uint64_t, uint64_t>> regions;
  for (size_t t = 0; t < layout.descs.size(); ++t) {
    regions.push_back({layout.descs[t].output_offset, task_output_bytes[t]});
  }
  DeviceBuffer d_out(layout.output_bytes), d_copy(static_cast<uint64_t>(bytes));
  cuda::LaunchArgs args;
  args.num_tasks = static_cast<int>(layout.descs.size());
  args.total_units = layout.total_units;
  args.fits_32bit = layout.fits_32bit;
  args.descs_offset = layout.descs_offset;
  args.dims_offset = layout.dims_offset;
  args.flags_offset = layout.flags_offset;
  args.uniform_vector_bytes = layout.uniform_vector_bytes;
  GatherResult result;
  const int unrolls[2] = {cuda::kGatherUnroll, 1};
  for (int k = 0; k < 2; ++k) {
    args.unroll = unrolls[k];
    // 0xff: every flag kNoBadIndex, every output byte garbage the kernel must overwrite.
    CHECK_CUDA(cudaMemset(d_out.data, 0xff, layout.output_bytes));
    const auto [gbps, copy_gbps] = TimeAgainstCopy(
        [&] {
          if (!cuda::LaunchGatherBatch(args, d_in, d_out.data, run.sm_count, nullptr).ok()) {
            std::exit(1);
          }
        },
        bytes, d_copy.data, d_out.data, run);
    result.gbps[k] = gbps;
    result.copy_gbps[k] = copy_gbps;
    CheckOutput(name, d_out.data, layout.output_bytes, layout.flags_offset, regions, expected);
  }
  return result;
}

// One gather case: `tasks` gathers of rows of `row_bytes` from params of `params_bytes`,
// together `out_bytes` of output. Prints one table row.
void MeasureGather(const char* name, int64_t row_bytes, int64_t params_bytes, int64_t out_bytes,
                   int tasks, const Run& run) {
  std::mt19937_64 rng(7);
  const int64_t rows = params_bytes / row_bytes;
  const int64_t rows_out = out_bytes / row_bytes / tasks;
  Tensor params = *Tensor::Allocate(DataType::kFloat32, {rows, row_bytes / 4});
  Fill(params.mutable_bytes(), 7, [](uint64_t r) { return r; });
  std::vector<Tensor> indices;
  std::vector<core::GatherPlan> plans;
  for (int t = 0; t < tasks; ++t) {
    Tensor idx = *Tensor::Allocate(DataType::kInt32, {rows_out});
    auto* v = reinterpret_cast<int32_t*>(idx.mutable_bytes().data());
    for (int64_t i = 0; i < rows_out; ++i) v[i] = static_cast<int32_t>(rng() % rows);
    plans.push_back(*core::PlanGather(params.view(), idx.view(), 0, 0));
    indices.push_back(std::move(idx));
  }
  std::vector<const core::GatherPlan*> plan_ptrs;
  std::vector<core::TensorView> pv(tasks, params.view()), iv;
  std::vector<const core::TensorView*> pp, ip;
  std::vector<uint64_t> task_bytes;
  for (int t = 0; t < tasks; ++t) iv.push_back(indices[t].view());
  for (int t = 0; t < tasks; ++t) {
    plan_ptrs.push_back(&plans[t]);
    pp.push_back(&pv[t]);
    ip.push_back(&iv[t]);
    task_bytes.push_back(plans[t].output_bytes);
  }
  const cuda::BatchLayout layout = cuda::PlanBatch(plan_ptrs);
  std::vector<uint8_t> host_in(layout.input_bytes);
  cuda::PackInput(layout, pp, ip, host_in.data());
  DeviceBuffer d_in(layout.input_bytes);
  CHECK_CUDA(cudaMemcpy(d_in.data, host_in.data(), layout.input_bytes, cudaMemcpyHostToDevice));
  const double bytes = static_cast<double>(rows_out) * row_bytes * tasks;
  const GatherResult r =
      TimeGatherKernels(name, layout, d_in.data, layout, host_in, task_bytes, bytes, run);
  std::string elements;
  if (row_bytes == 4) {
    char text[64];
    std::snprintf(text, sizeof(text), "%.1f / %.1f", r.gbps[0] / 4, r.gbps[1] / 4);
    elements = text;
  }
  std::printf("| %s | %.0f | %.0f | %.2f | %.0f | %.2f | %.2fx | %s |\n", name, r.copy_gbps[0],
              r.gbps[0], r.gbps[0] / r.copy_gbps[0], r.gbps[1], r.gbps[1] / r.copy_gbps[1],
              r.gbps[0] / r.gbps[1], elements.c_str());
  std::fflush(stdout);
}

// ---- EmbeddingBag ----

// A table resident on the device, and its host copy (for the host twin).
struct Table {
  Tensor host;
  core::TableEncoding encoding = core::TableEncoding::kNone;
  std::unique_ptr<DeviceBuffer> device;
};

// One EmbeddingBag case on `table`.
struct BagCase {
  const char* name;
  EmbeddingBagMode mode = EmbeddingBagMode::kSum;
  bool weighted = false;
  int64_t bag = 32;
  int64_t lookups = 0;
};

// Random int64 indices into `rows` rows, and offsets of bags of `bag`.
struct Lookups {
  Tensor indices, offsets, weights;
  Lookups(int64_t rows, int64_t lookups, int64_t bag, uint64_t seed) {
    const int64_t bags = lookups / bag;
    std::mt19937_64 rng(seed);
    indices = *Tensor::Allocate(DataType::kInt64, {bags * bag});
    auto* idx = reinterpret_cast<int64_t*>(indices.mutable_bytes().data());
    for (int64_t i = 0; i < bags * bag; ++i) idx[i] = static_cast<int64_t>(rng() % rows);
    offsets = *Tensor::Allocate(DataType::kInt64, {bags});
    auto* off = reinterpret_cast<int64_t*>(offsets.mutable_bytes().data());
    for (int64_t b = 0; b < bags; ++b) off[b] = b * bag;
    weights = *Tensor::Allocate(DataType::kFloat32, {bags * bag});
    Fill(weights.mutable_bytes(), seed + 1, Float32Pair);
  }
};

// Prints one row of the EmbeddingBag table.
void PrintBagRow(const std::string& name, double rows_read, double read_bytes, double gbps,
                 double copy_gbps) {
  const double rows_per_s = gbps * 1e9 * rows_read / read_bytes;
  std::printf("| %s | %.0f | %.1f | %.0f | %.2f |\n", name.c_str(), rows_per_s / 1e6, gbps,
              copy_gbps, gbps / copy_gbps);
  std::fflush(stdout);
}

// Times the EmbeddingBag kernel on `c` over `table`; prints its row and returns rows/s.
double MeasureBag(const BagCase& c, const Table& table, const Lookups& lookups, const Run& run) {
  const core::TensorView tv = table.host.view(), iv = lookups.indices.view(),
                         ov = lookups.offsets.view(), wv = lookups.weights.view();
  core::EmbeddingBagOptions options;
  options.mode = c.mode;
  options.params_encoding = table.encoding;
  const core::EmbeddingBagPlan plan =
      *core::PlanEmbeddingBag(tv, iv, &ov, c.weighted ? &wv : nullptr, options);
  cuda::BagTaskInputs task{&plan, &tv, &iv, &ov, c.weighted ? &wv : nullptr, table.device->data};
  const cuda::BagLayout layout = cuda::PlanBagBatch({&task, 1});
  std::vector<uint8_t> host_in(layout.input_bytes);
  cuda::PackBagInput(layout, {&task, 1}, host_in.data());
  const double rows_read = static_cast<double>(plan.num_indices);
  const double read_bytes = rows_read * plan.row_bytes;
  DeviceBuffer d_in(layout.input_bytes), d_out(layout.output_bytes);
  DeviceBuffer d_copy(static_cast<uint64_t>(read_bytes)),
      d_copy_src(static_cast<uint64_t>(read_bytes));
  CHECK_CUDA(cudaMemcpy(d_in.data, host_in.data(), layout.input_bytes, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemset(d_out.data, 0xff, layout.output_bytes));
  cuda::BagLaunchArgs args;
  args.num_tasks = 1;
  args.total_units = layout.total_units;
  args.descs_offset = layout.descs_offset;
  args.flags_offset = layout.flags_offset;
  const auto [gbps, copy_gbps] = TimeAgainstCopy(
      [&] {
        if (!cuda::LaunchBagBatch(args, d_in.data, d_out.data, run.sm_count, nullptr).ok()) {
          std::exit(1);
        }
      },
      read_bytes, d_copy.data, d_copy_src.data, run);
  // The host twin on the host copy of the table (its host address in place of the device's).
  task.resident_params = table.host.bytes().data();
  const cuda::BagLayout host_layout = cuda::PlanBagBatch({&task, 1});
  cuda::PackBagInput(host_layout, {&task, 1}, host_in.data());
  std::vector<uint8_t> expected(layout.output_bytes, 0);
  cuda::ResetBagFlags(host_layout, expected.data());
  cuda::RunBagBatchOnHost(host_layout, host_in.data(), expected.data());
  CheckOutput(c.name, d_out.data, layout.output_bytes, layout.flags_offset,
              {{layout.descs[0].output_offset, static_cast<uint64_t>(plan.output_bytes)}},
              expected);
  PrintBagRow(c.name, rows_read, read_bytes, gbps, copy_gbps);
  return gbps * 1e9 / plan.row_bytes;
}

// The gather of the rows that `lookups` name from `table` (float32, resident), with both
// kernels; prints two rows and returns the unrolled kernel's rows/s.
double MeasureGatherOfRows(const Table& table, const Lookups& lookups, const Run& run) {
  const core::TensorView tv = table.host.view(), iv = lookups.indices.view();
  const core::GatherPlan plan = *core::PlanGather(tv, iv, 0, 0);
  const core::GatherPlan* plans[1] = {&plan};
  const core::TensorView* pp[1] = {&tv};
  const core::TensorView* ip[1] = {&iv};
  const void* device_table[1] = {table.device->data};
  const void* host_table[1] = {tv.data.data()};
  const cuda::BatchLayout layout = cuda::PlanBatch(plans, device_table);
  const cuda::BatchLayout host_layout = cuda::PlanBatch(plans, host_table);
  std::vector<uint8_t> host_in(layout.input_bytes);
  cuda::PackInput(layout, pp, ip, host_in.data());  // resident: tables and indices only
  DeviceBuffer d_in(layout.input_bytes);
  CHECK_CUDA(cudaMemcpy(d_in.data, host_in.data(), layout.input_bytes, cudaMemcpyHostToDevice));
  cuda::PackInput(host_layout, pp, ip, host_in.data());
  const double rows = static_cast<double>(plan.output_rows());
  const double bytes = static_cast<double>(plan.output_bytes);
  const GatherResult r =
      TimeGatherKernels("gather of the same rows", layout, d_in.data, host_layout, host_in,
                        {static_cast<uint64_t>(bytes)}, bytes, run);
  PrintBagRow("Gather of the same rows, unrolled kernel", rows, bytes, r.gbps[0], r.copy_gbps[0]);
  PrintBagRow("Gather of the same rows, one-unit kernel", rows, bytes, r.gbps[1], r.copy_gbps[1]);
  return r.gbps[0] * 1e9 / plan.slice_bytes();
}

// A table of about `table_bytes` of `dtype` [rows, cols] (a compact `encoding`'s stored form
// when set), random values from `word`, uploaded.
Table MakeTable(DataType dtype, core::TableEncoding encoding, int64_t table_bytes, int64_t cols,
                uint64_t (*word)(uint64_t)) {
  const int64_t row_bytes = cols * core::ElementSize(dtype);
  Table table;
  table.host = *Tensor::Allocate(dtype, {table_bytes / row_bytes, cols});
  table.encoding = encoding;
  Fill(table.host.mutable_bytes(), 11, word);
  if (encoding == core::TableEncoding::kRowwise8) {  // scale and bias of every row: sane
    const float scale = 1.0f / 128, bias = -1.0f;
    for (int64_t r = 0; r < table.host.shape()[0]; ++r) {
      uint8_t* trailer = table.host.mutable_bytes().data() + r * row_bytes + (cols - 8);
      std::memcpy(trailer, &scale, 4);
      std::memcpy(trailer + 4, &bias, 4);
    }
  }
  table.device = std::make_unique<DeviceBuffer>(table.host.bytes().size());
  CHECK_CUDA(cudaMemcpy(table.device->data, table.host.bytes().data(), table.host.bytes().size(),
                        cudaMemcpyHostToDevice));
  return table;
}

void MeasureBags(int64_t table_bytes, int64_t lookups, int64_t long_lookups, const Run& run) {
  std::printf("\n| EmbeddingBag case | M rows/s | rows read GB/s | D2D copy GB/s | ratio |\n");
  std::printf("|---|---:|---:|---:|---:|\n");
  double bag_rows = 0, gather_rows = 0;
  {  // float32 rows of 256 B
    const Table f32 =
        MakeTable(DataType::kFloat32, core::TableEncoding::kNone, table_bytes, 64, Float32Pair);
    const int64_t rows = f32.host.shape()[0];
    const Lookups l32(rows, lookups, 32, 1);
    bag_rows = MeasureBag({"SUM, float32, bags of 32", EmbeddingBagMode::kSum}, f32, l32, run);
    gather_rows = MeasureGatherOfRows(f32, l32, run);
    MeasureBag({"MEAN, float32, bags of 32", EmbeddingBagMode::kMean}, f32, l32, run);
    MeasureBag({"MAX, float32, bags of 32", EmbeddingBagMode::kMax}, f32, l32, run);
    MeasureBag({"SQRTN, float32, bags of 32", EmbeddingBagMode::kSqrtn}, f32, l32, run);
    MeasureBag({"weighted SUM, float32, bags of 32", EmbeddingBagMode::kSum, true}, f32, l32, run);
    for (int64_t bag : {1024, 8192}) {
      const Lookups longer(rows, long_lookups, bag, 2);
      const std::string name = "SUM, float32, bags of " + std::to_string(bag);
      MeasureBag({name.c_str(), EmbeddingBagMode::kSum, false, bag}, f32, longer, run);
    }
  }
  struct Other {
    const char* name;
    DataType dtype;
    core::TableEncoding encoding;
    int64_t cols;
    uint64_t (*word)(uint64_t);
  } others[] = {
      {"SUM, float16, bags of 32", DataType::kFloat16, core::TableEncoding::kNone, 128, Half4},
      {"SUM, bfloat16, bags of 32", DataType::kBfloat16, core::TableEncoding::kNone, 128, Bfloat4},
      {"SUM, float32 table stored float16 (128 B rows), bags of 32", DataType::kFloat16,
       core::TableEncoding::kFloat16, 64, Half4},
      {"SUM, float32 table stored 8-bit row-wise (72 B rows), bags of 32", DataType::kUint8,
       core::TableEncoding::kRowwise8, 72, [](uint64_t r) { return r; }},
  };
  for (const Other& o : others) {
    const Table t = MakeTable(o.dtype, o.encoding, table_bytes, o.cols, o.word);
    const Lookups l(t.host.shape()[0], lookups, 32, 3);
    MeasureBag({o.name}, t, l, run);
  }
  std::printf(
      "\nSUM float32 bags of 32 read rows at %.2fx the rate of the gather of the same rows "
      "(unrolled kernel).\n",
      bag_rows / gather_rows);
}

}  // namespace

int main(int argc, char** argv) {
  Run run;
  run.repetitions = Flag(argc, argv, "--repetitions", 5);
  run.iterations = Flag(argc, argv, "--iterations", 20);
  const int64_t params_bytes = int64_t{Flag(argc, argv, "--params_mib", 256)} << 20;
  const int64_t out_bytes = int64_t{Flag(argc, argv, "--output_mib", 256)} << 20;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "cuda_gather_bench: no CUDA device\n");
    return 2;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  run.sm_count = prop.multiProcessorCount;
  std::printf("device: %s, %d SMs\n\n", prop.name, prop.multiProcessorCount);
  if (!cuda::ProbeGatherKernels().ok() || !cuda::ProbeBagKernels().ok()) {
    std::fprintf(stderr, "cuda_gather_bench: the kernels do not run on this device\n");
    return 1;
  }
  std::printf(
      "| gather case | D2D copy GB/s | unrolled GB/s | ratio | one-unit GB/s | ratio | "
      "unrolled / one-unit | G elements/s (unrolled / one-unit) |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
  MeasureGather("rows of 4 B (scalar)", 4, params_bytes, out_bytes, 1, run);
  MeasureGather("rows of 64 B", 64, params_bytes, out_bytes, 1, run);
  MeasureGather("rows of 1 KiB", 1024, params_bytes, out_bytes, 1, run);
  MeasureGather("rows of 64 KiB", 64 << 10, params_bytes, out_bytes, 1, run);
  MeasureGather("32 tasks, rows of 256 B", 256, params_bytes, out_bytes, 32, run);
  MeasureBags(int64_t{Flag(argc, argv, "--bag_table_mib", 1024)} << 20,
              Flag(argc, argv, "--bag_lookups", 262144),
              Flag(argc, argv, "--long_bag_lookups", 4194304), run);
  return 0;
}
