#include "server/admission/option_file.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace tensorcompute::server {

absl::StatusOr<std::string> ReadOptionFile(absl::string_view option, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  // An empty file sets failbit on `text`, not on `in`, so it reads as "" without error; the
  // caller decides whether that is one (ReadTokens: no token).
  if (in) text << in.rdbuf();
  if (!in || in.bad()) {
    return absl::InvalidArgumentError(absl::StrCat(option, "=", path, ": cannot read the file"));
  }
  return text.str();
}

}  // namespace tensorcompute::server
