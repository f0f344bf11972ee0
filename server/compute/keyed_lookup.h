// File: server/compute/keyed_lookup.h
//
// A lookup by keys on a keyed table (core/keyed_rows.h), for every front end: the checks that
// make a request's keys a lookup, the buffer of slots its plan reads in place of indices, and
// the step that fills it under the batch's read lease (ComputeRequest::resolve).
//
//   - keys are DT_INT64 of any shape Gather takes for indices, for a table put with keys;
//     a Gather by keys is along axis 0 without batch dimensions;
//   - the plan is made on the table's keyed_view() with slots() as its indices, so the answer is
//     byte for byte the one the same request by the keys' slots gets;
//   - the missing-keys policy is the request's, or the table's (KeyedRows::Effective).
//
// Thread-safety: one request's, used by one thread at a time; Resolve runs on an executor's.

#ifndef TENSORCOMPUTE_SERVER_COMPUTE_KEYED_LOOKUP_H_
#define TENSORCOMPUTE_SERVER_COMPUTE_KEYED_LOOKUP_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

#include "core/keyed_rows.h"
#include "core/tensor.h"
#include "core/tensor_registry.h"
#include "core/thread_pool.h"

namespace tensorcompute::server {

class KeyedLookup {
 public:
  // Checks `keys` against `table` (null: inline params) and sizes the slots. INVALID_ARGUMENT:
  //   inline params: "keys are for a resident table put with keys (params_name)";
  //   a table without keys: "table 'T' has no keys (put it with keys); look it up by indices";
  //   keys not DT_INT64: "keys: keys are int64, got int32 [4]" (or ValidateTensor's words);
  //   the policy's faults (KeyedRows::Effective).
  // `pooled`: an EmbeddingBag (which may skip missing keys). REQUIRES: `keys` outlives this.
  // `pool` (null: one thread) is what Resolve splits long requests over.
  absl::Status Prepare(const core::ResidentTensor* table, const core::TensorView& keys,
                       core::MissingKeys missing, bool pooled, int64_t max_rank,
                       core::ThreadPool* pool);

  // What to plan with in place of indices: DT_INT64 of the keys' shape, viewing the slots that
  // Resolve fills. Valid while this lives.
  core::TensorView slots() const;
  // The policy in force (after Prepare).
  core::MissingKeys policy() const { return policy_; }
  // The request's keys (after Prepare): DT_INT64, their bytes possibly unaligned.
  const core::TensorView& keys() const { return keys_; }
  // The table's zero slot: an EmbeddingBag's padding row under MISSING_SKIP.
  int64_t zero_slot() const { return table_->keyed->zero_slot(); }

  // Fills the slots, and `found` (null: not asked; else one byte a key) with 1 where the key
  // is present. KeyedRows::Resolve's errors. REQUIRES: Prepare returned OK; a read lease on
  // the table.
  absl::Status Resolve(uint8_t* found);

  // A planner's error for a plan made with slots() in place of indices, in the request's words:
  // each "indices" becomes "keys" ("offsets[1] = 5 is past the end of keys (2 values)").
  static absl::Status InKeysWords(const absl::Status& error);

 private:
  const core::ResidentTensor* table_ = nullptr;
  core::TensorView keys_;
  core::MissingKeys policy_ = core::MissingKeys::kError;
  core::ThreadPool* pool_ = nullptr;
  std::vector<int64_t> slots_;
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_COMPUTE_KEYED_LOOKUP_H_
