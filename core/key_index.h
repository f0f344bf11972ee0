// TEMPORARY STUB (not committed): replaced by helper's core/key_index.h.
#ifndef TENSORCOMPUTE_CORE_KEY_INDEX_H_
#define TENSORCOMPUTE_CORE_KEY_INDEX_H_
#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"

#include "core/thread_pool.h"
namespace tensorcompute::core {
class KeyIndex {
 public:
  KeyIndex() = default;
  static absl::StatusOr<KeyIndex> Build(absl::Span<const int64_t> keys, ThreadPool*) {
    KeyIndex k;
    for (size_t i = 0; i < keys.size(); ++i) {
      auto [it, ok] = k.m_.emplace(keys[i], static_cast<int64_t>(i));
      if (!ok)
        return absl::InvalidArgumentError(
            absl::StrCat("keys[", i, "] = ", keys[i], " repeats keys[", it->second, "]"));
    }
    return k;
  }
  void Find(absl::Span<const int64_t> keys, int64_t* rows) const {
    for (size_t i = 0; i < keys.size(); ++i) rows[i] = Find(keys[i]);
  }
  int64_t Find(int64_t key) const {
    auto it = m_.find(key);
    return it == m_.end() ? -1 : it->second;
  }
  bool Insert(int64_t key, int64_t row) { return m_.emplace(key, row).second; }
  bool Assign(int64_t key, int64_t row) {
    auto it = m_.find(key);
    if (it == m_.end()) return false;
    it->second = row;
    return true;
  }
  int64_t Erase(int64_t key) {
    auto it = m_.find(key);
    if (it == m_.end()) return -1;
    int64_t r = it->second;
    m_.erase(it);
    return r;
  }
  void Reserve(int64_t n) { m_.reserve(n); }
  int64_t size() const { return m_.size(); }
  int64_t memory_bytes() const { return m_.capacity() * 16; }

 private:
  absl::flat_hash_map<int64_t, int64_t> m_;
};
}  // namespace tensorcompute::core
#endif
