// File: tests/bench/rpc_loop.h
//
// What the RPC benchmarks (rpc_bench, pooled_rpc_bench) share: client channels to a server,
// each its own HTTP/2 connection (Target, Connect); a closed loop keeping C calls outstanding
// through gRPC's generic stub, with warm-up, a measured window, latency percentiles and the
// process's CPU per call (ClosedLoop, PointResult); medians and the tables' number formats; and
// a tensorcompute-server holding a resident float32 table of random rows (StartWithTable).
//
// Thread-safety: a ClosedLoop's callbacks run on gRPC's threads; its Run is called from one
// thread. Everything else is plain functions.

#ifndef TENSORCOMPUTE_TESTS_BENCH_RPC_LOOP_H_
#define TENSORCOMPUTE_TESTS_BENCH_RPC_LOOP_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/byte_buffer.h"
#include <sys/resource.h>

#include "core/tensor.h"
#include "core/tensor_registry.h"
#include "server/server.h"

namespace tensorcompute::bench {

inline constexpr int kMessageBytes = 64 << 20;
inline constexpr char kGatherMethod[] = "/tensorcompute.v1.TensorCompute/Gather";
inline constexpr char kEmbeddingBagMethod[] = "/tensorcompute.v1.TensorCompute/EmbeddingBag";

// Client side of one server: --channels channels, each forced onto its own connection (a
// local subchannel pool and a distinct channel arg; otherwise equal channels share one).
struct Target {
  std::string name;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
};

inline std::unique_ptr<Target> Connect(const std::string& name, int port, int num_channels) {
  auto t = std::make_unique<Target>();
  t->name = name;
  for (int i = 0; i < num_channels; ++i) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(kMessageBytes);
    args.SetMaxSendMessageSize(kMessageBytes);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("tensorcompute.bench_channel", i);
    auto channel = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                             grpc::InsecureChannelCredentials(), args);
    if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
      return nullptr;
    }
    t->stubs.push_back(std::make_unique<grpc::GenericStub>(channel));
    t->channels.push_back(std::move(channel));
  }
  return t;
}

struct PointResult {
  double qps = 0;
  double p50_ms = 0;
  double p99_ms = 0;
  double cpu_cores = 0;  // process CPU seconds per wall second (client and both servers)
  double cpu_us_per_call = 0;
  double mean_batch = 0;  // tensorcompute only: requests per batch in the window
  int64_t calls = 0;      // OK calls completed in the measured window
  double seconds = 0;     // length of the measured window
  int64_t failed = 0;     // non-OK answers, warm-up included
  std::string first_error;
};

inline double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// Keeps `concurrency` calls outstanding until stopped. Each slot issues its next call from
// the completion callback of its previous one, so a slot's fields are only touched by one
// call at a time; the counters shared between slots are atomics or under mu_.
class ClosedLoop {
 public:
  // What the client does with each OK response, on gRPC's callback thread before the slot's
  // next call: false counts the call as failed. Empty: nothing (the response is not parsed).
  using OnResponse = std::function<bool(grpc::ByteBuffer&)>;

  // The ClosedLoop must outlive the last callback's return, after Run(): keep it alive.
  // Each slot sends `requests` in turn (from a different start), so that calls vary, to
  // `method` ("/tensorcompute.v1.TensorCompute/Gather").
  ClosedLoop(Target* target, const std::vector<grpc::ByteBuffer>& requests, int concurrency,
             int64_t warmup_calls, std::string method = kGatherMethod,
             OnResponse on_response = nullptr)
      : warmup_calls_(std::max<int64_t>(1, warmup_calls)),
        method_(std::move(method)),
        on_response_(std::move(on_response)),
        slots_(concurrency) {
    for (int i = 0; i < concurrency; ++i) {
      slots_[i].stub = target->stubs[i % target->stubs.size()].get();
      slots_[i].requests = requests;  // shares the slices, copies no bytes
      slots_[i].next = static_cast<size_t>(i);
    }
  }

