#include "tests/server/test_server.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "gtest/gtest.h"

#include "core/batching/batcher.h"
#include "proto/tensor_codec.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::server::test_support {
namespace {

std::chrono::system_clock::time_point DeadlineIn(absl::Duration timeout) {
  return absl::ToChronoTime(absl::Now() + timeout);
}

absl::StatusOr<core::Tensor> DecodeOutput(const grpc::Status& status, const v1::Tensor& output) {
  if (!status.ok()) return ToAbsl(status);
  return proto::FromProto(output, "output");
}

}  // namespace

std::string PathFromEnvOr(const char* env_name, const char* built) {
  const char* value = std::getenv(env_name);
  return value != nullptr && *value != '\0' ? value : built;
}

ServerOptions TestOptions() {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  // The CPU unless TC_TEST_DEVICE says otherwise (TC_TEST_DEVICE=gpu runs the whole server
  // suite on a GPU: docs/gpu-results.md).
  const char* device = std::getenv("TC_TEST_DEVICE");
  options.device = device != nullptr && *device != '\0' ? device : "cpu";
  options.cpu_threads = 2;
  options.drain_timeout = absl::Seconds(30);
  options.drain_notice = absl::ZeroDuration();  // tests of the notice set it
  return options;
}

std::unique_ptr<Server> StartServer(const ServerOptions& options) {
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
  EXPECT_THAT(server.status(), testing::IsOk());
  return server.ok() ? *std::move(server) : nullptr;
}

std::shared_ptr<grpc::Channel> MakeChannel(int port) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // A distinct argument per channel keeps gRPC from sharing one connection between channels.
  static std::atomic<int> next_id{0};
  args.SetInt("tensorcompute.test_channel_id", next_id.fetch_add(1));
  return grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                   grpc::InsecureChannelCredentials(), args);
}

std::unique_ptr<Stub> MakeStub(int port) { return v1::TensorCompute::NewStub(MakeChannel(port)); }

absl::Status ToAbsl(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

v1::GatherRequest ToGatherProto(const testing::GatherRequest& request) {
  v1::GatherRequest out;
  proto::ToProto(request.params.view(), out.mutable_params());
  proto::ToProto(request.indices.view(), out.mutable_indices());
  if (request.axis.has_value()) out.set_axis(*request.axis);
  out.set_batch_dims(request.batch_dims);
  return out;
}

v1::GatherNdRequest ToGatherNdProto(const testing::GatherRequest& request) {
  v1::GatherNdRequest out;
  proto::ToProto(request.params.view(), out.mutable_params());
  proto::ToProto(request.indices.view(), out.mutable_indices());
  out.set_batch_dims(request.batch_dims);
  return out;
}

v1::EmbeddingBagRequest ToEmbeddingBagProto(const testing::EmbeddingBagCase& c,
                                            const std::string& params_name) {
  v1::EmbeddingBagRequest request;
  if (params_name.empty()) {
    proto::ToProto(c.params.view(), request.mutable_params());
  } else {
    request.set_params_name(params_name);
  }
  proto::ToProto(c.indices.view(), request.mutable_indices());
  if (c.offsets) proto::ToProto(c.offsets->view(), request.mutable_offsets());
  if (c.weights) proto::ToProto(c.weights->view(), request.mutable_per_sample_weights());
  request.set_mode(static_cast<v1::EmbeddingBagRequest::Mode>(c.options.mode));
  request.set_include_last_offset(c.options.include_last_offset);
  if (c.options.padding_idx) request.set_padding_idx(*c.options.padding_idx);
  return request;
}

absl::StatusOr<core::Tensor> Call(Stub& stub, const testing::GatherRequest& request,
                                  absl::Duration timeout) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(timeout));
  if (request.nd) {
    v1::GatherNdResponse response;
    const grpc::Status status = stub.GatherNd(&context, ToGatherNdProto(request), &response);
    return DecodeOutput(status, response.output());
  }
  v1::GatherResponse response;
  const grpc::Status status = stub.Gather(&context, ToGatherProto(request), &response);
  return DecodeOutput(status, response.output());
}

absl::Status PutTensor(Stub& stub, const std::string& name, const core::Tensor& tensor,
                       v1::TableStorage storage, int64_t chunk_bytes) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(absl::Seconds(60)));
  v1::PutTensorResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::PutTensorRequest>> writer =
      stub.PutTensor(&context, &response);
  const absl::Span<const uint8_t> bytes = tensor.bytes();
  const size_t chunk = chunk_bytes > 0 ? static_cast<size_t>(chunk_bytes) : bytes.size();
  size_t offset = 0;
  do {
    v1::PutTensorRequest message;
    if (offset == 0) {
      message.set_name(name);
      message.set_dtype(proto::ToProtoDataType(tensor.dtype()));
      for (int64_t d : tensor.shape()) message.add_shape(d);
      message.set_replace(true);
      message.set_storage(storage);
    }
    const size_t n = std::min(chunk, bytes.size() - offset);
    message.set_offset(static_cast<int64_t>(offset));
    message.set_data(reinterpret_cast<const char*>(bytes.data() + offset), n);
    if (!writer->Write(message)) break;
    offset += n;
  } while (offset < bytes.size());
  writer->WritesDone();
  return ToAbsl(writer->Finish());
}

