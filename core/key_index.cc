#include "core/key_index.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/numeric/bits.h"
#include "absl/strings/str_cat.h"
#include <sys/mman.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace tensorcompute::core {
namespace {

// The buckets of a large index sit on transparent huge pages: random probes of a table of
// hundreds of MiB otherwise miss the TLB as well as the cache (as core/tensor.cc does).
constexpr size_t kHugePageBytes = size_t{2} << 20;
constexpr size_t kAdviseHugePagesFrom = size_t{4} << 20;

// The index's own hash (not KeyShardHash, so that the keys of one shard, which share
// KeyShardHash's residue, still spread evenly): a 64x64 -> 128-bit multiply folded, whose
// high bits depend on every bit of the key. Sequential keys spread like random ones.
inline uint64_t Mix(int64_t key) {
  const unsigned __int128 m =
      static_cast<unsigned __int128>(static_cast<uint64_t>(key) ^ 0x2d358dccaa6c78a5ull) *
      0x8bb84b93962eacc9ull;
  return static_cast<uint64_t>(m >> 64) ^ static_cast<uint64_t>(m);
}

// Bucket `b` of `n`, from the high bits of hash * n (Lemire's multiply-shift: no division, and
// buckets in increasing order are hashes in increasing order, which the parallel build uses).
inline int64_t HomeOf(uint64_t hash, int64_t n) {
  return static_cast<int64_t>((static_cast<unsigned __int128>(hash) * static_cast<uint64_t>(n)) >>
                              64);
}

// The overflow count a key's probe reads and raises: one of four, by two low bits of its hash
// (the home bucket comes from the high bits), so an absent key goes on past a full bucket only
// if a key of its quarter went on. A count that reaches kStickyOverflow stays there (it still
// says "go on", so lookups stay right; it is reset by a rehash).
constexpr uint8_t kStickyOverflow = 255;
inline int QuarterOf(uint64_t hash) { return static_cast<int>(hash & 3); }
inline void RaiseOverflow(KeyIndex::Bucket& bucket, int quarter) {
  bucket.overflow[quarter] += bucket.overflow[quarter] != kStickyOverflow;
}
inline void LowerOverflow(KeyIndex::Bucket& bucket, int quarter) {
  bucket.overflow[quarter] -= bucket.overflow[quarter] != kStickyOverflow;
}

// Bit s set when slot s holds `key`.
inline uint32_t MatchMask(const KeyIndex::Bucket& bucket, int64_t key) {
#if defined(__SSE2__)
  // SSE2 has no 64-bit compare: the first four keys are compared as 32-bit halves, and a key
  // matches where both of its halves do. On the 2-vCPU VM this takes a probe of a cached
  // bucket from about 27 to 16 ns (the loop of ten scalar compares it replaces).
  const __m128i k = _mm_set1_epi64x(key);
  const auto* keys = reinterpret_cast<const __m128i*>(bucket.keys);
  const __m128i halves01 = _mm_cmpeq_epi32(_mm_load_si128(keys), k);
  const __m128i halves23 = _mm_cmpeq_epi32(_mm_load_si128(keys + 1), k);
  const __m128i keys01 = _mm_and_si128(halves01, _mm_shuffle_epi32(halves01, 0xB1));
  const __m128i keys23 = _mm_and_si128(halves23, _mm_shuffle_epi32(halves23, 0xB1));
  const uint32_t same = static_cast<uint32_t>(_mm_movemask_pd(_mm_castsi128_pd(keys01))) |
                        static_cast<uint32_t>(_mm_movemask_pd(_mm_castsi128_pd(keys23))) << 2 |
                        static_cast<uint32_t>(bucket.keys[4] == key) << 4;
  const __m128i empty =
      _mm_cmpeq_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bucket.rows)),
                      _mm_set1_epi32(static_cast<int32_t>(KeyIndex::kEmpty)));
  const uint32_t free = static_cast<uint32_t>(_mm_movemask_ps(_mm_castsi128_ps(empty))) |
                        static_cast<uint32_t>(bucket.rows[4] == KeyIndex::kEmpty) << 4;
  static_assert(KeyIndex::kSlots == 5, "four keys in two registers, then the fifth");
  return same & ~free;
