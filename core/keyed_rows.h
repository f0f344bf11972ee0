// File: core/keyed_rows.h
//
// Keyed tables (issue 42): a resident table whose rows are looked up by sparse 64-bit keys
// (user, item or feature IDs) as well as by position, with a policy for the keys it lacks.
//
// Layout. A keyed table of capacity C stores C + 2 rows:
//   - slots [0, C) hold the keyed rows: the put's row i is slot i and its key is keys[i];
//     slots past the put's rows are free, for the keys UpdateRows adds;
//   - slot C is a row of zeros, slot C + 1 the default row (zeros when the table has none),
//     both in the table's stored form (core/table_storage.h), so that every executor and kernel
//     reads them as any other row.
// A table whose free slots an update outgrows is copied into a larger one, published in its
// place (core/table_growth.h), whose hidden rows are after its own capacity.
// Lookups by position see the C slots only (ResidentTensor::plan_view). A lookup by keys is
// planned on all C + 2 rows (ResidentTensor::keyed_view) with a buffer of slots in place of
// indices, filled by Resolve under the batch's read lease (batching::Task::resolve), so an
// update that moves keys between slots never makes a lookup read a wrong row: its answer is
// byte for byte the one the same request by the slots would get.
//
// Missing keys (MissingKeys): kError answers INVALID_ARGUMENT naming the first missing key's
// position and value; kZero reads slot C; kDefaultRow slot C + 1; kSkip (pooled lookups only)
// reads slot C as the bag's padding row, so that the key adds nothing and does not count.
//
// Thread-safety: const methods may run concurrently; the key index is changed only under the
// table's write gate (core/live_rows.h), by its update holding the update lock, and lookups
// resolve under a read lease.

#ifndef TENSORCOMPUTE_CORE_KEYED_ROWS_H_
#define TENSORCOMPUTE_CORE_KEYED_ROWS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

#include "core/dtype.h"
#include "core/key_index.h"
#include "core/shape.h"
#include "core/table_storage.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace tensorcompute::core {

// The numbers are part of the API (the wire's MissingKeys uses them).
enum class MissingKeys : int32_t {
  kTable = 0,  // in a request: the table's policy; at put: kError
  kError = 1,
  kZero = 2,
  kDefaultRow = 3,
  kSkip = 4,  // pooled lookups only
};

// "TABLE", "ERROR", "ZERO", "DEFAULT_ROW", "SKIP"; "missing(<n>)" otherwise.
std::string MissingKeysName(MissingKeys missing);

// The spellings of the CLI and the Python client: "error", "zero", "default", "skip" (and
// "table" for kTable); any case, MissingKeysName's spelling too. nullopt otherwise.
std::optional<MissingKeys> ParseMissingKeys(absl::string_view text);

// Rows a keyed table stores past its capacity: the zero row and the default row.
inline constexpr int64_t kKeyedHiddenRows = 2;

// The most slots a keyed table may have (slots are numbered in 31 bits by the key index).
inline constexpr int64_t kMaxKeyedCapacity = (int64_t{1} << 31) - 1 - kKeyedHiddenRows;

// What a keyed table's key index is counted against max_resident_bytes for `capacity` keys:
// the index's bound of 16 bytes a key.
inline int64_t KeyIndexBytes(int64_t capacity) { return 16 * capacity; }

// Checks a keyed table's description before anything is allocated and returns its capacity:
// `capacity` (0: the rows put). INVALID_ARGUMENT, naming the table, for a DT_STRING table
// ("tensor 'T': DT_STRING tables are not keyed"), a table sharded by row ranges (`sharded`;
// "tensor 'T': a keyed table is not sharded by row ranges: keyed tables are sharded by key
// (shard.by_key)"; a shard by key is not this check's concern), a capacity below the rows put
// ("tensor 'T': capacity 3 is below the 5 rows put"), a capacity above kMaxKeyedCapacity, or a
// table policy of kSkip or outside the enum ("tensor 'T': missing=SKIP is a choice of each
// EmbeddingBag request, not a table's policy").
absl::StatusOr<int64_t> CheckKeyedDescription(absl::string_view name, DataType dtype,
                                              const Shape& shape, int64_t capacity, bool sharded,
                                              MissingKeys missing);

// `layout` (PlanTableLayout's) with room for a keyed table of `capacity` slots: its stored
// shape's first dimension becomes capacity + kKeyedHiddenRows, and stored_bytes with it (the
// rows sent, and so sent_bytes, are unchanged).
TableLayout KeyedLayout(const TableLayout& layout, int64_t capacity);

// Writes the default row into slot `capacity` + 1 of `stored` (the table's stored rows) in the
// stored form: `row` in the dtype lookups return and the row shape (float32 [dim] for FLOAT16
// and INT8_ROWWISE tables, encoded as their rows are; DT_UINT8 [dim + 8] for
// INT8_ROWWISE_PREQUANTIZED). INVALID_ARGUMENT for another dtype or shape ("tensor 'T':
// default_row must be float32 [16], got float32 [8]") or a value the storage cannot hold.
absl::Status WriteDefaultRow(absl::string_view name, TableStorage storage, int64_t capacity,
                             const TensorView& row, MutableTensorView stored);

