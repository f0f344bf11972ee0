#include "client/tensor_io.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "core/status_macros.h"

namespace tensorcompute::client {
namespace {

using core::DataType;
using core::Shape;

absl::Status Invalid(absl::string_view what) { return absl::InvalidArgumentError(what); }

// ---- files ----

absl::Status ErrnoError(int err, absl::string_view action, const std::string& path) {
  const std::string message =
      absl::StrCat("cannot ", action, " ", path, ": ", std::generic_category().message(err));
  if (err == ENOENT) return absl::NotFoundError(message);
  if (err == EACCES) return absl::PermissionDeniedError(message);
  return absl::InternalError(message);
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  File f(std::fopen(path.c_str(), "rb"));
  if (f == nullptr) return ErrnoError(errno, "open", path);
  std::string contents;
  char buf[1 << 16];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof(buf), f.get())) > 0) contents.append(buf, got);
  if (std::ferror(f.get())) return ErrnoError(errno, "read", path);
  return contents;
}

absl::Status WriteWholeFile(absl::string_view contents, const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return ErrnoError(errno, "open", path);
  const bool written = std::fwrite(contents.data(), 1, contents.size(), f) == contents.size();
  const int write_errno = errno;  // before fclose, which may set errno again
  // fclose is checked too: a buffered write's failure (a full disk) may show only when the
  // buffer is flushed there.
  if (std::fclose(f) != 0 || !written) {
    return ErrnoError(written ? errno : write_errno, "write", path);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TensorFormat> FormatFromPath(absl::string_view path) {
  if (absl::EndsWithIgnoreCase(path, ".npy")) return TensorFormat::kNpy;
  if (absl::EndsWithIgnoreCase(path, ".json")) return TensorFormat::kJson;
  return Invalid(absl::StrCat("cannot tell the format of ", path,
                              ": expected a name ending in .npy or .json"));
}

absl::StatusOr<core::Tensor> ReadTensorFile(const std::string& path) {
  TC_ASSIGN_OR_RETURN(const TensorFormat format, FormatFromPath(path));
  TC_ASSIGN_OR_RETURN(const std::string contents, ReadWholeFile(path));
  absl::StatusOr<core::Tensor> t =
      format == TensorFormat::kNpy ? core::ParseNpy(contents) : ParseJson(contents);
  if (!t.ok()) {
    return absl::Status(t.status().code(), absl::StrCat(path, ": ", t.status().message()));
  }
  return t;
}

absl::Status WriteTensorFile(const core::TensorView& t, const std::string& path) {
  TC_ASSIGN_OR_RETURN(const TensorFormat format, FormatFromPath(path));
  // Checked before the file is opened, so that a malformed tensor leaves no empty file behind.
  TC_RETURN_IF_ERROR(core::ValidateTensor(t, "tensor", std::numeric_limits<int64_t>::max()));
  std::string contents;
  if (format == TensorFormat::kNpy) {
    TC_ASSIGN_OR_RETURN(contents, core::SerializeNpy(t));
  } else {
    contents = SerializeJson(t);
  }
  return WriteWholeFile(contents, path);
}

}  // namespace tensorcompute::client
