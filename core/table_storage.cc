#include "core/table_storage.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

#include "core/half_float.h"

namespace tensorcompute::core {
namespace {

constexpr TableStorage kAllStorages[] = {TableStorage::kAsIs, TableStorage::kFloat16,
                                         TableStorage::kInt8Rowwise,
                                         TableStorage::kInt8RowwisePrequantized};

absl::Status Invalid(auto&&... pieces) {
  return absl::InvalidArgumentError(absl::StrCat(pieces...));
}

}  // namespace

std::string TableStorageName(TableStorage storage) {
  switch (storage) {
    case TableStorage::kAsIs:
      return "AS_IS";
    case TableStorage::kFloat16:
      return "FLOAT16";
    case TableStorage::kInt8Rowwise:
      return "INT8_ROWWISE";
    case TableStorage::kInt8RowwisePrequantized:
      return "INT8_ROWWISE_PREQUANTIZED";
  }
  return absl::StrCat("storage(", static_cast<int32_t>(storage), ")");
}

std::string TableStorageFlagName(TableStorage storage) {
  return absl::StrReplaceAll(absl::AsciiStrToLower(TableStorageName(storage)), {{"_", "-"}});
}

std::optional<TableStorage> ParseTableStorage(absl::string_view text) {
  const std::string wanted = absl::AsciiStrToLower(text);
  for (TableStorage s : kAllStorages) {
    if (wanted == TableStorageFlagName(s) || wanted == absl::AsciiStrToLower(TableStorageName(s)))
      return s;
  }
  return std::nullopt;
}

std::string TableStorageChoices() {
  std::string out;
  for (TableStorage s : kAllStorages) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", TableStorageFlagName(s));
  }
  return out;
}

TableEncoding EncodingOf(TableStorage storage) {
  switch (storage) {
    case TableStorage::kFloat16:
      return TableEncoding::kFloat16;
    case TableStorage::kInt8Rowwise:
    case TableStorage::kInt8RowwisePrequantized:
      return TableEncoding::kRowwise8;
    case TableStorage::kAsIs:
      break;
  }
  return TableEncoding::kNone;
}

absl::StatusOr<TableLayout> PlanTableLayout(absl::string_view name, TableStorage storage,
                                            DataType dtype, const Shape& shape) {
  TableLayout layout;
  layout.storage = storage;
  layout.sent_dtype = dtype;
  const int64_t elements = Product(shape, 0, shape.size());
  layout.sent_bytes =
      dtype == DataType::kString ? 0 : elements * static_cast<int64_t>(ElementSize(dtype));
  const std::string sent = absl::StrCat(DataTypeName(dtype), " ", ShapeToString(shape));
  switch (storage) {
    case TableStorage::kAsIs:
      layout.stored_dtype = layout.logical_dtype = dtype;
      layout.stored_shape = layout.logical_shape = shape;
      layout.stored_bytes = layout.sent_bytes;
      return layout;
    case TableStorage::kFloat16:
    case TableStorage::kInt8Rowwise:
      if (dtype != DataType::kFloat32 || shape.size() != 2) {
        return Invalid("tensor '", name, "': ", TableStorageName(storage),
                       " storage takes a float32 table [rows, dim], got ", sent);
      }
      if (storage == TableStorage::kInt8Rowwise && shape[1] == 0) {
        return Invalid("tensor '", name,
                       "': INT8_ROWWISE storage needs at least one column (a row's scale and "
                       "bias come from its values), got ",
                       sent);
      }
      layout.logical_dtype = DataType::kFloat32;
      layout.logical_shape = shape;
      break;
    case TableStorage::kInt8RowwisePrequantized:
      if (dtype != DataType::kUint8 || shape.size() != 2 || shape[1] <= kRowwise8Trailer) {
        return Invalid("tensor '", name,
                       "': INT8_ROWWISE_PREQUANTIZED storage takes uint8 [rows, dim + 8]: dim "
                       ">= 1 codes, then each row's float32 scale and float32 bias, got ",
                       sent);
      }
      layout.logical_dtype = DataType::kFloat32;
      layout.logical_shape = {shape[0], shape[1] - kRowwise8Trailer};
      break;
    default:
      return Invalid("tensor '", name, "': unknown storage ", static_cast<int32_t>(storage),
                     "; expected AS_IS (0), FLOAT16 (1), INT8_ROWWISE (2) or "
                     "INT8_ROWWISE_PREQUANTIZED (3)");
  }
  const int64_t rows = layout.logical_shape[0], dim = layout.logical_shape[1];
  if (EncodingOf(storage) == TableEncoding::kFloat16) {
    layout.stored_dtype = DataType::kFloat16;
    layout.stored_shape = {rows, dim};
  } else {
    layout.stored_dtype = DataType::kUint8;
    layout.stored_shape = {rows, dim + kRowwise8Trailer};
  }
  const std::optional<int64_t> stored =
      CheckedMul(rows, StoredRowBytes(EncodingOf(storage), dim, 0));
  if (!stored) {  // rows x (dim + 8) may pass int64 where rows x dim x 4 did not (dim 1, 2)
    return Invalid("tensor '", name, "': its stored size overflows int64");
  }
  layout.stored_bytes = *stored;
  return layout;
}

DataType LogicalDtype(TableStorage storage, DataType stored_dtype) {
  return storage == TableStorage::kAsIs ? stored_dtype : DataType::kFloat32;
}

Shape LogicalShape(TableStorage storage, const Shape& stored_shape) {
  if (EncodingOf(storage) != TableEncoding::kRowwise8 || stored_shape.size() != 2) {
    return stored_shape;
  }
  return {stored_shape[0], stored_shape[1] - kRowwise8Trailer};
}

