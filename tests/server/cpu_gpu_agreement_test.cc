// A CPU server and a GPU server (both with the KServe front end, HTTP included) give the same
// answers, byte for byte, or the same error, word for word: random Gather, GatherNd and
// EmbeddingBag requests (every dtype, both index dtypes, axes, batch_dims, depths, empty and
// large outputs, bad indices; every mode, weights, offsets, padding), inline and by name; float16
// and 8-bit row-wise tables (quantized by the server and prequantized); a table larger than an
// upload's staging chunk, read back whole; KServe v2 ModelInfer over gRPC and over HTTP. Skipped,
// visibly, without a GPU: the GPU kit (tools/gpu_kit.sh) runs them on one.

#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/cuda/cuda_executor.h"
#include "core/dtype.h"
#include "core/table_storage.h"
#include "proto/tensor_codec.h"
#include "server/kserve/kserve_front_end.h"
#include "server/server.h"
#include "tests/server/test_server.h"
#include "tests/testing/random_embedding_bag.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::server {
namespace {

using ::tensorcompute::server::test_support::MakeChannel;
using ::tensorcompute::server::test_support::MakeStub;
using ::tensorcompute::server::test_support::PutTensor;
using ::tensorcompute::server::test_support::Stub;
using ::tensorcompute::server::test_support::TestOptions;
using ::tensorcompute::server::test_support::ToAbsl;
using ::tensorcompute::server::test_support::ToEmbeddingBagProto;
using ::tensorcompute::server::test_support::ToGatherNdProto;
using ::tensorcompute::server::test_support::ToGatherProto;
using ::tensorcompute::testing::EmbeddingBagCase;
using ::tensorcompute::testing::GatherRequest;
using ::tensorcompute::testing::InjectOutOfRangeIndices;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::RandomBagOptions;
using ::tensorcompute::testing::RandomEmbeddingBagCase;
using ::tensorcompute::testing::RandomGatherNdRequest;
using ::tensorcompute::testing::RandomGatherRequest;
using ::tensorcompute::testing::RandomIndices;
using ::tensorcompute::testing::RandomRequestOptions;
using ::tensorcompute::testing::Rng;
using ::tensorcompute::testing::UniformInt;

// One server of a pair and its clients.
struct Side {
  std::unique_ptr<Server> server;
  std::unique_ptr<Stub> stub;
  std::unique_ptr<inference::GRPCInferenceService::Stub> kserve;
  int http_port = 0;
};

// An HTTP/1.1 POST of `body` to 127.0.0.1:`port` `path`; returns the status line and the body
// ("" when the connection fails). Connection: close, so the answer ends at EOF.
std::string Post(int port, const std::string& path, const std::string& body) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string answer;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0) {
    const std::string request = absl::StrCat(
        "POST ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: ",
        "application/json\r\nConnection: close\r\nContent-Length: ", body.size(), "\r\n\r\n", body);
    size_t sent = 0;
    while (sent < request.size()) {
      const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    char buffer[65536];
    for (ssize_t n; (n = recv(fd, buffer, sizeof(buffer), 0)) > 0;) answer.append(buffer, n);
  }
  close(fd);
  const size_t line_end = answer.find("\r\n");
  const size_t body_at = answer.find("\r\n\r\n");
  if (line_end == std::string::npos || body_at == std::string::npos) return answer;
  return absl::StrCat(answer.substr(0, line_end), "\n", answer.substr(body_at + 4));
}

class CpuAndGpuServersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device: " << cuda::CudaDeviceDescription(0).status().message();
    }
    for (Side* side : {&cpu_, &gpu_}) {
      ServerOptions options = TestOptions();
      options.device = side == &cpu_ ? "cpu" : "gpu";
      options.gpu_staging_bytes = int64_t{1} << 20;  // so that a few MiB are chunked
      kserve::Options kserve_options;
      kserve_options.http_listen = "127.0.0.1:0";
      auto server = Server::Start(options, {kserve::MakeFrontEnd(kserve_options)});
      ASSERT_THAT(server, IsOk());
      side->server = *std::move(server);
      side->stub = MakeStub(side->server->port());
      side->kserve = inference::GRPCInferenceService::NewStub(MakeChannel(side->server->port()));
      for (const auto& [name, port] : side->server->front_end_ports()) {
        if (name == "http_port") side->http_port = port;
      }
      ASSERT_GT(side->http_port, 0);
    }
  }

  // The same request to both servers through `method`: the same status (code and words) and,
  // when OK, the same output bytes.
  template <typename Request, typename Response, typename Method>
  ::testing::AssertionResult Agree(const Request& request, Method method) {
    absl::StatusOr<core::Tensor> answers[2];
    const Side* sides[2] = {&cpu_, &gpu_};
    for (int i = 0; i < 2; ++i) {
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
      Response response;
      const grpc::Status status = (sides[i]->stub.get()->*method)(&context, request, &response);
      answers[i] = status.ok() ? proto::FromProto(response.output(), "output", INT64_MAX)
                               : absl::StatusOr<core::Tensor>(ToAbsl(status));
    }
    answered_ += answers[0].ok() ? 1 : 0;
    return Same(answers[0], answers[1]);
  }

  ::testing::AssertionResult AgreeOnGather(const GatherRequest& request) {
    if (request.nd) {
      return Agree<v1::GatherNdRequest, v1::GatherNdResponse>(ToGatherNdProto(request),
                                                              &Stub::GatherNd);
    }
    return Agree<v1::GatherRequest, v1::GatherResponse>(ToGatherProto(request), &Stub::Gather);
  }

  ::testing::AssertionResult AgreeOnBag(const EmbeddingBagCase& c, const std::string& name = "") {
    return Agree<v1::EmbeddingBagRequest, v1::EmbeddingBagResponse>(ToEmbeddingBagProto(c, name),
                                                                    &Stub::EmbeddingBag);
  }

  static ::testing::AssertionResult Same(const absl::StatusOr<core::Tensor>& cpu,
                                         const absl::StatusOr<core::Tensor>& gpu) {
    if (cpu.ok() != gpu.ok() || (!cpu.ok() && cpu.status() != gpu.status())) {
      return ::testing::AssertionFailure() << "CPU: " << cpu.status() << "\nGPU: " << gpu.status();
    }
    if (cpu.ok() && !core::IdenticalTensors(cpu->view(), gpu->view())) {
      return ::testing::AssertionFailure() << "the outputs differ";
    }
    return ::testing::AssertionSuccess();
  }

  // Stores `tensor` as `name` on both servers.
  void PutOnBoth(const std::string& name, const core::Tensor& tensor,
                 v1::TableStorage storage = v1::AS_IS, int64_t chunk_bytes = 0) {
    for (Side* side : {&cpu_, &gpu_}) {
      ASSERT_THAT(PutTensor(*side->stub, name, tensor, storage, chunk_bytes), IsOk())
          << (side == &cpu_ ? "CPU" : "GPU");
    }
  }

  Side cpu_, gpu_;
  int answered_ = 0;  // requests Agree saw answered OK (so that agreeing is not vacuous)
};

TEST_F(CpuAndGpuServersTest, RandomGathersAgreeByteForByte) {
  Rng rng(0x6b2);
  for (int i = 0; i < 1200; ++i) {
    const core::DataType dtype = core::kAllDataTypes[i % std::size(core::kAllDataTypes)];
    const core::DataType index_dtype =
        (i / 7) % 2 ? core::DataType::kInt64 : core::DataType::kInt32;
    RandomRequestOptions options;
    if (i % 10 == 3) {  // large outputs (up to 16 MiB): through several staging chunks
      options.max_params_rank = 3;
      options.max_indices_rank = 2;  // bounds the indices where the output is empty
      options.max_dim = 1024;
      options.max_elements = int64_t{1} << 20;
    }
    if (i % 10 == 5) options.zero_probability = 0.3;  // empty params, indices and outputs
    GatherRequest req = i % 2 ? RandomGatherNdRequest(dtype, index_dtype, rng, options)
                              : RandomGatherRequest(dtype, index_dtype, rng, options);
    if (i % 4 == 1 && req.indices.num_elements() > 0) InjectOutOfRangeIndices(req, 3, rng);
    ASSERT_TRUE(AgreeOnGather(req)) << "case " << i << ": " << req.DebugString();
  }
  EXPECT_GT(answered_, 600);
}

TEST_F(CpuAndGpuServersTest, RandomEmbeddingBagsAgreeByteForByteInlineAndByName) {
  Rng rng(0xba9);
  for (int i = 0; i < 300; ++i) {
    EmbeddingBagCase c = RandomEmbeddingBagCase(rng);
    if (i % 5 == 2 && c.indices.num_elements() > 0) {  // a bad index: the same error
      testing::SetIndexValue(c.indices, UniformInt(rng, 0, c.indices.num_elements() - 1),
                             c.params.shape()[0] + 3);
    }
    ASSERT_TRUE(AgreeOnBag(c)) << "case " << i << " inline: " << c.DebugString();
    PutOnBoth("table", c.params);
    ASSERT_TRUE(AgreeOnBag(c, "table")) << "case " << i << " by name: " << c.DebugString();
  }
  EXPECT_GE(answered_, 2 * 240);
}

