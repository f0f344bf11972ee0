#include "server/admission/call_gate.h"

#include "grpcpp/server_context.h"

#include "core/status_macros.h"
#include "proto/grpc_compression.h"

namespace tensorcompute::server {

CallGate::CallGate(Metrics* metrics, ErrorLog* errors, const TokenAuth* auth,
                   const TokenAuth* admin)
    : metrics_(metrics), errors_(errors), auth_(auth), admin_(admin), unsent_(metrics) {}

absl::Status CallGate::Admit(std::optional<absl::string_view> authorization,
                             bool needs_admin) const {
  TC_RETURN_IF_ERROR(CheckToken(authorization, needs_admin));
  if (draining()) return DrainingError();
  return absl::OkStatus();
}

absl::Status CallGate::Admit(const grpc::CallbackServerContext& context, bool needs_admin) const {
  // The metadata lookup only when a token is checked: not on every call of a server without.
  const bool tokens = auth_ != nullptr || admin_ != nullptr;
  return Admit(tokens ? AuthorizationOf(context) : std::nullopt, needs_admin);
}

void CallGate::Answer(Rpc rpc, const CallRecord& record, const absl::Status& status) {
  // One clock reading for the RPC's and the model's statistics, so that the two agree.
  const absl::Time now = absl::Now();
  const core::RequestStages stages = record.Stages(now);
  metrics_->CountRequest(rpc, status.code(), stages, now);
  if (record.model != nullptr) record.model->Record(stages, status.ok(), now);
  if (!status.ok()) errors_->Log(RpcName(rpc), status, record.request_id);
}

void CallGate::Compress(grpc::CallbackServerContext& context) const {
  // A level, not the algorithm: the core resolves it against the client's grpc-accept-encoding
  // (proto/grpc_compression.h), so a client that cannot decode the algorithm gets plain answers.
  if (compression_ != GRPC_COMPRESS_NONE) {
    context.set_compression_level(proto::CompressionLevelFor(compression_));
  }
}

absl::Status CallGate::DrainingError() {
  return absl::UnavailableError("server is draining; retry on another replica");
}

absl::Status CallGate::CheckToken(std::optional<absl::string_view> authorization,
                                  bool needs_admin) const {
  if (needs_admin && admin_ != nullptr) {
    absl::Status as_admin = admin_->Check(authorization);
    if (as_admin.ok()) return as_admin;
    // A valid ordinary token is PERMISSION_DENIED, not UNAUTHENTICATED: the caller is known but
    // may not do this, and sending the token again will not help.
    if (auth_ != nullptr && auth_->Check(authorization).ok()) {
      return absl::PermissionDeniedError(
          "PutTensor, UpdateRows and DeleteTensor need an admin token (the server's "
          "--admin_token_file); "
          "the token sent is an ordinary one");
    }
    return as_admin;
  }
  // Without admin tokens an admin call falls through to here: it needs what other calls need.
  if (auth_ == nullptr) return absl::OkStatus();
  absl::Status status = auth_->Check(authorization);
  // Admin tokens are accepted wherever an ordinary one is.
  if (!status.ok() && admin_ != nullptr && admin_->Check(authorization).ok()) {
    return absl::OkStatus();
  }
  return status;
}

std::optional<absl::string_view> AuthorizationOf(const grpc::CallbackServerContext& context) {
  // A view of the context's own copy of the metadata (no copy made): valid for the call's
  // lifetime.
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find("authorization");
  if (it == metadata.end()) return std::nullopt;
  return absl::string_view(it->second.data(), it->second.size());
}

}  // namespace tensorcompute::server
