#include "server/preload.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "spdlog/spdlog.h"

#include "core/npy_file.h"
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
  TC_ASSIGN_OR_RETURN(core::Tensor stored,
                      core::Tensor::Allocate(layout.stored_dtype, layout.stored_shape));
  core::TableEncoder encoder(name, layout, stored.mutable_bytes().data());
  const absl::Span<const uint8_t> sent = tensor.view().data;
  TC_RETURN_IF_ERROR(encoder.Append(sent));
  return stored;
}

// One reader thread per this many bytes, up to the reader threads a table is given.
constexpr int64_t kBytesPerReader = int64_t{256} << 20;
// Pieces the first reader reads between progress lines.
constexpr int64_t kProgressPiece = int64_t{64} << 20;
// Reads of at least this many bytes log their progress (bytes, rate, time left).
constexpr int64_t kProgressBytes = int64_t{1} << 30;
constexpr absl::Duration kProgressEvery = absl::Seconds(2);

// Fills `out` with the file's data from byte `offset` of it (NpyFile::ReadData). Large reads
// are split into contiguous parts read by one thread each, up to `threads`: the first touch of
// the table's fresh pages, which the reads make, costs more than the copy from the page cache,
// and it is spread over the cores so (on the 2-vCPU VM, a 2 GiB file in the page cache: about
// 0.5 GB/s on one thread, 2 GB/s and more on two).
absl::Status ReadData(const core::NpyFile& file, int64_t offset, absl::Span<uint8_t> out,
                      int64_t threads, const std::string& name) {
  const int64_t total = static_cast<int64_t>(out.size());
  const int64_t item = file.layout().item_bytes;
  const int64_t parts =
      std::clamp<int64_t>((total + kBytesPerReader - 1) / kBytesPerReader, 1, threads);
  // Whole elements per part (ReadData converts them in place).
  const int64_t part_bytes = ((total + parts - 1) / parts + item - 1) / item * item;
  auto part = [&](int64_t begin, int64_t end) {
    return out.subspan(static_cast<size_t>(begin), static_cast<size_t>(end - begin));
  };
  // One status slot per part, each written by its own reader and read after the joins: no lock.
  // `done` only feeds the progress line.
  std::atomic<int64_t> done{0};
  std::vector<absl::Status> status(static_cast<size_t>(parts));
  std::vector<std::thread> readers;
  // Rounding part_bytes up to whole elements can leave the last parts empty: none is started.
  for (int64_t i = 1; i < parts && i * part_bytes < total; ++i) {
    readers.emplace_back([&, i] {
      const int64_t begin = i * part_bytes;
      status[i] =
          file.ReadData(offset + begin, part(begin, std::min(total, begin + part_bytes)), &done);
    });
  }
  // This thread reads the first part in pieces, and says how far all have come.
  const absl::Time start = absl::Now();
  absl::Time next_log = start + kProgressEvery;
  auto log_progress = [&] {
    if (total < kProgressBytes || absl::Now() < next_log) return;
    const int64_t now_done = done.load(std::memory_order_relaxed);
    const double rate = static_cast<double>(now_done) / absl::ToDoubleSeconds(absl::Now() - start);
    spdlog::info("preloading {}: {:.2f} of {:.2f} GiB, {:.0f} MB/s, about {:.0f} s left", name,
                 static_cast<double>(now_done) / (1 << 30), static_cast<double>(total) / (1 << 30),
                 rate / 1e6, static_cast<double>(total - now_done) / rate);
    next_log += kProgressEvery;
  };
  const int64_t first_end = std::min(total, part_bytes);
  for (int64_t begin = 0; begin < first_end && status[0].ok(); begin += kProgressPiece) {
    const int64_t end = std::min(first_end, begin + kProgressPiece);
    status[0] = file.ReadData(offset + begin, part(begin, end), &done);
    log_progress();
  }
  for (std::thread& reader : readers) reader.join();
  for (absl::Status& s : status) {
    TC_RETURN_IF_ERROR(s);
  }
  return absl::OkStatus();
}

