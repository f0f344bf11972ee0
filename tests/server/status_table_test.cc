// Every row of the server's status table (README, issue #3), provoked through a real channel
// and asserted by code and message. Where a request must be shown never to have been computed,
// the proof is Metrics::batched_requests(): the count of tasks handed to the executor.
//
//   INVALID_ARGUMENT    malformed tensors, unknown dtypes, bad axis, out-of-range indices
//   RESOURCE_EXHAUSTED  output over max_output_bytes (planned, and strings while executing);
//                       request over max_message_bytes (gRPC's own answer)
//   DEADLINE_EXCEEDED   deadline passes while queued (waiting for a batch, or behind work)
//   CANCELLED           the client cancels while queued
//   UNAVAILABLE         queue full; server draining (also drain_test.cc, on the real binary)
//   UNIMPLEMENTED       the CPU executor runs every operation and dtype, so the table's case (an
//                       op or dtype a device cannot run) is unreachable in this build; a method
//                       the server does not have is what a client can provoke.
//   INTERNAL            a bug or a device fault: not provokable from the wire on a correct CPU
//                       build, so there is no test (the message rule is ToGrpcStatus's).

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/stub_options.h"
#include "gtest/gtest.h"

#include "core/batching/batcher.h"
#include "core/dtype.h"
#include "server/server.h"
#include "tests/server/test_server.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::server {
namespace {

using absl::StatusCode;
using core::DataType;
using ::tensorcompute::server::test_support::AsyncGather;
using ::tensorcompute::server::test_support::Backlog;
using ::tensorcompute::server::test_support::Call;
using ::tensorcompute::server::test_support::IsLargeGatherAnswer;
using ::tensorcompute::server::test_support::LargeGatherRequest;
using ::tensorcompute::server::test_support::MakeChannel;
using ::tensorcompute::server::test_support::MakeStub;
using ::tensorcompute::server::test_support::SendGather;
using ::tensorcompute::server::test_support::SmallGather;
using ::tensorcompute::server::test_support::Stub;
using ::tensorcompute::server::test_support::TestOptions;
using ::tensorcompute::server::test_support::ToAbsl;
using ::tensorcompute::server::test_support::WaitFor;
using ::tensorcompute::testing::GatherRequest;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::MakeIndices;
using ::tensorcompute::testing::MakeStrings;
using ::tensorcompute::testing::MakeTensor;
using ::tensorcompute::testing::StatusIs;
using ::testing::Eq;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::unique_ptr<Server> StartOrDie(const ServerOptions& options) {
  auto server = Server::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

// Requests the server answered by dropping them from the queue at their deadline. Both codes
// count: at the deadline gRPC also cancels the server-side call, and whichever of that and the
// batcher's own deadline check comes first decides the server's code (the client always sees
// DEADLINE_EXCEEDED).
int64_t DroppedAtDeadline(const Metrics& metrics, Rpc rpc) {
  return metrics.requests(rpc, StatusCode::kDeadlineExceeded) +
         metrics.requests(rpc, StatusCode::kCancelled);
}

// ---- INVALID_ARGUMENT ----

TEST(StatusTable, TensorWithDataOneByteShortIsInvalidArgument) {
  auto server = StartOrDie(TestOptions());
  ASSERT_NE(server, nullptr);
  auto stub = MakeStub(server->port());
  v1::GatherRequest request = SmallGather();
  request.mutable_params()->mutable_data()->pop_back();
  EXPECT_THAT(SendGather(*stub, request),
              StatusIs(StatusCode::kInvalidArgument,
                       Eq("params: data has 11 bytes but shape [3] of int32 needs 3 elements x 4 "
                          "bytes = 12 bytes")));
}

TEST(StatusTable, UnknownDtypeIsInvalidArgument) {
  auto server = StartOrDie(TestOptions());
  ASSERT_NE(server, nullptr);
  auto stub = MakeStub(server->port());
  v1::GatherRequest request = SmallGather();
  request.mutable_params()->set_dtype(static_cast<v1::DataType>(99));
  EXPECT_THAT(SendGather(*stub, request),
              StatusIs(StatusCode::kInvalidArgument, StartsWith("params: unknown dtype 99; ")));
  request = SmallGather();
  request.mutable_indices()->set_dtype(v1::DT_UNSPECIFIED);
  EXPECT_THAT(SendGather(*stub, request),
              StatusIs(StatusCode::kInvalidArgument, StartsWith("indices: dtype is unspecified")));
}

TEST(StatusTable, BadAxisIsInvalidArgument) {
  auto server = StartOrDie(TestOptions());
  ASSERT_NE(server, nullptr);
  auto stub = MakeStub(server->port());
  v1::GatherRequest request = SmallGather();
  request.set_axis(1);
  EXPECT_THAT(SendGather(*stub, request),
              StatusIs(StatusCode::kInvalidArgument,
                       Eq("axis = 1 is not in [-1, 1) for params of rank 1")));
}

TEST(StatusTable, OutOfRangeIndexIsInvalidArgumentNamingItsPosition) {
  auto server = StartOrDie(TestOptions());
  ASSERT_NE(server, nullptr);
  auto stub = MakeStub(server->port());
  GatherRequest gather;
  gather.params = MakeTensor<float>({3}, {1, 2, 3});
  gather.indices = MakeIndices(DataType::kInt64, {2}, {0, 7});
  EXPECT_THAT(Call(*stub, gather),
              StatusIs(StatusCode::kInvalidArgument, Eq("indices[1] = 7 is not in [-3, 3)")));

  GatherRequest gather_nd;
  gather_nd.nd = true;
  gather_nd.params = MakeStrings({3, 3}, {"a", "b", "c", "d", "e", "f", "g", "h", "i"});
  gather_nd.indices = MakeIndices(DataType::kInt32, {2, 2}, {0, 0, 1, -4});
  EXPECT_THAT(Call(*stub, gather_nd),
              StatusIs(StatusCode::kInvalidArgument, Eq("indices[1,1] = -4 is not in [-3, 3)")));
}

// ---- RESOURCE_EXHAUSTED ----

TEST(StatusTable, OutputOverMaxOutputBytesIsResourceExhausted) {
  ServerOptions options = TestOptions();
  options.max_output_bytes = int64_t{1} << 20;
  auto server = StartOrDie(options);
  ASSERT_NE(server, nullptr);
  auto stub = MakeStub(server->port());
  const int64_t row_bytes = int64_t{64} << 10;
  EXPECT_THAT(SendGather(*stub, LargeGatherRequest(row_bytes, 17)),
              StatusIs(StatusCode::kResourceExhausted,
                       Eq("output of shape [17,65536] needs 1114112 bytes, over the limit of "
                          "1048576 bytes (max_output_bytes)")));
  EXPECT_THAT(SendGather(*stub, LargeGatherRequest(row_bytes, 16)), IsOk());  // exactly 1 MiB
  EXPECT_EQ(server->metrics().batched_requests(), 1);  // refused before any compute
}

TEST(StatusTable, StringOutputOverMaxOutputBytesIsResourceExhausted) {
  // The string bytes are known only while gathering, so the executor refuses this one.
  ServerOptions options = TestOptions();
  options.max_output_bytes = int64_t{1} << 20;
  auto server = StartOrDie(options);
  ASSERT_NE(server, nullptr);
  auto stub = MakeStub(server->port());
  GatherRequest request;
  request.params = MakeStrings({2}, {std::string(600 << 10, 'x'), "y"});
  request.indices = MakeIndices(DataType::kInt32, {3}, {1, 0, 0});
  EXPECT_THAT(Call(*stub, request),
              StatusIs(StatusCode::kResourceExhausted, HasSubstr("(max_output_bytes)")));
}

TEST(StatusTable, DefaultOutputCapLeavesRoomInTheMessageLimit) {
  // max_output_bytes = 0: the cap is max_message_bytes - 64 KiB, so that every accepted output
  // fits a response.
  ServerOptions options = TestOptions();
  options.max_message_bytes = int64_t{1} << 20;
  auto server = StartOrDie(options);
  ASSERT_NE(server, nullptr);
  auto stub = MakeStub(server->port());
  EXPECT_THAT(SendGather(*stub, LargeGatherRequest(int64_t{64} << 10, 16)),
              StatusIs(StatusCode::kResourceExhausted,
                       HasSubstr("over the limit of 983040 bytes (max_output_bytes)")));
  EXPECT_THAT(SendGather(*stub, LargeGatherRequest(int64_t{64} << 10, 15)), IsOk());
}

TEST(StatusTable, RequestOverMaxMessageBytesIsResourceExhaustedByGrpc) {
  ServerOptions options = TestOptions();
  options.max_message_bytes = int64_t{1} << 20;
  auto server = StartOrDie(options);
  ASSERT_NE(server, nullptr);
  auto stub = MakeStub(server->port());
  EXPECT_THAT(SendGather(*stub, LargeGatherRequest(int64_t{2} << 20, 1)),
              StatusIs(StatusCode::kResourceExhausted, HasSubstr("larger than max")));
  // gRPC refuses the message while the service reads it: not counted, and not in flight.
  EXPECT_TRUE(WaitFor([&] { return server->metrics().inflight_requests() == 0; }));
  EXPECT_EQ(server->metrics().requests_total(), 0);
}

// ---- DEADLINE_EXCEEDED ----

TEST(StatusTable, DeadlinePassingWhileQueuedIsDeadlineExceededAndNeverComputed) {
  // A lone request waits up to max_queue_delay (10 s) for its batch to fill; its 300 ms
  // deadline passes first, and the batcher drops it then, not 10 s later.
  ServerOptions options = TestOptions();
  options.max_batch_size = 64;
  options.max_queue_delay_us = 10'000'000;
  auto server = StartOrDie(options);
  ASSERT_NE(server, nullptr);
  auto stub = MakeStub(server->port());
  EXPECT_THAT(SendGather(*stub, SmallGather(), absl::Milliseconds(300)),
              StatusIs(StatusCode::kDeadlineExceeded));
  EXPECT_TRUE(WaitFor([&] { return DroppedAtDeadline(server->metrics(), Rpc::kGather) == 1; },
                      absl::Seconds(5)));
  EXPECT_EQ(server->batcher().queue_depth(), 0);
  EXPECT_EQ(server->metrics().batched_requests(), 0);
}

TEST(StatusTable, DeadlinePassingBehindABusyExecutorIsDeadlineExceededAndNeverComputed) {
  // One executor thread, batches of one: a small GatherNd with a 20 ms deadline queued behind
  // large Gathers expires before its turn. Whether the backlog outlasts 20 ms depends on the
  // machine, so rounds grow the backlog until one round shows it: the client got
  // DEADLINE_EXCEEDED, the server dropped the GatherNd, and the executor received exactly the
  // Gathers.
  // Deadline admission off: with it, the server refuses the GatherNd up front (UNAVAILABLE,
  // "an expected wait of ... longer than the ... left") whenever its estimate of the backlog
  // is right, which on a fast machine was every round; that path has its own tests.
  // On the CPU whatever TC_TEST_DEVICE says: the backlog is one executor thread's, and a GPU
  // (four streams, a 32 MiB gather in about a millisecond) never builds one.
  ServerOptions options = TestOptions();
  options.device = "cpu";
  options.cpu_threads = 1;
  options.max_batch_size = 1;
  options.deadline_admission = false;
  auto server = StartOrDie(options);
  ASSERT_NE(server, nullptr);
  auto stub = MakeStub(server->port());
  GatherRequest small;
  small.nd = true;
  small.params = MakeTensor<int32_t>({3}, {1, 2, 3});
  small.indices = MakeIndices(DataType::kInt32, {1, 1}, {2});

  bool shown = false;
  for (int round = 0; round < 4 && !shown; ++round) {
    const int count = round == 0 ? 8 : 16;
    const Metrics& metrics = server->metrics();
    const int64_t batched_before = metrics.batched_requests();
    const int64_t dropped_before = DroppedAtDeadline(metrics, Rpc::kGatherNd);
    Backlog backlog(*stub, *server, count);
    const absl::Status small_status = Call(*stub, small, absl::Milliseconds(20)).status();
    ASSERT_EQ(backlog.WaitAllCorrect(), count) << backlog.first_failure();
    if (small_status.code() != StatusCode::kDeadlineExceeded) continue;  // backlog too short
    WaitFor([&] { return DroppedAtDeadline(metrics, Rpc::kGatherNd) > dropped_before; },
            absl::Seconds(5));
    shown = DroppedAtDeadline(metrics, Rpc::kGatherNd) == dropped_before + 1 &&
            metrics.batched_requests() == batched_before + count;
  }
  EXPECT_TRUE(shown) << "no round showed a request expiring in the queue behind work";
}

// ---- CANCELLED ----

TEST(StatusTable, CancelWhileQueuedIsCancelledAndNeverComputed) {
  // The request waits in the queue for its batch to fill (max_queue_delay 2 s) when the client
  // cancels; the batcher drops it at its next look at the queue.
  ServerOptions options = TestOptions();
  options.max_batch_size = 64;
  options.max_queue_delay_us = 2'000'000;
  auto server = StartOrDie(options);
  ASSERT_NE(server, nullptr);
  auto stub = MakeStub(server->port());
  AsyncGather call(*stub, SmallGather());
  ASSERT_TRUE(WaitFor([&] { return server->batcher().queue_depth() == 1; }));
  call.Cancel();
  ASSERT_TRUE(call.Wait());
  EXPECT_EQ(call.status().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitFor(
      [&] { return server->metrics().requests(Rpc::kGather, StatusCode::kCancelled) == 1; }));
  EXPECT_EQ(server->batcher().queue_depth(), 0);
  EXPECT_EQ(server->metrics().batched_requests(), 0);
}

// ---- UNAVAILABLE ----

TEST(StatusTable, FullQueueIsUnavailableAtOnceAndNeverComputed) {
  // Two requests wait for a batch to fill (max_queue_delay 2 s) and fill the queue.
  ServerOptions options = TestOptions();
  options.max_batch_size = 64;
  options.max_queue_delay_us = 2'000'000;
  options.queue_capacity = 2;
  auto server = StartOrDie(options);
  ASSERT_NE(server, nullptr);
  auto stub = MakeStub(server->port());
  AsyncGather first(*stub, SmallGather());
  AsyncGather second(*stub, SmallGather());
  ASSERT_TRUE(WaitFor([&] { return server->batcher().queue_depth() == 2; }));
  EXPECT_THAT(SendGather(*stub, SmallGather()),
              StatusIs(StatusCode::kUnavailable,
                       Eq("server overloaded: 2 requests queued; retry with backoff")));
  ASSERT_TRUE(first.Wait());
  ASSERT_TRUE(second.Wait());
  EXPECT_TRUE(first.status().ok()) << first.status().error_message();
  EXPECT_TRUE(second.status().ok()) << second.status().error_message();
  EXPECT_EQ(server->metrics().requests(Rpc::kGather, StatusCode::kUnavailable), 1);
  EXPECT_EQ(server->metrics().batched_requests(), 2);
}

TEST(StatusTable, FloodOfLargeRequestsGetsOkOrOverloadedAndOnlyOkOnesAreComputed) {
  // One executor thread, batches of one, one queue slot: concurrent large requests overflow.
  // Every answer is a correct output or "server overloaded"; the executor saw only the OK ones.
  // The byte budget must not be what refuses them: 12 reads in progress, each holding a credit
  // of twice max_message_bytes, filled the default 1 GiB in about one run of ten. 16 MiB
  // messages (these are 8 MiB) keep the credits at 384 MiB.
  ServerOptions options = TestOptions();
  options.cpu_threads = 1;
  options.max_batch_size = 1;
  options.queue_capacity = 1;
  options.max_message_bytes = int64_t{16} << 20;
  auto server = StartOrDie(options);
  ASSERT_NE(server, nullptr);
  auto stub = MakeStub(server->port());
  const int64_t row_bytes = int64_t{1} << 20;
  const int64_t rows = 8;
  int64_t ok = 0;
  int64_t overloaded = 0;
  for (int round = 0; round < 5 && overloaded == 0; ++round) {
    std::vector<std::unique_ptr<AsyncGather>> calls;
    for (int i = 0; i < 12; ++i) {
      calls.push_back(std::make_unique<AsyncGather>(*stub, LargeGatherRequest(row_bytes, rows)));
    }
    for (auto& call : calls) {
      ASSERT_TRUE(call->Wait());
      if (call->status().ok()) {
        ++ok;
        EXPECT_TRUE(IsLargeGatherAnswer(call->response(), row_bytes, rows));
      } else {
        ++overloaded;
        EXPECT_THAT(ToAbsl(call->status()),
                    StatusIs(StatusCode::kUnavailable, StartsWith("server overloaded: 1 requests "
                                                                  "queued")));
      }
    }
  }
  EXPECT_GT(overloaded, 0);
  EXPECT_GT(ok, 0);
  EXPECT_EQ(server->metrics().requests(Rpc::kGather, StatusCode::kUnavailable), overloaded);
  EXPECT_EQ(server->metrics().batched_requests(), ok);
}

TEST(StatusTable, RequestsArrivingDuringTheDrainAreUnavailable) {
  // Accepted work on a one-thread executor keeps the drain going for a while. Meanwhile
  // clients, on the existing connection and on their own, send requests with a bad index
  // dtype, which the server answers at once (INVALID_ARGUMENT, never queued) until it drains:
  // each client stops at its first other answer, which must be UNAVAILABLE (the service's
  // "server is draining", or gRPC's own refusal once it has shut down).
  ServerOptions options = TestOptions();
  options.cpu_threads = 1;
  options.max_batch_size = 1;
  auto server = StartOrDie(options);
  ASSERT_NE(server, nullptr);
  auto shared = MakeStub(server->port());
  Backlog accepted(*shared, *server, 8);
  v1::GatherRequest invalid = SmallGather();
  invalid.mutable_indices()->set_dtype(v1::DT_FLOAT32);

  constexpr int kClients = 8;
  std::vector<absl::Status> first_refusal(kClients);
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      std::unique_ptr<Stub> own = c % 2 == 0 ? MakeStub(server->port()) : nullptr;
      Stub& stub = own != nullptr ? *own : *shared;
      absl::Status status;
      do {
        status = SendGather(stub, invalid, absl::Seconds(10));
      } while (status.code() == StatusCode::kInvalidArgument);
      first_refusal[c] = status;
    });
  }
  std::thread drain([&] { server->Drain(); });
  for (std::thread& t : clients) t.join();
  for (int c = 0; c < kClients; ++c) {
    EXPECT_THAT(first_refusal[c], StatusIs(StatusCode::kUnavailable))
        << "client " << c << (c % 2 == 0 ? " (own connection)" : " (shared connection)");
  }
  EXPECT_EQ(accepted.WaitAllCorrect(), 8) << accepted.first_failure();
  drain.join();
}

// ---- UNIMPLEMENTED ----

TEST(StatusTable, UnknownMethodIsUnimplemented) {
  auto server = StartOrDie(TestOptions());
  ASSERT_NE(server, nullptr);
  grpc::GenericStub generic(MakeChannel(server->port()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  grpc::Slice empty_message("");  // an empty protobuf message
  grpc::ByteBuffer request(&empty_message, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  generic.UnaryCall(&context, "/tensorcompute.v1.TensorCompute/Scatter", grpc::StubOptions(),
                    &request, &response, [&](grpc::Status s) {
                      status = std::move(s);
                      done.Notify();
                    });
  done.WaitForNotification();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << status.error_message();
}

}  // namespace
}  // namespace tensorcompute::server