// The float32 table [rows, dim] of values in [-62, 63) in steps of 1/64, and its 8-bit
// row-wise form quantized as the server quantizes (core::TableEncoder).
core::Tensor FloatTable(int64_t rows, int64_t dim, Rng& rng) {
  std::vector<float> values(static_cast<size_t>(rows * dim));
  for (float& v : values) v = static_cast<float>(UniformInt(rng, 0, 8000)) / 64 - 62.0f;
  return testing::MakeTensor<float>({rows, dim}, values);
}

core::Tensor Prequantized(const core::Tensor& table) {
  const core::TableLayout layout = *core::PlanTableLayout("t", core::TableStorage::kInt8Rowwise,
                                                          core::DataType::kFloat32, table.shape());
  core::Tensor stored = *core::Tensor::Allocate(layout.stored_dtype, layout.stored_shape);
  core::TableEncoder encoder("t", layout, stored.mutable_bytes().data());
  EXPECT_THAT(encoder.Append(table.view().data), IsOk());
  return stored;
}

TEST_F(CpuAndGpuServersTest, CompactTablesAgreeForGathersAndEveryMode) {
  Rng rng(0xc0ac7);
  const core::Tensor table = FloatTable(300, 40, rng);
  PutOnBoth("f16", table, v1::FLOAT16);
  PutOnBoth("q8", table, v1::INT8_ROWWISE);
  PutOnBoth("pre", Prequantized(table), v1::INT8_ROWWISE_PREQUANTIZED);
  for (const char* name : {"f16", "q8", "pre"}) {
    SCOPED_TRACE(name);
    for (int i = 0; i < 40; ++i) {
      GatherRequest req;
      req.params = table.Clone();  // its shape; the rows come from the stored table
      req.axis = 0;
      req.indices = RandomIndices(i % 2 ? core::DataType::kInt64 : core::DataType::kInt32,
                                  {UniformInt(rng, 1, 64)}, {300}, rng);
      if (i % 7 == 3) InjectOutOfRangeIndices(req, 1, rng);
      v1::GatherRequest by_name = ToGatherProto(req);
      by_name.clear_params();
      by_name.set_params_name(name);
      const int answered = answered_;
      ASSERT_TRUE((Agree<v1::GatherRequest, v1::GatherResponse>(by_name, &Stub::Gather)))
          << "gather " << i;
      EXPECT_EQ(answered_ - answered, i % 7 == 3 ? 0 : 1) << "gather " << i;
      RandomBagOptions options;
      options.mode = static_cast<core::EmbeddingBagMode>(i % 4);
      options.weighted = i % 3 == 1 && options.mode != core::EmbeddingBagMode::kMax;
      options.bags = UniformInt(rng, 1, 50);
      options.params = &table;
      ASSERT_TRUE(AgreeOnBag(RandomEmbeddingBagCase(options, rng), name)) << "lookup " << i;
      EXPECT_EQ(answered_ - answered, i % 7 == 3 ? 1 : 2) << "lookup " << i;
    }
  }
}

// 40 MiB: more than two of an upload's 16 MiB staging chunks, sent in 3 MiB messages; read back
// whole by gathers of every row, in order, from both servers and compared with the table.
TEST_F(CpuAndGpuServersTest, ATableLargerThanAStagingChunkIsReadBackWhole) {
  constexpr int64_t kRows = 40960, kDim = 256;  // float32 rows of 1 KiB
  core::Tensor table = *core::Tensor::Allocate(core::DataType::kFloat32, {kRows, kDim});
  absl::Span<uint8_t> bytes = table.mutable_bytes();
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>((i * 131 + 7) % 251);
  PutOnBoth("big", table, v1::AS_IS, int64_t{3} << 20);
  constexpr int64_t kRowsPerCall = 8192;  // 8 MiB answers
  for (int64_t first = 0; first < kRows; first += kRowsPerCall) {
    std::vector<int64_t> rows(kRowsPerCall);
    for (int64_t r = 0; r < kRowsPerCall; ++r) rows[r] = first + r;
    v1::GatherRequest request;
    request.set_params_name("big");
    proto::ToProto(testing::MakeIndices(core::DataType::kInt64, {kRowsPerCall}, rows).view(),
                   request.mutable_indices());
    for (Side* side : {&cpu_, &gpu_}) {
      grpc::ClientContext context;
      v1::GatherResponse response;
      ASSERT_TRUE(side->stub->Gather(&context, request, &response).ok());
      const std::string& data = response.output().data();
      ASSERT_EQ(data.size(), static_cast<size_t>(kRowsPerCall * kDim * 4));
      EXPECT_EQ(std::memcmp(data.data(), bytes.data() + first * kDim * 4, data.size()), 0)
          << (side == &cpu_ ? "CPU" : "GPU") << ", rows from " << first;
    }
  }
}

