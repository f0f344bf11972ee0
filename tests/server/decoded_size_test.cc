// What a request costs decoded, charged to max_inflight_bytes before it is parsed (issue 22): a
// message of many empty strings (2 wire bytes each, ~140 bytes each parsed and converted) is
// RESOURCE_EXHAUSTED unparsed when its decoded cost exceeds the whole budget, served when it
// fits, and UNAVAILABLE while other work leaves no room for it; native Gather and KServe's
// ModelInfer (bytes_contents, and BYTES in raw_input_contents) alike, and PutTensor's chunks.

#include <algorithm>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "inference/grpc_predict_v2.grpc.pb.h"

#include "core/batching/batcher.h"
#include "server/admission/byte_budget.h"
#include "server/admission/upload_budget.h"
#include "server/kserve/kserve_front_end.h"
#include "server/server.h"
#include "tests/server/test_server.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::server {
namespace {

using ::tensorcompute::server::test_support::AsyncGather;
using ::tensorcompute::server::test_support::MakeChannel;
using ::tensorcompute::server::test_support::MakeStub;
using ::tensorcompute::server::test_support::SendGather;
using ::tensorcompute::server::test_support::TestOptions;
using ::tensorcompute::server::test_support::ToAbsl;
using ::tensorcompute::server::test_support::WaitFor;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

// A million empty strings: 2 MB on the wire, ~140 MB decoded.
constexpr int kStrings = 1'000'000;

// Gather(params = kStrings strings, the last one "last"; indices = {n - 1, 0}).
v1::GatherRequest StringBomb() {
  v1::GatherRequest request;
  v1::Tensor& params = *request.mutable_params();
  params.set_dtype(v1::DT_STRING);
  params.add_shape(kStrings);
  params.mutable_strings()->Reserve(kStrings);
  for (int i = 0; i < kStrings - 1; ++i) params.add_strings();
  params.add_strings("last");
  v1::Tensor& indices = *request.mutable_indices();
  indices.set_dtype(v1::DT_INT32);
  indices.add_shape(2);
  const int32_t values[] = {kStrings - 1, 0};
  indices.set_data(reinterpret_cast<const char*>(values), sizeof(values));
  return request;
}

// The same request for KServe's `gather` model, the strings in bytes_contents or, `raw`, in
// raw_input_contents (a 4-byte length per element).
inference::ModelInferRequest KserveStringBomb(bool raw) {
  inference::ModelInferRequest request;
  request.set_model_name("gather");
  auto* params = request.add_inputs();
  params->set_name("params");
  params->set_datatype("BYTES");
  params->add_shape(kStrings);
  auto* indices = request.add_inputs();
  indices->set_name("indices");
  indices->set_datatype("INT32");
  indices->add_shape(2);
  if (raw) {
    std::string bytes(size_t{4} * kStrings, '\0');
    bytes.replace(bytes.size() - 4, 4, std::string("\x04\0\0\0last", 8));
    request.add_raw_input_contents(std::move(bytes));
    const int32_t values[] = {kStrings - 1, 0};
    request.add_raw_input_contents(reinterpret_cast<const char*>(values), sizeof(values));
  } else {
    auto* contents = params->mutable_contents();
    contents->mutable_bytes_contents()->Reserve(kStrings);
    for (int i = 0; i < kStrings - 1; ++i) contents->add_bytes_contents();
    contents->add_bytes_contents("last");
    indices->mutable_contents()->add_int_contents(kStrings - 1);
    indices->mutable_contents()->add_int_contents(0);
  }
  return request;
}

ServerOptions Budget(int64_t max_inflight_bytes) {
  ServerOptions options = TestOptions();
  options.max_inflight_bytes = max_inflight_bytes;
  options.max_message_bytes = int64_t{16} << 20;
  return options;
}

std::unique_ptr<Server> StartWithKserve(const ServerOptions& options) {
  absl::StatusOr<std::unique_ptr<Server>> server =
      Server::Start(options, {kserve::MakeFrontEnd(kserve::Options())});
  EXPECT_THAT(server.status(), IsOk());
  return server.ok() ? *std::move(server) : nullptr;
}

absl::Status Infer(const std::shared_ptr<grpc::Channel>& channel,
                   const inference::ModelInferRequest& request,
                   inference::ModelInferResponse* response) {
  auto stub = inference::GRPCInferenceService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  return ToAbsl(stub->ModelInfer(&context, request, response));
}

auto DecodedTooLarge(const std::string& what) {
  return StatusIs(absl::StatusCode::kResourceExhausted,
                  AllOf(HasSubstr("once decoded"), HasSubstr(what),
                        HasSubstr("more than the whole max_inflight_bytes budget of 67108864 "
                                  "bytes (--max_inflight_bytes)")));
}

TEST(DecodedSizeTest, StringsBeyondTheWholeBudgetAreRefusedUnparsed) {
  std::unique_ptr<Server> server = StartWithKserve(Budget(int64_t{64} << 20));
  ASSERT_NE(server, nullptr);
  auto channel = MakeChannel(server->port());
  auto stub = MakeStub(server->port());
  EXPECT_THAT(SendGather(*stub, StringBomb()), DecodedTooLarge("1000000 strings"));
  inference::ModelInferResponse response;
  EXPECT_THAT(Infer(channel, KserveStringBomb(/*raw=*/false), &response),
              DecodedTooLarge("1000000 strings"));
  // Raw BYTES are one protobuf string: refused once parsed, before they become core strings.
  EXPECT_THAT(Infer(channel, KserveStringBomb(/*raw=*/true), &response),
              DecodedTooLarge("BYTES inputs in raw_input_contents"));
  EXPECT_TRUE(WaitFor([&] { return server->inflight_budget().used() == 0; }));
  EXPECT_EQ(server->metrics().requests(Rpc::kGather, absl::StatusCode::kResourceExhausted), 1);
  EXPECT_EQ(server->metrics().requests(Rpc::kModelInfer, absl::StatusCode::kResourceExhausted), 2);
}

TEST(DecodedSizeTest, StringsWithinTheBudgetAreServed) {
  std::unique_ptr<Server> server = StartWithKserve(Budget(int64_t{512} << 20));
  ASSERT_NE(server, nullptr);
  auto channel = MakeChannel(server->port());
  auto stub = MakeStub(server->port());
  v1::GatherResponse native;
  grpc::ClientContext context;
  ASSERT_THAT(ToAbsl(stub->Gather(&context, StringBomb(), &native)), IsOk());
  ASSERT_EQ(native.output().strings_size(), 2);
  EXPECT_EQ(native.output().strings(0), "last");
  EXPECT_EQ(native.output().strings(1), "");
  for (bool raw : {false, true}) {
    inference::ModelInferResponse response;
    ASSERT_THAT(Infer(channel, KserveStringBomb(raw), &response), IsOk()) << raw;
    ASSERT_EQ(response.raw_output_contents_size(), 1);
    EXPECT_EQ(response.raw_output_contents(0), std::string("\x04\0\0\0last\0\0\0\0", 12));
  }
  EXPECT_TRUE(WaitFor([&] { return server->inflight_budget().used() == 0; }));
}

TEST(DecodedSizeTest, StringsThatFitOnlyAnEmptyBudgetAreUnavailableBesideOtherWork) {
  // The first request waits for its batch (max_queue_delay 2 s) holding its ~140 MB of a
  // 200 MiB budget: the second fits the budget alone, not beside it, and is refused at once
  // (retryable), as a request whose output does not fit.
  ServerOptions options = Budget(int64_t{200} << 20);
  options.max_batch_size = 64;
  options.max_queue_delay_us = 2'000'000;
  std::unique_ptr<Server> server = StartWithKserve(options);
  ASSERT_NE(server, nullptr);
  auto stub = MakeStub(server->port());
  AsyncGather held(*stub, StringBomb());
  ASSERT_TRUE(WaitFor([&] { return server->batcher().queue_depth() == 1; }));
  EXPECT_THAT(SendGather(*stub, StringBomb()),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr("server overloaded: this request needs "),
                             HasSubstr("retry with backoff"))));
  ASSERT_TRUE(held.Wait());
  EXPECT_TRUE(held.status().ok()) << held.status().error_message();
  EXPECT_TRUE(WaitFor([&] { return server->inflight_budget().used() == 0; }));
  EXPECT_THAT(SendGather(*stub, StringBomb()), IsOk());
}

