// File: core/tensor_registry.h
//
// Resident tensors: named tables stored once on the server, so that callers send only indices
// (issue 9). The registry maps a name to an immutable, reference-counted entry:
//
//   - Find hands out a shared_ptr to the entry, so a gather in flight keeps the version it
//     started with however the name changes meanwhile; an entry's memory is freed when its last
//     user is done, and only then leaves the resident byte count.
//   - Put publishes a complete tensor under a name atomically: a reader sees the old entry or
//     the new one, never a mix. Replacing needs `replace`, else ALREADY_EXISTS.
//   - Memory is reserved before anything is allocated (Reserve: RESOURCE_EXHAUSTED past
//     max_resident_bytes); a reservation not put is given back when it is destroyed, so an
//     aborted upload leaves nothing.
//
// Uploads build their tensor without any lock; the registry's mutex guards only the map, held
// for a lookup or a swap (never across an allocation, a copy or a free).
//
// Thread-safety: every method may be called from any thread.

#ifndef TENSORCOMPUTE_CORE_TENSOR_REGISTRY_H_
#define TENSORCOMPUTE_CORE_TENSOR_REGISTRY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

#include "core/disk_rows.h"
#include "core/dtype.h"
#include "core/keyed_rows.h"
#include "core/live_rows.h"
#include "core/request_stats.h"
#include "core/shard_spec.h"
#include "core/table_storage.h"
#include "core/tensor.h"

namespace tensorcompute::core {

// A tensor's copy in a GPU's memory (made by core/cuda, CudaUploadTable); empty on the CPU.
struct DeviceCopy {
  int gpu = -1;                         // the CUDA ordinal; -1: none
  const void* data = nullptr;           // the tensor's packed bytes in that GPU's memory
  std::shared_ptr<const void> storage;  // owns `data`; frees it when the last user is done
};

// One stored version of a named tensor. Immutable once published, but for its rows' values,
// which UpdateRows changes in place through `live` (core/live_rows.h). A GPU tensor keeps its host
// copy in `tensor` too (the CPU executor serves what the GPU does not, e.g. a lost device).
// A compact table (core/table_storage.h) holds its stored form in `tensor` (float16
// [rows, dim] or uint8 [rows, dim + 8]); what lookups return is logical_dtype() and
// logical_shape(), float32 [rows, dim].
// A shard (core/shard_spec.h) holds rows ShardRows(*shard) of a table of shard->total_rows
// rows: `tensor` holds those rows only, while logical_shape() and plan_view() have the whole
// table's rows, which requests index (server/compute/shard_router.h splits them by shard).
struct ResidentTensor {
  std::string name;
  Tensor tensor;
  TableStorage storage = TableStorage::kAsIs;
  std::string device;  // where its bytes live: "cpu", or "gpu:N"
  DeviceCopy device_copy;
  // 1 for a name's first tensor, +1 for each later one; a delete does not reset the count, so
  // a (name, version) pair names one upload for the server's life.
  int64_t version = 0;
  absl::Time created;
  int64_t bytes = 0;               // what it counts against max_resident_bytes
  std::optional<ShardSpec> shard;  // set for one shard of a table
  // What requests on this name were served (core/request_stats.h): one object for the name,
  // kept by Put across replacements and dropped with Delete. Never null in the registry.
  std::shared_ptr<RequestStats> stats;
  // The gate between lookups and row updates, and the name's sequence (core/live_rows.h).
  // Never null in the registry.
  std::shared_ptr<LiveRows> live;
  // Set for a keyed table (core/keyed_rows.h): its keys, whose slots are `tensor`'s first
  // keyed->capacity() rows; `tensor` holds kKeyedHiddenRows more (the zero and default rows),
  // which plan_view() and local_view() leave out and keyed_view() shows.
  std::shared_ptr<KeyedRows> keyed;
  // Set for a table on disk (core/disk_rows.h, issue 43): its rows are in disk's file behind a
  // row cache, and `tensor` holds none of them (its first dimension is 0; its dtype and other
  // dimensions are the stored rows'). plan_view() has the table's rows, disk->rows(); a keyed
  // table's file holds its slots and then its kKeyedHiddenRows rows, as `tensor` would.
  std::shared_ptr<DiskRows> disk;