TEST_F(CpuAndGpuServersTest, KserveModelInferOverGrpcAgrees) {
  Rng rng(0x6e5);
  const core::Tensor table = FloatTable(500, 24, rng);
  PutOnBoth("table", table);
  for (int i = 0; i < 40; ++i) {
    const bool bag = i % 2 == 1;
    const int64_t n = UniformInt(rng, 1, 64);
    std::vector<int64_t> indices(static_cast<size_t>(n));
    for (int64_t& v : indices) v = UniformInt(rng, -500, 499);
    if (i % 9 == 4) indices[0] = 500;  // out of range: the same error
    inference::ModelInferRequest request;
    request.set_model_name("table");
    auto* input = request.add_inputs();
    input->set_name("indices");
    input->set_datatype("INT64");
    input->add_shape(n);
    request.add_raw_input_contents(reinterpret_cast<const char*>(indices.data()), n * 8);
    if (bag) {
      (*request.mutable_parameters())["op"].set_string_param("embedding_bag");
      (*request.mutable_parameters())["mode"].set_string_param(i % 4 == 1 ? "mean" : "max");
      const std::vector<int64_t> offsets = {0, n / 2};
      auto* offsets_input = request.add_inputs();
      offsets_input->set_name("offsets");
      offsets_input->set_datatype("INT64");
      offsets_input->add_shape(2);
      request.add_raw_input_contents(reinterpret_cast<const char*>(offsets.data()), 16);
    }
    inference::ModelInferResponse responses[2];
    grpc::Status statuses[2];
    Side* sides[2] = {&cpu_, &gpu_};
    for (int s = 0; s < 2; ++s) {
      grpc::ClientContext context;
      statuses[s] = sides[s]->kserve->ModelInfer(&context, request, &responses[s]);
    }
    ASSERT_EQ(statuses[0].error_code(), statuses[1].error_code()) << "request " << i;
    ASSERT_EQ(statuses[0].error_message(), statuses[1].error_message()) << "request " << i;
    ASSERT_EQ(statuses[0].ok(), i % 9 != 4)
        << "request " << i << ": " << statuses[0].error_message();
    if (!statuses[0].ok()) continue;
    ASSERT_EQ(responses[0].raw_output_contents_size(), 1);
    ASSERT_EQ(responses[1].raw_output_contents_size(), 1);
    EXPECT_EQ(responses[0].outputs(0).SerializeAsString(),
              responses[1].outputs(0).SerializeAsString());
    EXPECT_EQ(responses[0].raw_output_contents(0), responses[1].raw_output_contents(0))
        << "request " << i;
  }
}

TEST_F(CpuAndGpuServersTest, KserveInferOverHttpAgrees) {
  Rng rng(0x4771);
  PutOnBoth("table", FloatTable(200, 12, rng));
  for (int i = 0; i < 30; ++i) {
    std::vector<std::string> values;
    const int64_t n = UniformInt(rng, 1, 40);
    for (int64_t k = 0; k < n; ++k) values.push_back(absl::StrCat(UniformInt(rng, -200, 199)));
    if (i % 7 == 2) values[0] = "200";  // out of range: the same 400 and words
    // Lookups take fixed bags: indices of rank 2, one bag of all n.
    const bool bag = i % 2 == 1;
    std::string body =
        absl::StrCat(R"({"inputs":[{"name":"indices","shape":)",
                     bag ? absl::StrCat("[1,", n, "]") : absl::StrCat("[", n, "]"),
                     R"(,"datatype":"INT64","data":[)", absl::StrJoin(values, ","), "]}]");
    if (bag) absl::StrAppend(&body, R"(,"parameters":{"op":"embedding_bag","mode":"sum"})");
    absl::StrAppend(&body, "}");
    const std::string cpu = Post(cpu_.http_port, "/v2/models/table/infer", body);
    const std::string gpu = Post(gpu_.http_port, "/v2/models/table/infer", body);
    ASSERT_THAT(cpu, ::testing::StartsWith(i % 7 == 2 ? "HTTP/1.1 400" : "HTTP/1.1 200")) << body;
    EXPECT_EQ(cpu, gpu) << "request " << i << ": " << body;
  }
}

}  // namespace
}  // namespace tensorcompute::server
