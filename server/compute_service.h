// File: server/compute_service.h
//
// The tensorcompute.v1.TensorCompute service on gRPC's callback API. Each RPC method is glue:
// view the request's tensors in place (proto/tensor_codec.h), plan and validate
// (core/gather_plan.h), make the response's output tensor the task's output slot, and
// Schedule the task on the batcher. It never computes, never waits, and never takes a lock
// that compute holds. The task's done callback calls Finish; every path calls Finish exactly
// once, cancelled RPCs included (gRPC 1.51 callback API rules).
//
// Reactor lifetime: a GatherReactor is created per RPC and deletes itself in OnDone, which
// gRPC calls after Finish completed. Until then the request and response messages (owned by
// gRPC) stay valid, so the Task's views into them do. OnCancel only sets the task's cancel
// flag; the batcher or executor then answers CANCELLED, through done, exactly once.
//
// Thread-safety: gRPC calls the methods from its threads concurrently; the service's state is
// the batcher (thread-safe), metrics (atomics) and the draining flag (atomic).

#ifndef TENSORCOMPUTE_SERVER_COMPUTE_SERVICE_H_
#define TENSORCOMPUTE_SERVER_COMPUTE_SERVICE_H_

#include <atomic>
#include <cstdint>

#include "tensorcompute/v1/tensorcompute.grpc.pb.h"

#include "core/batching/batcher.h"
#include "core/gather_plan.h"
#include "server/byte_budget.h"
#include "server/error_log.h"
#include "server/metrics.h"
#include "server/security.h"

namespace tensorcompute::server {

class ComputeService final : public v1::TensorCompute::CallbackService {
 public:
  // `batcher`, `metrics`, `errors`, `budget` and `auth` are not owned and must outlive the
  // service. Each accepted request holds its message's and its output's bytes of `budget`
  // until its answer is sent; one that does not fit is answered UNAVAILABLE at once
  // (byte_budget.h). With `auth`, every RPC first checks the caller's bearer token
  // (TokenAuth::Check) and is answered UNAUTHENTICATED, counted like any other answer, before
  // any other work.
  ComputeService(batching::Batcher* batcher, const core::PlanOptions& plan_options,
                 Metrics* metrics, ErrorLog* errors, ByteBudget* budget,
                 const TokenAuth* auth = nullptr);

  // From now on every new RPC is answered UNAVAILABLE ("server is draining; retry on another
  // replica"); RPCs already accepted are not affected.
  void StartDraining() { draining_.store(true); }

  grpc::ServerUnaryReactor* Gather(grpc::CallbackServerContext* context,
                                   const v1::GatherRequest* request,
                                   v1::GatherResponse* response) override;
  grpc::ServerUnaryReactor* GatherNd(grpc::CallbackServerContext* context,
                                     const v1::GatherNdRequest* request,
                                     v1::GatherNdResponse* response) override;

 private:
  batching::Batcher* const batcher_;
  const core::PlanOptions plan_options_;
  Metrics* const metrics_;
  ErrorLog* const errors_;
  ByteBudget* const budget_;
  const TokenAuth* const auth_;
  std::atomic<bool> draining_{false};
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_COMPUTE_SERVICE_H_