#else
  uint32_t mask = 0;
  for (int s = 0; s < KeyIndex::kSlots; ++s) {
    mask |= static_cast<uint32_t>((bucket.keys[s] == key) & (bucket.rows[s] != KeyIndex::kEmpty))
            << s;
  }
  return mask;
#endif
}

// The first free slot of the bucket, or -1 when it is full.
inline int FreeSlot(const KeyIndex::Bucket& bucket) {
  for (int s = 0; s < KeyIndex::kSlots; ++s) {
    if (bucket.rows[s] == KeyIndex::kEmpty) return s;
  }
  return -1;
}

void ClearBuckets(KeyIndex::Bucket* buckets, int64_t begin, int64_t end) {
  for (int64_t b = begin; b < end; ++b) {
    std::memset(buckets[b].rows, 0xFF, sizeof(buckets[b].rows));
    std::memset(buckets[b].overflow, 0, sizeof(buckets[b].overflow));
  }
}

// Runs fn(begin, end) over [0, n) on the pool, or inline without one.
void ForRange(ThreadPool* pool, int64_t n, absl::FunctionRef<void(int64_t, int64_t)> fn) {
  if (pool != nullptr) {
    pool->ParallelFor(n, 1, fn);
  } else if (n > 0) {
    fn(0, n);
  }
}

}  // namespace

// ---- Build ----

// Build in partitions: the buckets are split into `parts` ranges; bucket b belongs to range
// floor(b * parts / buckets), so a key's range follows from its home bucket. The keys'
// positions are sorted by range (a counting sort, stable: position order within a range), then
// each range is filled by one thread touching only its own buckets, so no locks are needed and
// a range (about 1 MiB) stays in cache while it fills. A key that would overflow past its
// range's last bucket is deferred and placed by one thread at the end, in position order.
class KeyIndex::Builder {
 public:
  Builder(absl::Span<const int64_t> keys, ThreadPool* pool, KeyIndex& index)
      : keys_(keys), pool_(pool), index_(index), n_(static_cast<int64_t>(keys.size())) {
    const int64_t threads = pool == nullptr ? 1 : pool->size() + 1;
    const int64_t bytes = index.num_buckets_ * static_cast<int64_t>(sizeof(Bucket));
    parts_ = std::clamp<int64_t>(std::max<int64_t>(bytes >> 20, 4 * threads), 1,
                                 std::min<int64_t>(index.num_buckets_, 4096));
    chunks_ = pool == nullptr ? 1 : std::clamp<int64_t>(n_ >> 16, 1, 4 * threads);
  }

