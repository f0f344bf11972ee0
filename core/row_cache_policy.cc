#include "core/row_cache_policy.h"

#include <algorithm>
#include <cassert>

#include "absl/numeric/bits.h"

namespace tensorcompute::core {
namespace {

// splitmix64's finalizer, offset so that row 0 does not hash to 0.
inline uint64_t Mix(int64_t row) {
  uint64_t z = static_cast<uint64_t>(row) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

constexpr int kHashes = 4;
constexpr uint64_t kCounterMax = 15;
constexpr uint64_t kHalfMask = 0x7777777777777777ull;  // each counter's low three bits

// The sketch's counters of `row`: four by double hashing of one 64-bit hash.
inline void CounterIndices(int64_t row, uint64_t mask, uint64_t* out) {
  const uint64_t h = Mix(row ^ 0x5bd1e9955bd1e995ll);
  const uint64_t step = (h >> 32) | 1;  // odd: the four differ while mask + 1 > 4
  for (int i = 0; i < kHashes; ++i) out[i] = (h + static_cast<uint64_t>(i) * step) & mask;
}

inline uint64_t CounterAt(const std::vector<uint64_t>& words, uint64_t index) {
  return (words[index >> 4] >> ((index & 15) * 4)) & 0xF;
}

// The doorkeeper's two bits of `row` (another seed than the sketch's).
inline void DoorkeeperBits(int64_t row, uint64_t mask, uint64_t* out) {
  const uint64_t h = Mix(row ^ 0x3c6ef372fe94f82bll);
  out[0] = h & mask;
  out[1] = (h >> 32) & mask;
}

inline bool BitAt(const std::vector<uint64_t>& words, uint64_t index) {
  return ((words[index >> 6] >> (index & 63)) & 1) != 0;
}

// Sixteen counters a slot (eight bytes), as a power of two; at least one word. With four, a hot
// set of 0.4 of the cache's rows held 40% of the counters at their top, so 2% of the rows of a
// scan had all four of theirs there and were admitted over hot rows: a scan of twenty caches'
// rows evicted three quarters of the hot rows (tests/disk/disk_rows_test.cc). With sixteen it
// evicts none.
uint64_t CountersFor(int64_t capacity) {
  return absl::bit_ceil(static_cast<uint64_t>(std::max<int64_t>(16, 16 * capacity)));
}
// Sixteen doorkeeper bits a slot, as a power of two; at least one word.
uint64_t DoorkeeperBitsFor(int64_t capacity) {
  return absl::bit_ceil(static_cast<uint64_t>(std::max<int64_t>(64, 16 * capacity)));
}
int64_t CapacityFor(int64_t slots) {
  return std::max<int64_t>(1, slots / RowCachePolicy::kWays) * RowCachePolicy::kWays;
}

}  // namespace

int64_t RowCachePolicy::MemoryBytes(int64_t slots) {
  const int64_t capacity = CapacityFor(slots);
  return capacity * 16 + static_cast<int64_t>(CountersFor(capacity) / 2) +
         static_cast<int64_t>(DoorkeeperBitsFor(capacity) / 8);
}

RowCachePolicy::RowCachePolicy(int64_t slots, Options options)
    : admission_(options.admission), sets_(CapacityFor(slots) / kWays) {
  assert(slots >= 1);
  rows_.assign(static_cast<size_t>(capacity()), -1);
  used_.assign(static_cast<size_t>(capacity()), 0);
  const uint64_t counters = CountersFor(capacity());
  counters_.assign(counters / 16, 0);
  counter_mask_ = counters - 1;
  sample_ = kSampleFactor * capacity();
  const uint64_t bits = DoorkeeperBitsFor(capacity());
  doorkeeper_.assign(bits / 64, 0);
  doorkeeper_mask_ = bits - 1;
}

int64_t RowCachePolicy::Set(int64_t row) const {
  return static_cast<int64_t>(
      (static_cast<unsigned __int128>(Mix(row)) * static_cast<uint64_t>(sets_)) >> 64);
}

int RowCachePolicy::Frequency(int64_t row) const {
  uint64_t bits[2];
  DoorkeeperBits(row, doorkeeper_mask_, bits);
  const bool seen = BitAt(doorkeeper_, bits[0]) && BitAt(doorkeeper_, bits[1]);
  uint64_t index[kHashes];
  CounterIndices(row, counter_mask_, index);
  uint64_t least = kCounterMax;
  for (uint64_t i : index) least = std::min(least, CounterAt(counters_, i));
  return static_cast<int>(least) + (seen ? 1 : 0);
}

void RowCachePolicy::Count(int64_t row) {
  uint64_t bits[2];
  DoorkeeperBits(row, doorkeeper_mask_, bits);
  if (!BitAt(doorkeeper_, bits[0]) || !BitAt(doorkeeper_, bits[1])) {
    // A first access lately: the doorkeeper only.
    if (++admitted_ > kDoorkeeperFactor * capacity()) {
      std::fill(doorkeeper_.begin(), doorkeeper_.end(), 0);
      admitted_ = 1;
    }
    for (uint64_t bit : bits) doorkeeper_[bit >> 6] |= uint64_t{1} << (bit & 63);
    return;
  }
  uint64_t index[kHashes];
  CounterIndices(row, counter_mask_, index);
  uint64_t least = kCounterMax;
  for (uint64_t i : index) least = std::min(least, CounterAt(counters_, i));
  // Conservative update: only the counters at the least value grow (a count-min sketch's
  // estimate is that least value, and the others already over-count).
  if (least < kCounterMax) {
    for (uint64_t i : index) {
      if (CounterAt(counters_, i) == least) counters_[i >> 4] += uint64_t{1} << ((i & 15) * 4);
    }
  }
  if (++counted_ >= sample_) {  // TinyLFU's reset: every count halved
    for (uint64_t& word : counters_) word = (word >> 1) & kHalfMask;
    counted_ /= 2;
  }
}

int64_t RowCachePolicy::Find(int64_t row) {
  Count(row);
  const int64_t first = Set(row) * kWays;
  for (int64_t slot = first; slot < first + kWays; ++slot) {
    if (rows_[static_cast<size_t>(slot)] == row) {
      used_[static_cast<size_t>(slot)] = ++tick_;
      return slot;
    }
  }
  return -1;
}

int64_t RowCachePolicy::Slot(int64_t row) const {
  const int64_t first = Set(row) * kWays;
  for (int64_t slot = first; slot < first + kWays; ++slot) {
    if (rows_[static_cast<size_t>(slot)] == row) return slot;
  }
  return -1;
}

RowCachePolicy::Placement RowCachePolicy::Admit(int64_t row) {
  assert(row >= 0);
  const int64_t first = Set(row) * kWays;
  int64_t victim = first;
  for (int64_t slot = first; slot < first + kWays; ++slot) {
    assert(rows_[static_cast<size_t>(slot)] != row);
    if (rows_[static_cast<size_t>(slot)] < 0) {  // a free slot: no one is evicted
      rows_[static_cast<size_t>(slot)] = row;
      used_[static_cast<size_t>(slot)] = ++tick_;
      ++size_;
      return {slot, -1};
    }
    if (used_[static_cast<size_t>(slot)] < used_[static_cast<size_t>(victim)]) victim = slot;
  }
  const int64_t evicted = rows_[static_cast<size_t>(victim)];
  if (admission_ && Frequency(row) <= Frequency(evicted)) return {};
  rows_[static_cast<size_t>(victim)] = row;
  used_[static_cast<size_t>(victim)] = ++tick_;
  return {victim, evicted};
}

int64_t RowCachePolicy::Erase(int64_t row) {
  const int64_t first = Set(row) * kWays;
  for (int64_t slot = first; slot < first + kWays; ++slot) {
    if (rows_[static_cast<size_t>(slot)] == row) {
      rows_[static_cast<size_t>(slot)] = -1;
      --size_;
      return slot;
    }
  }
  return -1;
}

}  // namespace tensorcompute::core
