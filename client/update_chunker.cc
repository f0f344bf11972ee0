#include "client/update_chunker.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

#include "core/dtype.h"
#include "core/shape.h"
#include "proto/tensor_codec.h"

namespace tensorcompute::client {
namespace {

// The bytes of one row of `values` (all but its first dimension), or nullopt on overflow.
// REQUIRES: values has rank >= 1 and a fixed-size dtype.
std::optional<int64_t> RowBytes(const TensorSource& values) {
  const core::Shape row(values.shape.begin() + 1, values.shape.end());
  const std::optional<int64_t> n = core::CheckedNumElements(row);
  if (!n.has_value()) return std::nullopt;
  return core::CheckedMul(*n, static_cast<int64_t>(core::ElementSize(values.dtype)));
}

}  // namespace

absl::Status CheckUpdateRows(const core::TensorView& indices, const TensorSource& values,
                             bool by_keys) {
  if (by_keys && (indices.rank() != 1 || indices.dtype != core::DataType::kInt64)) {
    return absl::InvalidArgumentError(absl::StrCat("keys must be int64 of rank 1; got ",
                                                   core::DataTypeName(indices.dtype), " ",
                                                   core::ShapeToString(indices.shape)));
  }
  if (indices.rank() != 1 ||
      (indices.dtype != core::DataType::kInt32 && indices.dtype != core::DataType::kInt64)) {
    return absl::InvalidArgumentError(absl::StrCat("indices must be int32 or int64 of rank 1; got ",
                                                   core::DataTypeName(indices.dtype), " ",
                                                   core::ShapeToString(indices.shape)));
  }
  if (indices.data.size() !=
      static_cast<size_t>(indices.shape[0]) * core::ElementSize(indices.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "indices: ", indices.data.size(), " bytes for shape ", core::ShapeToString(indices.shape)));
  }
  if (values.dtype == core::DataType::kString || values.dtype == core::DataType::kUnspecified ||
      values.shape.empty() || !SourceBytes(values).has_value() || !RowBytes(values).has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("values must have a fixed-size dtype, rank >= 1 and at most 2^63 bytes; got ",
                     core::DataTypeName(values.dtype), " ", core::ShapeToString(values.shape)));
  }
  if (values.shape[0] != indices.shape[0]) {
    return absl::InvalidArgumentError(absl::StrCat("values has ", values.shape[0],
                                                   " rows but indices has ", indices.shape[0],
                                                   " entries; expected one row per index"));
  }
  return absl::OkStatus();
}

int64_t UpdateRowsPerMessage(int64_t chunk_bytes, int64_t row_bytes, int64_t index_bytes) {
  return std::max<int64_t>(1, chunk_bytes / (row_bytes + index_bytes));
}

UpdateChunker::UpdateChunker(std::string name, const core::TensorView& indices, TensorSource values,
                             int64_t chunk_bytes, bool by_keys)
    : name_(std::move(name)),
      indices_(indices),
      values_(std::move(values)),
      total_rows_(indices.shape[0]),
      row_bytes_(RowBytes(values_).value_or(0)),
      rows_per_message_(UpdateRowsPerMessage(
          chunk_bytes, row_bytes_, static_cast<int64_t>(core::ElementSize(indices.dtype)))),
      by_keys_(by_keys) {}

bool UpdateChunker::Next(v1::UpdateRowsRequest* message) {
  // The first message is always produced, even for zero rows: it names the table.
  if (!status_.ok() || (messages_ > 0 && next_row_ >= total_rows_)) return false;
  message->Clear();
  if (messages_ == 0) message->set_name(name_);
  const int64_t n = std::min(rows_per_message_, total_rows_ - next_row_);
  const size_t index_bytes = core::ElementSize(indices_.dtype);
  v1::Tensor* indices = by_keys_ ? message->mutable_keys() : message->mutable_indices();
  indices->set_dtype(proto::ToProtoDataType(indices_.dtype));
  indices->add_shape(n);
  indices->mutable_data()->assign(
      reinterpret_cast<const char*>(indices_.data.data()) + next_row_ * index_bytes,
      static_cast<size_t>(n) * index_bytes);
  v1::Tensor* values = message->mutable_values();
  values->set_dtype(proto::ToProtoDataType(values_.dtype));
  values->add_shape(n);
  for (size_t d = 1; d < values_.shape.size(); ++d) values->add_shape(values_.shape[d]);
  std::string* data = values->mutable_data();
  data->resize(static_cast<size_t>(n * row_bytes_));
  if (!data->empty()) {
    status_ = values_.read(next_row_ * row_bytes_,
                           absl::MakeSpan(reinterpret_cast<uint8_t*>(data->data()), data->size()));
    if (!status_.ok()) return false;
  }
  next_row_ += n;
  ++messages_;
  return true;
}

}  // namespace tensorcompute::client