  // Fills the index; the first duplicate's error if there is one.
  absl::Status Run() {
    SortByPart();
    std::vector<PartResult> results(parts_);
    ForRange(pool_, parts_, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) results[p] = FillPart(p);
    });
    Duplicate first;
    std::vector<int64_t> deferred;
    for (const PartResult& r : results) {
      index_.size_ += r.placed;
      if (r.duplicate.later >= 0 && (first.later < 0 || r.duplicate.later < first.later)) {
        first = r.duplicate;
      }
      deferred.insert(deferred.end(), r.deferred.begin(), r.deferred.end());
    }
    std::sort(deferred.begin(), deferred.end());
    for (int64_t position : deferred) {
      const int64_t key = keys_[position];
      const int64_t earlier = index_.Find(key);
      if (earlier >= 0) {
        if (first.later < 0 || position < first.later) first = {position, earlier};
        break;
      }
      index_.Place(key, static_cast<uint32_t>(position));
      ++index_.size_;
    }
    if (first.later < 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("keys[", first.later, "] = ", keys_[first.later],
                                                   " repeats keys[", first.earlier, "]"));
  }

 private:
  struct Duplicate {
    int64_t later = -1;
    int64_t earlier = -1;
  };
  struct Entry {
    int64_t key;
    uint32_t position;
  };
  struct PartResult {
    int64_t placed = 0;
    Duplicate duplicate;            // the part's first, in position order
    std::vector<int64_t> deferred;  // positions that overflow past the part's last bucket
  };

  int64_t PartOfBucket(int64_t bucket) const {
    return bucket * parts_ / index_.num_buckets_;  // < 2^31 * 4096: no overflow
  }
  int64_t FirstBucketOf(int64_t part) const {  // the smallest b with PartOfBucket(b) == part
    return (part * index_.num_buckets_ + parts_ - 1) / parts_;
  }
  int64_t ChunkBegin(int64_t chunk) const { return chunk * n_ / chunks_; }

  // order_ = the keys with their positions, grouped by part, in position order within a part
  // (so a part reads its keys in sequence, not scattered over the column); part_begin_[p] =
  // where part p starts in order_.
  void SortByPart() {
    std::vector<int64_t> counts(chunks_ * parts_, 0);
    ForRange(pool_, chunks_, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        int64_t* count = &counts[c * parts_];
        for (int64_t i = ChunkBegin(c); i < ChunkBegin(c + 1); ++i) {
          ++count[PartOfBucket(index_.Home(keys_[i]))];
        }
      }
    });
    part_begin_.assign(parts_ + 1, 0);
    int64_t offset = 0;
    for (int64_t p = 0; p < parts_; ++p) {
      part_begin_[p] = offset;
      for (int64_t c = 0; c < chunks_; ++c) {
        const int64_t count = counts[c * parts_ + p];
        counts[c * parts_ + p] = offset;  // now where chunk c writes part p
        offset += count;
      }
    }
    part_begin_[parts_] = offset;
    order_.reset(new Entry[n_]);
    ForRange(pool_, chunks_, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        int64_t* next = &counts[c * parts_];
        for (int64_t i = ChunkBegin(c); i < ChunkBegin(c + 1); ++i) {
          order_[next[PartOfBucket(index_.Home(keys_[i]))]++] = {keys_[i],
                                                                 static_cast<uint32_t>(i)};
        }
      }
    });
  }

  // Clears part p's buckets and places its keys in position order, within the part.
  PartResult FillPart(int64_t part) {
    PartResult result;
    const int64_t first = FirstBucketOf(part);
    const int64_t last = FirstBucketOf(part + 1);  // one past
    Bucket* buckets = index_.buckets_.get();
    ClearBuckets(buckets, first, last);
    for (int64_t k = part_begin_[part]; k < part_begin_[part + 1]; ++k) {
      const uint32_t position = order_[k].position;
      const int64_t key = order_[k].key;
      const uint64_t hash = Mix(key);
      const int64_t home = HomeOf(hash, index_.num_buckets_);
      // Only keys are added here, so a key present is in the buckets from its home to the
      // first with a free slot, where this one goes.
      int64_t b = home;
      int slot = -1;
      for (; b < last; ++b) {
        if (const uint32_t match = MatchMask(buckets[b], key); match != 0) {
          result.duplicate = {position, buckets[b].rows[absl::countr_zero(match)]};
          return result;
        }
        if ((slot = FreeSlot(buckets[b])) >= 0) break;
      }
      if (b == last) {
        result.deferred.push_back(position);
        continue;
      }
      buckets[b].keys[slot] = key;
      buckets[b].rows[slot] = position;
      for (int64_t passed = home; passed < b; ++passed) {
        RaiseOverflow(buckets[passed], QuarterOf(hash));
      }
      ++result.placed;
    }
    return result;
  }

  const absl::Span<const int64_t> keys_;
  ThreadPool* const pool_;
  KeyIndex& index_;
  const int64_t n_;
  int64_t parts_ = 1;
  int64_t chunks_ = 1;
  std::vector<int64_t> part_begin_;
  std::unique_ptr<Entry[]> order_;
};