class KeyedRows {
 public:
  // The keys of a put: keys[i] is slot i's. INVALID_ARGUMENT for a duplicate, naming both
  // positions ("tensor 'T': keys[7] = -42 repeats keys[3]"). REQUIRES: keys.size() <= capacity
  // <= kMaxKeyedCapacity; CheckKeyedDescription's checks passed. `pool` (may be null) builds the
  // index with every core.
  static absl::StatusOr<std::shared_ptr<KeyedRows>> Build(std::string name,
                                                          absl::Span<const int64_t> keys,
                                                          int64_t capacity, MissingKeys missing,
                                                          bool has_default_row, ThreadPool* pool);

  KeyedRows(const KeyedRows&) = delete;
  KeyedRows& operator=(const KeyedRows&) = delete;

  int64_t capacity() const { return capacity_; }
  int64_t zero_slot() const { return capacity_; }
  int64_t default_slot() const { return capacity_ + 1; }
  MissingKeys missing() const { return missing_; }
  bool has_default_row() const { return has_default_row_; }
  // Keys held now (any thread, any time).
  int64_t size() const { return size_.load(std::memory_order_relaxed); }

  // The policy a lookup asking for `requested` gets (kTable: the table's). INVALID_ARGUMENT
  // for kSkip in a gather ("missing=SKIP is for EmbeddingBag: a Gather answers a row for every
  // key"), for kDefaultRow on a table without a default row ("table 'T' has no default row
  // (put it with one); missing=DEFAULT_ROW needs it"), and for a value outside the enum.
  absl::StatusOr<MissingKeys> Effective(MissingKeys requested, bool pooled) const;

  // The slots of `keys` (`keys_shape` their shape, for messages): slots[i] is keys[i]'s slot, or
  // for a missing key zero_slot() (kZero, kSkip) or default_slot() (kDefaultRow); for kError
  // the first missing key is INVALID_ARGUMENT, "keys[1,0] = 90210 is not a key of table
  // 'users'". `found` (null: not asked) gets 1 where the key is present, else 0.
  // `pool` (may be null) splits a long request over its workers (the answer is the same).
  // REQUIRES: `policy` came from Effective; a read lease on the table; keys.size() elements at
  // `slots` (and `found`).
  absl::Status Resolve(absl::Span<const int64_t> keys, const Shape& keys_shape, MissingKeys policy,
                       int64_t* slots, uint8_t* found, ThreadPool* pool = nullptr) const;

  // What an UpdateRows message by keys does (core/live_rows.h), planned before anything
  // changes: the slot each of its keys writes (a key present keeps its slot; a new key takes a
  // slot freed by the message's deletes, else a free one), and the keys it deletes.
  struct Upsert {
    std::vector<int64_t> slots;    // keys[i]'s slot; -1 for a new key when short() > 0
    std::vector<uint8_t> added;    // 1 where keys[i] is new
    std::vector<int64_t> deleted;  // the delete_keys present, in order
    std::vector<int64_t> freed;    // their slots
    int64_t added_count = 0;
    int64_t free_slots = 0;  // the table's free slots and the ones its deletes free
    // The new keys there is no slot for: the plan fits (and may be committed) when 0.
    int64_t short_slots() const { return added_count > free_slots ? added_count - free_slots : 0; }
  };
  // When the message adds more keys than there are slots for, the plan says by how much
  // (short_slots()) and chooses no slot for the new keys: the caller grows the table
  // (core/table_growth.h) or refuses the message (FullWords). REQUIRES: no other writer (the
  // table's update lock, LiveRows::Update); `keys` and `delete_keys` each without repeats, and
  // disjoint (PrepareKeyedRowUpdate checks that). Runs beside lookups.
  Upsert PlanUpsert(absl::Span<const int64_t> keys, absl::Span<const int64_t> delete_keys) const;
  // How a refusal of a plan that does not fit begins: "table 'T' is full: the message adds 3
  // keys and 1 slots of its capacity 8 are free".
  std::string FullWords(const Upsert& plan) const;
  // Makes `plan` so in the key index. REQUIRES: PlanUpsert made it for `keys` under the same
  // hold of the update lock, plan.short_slots() == 0; the table's write gate.
  void Commit(const Upsert& plan, absl::Span<const int64_t> keys);

  // The same keys in the same slots, with room for `capacity` slots (the table grown, as
  // core/table_growth.h lays it out): the index copied with room for them, the new slots
  // free, the first of them searched first. REQUIRES: capacity() <= capacity <=
  // kMaxKeyedCapacity; no writer (reads beside lookups).
  std::shared_ptr<KeyedRows> Grown(int64_t capacity) const;

 private:
  KeyedRows(std::string name, KeyIndex index, int64_t capacity, MissingKeys missing,
            bool has_default_row);
  // Marks the first `used` slots taken.
  void TakeFirstSlots(int64_t used);

  bool Used(int64_t slot) const { return (used_[slot >> 6] >> (slot & 63)) & 1; }

  const std::string name_;
  KeyIndex index_;
  const int64_t capacity_;
  const MissingKeys missing_;
  const bool has_default_row_;
  std::atomic<int64_t> size_;   // index_.size(), for readers without a lease
  std::vector<uint64_t> used_;  // a bit a slot: it holds a key
  int64_t cursor_ = 0;          // where the search for a free slot starts
};

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_KEYED_ROWS_H_
