#include "core/disk/table_writer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

#include "core/status_macros.h"

namespace tensorcompute::core::disk {

absl::StatusOr<std::unique_ptr<TableWriter>> TableWriter::Create(std::string name,
                                                                 const TableLayout& layout,
                                                                 const std::string& dir,
                                                                 RowFile::Options options) {
  auto writer = std::unique_ptr<TableWriter>(new TableWriter());
  writer->name_ = std::move(name);
  writer->layout_ = layout;
  const int64_t rows = layout.stored_shape.empty() ? 0 : layout.stored_shape[0];
  const int64_t row_bytes = StoredRowBytes(layout);
  if (row_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", writer->name_, "': a table on disk needs rows of at least one byte"));
  }
  writer->row_bytes_ = row_bytes;
  writer->sent_rows_ = layout.logical_shape.empty() ? 0 : layout.logical_shape[0];
  TC_ASSIGN_OR_RETURN(writer->file_,
                      RowFile::CreateUnnamed(dir, rows, writer->row_bytes_, options));
  writer->buffer_.reserve(static_cast<size_t>(std::max(kBufferBytes, writer->row_bytes_)));
  if (layout.encodes()) {
    TableWriter* self = writer.get();
    writer->encoder_.emplace(writer->name_, layout, [self](int64_t /*row*/, const uint8_t* stored) {
      return self->Store(absl::MakeConstSpan(stored, static_cast<size_t>(self->row_bytes_)));
    });
  }
  return writer;
}

int64_t TableWriter::StoredRowBytes(const TableLayout& layout) {
  if (layout.stored_shape.empty()) return 0;
  int64_t bytes = static_cast<int64_t>(ElementSize(layout.stored_dtype));
  for (size_t d = 1; d < layout.stored_shape.size(); ++d) bytes *= layout.stored_shape[d];
  return bytes;
}

absl::Status TableWriter::Append(absl::Span<const uint8_t> sent) {
  if (encoder_) return encoder_->Append(sent);
  return Store(sent);
}

absl::Status TableWriter::Store(absl::Span<const uint8_t> stored) {
  while (!stored.empty()) {
    const size_t room = buffer_.capacity() - buffer_.size();
    const size_t take = std::min(room, stored.size());
    buffer_.insert(buffer_.end(), stored.begin(), stored.begin() + take);
    stored.remove_prefix(take);
    if (buffer_.size() == buffer_.capacity()) TC_RETURN_IF_ERROR(Flush());
  }
  return absl::OkStatus();
}

absl::Status TableWriter::Flush() {
  const int64_t rows = static_cast<int64_t>(buffer_.size()) / row_bytes_;
  if (rows == 0) return absl::OkStatus();
  const size_t bytes = static_cast<size_t>(rows * row_bytes_);
  TensorView view;
  view.dtype = layout_.stored_dtype;
  view.shape = layout_.stored_shape;
  view.shape[0] = rows;
  view.data = absl::MakeConstSpan(buffer_.data(), bytes);
  TC_RETURN_IF_ERROR(CheckStoredRows(name_, layout_.storage, view, written_rows_));
  TC_RETURN_IF_ERROR(file_->WriteRows(written_rows_, rows, buffer_.data()));
  written_rows_ += rows;
  buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(bytes));
  unsynced_bytes_ += static_cast<int64_t>(bytes);
  if (unsynced_bytes_ >= kSyncBytes) {
    TC_RETURN_IF_ERROR(file_->Sync());
    unsynced_bytes_ = 0;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RowFile>> TableWriter::Finish() {
  TC_RETURN_IF_ERROR(Flush());
  if (!buffer_.empty() || written_rows_ != sent_rows_) {
    return absl::InternalError(absl::StrCat("tensor '", name_, "': ", written_rows_, " of ",
                                            sent_rows_, " rows written to its file"));
  }
  TC_RETURN_IF_ERROR(file_->Sync());
  return std::move(file_);
}

}  // namespace tensorcompute::core::disk
