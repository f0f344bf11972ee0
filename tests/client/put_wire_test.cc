// Client::PutTensor / DeleteTensor / ListTensors as a server sees them, against a recording
// fake TensorCompute service: the stream's messages (description first, chunk offsets, sizes),
// the authorization each call carries (admin_token for put and delete only), how a failure on
// one of several targets is reported, and that UNAVAILABLE uploads are retried from the start.
// The real server's behaviour (storage, gathers by name) is resident_tensors_test.cc's.

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "tensorcompute/v1/tensorcompute.grpc.pb.h"

#include "client/client.h"
#include "tests/client/test_client.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::client {
namespace {

using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Records every PutTensor stream and the authorization of every call. Answers PutTensor with
// `put_code` (OK: a TensorInfo echoing the description), after `unavailable_puts` UNAVAILABLE
// answers.
class RecordingService final : public v1::TensorCompute::Service {
 public:
  grpc::Status PutTensor(grpc::ServerContext* context,
                         grpc::ServerReader<v1::PutTensorRequest>* reader,
                         v1::PutTensorResponse* response) override {
    std::vector<v1::PutTensorRequest> stream;
    for (v1::PutTensorRequest m; reader->Read(&m);) stream.push_back(m);
    absl::MutexLock lock(&mu_);
    authorizations_.push_back(Authorization(*context));
    puts_.push_back(stream);
    if (unavailable_puts_ > 0) {
      --unavailable_puts_;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "try again");
    }
    if (put_code_ != grpc::StatusCode::OK) return grpc::Status(put_code_, "refused here");
    v1::TensorInfo* info = response->mutable_tensor();
    info->set_name(stream[0].name());
    info->set_dtype(stream[0].dtype());
    *info->mutable_shape() = stream[0].shape();
    info->set_device("cpu");
    info->set_version(1);
    info->mutable_created()->set_seconds(1700000000);
    info->mutable_created()->set_nanos(5000);
    return grpc::Status::OK;
  }

  grpc::Status DeleteTensor(grpc::ServerContext* context, const v1::DeleteTensorRequest* request,
                            v1::DeleteTensorResponse* response) override {
    absl::MutexLock lock(&mu_);
    authorizations_.push_back(Authorization(*context));
    response->mutable_tensor()->set_name(request->name());
    return grpc::Status::OK;
  }

  grpc::Status ListTensors(grpc::ServerContext* context, const v1::ListTensorsRequest*,
                           v1::ListTensorsResponse* response) override {
    absl::MutexLock lock(&mu_);
    authorizations_.push_back(Authorization(*context));
    v1::TensorInfo* info = response->add_tensors();
    info->set_name("listed");
    info->set_dtype(v1::DT_STRING);
    info->add_shape(2);
    info->set_bytes(77);
    info->set_device("cpu");
    info->set_version(3);
    info->mutable_created()->set_seconds(1700000001);
    return grpc::Status::OK;
  }

  void set_put_code(grpc::StatusCode code) {
    absl::MutexLock lock(&mu_);
    put_code_ = code;
  }
  void set_unavailable_puts(int n) {
    absl::MutexLock lock(&mu_);
    unavailable_puts_ = n;
  }
  std::vector<std::vector<v1::PutTensorRequest>> puts() {
    absl::MutexLock lock(&mu_);
    return puts_;
  }
  std::vector<std::string> authorizations() {
    absl::MutexLock lock(&mu_);
    return authorizations_;
  }

 private:
  static std::string Authorization(const grpc::ServerContext& context) {
    auto it = context.client_metadata().find("authorization");
    return it == context.client_metadata().end()
               ? ""
               : std::string(it->second.data(), it->second.size());
  }

  absl::Mutex mu_;
  grpc::StatusCode put_code_ ABSL_GUARDED_BY(mu_) = grpc::StatusCode::OK;
  int unavailable_puts_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::vector<v1::PutTensorRequest>> puts_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> authorizations_ ABSL_GUARDED_BY(mu_);
};

struct FakeServer {
  RecordingService service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;

  FakeServer() {
    // The client's channels watch this service's health (client-side health checking).
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    server->GetHealthCheckService()->SetServingStatus("tensorcompute.v1.TensorCompute", true);
  }
  ~FakeServer() { server->Shutdown(); }
  std::string target() const { return absl::StrCat("127.0.0.1:", port); }
};

std::unique_ptr<Client> MakeClient(const std::string& target, int max_attempts = 1) {
  ClientOptions options = test_support::TestClientOptions(target);
  options.auth_token = "reader";
  options.admin_token = "admin";
  options.retry.max_attempts = max_attempts;
  return test_support::MakeClient(options);
}

