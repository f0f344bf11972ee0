// File: client/client.h
//
// The C++ client of tensorcompute: Gather and GatherNd on core tensors, over one or several
// server replicas.
//
//   ClientOptions options;
//   options.target = "10.0.0.7:50051,10.0.0.8:50051";   // or "dns:///tc.ns.svc:50051"
//   auto client = Client::Create(options);
//   absl::StatusOr<core::Tensor> out = (*client)->Gather(params.view(), indices.view(), 1);
//
// Targets. `target` is either one gRPC target URI (a name with a resolver scheme: "dns:",
// "ipv4:", "ipv6:", "unix:", e.g. "ipv4:10.0.0.7:50051,10.0.0.8:50051") or a comma-separated
// list of "host:port" targets. Each target gets its own channel(s); calls go round-robin over
// them, and every channel uses gRPC's round_robin load-balancing policy, so a DNS name that
// resolves to several addresses (a headless Kubernetes Service) spreads calls over all of them.
//
// Deadlines, limits, retries: every call has a deadline (ClientOptions::timeout, or the call's
// own); message limits both ways are max_message_bytes (match the server's
// --max_message_bytes). UNAVAILABLE (overloaded, draining, unreachable) is retried with
// exponential backoff and jitter when RetryOptions::max_attempts > 1 (off by default), each
// attempt on the next channel, all within the call's one deadline. Nothing else is retried.
//
// Errors are the server's status (code and message) verbatim, or gRPC's own (DEADLINE_EXCEEDED,
// UNAVAILABLE "failed to connect ..."), as absl::Status.
// Thread-safety: a Client is thread-safe; share one across threads.

#ifndef TENSORCOMPUTE_CLIENT_CLIENT_H_
#define TENSORCOMPUTE_CLIENT_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/security/credentials.h"
#include "tensorcompute/v1/tensorcompute.grpc.pb.h"

#include "core/tensor.h"

namespace tensorcompute::client {

struct RetryOptions {
  // Attempts per call, the first included; 1 (default) means no retries.
  int max_attempts = 1;
  // Backoff before retry n (n = 1, 2, ...): min(initial_backoff * multiplier^(n-1),
  // max_backoff), scaled by a random factor in [0.5, 1] (jitter), and never past the deadline.
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(2);
  double backoff_multiplier = 2.0;
};

// Transport security (the server's --tls_cert / --tls_client_ca). PEM files, read by Create.
struct TlsOptions {
  bool enabled = false;  // TLS instead of plaintext; the fields below need it
  // CA certificate(s) to verify the server with; empty: the system's roots (gRPC's default).
  std::string ca_file;
  // mTLS: this client's certificate chain and private key; both or neither.
  std::string cert_file;
  std::string key_file;
  // The name checked against the server's certificate instead of the target's host (e.g. when
  // dialling an IP address that the certificate does not list). Empty: the target's host.
  std::string server_name;
};

struct ClientOptions {
  // See the file comment: one gRPC target URI or "host:port[,host:port...]".
  std::string target = "localhost:50051";
  // Deadline of each call, retries included; absl::InfiniteDuration() for none.
  absl::Duration timeout = absl::Seconds(30);
  // Largest message sent and received, in bytes; larger ones fail with RESOURCE_EXHAUSTED.
  int64_t max_message_bytes = int64_t{64} << 20;
  // HTTP/2 connections per target (each its own channel); more than one spreads a heavy load
  // over several connections.
  int connections_per_target = 1;
  RetryOptions retry;
  TlsOptions tls;
  // Sent on every call as "authorization: Bearer <auth_token>" (the server's
  // --auth_token_file); empty: none. Over plaintext it travels unencrypted: use TLS.
  std::string auth_token;
};

// Per-call overrides.
struct CallOptions {
  std::optional<absl::Duration> timeout;  // default: ClientOptions::timeout
};

class Client {
 public:
  // Returns a client (channels connect lazily, on the first call), or INVALID_ARGUMENT for an
  // empty target or a bad option.
  static absl::StatusOr<std::unique_ptr<Client>> Create(ClientOptions options);

  // tf.gather(params, indices, axis, batch_dims); axis unset means batch_dims (TF's default).
  // Returns the output, or the error status of the call.
  absl::StatusOr<core::Tensor> Gather(const core::TensorView& params,
                                      const core::TensorView& indices,
                                      std::optional<int64_t> axis = std::nullopt,
                                      int64_t batch_dims = 0, const CallOptions& call = {});

  // tf.gather_nd(params, indices, batch_dims).
  absl::StatusOr<core::Tensor> GatherNd(const core::TensorView& params,
                                        const core::TensorView& indices, int64_t batch_dims = 0,
                                        const CallOptions& call = {});

  // The grpc.health.v1 status ("SERVING", "NOT_SERVING", ...) of target `target_index` for
  // `service` ("" = the whole server), or the call's error.
  absl::StatusOr<std::string> Health(int target_index = 0, const std::string& service = "",
                                     const CallOptions& call = {});

  // The targets that the option named, one per entry (see SplitTargets).
  const std::vector<std::string>& targets() const { return targets_; }
  // Every channel: connections_per_target per target, grouped by target.
  const std::vector<std::shared_ptr<grpc::Channel>>& channels() const { return channels_; }

  // --- implementation details below ---
 private:
  Client(ClientOptions options, std::vector<std::string> targets,
         std::vector<std::shared_ptr<grpc::Channel>> channels,
         std::shared_ptr<grpc::ChannelCredentials> credentials);
  // Adds the authorization metadata, when there is a token.
  void Authorize(grpc::ClientContext* context) const;

  template <typename Request, typename Response>
  absl::StatusOr<core::Tensor> Call(const Request& request, const CallOptions& call);

  const ClientOptions options_;
  const std::vector<std::string> targets_;
  const std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;  // for Health's channels
  // One stub per channel, made once (a stub is only the channel and its methods).
  std::vector<std::unique_ptr<v1::TensorCompute::Stub>> stubs_;
  std::atomic<uint64_t> next_channel_{0};
};

// Splits ClientOptions::target: a target with a resolver scheme (dns:, ipv4:, ipv6:, unix:,
// unix-abstract:, vsock:) is one entry as it is; otherwise each comma-separated part is one
// entry (spaces trimmed, empty parts dropped). Returns INVALID_ARGUMENT when nothing is left.
absl::StatusOr<std::vector<std::string>> SplitTargets(absl::string_view target);

// Channel credentials for `tls`: insecure when it is not enabled, else SSL with its files
// read. INVALID_ARGUMENT naming the file when one cannot be read, or when only one of
// cert_file and key_file is set.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsOptions& tls);

// A channel to `target` with the client's message limits and the round_robin policy, which
// with `health_checking` (gRPC client-side health checking) skips servers whose health is not
// SERVING. Channels made with different `index` values never share a connection.
// `credentials` null means plaintext; `server_name` is TlsOptions::server_name.
std::shared_ptr<grpc::Channel> MakeChannel(
    const std::string& target, int64_t max_message_bytes, int index, bool health_checking = true,
    std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr,
    const std::string& server_name = "");

}  // namespace tensorcompute::client

#endif  // TENSORCOMPUTE_CLIENT_CLIENT_H_
