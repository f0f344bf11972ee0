// tensorcompute-echo-server: answers every unary call, whatever its method, with the request's
// own bytes and status OK (and serves grpc.health.v1, SERVING). It parses nothing and computes
// nothing, so a load test against it measures the load tester's (and gRPC's) own ceiling:
// docs/performance.md, "Load tester".
//
//   tensorcompute-echo-server [--listen=127.0.0.1:0] [--max_message_bytes=67108864]
// prints "tensorcompute-echo-server listening on HOST:PORT port=N" and runs until SIGTERM or
// SIGINT.

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0", "host:port to serve on; port 0 picks one");
ABSL_FLAG(int, max_message_bytes, 64 << 20, "largest request and response in bytes");

namespace {

// Reads one request and writes the same bytes back.
class EchoReactor : public grpc::ServerGenericBidiReactor {
 public:
  EchoReactor() { StartRead(&buffer_); }
  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::OK);
      return;
    }
    StartWriteAndFinish(&buffer_, grpc::WriteOptions(), grpc::Status::OK);
  }
  void OnDone() override { delete this; }

 private:
  grpc::ByteBuffer buffer_;
};

class EchoService : public grpc::CallbackGenericService {
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext*) override {
    return new EchoReactor;
  }
};

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  EchoService service;
  // The standard health service, SERVING, like tensorcompute-server's: the bundled clients
  // watch it (client-side health checking) and would not call a server that fails it. The
  // generic echo answers every other method.
  grpc::EnableDefaultHealthCheckService(true);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::GetFlag(FLAGS_listen), grpc::InsecureServerCredentials(), &port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a port in use fails, as the server's
  builder.SetMaxReceiveMessageSize(absl::GetFlag(FLAGS_max_message_bytes));
  builder.SetMaxSendMessageSize(absl::GetFlag(FLAGS_max_message_bytes));
  builder.RegisterCallbackGenericService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "tensorcompute-echo-server: cannot listen on %s\n",
                 absl::GetFlag(FLAGS_listen).c_str());
    return 1;
  }
  server->GetHealthCheckService()->SetServingStatus("tensorcompute.v1.TensorCompute", true);
  std::printf("tensorcompute-echo-server listening on port=%d\n", port);
  std::fflush(stdout);
  int signal = 0;
  sigwait(&stop, &signal);
  server->Shutdown();
  std::fflush(nullptr);
  std::_Exit(0);
}
