// File: core/row_cache_policy.h
//
// Which rows a row cache keeps (issue 43: tables on disk behind a row cache in memory). The
// policy holds no row bytes: it maps row numbers to the cache's slots [0, capacity()), and
// says, on a miss, which slot the row is read into and which row that evicts.
//
//   Placement   set-associative: the slots are sets of kWays; a row may live only in its set,
//               chosen by a hash of its number (so a lookup reads one set's tags). Within a set,
//               the least recently used row is the victim.
//   Admission   TinyLFU (Einziger, Friedman and Manes, "TinyLFU: A Highly Efficient Cache
//               Admission Policy", ACM Transactions on Storage 13(4), 2017). A row's first
//               access lately sets its bit in a doorkeeper (a Bloom filter of 16 bits a slot,
//               two hashes, cleared after 2 x capacity() new rows: about 5% false positives);
//               later ones are counted in a count-min sketch of 4-bit counters (sixteen a slot,
//               as Caffeine sizes its sketch; four hashes, conservative increments), halved after
//               kSampleFactor x capacity() counts so that old popularity fades. A row's frequency
//               is its count plus its doorkeeper bit. A missing row takes a full set's victim's
//               slot only if it is more frequent than the victim; else it is served without being
//               cached. Rows asked for once never reach the sketch, so a scan, however long,
//               neither flushes the rows asked for repeatedly (as it does under plain LRU) nor ages
//               their counts.
//
// With admission off (Options::admission = false) it is a set-associative LRU.
//
// Thread-safety: none; a cache serializes all its calls (the counts are shared by every set).

#ifndef TENSORCOMPUTE_CORE_ROW_CACHE_POLICY_H_
#define TENSORCOMPUTE_CORE_ROW_CACHE_POLICY_H_

#include <cstdint>
#include <vector>

namespace tensorcompute::core {

class RowCachePolicy {
 public:
  static constexpr int kWays = 8;
  // The sketch is halved after kSampleFactor x capacity() counts (TinyLFU's W).
  static constexpr int64_t kSampleFactor = 10;
  // The doorkeeper is cleared after kDoorkeeperFactor x capacity() rows new to it.
  static constexpr int64_t kDoorkeeperFactor = 2;

  struct Options {
    bool admission = true;
  };

  // A cache of at most `slots` rows: capacity() is `slots` rounded down to whole sets (at
  // least one set). REQUIRES: slots >= 1.
  explicit RowCachePolicy(int64_t slots, Options options);

  RowCachePolicy(const RowCachePolicy&) = delete;
  RowCachePolicy& operator=(const RowCachePolicy&) = delete;

  // A lookup of `row`: counts the access, and returns the row's slot when cached (it becomes
  // its set's most recently used), else -1.
  int64_t Find(int64_t row);

  // Where a missing row goes: its slot, and the row evicted from it (-1: the slot was free).
  // slot -1: not admitted (the row is served without being cached; nothing changes).
  struct Placement {
    int64_t slot = -1;
    int64_t evicted = -1;
  };
  // After Find(row) returned -1: places the row by the rules above. REQUIRES: row is not
  // cached, row >= 0.
  Placement Admit(int64_t row);

  // The row's slot when cached, else -1, without counting an access or touching its recency
  // (for a cache that rechecks a row it missed before admitting it).
  int64_t Slot(int64_t row) const;

  // Drops `row` from the cache if it is there (a row rewritten by its own update, or whose read
  // failed); its slot becomes free. Returns the slot it held, or -1.
  int64_t Erase(int64_t row);

  // The bytes a policy of `slots` holds (its vectors; what memory_bytes() returns for it).
  static int64_t MemoryBytes(int64_t slots);
  int64_t memory_bytes() const { return MemoryBytes(capacity()); }

  // The set `row` belongs to, in [0, sets()).
  int64_t Set(int64_t row) const;
  int64_t sets() const { return sets_; }
  int64_t capacity() const { return sets_ * kWays; }
  // Rows cached now.
  int64_t size() const { return size_; }
  // How often `row` was asked for lately, as admission compares it (0..16).
  int Frequency(int64_t row) const;

 private:
  void Count(int64_t row);

  const bool admission_;
  const int64_t sets_;
  std::vector<int64_t> rows_;   // [capacity()]: a slot's row, -1 when free
  std::vector<uint64_t> used_;  // [capacity()]: when the slot's row was last used (tick_)
  uint64_t tick_ = 0;
  int64_t size_ = 0;
  // The count-min sketch: 4-bit counters, sixteen to a word.
  std::vector<uint64_t> counters_;
  uint64_t counter_mask_ = 0;  // counters - 1 (a power of two)
  int64_t counted_ = 0;        // counts since the last halving
  int64_t sample_ = 0;         // halving period
  // The doorkeeper: one bit a row (two hashes), sixty-four to a word.
  std::vector<uint64_t> doorkeeper_;
  uint64_t doorkeeper_mask_ = 0;  // bits - 1 (a power of two)
  int64_t admitted_ = 0;          // rows new to the doorkeeper since it was cleared
};

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_ROW_CACHE_POLICY_H_