TEST(PutWire, StreamIsTheDescriptionThenChunksInOrder) {
  FakeServer fake;
  auto client = MakeClient(fake.target());
  const core::Tensor t = testing::MakeTensor<int32_t>({5, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  PutOptions put;
  put.device = "gpu:1";
  put.replace = true;
  put.chunk_bytes = 12;  // 3 elements per message: 12, 12, 12, 4 bytes
  auto info = client->PutTensor("t", t.view(), put);
  ASSERT_THAT(info.status(), IsOk());
  EXPECT_EQ(info->name, "t");
  EXPECT_EQ(info->dtype, core::DataType::kInt32);
  EXPECT_THAT(info->shape, ElementsAre(5, 2));
  EXPECT_EQ(info->created, absl::FromUnixSeconds(1700000000) + absl::Microseconds(5));

  const auto puts = fake.service.puts();
  ASSERT_EQ(puts.size(), 1u);
  const auto& stream = puts[0];
  ASSERT_EQ(stream.size(), 4u);
  EXPECT_EQ(stream[0].name(), "t");
  EXPECT_EQ(stream[0].device(), "gpu:1");
  EXPECT_TRUE(stream[0].replace());
  std::string data;
  for (const auto& m : stream) {
    EXPECT_EQ(m.offset(), static_cast<int64_t>(data.size()));
    data += m.data();
  }
  EXPECT_EQ(data, std::string(reinterpret_cast<const char*>(t.bytes().data()), t.bytes().size()));
}

TEST(PutWire, AdminTokenOnPutAndDeleteOnly) {
  FakeServer fake;
  auto client = MakeClient(fake.target());
  const core::Tensor t = testing::MakeStrings({2}, {"a", "b"});
  ASSERT_THAT(client->PutTensor("s", t.view()).status(), IsOk());
  ASSERT_THAT(client->DeleteTensor("s").status(), IsOk());
  auto list = client->ListTensors();
  ASSERT_THAT(list.status(), IsOk());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].name, "listed");
  EXPECT_EQ((*list)[0].dtype, core::DataType::kString);
  EXPECT_EQ((*list)[0].bytes, 77);
  EXPECT_EQ((*list)[0].version, 3);
  EXPECT_THAT(fake.service.authorizations(),
              ElementsAre("Bearer admin", "Bearer admin", "Bearer reader"));
}

TEST(PutWire, UnavailableUploadIsRetriedFromTheStart) {
  FakeServer fake;
  fake.service.set_unavailable_puts(2);
  auto client = MakeClient(fake.target(), /*max_attempts=*/3);
  const core::Tensor t = testing::MakeTensor<int64_t>({3}, {1, 2, 3});
  PutOptions put;
  put.chunk_bytes = 8;
  ASSERT_THAT(client->PutTensor("t", t.view(), put).status(), IsOk());
  const auto puts = fake.service.puts();
  ASSERT_EQ(puts.size(), 3u);
  for (const auto& stream : puts) {
    ASSERT_EQ(stream.size(), 3u);
    EXPECT_EQ(stream[0].name(), "t");
    EXPECT_EQ(stream[2].offset(), 16);
  }
}

TEST(PutWire, AllTargetsReportsEachTargetsOutcome) {
  FakeServer a, b, c;
  b.service.set_put_code(grpc::StatusCode::RESOURCE_EXHAUSTED);
  c.service.set_put_code(grpc::StatusCode::PERMISSION_DENIED);
  auto client = MakeClient(a.target() + "," + b.target() + "," + c.target());
  const core::Tensor t = testing::MakeTensor<float>({1}, {1.5f});
  PutOptions put;
  put.all_targets = true;
  const absl::Status status = client->PutTensor("t", t.view(), put).status();
  EXPECT_THAT(status,
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr(absl::StrCat(
                           "put t: failed on 2 of 3 targets: ", b.target(),
                           ": RESOURCE_EXHAUSTED: refused here; ", c.target(),
                           ": PERMISSION_DENIED: refused here; succeeded on: ", a.target()))));
  EXPECT_EQ(a.service.puts().size(), 1u);
  EXPECT_EQ(b.service.puts().size(), 1u);
  EXPECT_EQ(c.service.puts().size(), 1u);

  // Without all_targets only the first target is reached.
  put.all_targets = false;
  ASSERT_THAT(client->PutTensor("t", t.view(), put).status(), IsOk());
  EXPECT_EQ(a.service.puts().size(), 2u);
  EXPECT_EQ(b.service.puts().size(), 1u);
}

}  // namespace
}  // namespace tensorcompute::client
