#include "core/disk/row_file.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tensorcompute::core::disk {
namespace {

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t MtimeNanos(const struct stat& st) {
  return int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
}

// Block-aligned memory that a direct read may fill.
struct AlignedBuffer {
  uint8_t* data = nullptr;
  int64_t bytes = 0;
  AlignedBuffer() = default;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { std::free(data); }
  // Makes room for at least `need` bytes; false if memory ran out.
  bool Reserve(int64_t need) {
    if (need <= bytes) return true;
    void* p = nullptr;
    if (posix_memalign(&p, RowFile::kBlockBytes, static_cast<size_t>(need)) != 0) return false;
    std::free(data);
    data = static_cast<uint8_t*>(p);
    bytes = need;
    return true;
  }
};

// A reading thread's ring and bounce buffers, made on its first read and kept for its life.
struct ThreadRing {
  io_uring ring{};
  int state = 0;  // 0: not tried yet, 1: ready, -1: io_uring_queue_init failed
  AlignedBuffer buffers;
  ThreadRing() = default;
  ThreadRing(const ThreadRing&) = delete;
  ThreadRing& operator=(const ThreadRing&) = delete;
  ~ThreadRing() {
    if (state == 1) io_uring_queue_exit(&ring);
  }
  bool Ready() {
    if (state == 0) state = io_uring_queue_init(RowFile::kQueueDepth, &ring, 0) == 0 ? 1 : -1;
    return state == 1;
  }
};

ThreadRing& ThisThreadsRing() {
  thread_local ThreadRing ring;
  return ring;
}

AlignedBuffer& ThisThreadsBounce() {
  thread_local AlignedBuffer buffer;
  return buffer;
}

// True if io_uring can be set up here at all.
bool UringWorks() {
  io_uring ring{};
  if (io_uring_queue_init(2, &ring, 0) != 0) return false;
  io_uring_queue_exit(&ring);
  return true;
}

absl::Status OpenError(const std::string& path, int error) {
  const std::string what = absl::StrCat("table file '", path, "': ", std::strerror(error));
  switch (error) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(what);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(what);
    default:
      return absl::UnavailableError(what);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<RowFile>> RowFile::Open(const std::string& path, int64_t data_offset,
                                                       int64_t rows, int64_t row_bytes,
                                                       Options options) {
  return OpenAs(path, path, data_offset, rows, row_bytes, options);
}

absl::StatusOr<std::unique_ptr<RowFile>> RowFile::CreateUnnamed(const std::string& dir,
                                                                int64_t rows, int64_t row_bytes,
                                                                Options options) {
  const std::string shown = absl::StrCat(dir, "/(unnamed)");
  if (rows < 0 || row_bytes < 1 || row_bytes > kMaxRowBytes ||
      rows > std::numeric_limits<int64_t>::max() / row_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("table file '", shown, "': bad layout (", rows,
                                                   " rows of ", row_bytes, " bytes; rows of 1 to ",
                                                   kMaxRowBytes, " bytes)"));
  }
  // An unnamed file: its space goes back when its last descriptor closes, even if the server
  // is killed. O_TMPFILE where the file system has it; else a named file unlinked at once.
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    std::string name = absl::StrCat(dir, "/.tensorcompute-table-XXXXXX");
    fd = ::mkostemp(name.data(), O_CLOEXEC);
    if (fd >= 0) ::unlink(name.c_str());
  }
  if (fd < 0) {
    const int error = errno;
    absl::Status status = OpenError(dir, error);
    return absl::Status(status.code(),
                        absl::StrCat("table directory '", dir,
                                     "': cannot make a file there: ", std::strerror(error)));
  }
  const int64_t bytes = rows * row_bytes;
  if (bytes > 0) {
    const int error = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (error != 0) {
      ::close(fd);
      const std::string what = absl::StrCat("table directory '", dir, "': no room for a file of ",
                                            bytes, " bytes (", std::strerror(error), ")");
      return error == ENOSPC || error == EDQUOT || error == EFBIG
                 ? absl::ResourceExhaustedError(what)
                 : absl::UnavailableError(what);
    }
  }
  options.writable = true;
  absl::StatusOr<std::unique_ptr<RowFile>> file =
      OpenAs(absl::StrCat("/proc/self/fd/", fd), shown, 0, rows, row_bytes, options);
  ::close(fd);
  return file;
}