absl::StatusOr<KeyIndex> KeyIndex::Build(absl::Span<const int64_t> keys, ThreadPool* pool) {
  const int64_t n = static_cast<int64_t>(keys.size());
  if (n >= kMaxRows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "keys: ", n, " keys are too many for a key index (at most ", kMaxRows - 1, ")"));
  }
  KeyIndex index;
  if (n == 0) return index;
  index.num_buckets_ = BucketsFor(n);
  index.buckets_ = Allocate(index.num_buckets_);
  absl::Status status = Builder(keys, pool, index).Run();
  if (!status.ok()) return status;
  return index;
}

// ---- Lookups ----

int64_t KeyIndex::Home(int64_t key) const { return HomeOf(Mix(key), num_buckets_); }

// Follows the chain from `bucket`, the key's home: a later bucket can hold the key only while
// the overflow counts say that some key went on. The step bound ends the walk even if every
// bucket's count were raised.
int64_t KeyIndex::Probe(int64_t bucket, int64_t key, int quarter) const {
  const Bucket* buckets = buckets_.get();
  for (int64_t steps = 0; steps < num_buckets_; ++steps) {
    const Bucket& here = buckets[bucket];
    if (const uint32_t match = MatchMask(here, key); match != 0) {
      return here.rows[absl::countr_zero(match)];
    }
    if (here.overflow[quarter] == 0) return -1;
    bucket = Next(bucket);
  }
  return -1;
}

int64_t KeyIndex::Find(int64_t key) const {
  if (num_buckets_ == 0) return -1;
  const uint64_t hash = Mix(key);
  return Probe(HomeOf(hash, num_buckets_), key, QuarterOf(hash));
}

void KeyIndex::Find(absl::Span<const int64_t> keys, int64_t* rows) const {
  const int64_t n = static_cast<int64_t>(keys.size());
  if (num_buckets_ == 0) {
    std::fill(rows, rows + n, -1);
    return;
  }
  // The home bucket of the key kAhead places on is prefetched as each key is probed.
  constexpr int64_t kAhead = 32;
  // The keys go by in chunks. A first pass probes each key's home bucket and carries nothing
  // from one key to the next that depends on a bucket (no branch on it, no count of keys to
  // follow): a bucket late from memory then holds up only its own key. It notes the keys to
  // follow past their home (not there, and their quarter's count says "go on": about 16% of
  // present keys at kWorkingLoad, and absent keys near full buckets); they are listed next, and
  // followed a bucket further per round, those buckets prefetched kAhead ahead in turn.
  // Measured on the 2-vCPU VM, 4 M keys, one thread (CPU time): 22 ns a key, against 41 when a
  // key is followed as soon as it is seen, or listed as it is seen (each costs a miss a key
  // waits for), and 13 if no key had to be followed.
  constexpr int64_t kChunk = 2048;
  uint8_t go_on[kChunk];
  int64_t follow[kChunk];       // positions in keys
  int64_t follow_next[kChunk];  // the next bucket to look in for each
  const Bucket* buckets = buckets_.get();
  for (int64_t i = 0; i < std::min(n, kAhead); ++i) {
    __builtin_prefetch(&buckets[HomeOf(Mix(keys[i]), num_buckets_)]);
  }
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t end = std::min(n, begin + kChunk);
    for (int64_t i = begin; i < end; ++i) {
      if (i + kAhead < n) {
        __builtin_prefetch(&buckets[HomeOf(Mix(keys[i + kAhead]), num_buckets_)]);
      }
      const uint64_t hash = Mix(keys[i]);
      const Bucket& bucket = buckets[HomeOf(hash, num_buckets_)];
      const uint32_t match = MatchMask(bucket, keys[i]);
      const uint32_t row = bucket.rows[absl::countr_zero(match | (1u << (kSlots - 1)))];
      rows[i] = match != 0 ? static_cast<int64_t>(row) : -1;
      go_on[i - begin] = (match == 0) & (bucket.overflow[QuarterOf(hash)] != 0);
    }
    int64_t count = 0;
    for (int64_t i = begin; i < end; ++i) {
      follow[count] = i;
      count += go_on[i - begin];
    }
    for (int64_t j = 0; j < count; ++j) {
      follow_next[j] = Next(HomeOf(Mix(keys[follow[j]]), num_buckets_));
    }
    // A round looks one bucket further for every key left (at most num_buckets_ rounds, as
    // Probe's steps); a key still on the list after them all is absent.
    for (int64_t round = 0; count > 0 && round < num_buckets_; ++round) {
      for (int64_t j = 0; j < std::min(count, kAhead); ++j) {
        __builtin_prefetch(&buckets[follow_next[j]]);
      }
      int64_t left = 0;
      for (int64_t j = 0; j < count; ++j) {
        if (j + kAhead < count) __builtin_prefetch(&buckets[follow_next[j + kAhead]]);
        const int64_t i = follow[j];
        const Bucket& bucket = buckets[follow_next[j]];
        if (const uint32_t match = MatchMask(bucket, keys[i]); match != 0) {
          rows[i] = bucket.rows[absl::countr_zero(match)];
        } else if (bucket.overflow[QuarterOf(Mix(keys[i]))] != 0) {
          follow[left] = i;
          follow_next[left] = Next(follow_next[j]);
          ++left;
        }
      }
      count = left;
    }
  }
}

