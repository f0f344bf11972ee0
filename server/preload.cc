#include "server/preload.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

#include "core/npy_format.h"
#include "core/shard_spec.h"
#include "core/status_macros.h"
#include "core/table_storage.h"

namespace tensorcompute::server {

namespace {

// A spec split: NAME=PATH.npy[:KIND].
struct PreloadSpec {
  std::string name;
  std::string path;
  core::TableStorage storage = core::TableStorage::kAsIs;
};

absl::StatusOr<PreloadSpec> ParseSpec(const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--preload '", spec, "': expected NAME=PATH.npy[:KIND]"));
  }
  PreloadSpec out{spec.substr(0, eq), spec.substr(eq + 1)};
  // A last ":WORD" without '/' or '.' is the storage kind; any other colon is the path's.
  const size_t colon = out.path.rfind(':');
  if (colon != std::string::npos && out.path.find_first_of("/.", colon) == std::string::npos) {
    const std::string kind = out.path.substr(colon + 1);
    const std::optional<core::TableStorage> storage = core::ParseTableStorage(kind);
    if (!storage) {
      return absl::InvalidArgumentError(absl::StrCat("--preload '", spec, "': unknown storage '",
                                                     kind, "'; expected one of ",
                                                     core::TableStorageChoices()));
    }
    out.storage = *storage;
    out.path.resize(colon);
  }
  return out;
}

// The stored form of `tensor` as `layout` says (converted for FLOAT16 and INT8_ROWWISE).
absl::StatusOr<core::Tensor> Store(const std::string& name, const core::TableLayout& layout,
                                   core::Tensor tensor) {
  if (!layout.encodes()) return tensor;
  absl::StatusOr<core::Tensor> stored =
      core::Tensor::Allocate(layout.stored_dtype, layout.stored_shape);
  if (!stored.ok()) return stored.status();
  core::TableEncoder encoder(name, layout, stored->mutable_bytes().data());
  const absl::Span<const uint8_t> sent = tensor.view().data;
  if (absl::Status status = encoder.Append(sent); !status.ok()) return status;
  return stored;
}

// `count` bytes of `file` from `offset`, or INVALID_ARGUMENT saying what is missing.
absl::StatusOr<std::string> ReadAt(std::ifstream& file, int64_t offset, int64_t count) {
  std::string bytes(static_cast<size_t>(count), '\0');
  file.seekg(offset);
  file.read(bytes.data(), count);
  if (file.gcount() != count) {
    return absl::InvalidArgumentError(absl::StrCat("truncated .npy file: ", count,
                                                   " bytes expected at offset ", offset, ", only ",
                                                   file.gcount(), " there"));
  }
  return bytes;
}

// The whole file's tensor.
absl::StatusOr<core::Tensor> ReadWhole(std::ifstream& file) {
  std::ostringstream contents;
  contents << file.rdbuf();
  return core::ParseNpy(std::move(contents).str());
}

// Shard `shard` of the file's rows, read alone: the file's other rows cost no memory.
absl::StatusOr<core::Tensor> ReadShard(std::ifstream& file, core::ShardSpec* shard) {
  std::string preamble(12, '\0');
  file.read(preamble.data(), 12);
  preamble.resize(static_cast<size_t>(file.gcount()));
  file.clear();
  TC_ASSIGN_OR_RETURN(const int64_t head_bytes, core::NpyHeaderBytes(preamble));
  TC_ASSIGN_OR_RETURN(const std::string head, ReadAt(file, 0, head_bytes));
  TC_ASSIGN_OR_RETURN(const core::NpyLayout layout, core::ParseNpyLayout(head));
  if (layout.shape.empty()) return absl::InvalidArgumentError("a scalar; gathers need rank >= 1");
  if (layout.fortran_order || layout.dtype == core::DataType::kString) {
    return absl::InvalidArgumentError(
        "a shard's rows are read from a C-order .npy of fixed-size elements; this one is " +
        std::string(layout.fortran_order ? "Fortran-order" : "of strings"));
  }
  shard->total_rows = layout.shape[0];
  const core::RowRange rows = core::ShardRows(*shard);
  const int64_t row_bytes = layout.shape[0] > 0 ? layout.data_bytes / layout.shape[0] : 0;
  TC_ASSIGN_OR_RETURN(
      const std::string data,
      ReadAt(file, layout.data_offset + rows.begin * row_bytes, rows.size() * row_bytes));
  return core::ParseNpyRows(layout, rows.size(), data);
}

absl::Status Load(const PreloadSpec& spec, std::optional<core::ShardSpec> shard,
                  core::TensorRegistry* registry, const TensorPlacer& place) {
  std::ifstream file(spec.path, std::ios::binary);
  if (!file) {
    return absl::InvalidArgumentError(absl::StrCat("cannot open it: ", std::strerror(errno)));
  }
  absl::StatusOr<core::Tensor> tensor =
      shard.has_value() ? ReadShard(file, &*shard) : ReadWhole(file);
  if (!tensor.ok()) return tensor.status();
  if (tensor->shape().empty()) {
    return absl::InvalidArgumentError("a scalar; gathers need rank >= 1");
  }
  absl::StatusOr<core::TableLayout> layout =
      core::PlanTableLayout(spec.name, spec.storage, tensor->dtype(), tensor->shape());
  if (!layout.ok()) return layout.status();
  const core::TensorView view = tensor->view();
  int64_t payload = 0;
  for (const std::string* s : view.strings) payload += static_cast<int64_t>(s->size());
  const int64_t held = tensor->dtype() == core::DataType::kString
                           ? core::ResidentBytes(tensor->dtype(), tensor->num_elements(), payload)
                           : layout->stored_bytes;
  absl::StatusOr<core::TensorRegistry::Reservation> reservation =
      registry->Reserve(spec.name, held);
  if (!reservation.ok()) return reservation.status();
  absl::StatusOr<core::Tensor> stored = Store(spec.name, *layout, *std::move(tensor));
  if (!stored.ok()) return stored.status();
  absl::StatusOr<core::DeviceCopy> copy = place("", *stored);
  if (!copy.ok()) return copy.status();
  return registry
      ->Put(spec.name, *std::move(stored), *std::move(copy), /*replace=*/false,
            *std::move(reservation), spec.storage, shard)
      .status();
}

}  // namespace

absl::Status Preload(const std::vector<std::string>& specs, core::TensorRegistry* registry,
                     const TensorPlacer& place, std::optional<core::ShardSpec> shard) {
  for (const std::string& text : specs) {
    absl::StatusOr<PreloadSpec> spec = ParseSpec(text);
    if (!spec.ok()) return spec.status();
    const absl::Time start = absl::Now();
    if (absl::Status status = Load(*spec, shard, registry, place); !status.ok()) {
      return absl::Status(status.code(), absl::StrCat("--preload ", spec->name, "=", spec->path,
                                                      ": ", status.message()));
    }
    const auto entry = registry->Find(spec->name);
    const std::string part =
        entry->shard.has_value()
            ? absl::StrCat(" (shard ", entry->shard->index, " of ", entry->shard->count, ": ",
                           entry->tensor.shape()[0], " of ", entry->shard->total_rows, " rows)")
            : "";
    spdlog::info("preloaded {} from {}{}: {} {} bytes on {} in {:.1f} s", spec->name, spec->path,
                 part, entry->bytes, core::TableStorageName(entry->storage), entry->device,
                 absl::ToDoubleSeconds(absl::Now() - start));
  }
  return absl::OkStatus();
}

}  // namespace tensorcompute::server
