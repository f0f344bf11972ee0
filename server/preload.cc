#include "server/preload.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "spdlog/spdlog.h"

#include "core/disk/row_file.h"
#include "core/disk/table_writer.h"
#include "core/disk_rows.h"
#include "core/key_index.h"
#include "core/keyed_rows.h"
#include "core/npy_file.h"
#include "core/npy_format.h"
#include "core/shard_spec.h"
#include "core/status_macros.h"
#include "core/table_storage.h"

namespace tensorcompute::server {

namespace {

// A --preload_keys spec split: NAME=KEYS.npy[:POLICY].
struct KeysSpec {
  std::string path;
  core::MissingKeys missing = core::MissingKeys::kError;
};

// A spec split: NAME=PATH.npy[:KIND], with its keys when --preload_keys names it.
struct PreloadSpec {
  std::string name;
  std::string path;
  core::TableStorage storage = core::TableStorage::kAsIs;
  bool disk = false;  // ":disk": the rows stay in the file, behind a row cache
  std::optional<KeysSpec> keys;
};

// NAME=KEYS.npy[:POLICY] (a last ":WORD" without '/' or '.' is the policy: error or zero).
absl::StatusOr<std::pair<std::string, KeysSpec>> ParseKeysSpec(const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--preload_keys '", spec, "': expected NAME=KEYS.npy[:POLICY]"));
  }
  KeysSpec keys;
  keys.path = spec.substr(eq + 1);
  const size_t colon = keys.path.rfind(':');
  if (colon != std::string::npos && keys.path.find_first_of("/.", colon) == std::string::npos) {
    const std::string word = keys.path.substr(colon + 1);
    const std::optional<core::MissingKeys> missing = core::ParseMissingKeys(word);
    if (!missing ||
        (*missing != core::MissingKeys::kError && *missing != core::MissingKeys::kZero)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--preload_keys '", spec, "': unknown policy '", word, "'; expected error or zero"));
    }
    keys.missing = *missing;
    keys.path.resize(colon);
  }
  return std::make_pair(spec.substr(0, eq), std::move(keys));
}

// A keyed table's keys: int64 of rank 1, one per row.
absl::StatusOr<std::vector<int64_t>> ReadKeys(const KeysSpec& spec, int64_t rows) {
  absl::StatusOr<core::NpyFile> opened = core::NpyFile::Open(spec.path);
  if (!opened.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("keys: ", opened.status().message()));
  }
  const core::NpyLayout& layout = opened->layout();
  if (layout.dtype != core::DataType::kInt64 || layout.shape.size() != 1 ||
      !core::NpyRowsReadInPlace(layout)) {
    return absl::InvalidArgumentError(
        absl::StrCat("keys: ", spec.path, " holds ", core::DataTypeName(layout.dtype), " ",
                     core::ShapeToString(layout.shape), "; keys are int64 [rows], C order"));
  }
  if (layout.shape[0] != rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("keys: ", spec.path, " holds ", layout.shape[0], " keys for ", rows, " rows"));
  }
  TC_RETURN_IF_ERROR(opened->CheckSize());
  std::vector<int64_t> keys(static_cast<size_t>(rows));
  TC_RETURN_IF_ERROR(opened->ReadData(
      0, absl::MakeSpan(reinterpret_cast<uint8_t*>(keys.data()), keys.size() * sizeof(int64_t)),
      nullptr));
  return keys;
}

absl::StatusOr<PreloadSpec> ParseSpec(const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--preload '", spec, "': expected NAME=PATH.npy[:KIND]"));
  }
  PreloadSpec out;
  out.name = spec.substr(0, eq);
  out.path = spec.substr(eq + 1);
  // A last ":disk" keeps the rows on disk; then a last ":WORD" without '/' or '.' is the
  // storage kind; any other colon is the path's.
  constexpr absl::string_view kDisk = ":disk";
  if (absl::EndsWith(out.path, kDisk) && out.path.size() > kDisk.size()) {
    out.disk = true;
    out.path.resize(out.path.size() - kDisk.size());
  }
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

