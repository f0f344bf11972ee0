// server/compute/shard_router.h in process: three servers, each preloading one shard of a table and
// routing to the others, answer Gather, GatherNd and EmbeddingBag on the whole table exactly
// as core computes them on the whole table, through every server, with concurrent callers;
// bad indices get the unsharded words; a server without peers serves its own rows only; a
// stopped shard is UNAVAILABLE by name. (Runs under ASan and TSan with the server tests.)

#include "server/compute/shard_router.h"

#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/embedding_bag.h"
#include "core/gather.h"
#include "core/npy_format.h"
#include "proto/tensor_codec.h"
#include "server/server.h"
#include "tests/server/test_server.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::server {
namespace {

using ::tensorcompute::server::test_support::MakeStub;
using ::tensorcompute::server::test_support::Stub;
using ::tensorcompute::server::test_support::TestOptions;
using ::tensorcompute::server::test_support::ToAbsl;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int kShards = 3;
constexpr int64_t kRows = 1000, kDim = 8;

// A loopback port held for a server to listen on (tests/testing/reserved_ports.py says why):
// bound with SO_REUSEADDR and never listening until destroyed, so that no other bind to port 0
// gets it, while gRPC (which sets SO_REUSEADDR) binds it.
class ReservedPort {
 public:
  ReservedPort() : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    const int on = 1;
    setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ReservedPort(const ReservedPort&) = delete;
  ReservedPort& operator=(const ReservedPort&) = delete;
  ~ReservedPort() { close(fd_); }

  int port() const { return port_; }

 private:
  int fd_;
  int port_ = 0;
};

v1::Tensor Int64Tensor(const std::vector<int64_t>& values, std::vector<int64_t> shape) {
  v1::Tensor t;
  t.set_dtype(v1::DT_INT64);
  for (int64_t d : shape) t.add_shape(d);
  t.set_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * 8));
  return t;
}

core::TensorView View(const v1::Tensor& t) { return *proto::ViewTensor(t, "t"); }

std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout = absl::Seconds(60)) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  return context;
}

class ShardRouterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 rng(25);
    std::normal_distribution<float> normal;
    std::vector<float> values(kRows * kDim);
    for (float& v : values) v = normal(rng);
    table_ = core::Tensor::FromValues<float>(core::DataType::kFloat32, {kRows, kDim},
                                             absl::MakeConstSpan(values));
    path_ = absl::StrCat(::testing::TempDir(), "/shard_router_", getpid(), ".npy");
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << *core::SerializeNpy(table_.view());
    std::vector<std::string> peers;
    for (int s = 0; s < kShards; ++s) {
      ports_.push_back(std::make_unique<ReservedPort>());
      peers.push_back(absl::StrCat("ipv4:127.0.0.1:", ports_.back()->port()));
    }
    for (int s = 0; s < kShards; ++s) {
      ServerOptions options = TestOptions();
      options.listen = absl::StrCat("127.0.0.1:", ports_[static_cast<size_t>(s)]->port());
      options.preload = {absl::StrCat("T=", path_)};
      options.shard_index = s;
      options.shard_count = kShards;
      options.shard_peers = absl::StrJoin(peers, ",");
      servers_.push_back(test_support::StartServer(options));
      ASSERT_NE(servers_.back(), nullptr);
      stubs_.push_back(MakeStub(servers_.back()->port()));
    }
  }

  void TearDown() override {
    stubs_.clear();
    servers_.clear();
    ports_.clear();
    std::remove(path_.c_str());
  }

  absl::StatusOr<std::string> Gather(Stub& stub, const std::vector<int64_t>& indices,
                                     std::vector<int64_t> shape) {
    v1::GatherRequest request;
    request.set_params_name("T");
    *request.mutable_indices() = Int64Tensor(indices, std::move(shape));
    v1::GatherResponse response;
    grpc::Status status = stub.Gather(Context().get(), request, &response);
    if (!status.ok()) return ToAbsl(status);
    return response.output().data();
  }

  core::Tensor table_;
  std::vector<std::unique_ptr<ReservedPort>> ports_;
  std::string path_;
  std::vector<std::unique_ptr<Server>> servers_;
  std::vector<std::unique_ptr<Stub>> stubs_;
};

