// Client::UpdateRows, CallOptions::min_sequence and the load tester's UpdateWriter as a server
// sees them, against a recording fake TensorCompute service: the stream's messages (the name
// first, whole rows within the bound, every row once and in order), the admin token, the
// answer passed back, min_sequence on the lookups' requests, and the writer's pacing, its
// messages and its count of failed streams. The real server's behaviour (rows applied,
// sequences, FAILED_PRECONDITION) is tested end to end by python_client_test.py, cli_test.py
// and resident tensors' tests.

#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "tensorcompute/v1/tensorcompute.grpc.pb.h"

#include "client/client.h"
#include "client/update_writer.h"
#include "core/tensor.h"
#include "tests/client/test_client.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::client {
namespace {

using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Records every UpdateRows stream and its authorization; answers with the rows and messages
// it read and a sequence that counts every message so far, or NOT_FOUND for a table named
// "missing". Gather answers FAILED_PRECONDITION when min_sequence is above that sequence, as
// the real server does, and records each min_sequence.
class UpdatesService final : public v1::TensorCompute::Service {
 public:
  grpc::Status UpdateRows(grpc::ServerContext* context,
                          grpc::ServerReader<v1::UpdateRowsRequest>* reader,
                          v1::UpdateRowsResponse* response) override {
    std::vector<v1::UpdateRowsRequest> stream;
    int64_t rows = 0;
    for (v1::UpdateRowsRequest m; reader->Read(&m);) {
      if (stream.empty() && m.name() == "missing") {
        absl::MutexLock lock(&mu_);
        ++refused_;
        return grpc::Status(grpc::StatusCode::NOT_FOUND, "no tensor named 'missing'");
      }
      rows += m.indices().shape(0);
      stream.push_back(m);
      absl::MutexLock lock(&mu_);
      ++sequence_;
    }
    absl::MutexLock lock(&mu_);
    auto it = context->client_metadata().find("authorization");
    authorizations_.push_back(it == context->client_metadata().end()
                                  ? ""
                                  : std::string(it->second.data(), it->second.size()));
    streams_.push_back(stream);
    response->set_rows(rows);
    response->set_messages(static_cast<int64_t>(stream.size()));
    response->set_sequence(sequence_);
    return grpc::Status::OK;
  }

  grpc::Status Gather(grpc::ServerContext*, const v1::GatherRequest* request,
                      v1::GatherResponse* response) override {
    absl::MutexLock lock(&mu_);
    min_sequences_.push_back(request->min_sequence());
    if (request->min_sequence() > sequence_) {
      return grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          absl::StrCat("table '", request->params_name(), "' is at sequence ", sequence_,
                       "; the request needs at least ", request->min_sequence()));
    }
    response->mutable_output()->set_dtype(v1::DT_FLOAT32);
    response->mutable_output()->add_shape(0);
    return grpc::Status::OK;
  }

  std::vector<std::vector<v1::UpdateRowsRequest>> streams() {
    absl::MutexLock lock(&mu_);
    return streams_;
  }
  std::vector<std::string> authorizations() {
    absl::MutexLock lock(&mu_);
    return authorizations_;
  }
  std::vector<int64_t> min_sequences() {
    absl::MutexLock lock(&mu_);
    return min_sequences_;
  }
  // Waits until `n` streams were refused (NOT_FOUND), at most `timeout`; whether they were.
  bool WaitForRefused(int64_t n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return refused_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
  }

 private:
  absl::Mutex mu_;
  int64_t sequence_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::vector<v1::UpdateRowsRequest>> streams_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> authorizations_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> min_sequences_ ABSL_GUARDED_BY(mu_);
  int64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
};

struct FakeServer {
  UpdatesService service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;

  explicit FakeServer(int max_message_bytes = 64 << 20) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.SetMaxReceiveMessageSize(max_message_bytes);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    server->GetHealthCheckService()->SetServingStatus("tensorcompute.v1.TensorCompute", true);
  }
  ~FakeServer() { server->Shutdown(); }
  std::string target() const { return absl::StrCat("127.0.0.1:", port); }
};

std::unique_ptr<Client> MakeClient(const std::string& target, int64_t max_message_bytes) {
  ClientOptions options = test_support::TestClientOptions(target);
  options.auth_token = "reader";
  options.admin_token = "admin";
  options.max_message_bytes = max_message_bytes;
  return test_support::MakeClient(options);
}

core::Tensor Rows(int64_t rows, int64_t cols) {
  std::vector<float> values(rows * cols);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  return core::Tensor::FromValues<float>(core::DataType::kFloat32, {rows, cols},
                                         absl::MakeConstSpan(values));
}

core::Tensor Iota64(int64_t n) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = n - 1 - i;
  return core::Tensor::FromValues<int64_t>(core::DataType::kInt64, {n}, absl::MakeConstSpan(v));
}