  // Warms up for `warmup` and until every slot has completed warmup_calls calls (large
  // messages need a few rounds before heap and connections settle), then measures for
  // `duration` and until `min_calls` calls completed (at most max_duration), then stops.
  PointResult Run(absl::Duration warmup, absl::Duration duration, int64_t min_calls,
                  absl::Duration max_duration, const server::Server* tc) {
    {
      absl::MutexLock lock(&mu_);
      running_ = static_cast<int>(slots_.size());
    }
    const absl::Time start = absl::Now();
    for (Slot& s : slots_) Issue(&s);
    while (absl::Now() - start < warmup ||
           warm_slots_.load() < static_cast<int64_t>(slots_.size())) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    const int64_t batches0 = tc ? tc->metrics().batches() : 0;
    const int64_t batched0 = tc ? tc->metrics().batched_requests() : 0;
    const double cpu0 = CpuSeconds();
    const absl::Time t0 = absl::Now();
    phase_.store(kMeasure);
    while ((absl::Now() - t0 < duration || measured_.load() < min_calls) &&
           absl::Now() - t0 < max_duration) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    phase_.store(kStop);
    const absl::Time t1 = absl::Now();
    const double cpu1 = CpuSeconds();
    const int64_t batches1 = tc ? tc->metrics().batches() : 0;
    const int64_t batched1 = tc ? tc->metrics().batched_requests() : 0;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](int* running) { return *running == 0; }, &running_));
    }

    PointResult r;
    std::vector<double> lat;
    for (const Slot& s : slots_)
      lat.insert(lat.end(), s.latencies_ms.begin(), s.latencies_ms.end());
    const double secs = absl::ToDoubleSeconds(t1 - t0);
    r.calls = static_cast<int64_t>(lat.size());
    r.seconds = secs;
    r.qps = lat.size() / secs;
    r.p50_ms = Percentile(lat, 0.50);
    r.p99_ms = Percentile(lat, 0.99);
    r.cpu_cores = (cpu1 - cpu0) / secs;
    r.cpu_us_per_call = lat.empty() ? 0 : (cpu1 - cpu0) * 1e6 / lat.size();
    if (batches1 > batches0) {
      r.mean_batch = static_cast<double>(batched1 - batched0) / (batches1 - batches0);
    }
    absl::MutexLock lock(&mu_);
    r.failed = failed_;
    r.first_error = first_error_;
    return r;
  }

 private:
  enum Phase { kWarmup, kMeasure, kStop };

  struct Slot {
    grpc::GenericStub* stub = nullptr;
    std::vector<grpc::ByteBuffer> requests;
    size_t next = 0;  // of requests, for the next call
    grpc::ByteBuffer response;
    std::unique_ptr<grpc::ClientContext> context;
    std::chrono::steady_clock::time_point start;
    std::vector<double> latencies_ms;  // calls completed in the measured window
    int64_t completed = 0;             // calls completed, any phase
  };

  static double Percentile(std::vector<double>& v, double q) {
    if (v.empty()) return 0;
    auto nth = v.begin() + static_cast<std::ptrdiff_t>(q * (v.size() - 1));
    std::nth_element(v.begin(), nth, v.end());
    return *nth;
  }

  void Issue(Slot* s) {
    s->context = std::make_unique<grpc::ClientContext>();
    s->context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    s->response.Clear();
    s->start = std::chrono::steady_clock::now();
    grpc::ByteBuffer* request = &s->requests[s->next++ % s->requests.size()];
    s->stub->UnaryCall(s->context.get(), method_, grpc::StubOptions(), request, &s->response,
                       [this, s](grpc::Status status) { OnDone(s, status); });
  }

  void OnDone(Slot* s, grpc::Status status) {
    // The client's own work on the answer counts in the call's latency.
    if (status.ok() && on_response_ && !on_response_(s->response)) {
      status = grpc::Status(grpc::StatusCode::DATA_LOSS, "the client's use of the answer failed");
    }
    const auto end = std::chrono::steady_clock::now();
    const int phase = phase_.load();
    if (!status.ok()) {
      absl::MutexLock lock(&mu_);
      if (failed_++ == 0) {
        first_error_ = absl::StrCat("status ", status.error_code(), ": ", status.error_message());
      }
    } else if (phase == kMeasure) {
      s->latencies_ms.push_back(std::chrono::duration<double, std::milli>(end - s->start).count());
      measured_.fetch_add(1);
    }
    if (++s->completed == warmup_calls_) warm_slots_.fetch_add(1);
    if (phase != kStop) return Issue(s);
    s->response.Clear();
    absl::MutexLock lock(&mu_);
    --running_;
  }

  const int64_t warmup_calls_;
  const std::string method_;
  const OnResponse on_response_;
  std::vector<Slot> slots_;
  std::atomic<int> phase_{kWarmup};
  std::atomic<int64_t> warm_slots_{0};
  std::atomic<int64_t> measured_{0};
  absl::Mutex mu_;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t failed_ ABSL_GUARDED_BY(mu_) = 0;
  std::string first_error_ ABSL_GUARDED_BY(mu_);
};

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