  TableEncoding encoding() const { return EncodingOf(storage); }
  bool compact() const { return storage != TableStorage::kAsIs; }
  DataType logical_dtype() const { return LogicalDtype(storage, tensor.dtype()); }
  Shape logical_shape() const { return LogicalShape(storage, plan_view().shape); }
  // What requests are planned against: `tensor`'s view, or for a shard by row range the whole
  // table's (a shard by key's is its own: a lookup by keys is split before it is planned), or
  // for a table on disk its rows on disk: its first dimension total_rows (or disk->rows()) and
  // its data a null pointer of the whole table's length, which planning checks but never
  // reads. Such plans are split by shard (core/shard_split.h) or made again on the rows fetched
  // from disk (server/compute/disk_lookup.h), never executed as they are (a kernel that did
  // would fault at once, not read wrong rows).
  TensorView plan_view() const {
    TensorView view = local_view();
    if (view.shape.empty()) return view;
    int64_t rows = -1;
    if (shard.has_value() && !shard->by_key) rows = shard->total_rows;
    if (disk != nullptr) rows = keyed != nullptr ? keyed->capacity() : disk->rows();
    if (rows >= 0) view = RowsOnDisk(std::move(view), rows);
    return view;
  }
  // The shard's own rows, as a table of their own; a keyed table's slots.
  TensorView local_view() const {
    TensorView view = tensor.view();
    if (keyed != nullptr && disk == nullptr) {
      const size_t row_bytes = view.data.size() / static_cast<size_t>(view.shape[0]);
      view.shape[0] = keyed->capacity();
      view.data = view.data.subspan(0, row_bytes * static_cast<size_t>(view.shape[0]));
    }
    return view;
  }
  // A keyed table's rows with the zero and default rows after its slots: what a lookup by keys
  // is planned on (its keys resolve to slots, core/keyed_rows.h). On disk: disk->rows() rows
  // with null data, as plan_view() has them.
  TensorView keyed_view() const {
    if (disk != nullptr) return RowsOnDisk(tensor.view(), disk->rows());
    return tensor.view();
  }

  // `view` (rank >= 1) with `rows` rows whose data is a null pointer of their length: rows
  // planned on, never read.
  static TensorView RowsOnDisk(TensorView view, int64_t rows) {
    size_t row_bytes = ElementSize(view.dtype);
    for (size_t d = 1; d < view.shape.size(); ++d) row_bytes *= static_cast<size_t>(view.shape[d]);
    view.shape[0] = rows;
    view.data = absl::Span<const uint8_t>(nullptr, row_bytes * static_cast<size_t>(rows));
    return view;
  }
};

// The bytes a tensor of `dtype` and `shape` counts against the cap: its data, or for strings
// the given payload plus one std::string per element.
int64_t ResidentBytes(DataType dtype, int64_t num_elements, int64_t string_payload_bytes);

// What a resident tensor's description (PutTensor's first message, --preload) holds.
struct ResidentSize {
  int64_t elements = 0;    // product of the shape
  int64_t data_bytes = 0;  // elements x element size; 0 for DT_STRING
};

// Checks the description of a tensor to be made resident, before anything is reserved or
// allocated. Returns its size, or INVALID_ARGUMENT for the first of these faults:
//   a bad name (ValidateName's message);
//   an unspecified or unknown dtype (ValidateDataType's, e.g. "tensor 'NAME': unknown dtype 99;
//     expected one of bool, ..., string");
//   an empty shape: "tensor 'NAME' is a scalar; gathers need rank >= 1 (e.g. shape [1])";
//   more than `max_rank` dimensions: "tensor 'NAME' has rank R; at most MAX_RANK";
//   a negative dimension: "tensor 'NAME' has a negative dimension D";
//   an element count or byte count (not for DT_STRING) above int64: "tensor 'NAME': the element
//     count of its shape overflows int64".
absl::StatusOr<ResidentSize> ValidateResidentDescription(absl::string_view name, DataType dtype,
                                                         absl::Span<const int64_t> shape,
                                                         int64_t max_rank);

class TensorRegistry {
 public:
  // Bytes held for an upload until it is put or abandoned (then they are given back).
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept { *this = std::move(other); }
    Reservation& operator=(Reservation&& other) noexcept;
    ~Reservation();

    int64_t bytes() const { return bytes_; }

    // Takes over `other`'s bytes (a later Reserve of the same registry, e.g. an upload's next
    // chunk of strings).
    void Absorb(Reservation other) {
      bytes_ += other.bytes_;
      other.bytes_ = 0;
    }

   private:
    friend class TensorRegistry;
    Reservation(std::shared_ptr<std::atomic<int64_t>> counter, int64_t bytes)
        : counter_(std::move(counter)), bytes_(bytes) {}
    std::shared_ptr<std::atomic<int64_t>> counter_;
    int64_t bytes_ = 0;
  };

  // `max_resident_bytes` > 0. `max_disk_bytes`: the bytes the files this server writes for
  // tables on disk may hold (ReserveDisk), >= 0.
  explicit TensorRegistry(int64_t max_resident_bytes, int64_t max_disk_bytes = 0);

  // Reserves `bytes` (>= 0) if the total stays within the cap, else RESOURCE_EXHAUSTED saying
  // how much is resident and what the cap is.
  absl::StatusOr<Reservation> Reserve(absl::string_view name, int64_t bytes);

  // Reserves `bytes` (>= 0) of the files written for tables on disk if their total stays within
  // max_disk_bytes, else RESOURCE_EXHAUSTED "tensor 'T' needs N bytes on disk but U of
  // max_table_dir_bytes = M are in use; delete a table on disk or raise
  // --max_table_dir_bytes". A table keeps it with its file (DiskRows::Options::hold).
  absl::StatusOr<Reservation> ReserveDisk(absl::string_view name, int64_t bytes);

