// File: core/cuda/bag_batch.h
//
// A batch of EmbeddingBag tasks laid out for one device pass, as gather_batch.h does for
// gathers: one input buffer (the descriptor table, then each task's params unless resident on
// the device, indices, offsets if any, per-sample weights if any), one output buffer (a "first
// bad index" flag per task, then each task's output [bags, dim]), one kernel launch
// (bag_kernel.h) over all of them. Gathers and pooled lookups never share a launch: the
// executor sends a batch holding both as two passes (cuda_executor.h).
// This header has no CUDA in it: the layout is planned, packed and unpacked on the host. The
// per-work-unit reduction that the kernel runs is in bag_unit.h (work units, arithmetic,
// bad-index flags), TC_HOST_DEVICE, and RunBagBatchOnHost runs it over every unit on the CPU,
// so that the tests check the kernel's own code against core::ExecuteEmbeddingBag (tests/cuda).
//
// Thread-safety: pure functions and plain data.

#ifndef TENSORCOMPUTE_CORE_CUDA_BAG_BATCH_H_
#define TENSORCOMPUTE_CORE_CUDA_BAG_BATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

#include "core/cuda/bag_unit.h"
#include "core/cuda/batch_buffers.h"
#include "core/embedding_bag.h"
#include "core/tensor.h"

namespace tensorcompute::cuda {

// One task of a batch: its plan and the views it was made from (not owned).
struct BagTaskInputs {
  const core::EmbeddingBagPlan* plan = nullptr;
  const core::TensorView* params = nullptr;
  const core::TensorView* indices = nullptr;
  const core::TensorView* offsets = nullptr;  // null for fixed bags
  const core::TensorView* weights = nullptr;  // null without per-sample weights
  // The device address of the params when they are a resident table's copy on the batch's
  // device (BagDesc::params_address: the table never travels), else null.
  const void* resident_params = nullptr;
};

// Where everything of a batch goes. Built by PlanBagBatch; offsets as in BagDesc.
struct BagLayout {
  std::vector<BagDesc> descs;
  uint64_t descs_offset = 0;  // into the input buffer (0)
  uint64_t input_bytes = 0;   // whole input buffer
  uint64_t flags_offset = 0;  // into the output buffer (0): one uint64 per task
  uint64_t output_bytes = 0;  // whole output buffer
  uint64_t total_units = 0;
};

// Plans the layout of `tasks` (in order).
// REQUIRES: each task's views are those its plan was made from, offsets / weights non-null
// exactly as the plan says; a resident address points to the plan's params bytes, 256-byte
// aligned on the device.
BagLayout PlanBagBatch(absl::Span<const BagTaskInputs> tasks);

// The descriptor table as it sits at the start of the input buffer.
std::vector<uint8_t> PackBagTables(const BagLayout& layout);

// The host pieces of the input buffer, in buffer order (batch_buffers.h); the first is the
// descriptor table (source: `tables`, which PackBagTables fills).
std::vector<Piece> BagInputPieces(const BagLayout& layout, const std::vector<uint8_t>& tables,
                                  absl::Span<const BagTaskInputs> tasks);

// Writes the whole input buffer of `layout` into `dst` (input_bytes long).
void PackBagInput(const BagLayout& layout, absl::Span<const BagTaskInputs> tasks, uint8_t* dst);

// Fills the flags region of an output buffer with kNoBadIndex (what the executor does on the
// device with a memset of 0xff).
void ResetBagFlags(const BagLayout& layout, uint8_t* output_buffer);

// Task i's result from an output buffer (output_bytes long): OK after copying its output bytes
// into `out` (plan->output_bytes long), or core::EmbeddingBagBadIndexError for its flag (the
// CPU's exact words), or INTERNAL for a flag past the last index (which no kernel writes).
absl::Status UnpackBagTask(const BagLayout& layout, int i, const BagTaskInputs& task,
                           const uint8_t* output_buffer, uint8_t* out);

// Runs every unit of the batch on the calling thread, as the kernel does on the device: the
// CPU twin of LaunchBagBatch. `input`/`output` are host copies of the buffers (the output's
// flags reset).
void RunBagBatchOnHost(const BagLayout& layout, const uint8_t* input, uint8_t* output);

// The verdict of a task whose flag is `flag`: OK for kNoBadIndex, else as UnpackBagTask.
absl::Status BagVerdict(const core::EmbeddingBagPlan& plan, const core::TensorView& indices,
                        uint64_t flag);

}  // namespace tensorcompute::cuda

#endif  // TENSORCOMPUTE_CORE_CUDA_BAG_BATCH_H_
