#include "client/tensor_source.h"

#include <cstring>
#include <utility>

#include "core/npy_file.h"
#include "core/npy_format.h"
#include "core/status_macros.h"

namespace tensorcompute::client {

std::optional<int64_t> SourceBytes(const TensorSource& source) {
  const std::optional<int64_t> n = core::CheckedNumElements(source.shape);
  if (!n.has_value()) return std::nullopt;
  return core::CheckedMul(*n, static_cast<int64_t>(core::ElementSize(source.dtype)));
}

TensorSource SourceOf(const core::TensorView& tensor) {
  const absl::Span<const uint8_t> data = tensor.data;
  return {tensor.dtype, tensor.shape, [data](int64_t offset, absl::Span<uint8_t> out) {
            std::memcpy(out.data(), data.data() + offset, out.size());
            return absl::OkStatus();
          }};
}

TensorSource SourceRows(const TensorSource& whole, core::RowRange rows) {
  core::Shape shape = whole.shape;
  shape[0] = rows.size();
  const int64_t row_bytes = whole.shape[0] > 0 ? *SourceBytes(whole) / whole.shape[0] : 0;
  const int64_t first = rows.begin * row_bytes;
  return {whole.dtype, std::move(shape),
          [read = whole.read, first](int64_t offset, absl::Span<uint8_t> out) {
            return read(first + offset, out);
          }};
}

absl::StatusOr<std::optional<TensorSource>> OpenNpySource(const std::string& path) {
  absl::StatusOr<core::NpyFile> file = core::NpyFile::Open(path);
  if (!file.ok()) return file.status();
  TC_RETURN_IF_ERROR(file->CheckSize());
  if (!core::NpyRowsReadInPlace(file->layout())) return std::nullopt;
  const core::NpyLayout& layout = file->layout();
  return TensorSource{layout.dtype, layout.shape,
                      [file = *std::move(file)](int64_t offset, absl::Span<uint8_t> out) {
                        return file.ReadData(offset, out);
                      }};
}

}  // namespace tensorcompute::client
