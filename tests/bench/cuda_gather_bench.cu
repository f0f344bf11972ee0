// The gather kernel on device-resident data against a device-to-device copy of the same
// bytes, measured in the same run (docs/gpu-results.md). No PCIe transfer is timed: this is the
// kernel's own efficiency; end-to-end figures come from `tensorcompute load` against the
// server (tools/gpu_bench.sh).
//
// Cases (float32 params of --params_mib MiB, random rows, int32 indices, one task per launch,
// output of --output_mib MiB):
//   rows of 4 B (scalar gather: elements/s), 64 B, 1 KiB, 64 KiB;
//   a batch of 32 tasks of rows of 256 B (one launch over a descriptor table of 32).
// Each point: --repetitions timed runs of --iterations launches (cudaEvent timing); the table
// shows medians; ratio = gather bytes/s over D2D-copy bytes/s of the output's size.
//
// Then the EmbeddingBag kernel (bag_kernel.h) on the shapes of tests/bench/embedding_bag_bench
// (docs/performance.md, "Pooled lookups"): SUM over bags of 32 of a float32 table of
// --bag_table_mib MiB (default 1024) in rows of 256 B, read in place as a resident table's
// device copy is, --bag_lookups random int64 indices (default 262,144) with int64 offsets.
// Reported: rows read per second and their bytes/s against a D2D copy of as many bytes. Both
// kernels' outputs are checked against their host twins.
//
// Run: build/tests/bench/cuda_gather_bench [--repetitions 5 --iterations 20]

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
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

using tensorcompute::core::DataType;
using tensorcompute::core::Tensor;
namespace cuda = tensorcompute::cuda;

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

struct Point {
  std::string name;
  double gather_gbps;
  double copy_gbps;
  double elements_per_s;
};

// One case: `tasks` gathers of `rows_out` rows of `row_bytes` from params of `params_bytes`.
Point Measure(const std::string& name, int64_t row_bytes, int64_t params_bytes, int64_t out_bytes,
              int tasks, int repetitions, int iterations, int sm_count) {
  std::mt19937_64 rng(7);
  const int64_t slice = row_bytes / 4;
  const int64_t rows = params_bytes / row_bytes;
  const int64_t rows_out = out_bytes / row_bytes / tasks;
  Tensor params = *Tensor::Allocate(DataType::kFloat32, {rows, slice});
  for (auto& b : params.mutable_bytes()) b = static_cast<uint8_t>(rng());
  std::vector<Tensor> indices;
  std::vector<tensorcompute::core::GatherPlan> plans;
  for (int t = 0; t < tasks; ++t) {
    Tensor idx = *Tensor::Allocate(DataType::kInt32, {rows_out});
    auto* v = reinterpret_cast<int32_t*>(idx.mutable_bytes().data());
    for (int64_t i = 0; i < rows_out; ++i) v[i] = static_cast<int32_t>(rng() % rows);
    plans.push_back(*tensorcompute::core::PlanGather(params.view(), idx.view(), 0, 0));
    indices.push_back(std::move(idx));
  }
  std::vector<const tensorcompute::core::GatherPlan*> plan_ptrs;
  std::vector<tensorcompute::core::TensorView> pv(tasks, params.view()), iv;
  std::vector<const tensorcompute::core::TensorView*> pp, ip;
  for (int t = 0; t < tasks; ++t) iv.push_back(indices[t].view());
  for (int t = 0; t < tasks; ++t) {
    plan_ptrs.push_back(&plans[t]);
    pp.push_back(&pv[t]);
    ip.push_back(&iv[t]);
  }
  const cuda::BatchLayout layout = cuda::PlanBatch(plan_ptrs);
  std::vector<uint8_t> host_in(layout.input_bytes), host_out(layout.output_bytes);
  cuda::PackInput(layout, pp, ip, host_in.data());
  cuda::ResetFlags(layout, host_out.data());
  uint8_t *d_in = nullptr, *d_out = nullptr, *d_copy = nullptr;
  CHECK_CUDA(cudaMalloc(&d_in, layout.input_bytes));
  CHECK_CUDA(cudaMalloc(&d_out, layout.output_bytes));
  CHECK_CUDA(cudaMalloc(&d_copy, layout.output_bytes));
  CHECK_CUDA(cudaMemcpy(d_in, host_in.data(), layout.input_bytes, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_out, host_out.data(), layout.output_bytes, cudaMemcpyHostToDevice));
  cuda::LaunchArgs args;
  args.num_tasks = tasks;
  args.total_units = layout.total_units;
  args.fits_32bit = layout.fits_32bit;
  args.descs_offset = layout.descs_offset;
  args.dims_offset = layout.dims_offset;
  args.flags_offset = layout.flags_offset;
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  const double bytes = static_cast<double>(rows_out) * row_bytes * tasks;
  std::vector<double> gather, copy;
  for (int rep = 0; rep < repetitions + 1; ++rep) {  // the first is a warmup
    float ms = 0;
    CHECK_CUDA(cudaEventRecord(start));
    for (int i = 0; i < iterations; ++i) {
      if (!cuda::LaunchGatherBatch(args, d_in, d_out, sm_count, nullptr).ok()) std::exit(1);
    }
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    if (rep > 0) gather.push_back(bytes * iterations / (ms * 1e-3) / 1e9);
    CHECK_CUDA(cudaEventRecord(start));
    for (int i = 0; i < iterations; ++i) {
      CHECK_CUDA(
          cudaMemcpyAsync(d_copy, d_out, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice));
    }
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    if (rep > 0) copy.push_back(bytes * iterations / (ms * 1e-3) / 1e9);
  }
  // The answer must be right: compare with the host twin of the kernel.
  std::vector<uint8_t> device_result(layout.output_bytes), expected(layout.output_bytes);
  CHECK_CUDA(cudaMemcpy(device_result.data(), d_out, layout.output_bytes, cudaMemcpyDeviceToHost));
  cuda::ResetFlags(layout, expected.data());
  cuda::RunBatchOnHost(layout, host_in.data(), expected.data());
  for (int t = 0; t < tasks; ++t) {
    const auto& d = layout.descs[t];
    if (std::memcmp(device_result.data() + d.output_offset, expected.data() + d.output_offset,
                    plans[t].output_bytes) != 0) {
      std::fprintf(stderr, "%s: the device's output differs from the host twin's\n", name.c_str());
      std::exit(1);
    }
  }
  CHECK_CUDA(cudaFree(d_in));
  CHECK_CUDA(cudaFree(d_out));
  CHECK_CUDA(cudaFree(d_copy));
  const double g = Median(gather);
  return {name, g, Median(copy), g * 1e9 / 4};
}

