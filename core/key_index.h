// File: core/key_index.h
//
// The key index of a keyed table (issue 42): unique int64 keys, any value (INT64_MIN and
// INT64_MAX included), mapped to row numbers in [0, 2^31 - 1), compactly, for lookups by keys
// at the speed of lookups by row numbers.
//
// Layout: open addressing over cache-line buckets. A bucket is 64 bytes, one cache line: 5
// keys, their 5 rows (uint32; the row 0xFFFFFFFF marks an empty slot, since every key value
// is legal) and four overflow counts (the keys that passed this bucket, full when they came,
// to be stored further on, counted by two bits of their hash). A key's home bucket comes from
// a fast 64-bit mixer of the key; it is stored in the first bucket from its home with a free
// slot (linear probing by bucket). A lookup reads the home bucket's line and goes on only
// while the count of its hash's quarter says a key passed, so most lookups, present or
// absent, read one cache line.
//
// Memory: 12.8 bytes a slot. Build and Reserve size the table to the working load factor
// kWorkingLoad (0.85: 15.1 bytes a key, everything included: memory_bytes()); Insert grows it
// by 1.5x when it would pass kMaxLoad (0.9), so between growths a key costs 14.2 to 21.3
// bytes. The bucket count is not a power of two: the home bucket is the high half of
// hash * buckets (a multiply, no division), so the table can be sized to the load exactly
// (a power of two would cost up to 2x, e.g. 25 bytes a key for 1 M keys).
// Erase empties the slot and lowers the overflow counts it had raised: no tombstones, so
// probes do not degrade with churn. (A count that reached 255 sticks until the next rehash and
// sends its quarter's absent keys one bucket further; 255 keys of one quarter passing one
// bucket is far beyond what loads below kMaxLoad produce.)
//
// Thread-safety: const methods may run concurrently with each other; mutations (Insert,
// Assign, Erase, Reserve, assignment) need exclusive access (the caller's write gate).

#ifndef TENSORCOMPUTE_CORE_KEY_INDEX_H_
#define TENSORCOMPUTE_CORE_KEY_INDEX_H_

#include <cstdint>
#include <memory>
#include <new>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include "core/thread_pool.h"

namespace tensorcompute::core {

class KeyIndex {
 public:
  // Rows are in [0, kMaxRows); a table holds fewer than kMaxRows keys.
  static constexpr int64_t kMaxRows = (int64_t{1} << 31) - 1;
  // The load factor Build and Reserve size the table to, and the one Insert grows past.
  static constexpr double kWorkingLoad = 0.85;
  static constexpr double kMaxLoad = 0.9;

  KeyIndex();  // empty: holds no memory beyond the object
  ~KeyIndex();
  KeyIndex(KeyIndex&& other) noexcept;
  KeyIndex& operator=(KeyIndex&& other) noexcept;
  KeyIndex(const KeyIndex&) = delete;
  KeyIndex& operator=(const KeyIndex&) = delete;

  // An index with keys[i] -> row i, sized to kWorkingLoad.
  // Errors (INVALID_ARGUMENT):
  //   - a duplicate, naming both positions: "keys[7] = -42 repeats keys[3]", for the first
  //     duplicate in position order (the smallest later position j whose key appeared at an
  //     earlier position i), the same with or without a pool;
  //   - keys.size() >= kMaxRows.
  // `pool` (may be null: this thread alone) builds with every core: the buckets are split into
  // ranges by hash, the keys are partitioned by range (in position order), and each range is
  // filled by one thread without locks; the few keys that would overflow past the end of their
  // range are inserted last, in position order.
  static absl::StatusOr<KeyIndex> Build(absl::Span<const int64_t> keys, ThreadPool* pool);

  // rows[i] = the row of keys[i], or -1 when keys[i] is absent. The hot path: the home buckets
  // of the keys ahead are hashed and prefetched while earlier keys are probed.
  // REQUIRES: rows has keys.size() elements.
  void Find(absl::Span<const int64_t> keys, int64_t* rows) const;
  // The row of one key; -1 when absent.
  int64_t Find(int64_t key) const;

