// File: core/live_rows.h
//
// Live tables (issue 41): rows of a resident table replaced in place while lookups read it,
// never torn. Each resident table has a LiveRows: a gate between the lookups reading its rows
// and the one update writing them, and the table's sequence.
//
//   - A lookup holds a read lease (AcquireRead .. ReleaseRead) on every table its batch reads,
//     from before the batch's first read until its last output byte is written, on every
//     executor (batching::TableLeaseExecutor takes them around the executor the batcher runs:
//     the CPU pool, the CUDA stream slots and their CPU fallback alike). A GPU batch holds it
//     until its output is back on the host, so its kernels are done with the device copy.
//   - An update (ApplyRowUpdate) waits for the leases held to be let go while newer readers
//     wait for it (writers first, so a steady stream of lookups cannot starve updates), writes
//     all of its rows (the device copy, then the host copy), advances the sequence, and lets
//     the readers on. So a lookup sees every row, and every message, wholly before or wholly
//     after an update. Readers wait at most one message's copy (about 0.1 ms a MiB on a CPU).
//   - The sequence counts the changes applied to the name on this server: it starts at 0 for
//     a name's first tensor, advances by one for each update applied, and a replacement
//     continues from its predecessor's (Retire), so that it never goes back.
//   - A tensor replaced or deleted is retired: a later update is refused (FAILED_PRECONDITION
//     for a replaced one, NOT_FOUND for a deleted one), and an update under way when that
//     happens finishes first (it is ordered before the replacement).
//   - A keyed table that grows (core/table_growth.h) is retired too, pointing at the larger
//     table published in its place (grown_into): an update that holds it applies to that one.
//     Its lookups in flight finish on it; its sequence stays the one of the rows it holds.
//   - Updates of a table run one at a time, each holding its update lock (update_lock) from
//     the message's plan to its last write. What they read outside the gate (the key index
//     planned on, the rows a growth copies) changes only under that lock.
// A lease may be let go by another thread than the one that took it (a GPU batch is answered
// from its slot's thread), so the gate is built on a mutex held only to change its counts.
//
// Thread-safety: every method may be called from any thread.

#ifndef TENSORCOMPUTE_CORE_LIVE_ROWS_H_
#define TENSORCOMPUTE_CORE_LIVE_ROWS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

#include "core/tensor.h"

namespace tensorcompute::core {

struct ResidentTensor;
struct DeviceCopy;
struct TableGrowth;

class LiveRows {
 public:
  explicit LiveRows(int64_t sequence) : sequence_(sequence) {}

  LiveRows(const LiveRows&) = delete;
  LiveRows& operator=(const LiveRows&) = delete;

  // The changes applied so far (see the file comment).
  int64_t sequence() const { return sequence_.load(std::memory_order_acquire); }

  // A read lease: waits while an update is applied or waiting for one.
  void AcquireRead();
  // Lets a lease go. REQUIRES: one was acquired and not yet let go (by any thread).
  void ReleaseRead();

  // What became of a retired tensor.
  enum class Fate { kLive, kReplaced, kDeleted, kGrown };

  // Held by each update of the table from its plan to its last write (the file comment).
  absl::Mutex& update_lock() ABSL_LOCK_RETURNED(update_mu_) { return update_mu_; }

  // Runs `write` with every read lease let go and none taken meanwhile, then advances the
  // sequence if it returned OK, and returns the new sequence. Returns `write`'s error (the
  // sequence unchanged), or, without running it, FAILED_PRECONDITION (`fate` kReplaced) or
  // NOT_FOUND (kDeleted) for a retired tensor, with the caller's words: `retired(fate)`.
  // Writes run one at a time.
  absl::StatusOr<int64_t> Write(absl::FunctionRef<absl::Status()> write,
                                absl::FunctionRef<absl::Status(Fate)> retired);

  // Refuses later writes (`fate` is kReplaced, kDeleted or kGrown), after the one under way
  // if any, and returns the final sequence. `grown_into`: for kGrown, the table published in
  // this one's place (TensorRegistry::PutGrown).
  int64_t Retire(Fate fate, std::shared_ptr<const ResidentTensor> grown_into = nullptr);

  Fate fate() const;
  // The table this one grew into (kGrown), or null.
  std::shared_ptr<const ResidentTensor> grown_into() const;

