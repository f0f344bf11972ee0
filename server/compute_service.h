// File: server/compute_service.h
//
// The tensorcompute.v1.TensorCompute service on gRPC's callback API. Each RPC is glue: admit
// it to the in-flight budget, read and parse its message, view the tensors in place
// (proto/tensor_codec.h), plan and validate (core/gather_plan.h), make the response's output
// tensor the task's output slot, and Schedule the task on the batcher. It never computes, never
// blocks, and never takes a lock that compute holds. The task's done callback answers; every
// path answers (Finish) exactly once, cancelled RPCs included (gRPC 1.51 callback API rules).
//
// Reading after admission. Gather and GatherNd are unary on the wire, but the service registers
// them as streamed (Service::MarkMethodStreamed): gRPC then calls the handler when the call's
// headers arrive and reads the message only when the handler asks for it. The handler first
// checks the token and draining, then asks the byte budget for a receive credit
// (byte_budget.h), and only then reads: a refused, unauthenticated or draining call is
// answered without its message ever being buffered, and messages being read plus work
// accepted never pass max_inflight_bytes. Clients see ordinary unary RPCs. A message that is not
// a valid protobuf of the method's request type is INVALID_ARGUMENT; a call without a message,
// INVALID_ARGUMENT.
//
// Reactor lifetime: a reactor is created per RPC and deletes itself in OnDone, which gRPC calls
// after Finish completed. Until then it owns the request and response messages, so the Task's
// views into them stay valid. An OK answer is serialized by the reactor and the response
// message freed before it is sent, so that an answer the client is slow to take is held once.
// OnCancel marks the task's cancel flag (the batcher or executor then answers CANCELLED, through
// done, exactly once) or takes a waiting call out of the budget's line and answers it.
//
// Thread-safety: gRPC calls the methods from its threads concurrently; the service's state is
// the batcher (thread-safe), metrics (atomics), the budget (thread-safe) and the draining flag
// (atomic).

#ifndef TENSORCOMPUTE_SERVER_COMPUTE_SERVICE_H_
#define TENSORCOMPUTE_SERVER_COMPUTE_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "inference/grpc_predict_v2.pb.h"
#include "tensorcompute/v1/tensorcompute.grpc.pb.h"

#include "core/batching/batcher.h"
#include "core/gather_plan.h"
#include "core/tensor.h"
#include "core/tensor_registry.h"
#include "server/byte_budget.h"
#include "server/error_log.h"
#include "server/metrics.h"
#include "server/security.h"

namespace tensorcompute::server {

class ComputeService final : public v1::TensorCompute::CallbackService {
 public:
  // `batcher`, `metrics`, `errors`, `budget` and `auth` are not owned and must outlive the
  // service. Each request holds a receive credit of `budget` while its message is read, then
  // its message's and its output's bytes until its answer is sent; one that does not fit is
  // answered UNAVAILABLE at once (byte_budget.h). With `auth`, every RPC first checks the
  // caller's bearer token (TokenAuth::Check) and is answered UNAUTHENTICATED, counted like any
  // other answer, before any other work.
  ComputeService(batching::Batcher* batcher, const core::PlanOptions& plan_options,
                 Metrics* metrics, ErrorLog* errors, ByteBudget* budget,
                 const TokenAuth* auth = nullptr);

  // Resident tensors (PutTensor, DeleteTensor, ListTensors, params_name). Not owned; must
  // outlive the service. Without a registry those RPCs are UNIMPLEMENTED and params_name is
  // NOT_FOUND. `place` puts an uploaded tensor on the device a PutTensor names ("" for the
  // server's default): it returns the device copy (DeviceCopy{} for the CPU) or
  // INVALID_ARGUMENT for a device this server does not have. `admin` (may be null): with it,
  // PutTensor and DeleteTensor need one of its tokens (PERMISSION_DENIED for an ordinary token,
  // UNAUTHENTICATED for none or an unknown one), and its tokens are accepted wherever an
  // ordinary token is. Call before the service is registered.
  using Placer = std::function<absl::StatusOr<core::DeviceCopy>(const std::string& device,
                                                                const core::Tensor& tensor)>;
  void SetRegistry(core::TensorRegistry* registry, Placer place, const TokenAuth* admin);

  // From now on every new RPC is answered UNAVAILABLE ("server is draining; retry on another
  // replica"); RPCs already accepted are not affected.
  void StartDraining() { draining_.store(true); }
  bool draining() const { return draining_.load(); }

  // The resident-tensor RPCs (resident_rpcs.cc).
  grpc::ServerReadReactor<v1::PutTensorRequest>* PutTensor(
      grpc::CallbackServerContext* context, v1::PutTensorResponse* response) override;
  grpc::ServerUnaryReactor* DeleteTensor(grpc::CallbackServerContext* context,
                                         const v1::DeleteTensorRequest* request,
                                         v1::DeleteTensorResponse* response) override;
  grpc::ServerUnaryReactor* ListTensors(grpc::CallbackServerContext* context,
                                        const v1::ListTensorsRequest* request,
                                        v1::ListTensorsResponse* response) override;

  // KServe v2's ModelInfer (kserve_service.h registers it as streamed, like Gather): the same
  // admission, budget, batcher, executors and answers as Gather, with the request decoded by
  // kserve_codec.h. Returns the call's reactor.
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StartInfer(
      grpc::CallbackServerContext* context);

  // The resident tensors (null without them).
  const core::TensorRegistry* registry() const { return registry_; }

  // OK when the call may use the service: its token (when tokens are required: an ordinary or
  // an admin one), and with `admin`, an admin token (when admin tokens are configured).
  absl::Status Authorize(const grpc::CallbackServerContext& context, bool admin) const;
  // The same for an "authorization" value (nullopt when the call has none): for front ends
  // other than gRPC (kserve_http.h).
  absl::Status Authorize(std::optional<absl::string_view> authorization, bool admin) const;

  // KServe v2 inference for a front end other than gRPC (kserve_http.h): the same decoding
  // (kserve_codec.h), budget, batcher, executors, metrics (as ModelInfer) and error log as the
  // gRPC ModelInfer, but the calling thread waits for the answer. `message_bytes`, the size of
  // the request as received, is held in the budget with the output's bytes until this returns.
  // The caller checks the token (Authorize). Fills `*response` (cleared first; a caller that
  // reuses one keeps its buffers' pages) as CompleteInferResponse leaves it, or returns:
  // UNAVAILABLE while draining ("server is draining; ...") or when the budget or the batcher's
  // queue has no room; DEADLINE_EXCEEDED when `deadline` passes in the queue; and the codec's
  // and plan's errors.
  absl::Status InferBlocking(const inference::ModelInferRequest& request, int64_t message_bytes,
                             absl::Time deadline, inference::ModelInferResponse* response);

 private:
  template <typename Request, typename Response>
  friend class GatherCall;  // the per-RPC reactor (compute_service.cc)
  friend class PutCall;     // resident_rpcs.cc

  // InferBlocking's work, uncounted.
  absl::Status RunInfer(const inference::ModelInferRequest& request, int64_t message_bytes,
                        absl::Time deadline, inference::ModelInferResponse* response);

  batching::Batcher* const batcher_;
  const core::PlanOptions plan_options_;
  Metrics* const metrics_;
  ErrorLog* const errors_;
  ByteBudget* const budget_;
  const TokenAuth* const auth_;
  core::TensorRegistry* registry_ = nullptr;
  Placer place_;
  const TokenAuth* admin_ = nullptr;
  std::atomic<bool> draining_{false};
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_COMPUTE_SERVICE_H_
