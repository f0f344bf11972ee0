#include "server/native/disk_upload.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

#include "core/keyed_rows.h"
#include "core/status_macros.h"
#include "proto/tensor_codec.h"

namespace tensorcompute::server {
namespace {

absl::Status Refused(const std::string& name, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("tensor '", name, "': a table on disk (tier DISK) ", why));
}

}  // namespace

absl::Status CheckTier(const std::string& name, v1::TableTier tier) {
  if (tier == v1::MEMORY || tier == v1::DISK) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': unknown tier ",
                                                 static_cast<int>(tier),
                                                 "; expected MEMORY (0) or DISK (1)"));
}

absl::StatusOr<std::unique_ptr<DiskUpload>> DiskUpload::Begin(const DiskTier& tier,
                                                              core::TensorRegistry* registry,
                                                              const std::string& name,
                                                              const core::TableLayout& layout,
                                                              const v1::PutTensorRequest& first) {
  if (tier.table_dir.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("tensor '", name,
                     "': this server keeps no tables on disk from PutTensor (start it with "
                     "--table_dir)"));
  }
  if (layout.stored_dtype == core::DataType::kString) return Refused(name, "is not DT_STRING");
  if (first.has_shard()) return Refused(name, "is not sharded");
  if (!first.device().empty() && first.device() != "cpu") {
    return Refused(name, absl::StrCat("lives on the CPU, not on '", first.device(), "'"));
  }
  auto upload = std::unique_ptr<DiskUpload>(new DiskUpload());
  upload->name_ = name;
  upload->cache_bytes_ = tier.cache_bytes;
  const int64_t rows = layout.stored_shape.empty() ? 0 : layout.stored_shape[0];
  const int64_t row_bytes = core::disk::TableWriter::StoredRowBytes(layout);
  if (row_bytes < 1) return Refused(name, "needs rows of at least one byte");
  TC_ASSIGN_OR_RETURN(const int64_t cache_rows,
                      core::DiskRows::CacheRows(name, tier.cache_bytes, row_bytes, rows));
  // In memory: the cache, and a keyed table's key index (the rows' slots are in the file).
  const int64_t key_index =
      first.has_keyed() ? core::KeyIndexBytes(rows - core::kKeyedHiddenRows) : 0;
  TC_ASSIGN_OR_RETURN(
      upload->memory_,
      registry->Reserve(name, core::DiskRows::MemoryBytesFor(cache_rows, row_bytes) + key_index));
  TC_ASSIGN_OR_RETURN(upload->file_, registry->ReserveDisk(name, layout.stored_bytes));
  TC_ASSIGN_OR_RETURN(upload->writer_,
                      core::disk::TableWriter::Create(name, layout, tier.table_dir,
                                                      core::disk::RowFile::Options{}));
  if (first.has_keyed()) TC_RETURN_IF_ERROR(upload->WriteHiddenRows(layout, first.keyed()));
  return upload;
}

absl::Status DiskUpload::WriteHiddenRows(const core::TableLayout& layout,
                                         const v1::KeyedTable& keyed) {
  // The zero row and the default row (core/keyed_rows.h), laid out as a table of two rows:
  // the default row is its row 1, as it is the table's row capacity + 1.
  const int64_t capacity = layout.stored_shape[0] - core::kKeyedHiddenRows;
  core::Shape shape = layout.stored_shape;
  shape[0] = core::kKeyedHiddenRows;
  TC_ASSIGN_OR_RETURN(core::Tensor hidden, core::Tensor::Allocate(layout.stored_dtype, shape));
  std::memset(hidden.mutable_bytes().data(), 0, hidden.mutable_bytes().size());
  if (keyed.has_default_row()) {
    TC_ASSIGN_OR_RETURN(const core::TensorView row,
                        proto::ViewTensor(keyed.default_row(), "default_row"));
    core::MutableTensorView stored;
    stored.dtype = layout.stored_dtype;
    stored.shape = shape;
    stored.data = hidden.mutable_bytes();
    TC_RETURN_IF_ERROR(core::WriteDefaultRow(name_, layout.storage, 0, row, stored));
    TC_RETURN_IF_ERROR(core::CheckStoredRows(name_, layout.storage, hidden.view(), capacity));
  }
  return writer_->WriteRows(capacity, core::kKeyedHiddenRows, hidden.mutable_bytes().data());
}

absl::StatusOr<std::shared_ptr<core::DiskRows>> DiskUpload::Finish(
    core::TensorRegistry::Reservation* memory) {
  TC_ASSIGN_OR_RETURN(std::unique_ptr<core::disk::RowFile> file, writer_->Finish());
  core::DiskRows::Options options;
  options.cache_bytes = cache_bytes_;
  options.hold = std::make_shared<core::TensorRegistry::Reservation>(std::move(file_));
  TC_ASSIGN_OR_RETURN(std::shared_ptr<core::DiskRows> rows,
                      core::DiskRows::Open(name_, std::move(file), std::move(options)));
  *memory = std::move(memory_);
  return rows;
}

}  // namespace tensorcompute::server