absl::StatusOr<std::unique_ptr<RowFile>> RowFile::OpenAs(const std::string& open_path,
                                                         const std::string& path,
                                                         int64_t data_offset, int64_t rows,
                                                         int64_t row_bytes, Options options) {
  if (rows < 0 || row_bytes < 1 || row_bytes > kMaxRowBytes || data_offset < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("table file '", path, "': bad layout (", rows, " rows of ", row_bytes,
                     " bytes from byte ", data_offset, "; rows of 1 to ", kMaxRowBytes, " bytes)"));
  }
  auto file = std::unique_ptr<RowFile>(new RowFile());
  file->path_ = path;
  file->data_offset_ = data_offset;
  file->rows_ = rows;
  file->row_bytes_ = row_bytes;
  // The longest span: a row that starts one byte before a block boundary.
  file->span_bytes_ = (row_bytes + kBlockBytes - 1 + kBlockBytes - 1) / kBlockBytes * kBlockBytes;
  file->in_flight_ =
      static_cast<int>(std::clamp<int64_t>(kMaxBounceBytes / file->span_bytes_, 1, kQueueDepth));
  file->direct_ = options.direct;
  int flags = O_RDONLY | O_CLOEXEC;
  file->read_fd_ = ::open(open_path.c_str(), flags | (options.direct ? O_DIRECT : 0));
  if (file->read_fd_ < 0 && options.direct && errno == EINVAL) {
    file->direct_ = false;  // the file system has no direct I/O (tmpfs)
    file->read_fd_ = ::open(open_path.c_str(), flags);
  }
  if (file->read_fd_ < 0) return OpenError(path, errno);
  if (options.writable) {
    file->write_fd_ = ::open(open_path.c_str(), O_WRONLY | O_CLOEXEC);
    if (file->write_fd_ < 0) return OpenError(path, errno);
  }
  struct stat st {};
  if (::fstat(file->read_fd_, &st) != 0) return OpenError(path, errno);
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("table file '", path, "': not a regular file"));
  }
  if (rows > (st.st_size - data_offset) / row_bytes || st.st_size < data_offset) {
    return absl::FailedPreconditionError(
        absl::StrCat("table file '", path, "': ", st.st_size, " bytes, shorter than its ", rows,
                     " rows of ", row_bytes, " bytes from byte ", data_offset));
  }
  {
    absl::MutexLock lock(&file->expected_mu_);
    file->expected_size_ = st.st_size;
    file->expected_mtime_ns_ = MtimeNanos(st);
  }
  file->uring_ = options.uring && UringWorks();
  return file;
}

RowFile::~RowFile() {
  if (read_fd_ >= 0) ::close(read_fd_);
  if (write_fd_ >= 0) ::close(write_fd_);
}

void RowFile::SpanOf(int64_t row, int64_t* begin, int64_t* length) const {
  const int64_t first = data_offset_ + row * row_bytes_;
  *begin = first / kBlockBytes * kBlockBytes;
  const int64_t end = (first + row_bytes_ + kBlockBytes - 1) / kBlockBytes * kBlockBytes;
  *length = end - *begin;
}

absl::Status RowFile::Unavailable(const std::string& what) const {
  return absl::UnavailableError(absl::StrCat("table file '", path_, "': ", what));
}

absl::Status RowFile::CheckUnchanged() const {
  absl::ReaderMutexLock lock(&expected_mu_);
  struct stat st {};
  if (::fstat(read_fd_, &st) != 0) return Unavailable(std::strerror(errno));
  if (st.st_size != expected_size_ || MtimeNanos(st) != expected_mtime_ns_) {
    return Unavailable(absl::StrCat("the file changed under the server (size ", expected_size_,
                                    " -> ", st.st_size,
                                    st.st_size == expected_size_ ? ", modified" : "", ")"));
  }
  return absl::OkStatus();
}

