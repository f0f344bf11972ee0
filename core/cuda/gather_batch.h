// File: core/cuda/gather_batch.h
//
// A batch of Gather/GatherNd tasks laid out for one device pass: one input buffer (descriptor
// table, index dims, then every task's params and indices; a task on a resident table whose
// copy is on the device sends only its indices), one output buffer (a "first bad
// index" flag per task, then every task's output), and one kernel launch over all of them.
// This header has no CUDA in it: the layout is planned, packed and unpacked on the host. The
// per-work-unit copy that the kernel runs is in gather_unit.h (work units, bad-index flags),
// TC_HOST_DEVICE, and RunBatchOnHost runs it over every unit on the CPU, so the tests check
// exactly the kernel's arithmetic against the reference (tests/cuda).
//
// Thread-safety: pure functions and plain data.

#ifndef TENSORCOMPUTE_CORE_CUDA_GATHER_BATCH_H_
#define TENSORCOMPUTE_CORE_CUDA_GATHER_BATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

#include "core/cuda/batch_buffers.h"
#include "core/cuda/gather_unit.h"
#include "core/gather_plan.h"
#include "core/tensor.h"

namespace tensorcompute::cuda {

// Where everything of a batch goes. Built by PlanBatch; offsets as in GatherDesc.
struct BatchLayout {
  std::vector<GatherDesc> descs;
  std::vector<int64_t> dims;  // index_dims of every task, back to back
  uint64_t descs_offset = 0;  // into the input buffer (0)
  uint64_t dims_offset = 0;   // into the input buffer
  uint64_t input_bytes = 0;   // whole input buffer
  uint64_t flags_offset = 0;  // into the output buffer (0): one uint64 per task
  uint64_t output_bytes = 0;  // whole output buffer
  uint64_t total_units = 0;
  // Whether unit and row arithmetic fits 32 bits: total_units, every task's output rows and
  // chunks below 2^31 (the kernel then divides in 32 bits).
  bool fits_32bit = true;
  // The vector_bytes of every task when they all have the same (the kernel then copies in
  // typed vectors of that width, several units per thread: gather_kernel.h); 0 when they differ.
  uint32_t uniform_vector_bytes = 0;
};

// Plans the layout of `plans` (one per task, in order). `resident_params` is empty, or holds
// one entry per plan: the device address of that task's params when they are a resident
// table's copy on the batch's device (GatherDesc::params_address; the input buffer then has
// no params region for the task, so the table never travels), else nullptr.
// REQUIRES: every plan has a fixed-size dtype of element size 1, 2, 4, 8 or 16, and
// output_rows() > 0 and slice > 0, and GatherSliceFitsKernel(slice_bytes()) (the executor
// answers the others on the CPU); a resident address points to the plan's params bytes,
// 256-byte aligned.
BatchLayout PlanBatch(absl::Span<const core::GatherPlan* const> plans,
                      absl::Span<const void* const> resident_params = {});

// Writes the input buffer of `layout` into `dst` (input_bytes long): the tables, then each
// task's params (unless resident) and indices bytes. REQUIRES: params[i]/indices[i] are the views
// plans[i] was made from.
void PackInput(const BatchLayout& layout, absl::Span<const core::TensorView* const> params,
               absl::Span<const core::TensorView* const> indices, uint8_t* dst);

// The host pieces of the input buffer, in buffer order (batch_buffers.h), for copying them in
// chunks through a staging buffer instead of one PackInput. The first piece is the tables
// (source: `tables`, which PackTables fills).
std::vector<Piece> InputPieces(const BatchLayout& layout, const std::vector<uint8_t>& tables,
                               absl::Span<const core::TensorView* const> params,
                               absl::Span<const core::TensorView* const> indices);
// The descriptor and dims tables as they sit at the start of the input buffer.
std::vector<uint8_t> PackTables(const BatchLayout& layout);

// Fills the flags region of an output buffer with kNoBadIndex (what the executor does on the
// device with a memset of 0xff).
void ResetFlags(const BatchLayout& layout, uint8_t* output_buffer);

// Task i's result from an output buffer (output_bytes long): OK after copying its output bytes
// into `out` (plan.output_bytes long), or BadIndexError for its flag.
absl::Status UnpackTask(const BatchLayout& layout, int i, const core::GatherPlan& plan,
                        const core::TensorView& indices, const uint8_t* output_buffer,
                        uint8_t* out);

// Runs every unit of the batch on the calling thread, as the kernel does on the device: the
// CPU twin of LaunchGatherBatch, for tests. `input`/`output` are host copies of the buffers.
void RunBatchOnHost(const BatchLayout& layout, const uint8_t* input, uint8_t* output);

}  // namespace tensorcompute::cuda

#endif  // TENSORCOMPUTE_CORE_CUDA_GATHER_BATCH_H_
