// ClientOptions::compression: the names parse; a client with gzip or deflate gets answers
// identical to an uncompressed one's; and the requests really are compressed on the wire (a
// TCP relay between client and server counts the bytes sent), for the client's own calls and
// for the load tester on the client's channels.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client/client.h"
#include "client/load_tester.h"
#include "server/server.h"
#include "tests/client/test_client.h"
#include "tests/server/test_server.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/reference_gather.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::client {
namespace {

using ::tensorcompute::server::test_support::StartServer;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// A TCP relay from 127.0.0.1:port() to 127.0.0.1:`upstream` that counts the bytes its clients
// send: what gRPC put on the wire, after compression. Any number of connections, each relayed
// both ways by one polling thread until either side closes.
class CountingRelay {
 public:
  explicit CountingRelay(int upstream) : upstream_(upstream) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr = Loopback(0);
    socklen_t len = sizeof(addr);
    if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        listen(listen_fd_, 16) != 0 ||
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "relay: cannot listen";
      return;
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~CountingRelay() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    for (const auto& [client, server] : pairs_) {
      close(client);
      close(server);
    }
    if (listen_fd_ >= 0) close(listen_fd_);
  }

  int port() const { return port_; }
  int64_t client_bytes() const { return client_bytes_.load(); }

 private:
  static sockaddr_in Loopback(int port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return addr;
  }

  // Writes all of buf[0, n) to `fd`; false when the peer is gone.
  static bool WriteAll(int fd, const char* buf, ssize_t n) {
    while (n > 0) {
      const ssize_t w = send(fd, buf, static_cast<size_t>(n), MSG_NOSIGNAL);
      if (w <= 0) return false;
      buf += w;
      n -= w;
    }
    return true;
  }

  void Serve() {
    std::vector<char> buf(1 << 16);
    while (!stop_) {
      std::vector<pollfd> fds = {{listen_fd_, POLLIN, 0}};
      for (const auto& [client, server] : pairs_) {
        fds.push_back({client, POLLIN, 0});
        fds.push_back({server, POLLIN, 0});
      }
      if (poll(fds.data(), fds.size(), 20) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        const int client = accept(listen_fd_, nullptr, nullptr);
        const int server = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in addr = Loopback(upstream_);
        if (client >= 0 && server >= 0 &&
            connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
          pairs_.emplace_back(client, server);
        } else {
          if (client >= 0) close(client);
          if (server >= 0) close(server);
        }
      }
      std::vector<size_t> closed;
      for (size_t i = 1; i < fds.size(); ++i) {
        if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        const size_t pair = (i - 1) / 2;
        const bool from_client = (i - 1) % 2 == 0;
        const int peer = from_client ? pairs_[pair].second : pairs_[pair].first;
        const ssize_t n = recv(fds[i].fd, buf.data(), buf.size(), 0);
        if (n <= 0 || !WriteAll(peer, buf.data(), n)) {
          closed.push_back(pair);
          continue;
        }
        if (from_client) client_bytes_ += n;
      }
      closed.erase(std::unique(closed.begin(), closed.end()), closed.end());
      for (auto it = closed.rbegin(); it != closed.rend(); ++it) {
        close(pairs_[*it].first);
        close(pairs_[*it].second);
        pairs_.erase(pairs_.begin() + static_cast<std::ptrdiff_t>(*it));
      }
    }
  }

  const int upstream_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> client_bytes_{0};
  std::vector<std::pair<int, int>> pairs_;  // (client, server); the relay thread's only
  std::thread thread_;
};

std::unique_ptr<Client> MakeClient(int port, grpc_compression_algorithm compression) {
  ClientOptions options = test_support::TestClientOptions(port);
  options.compression = compression;
  return test_support::MakeClient(options);
}

TEST(ParseCompression, ReadsTheThreeNames) {
  EXPECT_EQ(*ParseCompression("none"), GRPC_COMPRESS_NONE);
  EXPECT_EQ(*ParseCompression("gzip"), GRPC_COMPRESS_GZIP);
  EXPECT_EQ(*ParseCompression("deflate"), GRPC_COMPRESS_DEFLATE);
  for (const char* bad : {"", "GZIP", "identity", "zstd", "stream/gzip"}) {
    EXPECT_THAT(ParseCompression(bad).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("none, gzip, deflate")))
        << bad;
  }
}

TEST(ClientCreate, RejectsAnUnknownCompression) {
  ClientOptions options;
  options.compression = GRPC_COMPRESS_ALGORITHMS_COUNT;
  EXPECT_THAT(Client::Create(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("compression")));
}