// Rows [first, first + rows) of a C-order file of fixed-size elements, read straight into
// the tensor that keeps them (one copy: no buffer between the file and the table).
absl::StatusOr<core::Tensor> ReadRows(const core::NpyFile& file, int64_t first, int64_t rows,
                                      int64_t threads, const std::string& name) {
  TC_ASSIGN_OR_RETURN(core::Tensor tensor, core::AllocateNpyRows(file.layout(), rows));
  TC_RETURN_IF_ERROR(
      ReadData(file, first * file.row_bytes(), tensor.mutable_bytes(), threads, name));
  return tensor;
}

// Called with the dtype and shape of a table of fixed-size elements once they are known, before
// its data costs memory (a table over --max_resident_bytes is refused unread).
using BeforeRead = std::function<absl::Status(core::DataType, const core::Shape&)>;

// The whole file, or shard `*shard` of its rows (the file's other rows cost no memory), read
// by up to `threads` threads.
absl::StatusOr<core::Tensor> ReadTable(const PreloadSpec& spec,
                                       std::optional<core::ShardSpec>* shard,
                                       const BeforeRead& before_read, int64_t threads) {
  absl::StatusOr<core::NpyFile> opened = core::NpyFile::Open(spec.path);
  if (!opened.ok()) return absl::InvalidArgumentError(opened.status().message());
  const core::NpyFile& file = *opened;
  const core::NpyLayout& layout = file.layout();
  if (layout.shape.empty()) return absl::InvalidArgumentError("a scalar; gathers need rank >= 1");
  const bool in_place = core::NpyRowsReadInPlace(layout);
  if (shard->has_value()) {
    if (!in_place) {
      return absl::InvalidArgumentError(
          "a shard's rows are read from a C-order .npy of fixed-size elements; this one is " +
          std::string(layout.fortran_order ? "Fortran-order" : "of strings"));
    }
    (*shard)->total_rows = layout.shape[0];
    const core::RowRange rows = core::ShardRows(**shard);
    core::Shape shape = layout.shape;
    shape[0] = rows.size();
    TC_RETURN_IF_ERROR(before_read(layout.dtype, shape));
    return ReadRows(file, rows.begin, rows.size(), threads, spec.name);
  }
  if (in_place) {
    TC_RETURN_IF_ERROR(file.CheckSize());
    TC_RETURN_IF_ERROR(before_read(layout.dtype, layout.shape));
    return ReadRows(file, 0, layout.shape[0], threads, spec.name);
  }
  // A string table's bytes are known only once read: Load reserves them then.
  if (layout.dtype != core::DataType::kString) {
    TC_RETURN_IF_ERROR(before_read(layout.dtype, layout.shape));
  }
  // Strings and Fortran order: the whole file, then converted (twice the memory for a while).
  spdlog::info("preloading {}: '{}'{} is read whole and then converted (a slower path)", spec.name,
               layout.descr, layout.fortran_order ? " in Fortran order" : "");
  TC_ASSIGN_OR_RETURN(const std::string contents, file.ReadAll());
  return core::ParseNpy(contents);
}

