#include "core/tensor_registry.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

#include "core/key_split.h"
#include "core/status_macros.h"

namespace tensorcompute::core {
namespace {

constexpr size_t kMaxNameBytes = 256;

// An entry and the bytes it holds, freed together when the last user lets go.
struct Held {
  ResidentTensor entry;
  TensorRegistry::Reservation reservation;
};

absl::Status ExistsError(absl::string_view name, int64_t version) {
  return absl::AlreadyExistsError(absl::StrCat("tensor '", name, "' exists (version ", version,
                                               "); delete it first or put with replace = true"));
}

}  // namespace

int64_t ResidentBytes(DataType dtype, int64_t num_elements, int64_t string_payload_bytes) {
  if (dtype == DataType::kString) {
    return string_payload_bytes + num_elements * static_cast<int64_t>(sizeof(std::string));
  }
  return num_elements * static_cast<int64_t>(ElementSize(dtype));
}

absl::StatusOr<ResidentSize> ValidateResidentDescription(absl::string_view name, DataType dtype,
                                                         absl::Span<const int64_t> shape,
                                                         int64_t max_rank) {
  TC_RETURN_IF_ERROR(TensorRegistry::ValidateName(name));
  TC_RETURN_IF_ERROR(ValidateDataType(dtype, absl::StrCat("tensor '", name, "'")));
  if (shape.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' is a scalar; gathers need rank >= 1 (e.g. shape [1])"));
  }
  if (static_cast<int64_t>(shape.size()) > max_rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' has rank ", shape.size(), "; at most ", max_rank));
  }
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' has a negative dimension ", d));
    }
  }
  const std::optional<int64_t> elements = CheckedNumElements(shape);
  // What it will hold: its data, or for strings each element's bookkeeping (ResidentBytes)
  // before any payload. Either must fit int64, or the reservation made from it would not.
  const int64_t element_bytes = dtype == DataType::kString
                                    ? static_cast<int64_t>(sizeof(std::string))
                                    : static_cast<int64_t>(ElementSize(dtype));
  const std::optional<int64_t> bytes =
      elements ? CheckedMul(*elements, element_bytes) : std::nullopt;
  if (!elements || !bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': the element count of its shape overflows int64"));
  }
  return ResidentSize{*elements, dtype == DataType::kString ? 0 : *bytes};
}

TensorRegistry::Reservation& TensorRegistry::Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    if (counter_ != nullptr) counter_->fetch_sub(bytes_, std::memory_order_relaxed);
    counter_ = std::move(other.counter_);
    bytes_ = other.bytes_;
    other.counter_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

TensorRegistry::Reservation::~Reservation() {
  if (counter_ != nullptr) counter_->fetch_sub(bytes_, std::memory_order_relaxed);
}

TensorRegistry::TensorRegistry(int64_t max_resident_bytes, int64_t max_disk_bytes)
    : max_bytes_(max_resident_bytes), max_disk_bytes_(max_disk_bytes) {}