KeyIndex::Slot KeyIndex::Locate(int64_t key) const {
  if (num_buckets_ == 0) return {-1, 0};
  const uint64_t hash = Mix(key);
  int64_t bucket = HomeOf(hash, num_buckets_);
  for (int64_t steps = 0; steps < num_buckets_; ++steps) {
    const Bucket& here = buckets_[bucket];
    if (const uint32_t match = MatchMask(here, key); match != 0) {
      return {bucket, absl::countr_zero(match)};
    }
    if (here.overflow[QuarterOf(hash)] == 0) break;
    bucket = Next(bucket);
  }
  return {-1, 0};
}

// ---- Mutations ----

// Puts an absent key in the first free slot from its home, raising the overflow count of
// every full bucket it passes. REQUIRES: the key is absent; a free slot exists.
void KeyIndex::Place(int64_t key, uint32_t row) {
  const uint64_t hash = Mix(key);
  int64_t bucket = HomeOf(hash, num_buckets_);
  for (;;) {
    Bucket& here = buckets_[bucket];
    if (const int slot = FreeSlot(here); slot >= 0) {
      here.keys[slot] = key;
      here.rows[slot] = row;
      return;
    }
    RaiseOverflow(here, QuarterOf(hash));
    bucket = Next(bucket);
  }
}

bool KeyIndex::Insert(int64_t key, int64_t row) {
  assert(row >= 0 && row < kMaxRows);
  if (Locate(key).bucket >= 0) return false;
  if (static_cast<double>(size_ + 1) > kMaxLoad * static_cast<double>(capacity())) {
    Rehash(std::max(num_buckets_ + num_buckets_ / 2, BucketsFor(size_ + 1)));
  }
  Place(key, static_cast<uint32_t>(row));
  ++size_;
  return true;
}

bool KeyIndex::Assign(int64_t key, int64_t row) {
  assert(row >= 0 && row < kMaxRows);
  const Slot at = Locate(key);
  if (at.bucket < 0) return false;
  buckets_[at.bucket].rows[at.slot] = static_cast<uint32_t>(row);
  return true;
}

int64_t KeyIndex::Erase(int64_t key) {
  const Slot at = Locate(key);
  if (at.bucket < 0) return -1;
  Bucket& here = buckets_[at.bucket];
  const int64_t row = here.rows[at.slot];
  here.rows[at.slot] = kEmpty;
  const uint64_t hash = Mix(key);
  for (int64_t b = HomeOf(hash, num_buckets_); b != at.bucket; b = Next(b)) {
    LowerOverflow(buckets_[b], QuarterOf(hash));
  }
  --size_;
  return row;
}

