#include "server/kserve/front_end.h"

#include <memory>
#include <utility>

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
    HttpFrontEnd::Options http_options;
    http_options.listen = options_.http_listen;
    http_options.threads = options_.http_threads;
    http_options.max_body_bytes = context_.options->max_message_bytes;
    absl::StatusOr<std::unique_ptr<HttpFrontEnd>> http =
        HttpFrontEnd::Start(http_options, context_.gate, context_.compute, context_.ready);
    if (!http.ok()) return http.status();
    http_ = *std::move(http);
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

FrontEndFactory MakeFrontEnd(const Options& options) {
  return [options](const FrontEndContext& context) -> absl::StatusOr<std::unique_ptr<FrontEnd>> {
    return std::make_unique<KserveFrontEnd>(options, context);
  };
}

}  // namespace tensorcompute::server::kserve
