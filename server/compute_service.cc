#include "server/compute_service.h"

#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "grpc/slice.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/slice.h"

#include "core/batching/task.h"
#include "proto/tensor_codec.h"
#include "server/grpc_status.h"
#include "server/kserve_codec.h"

namespace tensorcompute::server {
namespace {

absl::Time DeadlineOf(const grpc::CallbackServerContext& context) {
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(deadline);
}

// The call's "authorization" metadata, if any.
std::optional<absl::string_view> AuthorizationOf(const grpc::CallbackServerContext& context) {
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find("authorization");
  if (it == metadata.end()) return std::nullopt;
  return absl::string_view(it->second.data(), it->second.size());
}

// What differs between the two RPCs.
template <typename Request>
struct RpcTraits;

template <>
struct RpcTraits<v1::GatherRequest> {
  static constexpr Rpc kRpc = Rpc::kGather;
  static absl::StatusOr<core::GatherPlan> Plan(const v1::GatherRequest& request,
                                               const core::TensorView& params,
                                               const core::TensorView& indices,
                                               const core::PlanOptions& options) {
    const std::optional<int64_t> axis =
        request.has_axis() ? std::optional<int64_t>(request.axis()) : std::nullopt;
    return core::PlanGather(params, indices, axis, request.batch_dims(), options);
  }
};

template <>
struct RpcTraits<v1::GatherNdRequest> {
  static constexpr Rpc kRpc = Rpc::kGatherNd;
  static absl::StatusOr<core::GatherPlan> Plan(const v1::GatherNdRequest& request,
                                               const core::TensorView& params,
                                               const core::TensorView& indices,
                                               const core::PlanOptions& options) {
    return core::PlanGatherNd(params, indices, request.batch_dims(), options);
  }
};

}  // namespace

namespace {

// KServe v2's ModelInfer: the model, inputs and parameters are decoded by kserve_codec, which
// also makes the plan; the job keeps what the task's views point into.
template <>
struct RpcTraits<inference::ModelInferRequest> {
  static constexpr Rpc kRpc = Rpc::kModelInfer;
};

template <typename Request>
inline constexpr bool kIsInfer = std::is_same_v<Request, inference::ModelInferRequest>;

struct NoState {};

}  // namespace

// One per RPC; deletes itself in OnDone. Answer() is the only caller of Finish, and every path
// calls it exactly once (see compute_service.h).
template <typename Request, typename Response>
class GatherCall final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                         public ByteBudget::Waiter {
 public:
  GatherCall(const ComputeService* service, grpc::CallbackServerContext* context)
      : service_(*service), context_(*context), start_(absl::Now()) {
    service_.metrics_->RequestStarted();
  }

  // Everything before the message is read: the token, draining, a receive credit.
  void Begin() {
    if (absl::Status auth = service_.Authorize(context_, /*admin=*/false); !auth.ok()) {
      return Answer(auth);
    }
    if (service_.draining_.load()) {
      return Answer(absl::UnavailableError("server is draining; retry on another replica"));
    }
    switch (service_.budget_->AcquireReceive(this)) {
      case ByteBudget::Admission::kGranted:
        return this->StartRead(&message_);
      case ByteBudget::Admission::kQueued:
        return;  // OnGranted reads, or OnCancel answers
      case ByteBudget::Admission::kRefused: {
        const ByteBudget& budget = *service_.budget_;
        return Answer(absl::UnavailableError(absl::StrCat(
            "server overloaded: ", budget.used(), " of the max_inflight_bytes budget of ",
            budget.limit(), " bytes are in use, and reading a request needs ",
            budget.receive_credit(), " bytes free (twice max_message_bytes); retry with backoff")));
      }
    }
  }