 private:
  absl::Mutex update_mu_;
  mutable absl::Mutex mu_;
  int64_t readers_ ABSL_GUARDED_BY(mu_) = 0;
  bool writer_ ABSL_GUARDED_BY(mu_) = false;   // a write waits for readers or runs
  bool writing_ ABSL_GUARDED_BY(mu_) = false;  // the write has begun (readers are out)
  Fate fate_ ABSL_GUARDED_BY(mu_) = Fate::kLive;
  std::shared_ptr<const ResidentTensor> grown_into_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> sequence_;
};

// Read leases on the tables of a batch, taken in address order (so that batches reading
// several tables never wait for each other in a circle) and let go together.
class TableLeases {
 public:
  TableLeases() = default;
  TableLeases(TableLeases&& other) noexcept : held_(std::move(other.held_)) { other.held_.clear(); }
  TableLeases& operator=(TableLeases&&) = delete;
  ~TableLeases() { Release(); }

  // Takes a lease on each distinct gate of `gates` (null entries skipped), and keeps the gates
  // until Release: a batch's tasks, which hold its tables, may be gone before it lets go.
  void Acquire(std::vector<std::shared_ptr<LiveRows>> gates);
  void Release();

 private:
  std::vector<std::shared_ptr<LiveRows>> held_;
};

// One checked update message, ready to apply: the rows it replaces (this tensor's own row
// numbers, in the message's order) and their bytes in the table's stored form.
struct RowUpdate {
  std::vector<int64_t> rows;  // empty for a message by keys: its slots are found at apply
  // A keyed table's message by keys (PrepareKeyedRowUpdate): the keys written, in the order of
  // the rows' bytes, and the keys deleted.
  bool by_keys = false;
  std::vector<int64_t> keys;
  std::vector<int64_t> delete_keys;
  int64_t row_bytes = 0;        // stored bytes of one row
  std::vector<uint8_t> stored;  // rows.size() x row_bytes, converted (compact tables)
  // The message's own values when they are the stored form already (as-is and prequantized
  // tables): valid while the message lives. Empty when `stored` holds the rows.
  absl::Span<const uint8_t> as_sent;
  absl::Span<const uint8_t> bytes() const {
    return as_sent.empty() ? absl::Span<const uint8_t>(stored) : as_sent;
  }
};

// Checks an update message against `table` and converts its values to the stored form
// (core/table_storage.h: float16 or 8-bit row-wise rows encoded as at upload), or, when they
// are that form already, views them (RowUpdate::as_sent: `values` must then outlive the
// update's ApplyRowUpdate). Nothing is applied. INVALID_ARGUMENT, naming the table, for:
//   a malformed tensor (ValidateTensor's words, "indices: ..." or "values: ...");
//   a string table: "tensor 'T' holds strings; UpdateRows does not change string tables
//     (replace it with PutTensor)";
//   indices not int32/int64 of rank 1: "indices: UpdateRows takes int32 or int64 indices of
//     rank 1, got float32 [2,3]";
//   values of another dtype or shape than [len(indices), row shape...]: "values: table 'T'
//     takes float32 [2,16] for these indices, got float32 [2,8]";
//   an index outside [-rows, rows) (rows: the whole table's, for a shard): Gather's words,
//     "indices[3] = 9 is not in [-8, 8)";
//   a row named twice: "indices[4] = -1 names row 7 again (indices[1]); a message updates a
//     row at most once";
//   a value the storage cannot hold: the encoder's words (table_storage.h), e.g. a float16
//     overflow or a prequantized row with a NaN scale, naming the row by its position in the
//     message ("tensor 'T': row 3 has scale nan and bias 0; ...").
// FAILED_PRECONDITION for a row of another shard of a sharded table: "row 12 of table 'T' is
// held by shard 1 of 2; this server holds shard 0 (rows [0, 8))".
absl::StatusOr<RowUpdate> PrepareRowUpdate(const ResidentTensor& table, const TensorView& indices,
                                           const TensorView& values);

// One checked update message of a sharded table, split by the shard owning each row: for a
// router that sends each shard its rows (server/compute/shard_updater.h).
struct ShardedRowUpdate {
  struct Part {
    std::vector<int64_t> positions;  // the message's positions whose rows the shard holds
    std::vector<int64_t> rows;       // their rows, as the whole table's (0 <= row < R)
  };
  std::vector<Part> shards;  // by shard index; one for an unsharded table
};

// Checks an update message by keys against keyed `table` (core/keyed_rows.h) and converts its
// values as PrepareRowUpdate does. Each key of `keys` gets the row of `values` at its position:
// a key the table holds has its row replaced, a new key is added into a free slot; the keys of
// `delete_keys` are removed (one the table lacks is no change, so a retried message is
// harmless). Either may be empty (an unset tensor). Nothing is applied. INVALID_ARGUMENT:
//   a table without keys: "table 'T' has no keys; update it by indices";
//   keys or delete_keys not int64 of rank 1: "keys: UpdateRows takes int64 keys of rank 1, got
//     int32 [3]";
//   values not [len(keys), row shape...] (PrepareRowUpdate's words);
//   a key twice: "keys[4] = 9 repeats keys[1]; a message writes a key at most once" (the same
//     for delete_keys);
//   a key in both: "delete_keys[0] = 9 is also in keys[2]; a message writes or deletes a key,
//     not both".
// ApplyRowUpdate finds the slots, with the table's other updates held off; a message that adds
// more keys than the table has free slots grows it (core/table_growth.h), or is
// RESOURCE_EXHAUSTED when it cannot (the memory budget), changing nothing.
absl::StatusOr<RowUpdate> PrepareKeyedRowUpdate(const ResidentTensor& table, const TensorView& keys,
                                                const TensorView& values,
                                                const TensorView& delete_keys);

// Checks an update message against the whole of `table` (a shard's, or an unsharded one's),
// with every INVALID_ARGUMENT of PrepareRowUpdate and its words, whatever shard holds each row,
// and splits it by shard. Nothing is applied.
absl::StatusOr<ShardedRowUpdate> SplitRowUpdate(const ResidentTensor& table,
                                                const TensorView& indices,
                                                const TensorView& values);

// Writes `update`'s rows into `table` (its device copy, if it has one, by `device_write`,
// then its host rows) with readers held off (LiveRows::Write), and returns the new sequence.
// A `device_write` error leaves the host rows as they were and is returned, except
// UNAVAILABLE, which means the device is out of service and its copy is never read again:
// the host rows are then written. Errors for a retired table: FAILED_PRECONDITION "tensor 'T'
// was replaced while rows were being updated; the update was not applied to the new version"
// or NOT_FOUND "tensor 'T' was deleted" (RetiredError).
// A table that grew (LiveRows::grown_into) is followed: the update applies to the table it
// grew into. A message by keys that adds more keys than `table` has free slots grows it first
// with `growth` (core/table_growth.h: its errors, e.g. RESOURCE_EXHAUSTED past
// max_resident_bytes, change nothing); without `growth` it is RESOURCE_EXHAUSTED "table 'T' is
// full: the message adds 3 keys and 1 slots of its capacity 8 are free (put it again with a
// larger capacity)", as is such a message on a keyed table on disk, which never grows ("...
// (put it again with a larger capacity; a table on disk does not grow)").
// A table on disk (core/disk_rows.h) has its rows written through to its file and its cached
// copies, with readers held off, then synced (fdatasync) after they are let back in: an update
// answered OK is on disk. The disk's errors are UNAVAILABLE naming the table: a failed write
// stops the message part way (the rows before it are in the file and served; the sequence does
// not advance), and a failed sync leaves the message served but perhaps not durable.
// REQUIRES: `update` was prepared for `table` (or a table it grew from); device_write is set
// if table has a device copy.
using DeviceRowWriter =
    std::function<absl::Status(const DeviceCopy& copy, absl::Span<const int64_t> rows,
                               int64_t row_bytes, absl::Span<const uint8_t> stored)>;
absl::StatusOr<int64_t> ApplyRowUpdate(const ResidentTensor& table, const RowUpdate& update,
                                       const DeviceRowWriter& device_write,
                                       const TableGrowth* growth = nullptr);

// `table`, or the table it grew into, and so on (LiveRows::grown_into): where its updates
// apply now, and what an update stream should hold, so that the old table's memory goes when
// its lookups are done.
std::shared_ptr<const ResidentTensor> LatestGrowth(std::shared_ptr<const ResidentTensor> table);

// What an update of a retired `table` answers (`fate`: kReplaced or kDeleted; see
// ApplyRowUpdate).
absl::Status RetiredError(const ResidentTensor& table, LiveRows::Fate fate);

// OK when `table` has reached `min_sequence` (0: any), else FAILED_PRECONDITION: "table 'T' is
// at sequence 41 on this server; the request needs min_sequence 42 (retry, or ask another
// replica)". INVALID_ARGUMENT for a negative min_sequence.
absl::Status CheckMinSequence(const ResidentTensor& table, int64_t min_sequence);

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_LIVE_ROWS_H_
