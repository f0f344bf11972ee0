#include "server/compute_service.h"

#include <chrono>
#include <memory>
#include <optional>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"

#include "core/batching/task.h"
#include "proto/tensor_codec.h"
#include "server/grpc_status.h"

namespace tensorcompute::server {
namespace {

// One per RPC; deletes itself in OnDone. Answer() is the only caller of Finish, and every path
// calls it exactly once (see compute_service.h).
class RpcReactor final : public grpc::ServerUnaryReactor {
 public:
  RpcReactor(Rpc rpc, Metrics* metrics, ErrorLog* errors, ByteBudget* budget)
      : rpc_(rpc), metrics_(metrics), errors_(errors), budget_(budget), start_(absl::Now()) {
    metrics_->RequestStarted();
  }

  // Reserves `bytes` of the in-flight budget until this RPC is done (its response sent).
  int64_t budget_used() const { return budget_->used(); }
  int64_t budget_limit() const { return budget_->limit(); }

  bool Reserve(int64_t bytes) {
    if (!budget_->TryReserve(bytes)) return false;
    reserved_ = bytes;
    return true;
  }

  void Answer(const absl::Status& status) {
    metrics_->CountRequest(rpc_, status.code(), absl::Now() - start_);
    if (!status.ok()) errors_->Log(RpcName(rpc_), status);
    Finish(ToGrpcStatus(status));
  }

  const std::shared_ptr<batching::CancelFlag>& cancel() const { return cancel_; }

  void OnCancel() override { cancel_->Cancel(); }  // only marks; done still answers
  void OnDone() override {
    if (reserved_ > 0) budget_->Release(reserved_);
    delete this;
  }

 private:
  const Rpc rpc_;
  Metrics* const metrics_;
  ErrorLog* const errors_;
  ByteBudget* const budget_;
  int64_t reserved_ = 0;
  const absl::Time start_;
  const std::shared_ptr<batching::CancelFlag> cancel_ = std::make_shared<batching::CancelFlag>();
};

absl::Time DeadlineOf(const grpc::CallbackServerContext& context) {
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(deadline);
}

using PlanFn = absl::FunctionRef<absl::StatusOr<core::GatherPlan>(const core::TensorView&,
                                                                  const core::TensorView&)>;

// The request path shared by both RPCs: view, plan, prepare the output in the response,
// schedule. Answers the reactor itself on any failure before the batcher owns the task.
void Submit(batching::Batcher* batcher, RpcReactor* reactor,
            const grpc::CallbackServerContext& context, int64_t request_bytes,
            const v1::Tensor& params_pb, const v1::Tensor& indices_pb, PlanFn plan_fn,
            v1::Tensor* output_pb) {
  absl::StatusOr<core::TensorView> params = proto::ViewTensor(params_pb, "params");
  if (!params.ok()) return reactor->Answer(params.status());
  absl::StatusOr<core::TensorView> indices = proto::ViewTensor(indices_pb, "indices");
  if (!indices.ok()) return reactor->Answer(indices.status());
  absl::StatusOr<core::GatherPlan> plan = plan_fn(*params, *indices);
  if (!plan.ok()) return reactor->Answer(plan.status());
  // The memory this request holds until its answer is sent: its message, and its output.
  const int64_t bytes = request_bytes + plan->output_bytes;
  if (!reactor->Reserve(bytes)) {
    return reactor->Answer(absl::UnavailableError(
        absl::StrCat("server overloaded: this request needs ", bytes, " bytes but ",
                     reactor->budget_used(), " of the max_inflight_bytes budget of ",
                     reactor->budget_limit(), " are in use; retry with backoff")));
  }

  auto task = std::make_unique<batching::Task>();
  // The output is sized inside the response by the executor, just before compute (see
  // Task::make_output): a refused or dropped request allocates nothing.
  task->make_output = [task = task.get(), output_pb] {
    const core::GatherPlan& p = task->plan;
    const int64_t data_bytes = p.dtype == core::DataType::kString ? 0 : p.output_bytes;
    return proto::PrepareOutput(p.dtype, p.output_shape, p.output_elements, data_bytes, output_pb);
  };
  task->plan = *std::move(plan);
  task->params = *std::move(params);
  task->indices = *std::move(indices);
  task->deadline = DeadlineOf(context);
  task->cancel = reactor->cancel();
  task->done = [reactor](absl::Status status) { reactor->Answer(status); };
  absl::Status scheduled = batcher->Schedule(task);
  if (!scheduled.ok()) reactor->Answer(scheduled);  // the task (and its done) stayed with us
}

// The caller's token, when the server requires one: OK or UNAUTHENTICATED.
absl::Status Authenticate(const TokenAuth* auth, const grpc::CallbackServerContext& context) {
  if (auth == nullptr) return absl::OkStatus();
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find("authorization");
  if (it == metadata.end()) return auth->Check(std::nullopt);
  return auth->Check(absl::string_view(it->second.data(), it->second.size()));
}

}  // namespace

ComputeService::ComputeService(batching::Batcher* batcher, const core::PlanOptions& plan_options,
                               Metrics* metrics, ErrorLog* errors, ByteBudget* budget,
                               const TokenAuth* auth)
    : batcher_(batcher),
      plan_options_(plan_options),
      metrics_(metrics),
      errors_(errors),
      budget_(budget),
      auth_(auth) {}

grpc::ServerUnaryReactor* ComputeService::Gather(grpc::CallbackServerContext* context,
                                                 const v1::GatherRequest* request,
                                                 v1::GatherResponse* response) {
  auto* reactor = new RpcReactor(Rpc::kGather, metrics_, errors_, budget_);
  if (absl::Status auth = Authenticate(auth_, *context); !auth.ok()) {
    reactor->Answer(auth);
    return reactor;
  }
  if (draining_.load()) {
    reactor->Answer(absl::UnavailableError("server is draining; retry on another replica"));
    return reactor;
  }
  const std::optional<int64_t> axis =
      request->has_axis() ? std::optional<int64_t>(request->axis()) : std::nullopt;
  Submit(
      batcher_, reactor, *context, static_cast<int64_t>(request->ByteSizeLong()), request->params(),
      request->indices(),
      [&](const core::TensorView& params, const core::TensorView& indices) {
        return core::PlanGather(params, indices, axis, request->batch_dims(), plan_options_);
      },
      response->mutable_output());
  return reactor;
}

grpc::ServerUnaryReactor* ComputeService::GatherNd(grpc::CallbackServerContext* context,
                                                   const v1::GatherNdRequest* request,
                                                   v1::GatherNdResponse* response) {
  auto* reactor = new RpcReactor(Rpc::kGatherNd, metrics_, errors_, budget_);
  if (absl::Status auth = Authenticate(auth_, *context); !auth.ok()) {
    reactor->Answer(auth);
    return reactor;
  }
  if (draining_.load()) {
    reactor->Answer(absl::UnavailableError("server is draining; retry on another replica"));
    return reactor;
  }
  Submit(
      batcher_, reactor, *context, static_cast<int64_t>(request->ByteSizeLong()), request->params(),
      request->indices(),
      [&](const core::TensorView& params, const core::TensorView& indices) {
        return core::PlanGatherNd(params, indices, request->batch_dims(), plan_options_);
      },
      response->mutable_output());
  return reactor;
}

}  // namespace tensorcompute::server