TEST(Client, CompressedCallsGetIdenticalAnswers) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto plain = MakeClient(server->port(), GRPC_COMPRESS_NONE);
  auto gzip = MakeClient(server->port(), GRPC_COMPRESS_GZIP);
  auto deflate = MakeClient(server->port(), GRPC_COMPRESS_DEFLATE);
  ASSERT_TRUE(plain && gzip && deflate);
  testing::Rng rng(11);
  for (int i = 0; i < 30; ++i) {
    const core::DataType dtype = core::kAllDataTypes[i % std::size(core::kAllDataTypes)];
    testing::GatherRequest request =
        i % 3 == 0 ? testing::RandomGatherNdRequest(dtype, core::DataType::kInt64, rng)
                   : testing::RandomGatherRequest(dtype, core::DataType::kInt32, rng);
    SCOPED_TRACE(request.DebugString());
    const auto call = [&](Client& c) {
      return request.nd
                 ? c.GatherNd(request.params.view(), request.indices.view(), request.batch_dims)
                 : c.Gather(request.params.view(), request.indices.view(), request.axis,
                            request.batch_dims);
    };
    const absl::StatusOr<core::Tensor> want = call(*plain);
    EXPECT_TRUE(testing::AgreesWithReference(want, testing::RunReference(request)));
    for (Client* c : {gzip.get(), deflate.get()}) {
      const absl::StatusOr<core::Tensor> got = call(*c);
      EXPECT_TRUE(testing::AgreesWithReference(got, testing::RunReference(request)));
      ASSERT_EQ(got.ok(), want.ok());
      if (!got.ok()) {
        EXPECT_EQ(got.status(), want.status());
        continue;
      }
      EXPECT_EQ(got->dtype(), want->dtype());
      EXPECT_EQ(got->shape(), want->shape());
      EXPECT_TRUE(std::equal(got->bytes().begin(), got->bytes().end(), want->bytes().begin(),
                             want->bytes().end()));
      EXPECT_EQ(got->strings(), want->strings());
    }
  }
}

// A 1 MiB float32 table of few distinct values: gzip shrinks it to a few KiB.
core::Tensor CompressibleTable() {
  std::vector<float> values(4096 * 64);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 64);
  return testing::MakeTensor<float>({4096, 64}, values);
}

TEST(Client, GzipSendsFewerBytesOnTheWire) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  const core::Tensor params = CompressibleTable();
  const core::Tensor indices = testing::MakeIndices(core::DataType::kInt32, {3}, {5, 4095, 0});
  int64_t wire_bytes[2] = {0, 0};
  std::vector<uint8_t> answers[2];
  for (int gzip : {0, 1}) {
    CountingRelay relay(server->port());
    auto client = MakeClient(relay.port(), gzip ? GRPC_COMPRESS_GZIP : GRPC_COMPRESS_NONE);
    ASSERT_NE(client, nullptr);
    absl::StatusOr<core::Tensor> out = client->Gather(params.view(), indices.view());
    ASSERT_THAT(out.status(), IsOk());
    EXPECT_THAT(out->shape(), ElementsAre(3, 64));
    answers[gzip].assign(out->bytes().begin(), out->bytes().end());
    wire_bytes[gzip] = relay.client_bytes();
  }
  EXPECT_EQ(answers[0], answers[1]);
  EXPECT_GT(wire_bytes[0], 4096 * 64 * 4);
  EXPECT_LT(wire_bytes[1], wire_bytes[0] / 20)
      << "gzip: " << wire_bytes[1] << " bytes, none: " << wire_bytes[0];
}

TEST(RunLoad, OnACompressingClientsChannelsSendsCompressedRequests) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  LoadRequestSpec spec;
  spec.dtype = core::DataType::kBool;  // random bytes 0 and 1: one bit in eight is news
  spec.params_shape = {4096, 64};
  spec.distinct_requests = 2;
  auto requests = BuildLoadRequests(spec);
  ASSERT_THAT(requests.status(), IsOk());
  LoadOptions options;
  options.requests = 20;
  options.concurrency = 2;
  options.warmup = absl::ZeroDuration();
  int64_t wire_bytes[2] = {0, 0};
  for (int gzip : {0, 1}) {
    CountingRelay relay(server->port());
    auto client = MakeClient(relay.port(), gzip ? GRPC_COMPRESS_GZIP : GRPC_COMPRESS_NONE);
    ASSERT_NE(client, nullptr);
    auto report = RunLoad(client->channels(), *requests, options);
    ASSERT_THAT(report.status(), IsOk());
    EXPECT_THAT(report->by_code, ElementsAre(Pair("OK", 20)));
    // The report counts messages before compression either way.
    EXPECT_EQ(report->bytes_sent, 20 * requests->request_bytes);
    wire_bytes[gzip] = relay.client_bytes();
  }
  EXPECT_GT(wire_bytes[0], 20 * 4096 * 64);
  EXPECT_LT(wire_bytes[1], wire_bytes[0] / 2)
      << "gzip: " << wire_bytes[1] << " bytes, none: " << wire_bytes[0];
}

}  // namespace
}  // namespace tensorcompute::client
