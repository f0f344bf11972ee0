#include "server/preload.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

#include "core/npy_format.h"

namespace tensorcompute::server {

absl::Status Preload(const std::vector<std::string>& specs, core::TensorRegistry* registry,
                     const TensorPlacer& place) {
  for (const std::string& spec : specs) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--preload '", spec, "': expected NAME=PATH.npy"));
    }
    const std::string name = spec.substr(0, eq);
    const std::string path = spec.substr(eq + 1);
    const absl::Time start = absl::Now();
    std::string bytes;
    {
      std::ifstream file(path, std::ios::binary);
      if (!file) {
        return absl::InvalidArgumentError(
            absl::StrCat("--preload ", name, ": cannot open ", path, ": ", std::strerror(errno)));
      }
      std::ostringstream contents;
      contents << file.rdbuf();
      bytes = std::move(contents).str();
    }
    absl::StatusOr<core::Tensor> tensor = core::ParseNpy(bytes);
    bytes.clear();
    bytes.shrink_to_fit();
    absl::Status status = tensor.status();
    if (status.ok() && tensor->shape().empty()) {
      status = absl::InvalidArgumentError("a scalar; gathers need rank >= 1");
    }
    if (status.ok()) {
      const core::TensorView view = tensor->view();
      int64_t payload = 0;
      for (const std::string* s : view.strings) payload += static_cast<int64_t>(s->size());
      absl::StatusOr<core::TensorRegistry::Reservation> reservation = registry->Reserve(
          name, core::ResidentBytes(tensor->dtype(), tensor->num_elements(), payload));
      absl::StatusOr<core::DeviceCopy> copy =
          reservation.ok() ? place("", *tensor) : reservation.status();
      status = copy.status();
      if (status.ok()) {
        status = registry
                     ->Put(name, *std::move(tensor), *std::move(copy), /*replace=*/false,
                           *std::move(reservation))
                     .status();
      }
    }
    if (!status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat("--preload ", name, "=", path, ": ", status.message()));
    }
    const auto entry = registry->Find(name);
    spdlog::info("preloaded {} from {}: {} bytes on {} in {:.1f} s", name, path, entry->bytes,
                 entry->device, absl::ToDoubleSeconds(absl::Now() - start));
  }
  return absl::OkStatus();
}

}  // namespace tensorcompute::server