absl::Status RowFile::Read(absl::Span<const int64_t> rows, uint8_t* const* dest,
                           ReadObserver* observer) const {
  if (rows.empty()) return absl::OkStatus();
  if (absl::Status s = CheckUnchanged(); !s.ok()) return s;
  if (uring_ && ThisThreadsRing().Ready()) return ReadWithUring(rows, dest, observer);
  return ReadWithPread(rows, dest, observer);
}

absl::Status RowFile::ReadWithPread(absl::Span<const int64_t> rows, uint8_t* const* dest,
                                    ReadObserver* observer) const {
  AlignedBuffer& bounce = ThisThreadsBounce();
  if (!bounce.Reserve(span_bytes_)) return Unavailable("no memory for a bounce buffer");
  for (size_t i = 0; i < rows.size(); ++i) {
    int64_t begin = 0, length = 0;
    SpanOf(rows[i], &begin, &length);
    const int64_t start = NowNanos();
    int64_t done = 0;
    while (done < length) {
      const ssize_t got = ::pread(read_fd_, bounce.data + done, static_cast<size_t>(length - done),
                                  static_cast<off_t>(begin + done));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        return Unavailable(absl::StrCat("reading row ", rows[i], ": ", std::strerror(errno)));
      }
      if (got == 0) break;  // end of file: the last block may be partial
      done += got;
    }
    const int64_t offset = data_offset_ + rows[i] * row_bytes_ - begin;
    if (done < offset + row_bytes_) {
      return Unavailable(
          absl::StrCat("row ", rows[i], " came back short (the file was truncated?)"));
    }
    if (observer != nullptr) observer->OnRead(length, NowNanos() - start);
    std::memcpy(dest[i], bounce.data + offset, static_cast<size_t>(row_bytes_));
  }
  return absl::OkStatus();
}

