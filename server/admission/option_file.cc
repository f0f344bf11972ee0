#include "server/admission/option_file.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace tensorcompute::server {

absl::StatusOr<std::string> ReadOptionFile(absl::string_view option, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  if (!in || in.bad()) {
    return absl::InvalidArgumentError(absl::StrCat(option, "=", path, ": cannot read the file"));
  }
  return text.str();
}

}  // namespace tensorcompute::server