TEST_F(ShardRouterTest, GathersThroughEveryServerAreTheWholeTablesFromManyThreads) {
  std::vector<std::thread> threads;
  std::vector<std::string> failures(kShards * 2);
  for (int t = 0; t < kShards * 2; ++t) {
    threads.emplace_back([this, t, &failures] {
      std::mt19937_64 rng(static_cast<uint64_t>(t));
      for (int call = 0; call < 40; ++call) {
        const int64_t n = std::uniform_int_distribution<int64_t>(0, 50)(rng);
        std::vector<int64_t> indices(static_cast<size_t>(n));
        for (int64_t& v : indices)
          v = std::uniform_int_distribution<int64_t>(-kRows, kRows - 1)(rng);
        const v1::Tensor wire = Int64Tensor(indices, {n});
        absl::StatusOr<std::string> got =
            Gather(*stubs_[static_cast<size_t>(t % kShards)], indices, {n});
        absl::StatusOr<core::Tensor> want = core::Gather(table_.view(), View(wire), 0, 0);
        if (!got.ok() || !want.ok() ||
            *got != std::string(reinterpret_cast<const char*>(want->bytes().data()),
                                want->bytes().size())) {
          failures[static_cast<size_t>(t)] =
              absl::StrCat("call ", call, ": ", got.status().ToString());
          return;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::string& failure : failures) EXPECT_EQ(failure, "");
}

TEST_F(ShardRouterTest, GatherNdAndEmbeddingBagAreTheWholeTables) {
  std::mt19937_64 rng(2);
  for (int call = 0; call < 30; ++call) {
    Stub& stub = *stubs_[static_cast<size_t>(call % kShards)];
    // GatherNd of depth 2: [row, column] pairs.
    std::vector<int64_t> pairs;
    for (int k = 0; k < 20; ++k) {
      pairs.push_back(std::uniform_int_distribution<int64_t>(-kRows, kRows - 1)(rng));
      pairs.push_back(std::uniform_int_distribution<int64_t>(-kDim, kDim - 1)(rng));
    }
    v1::GatherNdRequest nd;
    nd.set_params_name("T");
    *nd.mutable_indices() = Int64Tensor(pairs, {20, 2});
    v1::GatherNdResponse nd_answer;
    ASSERT_THAT(ToAbsl(stub.GatherNd(Context().get(), nd, &nd_answer)), IsOk());
    absl::StatusOr<core::Tensor> nd_want = core::GatherNd(table_.view(), View(nd.indices()), 0);
    ASSERT_THAT(nd_want.status(), IsOk());
    EXPECT_EQ(nd_answer.output().data(),
              std::string(reinterpret_cast<const char*>(nd_want->bytes().data()),
                          nd_want->bytes().size()));
    // EmbeddingBag, weighted MEAN with a padding row, rows repeated.
    std::vector<int64_t> indices, offsets = {0, 7, 7, 19};
    for (int k = 0; k < 30; ++k) {
      indices.push_back(std::uniform_int_distribution<int64_t>(0, 9)(rng) * 97 - 400);
    }
    std::vector<float> weights(indices.size());
    for (float& w : weights) w = std::uniform_real_distribution<float>(0.5f, 1.5f)(rng);
    v1::EmbeddingBagRequest bag;
    bag.set_params_name("T");
    *bag.mutable_indices() = Int64Tensor(indices, {30});
    *bag.mutable_offsets() = Int64Tensor(offsets, {4});
    bag.mutable_per_sample_weights()->set_dtype(v1::DT_FLOAT32);
    bag.mutable_per_sample_weights()->add_shape(30);
    bag.mutable_per_sample_weights()->set_data(
        std::string(reinterpret_cast<const char*>(weights.data()), weights.size() * 4));
    bag.set_mode(v1::EmbeddingBagRequest::MEAN);
    bag.set_padding_idx(indices[3]);
    v1::EmbeddingBagResponse bag_answer;
    ASSERT_THAT(ToAbsl(stub.EmbeddingBag(Context().get(), bag, &bag_answer)), IsOk());
    core::EmbeddingBagOptions options;
    options.mode = core::EmbeddingBagMode::kMean;
    options.padding_idx = indices[3];
    const core::TensorView offsets_view = View(bag.offsets());
    const core::TensorView weights_view = View(bag.per_sample_weights());
    absl::StatusOr<core::Tensor> bag_want = core::EmbeddingBag(
        table_.view(), View(bag.indices()), &offsets_view, &weights_view, options);
    ASSERT_THAT(bag_want.status(), IsOk());
    EXPECT_EQ(bag_answer.output().data(),
              std::string(reinterpret_cast<const char*>(bag_want->bytes().data()),
                          bag_want->bytes().size()));
  }
}

TEST_F(ShardRouterTest, BadIndicesGetTheUnshardedWords) {
  EXPECT_THAT(Gather(*stubs_[1], {3, 999, 1000, 5}, {2, 2}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("indices[1,0] = 1000 is not in [-1000, 1000)")));
  v1::GatherRequest axis1;
  axis1.set_params_name("T");
  axis1.set_axis(1);
  *axis1.mutable_indices() = Int64Tensor({0}, {1});
  v1::GatherResponse response;
  EXPECT_THAT(ToAbsl(stubs_[0]->Gather(Context().get(), axis1, &response)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sharded by rows")));
}

TEST_F(ShardRouterTest, WithoutPeersOnlyItsOwnRowsAreServed) {
  ServerOptions options = TestOptions();
  options.preload = {absl::StrCat("T=", path_)};
  options.shard_index = 1;
  options.shard_count = kShards;
  std::unique_ptr<Server> alone = test_support::StartServer(options);
  ASSERT_NE(alone, nullptr);
  std::unique_ptr<Stub> stub = MakeStub(alone->port());
  // Shard 1 holds rows [334, 668).
  absl::StatusOr<std::string> own = Gather(*stub, {334, 667, -400}, {3});
  ASSERT_THAT(own.status(), IsOk());
  EXPECT_EQ(
      own->substr(0, kDim * 4),
      std::string(reinterpret_cast<const char*>(table_.bytes().data()) + 334 * kDim * 4, kDim * 4));
  EXPECT_THAT(Gather(*stub, {334, 5}, {2}).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("row 5 is shard 0's, and this server has no --shard_peers")));
}

TEST_F(ShardRouterTest, PreloadedCompactShardsHoldOnlyTheirRows) {
  // Shard 2 of 3 of an int8-rowwise table, alone, beside the whole table stored the same way.
  ServerOptions options = TestOptions();
  options.preload = {absl::StrCat("Q=", path_, ":int8-rowwise")};
  std::unique_ptr<Server> whole = test_support::StartServer(options);
  options.shard_index = 2;
  options.shard_count = kShards;
  std::unique_ptr<Server> shard = test_support::StartServer(options);
  ASSERT_NE(whole, nullptr);
  ASSERT_NE(shard, nullptr);
  std::unique_ptr<Stub> whole_stub = MakeStub(whole->port()), shard_stub = MakeStub(shard->port());
  v1::ListTensorsResponse list;
  ASSERT_THAT(ToAbsl(shard_stub->ListTensors(Context().get(), {}, &list)), IsOk());
  ASSERT_EQ(list.tensors_size(), 1);
  const v1::TensorInfo& info = list.tensors(0);
  EXPECT_THAT(info.shape(), ::testing::ElementsAre(kRows, kDim));
  EXPECT_EQ(info.storage(), v1::INT8_ROWWISE);
  EXPECT_EQ(info.shard().index(), 2);
  EXPECT_EQ(info.shard().count(), kShards);
  EXPECT_EQ(info.shard().total_rows(), kRows);
  EXPECT_EQ(info.bytes(), (kRows - 668) * (kDim + 8));  // rows [668, 1000), 16 B each
  v1::GatherRequest request;
  request.set_params_name("Q");
  *request.mutable_indices() = Int64Tensor({999, 668, -1}, {3});
  v1::GatherResponse got, want;
  ASSERT_THAT(ToAbsl(shard_stub->Gather(Context().get(), request, &got)), IsOk());
  ASSERT_THAT(ToAbsl(whole_stub->Gather(Context().get(), request, &want)), IsOk());
  EXPECT_EQ(got.SerializeAsString(), want.SerializeAsString());
}

TEST_F(ShardRouterTest, AStoppedShardIsUnavailableByName) {
  servers_[2].reset();  // drained and stopped
  EXPECT_THAT(Gather(*stubs_[0], {1, 999}, {2}).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("shard 2 of 3 of table 'T'")));
  absl::StatusOr<std::string> rest = Gather(*stubs_[0], {1, 500}, {2});
  EXPECT_THAT(rest.status(), IsOk());
}

TEST(ShardOptionsTest, ShardFlagsAreChecked) {
  ServerOptions options = TestOptions();
  options.shard_count = 3;
  options.shard_index = 2;
  options.shard_peers = "a:1,b:1,c:1";
  EXPECT_THAT(options.Validate(), IsOk());
  options.shard_peers = "a:1,b:1";
  EXPECT_THAT(options.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("shard_peers lists 2 targets; shard_count is 3")));
  options.shard_peers = "";
  options.shard_index = 3;
  EXPECT_THAT(options.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("0 <= shard_index")));
  EXPECT_THAT(ParseShardPeers("ipv4:h:1|h:2,dns:///x:1").value(),
              ::testing::ElementsAre("ipv4:h:1,h:2", "dns:///x:1"));
  EXPECT_THAT(ParseShardPeers("a,,b").status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ShardOptionsTest, PeerCredentialsNeedPeersAndTls) {
  ServerOptions options = TestOptions();
  options.shard_peer_token_file = "/some/tokens";
  EXPECT_THAT(options.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("set shard_peers too")));
  options.shard_peer_token_file = "";
  options.shard_peer_tls = true;
  EXPECT_THAT(options.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("set shard_peers too")));
  options.shard_peers = "a:1";
  options.shard_peer_tls_ca = "/some/ca.pem";
  options.shard_peer_tls_server_name = "peer.example";
  EXPECT_THAT(options.Validate(), IsOk());
  options.shard_peer_tls = false;
  EXPECT_THAT(options.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("need shard_peer_tls")));
  options.shard_peer_tls_ca = "";
  EXPECT_THAT(options.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("need shard_peer_tls")));
  options.shard_peer_tls_server_name = "";
  EXPECT_THAT(options.Validate(), IsOk());
}

}  // namespace
}  // namespace tensorcompute::server