  void OnGranted() override { this->StartRead(&message_); }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // Cancelled (the client, the deadline), the message refused by gRPC (over
      // max_message_bytes: the client gets gRPC's RESOURCE_EXHAUSTED), or a half-close with no
      // message. Only the last one sees this status; OnDone tells them apart for the metrics.
      service_.budget_->ReceiveDone(0);
      read_failed_ = true;
      return this->Finish(ToGrpcStatus(NoMessageError()));
    }
    const int64_t message_bytes = static_cast<int64_t>(message_.Length());
    // The received bytes and, while it is parsed, their copy; Deserialize frees the former.
    service_.budget_->ReceiveDone(2 * message_bytes);
    reserved_ = 2 * message_bytes;
    grpc::Status parsed = grpc::SerializationTraits<Request>::Deserialize(&message_, &request_);
    service_.budget_->Release(message_bytes);
    reserved_ = message_bytes;
    if (!parsed.ok()) {
      return Answer(absl::InvalidArgumentError(absl::StrCat("the request message (", message_bytes,
                                                            " bytes) does not parse as ",
                                                            Request::descriptor()->full_name())));
    }
    Submit(message_bytes);
  }

  void OnCancel() override {
    cancel_->Cancel();                  // only marks; the task's done still answers
    service_.batcher_->NoticeCancel();  // if it is queued, the batcher answers it now
    if (service_.budget_->CancelWait(this)) {
      // gRPC's deadline timer may fire a hair before the deadline as the context reads it.
      const bool expired = absl::Now() + absl::Milliseconds(10) >= DeadlineOf(context_);
      Answer(absl::Status(
          expired ? absl::StatusCode::kDeadlineExceeded : absl::StatusCode::kCancelled,
          absl::StrCat(expired ? "deadline passed" : "call cancelled",
                       " while waiting for room in the max_inflight_bytes budget to read the "
                       "request message")));
    }
  }

  void OnDone() override {
    if (read_failed_) {
      if (context_.IsCancelled()) {
        service_.metrics_->RequestAbandoned();
      } else {
        Count(NoMessageError());
      }
    }
    if (reserved_ > 0) service_.budget_->Release(reserved_);
    delete this;
  }

 private:
  // The native request's params (inline, or a resident tensor's: the entry is held until the
  // task is destroyed, so a delete or replace meanwhile does not disturb this gather), indices
  // and plan.
  absl::Status PrepareNative(absl::StatusOr<core::GatherPlan>* plan, core::TensorView* params_out,
                             core::TensorView* indices_out,
                             std::shared_ptr<const core::ResidentTensor>* table) {
    // Inline params, or a resident tensor's: the entry is held until the task is destroyed,
    // so a delete or replace meanwhile does not disturb this gather.
    absl::StatusOr<core::TensorView> params;
    if (!request_.params_name().empty()) {
      if (request_.has_params()) {
        return (absl::InvalidArgumentError(
            "set either params (the tensor inline) or params_name (a resident tensor), not "
            "both"));
      }
      if (service_.registry_ != nullptr) *table = service_.registry_->Find(request_.params_name());
      if (*table == nullptr) {
        return (absl::NotFoundError(
            absl::StrCat("params_name: no resident tensor named '", request_.params_name(),
                         "' (ListTensors lists them; PutTensor stores one)")));
      }
      service_.metrics_->CountLookup((*table)->name);
      params = (*table)->tensor.view();
    } else {
      params = proto::ViewTensor(request_.params(), "params");
    }
    if (!params.ok()) return (params.status());
    absl::StatusOr<core::TensorView> indices = proto::ViewTensor(request_.indices(), "indices");
    if (!indices.ok()) return (indices.status());
    *plan = RpcTraits<Request>::Plan(request_, *params, *indices, service_.plan_options_);
    if (!plan->ok()) return plan->status();
    *params_out = *std::move(params);
    *indices_out = *std::move(indices);
    return absl::OkStatus();
  }

  // View, plan, reserve the output's bytes, prepare the output in the response, schedule.
  // Answers itself on any failure before the batcher owns the task.
  void Submit(int64_t message_bytes) {
    absl::StatusOr<core::GatherPlan> plan;
    core::TensorView params, indices;
    std::shared_ptr<const core::ResidentTensor> table;
    if constexpr (kIsInfer<Request>) {
      absl::Status prepared =
          kserve::PrepareInfer(request_, service_.registry_, service_.plan_options_, &job_);
      if (!prepared.ok()) return Answer(prepared);
      if (job_.table != nullptr) service_.metrics_->CountLookup(job_.table->name);
      plan = job_.plan;
      params = job_.params;
      indices = job_.indices;
      table = job_.table;
    } else {
      absl::Status prepared = PrepareNative(&plan, &params, &indices, &table);
      if (!prepared.ok()) return Answer(prepared);
    }
    // The memory this request holds until its answer is sent: its message, and its output.
    if (!service_.budget_->TryGrow(reserved_, plan->output_bytes)) {
      const ByteBudget& budget = *service_.budget_;
      return Answer(absl::UnavailableError(
          absl::StrCat("server overloaded: this request needs ", message_bytes + plan->output_bytes,
                       " bytes but ", budget.used(), " of the max_inflight_bytes budget of ",
                       budget.limit(), " are in use; retry with backoff")));
    }
    reserved_ += plan->output_bytes;

    auto task = std::make_unique<batching::Task>();
    // The output is sized inside the response by the executor, just before compute (see
    // Task::make_output): a refused or dropped request allocates nothing.
    if constexpr (kIsInfer<Request>) {
      task->make_output = [this] { return kserve::PrepareInferOutput(&job_, &response_); };
    } else if (plan->dtype != core::DataType::kString && plan->output_bytes > 0) {
      // Straight into the buffer that gRPC will send: the response's serialized head, then the
      // output's bytes as the executor writes them (no zero fill, no serialization copy; a
      // 1 MiB answer saves two passes over it). Every byte is written when the gather is OK.
      task->make_output = [this, task = task.get()] {
        const core::GatherPlan& p = task->plan;
        const std::string head = proto::ResponsePrefix(p.dtype, p.output_shape, p.output_bytes);
        // _large: never inlined into the grpc_slice struct, so the bytes stay where they are.
        grpc_slice slice =
            grpc_slice_malloc_large(head.size() + static_cast<size_t>(p.output_bytes));
        uint8_t* begin = GRPC_SLICE_START_PTR(slice);
        std::memcpy(begin, head.data(), head.size());
        direct_reply_ = grpc::Slice(slice, grpc::Slice::STEAL_REF);
        core::MutableTensorView view;
        view.dtype = p.dtype;
        view.shape = p.output_shape;
        view.data = absl::Span<uint8_t>(begin + head.size(), static_cast<size_t>(p.output_bytes));
        return view;
      };
    } else {
      v1::Tensor* output_pb = response_.mutable_output();
      task->make_output = [task = task.get(), output_pb] {
        const core::GatherPlan& p = task->plan;
        const int64_t data_bytes = p.dtype == core::DataType::kString ? 0 : p.output_bytes;
        return proto::PrepareOutput(p.dtype, p.output_shape, p.output_elements, data_bytes,
                                    output_pb);
      };
    }
    task->plan = *std::move(plan);
    task->params = std::move(params);
    task->indices = std::move(indices);
    task->table = std::move(table);
    task->deadline = DeadlineOf(context_);
    task->cancel = cancel_;
    task->done = [this](absl::Status status) { Answer(status); };
    absl::Status scheduled = service_.batcher_->Schedule(task);
    if (!scheduled.ok()) Answer(scheduled);  // the task (and its done) stayed with us
  }

  static absl::Status NoMessageError() {
    return absl::InvalidArgumentError(absl::StrCat("the call carried no ",
                                                   Request::descriptor()->full_name(),
                                                   " message (a unary RPC sends exactly one)"));
  }

  void Count(const absl::Status& status) {
    service_.metrics_->CountRequest(RpcTraits<Request>::kRpc, status.code(), absl::Now() - start_);
    if (!status.ok()) service_.errors_->Log(RpcName(RpcTraits<Request>::kRpc), status);
  }

  void Answer(const absl::Status& status) {
    Count(status);
    if (!status.ok()) return this->Finish(ToGrpcStatus(status));
    if (direct_reply_.size() > 0) {  // written in place (Submit)
      reply_ = grpc::ByteBuffer(&direct_reply_, 1);
      direct_reply_ = grpc::Slice();
      return this->StartWriteAndFinish(&reply_, grpc::WriteOptions(), grpc::Status::OK);
    }
    if constexpr (kIsInfer<Request>) kserve::CompleteInferResponse(request_, &job_, &response_);
    // Serialized here rather than by gRPC, so that the output is freed at once: until the
    // client has taken the answer, the server holds one copy of it (the one the budget
    // counts), not two.
    bool own_buffer = false;
    grpc::Status serialized =
        grpc::SerializationTraits<Response>::Serialize(response_, &reply_, &own_buffer);
    response_ = Response();
    if (!serialized.ok()) return this->Finish(serialized);
    this->StartWriteAndFinish(&reply_, grpc::WriteOptions(), grpc::Status::OK);
  }

  const ComputeService& service_;
  grpc::CallbackServerContext& context_;
  const absl::Time start_;
  const std::shared_ptr<batching::CancelFlag> cancel_ = std::make_shared<batching::CancelFlag>();
  grpc::ByteBuffer message_;
  Request request_;
  Response response_;
  grpc::ByteBuffer reply_;    // response_, serialized
  grpc::Slice direct_reply_;  // or the whole reply, the output written in place (Submit)
  // ModelInfer: the decoded request (what the task's views point into) and its output.
  std::conditional_t<kIsInfer<Request>, kserve::InferJob, NoState> job_;
  int64_t reserved_ = 0;  // of the budget's work bytes, given back in OnDone
  bool read_failed_ = false;
};