absl::Status EncodeFloat16Row(absl::string_view name, int64_t row, const float* values, int64_t dim,
                              uint8_t* out) {
  for (int64_t d = 0; d < dim; ++d) {
    const uint16_t h = FloatToHalf(values[d]);
    if (std::isfinite(values[d]) && (h & 0x7fff) == 0x7c00) {
      return Invalid("tensor '", name, "': element [", row, ", ", d, "] = ", values[d],
                     " is beyond float16's range (largest finite 65504); FLOAT16 storage "
                     "would make it infinite");
    }
    std::memcpy(out + d * 2, &h, 2);
  }
  return absl::OkStatus();
}

absl::Status EncodeRowwise8Row(absl::string_view name, int64_t row, const float* values,
                               int64_t dim, uint8_t* out) {
  // The first minimum and maximum in row order (FBGEMM's std::min_element/max_element).
  float lo = values[0], hi = values[0];
  for (int64_t d = 0; d < dim; ++d) {
    const float x = values[d];
    if (!std::isfinite(x)) {
      return Invalid("tensor '", name, "': element [", row, ", ", d, "] = ", x,
                     " is not finite; INT8_ROWWISE storage quantizes finite values only");
    }
    if (x < lo) lo = x;
    if (x > hi) hi = x;
  }
  const float range = hi - lo;
  if (!std::isfinite(range)) {
    return Invalid("tensor '", name, "': row ", row, " spans [", lo, ", ", hi,
                   "], whose width overflows float32; INT8_ROWWISE storage cannot quantize it");
  }
  const float scale = range / 255.0f;
  const float inverse = 255.0f / (range + 1e-8f);
  for (int64_t d = 0; d < dim; ++d) {
    const long code = std::lrintf((values[d] - lo) * inverse);
    out[d] = static_cast<uint8_t>(std::clamp<long>(code, 0, 255));
  }
  std::memcpy(out + dim, &scale, 4);
  std::memcpy(out + dim + 4, &lo, 4);
  return absl::OkStatus();
}

TableEncoder::TableEncoder(std::string name, const TableLayout& layout, uint8_t* out)
    : name_(std::move(name)),
      storage_(layout.storage),
      dim_(layout.logical_shape[1]),
      stored_row_bytes_(StoredRowBytes(EncodingOf(layout.storage), dim_, 0)),
      out_(out) {
  partial_.reserve(static_cast<size_t>(dim_) * 4);
}

TableEncoder::TableEncoder(std::string name, const TableLayout& layout, RowSink sink)
    : TableEncoder(std::move(name), layout, static_cast<uint8_t*>(nullptr)) {
  sink_ = std::move(sink);
  scratch_.resize(static_cast<size_t>(stored_row_bytes_));
}

absl::Status TableEncoder::EncodeRow(const float* row) {
  uint8_t* out = sink_ ? scratch_.data() : out_ + row_ * stored_row_bytes_;
  absl::Status status = storage_ == TableStorage::kFloat16
                            ? EncodeFloat16Row(name_, row_, row, dim_, out)
                            : EncodeRowwise8Row(name_, row_, row, dim_, out);
  if (status.ok() && sink_) status = sink_(row_, out);
  ++row_;
  return status;
}

absl::Status TableEncoder::Append(absl::Span<const uint8_t> bytes) {
  const size_t row_bytes = static_cast<size_t>(dim_) * 4;
  if (row_bytes == 0) return absl::OkStatus();  // float16 [rows, 0]: nothing to convert
  std::vector<float> aligned;                   // a row read from unaligned bytes
  auto encode = [&](const uint8_t* p) {
    aligned.resize(static_cast<size_t>(dim_));
    std::memcpy(aligned.data(), p, row_bytes);
    return EncodeRow(aligned.data());
  };
  if (!partial_.empty()) {
    const size_t take = std::min(row_bytes - partial_.size(), bytes.size());
    partial_.insert(partial_.end(), bytes.begin(), bytes.begin() + take);
    bytes.remove_prefix(take);
    if (partial_.size() < row_bytes) return absl::OkStatus();
    absl::Status status = encode(partial_.data());
    partial_.clear();
    if (!status.ok()) return status;
  }
  while (bytes.size() >= row_bytes) {
    if (absl::Status status = encode(bytes.data()); !status.ok()) return status;
    bytes.remove_prefix(row_bytes);
  }
  partial_.assign(bytes.begin(), bytes.end());
  return absl::OkStatus();
}

absl::Status CheckStoredRows(absl::string_view name, TableStorage storage, const TensorView& stored,
                             int64_t first_row) {
  if (storage != TableStorage::kInt8RowwisePrequantized) return absl::OkStatus();
  const int64_t rows = stored.shape[0], row_bytes = stored.shape[1];
  const uint8_t* data = stored.data.data();
  for (int64_t r = 0; r < rows; ++r) {
    float scale, bias;
    std::memcpy(&scale, data + r * row_bytes + row_bytes - kRowwise8Trailer, 4);
    std::memcpy(&bias, data + r * row_bytes + row_bytes - kRowwise8Trailer + 4, 4);
    if (!std::isfinite(scale) || !std::isfinite(bias)) {
      return Invalid("tensor '", name, "': row ", first_row + r, " has scale ", scale, " and bias ",
                     bias, "; INT8_ROWWISE_PREQUANTIZED rows need a finite scale and bias");
    }
  }
  return absl::OkStatus();
}

}  // namespace tensorcompute::core