void KeyIndex::Reserve(int64_t keys) {
  if (static_cast<double>(keys) <= kMaxLoad * static_cast<double>(capacity())) return;
  Rehash(BucketsFor(keys));
}

KeyIndex KeyIndex::CopyWithRoom(int64_t keys) const {
  KeyIndex copy;
  copy.num_buckets_ = std::max(num_buckets_, BucketsFor(std::max(keys, size_)));
  copy.buckets_ = Allocate(copy.num_buckets_);
  ClearBuckets(copy.buckets_.get(), 0, copy.num_buckets_);
  for (int64_t b = 0; b < num_buckets_; ++b) {
    for (int s = 0; s < kSlots; ++s) {
      if (buckets_[b].rows[s] != kEmpty) copy.Place(buckets_[b].keys[s], buckets_[b].rows[s]);
    }
  }
  copy.size_ = size_;
  return copy;
}

void KeyIndex::Rehash(int64_t num_buckets) {
  Buckets old = std::exchange(buckets_, Allocate(num_buckets));
  const int64_t old_count = std::exchange(num_buckets_, num_buckets);
  ClearBuckets(buckets_.get(), 0, num_buckets_);
  for (int64_t b = 0; b < old_count; ++b) {
    for (int s = 0; s < kSlots; ++s) {
      if (old[b].rows[s] != kEmpty) Place(old[b].keys[s], old[b].rows[s]);
    }
  }
}

// ---- Memory ----

int64_t KeyIndex::BucketsFor(int64_t keys) {
  return std::max<int64_t>(
      1, static_cast<int64_t>(std::ceil(static_cast<double>(keys) / (kSlots * kWorkingLoad))));
}

KeyIndex::Buckets KeyIndex::Allocate(int64_t num_buckets) {
  const size_t bytes = static_cast<size_t>(num_buckets) * sizeof(Bucket);
  const std::align_val_t alignment{bytes >= kAdviseHugePagesFrom ? kHugePageBytes
                                                                 : alignof(Bucket)};
  auto* buckets = static_cast<Bucket*>(::operator new[](bytes, alignment));
#if defined(MADV_HUGEPAGE)
  if (bytes >= kAdviseHugePagesFrom) madvise(buckets, bytes, MADV_HUGEPAGE);  // advice only
#endif
  return Buckets(buckets, BucketsDeleter{alignment});
}

void KeyIndex::BucketsDeleter::operator()(Bucket* buckets) const {
  ::operator delete[](buckets, alignment);
}

KeyIndex::KeyIndex() : buckets_(nullptr, BucketsDeleter{std::align_val_t{alignof(Bucket)}}) {}
KeyIndex::~KeyIndex() = default;

KeyIndex::KeyIndex(KeyIndex&& other) noexcept
    : buckets_(std::move(other.buckets_)),
      num_buckets_(std::exchange(other.num_buckets_, 0)),
      size_(std::exchange(other.size_, 0)) {}

KeyIndex& KeyIndex::operator=(KeyIndex&& other) noexcept {
  buckets_ = std::move(other.buckets_);
  num_buckets_ = std::exchange(other.num_buckets_, 0);
  size_ = std::exchange(other.size_, 0);
  return *this;
}

int64_t KeyIndex::memory_bytes() const {
  return num_buckets_ * static_cast<int64_t>(sizeof(Bucket)) + static_cast<int64_t>(sizeof(*this));
}

double KeyIndex::load_factor() const {
  return capacity() == 0 ? 0.0 : static_cast<double>(size_) / static_cast<double>(capacity());
}

// ---- Shards ----

uint64_t KeyShardHash(int64_t key) {
  uint64_t z = static_cast<uint64_t>(key);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int64_t KeyShard(int64_t key, int64_t shards) {
  assert(shards >= 1);
  return static_cast<int64_t>(KeyShardHash(key) % static_cast<uint64_t>(shards));
}

}  // namespace tensorcompute::core