absl::Status RowFile::ReadWithUring(absl::Span<const int64_t> rows, uint8_t* const* dest,
                                    ReadObserver* observer) const {
  ThreadRing& ring = ThisThreadsRing();
  if (!ring.buffers.Reserve(span_bytes_ * in_flight_)) {
    return Unavailable("no memory for bounce buffers");
  }
  struct Pending {
    int64_t index;  // in rows
    int64_t begin;  // the span read
    int64_t length;
    int64_t submitted;
  };
  std::vector<Pending> pending(static_cast<size_t>(in_flight_));
  std::vector<int> free_slots(static_cast<size_t>(in_flight_));
  for (int s = 0; s < in_flight_; ++s) free_slots[s] = in_flight_ - 1 - s;
  const int64_t n = static_cast<int64_t>(rows.size());
  int64_t next = 0, completed_or_dropped = 0, outstanding = 0;
  absl::Status first_error;

  auto submit = [&](int slot) {
    // Never null: at most in_flight_ <= kQueueDepth reads are outstanding, and each submitted
    // entry left the submission queue by the next io_uring_submit_and_wait.
    io_uring_sqe* sqe = io_uring_get_sqe(&ring.ring);
    Pending& p = pending[slot];
    io_uring_prep_read(sqe, read_fd_, ring.buffers.data + slot * span_bytes_,
                       static_cast<unsigned>(p.length), static_cast<uint64_t>(p.begin));
    io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(slot));
    p.submitted = NowNanos();
    ++outstanding;
  };
  while (completed_or_dropped < n) {
    // Fill the ring while there are rows left and no error.
    while (first_error.ok() && next < n && !free_slots.empty()) {
      const int slot = free_slots.back();
      free_slots.pop_back();
      Pending& p = pending[slot];
      p.index = next++;
      SpanOf(rows[p.index], &p.begin, &p.length);
      submit(slot);
    }
    if (!first_error.ok() && outstanding == 0) break;
    int rc = io_uring_submit_and_wait(&ring.ring, 1);
    if (rc == -EINTR) continue;
    if (rc < 0 && rc != -EBUSY && rc != -EAGAIN) {
      // The ring is unusable: tear it down (the kernel finishes or cancels what is in flight
      // into the bounce buffers, which live as long as the thread) and read with pread on
      // this thread from now on.
      io_uring_queue_exit(&ring.ring);
      ring.state = -1;
      return Unavailable(absl::StrCat("io_uring: ", std::strerror(-rc)));
    }
    io_uring_cqe* cqe = nullptr;
    while (outstanding > 0 && io_uring_peek_cqe(&ring.ring, &cqe) == 0 && cqe != nullptr) {
      const int slot = static_cast<int>(io_uring_cqe_get_data64(cqe));
      const int res = cqe->res;
      io_uring_cqe_seen(&ring.ring, cqe);
      --outstanding;
      Pending& p = pending[slot];
      if (res == -EINTR || res == -EAGAIN) {  // try the same read again
        if (first_error.ok()) {
          submit(slot);
          continue;
        }
      } else if (res < 0) {
        if (first_error.ok()) {
          first_error =
              Unavailable(absl::StrCat("reading row ", rows[p.index], ": ", std::strerror(-res)));
        }
      } else {
        const int64_t offset = data_offset_ + rows[p.index] * row_bytes_ - p.begin;
        if (res < offset + row_bytes_) {
          // Short: the end of the file came first (only the last block may be partial).
          if (first_error.ok()) {
            first_error = Unavailable(
                absl::StrCat("row ", rows[p.index], " came back short (the file was truncated?)"));
          }
        } else {
          if (observer != nullptr) observer->OnRead(p.length, NowNanos() - p.submitted);
          std::memcpy(dest[p.index], ring.buffers.data + slot * span_bytes_ + offset,
                      static_cast<size_t>(row_bytes_));
        }
      }
      ++completed_or_dropped;
      free_slots.push_back(slot);
    }
  }
  return first_error;
}

absl::Status RowFile::Write(int64_t row, const uint8_t* src) { return WriteRows(row, 1, src); }

absl::Status RowFile::WriteRows(int64_t first_row, int64_t count, const uint8_t* src) {
  absl::MutexLock write_lock(&write_mu_);
  if (write_fd_ < 0) return absl::FailedPreconditionError("table file opened read-only");
  // Readers check the file against what is expected under this lock: the write and the new
  // expectation appear to them together.
  absl::MutexLock lock(&expected_mu_);
  const int64_t begin = data_offset_ + first_row * row_bytes_;
  const int64_t length = count * row_bytes_;
  int64_t done = 0;
  while (done < length) {
    const ssize_t put = ::pwrite(write_fd_, src + done, static_cast<size_t>(length - done),
                                 static_cast<off_t>(begin + done));
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) {
      return Unavailable(absl::StrCat("writing row ", first_row + done / row_bytes_, ": ",
                                      put < 0 ? std::strerror(errno) : "no progress"));
    }
    done += put;
  }
  struct stat st {};
  if (::fstat(write_fd_, &st) != 0) return Unavailable(std::strerror(errno));
  expected_size_ = st.st_size;
  expected_mtime_ns_ = MtimeNanos(st);
  return absl::OkStatus();
}

absl::Status RowFile::Sync() {
  absl::MutexLock write_lock(&write_mu_);
  if (write_fd_ < 0) return absl::FailedPreconditionError("table file opened read-only");
  if (::fdatasync(write_fd_) != 0)
    return Unavailable(absl::StrCat("fdatasync: ", std::strerror(errno)));
  // The written pages are on disk now: drop them, so that the page cache holds none of ours.
  ::posix_fadvise(write_fd_, 0, 0, POSIX_FADV_DONTNEED);
  return absl::OkStatus();
}

}  // namespace tensorcompute::core::disk
