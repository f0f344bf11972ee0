#include "server/kserve/http_infer_call.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

#include "core/status_macros.h"
#include "server/kserve/json.h"

namespace tensorcompute::server::kserve {

void HttpInferCall::Begin(absl::Time start, ByteBudget::Reservation reservation,
                          absl::string_view traceparent, absl::string_view request_id) {
  record_ = CallRecord(start);
  SetRequestId(traceparent, request_id, &record_);
  reservation_ = std::move(reservation);
  cancel_ = std::make_shared<batching::CancelFlag>();
  body_.clear();
  call_bytes_ = 0;
}

void HttpInferCall::Start(absl::string_view model, absl::string_view version,
                          std::optional<absl::string_view> header_length, Done done) {
  call_bytes_ = body_.size();
  record_.request_bytes = static_cast<int64_t>(body_.size());
  // Submit calls `done` once it has taken the request; before that a failure is answered here.
  if (absl::Status submitted = Submit(model, version, header_length, &done); !submitted.ok()) {
    std::move(done)(std::move(submitted));
  }
}

absl::Status HttpInferCall::Submit(absl::string_view model, absl::string_view version,
                                   std::optional<absl::string_view> header_length, Done* done) {
  std::optional<int64_t> json_length;
  if (header_length.has_value()) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(*header_length, &n)) {
      return absl::InvalidArgumentError(
          absl::StrCat(kHeaderLengthField, " is not a number of bytes"));
    }
    json_length = n;
  }
  request_.Clear();  // keeps its raw_input_contents' buffers for reuse
  options_ = HttpInferOptions();
  int64_t decoded_bytes = 0;
  TC_RETURN_IF_ERROR(
      ParseHttpInferRequest(body_, json_length, &request_, &options_, &decoded_bytes));
  // What the decode built beside the body (json_request.h's bound) and what the codec will build of
  // BYTES inputs, charged by the rule gRPC's messages follow (ByteBudget::CheckDecoded).
  decoded_bytes += BytesInputsConversion(request_);
  ByteBudget& budget = compute_.budget();
  const int64_t total = reservation_.bytes() + decoded_bytes;
  TC_RETURN_IF_ERROR(budget.CheckDecoded(
      total, absl::StrCat(body_.size(), " bytes of HTTP body and the inputs decoded from it")));
  TC_RETURN_IF_ERROR(reservation_.Grow(decoded_bytes));
  // A lookup by keys' slots and found mask, by the same rule, before PrepareInfer makes them.
  if (const KeyedLookupCost keyed = KeyedLookupBytes(request_); keyed.bytes > 0) {
    TC_RETURN_IF_ERROR(budget.CheckDecoded(reservation_.bytes() + keyed.bytes,
                                           absl::StrCat("the slots of ", keyed.keys, " keys")));
    TC_RETURN_IF_ERROR(reservation_.Grow(keyed.bytes));
  }
  request_.set_model_name(std::string(model));
  request_.set_model_version(std::string(version));
  response_.Clear();  // keeps its buffers' pages
  job_ = InferJob();
  TC_RETURN_IF_ERROR(PrepareInfer(request_, compute_.registry(), compute_.plan_options(),
                                  compute_.embedding_bag_options(), &job_, compute_.key_pool()));
  ComputeRequest compute_request;
  FillComputeRequest(&job_, &compute_request);
  compute_request.deadline = options_.timeout_us.has_value()
                                 ? absl::Now() + absl::Microseconds(*options_.timeout_us)
                                 : absl::InfiniteFuture();
  compute_request.cancel = cancel_;
  compute_request.make_output = [this] { return PrepareInferOutput(&job_, &response_); };
  compute_request.record = &record_;
  compute_.Submit(std::move(compute_request), &reservation_, std::move(*done));
  return absl::OkStatus();
}

void HttpInferCall::Cancel() {
  if (cancel_ == nullptr) return;
  cancel_->Cancel();        // only marks; Submit's done still answers
  compute_.NoticeCancel();  // if it is queued, the batcher answers it now
}

HttpReply HttpInferCall::Answer(const absl::Status& status) {
  HttpReply reply;
  if (!status.ok()) {
    gate_.Answer(Rpc::kModelInfer, record_, status);
    reply = StatusReply(status);
    if (!record_.request_id.empty()) reply.headers.push_back(record_.request_id_header);
  } else {
    CompleteInferResponse(request_, &job_, &response_);
    size_t output_bytes = 0;
    for (const std::string& raw : response_.raw_output_contents()) output_bytes += raw.size();
    call_bytes_ = std::max(call_bytes_, output_bytes);
    HttpBody body = WriteHttpInferResponse(response_, options_.binary_output,
                                           /*append_binary=*/false);
    reply.body = std::move(body.body);
    if (options_.binary_output) {
      reply.content_type = "application/octet-stream";
      reply.header_length = body.header_length;
      reply.binary = std::move(body.binary);
    }
    size_t reply_bytes = reply.body.size();
    for (absl::string_view part : reply.binary) reply_bytes += part.size();
    record_.response_bytes = static_cast<int64_t>(reply_bytes);
    gate_.Answer(Rpc::kModelInfer, record_, absl::OkStatus());
  }
  reply.headers.emplace_back("Server-Timing", record_.ServerTiming(absl::Now()));
  return reply;
}

void HttpInferCall::Finish() {
  reservation_.Reset();
  job_ = InferJob();  // lets go of a resident table
  cancel_.reset();
  if (std::max(call_bytes_, body_.capacity()) <= kKeepBytes) return;
  std::string().swap(body_);
  request_ = inference::ModelInferRequest();
  response_ = inference::ModelInferResponse();
}

std::unique_ptr<HttpInferCall> HttpInferCallPool::Take() {
  {
    absl::MutexLock lock(&mu_);
    if (!idle_.empty()) {
      std::unique_ptr<HttpInferCall> call = std::move(idle_.back());
      idle_.pop_back();
      return call;
    }
  }
  return std::make_unique<HttpInferCall>(gate_, compute_);
}

void HttpInferCallPool::Give(std::unique_ptr<HttpInferCall> call) {
  {
    absl::MutexLock lock(&mu_);
    if (idle_.size() < max_idle_) {
      idle_.push_back(std::move(call));
      return;
    }
  }
  call.reset();  // freed outside the lock
}

}  // namespace tensorcompute::server::kserve
