#include "core/npy_file.h"

#include <algorithm>
#include <cerrno>
#include <string>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/status_macros.h"

namespace tensorcompute::core {
namespace {

// The most bytes one pread asks for: large sequential reads, and progress between them.
constexpr int64_t kReadPiece = int64_t{64} << 20;

absl::Status ErrnoError(int err, const char* action) {
  const std::string message =
      absl::StrCat("cannot ", action, " it: ", std::generic_category().message(err));
  if (err == ENOENT) return absl::NotFoundError(message);
  if (err == EACCES) return absl::PermissionDeniedError(message);
  return absl::InternalError(message);
}

}  // namespace

absl::StatusOr<NpyFile> NpyFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "open");
  std::shared_ptr<const int> owned(new int(fd), [](const int* p) {
    ::close(*p);
    delete p;
  });
  struct stat info;
  if (::fstat(fd, &info) != 0) return ErrnoError(errno, "read");
  NpyFile file(std::move(owned), static_cast<int64_t>(info.st_size));
  // The preamble says how long the header is; a file shorter than 12 bytes is read whole.
  uint8_t preamble[12];
  const int64_t preamble_bytes = std::min<int64_t>(sizeof preamble, file.size_);
  TC_RETURN_IF_ERROR(
      file.ReadRaw(0, absl::MakeSpan(preamble, static_cast<size_t>(preamble_bytes)), nullptr));
  TC_ASSIGN_OR_RETURN(const int64_t head_bytes,
                      NpyHeaderBytes(absl::string_view(reinterpret_cast<const char*>(preamble),
                                                       static_cast<size_t>(preamble_bytes))));
  std::string head(static_cast<size_t>(std::min(head_bytes, file.size_)), '\0');
  TC_RETURN_IF_ERROR(file.ReadRaw(
      0, absl::MakeSpan(reinterpret_cast<uint8_t*>(head.data()), head.size()), nullptr));
  TC_ASSIGN_OR_RETURN(file.layout_, ParseNpyLayout(head));
  return file;
}

int64_t NpyFile::row_bytes() const {
  if (layout_.shape.empty()) return layout_.data_bytes;
  return layout_.shape[0] > 0 ? layout_.data_bytes / layout_.shape[0] : 0;
}

absl::Status NpyFile::CheckSize() const {
  return CheckNpyDataBytes(layout_, size_ - layout_.data_offset);
}

absl::Status NpyFile::ReadData(int64_t offset, absl::Span<uint8_t> out,
                               std::atomic<int64_t>* done) const {
  if (!NpyRowsReadInPlace(layout_) || offset < 0 || offset % layout_.item_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read '", layout_.descr, "'",
                                                   layout_.fortran_order ? " in Fortran order" : "",
                                                   " data in place from byte ", offset));
  }
  TC_RETURN_IF_ERROR(ReadRaw(layout_.data_offset + offset, out, done));
  return ConvertNpyRowsInPlace(layout_, out);
}

absl::StatusOr<std::string> NpyFile::ReadAll() const {
  std::string contents(static_cast<size_t>(size_), '\0');
  TC_RETURN_IF_ERROR(ReadRaw(
      0, absl::MakeSpan(reinterpret_cast<uint8_t*>(contents.data()), contents.size()), nullptr));
  return contents;
}

absl::Status NpyFile::ReadRaw(int64_t offset, absl::Span<uint8_t> out,
                              std::atomic<int64_t>* done) const {
  const int64_t total = static_cast<int64_t>(out.size());
  int64_t begin = 0;
  while (begin < total) {
    const size_t want = static_cast<size_t>(std::min(kReadPiece, total - begin));
    const ssize_t got = ::pread(*fd_, out.data() + begin, want, offset + begin);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return ErrnoError(errno, "read");
    if (got == 0) {
      return absl::InvalidArgumentError(absl::StrCat("truncated .npy file: ", total,
                                                     " bytes expected at offset ", offset,
                                                     ", the file ends at ", offset + begin));
    }
    begin += got;
    if (done != nullptr) done->fetch_add(got, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

}  // namespace tensorcompute::core