absl::Status TensorRegistry::ValidateName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor name has ", name.size(), " bytes; expected 1 to ", kMaxNameBytes));
  }
  for (char c : name) {
    if (c <= ' ' || c > '~') {
      return absl::InvalidArgumentError(
          "tensor name must be printable ASCII without spaces (e.g. user_embeddings)");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorRegistry::Reservation> TensorRegistry::Reserve(absl::string_view name,
                                                                    int64_t bytes) {
  int64_t used = counter_->load(std::memory_order_relaxed);
  do {
    if (bytes < 0 || used + bytes > max_bytes_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "tensor '", name, "' needs ", bytes, " bytes but ", used, " of max_resident_bytes = ",
          max_bytes_, " are in use; delete a tensor or raise --max_resident_bytes"));
    }
  } while (!counter_->compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  return Reservation(counter_, bytes);
}

absl::StatusOr<TensorRegistry::Reservation> TensorRegistry::ReserveDisk(absl::string_view name,
                                                                        int64_t bytes) {
  int64_t used = disk_counter_->load(std::memory_order_relaxed);
  do {
    if (bytes < 0 || used + bytes > max_disk_bytes_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("tensor '", name, "' needs ", bytes, " bytes on disk but ", used,
                       " of max_table_dir_bytes = ", max_disk_bytes_,
                       " are in use; delete a table on disk or raise --max_table_dir_bytes"));
    }
  } while (!disk_counter_->compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  return Reservation(disk_counter_, bytes);
}

absl::StatusOr<std::shared_ptr<const ResidentTensor>> TensorRegistry::Put(
    std::string name, Tensor tensor, DeviceCopy device_copy, bool replace, Reservation reservation,
    TableStorage storage, std::optional<ShardSpec> shard, std::shared_ptr<KeyedRows> keyed,
    std::shared_ptr<DiskRows> disk) {
  if (absl::Status valid = ValidateName(name); !valid.ok()) return valid;
  if (disk != nullptr && (shard.has_value() || device_copy.gpu >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': a table on disk is not sharded"));
  }
  if (disk != nullptr && keyed != nullptr && disk->rows() != keyed->capacity() + kKeyedHiddenRows) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': a keyed table on disk of ",
                                                   disk->rows(), " rows for ", keyed->capacity(),
                                                   " slots"));
  }
  if (absl::Status rows = CheckStoredRows(name, storage, tensor.view()); !rows.ok()) return rows;
  if (shard.has_value()) {
    const int64_t rows = tensor.shape().empty() ? 0 : tensor.shape()[0];
    if (absl::Status valid = ValidateShardSpec(name, *shard, rows); !valid.ok()) return valid;
    if (absl::Status kind = CheckShardKind(name, *shard, keyed != nullptr); !kind.ok()) {
      return kind;
    }
  }
  auto held = std::make_shared<Held>();
  held->entry.name = name;
  held->entry.tensor = std::move(tensor);
  held->entry.storage = storage;
  held->entry.shard = shard;
  held->entry.keyed = std::move(keyed);
  held->entry.disk = std::move(disk);
  held->entry.device =
      device_copy.gpu >= 0 ? absl::StrCat("gpu:", device_copy.gpu) : std::string("cpu");
  held->entry.device_copy = std::move(device_copy);
  held->entry.created = absl::Now();
  held->entry.bytes = reservation.bytes();
  held->reservation = std::move(reservation);
  std::shared_ptr<const ResidentTensor> entry(held, &held->entry);
  std::shared_ptr<const ResidentTensor> old;  // freed, if last, after the lock is let go
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(name);
    if (it != entries_.end() && !replace) {
      return ExistsError(name, it->second->version);
    }
    held->entry.version = ++last_version_[name];
    held->entry.stats = it != entries_.end() ? it->second->stats : std::make_shared<RequestStats>();
    int64_t sequence = 0;
    if (it != entries_.end()) {
      sequence = it->second->live->Retire(LiveRows::Fate::kReplaced) + 1;
    } else if (auto deleted = deleted_sequence_.find(name); deleted != deleted_sequence_.end()) {
      sequence = deleted->second + 1;
    }
    held->entry.live = std::make_shared<LiveRows>(sequence);
    if (it != entries_.end()) {
      old = std::move(it->second);
      it->second = entry;
    } else {
      entries_.emplace(std::move(name), entry);
    }
  }
  return entry;
}

absl::StatusOr<std::shared_ptr<const ResidentTensor>> TensorRegistry::PutGrown(
    const ResidentTensor& old, Tensor tensor, DeviceCopy device_copy, Reservation reservation,
    std::shared_ptr<KeyedRows> keyed) {
  auto held = std::make_shared<Held>();
  ResidentTensor& entry = held->entry;
  entry.name = old.name;
  entry.tensor = std::move(tensor);
  entry.storage = old.storage;
  entry.device = old.device;
  entry.device_copy = std::move(device_copy);
  entry.version = old.version;
  entry.created = old.created;
  entry.bytes = reservation.bytes();
  entry.shard = old.shard;
  entry.stats = old.stats;
  entry.keyed = std::move(keyed);
  held->reservation = std::move(reservation);
  std::shared_ptr<const ResidentTensor> grown(held, &held->entry);
  std::shared_ptr<const ResidentTensor> replaced;  // let go after the lock
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(old.name);
  if (it == entries_.end() || it->second.get() != &old) {
    return RetiredError(old, old.live->fate() == LiveRows::Fate::kDeleted
                                 ? LiveRows::Fate::kDeleted
                                 : LiveRows::Fate::kReplaced);
  }
  // No update advances the sequence meanwhile: the caller holds the update lock.
  entry.live = std::make_shared<LiveRows>(old.live->sequence());
  old.live->Retire(LiveRows::Fate::kGrown, grown);
  replaced = std::exchange(it->second, grown);
  return grown;
}

absl::Status TensorRegistry::CheckAbsent(absl::string_view name) const {
  const std::shared_ptr<const ResidentTensor> existing = Find(name);
  return existing == nullptr ? absl::OkStatus() : ExistsError(name, existing->version);
}

std::shared_ptr<const ResidentTensor> TensorRegistry::Find(absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : it->second;
}

absl::StatusOr<std::shared_ptr<const ResidentTensor>> TensorRegistry::Delete(
    absl::string_view name) {
  std::shared_ptr<const ResidentTensor> old;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(name);
    if (it == entries_.end()) {
      return absl::NotFoundError(absl::StrCat("no tensor named '", name, "'"));
    }
    old = std::move(it->second);
    entries_.erase(it);
    deleted_sequence_[old->name] = old->live->Retire(LiveRows::Fate::kDeleted);
  }
  return old;
}

std::vector<std::shared_ptr<const ResidentTensor>> TensorRegistry::List() const {
  std::vector<std::shared_ptr<const ResidentTensor>> list;
  {
    absl::MutexLock lock(&mu_);
    list.reserve(entries_.size());
    for (const auto& [name, entry] : entries_) list.push_back(entry);
  }
  std::sort(list.begin(), list.end(),
            [](const auto& a, const auto& b) { return a->name < b->name; });
  return list;
}

}  // namespace tensorcompute::core