  // Publishes `tensor` as `name`, keeping `reservation`'s bytes until the entry is freed.
  // A replaced entry is retired (LiveRows::Retire: later row updates to it are refused) and
  // the new one's sequence continues from it; a name's first entry starts at 0, or after a
  // delete at the deleted entry's sequence + 1.
  // ALREADY_EXISTS if the name is taken and `replace` is false; INVALID_ARGUMENT for a name
  // that is empty, longer than 256 bytes, or not printable ASCII, or for rows `storage` does
  // not accept (CheckStoredRows). Returns the entry.
  // `device_copy` (optional) is the tensor's copy in a GPU's memory: device "gpu:N", else "cpu".
  // `storage`: how `tensor` holds the table (core/table_storage.h; `tensor` is then the stored
  // form PlanTableLayout gave). `shard`: which rows of a table `tensor` holds
  // (ValidateShardSpec checks it against tensor's first dimension: INVALID_ARGUMENT; a shard
  // by key without `keyed` is INVALID_ARGUMENT, "tensor 'T': a table sharded by key is a keyed
  // table (put it with keys)").
  // `keyed`: the keys of a keyed table, whose `tensor` is laid out as core/keyed_rows.h says
  // (capacity + kKeyedHiddenRows rows).
  // `disk`: the rows of a table on disk (core/disk_rows.h); `tensor` is then their stored dtype
  // and shape with 0 rows (a keyed table's file: keyed->capacity() + kKeyedHiddenRows rows). A
  // table on disk is neither sharded nor on a GPU (yet): INVALID_ARGUMENT "tensor 'T': a table
  // on disk is not sharded".
  absl::StatusOr<std::shared_ptr<const ResidentTensor>> Put(
      std::string name, Tensor tensor, DeviceCopy device_copy, bool replace,
      Reservation reservation, TableStorage storage = TableStorage::kAsIs,
      std::optional<ShardSpec> shard = std::nullopt, std::shared_ptr<KeyedRows> keyed = nullptr,
      std::shared_ptr<DiskRows> disk = nullptr);

  // Publishes `tensor`, keyed table `old` grown (core/table_growth.h: `keyed` its keys with
  // room, `tensor` its rows laid out for keyed->capacity()), in `old`'s place, keeping
  // `reservation`'s bytes until the entry is freed. The name, version, creation time, storage,
  // shard, statistics and sequence are `old`'s; `old` is retired as grown (LiveRows::Retire
  // kGrown), pointing at the new entry. Gathers holding `old` finish on it. When `old` is no
  // longer the name's entry (replaced or deleted meanwhile) nothing is published: RetiredError's
  // words (core/live_rows.h). REQUIRES: old.live->update_lock() held.
  absl::StatusOr<std::shared_ptr<const ResidentTensor>> PutGrown(const ResidentTensor& old,
                                                                 Tensor tensor,
                                                                 DeviceCopy device_copy,
                                                                 Reservation reservation,
                                                                 std::shared_ptr<KeyedRows> keyed);

  // The current entry of `name`, or null.
  std::shared_ptr<const ResidentTensor> Find(absl::string_view name) const;

  // OK when no tensor is named `name` now; else ALREADY_EXISTS with Put's message (naming its
  // version). For an upload that checks before its bytes arrive; Put checks again.
  absl::Status CheckAbsent(absl::string_view name) const;

  // Removes `name` and returns the entry removed (NOT_FOUND if absent), retired. Gathers
  // holding it finish on it.
  absl::StatusOr<std::shared_ptr<const ResidentTensor>> Delete(absl::string_view name);

  // Every current entry, by name.
  std::vector<std::shared_ptr<const ResidentTensor>> List() const;

  // Bytes reserved or held by entries, including removed ones still in use.
  int64_t resident_bytes() const { return counter_->load(std::memory_order_relaxed); }
  int64_t max_resident_bytes() const { return max_bytes_; }
  // Bytes reserved or held by the files of tables on disk (ReserveDisk).
  int64_t disk_bytes() const { return disk_counter_->load(std::memory_order_relaxed); }
  int64_t max_disk_bytes() const { return max_disk_bytes_; }

  static absl::Status ValidateName(absl::string_view name);

 private:
  const int64_t max_bytes_;
  const std::shared_ptr<std::atomic<int64_t>> counter_ = std::make_shared<std::atomic<int64_t>>(0);
  const int64_t max_disk_bytes_;
  const std::shared_ptr<std::atomic<int64_t>> disk_counter_ =
      std::make_shared<std::atomic<int64_t>>(0);
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const ResidentTensor>> entries_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int64_t> last_version_ ABSL_GUARDED_BY(mu_);
  // The sequence of each deleted name's last entry.
  absl::flat_hash_map<std::string, int64_t> deleted_sequence_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_TENSOR_REGISTRY_H_
