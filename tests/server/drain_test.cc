// Graceful drain. Mostly of the real binary (TC_SERVER_BINARY, run as a subprocess): on SIGTERM
// or SIGINT every accepted request is answered OK, new requests get UNAVAILABLE, and the process
// exits 0, saying so in its log. One in-process test covers what needs the server's internals
// (a request held back by max_queue_delay when the drain begins).

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/batching/batcher.h"
#include "core/cuda/cuda_executor.h"
#include "server/server.h"
#include "tests/server/test_server.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/status_matchers.h"

#ifndef TC_SERVER_BINARY
#error "TC_SERVER_BINARY must name the tensorcompute-server binary (see CMakeLists.txt)"
#endif

namespace tensorcompute::server {
namespace {

using ::tensorcompute::server::test_support::AsyncGather;
using ::tensorcompute::server::test_support::IsLargeGatherAnswer;
using ::tensorcompute::server::test_support::LargeGatherRequest;
using ::tensorcompute::server::test_support::MakeStub;
using ::tensorcompute::server::test_support::PathFromEnvOr;
using ::tensorcompute::server::test_support::SendGather;
using ::tensorcompute::server::test_support::SmallGather;
using ::tensorcompute::server::test_support::Stub;
using ::tensorcompute::server::test_support::ToAbsl;
using ::tensorcompute::server::test_support::WaitFor;
using ::tensorcompute::testing::StatusIs;
using ::testing::HasSubstr;

// tensorcompute-server as a child process whose stdout and stderr are collected. The child is
// killed if this process dies (PR_SET_PDEATHSIG) or the test ends with it still running.
class ServerProcess {
 public:
  explicit ServerProcess(const std::vector<std::string>& flags) {
    std::vector<std::string> args = {PathFromEnvOr("TC_SERVER_BINARY", TC_SERVER_BINARY)};
    args.insert(args.end(), flags.begin(), flags.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {  // the child: only async-signal-safe calls until exec
      dup2(fds[1], STDOUT_FILENO);
      dup2(fds[1], STDERR_FILENO);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(fds[1]);
    reader_ = std::thread([this, fd = fds[0]] {
      char buffer[4096];
      while (true) {
        const ssize_t n = read(fd, buffer, sizeof(buffer));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        absl::MutexLock lock(&mu_);
        output_.append(buffer, n);
      }
      close(fd);
    });
  }

  ~ServerProcess() {
    if (pid_ > 0 && !exit_code_.has_value()) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (reader_.joinable()) reader_.join();
  }

  bool started() const { return pid_ > 0; }

  std::string output() const {
    absl::MutexLock lock(&mu_);
    return output_;
  }

  // Waits until the output contains `text`; returns whether it does.
  bool WaitForOutput(const std::string& text, absl::Duration timeout = absl::Seconds(30)) {
    return WaitFor([&] { return output().find(text) != std::string::npos; }, timeout);
  }

  // The port from the startup line ("... port=NNNN device=..."), or 0 if it did not come in
  // time.
  int WaitForPort(absl::Duration timeout = absl::Seconds(30)) {
    int port = 0;
    WaitFor(
        [&] {
          const std::string text = output();
          const size_t start = text.find(" port=");
          if (start == std::string::npos) return false;
          const size_t end = text.find_first_not_of("0123456789", start + 6);
          if (end == std::string::npos) return false;  // the line is still being written
          return absl::SimpleAtoi(text.substr(start + 6, end - start - 6), &port);
        },
        timeout);
    return port;
  }

  void Signal(int signal) { kill(pid_, signal); }

  // Waits for the process to exit; returns its exit code (128 + n if killed by signal n), or
  // nullopt if it is still running after `timeout`. Once it has exited, output() holds all it
  // wrote: the reader has read the pipe to its end.
  std::optional<int> WaitForExit(absl::Duration timeout) {
    WaitFor(
        [&] {
          int status = 0;
          if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
          exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
          return true;
        },
        timeout);
    if (exit_code_.has_value() && reader_.joinable()) reader_.join();
    return exit_code_;
  }

 private:
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
  std::thread reader_;
  mutable absl::Mutex mu_;
  std::string output_ ABSL_GUARDED_BY(mu_);
};

TEST(Drain, SigtermAnswersInFlightRequestsRefusesNewOnesAndExitsZero) {
  // In-flight requests wait in the queue for their batch to fill (max_queue_delay 20 s) when
  // SIGTERM arrives, so they are still unanswered while the drain runs. The queue holds four.
  ServerProcess process({"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0", "--cpu_threads=1",
                         "--max_batch_size=64", "--max_queue_delay_us=20000000",
                         "--queue_capacity=4", "--drain_timeout_s=30"});
  ASSERT_TRUE(process.started());
  const int port = process.WaitForPort();
  ASSERT_GT(port, 0) << process.output();
  EXPECT_THAT(process.output(), HasSubstr("listening on 127.0.0.1:"));

  // Four requests with 4 MiB outputs, then probes until one is refused as overloaded: the
  // queue is then full of accepted requests, all still waiting. (A probe that is accepted
  // before that counts as in flight too, and a late large request is then the one refused.)
  auto stub = MakeStub(port);
  const int64_t row_bytes = int64_t{64} << 10;
  const int64_t rows = 64;
  std::vector<std::unique_ptr<AsyncGather>> large;
  std::vector<std::unique_ptr<AsyncGather>> probes;
  for (int i = 0; i < 4; ++i) {
    large.push_back(std::make_unique<AsyncGather>(*stub, LargeGatherRequest(row_bytes, rows)));
  }
  bool full = false;
  for (int i = 0; i < 100 && !full; ++i) {
    probes.push_back(std::make_unique<AsyncGather>(*stub, SmallGather()));
    // Refusals come back at once; 1 s without an answer (of 20 s of queue delay) means it
    // was accepted, even on a loaded machine (50 ms was not always enough there).
    if (!probes.back()->Wait(absl::Seconds(1))) continue;  // accepted: in flight
    const absl::Status refused = ToAbsl(probes.back()->status());
    ASSERT_THAT(refused, StatusIs(absl::StatusCode::kUnavailable,
                                  HasSubstr("server overloaded: 4 requests queued")));
    probes.pop_back();
    full = true;
  }
  ASSERT_TRUE(full) << "the queue never filled";

  process.Signal(SIGTERM);
  ASSERT_TRUE(process.WaitForOutput("draining")) << process.output();
  // New requests, on a new connection, then on the existing one: UNAVAILABLE, whether the
  // service answers "server is draining" or gRPC refuses once it is shutting down.
  EXPECT_THAT(SendGather(*MakeStub(port), SmallGather()), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(SendGather(*stub, SmallGather()), StatusIs(absl::StatusCode::kUnavailable));

  int ok = 0;
  for (const auto& call : large) {
    ASSERT_TRUE(call->Wait(absl::Seconds(30)));
    if (call->status().ok()) {
      ++ok;
      EXPECT_TRUE(IsLargeGatherAnswer(call->response(), row_bytes, rows));
    } else {  // arrived after the probes had filled the queue
      EXPECT_THAT(ToAbsl(call->status()),
                  StatusIs(absl::StatusCode::kUnavailable, HasSubstr("server overloaded")));
    }
  }
  for (const auto& call : probes) {
    ASSERT_TRUE(call->Wait(absl::Seconds(30)));
    EXPECT_TRUE(call->status().ok()) << call->status().error_message();
    ++ok;
  }
  EXPECT_EQ(ok, 4);  // every accepted request, the whole queue, answered OK
  EXPECT_EQ(process.WaitForExit(absl::Seconds(30)), 0) << process.output();
  EXPECT_THAT(process.output(), HasSubstr("answering 4 queued"));
  EXPECT_THAT(process.output(), HasSubstr("exiting"));
  // Refusals are logged with the RPC, the code and the message.
  EXPECT_THAT(process.output(), HasSubstr("rpc=Gather code=UNAVAILABLE message=\"server "
                                          "overloaded: 4 requests queued"));
}

TEST(Drain, AnswersQueuedRequestsAtOnceAndFinishesWithinTheDrainTimeout) {
  // In process: a request waits for its batch to fill (max_queue_delay 6 s) when the drain
  // begins. Draining must dispatch it at once (Batcher::Stop flushes the queue) and answer it
  // OK, and Drain() must return within drain_timeout (1 s; 2 s of slack for a loaded machine),
  // not when the delay runs out.
  ServerOptions options = test_support::TestOptions();
  options.max_batch_size = 64;
  options.max_queue_delay_us = 6'000'000;
  options.drain_timeout = absl::Seconds(1);
  auto server = Server::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = MakeStub((*server)->port());
  AsyncGather accepted(*stub, SmallGather());
  ASSERT_TRUE(WaitFor([&] { return (*server)->batcher().queue_depth() == 1; }));
  const absl::Time start = absl::Now();
  (*server)->Drain();
  EXPECT_LT(absl::Now() - start, options.drain_timeout + absl::Seconds(2));
  ASSERT_TRUE(accepted.Wait());
  EXPECT_TRUE(accepted.status().ok())
      << accepted.status().error_code() << ": " << accepted.status().error_message();
  EXPECT_EQ((*server)->metrics().batched_requests(), 1);
}

TEST(Drain, NoticePeriodKeepsConnectionsOpenAndAnswersUnavailable) {
  // During the notice (drain_notice), a client on an open connection is answered UNAVAILABLE
  // by the service (retryable), not CANCELLED by a closing gRPC server and not refused; and
  // the connections close only after it.
  ServerOptions options = test_support::TestOptions();
  options.drain_notice = absl::Milliseconds(800);
  auto server = Server::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = MakeStub((*server)->port());
  ASSERT_TRUE(SendGather(*stub, SmallGather()).ok());
  const absl::Time start = absl::Now();
  std::thread drain([&] { (*server)->Drain(); });
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_THAT(SendGather(*stub, SmallGather()),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("server is draining")));
  drain.join();
  EXPECT_GE(absl::Now() - start, options.drain_notice);
}

TEST(Drain, SigintWithNothingInFlightExitsZeroPromptly) {
  ServerProcess process(
      {"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0", "--cpu_threads=1"});
  ASSERT_TRUE(process.started());
  ASSERT_GT(process.WaitForPort(), 0) << process.output();
  process.Signal(SIGINT);
  EXPECT_EQ(process.WaitForExit(absl::Seconds(30)), 0) << process.output();
  EXPECT_THAT(process.output(), HasSubstr("received SIGINT, draining"));
  EXPECT_THAT(process.output(), HasSubstr("exiting"));
}

TEST(Drain, DeviceGpuWithoutAGpuExitsNonZeroWithAMessage) {
  if (cuda::CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present";
  ServerProcess process({"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0", "--device=gpu"});
  ASSERT_TRUE(process.started());
  const std::optional<int> code = process.WaitForExit(absl::Seconds(30));
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 1);
  EXPECT_THAT(process.output(), HasSubstr("--device=gpu: no usable GPU"));
}

TEST(Drain, BadFlagValueExitsNonZeroWithAMessage) {
  ServerProcess process({"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0", "--device=tpu"});
  ASSERT_TRUE(process.started());
  const std::optional<int> code = process.WaitForExit(absl::Seconds(30));
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 2);  // a flag value out of its range (ServerOptions::Validate)
  EXPECT_THAT(process.output(),
              HasSubstr("bad flag: device must be auto, cpu or gpu, not \"tpu\""));
}

}  // namespace
}  // namespace tensorcompute::server