// The stored form of `tensor` as `layout` says (converted for FLOAT16 and INT8_ROWWISE). The
// rows sent are `tensor`'s first layout.sent_bytes; a keyed layout's rows past them (free
// slots, the zero row; core/keyed_rows.h) are zeros.
absl::StatusOr<core::Tensor> Store(const std::string& name, const core::TableLayout& layout,
                                   core::Tensor tensor) {
  core::Tensor stored;
  if (layout.encodes()) {
    TC_ASSIGN_OR_RETURN(stored, core::Tensor::Allocate(layout.stored_dtype, layout.stored_shape));
    core::TableEncoder encoder(name, layout, stored.mutable_bytes().data());
    TC_RETURN_IF_ERROR(
        encoder.Append(tensor.view().data.subspan(0, static_cast<size_t>(layout.sent_bytes))));
  } else {
    stored = std::move(tensor);
  }
  const int64_t rows = layout.logical_shape.empty() ? 0 : layout.logical_shape[0];
  const int64_t stored_rows = layout.stored_shape.empty() ? 0 : layout.stored_shape[0];
  if (stored_rows > rows) {
    const size_t row_bytes = static_cast<size_t>(layout.stored_bytes / stored_rows);
    std::memset(stored.mutable_bytes().data() + rows * row_bytes, 0,
                static_cast<size_t>(stored_rows - rows) * row_bytes);
  }
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
// the tensor that keeps them (one copy: no buffer between the file and the table), followed
// by `extra` rows left for the caller (a keyed table's free slots and hidden rows).
absl::StatusOr<core::Tensor> ReadRows(const core::NpyFile& file, int64_t first, int64_t rows,
                                      int64_t threads, const std::string& name, int64_t extra = 0) {
  TC_ASSIGN_OR_RETURN(core::Tensor tensor, core::AllocateNpyRows(file.layout(), rows + extra));
  TC_RETURN_IF_ERROR(
      ReadData(file, first * file.row_bytes(),
               tensor.mutable_bytes().subspan(0, static_cast<size_t>(rows * file.row_bytes())),
               threads, name));
  return tensor;
}

// The rows at `positions` (increasing) of a C-order file of fixed-size elements: a keyed
// table's shard by key. The whole file is read, in pieces of about 64 MiB, so its other rows
// cost no more than a piece of memory; `extra` rows follow, as ReadRows'.
absl::StatusOr<core::Tensor> ReadPickedRows(const core::NpyFile& file,
                                            const std::vector<int64_t>& positions, int64_t extra) {
  const int64_t picked = static_cast<int64_t>(positions.size());
  TC_ASSIGN_OR_RETURN(core::Tensor tensor, core::AllocateNpyRows(file.layout(), picked + extra));
  const int64_t row_bytes = file.row_bytes();
  if (row_bytes == 0 || picked == 0) return tensor;
  const int64_t piece_rows = std::max<int64_t>(1, (int64_t{64} << 20) / row_bytes);
  std::vector<uint8_t> piece;
  uint8_t* out = tensor.mutable_bytes().data();
  for (size_t next = 0; next < positions.size();) {
    // The piece that holds the next picked row, and every picked row in it.
    const int64_t first = positions[next];
    const int64_t end = std::min(file.layout().shape[0], first + piece_rows);
    piece.resize(static_cast<size_t>((end - first) * row_bytes));
    TC_RETURN_IF_ERROR(file.ReadData(first * row_bytes, absl::MakeSpan(piece), nullptr));
    for (; next < positions.size() && positions[next] < end; ++next) {
      std::memcpy(out, piece.data() + (positions[next] - first) * row_bytes,
                  static_cast<size_t>(row_bytes));
      out += row_bytes;
    }
  }
  return tensor;
}

// Called with the dtype and shape of a table of fixed-size elements once they are known, before
// its data costs memory (a table over --max_resident_bytes is refused unread).
using BeforeRead = std::function<absl::Status(core::DataType, const core::Shape&)>;

// The whole file, or shard `*shard` of its rows (the file's other rows cost no memory), read
// by up to `threads` threads.
// A keyed table's rows are read with room for its capacity's extra rows when it is stored as
// read (core/keyed_rows.h); `before_read` has planned its layout by then.
// A keyed table's shard by key (shard->by_key) reads the whole keys file, keeps in `keys` the
// shard's keys (KeyShard(k, count) == index) and reads their rows (ReadPickedRows).
absl::StatusOr<core::Tensor> ReadTable(const PreloadSpec& spec,
                                       std::optional<core::ShardSpec>* shard,
                                       const BeforeRead& before_read, int64_t threads,
                                       const std::function<int64_t()>& extra_rows,
                                       std::vector<int64_t>* keys) {
  absl::StatusOr<core::NpyFile> opened = core::NpyFile::Open(spec.path);
  if (!opened.ok()) return absl::InvalidArgumentError(opened.status().message());
  const core::NpyFile& file = *opened;
  const core::NpyLayout& layout = file.layout();
  if (layout.shape.empty()) return absl::InvalidArgumentError("a scalar; gathers need rank >= 1");
  const bool in_place = core::NpyRowsReadInPlace(layout);
  if (shard->has_value() && (*shard)->by_key) {
    if (!in_place) {
      return absl::InvalidArgumentError(
          "a keyed table's rows are read from a C-order .npy of fixed-size elements; this one is " +
          std::string(layout.fortran_order ? "Fortran-order" : "of strings"));
    }
    TC_RETURN_IF_ERROR(file.CheckSize());
    (*shard)->total_rows = layout.shape[0];
    TC_ASSIGN_OR_RETURN(const std::vector<int64_t> all, ReadKeys(*spec.keys, layout.shape[0]));
    std::vector<int64_t> positions;
    for (size_t i = 0; i < all.size(); ++i) {
      if (core::KeyShard(all[i], (*shard)->count) == (*shard)->index) {
        positions.push_back(static_cast<int64_t>(i));
        keys->push_back(all[i]);
      }
    }
    core::Shape shape = layout.shape;
    shape[0] = static_cast<int64_t>(positions.size());
    TC_RETURN_IF_ERROR(before_read(layout.dtype, shape));
    return ReadPickedRows(file, positions, extra_rows());
  }
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
    return ReadRows(file, 0, layout.shape[0], threads, spec.name, extra_rows());
  }
  if (spec.keys.has_value()) {
    return absl::InvalidArgumentError(
        "a keyed table's rows are read from a C-order .npy of fixed-size elements; this one is " +
        std::string(layout.fortran_order ? "Fortran-order" : "of strings"));
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
  // A keyed table is sharded by key (its keys are read with its rows then, by ReadTable).
  if (spec.keys.has_value() && shard.has_value()) shard->by_key = true;
  const bool by_key = shard.has_value() && shard->by_key;
  // A keyed table: its keys, read once its rows are known, and its capacity (the rows).
  std::vector<int64_t> keys;
  int64_t capacity = 0;
  auto plan_and_reserve = [&](core::DataType dtype, const core::Shape& shape,
                              int64_t held) -> absl::Status {
    TC_ASSIGN_OR_RETURN(layout, core::PlanTableLayout(spec.name, spec.storage, dtype, shape));
    int64_t index_bytes = 0;
    if (spec.keys.has_value()) {
      TC_ASSIGN_OR_RETURN(capacity, core::CheckKeyedDescription(spec.name, dtype, shape, 0, false,
                                                                spec.keys->missing));
      layout = core::KeyedLayout(*layout, capacity);
      index_bytes = core::KeyIndexBytes(capacity);
    }
    TC_ASSIGN_OR_RETURN(
        reservation,
        registry->Reserve(spec.name, (held >= 0 ? held : layout->stored_bytes) + index_bytes));
    if (spec.keys.has_value() && !by_key) {
      TC_ASSIGN_OR_RETURN(keys, ReadKeys(*spec.keys, shape[0]));
    }
    return absl::OkStatus();
  };
  TC_ASSIGN_OR_RETURN(core::Tensor tensor, ReadTable(
                                               spec, &shard,
                                               [&](core::DataType dtype, const core::Shape& shape) {
                                                 return plan_and_reserve(dtype, shape, -1);
                                               },
                                               threads,
                                               [&]() -> int64_t {
                                                 // Stored as read: the extra rows go on the tensor
                                                 // read; encoded: on the stored one.
                                                 if (!spec.keys.has_value() || layout->encodes())
                                                   return 0;
                                                 return layout->stored_shape[0] -
                                                        layout->logical_shape[0];
                                               },
                                               &keys));
  if (!reservation.has_value()) {
    const core::TensorView view = tensor.view();
    int64_t payload = 0;
    for (const std::string* s : view.strings) payload += static_cast<int64_t>(s->size());
    TC_RETURN_IF_ERROR(
        plan_and_reserve(tensor.dtype(), tensor.shape(),
                         core::ResidentBytes(tensor.dtype(), tensor.num_elements(), payload)));
  }
  TC_ASSIGN_OR_RETURN(core::Tensor stored, Store(spec.name, *layout, std::move(tensor)));
  std::shared_ptr<core::KeyedRows> keyed;
  if (spec.keys.has_value()) {
    TC_ASSIGN_OR_RETURN(keyed, core::KeyedRows::Build(spec.name, keys, capacity, spec.keys->missing,
                                                      false, nullptr));
  }
  // The reservation passes to the entry: the bytes stay counted from before the read until the
  // tensor is freed.
  TC_ASSIGN_OR_RETURN(core::DeviceCopy copy, place("", stored));
  return registry->Put(spec.name, std::move(stored), std::move(copy), /*replace=*/false,
                       *std::move(reservation), spec.storage, shard, std::move(keyed));
}

// A table on disk (core/disk_rows.h) behind a row cache of disk.cache_bytes, which is what the
// registry counts: its .npy's rows read in place, as stored; or, for a kind the server converts
// (float16, int8-rowwise), its rows converted into an unnamed file under disk.table_dir
// (core/disk/table_writer.h), counted against the registry's disk bytes.
absl::StatusOr<std::shared_ptr<const core::ResidentTensor>> LoadOnDisk(
    const PreloadSpec& spec, const std::optional<core::ShardSpec>& shard,
    core::TensorRegistry* registry, const DiskTier& disk) {
  if (shard.has_value() || spec.keys.has_value()) {
    return absl::InvalidArgumentError("a table on disk is not sharded or keyed (yet)");
  }
  const bool converts = spec.storage == core::TableStorage::kFloat16 ||
                        spec.storage == core::TableStorage::kInt8Rowwise;
  if (converts && disk.table_dir.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a table on disk is served as its file holds it: as-is, or int8-rowwise-prequantized; ",
        core::TableStorageFlagName(spec.storage),
        " needs a converted copy, which the server writes under --table_dir (set it)"));
  }
  TC_ASSIGN_OR_RETURN(core::NpyFile file, core::NpyFile::Open(spec.path));
  TC_RETURN_IF_ERROR(file.CheckSize());
  const core::NpyLayout& npy = file.layout();
  // Rows served as the file's bytes are: C order, fixed-size little-endian elements, not bool
  // (whose bytes ParseNpy normalizes). Rows converted are read through NpyFile::ReadData, which
  // swaps big-endian ones.
  const bool big_endian = !npy.descr.empty() && npy.descr[0] == '>';
  if (!core::NpyRowsReadInPlace(npy) || npy.descr.empty() || (big_endian && !converts) ||
      npy.dtype == core::DataType::kBool || npy.shape.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a table on disk needs a C-order .npy of fixed-size little-endian numbers, rank >= 1; "
        "this one is '",
        npy.descr, "'", npy.fortran_order ? " in Fortran order" : "",
        npy.shape.empty() ? ", a scalar" : ""));
  }
  TC_ASSIGN_OR_RETURN(const core::TableLayout layout,
                      core::PlanTableLayout(spec.name, spec.storage, npy.dtype, npy.shape));
  const int64_t rows = npy.shape[0];
  const int64_t row_bytes = core::disk::TableWriter::StoredRowBytes(layout);
  const int64_t cache_rows =
      core::DiskRows::CacheRowsFor(disk.cache_bytes, std::max<int64_t>(1, row_bytes), rows);
  TC_ASSIGN_OR_RETURN(
      core::TensorRegistry::Reservation reservation,
      registry->Reserve(
          spec.name, core::DiskRows::MemoryBytesFor(cache_rows, std::max<int64_t>(1, row_bytes))));
  core::DiskRows::Options options;
  options.cache_bytes = disk.cache_bytes;
  std::unique_ptr<core::TableFile> rows_file;
  if (converts) {
    TC_ASSIGN_OR_RETURN(core::TensorRegistry::Reservation on_disk,
                        registry->ReserveDisk(spec.name, layout.stored_bytes));
    TC_ASSIGN_OR_RETURN(std::unique_ptr<core::disk::TableWriter> writer,
                        core::disk::TableWriter::Create(spec.name, layout, disk.table_dir, {}));
    // Read in pieces of whole elements, converted as they come.
    std::vector<uint8_t> piece(std::min<int64_t>(layout.sent_bytes, int64_t{4} << 20));
    for (int64_t at = 0; at < layout.sent_bytes; at += static_cast<int64_t>(piece.size())) {
      const auto n = static_cast<size_t>(
          std::min<int64_t>(layout.sent_bytes - at, static_cast<int64_t>(piece.size())));
      TC_RETURN_IF_ERROR(file.ReadData(at, absl::MakeSpan(piece.data(), n)));
      TC_RETURN_IF_ERROR(writer->Append(absl::MakeConstSpan(piece.data(), n)));
    }
    TC_ASSIGN_OR_RETURN(rows_file, writer->Finish());
    options.hold = std::make_shared<core::TensorRegistry::Reservation>(std::move(on_disk));
  } else {
    // Writable, so that row updates go through to the file; a file the server may not write
    // is served read-only (its updates are refused).
    core::disk::RowFile::Options file_options;
    file_options.writable = true;
    const int64_t file_row_bytes = std::max<int64_t>(1, file.row_bytes());
    absl::StatusOr<std::unique_ptr<core::disk::RowFile>> row_file =
        core::disk::RowFile::Open(spec.path, npy.data_offset, rows, file_row_bytes, file_options);
    if (absl::IsPermissionDenied(row_file.status())) {
      spdlog::warn("--preload {}: {} is read-only here; its row updates will be refused", spec.name,
                   spec.path);
      file_options.writable = false;
      row_file =
          core::disk::RowFile::Open(spec.path, npy.data_offset, rows, file_row_bytes, file_options);
    }
    TC_RETURN_IF_ERROR(row_file.status());
    if (!(*row_file)->uring()) {
      spdlog::warn(
          "--preload {}: io_uring is not available here; the table's rows are read one at "
          "a time (pread)",
          spec.name);
    }
    rows_file = *std::move(row_file);
  }
  TC_ASSIGN_OR_RETURN(std::shared_ptr<core::DiskRows> disk_rows,
                      core::DiskRows::Open(spec.name, std::move(rows_file), std::move(options)));
  core::Shape empty = layout.stored_shape;
  empty[0] = 0;
  TC_ASSIGN_OR_RETURN(core::Tensor tensor, core::Tensor::Allocate(layout.stored_dtype, empty));
  return registry->Put(spec.name, std::move(tensor), core::DeviceCopy{}, /*replace=*/false,
                       std::move(reservation), spec.storage, std::nullopt, nullptr,
                       std::move(disk_rows));
}