absl::StatusOr<std::shared_ptr<const core::ResidentTensor>> Load(
    const PreloadSpec& spec, std::optional<core::ShardSpec> shard, core::TensorRegistry* registry,
    const TensorPlacer& place, int64_t threads) {
  // Fixed-size tables are planned and reserved before their data is read; strings (whose
  // bytes only the file's content says) once read.
  std::optional<core::TableLayout> layout;
  std::optional<core::TensorRegistry::Reservation> reservation;
  auto plan_and_reserve = [&](core::DataType dtype, const core::Shape& shape,
                              int64_t held) -> absl::Status {
    TC_ASSIGN_OR_RETURN(layout, core::PlanTableLayout(spec.name, spec.storage, dtype, shape));
    TC_ASSIGN_OR_RETURN(reservation,
                        registry->Reserve(spec.name, held >= 0 ? held : layout->stored_bytes));
    return absl::OkStatus();
  };
  TC_ASSIGN_OR_RETURN(core::Tensor tensor, ReadTable(
                                               spec, &shard,
                                               [&](core::DataType dtype, const core::Shape& shape) {
                                                 return plan_and_reserve(dtype, shape, -1);
                                               },
                                               threads));
  if (!reservation.has_value()) {
    const core::TensorView view = tensor.view();
    int64_t payload = 0;
    for (const std::string* s : view.strings) payload += static_cast<int64_t>(s->size());
    TC_RETURN_IF_ERROR(
        plan_and_reserve(tensor.dtype(), tensor.shape(),
                         core::ResidentBytes(tensor.dtype(), tensor.num_elements(), payload)));
  }
  TC_ASSIGN_OR_RETURN(core::Tensor stored, Store(spec.name, *layout, std::move(tensor)));
  // The reservation passes to the entry: the bytes stay counted from before the read until the
  // tensor is freed.
  TC_ASSIGN_OR_RETURN(core::DeviceCopy copy, place("", stored));
  return registry->Put(spec.name, std::move(stored), std::move(copy), /*replace=*/false,
                       *std::move(reservation), spec.storage, shard);
}

// Loads `spec` and logs how it went; the error names the spec.
absl::Status LoadAndLog(const PreloadSpec& spec, std::optional<core::ShardSpec> shard,
                        core::TensorRegistry* registry, const TensorPlacer& place,
                        int64_t threads) {
  const absl::Time start = absl::Now();
  // The entry Put made, not a Find by name: the port serves while tables load, so an admin's
  // DeleteTensor may already have removed the name.
  auto loaded = Load(spec, shard, registry, place, threads);
  if (!loaded.ok()) {
    const absl::Status& status = loaded.status();
    return absl::Status(status.code(), absl::StrCat("--preload ", spec.name, "=", spec.path, ": ",
                                                    status.message()));
  }
  const std::shared_ptr<const core::ResidentTensor>& entry = *loaded;
  const std::string part =
      entry->shard.has_value()
          ? absl::StrCat(" (shard ", entry->shard->index, " of ", entry->shard->count, ": ",
                         entry->tensor.shape()[0], " of ", entry->shard->total_rows, " rows)")
          : "";
  spdlog::info("preloaded {} from {}{}: {} {} bytes on {} in {:.1f} s", spec.name, spec.path, part,
               entry->bytes, core::TableStorageName(entry->storage), entry->device,
               absl::ToDoubleSeconds(absl::Now() - start));
  return absl::OkStatus();
}

}  // namespace

absl::Status Preload(const std::vector<std::string>& specs, core::TensorRegistry* registry,
                     const TensorPlacer& place, std::optional<core::ShardSpec> shard) {
  std::vector<PreloadSpec> parsed;
  for (const std::string& text : specs) {
    TC_ASSIGN_OR_RETURN(PreloadSpec spec, ParseSpec(text));
    parsed.push_back(std::move(spec));
  }
  // Up to one table per core at once, the cores shared among their readers. After a failure no
  // further table is started; those loading finish.
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t loaders = std::min<int64_t>(cores, static_cast<int64_t>(parsed.size()));
  const int64_t threads = std::max<int64_t>(1, cores / std::max<int64_t>(1, loaders));
  // Per spec, so that the first failure in `specs`' order is returned, whatever order the
  // loaders finish in.
  std::vector<absl::Status> status(parsed.size());
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  auto loader = [&] {
    while (!failed.load()) {
      const size_t i = next.fetch_add(1);
      if (i >= parsed.size()) return;
      status[i] = LoadAndLog(parsed[i], shard, registry, place, threads);
      if (!status[i].ok()) failed = true;
    }
  };
  std::vector<std::thread> others;
  for (int64_t i = 1; i < loaders; ++i) others.emplace_back(loader);
  loader();
  for (std::thread& t : others) t.join();
  for (const absl::Status& s : status) {
    TC_RETURN_IF_ERROR(s);
  }
  return absl::OkStatus();
}

}  // namespace tensorcompute::server