// Times `launch` (a kernel pass) and a D2D copy of `bytes` from `src` to `dst`, each over
// `iterations` calls per repetition (the first repetition a warmup); returns the medians in
// GB/s of `bytes`.
template <typename Launch>
std::pair<double, double> TimeAgainstCopy(const Launch& launch, double bytes, uint8_t* dst,
                                          const uint8_t* src, int repetitions, int iterations) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  std::vector<double> kernel, copy;
  for (int rep = 0; rep < repetitions + 1; ++rep) {
    float ms = 0;
    CHECK_CUDA(cudaEventRecord(start));
    for (int i = 0; i < iterations; ++i) launch();
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    if (rep > 0) kernel.push_back(bytes * iterations / (ms * 1e-3) / 1e9);
    CHECK_CUDA(cudaEventRecord(start));
    for (int i = 0; i < iterations; ++i) {
      CHECK_CUDA(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice));
    }
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    if (rep > 0) copy.push_back(bytes * iterations / (ms * 1e-3) / 1e9);
  }
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  return {Median(kernel), Median(copy)};
}

// The EmbeddingBag case (see the file comment). Prints one table row.
void MeasureBag(int64_t table_bytes, int64_t lookups, int64_t bag, int repetitions, int iterations,
                int sm_count) {
  namespace core = tensorcompute::core;
  constexpr int64_t kDim = 64;  // rows of 256 B
  const int64_t rows = table_bytes / (kDim * 4);
  const int64_t bags = lookups / bag;
  std::mt19937_64 rng(11);
  Tensor table = *Tensor::Allocate(DataType::kFloat32, {rows, kDim});
  auto* values = reinterpret_cast<uint32_t*>(table.mutable_bytes().data());
  for (int64_t i = 0; i < rows * kDim; ++i) {
    values[i] = 0x3F800000u | static_cast<uint32_t>(rng() & 0x7FFFFF);  // [1, 2)
  }
  Tensor indices = *Tensor::Allocate(DataType::kInt64, {bags * bag});
  auto* idx = reinterpret_cast<int64_t*>(indices.mutable_bytes().data());
  for (int64_t i = 0; i < bags * bag; ++i) idx[i] = static_cast<int64_t>(rng() % rows);
  Tensor offsets = *Tensor::Allocate(DataType::kInt64, {bags});
  auto* off = reinterpret_cast<int64_t*>(offsets.mutable_bytes().data());
  for (int64_t b = 0; b < bags; ++b) off[b] = b * bag;
  const core::TensorView tv = table.view(), iv = indices.view(), ov = offsets.view();
  const core::EmbeddingBagPlan plan = *core::PlanEmbeddingBag(tv, iv, &ov, nullptr);

  uint8_t* d_table = nullptr;
  CHECK_CUDA(cudaMalloc(&d_table, table_bytes));
  CHECK_CUDA(cudaMemcpy(d_table, table.bytes().data(), table_bytes, cudaMemcpyHostToDevice));
  cuda::BagTaskInputs task{&plan, &tv, &iv, &ov, nullptr, d_table};
  const cuda::BagLayout layout = cuda::PlanBagBatch({&task, 1});
  std::vector<uint8_t> host_in(layout.input_bytes), host_out(layout.output_bytes);
  cuda::PackBagInput(layout, {&task, 1}, host_in.data());
  cuda::ResetBagFlags(layout, host_out.data());
  const double read_bytes = static_cast<double>(bags * bag) * kDim * 4;
  uint8_t *d_in = nullptr, *d_out = nullptr, *d_copy = nullptr, *d_copy_src = nullptr;
  CHECK_CUDA(cudaMalloc(&d_in, layout.input_bytes));
  CHECK_CUDA(cudaMalloc(&d_out, layout.output_bytes));
  CHECK_CUDA(cudaMalloc(&d_copy, static_cast<size_t>(read_bytes)));
  CHECK_CUDA(cudaMalloc(&d_copy_src, static_cast<size_t>(read_bytes)));
  CHECK_CUDA(cudaMemcpy(d_in, host_in.data(), layout.input_bytes, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_out, host_out.data(), layout.output_bytes, cudaMemcpyHostToDevice));
  cuda::BagLaunchArgs args;
  args.num_tasks = 1;
  args.total_units = layout.total_units;
  args.descs_offset = layout.descs_offset;
  args.flags_offset = layout.flags_offset;
  const auto [bag_gbps, copy_gbps] = TimeAgainstCopy(
      [&] {
        if (!cuda::LaunchBagBatch(args, d_in, d_out, sm_count, nullptr).ok()) std::exit(1);
      },
      read_bytes, d_copy, d_copy_src, repetitions, iterations);

  // The answer must be right: the host twin on the host copy of the table (the same layout
  // with the table's host address in place of its device address).
  std::vector<uint8_t> device_result(layout.output_bytes), expected(layout.output_bytes);
  CHECK_CUDA(cudaMemcpy(device_result.data(), d_out, layout.output_bytes, cudaMemcpyDeviceToHost));
  task.resident_params = table.bytes().data();
  const cuda::BagLayout host_layout = cuda::PlanBagBatch({&task, 1});
  cuda::PackBagInput(host_layout, {&task, 1}, host_in.data());
  cuda::ResetBagFlags(host_layout, expected.data());
  cuda::RunBagBatchOnHost(host_layout, host_in.data(), expected.data());
  if (std::memcmp(device_result.data(), expected.data(), layout.output_bytes) != 0) {
    std::fprintf(stderr, "EmbeddingBag: the device's output differs from the host twin's\n");
    std::exit(1);
  }
  CHECK_CUDA(cudaFree(d_in));
  CHECK_CUDA(cudaFree(d_out));
  CHECK_CUDA(cudaFree(d_copy));
  CHECK_CUDA(cudaFree(d_copy_src));
  CHECK_CUDA(cudaFree(d_table));
  std::printf(
      "| SUM, bags of %lld, %lld MiB table of 256 B rows, %lld lookups | %.1f | %.1f | "
      "%.2f | %.0f |\n",
      static_cast<long long>(bag), static_cast<long long>(table_bytes >> 20),
      static_cast<long long>(bags * bag), bag_gbps, copy_gbps, bag_gbps / copy_gbps,
      bag_gbps * 1e9 / (kDim * 4));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const int repetitions = Flag(argc, argv, "--repetitions", 5);
  const int iterations = Flag(argc, argv, "--iterations", 20);
  const int64_t params_bytes = int64_t{Flag(argc, argv, "--params_mib", 256)} << 20;
  const int64_t out_bytes = int64_t{Flag(argc, argv, "--output_mib", 256)} << 20;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "cuda_gather_bench: no CUDA device\n");
    return 2;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n\n", prop.name, prop.multiProcessorCount);
  std::printf("| case | gather GB/s | D2D copy GB/s | ratio | elements/s (4 B rows) |\n");
  std::printf("|---|---:|---:|---:|---:|\n");
  const struct {
    const char* name;
    int64_t row_bytes;
    int tasks;
  } cases[] = {{"rows of 4 B (scalar)", 4, 1},
               {"rows of 64 B", 64, 1},
               {"rows of 1 KiB", 1024, 1},
               {"rows of 64 KiB", 64 << 10, 1},
               {"32 tasks, rows of 256 B", 256, 32}};
  for (const auto& c : cases) {
    const Point p = Measure(c.name, c.row_bytes, params_bytes, out_bytes, c.tasks, repetitions,
                            iterations, prop.multiProcessorCount);
    std::printf(
        "| %s | %.1f | %.1f | %.2f | %s |\n", p.name.c_str(), p.gather_gbps, p.copy_gbps,
        p.gather_gbps / p.copy_gbps,
        c.row_bytes == 4 ? std::to_string(static_cast<int64_t>(p.elements_per_s)).c_str() : "");
    std::fflush(stdout);
  }
  std::printf("\n| EmbeddingBag | rows read GB/s | D2D copy GB/s | ratio | rows/s |\n");
  std::printf("|---|---:|---:|---:|---:|\n");
  MeasureBag(int64_t{Flag(argc, argv, "--bag_table_mib", 1024)} << 20,
             Flag(argc, argv, "--bag_lookups", 262144), 32, repetitions, iterations,
             prop.multiProcessorCount);
  return 0;
}
