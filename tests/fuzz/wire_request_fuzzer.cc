// wire_request_fuzzer: bytes -> a GatherRequest, GatherNdRequest, EmbeddingBagRequest or KServe
// v2 ModelInferRequest -> the server's request path without gRPC.
//
// The first byte picks the message (bit 7 set: a ModelInferRequest; else bit 6 set: an
// EmbeddingBagRequest; else even: GatherRequest, odd: GatherNdRequest); the rest is
// parsed with ParseFromArray, so garbage simply fails to parse. A parsed request then goes the
// way server/compute/compute_entry.cc's Submit and the CPU executor send it: proto::ViewTensor for
// params and indices, core::PlanGather/PlanGatherNd with the server's default limits (max_rank
// 32; max_output_bytes 4 MiB here, for speed), proto::PrepareOutput into a response message,
// core::ExecuteGather. Besides tests/fuzz/fuzz_check.h's checks, an OK response must be
// self-consistent: its dtype and shape are the plan's, and its data holds exactly
// elements x element size bytes (or one string per element). An EmbeddingBag goes through
// proto::ViewTensor and core::PlanEmbeddingBag as server/native/compute_rpcs.cc sends it, and is
// executed on the calling thread and again split across a pool into every bag: both runs must
// give the same status and the same bytes.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>

#include "absl/status/statusor.h"
#include "inference/grpc_predict_v2.pb.h"
#include "tensorcompute/v1/tensorcompute.pb.h"

#include "core/dtype.h"
#include "core/embedding_bag.h"
#include "core/gather.h"
#include "core/gather_plan.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "proto/tensor_codec.h"
#include "server/kserve/codec.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/infer_check.h"

