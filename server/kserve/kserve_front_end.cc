#include "server/kserve/kserve_front_end.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"

#include "core/status_macros.h"
#include "server/kserve/grpc_service.h"
#include "server/kserve/http_front_end.h"

namespace tensorcompute::server::kserve {
namespace {

class KserveFrontEnd final : public FrontEnd {
 public:
  KserveFrontEnd(const Options& options, const FrontEndContext& context)
      : options_(options), context_(context), grpc_(context.gate, context.compute, context.ready) {}

  std::vector<grpc::Service*> Services() override { return {&grpc_}; }

  absl::Status Start() override {
    if (options_.http_listen.empty()) return absl::OkStatus();
    TC_ASSIGN_OR_RETURN(http_, HttpFrontEnd::Start(options_, *context_.options, context_.gate,
                                                   context_.compute, context_.ready));
    return absl::OkStatus();
  }

  void Stop() override {
    if (http_ != nullptr) http_->Stop();
  }

  std::vector<std::pair<std::string, int>> Ports() const override {
    return {{"http_port", http_ == nullptr ? 0 : http_->port()}};
  }

 private:
  const Options options_;
  const FrontEndContext context_;
  GrpcService grpc_;
  std::unique_ptr<HttpFrontEnd> http_;  // null without http_listen
};

}  // namespace

absl::Status Options::Validate() const {
  const auto at_least_one = [](const char* name, int64_t value) {
    return value >= 1 ? absl::OkStatus()
                      : absl::InvalidArgumentError(
                            absl::StrCat(name, " is ", value, "; it must be at least 1"));
  };
  const auto positive = [](const char* name, absl::Duration value) {
    return value > absl::ZeroDuration()
               ? absl::OkStatus()
               : absl::InvalidArgumentError(absl::StrCat(name, " is ", absl::FormatDuration(value),
                                                         "; it must be positive"));
  };
  TC_RETURN_IF_ERROR(at_least_one("http_max_connections", http_max_connections));
  TC_RETURN_IF_ERROR(at_least_one("http_max_header_bytes", http_max_header_bytes));
  TC_RETURN_IF_ERROR(at_least_one("http_max_header_fields", http_max_header_fields));
  if (http_max_header_bytes > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError("http_max_header_bytes is above 1 GiB");
  }
  TC_RETURN_IF_ERROR(positive("http_header_timeout", http_header_timeout));
  TC_RETURN_IF_ERROR(positive("http_body_progress_timeout", http_body_progress_timeout));
  TC_RETURN_IF_ERROR(positive("http_body_timeout", http_body_timeout));
  TC_RETURN_IF_ERROR(positive("http_idle_timeout", http_idle_timeout));
  TC_RETURN_IF_ERROR(positive("http_write_timeout", http_write_timeout));
  return absl::OkStatus();
}

FrontEndFactory MakeFrontEnd(const Options& options) {
  return [options](const FrontEndContext& context) -> absl::StatusOr<std::unique_ptr<FrontEnd>> {
    return std::make_unique<KserveFrontEnd>(options, context);
  };
}

}  // namespace tensorcompute::server::kserve