  // Adds key -> row and returns true; returns false, changing nothing, if the key is present.
  // Grows the table (rehash, 1.5x the buckets) when the key would pass kMaxLoad.
  // REQUIRES: 0 <= row < kMaxRows; size() < kMaxRows - 1.
  bool Insert(int64_t key, int64_t row);
  // Changes an existing key's row and returns true; false (nothing changed) if absent.
  // REQUIRES: 0 <= row < kMaxRows.
  bool Assign(int64_t key, int64_t row);
  // Removes the key and returns its row; -1 (nothing changed) if absent. Never rehashes.
  int64_t Erase(int64_t key);
  // Makes room for `keys` keys in all without a rehash (sized to kWorkingLoad when it must
  // grow). Never shrinks.
  void Reserve(int64_t keys);
  // A copy of this index (the same keys and rows) with room for `keys` keys in all, sized as
  // Reserve sizes it (never fewer buckets than this one): for a keyed table that grows
  // (core/table_growth.h). A const method: it may run beside lookups.
  KeyIndex CopyWithRoom(int64_t keys) const;

  int64_t size() const { return size_; }
  // Bytes held by the index: the buckets and this object.
  int64_t memory_bytes() const;
  // size() over the slots; 0 when empty.
  double load_factor() const;
  // The number of slots: size() may reach floor(capacity() * kMaxLoad) without a rehash.
  int64_t capacity() const { return num_buckets_ * kSlots; }

  // ---- Implementation details ----
  static constexpr int kSlots = 5;
  static constexpr uint32_t kEmpty = 0xFFFFFFFFu;
  struct alignas(64) Bucket {
    int64_t keys[kSlots];
    uint32_t rows[kSlots];  // kEmpty: a free slot (its key is meaningless)
    // By quarter of the hash: the keys stored past this bucket whose probe started at or
    // before it (255 sticks: "some").
    uint8_t overflow[4];
  };
  static_assert(sizeof(Bucket) == 64, "a bucket is one cache line");

 private:
  struct BucketsDeleter {
    std::align_val_t alignment;
    void operator()(Bucket* buckets) const;
  };
  using Buckets = std::unique_ptr<Bucket[], BucketsDeleter>;
  struct Slot {  // a key's place: bucket -1 when absent
    int64_t bucket;
    int slot;
  };
  class Builder;

  static Buckets Allocate(int64_t num_buckets);
  static int64_t BucketsFor(int64_t keys);
  int64_t Home(int64_t key) const;
  int64_t Next(int64_t bucket) const { return bucket + 1 == num_buckets_ ? 0 : bucket + 1; }
  int64_t Probe(int64_t bucket, int64_t key, int quarter) const;
  Slot Locate(int64_t key) const;
  void Place(int64_t key, uint32_t row);
  void Rehash(int64_t num_buckets);

  Buckets buckets_;
  int64_t num_buckets_ = 0;
  int64_t size_ = 0;
};

// The documented hash that decides a key's shard in a sharded keyed table, so a trainer can
// compute a key's owner itself. Fixed forever once published:
//
//   KeyShardHash(key) = splitmix64's finalizer of the key's two's-complement bits, in uint64
//   arithmetic (wrapping):
//     z = uint64(key)
//     z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
//     z = (z ^ (z >> 27)) * 0x94d049bb133111eb
//     z = z ^ (z >> 31)
//   KeyShard(key, shards) = KeyShardHash(key) % shards   (unsigned remainder)
//
// Worked examples (checked by tests/core/key_index_test.cc):
//   KeyShardHash(1)         = 0x5692161d100b05e5 = 6238072747940578789;  % 8  -> shard 5
//   KeyShardHash(-1)        = 0xb4d055fcf2cbbd7b = 13029008266876403067; % 10 -> shard 7
//   KeyShardHash(123456789) = 0xf21c87d4233ffd60 = 17445968401720671584; % 10 -> shard 4
// (and KeyShardHash(0) = 0, so key 0 is always on shard 0). In NumPy, with uint64 arrays and
// overflow warnings off: the same three lines, then `z % shards`.
// REQUIRES (KeyShard): shards >= 1.
uint64_t KeyShardHash(int64_t key);
int64_t KeyShard(int64_t key, int64_t shards);

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_KEY_INDEX_H_