namespace tensorcompute::fuzz {
namespace {

constexpr int64_t kMaxOutputBytes = int64_t{4} << 20;

core::PlanOptions ServerPlanOptions() {
  core::PlanOptions options;  // max_rank: the server's default, 32
  options.max_output_bytes = kMaxOutputBytes;
  return options;
}

// The response's output must describe what the plan promised.
void CheckOutputProto(const core::GatherPlan& plan, const v1::Tensor& out) {
  Check(out.dtype() == proto::ToProtoDataType(plan.dtype), "response: dtype differs from plan");
  Check(out.shape_size() == static_cast<int>(plan.output_shape.size()),
        "response: rank differs from plan");
  for (int i = 0; i < out.shape_size(); ++i) {
    Check(out.shape(i) == plan.output_shape[i], "response: shape differs from plan");
  }
  if (plan.dtype == core::DataType::kString) {
    Check(out.data().empty(), "response: a string output has data bytes");
    Check(out.strings_size() == plan.output_elements, "response: string count != elements");
  } else {
    Check(out.strings_size() == 0, "response: a numeric output has strings");
    Check(static_cast<int64_t>(out.data().size()) ==
              plan.output_elements * static_cast<int64_t>(core::ElementSize(plan.dtype)),
          "response: data size != elements x element size");
  }
  // And it decodes back to a well-formed tensor, as the client decodes it (client/client.cc:
  // any rank, since an output may have up to 2 x max_rank - 1 dimensions).
  const absl::StatusOr<core::Tensor> decoded =
      proto::FromProto(out, "output", std::numeric_limits<int64_t>::max());
  Check(decoded.ok(), "response does not decode: " + decoded.status().ToString());
}

// Submit() plus the executor, for either RPC.
void Serve(const v1::Tensor& params_pb, const v1::Tensor& indices_pb, bool nd,
           std::optional<int64_t> axis, int64_t batch_dims, v1::Tensor* output_pb) {
  const absl::StatusOr<core::TensorView> params = proto::ViewTensor(params_pb, "params");
  if (!params.ok()) return CheckRefusal(params.status(), "ViewTensor(params)");
  const absl::StatusOr<core::TensorView> indices = proto::ViewTensor(indices_pb, "indices");
  if (!indices.ok()) return CheckRefusal(indices.status(), "ViewTensor(indices)");
  const absl::StatusOr<core::GatherPlan> plan =
      nd ? core::PlanGatherNd(*params, *indices, batch_dims, ServerPlanOptions())
         : core::PlanGather(*params, *indices, axis, batch_dims, ServerPlanOptions());
  if (!plan.ok()) return CheckRefusal(plan.status(), "plan");
  CheckPlan(*plan, *params, batch_dims);

  const int64_t data_bytes = plan->dtype == core::DataType::kString ? 0 : plan->output_bytes;
  const core::MutableTensorView output = proto::PrepareOutput(
      plan->dtype, plan->output_shape, plan->output_elements, data_bytes, output_pb);
  const absl::Status executed = core::ExecuteGather(*plan, *params, *indices, output);
  if (executed.ok()) CheckOutputProto(*plan, *output_pb);
  absl::StatusOr<core::TensorView> output_view = proto::ViewTensor(*output_pb, "output");
  Check(output_view.ok(), "response dtype unknown");
  CheckAgainstReference(*plan, *params, *indices, axis, batch_dims, executed, *output_view);
}

// EmbeddingBag as server/native/compute_rpcs.cc decodes it and the CPU executor runs it, then again
// split across a pool (every bag its own chunk): the same status and bytes both ways.
void ServeBag(const v1::EmbeddingBagRequest& request) {
  const absl::StatusOr<core::TensorView> params = proto::ViewTensor(request.params(), "params");
  if (!params.ok()) return CheckRefusal(params.status(), "ViewTensor(params)");
  const absl::StatusOr<core::TensorView> indices = proto::ViewTensor(request.indices(), "indices");
  if (!indices.ok()) return CheckRefusal(indices.status(), "ViewTensor(indices)");
  std::optional<core::TensorView> offsets, weights;
  if (request.has_offsets()) {
    absl::StatusOr<core::TensorView> o = proto::ViewTensor(request.offsets(), "offsets");
    if (!o.ok()) return CheckRefusal(o.status(), "ViewTensor(offsets)");
    offsets = *o;
  }
  if (request.has_per_sample_weights()) {
    absl::StatusOr<core::TensorView> w =
        proto::ViewTensor(request.per_sample_weights(), "per_sample_weights");
    if (!w.ok()) return CheckRefusal(w.status(), "ViewTensor(per_sample_weights)");
    weights = *w;
  }
  core::EmbeddingBagOptions options;
  options.mode = static_cast<core::EmbeddingBagMode>(request.mode());
  options.include_last_offset = request.include_last_offset();
  if (request.has_padding_idx()) options.padding_idx = request.padding_idx();
  options.max_output_bytes = kMaxOutputBytes;
  const core::TensorView* o = offsets ? &*offsets : nullptr;
  const core::TensorView* w = weights ? &*weights : nullptr;
  const absl::StatusOr<core::EmbeddingBagPlan> plan =
      core::PlanEmbeddingBag(*params, *indices, o, w, options);
  if (!plan.ok()) return CheckRefusal(plan.status(), "PlanEmbeddingBag");

  v1::EmbeddingBagResponse one, split;
  const int64_t elements = plan->bags * plan->dim;
  const core::MutableTensorView out_one = proto::PrepareOutput(
      plan->dtype, plan->output_shape, elements, plan->output_bytes, one.mutable_output());
  const core::MutableTensorView out_split = proto::PrepareOutput(
      plan->dtype, plan->output_shape, elements, plan->output_bytes, split.mutable_output());
  static core::ThreadPool* const pool = new core::ThreadPool(2);
  const absl::Status a = core::ExecuteEmbeddingBag(*plan, *params, *indices, o, w, out_one);
  const absl::Status b = core::ExecuteEmbeddingBag(*plan, *params, *indices, o, w, out_split, pool,
                                                   /*min_parallel_bytes=*/0);
  Check(a == b, "EmbeddingBag: one thread said " + a.ToString() + ", the pool " + b.ToString());
  if (!a.ok()) {
    Check(a.code() == absl::StatusCode::kInvalidArgument && !a.message().empty(),
          "EmbeddingBag: execution error " + a.ToString());
    return;
  }
  Check(one.output().data() == split.output().data(),
        "EmbeddingBag: the pool's bytes differ from one thread's");
  const absl::StatusOr<core::Tensor> decoded =
      proto::FromProto(one.output(), "output", std::numeric_limits<int64_t>::max());
  Check(decoded.ok(), "EmbeddingBag response does not decode: " + decoded.status().ToString());
}

// KServe v2: ModelInfer's decode (server/kserve/codec.h; no resident tables), the executor,
// and the response's completion, as compute_entry.cc runs them.
void ServeInfer(const inference::ModelInferRequest& request) {
  server::kserve::InferJob job;
  const absl::Status prepared = server::kserve::PrepareInfer(
      request, nullptr, ServerPlanOptions(), BagOptionsOf(ServerPlanOptions()), &job);
  if (!prepared.ok()) {
    Check(!prepared.message().empty(), "PrepareInfer: empty error message");
    Check(prepared.code() == absl::StatusCode::kInvalidArgument ||
              prepared.code() == absl::StatusCode::kNotFound ||
              prepared.code() == absl::StatusCode::kResourceExhausted,
          "PrepareInfer: unexpected code " + prepared.ToString());
    return;
  }
  inference::ModelInferResponse response;
  const absl::Status executed = ExecuteAndCheckInfer(request, &job, &response);
  if (!executed.ok()) return;
  Check(response.outputs_size() == 1 && response.raw_output_contents_size() == 1,
        "response: one output with raw contents");
  if (batching::OutputDataType(job.plan) != core::DataType::kString) {
    Check(static_cast<int64_t>(response.raw_output_contents(0).size()) ==
              batching::OutputBytes(job.plan),
          "response: raw output size != plan's output bytes");
  }
}

}  // namespace
}  // namespace tensorcompute::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tensorcompute;  // NOLINT: a fuzz entry point
  if (size < 1) return 0;
  const bool nd = (data[0] & 1) != 0;
  const auto* body = data + 1;
  const int body_size = static_cast<int>(size - 1);
  if ((data[0] & 0x80) != 0) {
    inference::ModelInferRequest request;
    if (!request.ParseFromArray(body, body_size)) return 0;
    fuzz::ServeInfer(request);
    return 0;
  }
  if ((data[0] & 0x40) != 0) {
    v1::EmbeddingBagRequest request;
    if (!request.ParseFromArray(body, body_size)) return 0;
    fuzz::ServeBag(request);
    return 0;
  }
  if (!nd) {
    v1::GatherRequest request;
    if (!request.ParseFromArray(body, body_size)) return 0;
    v1::GatherResponse response;
    const std::optional<int64_t> axis =
        request.has_axis() ? std::optional<int64_t>(request.axis()) : std::nullopt;
    fuzz::Serve(request.params(), request.indices(), false, axis, request.batch_dims(),
                response.mutable_output());
  } else {
    v1::GatherNdRequest request;
    if (!request.ParseFromArray(body, body_size)) return 0;
    v1::GatherNdResponse response;
    fuzz::Serve(request.params(), request.indices(), true, std::nullopt, request.batch_dims(),
                response.mutable_output());
  }
  return 0;
}