// Every row of `streams[0]`, in order, must be `values` with `indices`, each message's rows
// whole (its values' bytes a multiple of the row) and under `bound` bytes of rows.
void ExpectRowsInOrder(const std::vector<v1::UpdateRowsRequest>& stream,
                       const core::Tensor& indices, const core::Tensor& values, size_t bound) {
  std::string all_indices, all_values;
  for (size_t i = 0; i < stream.size(); ++i) {
    const auto& m = stream[i];
    EXPECT_EQ(m.name().empty(), i > 0) << "message " << i;
    EXPECT_EQ(m.values().shape(0), m.indices().shape(0));
    EXPECT_LE(m.indices().data().size() + m.values().data().size(), bound) << "message " << i;
    all_indices += m.indices().data();
    all_values += m.values().data();
  }
  EXPECT_EQ(all_indices, std::string(reinterpret_cast<const char*>(indices.bytes().data()),
                                     indices.bytes().size()));
  EXPECT_EQ(all_values, std::string(reinterpret_cast<const char*>(values.bytes().data()),
                                    values.bytes().size()));
}

TEST(UpdateRowsWire, RowsAreStreamedInBoundedWholeRowMessagesWithTheAdminToken) {
  FakeServer server;
  auto client = MakeClient(server.target(), 64 << 20);
  const core::Tensor indices = Iota64(5000);
  const core::Tensor values = Rows(5000, 64);  // 1.28 MB of rows
  std::vector<std::pair<int64_t, int64_t>> progress;
  UpdateOptions options;
  options.chunk_bytes = 64 << 10;
  options.on_progress = [&](int64_t sent, int64_t total) { progress.emplace_back(sent, total); };
  absl::StatusOr<UpdateRowsResult> result =
      client->UpdateRows("emb", indices.view(), values.view(), options);
  ASSERT_THAT(result.status(), IsOk());
  const auto streams = server.service.streams();
  ASSERT_EQ(streams.size(), 1u);
  // 64 KiB / (256 + 8) bytes: 248 rows per message, so 21 messages.
  EXPECT_EQ(streams[0].size(), 21u);
  ExpectRowsInOrder(streams[0], indices, values, 64 << 10);
  EXPECT_EQ(result->rows, 5000);
  EXPECT_EQ(result->messages, 21);
  EXPECT_EQ(result->sequence, 21);
  EXPECT_THAT(server.service.authorizations(), ElementsAre("Bearer admin"));
  ASSERT_EQ(progress.size(), 21u);
  EXPECT_EQ(progress.back(), std::make_pair(int64_t{5000 * 256}, int64_t{5000 * 256}));
}

TEST(UpdateRowsWire, MessagesStayWithinTheClientsMessageLimit) {
  // Both ends refuse messages over 32 KiB: the default 1 MiB chunk is capped below it.
  FakeServer server(32 << 10);
  auto client = MakeClient(server.target(), 32 << 10);
  const core::Tensor indices = Iota64(1000);
  const core::Tensor values = Rows(1000, 64);
  absl::StatusOr<UpdateRowsResult> result =
      client->UpdateRows("emb", indices.view(), values.view());
  ASSERT_THAT(result.status(), IsOk());
  const auto streams = server.service.streams();
  ASSERT_EQ(streams.size(), 1u);
  EXPECT_GT(streams[0].size(), 8u);
  ExpectRowsInOrder(streams[0], indices, values, (32 << 10) - kUpdateMessageOverhead);
  EXPECT_EQ(result->rows, 1000);
}

TEST(UpdateRowsWire, BadArgumentsAreRefusedBeforeAnyCallAndServerErrorsPassThrough) {
  FakeServer server;
  auto client = MakeClient(server.target(), 64 << 20);
  const core::Tensor values = Rows(3, 2);
  EXPECT_THAT(client->UpdateRows("emb", Iota64(4).view(), values.view()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("values has 3 rows but indices has 4 entries")));
  UpdateOptions zero;
  zero.chunk_bytes = 0;
  EXPECT_THAT(client->UpdateRows("emb", Iota64(3).view(), values.view(), zero).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("chunk_bytes")));
  EXPECT_TRUE(server.service.streams().empty());
  EXPECT_THAT(client->UpdateRows("missing", Iota64(3).view(), values.view()).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no tensor named 'missing'")));
}

TEST(UpdateRowsWire, MinSequenceReachesTheLookupAndItsRefusalComesBack) {
  FakeServer server;
  auto client = MakeClient(server.target(), 64 << 20);
  absl::StatusOr<UpdateRowsResult> result =
      client->UpdateRows("emb", Iota64(3).view(), Rows(3, 2).view());
  ASSERT_THAT(result.status(), IsOk());
  const core::Tensor ids = Iota64(1);
  CallOptions at;
  at.min_sequence = result->sequence;
  EXPECT_THAT(client->GatherByName("emb", ids.view(), 0, 0, at).status(), IsOk());
  CallOptions ahead;
  ahead.min_sequence = result->sequence + 1;
  EXPECT_THAT(
      client->GatherByName("emb", ids.view(), 0, 0, ahead).status(),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("the request needs at least 2")));
  EXPECT_THAT(client->GatherByName("emb", ids.view()).status(), IsOk());
  EXPECT_THAT(server.service.min_sequences(), ElementsAre(1, 2, 0));
}

