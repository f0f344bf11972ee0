// File: tests/server/test_server.h
//
// What the server tests share: an in-process server on 127.0.0.1:0, real gRPC channels to it,
// requests built from tests/testing's GatherRequest, answers turned back into absl::Status /
// core::Tensor so that tests/testing's reference and matchers apply, an asynchronous call for
// requests that must stay in flight, and a polling wait (never a fixed sleep as a check).
// Thread-safety: free functions are thread-safe; an AsyncGather or Backlog belongs to one test
// thread.

#ifndef TENSORCOMPUTE_TESTS_SERVER_TEST_SERVER_H_
#define TENSORCOMPUTE_TESTS_SERVER_TEST_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"
#include "tensorcompute/v1/tensorcompute.grpc.pb.h"

#include "core/tensor.h"
#include "server/server.h"
#include "tests/testing/random_embedding_bag.h"
#include "tests/testing/random_tensor.h"

namespace tensorcompute::server::test_support {

using Stub = v1::TensorCompute::Stub;

// Loopback, port 0, device "cpu" (or $TC_TEST_DEVICE), two CPU threads, a 30 s drain
// timeout; everything else at its default.
ServerOptions TestOptions();

// `built`, a path the build compiled in (the server binary, a doc of the source tree), unless
// the environment variable `env_name` names another: the GPU kit (tools/gpu_kit.sh) runs these
// tests on a machine where neither the build folder nor the source tree is where it was.
std::string PathFromEnvOr(const char* env_name, const char* built);

// Starts an in-process server with `options`. Returns it, or, when it does not start, fails
// the calling test (non-fatally, printing the status) and returns null.
std::unique_ptr<Server> StartServer(const ServerOptions& options = TestOptions());

// A new channel (its own connection) to 127.0.0.1:`port` with no client-side limit on
// received messages (the default 4 MiB would refuse large outputs before the server's limits).
std::shared_ptr<grpc::Channel> MakeChannel(int port);
std::unique_ptr<Stub> MakeStub(int port);

// The same code and message as absl::Status.
absl::Status ToAbsl(const grpc::Status& status);

// The wire form of `request` (see tests/testing/random_tensor.h).
v1::GatherRequest ToGatherProto(const testing::GatherRequest& request);
v1::GatherNdRequest ToGatherNdProto(const testing::GatherRequest& request);
// The wire form of EmbeddingBag call `c` (tests/testing/random_embedding_bag.h): params inline,
// or `params_name` (a resident table's) instead when it is not empty.
v1::EmbeddingBagRequest ToEmbeddingBagProto(const testing::EmbeddingBagCase& c,
                                            const std::string& params_name = "");

// Sends `request` as Gather or GatherNd (request.nd) with a deadline `timeout` from now.
// Returns the decoded output, or the RPC's status.
absl::StatusOr<core::Tensor> Call(Stub& stub, const testing::GatherRequest& request,
                                  absl::Duration timeout = absl::Seconds(60));

// Stores `tensor` as `name` on the server (replacing one of that name), stored as `storage`,
// in messages of at most `chunk_bytes` of data (0: one message); returns the RPC's status.
absl::Status PutTensor(Stub& stub, const std::string& name, const core::Tensor& tensor,
                       v1::TableStorage storage = v1::AS_IS, int64_t chunk_bytes = 0);

// A valid, tiny Gather: params int32 [3] = {10, 20, 30}, indices int32 [2] = {2, 0}.
v1::GatherRequest SmallGather();

// Sends `request` as a Gather with a deadline `timeout` from now; returns the RPC's status.
absl::Status SendGather(Stub& stub, const v1::GatherRequest& request,
                        absl::Duration timeout = absl::Seconds(60));

// A Gather whose output is large and cheap to check: params uint8 [1, row_bytes] holding
// RowByte(i) at column i, indices int32 [rows] all 0 (or -1, the same row), axis 0. The output
// is `rows` copies of the params row: rows * row_bytes bytes from a request of ~row_bytes.
v1::GatherRequest LargeGatherRequest(int64_t row_bytes, int64_t rows);
inline uint8_t RowByte(int64_t i) { return static_cast<uint8_t>((i * 131 + 7) % 251); }

// Whether `response` is the exact answer to LargeGatherRequest(row_bytes, rows).
bool IsLargeGatherAnswer(const v1::GatherResponse& response, int64_t row_bytes, int64_t rows);

// One unary Gather in flight on the callback API; owns everything the call needs.
class AsyncGather {
 public:
  // Starts Gather(request) on `stub` with a deadline `timeout` from now.
  AsyncGather(Stub& stub, v1::GatherRequest request, absl::Duration timeout = absl::Seconds(60));
  // Cancels the call if it is still running and waits for it to finish.
  ~AsyncGather();

  // Blocks until the call finished or `timeout` passed; returns whether it finished.
  bool Wait(absl::Duration timeout = absl::Seconds(60));
  bool done() const { return done_.HasBeenNotified(); }
  // REQUIRES: done().
  const grpc::Status& status() const { return status_; }
  const v1::GatherResponse& response() const { return response_; }

  void Cancel() { context_.TryCancel(); }

 private:
  grpc::ClientContext context_;
  v1::GatherRequest request_;
  v1::GatherResponse response_;
  grpc::Status status_;
  absl::Notification done_;
};

// Work that keeps a server's executor busy for a while (tens to hundreds of milliseconds):
// `count` large Gathers (32 MiB outputs) in flight. Meant for servers with cpu_threads = 1 and
// max_batch_size = 1, where each one is a batch of its own and the rest wait in the queue.
class Backlog {
 public:
  static constexpr int64_t kRowBytes = int64_t{1} << 20;
  static constexpr int64_t kRows = 32;

  // Sends the requests and waits until the server has accepted all of them (they are queued
  // or on the executor). REQUIRES: nothing else is sent to `server` meanwhile.
  Backlog(Stub& stub, const Server& server, int count);

  // Waits for every answer; returns how many were OK and correct.
  int WaitAllCorrect();
  // After WaitAllCorrect: what the first wrong answer was ("" if none).
  const std::string& first_failure() const { return first_failure_; }

 private:
  std::vector<std::unique_ptr<AsyncGather>> calls_;
  std::string first_failure_;
};

// Calls `condition` every few milliseconds until it returns true or `timeout` passes.
// Returns its last result.
bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout = absl::Seconds(30));

}  // namespace tensorcompute::server::test_support

#endif  // TENSORCOMPUTE_TESTS_SERVER_TEST_SERVER_H_
