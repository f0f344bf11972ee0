#include "client/keyed_requests.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"

#include "core/dtype.h"
#include "core/status_macros.h"

namespace tensorcompute::client {

absl::Status CheckPutKeys(const PutOptions& options, const core::Shape& shape) {
  if (!options.keys.has_value()) {
    if (options.missing != core::MissingKeys::kTable || options.default_row.has_value() ||
        options.capacity != 0) {
      return absl::InvalidArgumentError(
          "missing, default_row and capacity are for keyed tables: set keys too");
    }
    return absl::OkStatus();
  }
  const core::TensorView& keys = *options.keys;
  TC_RETURN_IF_ERROR(core::ValidateTensor(keys, "keys", INT64_MAX));
  if (keys.dtype != core::DataType::kInt64 || keys.rank() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("keys: expected int64 [rows], got ",
                                                   core::DataTypeName(keys.dtype), " ",
                                                   core::ShapeToString(keys.shape)));
  }
  if (shape.empty()) {
    return absl::InvalidArgumentError("keys: a keyed table has rank >= 1 (one key per row)");
  }
  if (keys.shape[0] != shape[0]) {
    return absl::InvalidArgumentError(
        absl::StrCat("keys: ", keys.shape[0], " keys for ", shape[0], " rows"));
  }
  if (options.default_row.has_value()) {
    TC_RETURN_IF_ERROR(core::ValidateTensor(*options.default_row, "default_row", INT64_MAX));
  }
  return absl::OkStatus();
}

std::optional<PutKeys> PutKeysOf(const PutOptions& options) {
  if (!options.keys.has_value()) return std::nullopt;
  return PutKeys{.keys = *options.keys,
                 .missing = options.missing,
                 .default_row = options.default_row,
                 .capacity = options.capacity};
}

absl::StatusOr<KeyedLookupResult> ReadKeyedAnswer(const v1::Tensor& output, bool has_found,
                                                  const v1::Tensor& found) {
  KeyedLookupResult result;
  // As Client::Call: the answer is checked (dtype, shape against bytes), its rank not limited.
  TC_ASSIGN_OR_RETURN(result.output, proto::FromProto(output, "output", INT64_MAX));
  if (has_found) {
    TC_ASSIGN_OR_RETURN(result.found, proto::FromProto(found, "found", INT64_MAX));
  }
  return result;
}

KeyedInfo FromProtoKeyedInfo(const v1::KeyedInfo& info) {
  return KeyedInfo{.missing = static_cast<core::MissingKeys>(info.missing()),
                   .has_default_row = info.has_default_row(),
                   .capacity = info.capacity(),
                   .keys = info.keys()};
}

}  // namespace tensorcompute::client