// Uploads a DT_STRING tensor of kStrings empty strings in chunks of `chunk` strings.
absl::Status PutStrings(test_support::Stub& stub, const std::string& name, int chunk) {
  grpc::ClientContext context;
  v1::PutTensorResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::PutTensorRequest>> writer =
      stub.PutTensor(&context, &response);
  for (int at = 0; at < kStrings; at += chunk) {
    v1::PutTensorRequest message;
    if (at == 0) {
      message.set_name(name);
      message.set_dtype(v1::DT_STRING);
      message.add_shape(kStrings);
    }
    message.set_offset(at);
    for (int i = at; i < std::min(kStrings, at + chunk); ++i) message.add_strings();
    if (!writer->Write(message)) break;
  }
  writer->WritesDone();
  return ToAbsl(writer->Finish());
}

TEST(DecodedSizeTest, PutTensorChunksBeyondTheWholeUploadShareAreRefusedUnparsed) {
  ServerOptions options = Budget(int64_t{64} << 20);
  options.max_upload_bytes = int64_t{64} << 20;
  std::unique_ptr<Server> server = StartWithKserve(options);
  ASSERT_NE(server, nullptr);
  auto stub = MakeStub(server->port());
  EXPECT_THAT(PutStrings(*stub, "one_chunk", kStrings),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("once decoded"), HasSubstr("1000000 strings"),
                             HasSubstr("more than the whole max_upload_bytes budget of 67108864 "
                                       "bytes (--max_upload_bytes)"))));
  // Ten chunks of ~14 MB decoded each: stored, each within the upload's slot (twice
  // max_message_bytes) of the uploads' share, none of it charged to the compute calls' budget.
  EXPECT_THAT(PutStrings(*stub, "ten_chunks", kStrings / 10), IsOk());
  EXPECT_TRUE(WaitFor([&] { return server->upload_budget().used() == 0; }));
  EXPECT_EQ(server->inflight_budget().used(), 0);
}

}  // namespace
}  // namespace tensorcompute::server
