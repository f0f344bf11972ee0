#include "core/disk_rows.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

#include "core/status_macros.h"

namespace tensorcompute::core {
namespace {

constexpr int64_t kWays = RowCachePolicy::kWays;
absl::Status InTable(const std::string& name, const absl::Status& error) {
  return absl::Status(error.code(), absl::StrCat("table '", name, "' on disk: ", error.message()));
}

}  // namespace

class DiskRows::Recorder final : public ReadObserver {
 public:
  Recorder(const DiskRows& rows, ReadObserver* next) : rows_(rows), next_(next) {}
  void OnRead(int64_t bytes, int64_t nanos) override {
    rows_.read_bytes_.fetch_add(bytes, std::memory_order_relaxed);
    rows_.read_seconds_.Observe(static_cast<double>(nanos) * 1e-9);
    if (next_ != nullptr) next_->OnRead(bytes, nanos);
  }

 private:
  const DiskRows& rows_;
  ReadObserver* const next_;
};

void DiskRows::FreeDeleter::operator()(uint8_t* p) const { std::free(p); }

int64_t DiskRows::CacheRowsFor(int64_t cache_bytes, int64_t row_bytes, int64_t rows) {
  if (row_bytes <= 0 || cache_bytes <= 0) return 0;
  const int64_t table_sets = std::max<int64_t>(1, (rows + kWays - 1) / kWays);
  const int64_t sets = std::min(cache_bytes / row_bytes / kWays, table_sets);
  return sets * kWays;
}

absl::StatusOr<int64_t> DiskRows::CacheRows(absl::string_view name, int64_t cache_bytes,
                                            int64_t row_bytes, int64_t rows) {
  const int64_t cache_rows = CacheRowsFor(cache_bytes, row_bytes, rows);
  if (cache_rows == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table '", name, "' on disk: a cache of ", cache_bytes,
        " bytes holds less than one set of ", kWays, " rows of ", row_bytes, " bytes"));
  }
  return cache_rows;
}

int64_t DiskRows::MemoryBytesFor(int64_t cache_rows, int64_t row_bytes) {
  return cache_rows * row_bytes + RowCachePolicy::MemoryBytes(cache_rows);
}

absl::StatusOr<std::unique_ptr<DiskRows>> DiskRows::Open(std::string name,
                                                         std::unique_ptr<TableFile> file,
                                                         Options options) {
  TC_ASSIGN_OR_RETURN(const int64_t cache_rows,
                      CacheRows(name, options.cache_bytes, file->row_bytes(), file->rows()));
  auto rows = std::unique_ptr<DiskRows>(new DiskRows());
  rows->name_ = std::move(name);
  rows->hold_ = std::move(options.hold);
  rows->file_ = std::move(file);
  rows->cache_rows_ = cache_rows;
  void* p = nullptr;
  if (posix_memalign(&p, 64, static_cast<size_t>(cache_rows * rows->row_bytes())) != 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("table '", rows->name_, "' on disk: no memory for its cache"));
  }
  rows->cache_.reset(static_cast<uint8_t*>(p));
  rows->policy_ =
      std::make_unique<RowCachePolicy>(cache_rows, RowCachePolicy::Options{options.admission});
  return rows;
}

DiskRows::~DiskRows() = default;

int64_t DiskRows::memory_bytes() const { return MemoryBytesFor(cache_rows_, row_bytes()); }

int64_t DiskRows::cached_rows() const {
  absl::MutexLock lock(&mu_);
  return policy_->size();
}

absl::Status DiskRows::Fetch(absl::Span<const int64_t> rows, uint8_t* dest, FetchStats* stats,
                             ReadObserver* observer) const {
  std::vector<uint8_t*> to(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) to[i] = dest + static_cast<int64_t>(i) * row_bytes();
  return FetchTo(rows, to.data(), stats, observer);
}

absl::Status DiskRows::FetchTo(absl::Span<const int64_t> rows, uint8_t* const* dest,
                               FetchStats* stats, ReadObserver* observer,
                               uint8_t* missed_out) const {
  const int64_t row_bytes = this->row_bytes();
  std::vector<int64_t> missed;  // positions in rows
  int64_t writes_before = 0;
  {
    absl::MutexLock lock(&mu_);
    writes_before = writes_;
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t slot = policy_->Find(rows[i]);
      if (slot >= 0) {
        std::memcpy(dest[i], SlotBytes(slot), static_cast<size_t>(row_bytes));
      } else {
        missed.push_back(static_cast<int64_t>(i));
      }
      if (missed_out != nullptr) missed_out[i] = slot < 0 ? 1 : 0;
    }
  }
  const int64_t hits = static_cast<int64_t>(rows.size() - missed.size());
  hits_.fetch_add(hits, std::memory_order_relaxed);
  misses_.fetch_add(static_cast<int64_t>(missed.size()), std::memory_order_relaxed);
  if (stats != nullptr) {
    stats->hits += hits;
    stats->misses += static_cast<int64_t>(missed.size());
  }
  if (missed.empty()) return absl::OkStatus();

  std::vector<int64_t> missed_rows(missed.size());
  std::vector<uint8_t*> missed_dest(missed.size());
  for (size_t j = 0; j < missed.size(); ++j) {
    missed_rows[j] = rows[static_cast<size_t>(missed[j])];
    missed_dest[j] = dest[static_cast<size_t>(missed[j])];
  }
  Recorder recorder(*this, observer);
  if (absl::Status s = file_->Read(missed_rows, missed_dest.data(), &recorder); !s.ok()) {
    return InTable(name_, s);
  }

  absl::MutexLock lock(&mu_);
  if (writes_ != writes_before) return absl::OkStatus();  // what was read may be stale
  for (size_t j = 0; j < missed.size(); ++j) {
    // Another Fetch may have read and cached the row meanwhile.
    if (policy_->Slot(missed_rows[j]) >= 0) continue;
    const RowCachePolicy::Placement placed = policy_->Admit(missed_rows[j]);
    if (placed.slot >= 0) {
      std::memcpy(SlotBytes(placed.slot), missed_dest[j], static_cast<size_t>(row_bytes));
    }
  }
  return absl::OkStatus();
}

absl::Status DiskRows::Write(int64_t row, const uint8_t* bytes) {
  absl::MutexLock write_lock(&write_mu_);
  if (absl::Status s = file_->Write(row, bytes); !s.ok()) {
    // The file may hold part of the row: the cached copy, if any, would disagree with it.
    absl::MutexLock lock(&mu_);
    ++writes_;
    policy_->Erase(row);
    return InTable(name_, s);
  }
  absl::MutexLock lock(&mu_);
  ++writes_;
  const int64_t slot = policy_->Slot(row);
  if (slot >= 0) std::memcpy(SlotBytes(slot), bytes, static_cast<size_t>(row_bytes()));
  return absl::OkStatus();
}

absl::Status DiskRows::Sync() {
  if (absl::Status s = file_->Sync(); !s.ok()) return InTable(name_, s);
  return absl::OkStatus();
}

}  // namespace tensorcompute::core