inline std::string Bytes(int64_t b) {
  if (b < 1024) return absl::StrCat(b, " B");
  if (b < (1 << 20)) return absl::StrFormat("%.3g KiB", b / 1024.0);
  return absl::StrFormat("%.3g MiB", b / 1048576.0);
}

inline std::string Ms(double ms) {
  return ms < 10 ? absl::StrFormat("%.2f", ms) : absl::StrFormat("%.0f", ms);
}

template <typename F>
double MedianOf(const std::vector<PointResult>& rs, F f) {
  std::vector<double> v;
  for (const PointResult& r : rs) v.push_back(f(r));
  return Median(v);
}

// A [rows, row_floats] float32 table, the same every time it is made: random bytes (NaN and
// inf included), or with `finite`, random values in [-1, 1) (what embeddings hold, and sums of
// which stay finite).
inline core::Tensor MakeTable(int64_t rows, int64_t row_floats, bool finite = false) {
  absl::StatusOr<core::Tensor> table =
      core::Tensor::Allocate(core::DataType::kFloat32, {rows, row_floats});
  absl::Span<uint8_t> bytes = table->mutable_bytes();
  std::mt19937_64 rng(11);
  for (size_t i = 0; i + 8 <= bytes.size(); i += 8) {
    uint64_t x = rng();
    if (finite) {
      // Two floats in [-1, 1): sign and exponent 0x3f8/0xbf8 (1.0 to 2.0), minus 1 after.
      const float lo = static_cast<float>(x & 0xffffff) / 8388608.0f - 1.0f;
      const float hi = static_cast<float>((x >> 32) & 0xffffff) / 8388608.0f - 1.0f;
      std::memcpy(&x, &lo, 4);
      std::memcpy(reinterpret_cast<uint8_t*>(&x) + 4, &hi, 4);
    }
    std::memcpy(bytes.data() + i, &x, 8);
  }
  return *std::move(table);
}

// A server on 127.0.0.1:0 with `options` and MakeTable(rows, row_floats, finite) resident as
// `name`.
inline absl::StatusOr<std::unique_ptr<server::Server>> StartWithTable(server::ServerOptions options,
                                                                      const std::string& name,
                                                                      int64_t rows,
                                                                      int64_t row_floats,
                                                                      bool finite = false) {
  options.listen = "127.0.0.1:0";
  const int64_t bytes = rows * row_floats * 4;
  options.max_resident_bytes = bytes + 1;
  absl::StatusOr<std::unique_ptr<server::Server>> s = server::Server::Start(options);
  if (!s.ok()) return s.status();
  core::TensorRegistry& registry = (*s)->registry();
  absl::StatusOr<core::TensorRegistry::Reservation> reservation = registry.Reserve(name, bytes);
  if (!reservation.ok()) return reservation.status();
  absl::Status put = registry
                         .Put(name, MakeTable(rows, row_floats, finite), core::DeviceCopy{}, false,
                              *std::move(reservation))
                         .status();
  if (!put.ok()) return put;
  return s;
}

}  // namespace tensorcompute::bench

#endif  // TENSORCOMPUTE_TESTS_BENCH_RPC_LOOP_H_
