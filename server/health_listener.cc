#include "server/health_listener.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

#include "core/status_macros.h"
#include "server/builder_options.h"

namespace tensorcompute::server {
namespace {

// Answers every method other than the health service's. (It also gives the server the
// callback method that gRPC 1.51 requires of a server without completion queues.)
class HealthOnly final : public grpc::CallbackGenericService {
 public:
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext*) override {
    class Reactor final : public grpc::ServerGenericBidiReactor {
     public:
      Reactor() {
        Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                            "this port (health_listen) serves grpc.health.v1 only; call "
                            "TensorCompute on the server's main port"));
      }
      void OnDone() override { delete this; }
    };
    return new Reactor;
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<HealthListener>> HealthListener::Start(const std::string& address,
                                                                      int descriptor_reserve) {
  std::unique_ptr<HealthListener> listener(new HealthListener());
  GrpcAcceptor::Options accepting;
  accepting.flag = "health_listen";
  accepting.descriptor_reserve = descriptor_reserve;
  TC_ASSIGN_OR_RETURN(listener->acceptor_, GrpcAcceptor::Listen(address, std::move(accepting)));
  listener->port_ = listener->acceptor_->port();
  grpc::ServerBuilder builder;
  listener->acceptor_->AddTo(&builder, grpc::InsecureServerCredentials());
  builder.SetOption(WithoutReflection());
  // gRPC requires a registered service to outlive its server: fallback_ is declared before
  // server_ (health_listener.h), so it is destroyed after it.
  listener->fallback_ = std::make_unique<HealthOnly>();
  builder.RegisterCallbackGenericService(listener->fallback_.get());
  listener->server_ = builder.BuildAndStart();
  if (listener->server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve on ", address, " (health_listen)"));
  }
  listener->acceptor_->Start();
  return listener;
}

HealthListener::~HealthListener() { Shutdown(); }

void HealthListener::Shutdown() {
  if (shut_down_ || server_ == nullptr) return;  // stopped, or never started
  shut_down_ = true;
  acceptor_->Stop();  // before Shutdown, which drops connections handed to it afterwards
  // With a deadline: calls still open after a second are cancelled rather than waited for.
  server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  server_->Wait();
}

}  // namespace tensorcompute::server
