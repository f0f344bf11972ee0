#include "server/preload.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
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
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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

// Rows are read in pieces of this size: large sequential reads, straight into the tensor.
constexpr int64_t kReadPiece = int64_t{64} << 20;
// One reader thread per this many bytes, up to the cores available.
constexpr int64_t kBytesPerReader = int64_t{256} << 20;
// Reads of at least this many bytes log their progress (bytes, rate, time left).
constexpr int64_t kProgressBytes = int64_t{1} << 30;
constexpr absl::Duration kProgressEvery = absl::Seconds(2);

// An open file, closed on scope exit.
class File {
 public:
  explicit File(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

// Fills out[begin, end) with the file's bytes from offset + begin, counting into `done`.
absl::Status ReadRange(const File& file, int64_t offset, absl::Span<uint8_t> out, int64_t begin,
                       int64_t end, std::atomic<int64_t>* done) {
  while (begin < end) {
    const size_t want = static_cast<size_t>(std::min(kReadPiece, end - begin));
    const ssize_t got = ::pread(file.fd(), out.data() + begin, want, offset + begin);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return absl::InternalError(absl::StrCat("read: ", std::strerror(errno)));
    if (got == 0) {
      return absl::InvalidArgumentError(absl::StrCat("truncated .npy file: ", out.size(),
                                                     " bytes expected at offset ", offset,
                                                     ", the file ends at ", offset + begin));
    }
    begin += got;
    done->fetch_add(got, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

// Fills `out` with the file's bytes from `offset` (INVALID_ARGUMENT if the file ends first).
// Large reads are split into contiguous parts read by one thread each, up to the cores
// available: the first touch of the table's fresh pages, which the reads make, costs more than
// the copy from the page cache, and it is spread over the cores so (on the 2-vCPU VM, a 2 GiB
// file in the page cache: about 0.5 GB/s on one thread, 2 GB/s and more on two).
absl::Status ReadAt(const File& file, int64_t offset, absl::Span<uint8_t> out,
                    const std::string& name) {
  const int64_t total = static_cast<int64_t>(out.size());
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t parts =
      std::clamp<int64_t>((total + kBytesPerReader - 1) / kBytesPerReader, 1, cores);
  const int64_t part_bytes = (total + parts - 1) / parts;
  std::atomic<int64_t> done{0};
  std::vector<absl::Status> status(static_cast<size_t>(parts));
  std::vector<std::thread> readers;
  for (int64_t i = 1; i < parts; ++i) {
    readers.emplace_back([&, i] {
      status[i] = ReadRange(file, offset, out, i * part_bytes,
                            std::min(total, (i + 1) * part_bytes), &done);
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
  for (int64_t begin = 0; begin < first_end && status[0].ok(); begin += kReadPiece) {
    status[0] = ReadRange(file, offset, out, begin, std::min(first_end, begin + kReadPiece), &done);
    log_progress();
  }
  for (std::thread& reader : readers) reader.join();
  for (absl::Status& s : status) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadHead(const File& file, int64_t bytes, const std::string& name) {
  std::string head(static_cast<size_t>(bytes), '\0');
  TC_RETURN_IF_ERROR(
      ReadAt(file, 0, absl::MakeSpan(reinterpret_cast<uint8_t*>(head.data()), head.size()), name));
  return head;
}

// The file's layout, from its preamble and header.
absl::StatusOr<core::NpyLayout> ReadLayout(const File& file, const std::string& name) {
  uint8_t preamble[12];
  ssize_t got = 0;
  do {
    got = ::pread(file.fd(), preamble, sizeof preamble, 0);
  } while (got < 0 && errno == EINTR);
  if (got < 0) return absl::InternalError(absl::StrCat("read: ", std::strerror(errno)));
  TC_ASSIGN_OR_RETURN(const int64_t head_bytes,
                      core::NpyHeaderBytes(absl::string_view(
                          reinterpret_cast<const char*>(preamble), static_cast<size_t>(got))));
  TC_ASSIGN_OR_RETURN(const std::string head, ReadHead(file, head_bytes, name));
  return core::ParseNpyLayout(head);
}

// Rows [first, first + rows) of a C-order file of fixed-size elements, read straight into
// the tensor that keeps them (one copy: no buffer between the file and the table).
absl::StatusOr<core::Tensor> ReadRows(const File& file, const core::NpyLayout& layout,
                                      int64_t first, int64_t rows, const std::string& name) {
  TC_ASSIGN_OR_RETURN(core::Tensor tensor, core::AllocateNpyRows(layout, rows));
  const int64_t row_bytes = layout.shape[0] > 0 ? layout.data_bytes / layout.shape[0] : 0;
  const absl::Span<uint8_t> bytes = tensor.mutable_bytes();
  TC_RETURN_IF_ERROR(ReadAt(file, layout.data_offset + first * row_bytes, bytes, name));
  TC_RETURN_IF_ERROR(core::ConvertNpyRowsInPlace(layout, bytes));
  return tensor;
}

// Called with the dtype and shape of a table of fixed-size elements once they are known, before
// its data costs memory (a table over --max_resident_bytes is refused unread).
using BeforeRead = std::function<absl::Status(core::DataType, const core::Shape&)>;

// The whole file, or shard `*shard` of its rows (the file's other rows cost no memory).
absl::StatusOr<core::Tensor> ReadTable(const PreloadSpec& spec,
                                       std::optional<core::ShardSpec>* shard,
                                       const BeforeRead& before_read) {
  File file(spec.path);
  if (file.fd() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot open it: ", std::strerror(errno)));
  }
  TC_ASSIGN_OR_RETURN(const core::NpyLayout layout, ReadLayout(file, spec.name));
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
    return ReadRows(file, layout, rows.begin, rows.size(), spec.name);
  }
  struct stat info;
  if (::fstat(file.fd(), &info) != 0) {
    return absl::InternalError(absl::StrCat("stat: ", std::strerror(errno)));
  }
  if (in_place) {
    const int64_t expected = layout.data_offset + layout.data_bytes;
    if (info.st_size != expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          ".npy data is ", info.st_size - layout.data_offset, " bytes but shape ",
          core::ShapeToString(layout.shape), " of '", layout.descr, "' needs ", layout.data_bytes,
          " bytes", info.st_size < expected ? " (truncated file?)" : " (trailing bytes)"));
    }
    TC_RETURN_IF_ERROR(before_read(layout.dtype, layout.shape));
    return ReadRows(file, layout, 0, layout.shape[0], spec.name);
  }
  if (layout.dtype != core::DataType::kString) {
    TC_RETURN_IF_ERROR(before_read(layout.dtype, layout.shape));
  }
  // Strings and Fortran order: the whole file, then converted (twice the memory for a while).
  spdlog::info("preloading {}: '{}'{} is read whole and then converted (a slower path)", spec.name,
               layout.descr, layout.fortran_order ? " in Fortran order" : "");
  std::string contents(static_cast<size_t>(info.st_size), '\0');
  TC_RETURN_IF_ERROR(
      ReadAt(file, 0, absl::MakeSpan(reinterpret_cast<uint8_t*>(contents.data()), contents.size()),
             spec.name));
  return core::ParseNpy(contents);
}

absl::Status Load(const PreloadSpec& spec, std::optional<core::ShardSpec> shard,
                  core::TensorRegistry* registry, const TensorPlacer& place) {
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
  absl::StatusOr<core::Tensor> tensor =
      ReadTable(spec, &shard, [&](core::DataType dtype, const core::Shape& shape) {
        return plan_and_reserve(dtype, shape, -1);
      });
  if (!tensor.ok()) return tensor.status();
  if (!reservation.has_value()) {
    const core::TensorView view = tensor->view();
    int64_t payload = 0;
    for (const std::string* s : view.strings) payload += static_cast<int64_t>(s->size());
    TC_RETURN_IF_ERROR(
        plan_and_reserve(tensor->dtype(), tensor->shape(),
                         core::ResidentBytes(tensor->dtype(), tensor->num_elements(), payload)));
  }
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