ComputeService::ComputeService(batching::Batcher* batcher, const core::PlanOptions& plan_options,
                               Metrics* metrics, ErrorLog* errors, ByteBudget* budget,
                               const TokenAuth* auth)
    : batcher_(batcher),
      plan_options_(plan_options),
      metrics_(metrics),
      errors_(errors),
      budget_(budget),
      auth_(auth) {
  // Methods 0 and 1 of the service, in the order of the .proto: read after admission.
  MarkMethodStreamed(0, new grpc::internal::CallbackBidiHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
                            [this](grpc::CallbackServerContext* context) {
                              auto* call = new GatherCall<v1::GatherRequest, v1::GatherResponse>(
                                  this, context);
                              call->Begin();
                              return call;
                            }));
  MarkMethodStreamed(1, new grpc::internal::CallbackBidiHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
                            [this](grpc::CallbackServerContext* context) {
                              auto* call =
                                  new GatherCall<v1::GatherNdRequest, v1::GatherNdResponse>(
                                      this, context);
                              call->Begin();
                              return call;
                            }));
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ComputeService::StartInfer(
    grpc::CallbackServerContext* context) {
  auto* call =
      new GatherCall<inference::ModelInferRequest, inference::ModelInferResponse>(this, context);
  call->Begin();
  return call;
}