v1::GatherRequest SmallGather() {
  testing::GatherRequest request;
  request.params = testing::MakeTensor<int32_t>({3}, {10, 20, 30});
  request.indices = testing::MakeIndices(core::DataType::kInt32, {2}, {2, 0});
  return ToGatherProto(request);
}

absl::Status SendGather(Stub& stub, const v1::GatherRequest& request, absl::Duration timeout) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(timeout));
  v1::GatherResponse response;
  return ToAbsl(stub.Gather(&context, request, &response));
}

v1::GatherRequest LargeGatherRequest(int64_t row_bytes, int64_t rows) {
  v1::GatherRequest request;
  v1::Tensor* params = request.mutable_params();
  params->set_dtype(v1::DT_UINT8);
  params->add_shape(1);
  params->add_shape(row_bytes);
  std::string* data = params->mutable_data();
  data->resize(row_bytes);
  for (int64_t i = 0; i < row_bytes; ++i) (*data)[i] = static_cast<char>(RowByte(i));
  v1::Tensor* indices = request.mutable_indices();
  indices->set_dtype(v1::DT_INT32);
  indices->add_shape(rows);
  std::string* index_data = indices->mutable_data();
  index_data->resize(rows * sizeof(int32_t));
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t value = r % 2 == 0 ? 0 : -1;  // -1 counts from the end: row 0 again
    std::memcpy(index_data->data() + r * sizeof(int32_t), &value, sizeof(value));
  }
  request.set_axis(0);
  return request;
}

bool IsLargeGatherAnswer(const v1::GatherResponse& response, int64_t row_bytes, int64_t rows) {
  const v1::Tensor& out = response.output();
  if (out.dtype() != v1::DT_UINT8 || out.shape_size() != 2 || out.shape(0) != rows ||
      out.shape(1) != row_bytes || static_cast<int64_t>(out.data().size()) != rows * row_bytes) {
    return false;
  }
  std::string row(row_bytes, '\0');
  for (int64_t i = 0; i < row_bytes; ++i) row[i] = static_cast<char>(RowByte(i));
  for (int64_t r = 0; r < rows; ++r) {
    if (std::memcmp(out.data().data() + r * row_bytes, row.data(), row_bytes) != 0) return false;
  }
  return true;
}

AsyncGather::AsyncGather(Stub& stub, v1::GatherRequest request, absl::Duration timeout)
    : request_(std::move(request)) {
  context_.set_deadline(DeadlineIn(timeout));
  stub.async()->Gather(&context_, &request_, &response_, [this](grpc::Status status) {
    status_ = std::move(status);
    done_.Notify();
  });
}

AsyncGather::~AsyncGather() {
  if (!done_.HasBeenNotified()) context_.TryCancel();
  done_.WaitForNotification();
}

bool AsyncGather::Wait(absl::Duration timeout) {
  return done_.WaitForNotificationWithTimeout(timeout);
}

Backlog::Backlog(Stub& stub, const Server& server, int count) {
  const int64_t batched_before = server.metrics().batched_requests();
  for (int i = 0; i < count; ++i) {
    calls_.push_back(std::make_unique<AsyncGather>(stub, LargeGatherRequest(kRowBytes, kRows)));
  }
  // Every request accepted: handed to the executor or queued. (Read in this order, a task
  // moving from the queue to the executor meanwhile is missed, never counted twice.)
  WaitFor([&] {
    const int64_t batched = server.metrics().batched_requests() - batched_before;
    return batched + server.batcher().queue_depth() >= count;
  });
}

int Backlog::WaitAllCorrect() {
  int correct = 0;
  for (auto& call : calls_) {
    std::string failure;
    if (!call->Wait()) {
      failure = "no answer";
    } else if (!call->status().ok()) {
      failure = ToAbsl(call->status()).ToString();
    } else if (!IsLargeGatherAnswer(call->response(), kRowBytes, kRows)) {
      failure = "wrong output";
    } else {
      ++correct;
    }
    if (first_failure_.empty()) first_failure_ = failure;
  }
  return correct;
}

bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() >= deadline) return condition();
    absl::SleepFor(absl::Milliseconds(2));
  }
  return true;
}

}  // namespace tensorcompute::server::test_support
