#include "server/compute/keyed_lookup.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

#include "core/status_macros.h"

namespace tensorcompute::server {

absl::Status KeyedLookup::Prepare(const core::ResidentTensor* table, const core::TensorView& keys,
                                  core::MissingKeys missing, bool pooled, int64_t max_rank,
                                  core::ThreadPool* pool) {
  pool_ = pool;
  if (table == nullptr) {
    return absl::InvalidArgumentError("keys are for a resident table put with keys (params_name)");
  }
  if (table->keyed == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table '", table->name, "' has no keys (put it with keys); look it up by indices"));
  }
  TC_RETURN_IF_ERROR(core::ValidateTensor(keys, "keys", max_rank));
  if (keys.dtype != core::DataType::kInt64) {
    return absl::InvalidArgumentError(absl::StrCat("keys: keys are int64, got ",
                                                   core::DataTypeName(keys.dtype), " ",
                                                   core::ShapeToString(keys.shape)));
  }
  TC_ASSIGN_OR_RETURN(policy_, table->keyed->Effective(missing, pooled));
  table_ = table;
  keys_ = keys;
  slots_.resize(keys.data.size() / sizeof(int64_t));
  return absl::OkStatus();
}

core::TensorView KeyedLookup::slots() const {
  core::TensorView view;
  view.dtype = core::DataType::kInt64;
  view.shape = keys_.shape;
  view.data = absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(slots_.data()),
                                        slots_.size() * sizeof(int64_t));
  return view;
}

absl::Status KeyedLookup::InKeysWords(const absl::Status& error) {
  if (error.ok()) return error;
  return absl::Status(error.code(), absl::StrReplaceAll(error.message(), {{"indices", "keys"}}));
}

absl::Status KeyedLookup::Resolve(uint8_t* found) {
  // The request's bytes need not be aligned for int64: read them through a copy when not.
  absl::Span<const int64_t> keys;
  std::vector<int64_t> aligned;
  if (reinterpret_cast<uintptr_t>(keys_.data.data()) % alignof(int64_t) == 0) {
    keys = absl::Span<const int64_t>(reinterpret_cast<const int64_t*>(keys_.data.data()),
                                     slots_.size());
  } else {
    aligned.resize(slots_.size());
    if (!aligned.empty()) std::memcpy(aligned.data(), keys_.data.data(), keys_.data.size());
    keys = aligned;
  }
  return table_->keyed->Resolve(keys, keys_.shape, policy_, slots_.data(), found, pool_);
}

}  // namespace tensorcompute::server