// Loads `spec` and logs how it went; the error names the spec.
absl::Status LoadAndLog(const PreloadSpec& spec, std::optional<core::ShardSpec> shard,
                        core::TensorRegistry* registry, const TensorPlacer& place, int64_t threads,
                        const DiskTier& disk) {
  const absl::Time start = absl::Now();
  // The entry Put made, not a Find by name: the port serves while tables load, so an admin's
  // DeleteTensor may already have removed the name.
  auto loaded = spec.disk ? LoadOnDisk(spec, shard, registry, disk)
                          : Load(spec, shard, registry, place, threads);
  if (!loaded.ok()) {
    const absl::Status& status = loaded.status();
    return absl::Status(status.code(), absl::StrCat("--preload ", spec.name, "=", spec.path, ": ",
                                                    status.message()));
  }
  const std::shared_ptr<const core::ResidentTensor>& entry = *loaded;
  std::string part;
  if (entry->shard.has_value() && entry->shard->by_key) {
    part =
        absl::StrCat(" (shard ", entry->shard->index, " of ", entry->shard->count,
                     " by key: ", entry->keyed->size(), " of ", entry->shard->total_rows, " keys)");
  } else if (entry->shard.has_value()) {
    part = absl::StrCat(" (shard ", entry->shard->index, " of ", entry->shard->count, ": ",
                        entry->tensor.shape()[0], " of ", entry->shard->total_rows, " rows)");
  } else if (entry->disk != nullptr) {
    part = absl::StrCat(" (on disk: ", entry->disk->rows(), " rows, a cache of ",
                        entry->disk->cache_rows(), ", direct I/O ",
                        entry->disk->file().direct() ? "on" : "off", ")");
  }
  spdlog::info("preloaded {} from {}{}: {} {} bytes on {} in {:.1f} s", spec.name, spec.path, part,
               entry->bytes, core::TableStorageName(entry->storage), entry->device,
               absl::ToDoubleSeconds(absl::Now() - start));
  return absl::OkStatus();
}

}  // namespace

absl::Status Preload(const std::vector<std::string>& specs, core::TensorRegistry* registry,
                     const TensorPlacer& place, std::optional<core::ShardSpec> shard,
                     const std::vector<std::string>& key_specs, const DiskTier& disk) {
  std::vector<PreloadSpec> parsed;
  for (const std::string& text : specs) {
    TC_ASSIGN_OR_RETURN(PreloadSpec spec, ParseSpec(text));
    parsed.push_back(std::move(spec));
  }
  for (const std::string& text : key_specs) {
    TC_ASSIGN_OR_RETURN(auto named, ParseKeysSpec(text));
    auto it = std::find_if(parsed.begin(), parsed.end(),
                           [&](const PreloadSpec& spec) { return spec.name == named.first; });
    if (it == parsed.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--preload_keys '", text, "': no --preload loads a table named '", named.first, "'"));
    }
    it->keys = std::move(named.second);
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
      status[i] = LoadAndLog(parsed[i], shard, registry, place, threads, disk);
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