void ComputeService::SetRegistry(core::TensorRegistry* registry, Placer place,
                                 const TokenAuth* admin) {
  registry_ = registry;
  place_ = std::move(place);
  admin_ = admin;
}

absl::Status ComputeService::InferBlocking(const inference::ModelInferRequest& request,
                                           int64_t message_bytes, absl::Time deadline,
                                           inference::ModelInferResponse* response) {
  const absl::Time start = absl::Now();
  metrics_->RequestStarted();
  response->Clear();
  const absl::Status status = RunInfer(request, message_bytes, deadline, response);
  metrics_->CountRequest(Rpc::kModelInfer, status.code(), absl::Now() - start);
  if (!status.ok()) errors_->Log(RpcName(Rpc::kModelInfer), status);
  return status;
}

absl::Status ComputeService::RunInfer(const inference::ModelInferRequest& request,
                                      int64_t message_bytes, absl::Time deadline,
                                      inference::ModelInferResponse* response) {
  if (draining_.load()) {
    return absl::UnavailableError("server is draining; retry on another replica");
  }
  kserve::InferJob job;
  if (absl::Status prepared = kserve::PrepareInfer(request, registry_, plan_options_, &job);
      !prepared.ok()) {
    return prepared;
  }
  if (job.table != nullptr) metrics_->CountLookup(job.table->name);
  const int64_t reserved = message_bytes + job.plan.output_bytes;
  if (!budget_->TryReserve(reserved)) {
    return absl::UnavailableError(
        absl::StrCat("server overloaded: this request needs ", reserved, " bytes but ",
                     budget_->used(), " of the max_inflight_bytes budget of ", budget_->limit(),
                     " are in use; retry with backoff"));
  }
  auto task = std::make_unique<batching::Task>();
  task->make_output = [&job, response] { return kserve::PrepareInferOutput(&job, response); };
  task->plan = job.plan;
  task->params = job.params;
  task->indices = job.indices;
  task->table = job.table;
  task->deadline = deadline;
  // Nothing sets its cancel flag: a client that disconnects (httplib gives no notice while the
  // handler waits) still has its request computed, and the answer dropped.
  absl::Notification done;
  absl::Status result;
  task->done = [&done, &result](absl::Status status) {
    result = std::move(status);
    done.Notify();
  };
  if (absl::Status scheduled = batcher_->Schedule(task); !scheduled.ok()) {
    budget_->Release(reserved);  // the task (and its done) stayed with us
    return scheduled;
  }
  done.WaitForNotification();
  if (result.ok()) kserve::CompleteInferResponse(request, &job, response);
  budget_->Release(reserved);
  return result;
}

absl::Status ComputeService::Authorize(const grpc::CallbackServerContext& context,
                                       bool admin) const {
  return Authorize(AuthorizationOf(context), admin);
}

absl::Status ComputeService::Authorize(std::optional<absl::string_view> authorization,
                                       bool admin) const {
  if (admin && admin_ != nullptr) {
    absl::Status as_admin = admin_->Check(authorization);
    if (as_admin.ok()) return as_admin;
    if (auth_ != nullptr && auth_->Check(authorization).ok()) {
      return absl::PermissionDeniedError(
          "PutTensor and DeleteTensor need an admin token (the server's --admin_token_file); "
          "the token sent is an ordinary one");
    }
    return as_admin;
  }
  if (auth_ == nullptr) return absl::OkStatus();
  absl::Status status = auth_->Check(authorization);
  if (!status.ok() && admin_ != nullptr && admin_->Check(authorization).ok()) {
    return absl::OkStatus();
  }
  return status;
}

}  // namespace tensorcompute::server