UpdateLoadSpec WriterSpec(const std::string& name) {
  UpdateLoadSpec spec;
  spec.name = name;
  spec.dtype = core::DataType::kFloat32;
  spec.shape = {1000, 16};
  spec.rows_per_second = 4000;
  spec.rows_per_message = 100;
  return spec;
}

std::shared_ptr<grpc::Channel> Channel(const std::string& target) {
  return MakeChannel(target, 64 << 20, /*index=*/9001);
}

TEST(UpdateWriter, PacesMessagesOfDistinctRandomRowsAndCountsWhatWasApplied) {
  FakeServer server;
  UpdateLoadSpec spec = WriterSpec("emb");
  spec.authorization = "Bearer admin";
  auto writer = UpdateWriter::Start(Channel(server.target()), spec);
  ASSERT_THAT(writer.status(), IsOk());
  absl::SleepFor(absl::Seconds(1));
  const UpdateLoadReport report = (*writer)->Stop();
  // 4000 rows/s in messages of 100 for ~1 s: ~40 messages (the first is due at once).
  EXPECT_GE(report.messages_sent, 30);
  EXPECT_LE(report.messages_sent, 46);
  EXPECT_EQ(report.rows_sent, report.messages_sent * 100);
  EXPECT_EQ(report.rows_applied, report.rows_sent);
  EXPECT_EQ(report.messages_applied, report.messages_sent);
  EXPECT_EQ(report.sequence, report.messages_sent);
  EXPECT_EQ(report.errors, 0);
  EXPECT_EQ(report.streams, 1);
  EXPECT_GT(report.rows_per_s, 2500);
  EXPECT_LT(report.rows_per_s, 4600);
  const auto streams = server.service.streams();
  ASSERT_EQ(streams.size(), 1u);
  EXPECT_THAT(server.service.authorizations(), ElementsAre("Bearer admin"));
  for (const auto& m : streams[0]) {
    EXPECT_EQ(m.name(), "emb");
    ASSERT_EQ(m.indices().dtype(), v1::DT_INT64);
    ASSERT_EQ(m.indices().data().size(), 800u);
    std::vector<int64_t> ids(100);
    std::memcpy(ids.data(), m.indices().data().data(), 800);
    EXPECT_EQ(std::set<int64_t>(ids.begin(), ids.end()).size(), 100u);  // distinct
    for (int64_t id : ids) EXPECT_TRUE(id >= 0 && id < 1000) << id;
    EXPECT_THAT(m.values().shape(), ElementsAre(100, 16));
    EXPECT_EQ(m.values().dtype(), v1::DT_FLOAT32);
  }
}

TEST(UpdateWriter, PrequantizedRowsCarryAFiniteScaleAndBias) {
  UpdateLoadSpec spec = WriterSpec("q");
  spec.storage = core::TableStorage::kInt8RowwisePrequantized;
  spec.shape = {50, 8};  // the table's logical [rows, dim]
  spec.rows_per_message = 50;
  const std::vector<v1::UpdateRowsRequest> messages = BuildUpdateMessages(spec);
  ASSERT_EQ(messages.size(), 16u);
  const auto& values = messages[0].values();
  EXPECT_EQ(values.dtype(), v1::DT_UINT8);
  EXPECT_THAT(values.shape(), ElementsAre(50, 16));
  for (int r = 0; r < 50; ++r) {
    float scale, bias;
    std::memcpy(&scale, values.data().data() + r * 16 + 8, 4);
    std::memcpy(&bias, values.data().data() + r * 16 + 12, 4);
    EXPECT_TRUE(std::isfinite(scale) && std::isfinite(bias)) << r;
  }
}

TEST(UpdateWriter, AFailingStreamIsCountedAndReopened) {
  FakeServer server;
  auto writer = UpdateWriter::Start(Channel(server.target()), WriterSpec("missing"));
  ASSERT_THAT(writer.status(), IsOk());
  // Three refusals seen by the server (not a fixed wait: a loaded machine reopens slowly), so
  // the writer has had at least two of them answered.
  ASSERT_TRUE(server.service.WaitForRefused(3, absl::Seconds(60)));
  const UpdateLoadReport report = (*writer)->Stop();
  EXPECT_GE(report.errors, 2);
  EXPECT_EQ(report.streams, report.errors);
  EXPECT_EQ(report.error_codes.at("NOT_FOUND"), report.errors);
  EXPECT_THAT(report.last_error, HasSubstr("NOT_FOUND: no tensor named 'missing'"));
  EXPECT_EQ(report.rows_applied, 0);
}

TEST(UpdateWriter, BadSpecsAreRefused) {
  UpdateLoadSpec spec = WriterSpec("emb");
  spec.rows_per_message = 1001;
  EXPECT_THAT(CheckUpdateLoadSpec(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("[1, 1000]")));
  spec = WriterSpec("emb");
  spec.rows_per_second = 0;
  EXPECT_THAT(CheckUpdateLoadSpec(spec), StatusIs(absl::StatusCode::kInvalidArgument));
  spec = WriterSpec("emb");
  spec.dtype = core::DataType::kString;
  EXPECT_THAT(CheckUpdateLoadSpec(spec), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace tensorcompute::client
