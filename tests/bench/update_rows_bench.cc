// Live tables (issue 41): UpdateRows measured in one process, three ways (docs/performance.md,
// "Live tables").
//
// A tensorcompute-server (server::Server::Start, default options, 127.0.0.1:0) holds a float32
// [--table_rows, 64] table of finite random values (256 B rows) named "live". Every client below
// has its own channel, each its own HTTP/2 connection (rpc_loop.h's Connect).
//
// 1. Throughput. A stream of --stream_mib MiB of rows in messages of --message_rows rows (4096
//    rows: 1 MiB of values, plus 32 KiB of int64 indices), written as put_stream_bench writes
//    PutTensor: the messages (random distinct rows each, finite values) are serialized before
//    anything is timed, a repeat opens the stream, writes them in order, half-closes and waits
//    for the answer, which must count every row and message and advance the sequence by the
//    messages. The ceiling is the same client writing the same messages to a sink: a bare gRPC
//    callback service in this process whose UpdateRows parses each message (as any generated
//    service does) and drops it. The two alternate which goes first; --repeats times; MB/s of
//    rows (10^6 B), medians, and the median of the per-repeat ratios (target >= 0.8).
// 2. Lookups while rows change. A closed loop of --concurrency Gather calls by params_name
//    (--lookup_rows random rows each, pre-serialized, answers not parsed; rpc_loop.h's
//    ClosedLoop) for --duration_s after --warmup_s, while --writers paced writer threads stream
//    UpdateRows messages of --update_rows random rows (by default a hundredth of the rate, within
//    [1000, 4000]) at --update_rates rows/s in all, 0 being the same lookups with no updates
//    (the baseline, first in the list). One writer stream lasts the whole point; a writer that
//    falls behind its schedule sends at once (the stream's flow control then paces it), so the rate
//    achieved, counted by the server (the table's updated rows over the point), is what the
//    machine allows. Points rotate their order every repetition; medians of --repetitions, and
//    the median of the per-repetition p99 and QPS ratios against no updates (target: p99 at most
//    1.5x at 100k rows/s).
// 3. Freshness. --freshness_updates times: a one-message UpdateRows stream writes one random row
//    to a new value (every element the same, unique per update) on one connection; from the
//    moment its answer (the acknowledgement) arrives, a lookup on another connection polls that
//    row until it holds the new value in every element ("poll"), or asks with min_sequence = the
//    acknowledged sequence, retrying FAILED_PRECONDITION, and checks the value ("min_sequence").
//    p50/p99/max of ack-to-seen, the acknowledgement's own latency, the polls per update, and
//    the server's tensorcompute_table_update_visible_seconds (arrival to visible) over the phase:
//    its mean and the bucket bounds holding p50 and p99.
//
// Every non-OK answer is counted; any makes the exit status 1.
//
// Run: build/tests/bench/update_rows_bench [--table_rows=262144 --repeats=21 --stream_mib=64
//        --message_rows=4096 --concurrency=16 --lookup_rows=256 --update_rows=0
//        --update_rates=0,10000,100000,1000000 --writers=1 --repetitions=5 --duration_s=2
//        --freshness_updates=200 --parts=throughput,lookups,freshness]
//      Markdown tables on stdout (docs/performance.md takes them verbatim), progress on stderr.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/server_callback.h"
#include "spdlog/spdlog.h"
#include "tensorcompute/v1/tensorcompute.grpc.pb.h"

#include "core/request_stats.h"
#include "core/tensor_registry.h"
#include "server/server.h"
#include "tests/bench/rpc_loop.h"

ABSL_FLAG(int64_t, table_rows, 262144, "rows of the float32 [rows, 64] table (256 B rows)");
ABSL_FLAG(std::vector<std::string>, parts,
          std::vector<std::string>({"throughput", "lookups", "freshness"}),
          "what to measure: throughput, lookups, freshness");
ABSL_FLAG(int, repeats, 21, "throughput: streams per side; the table shows medians");
ABSL_FLAG(int64_t, stream_mib, 64, "throughput: MiB of rows per stream");
ABSL_FLAG(int64_t, message_rows, 4096, "throughput: rows per message (4096: 1 MiB of values)");
ABSL_FLAG(int, concurrency, 16, "lookups: outstanding Gather calls (closed loop)");
ABSL_FLAG(int, channels, 4, "lookups: client channels (HTTP/2 connections) for the lookups");
ABSL_FLAG(int64_t, lookup_rows, 256, "lookups: random rows per Gather");
ABSL_FLAG(int64_t, update_rows, 0,
          "lookups: rows per UpdateRows message of the writers; 0 (the default): a hundredth of "
          "the rate, at least 1000 and at most 4000 (10 and 100 messages/s at 10k and 100k "
          "rows/s, 250 at 1M)");
ABSL_FLAG(std::vector<std::string>, update_rates,
          std::vector<std::string>({"0", "10000", "100000", "1000000"}),
          "lookups: rows/s the writers aim at, all together (0: no updates, the baseline)");
ABSL_FLAG(int, writers, 1, "lookups: writer threads, each its own stream and connection");
ABSL_FLAG(int, repetitions, 5, "lookups: times each point is measured; the table shows medians");
ABSL_FLAG(double, duration_s, 2.0, "lookups: measured seconds per point");
ABSL_FLAG(double, warmup_s, 0.5, "lookups: unmeasured seconds before each point");
ABSL_FLAG(int, freshness_updates, 200, "freshness: updates per way");

namespace tensorcompute::bench {
namespace {

constexpr char kTableName[] = "live";
constexpr int64_t kRowFloats = 64;
constexpr int64_t kRowBytes = kRowFloats * 4;

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  auto nth = v.begin() + static_cast<std::ptrdiff_t>(q * (v.size() - 1));
  std::nth_element(v.begin(), nth, v.end());
  return *nth;
}

std::shared_ptr<grpc::Channel> OwnChannel(const std::string& name, int port) {
  std::unique_ptr<Target> t = Connect(name, port, 1);
  return t == nullptr ? nullptr : t->channels[0];
}

// One UpdateRows message of `n` distinct random rows of a table of `rows` rows, finite values;
// `name` only on a stream's first message.
v1::UpdateRowsRequest MakeUpdate(int64_t rows, int64_t n, std::mt19937_64& rng,
                                 const std::string& name = "") {
  std::vector<int64_t> idx;
  idx.reserve(n);
  // A message names a row at most once: draw, and draw again on a repeat.
  std::vector<bool> taken(rows, false);
  while (static_cast<int64_t>(idx.size()) < n) {
    const int64_t r = static_cast<int64_t>(rng() % rows);
    if (!taken[r]) taken[r] = true, idx.push_back(r);
  }
  std::vector<float> values(n * kRowFloats);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : values) v = dist(rng);
  v1::UpdateRowsRequest m;
  m.set_name(name);
  v1::Tensor* i = m.mutable_indices();
  i->set_dtype(v1::DT_INT64);
  i->add_shape(n);
  i->set_data(reinterpret_cast<const char*>(idx.data()), idx.size() * 8);
  v1::Tensor* v = m.mutable_values();
  v->set_dtype(v1::DT_FLOAT32);
  v->add_shape(n);
  v->add_shape(kRowFloats);
  v->set_data(reinterpret_cast<const char*>(values.data()), values.size() * 4);
  return m;
}

// ---- 1. Throughput ----

// The ceiling: parses each UpdateRows message, as a generated service does, and drops it;
// answers the rows and messages it read (sequence = messages).
class SinkService final : public v1::TensorCompute::CallbackService {
  grpc::ServerReadReactor<v1::UpdateRowsRequest>* UpdateRows(
      grpc::CallbackServerContext*, v1::UpdateRowsResponse* response) override {
    class Reader final : public grpc::ServerReadReactor<v1::UpdateRowsRequest> {
     public:
      explicit Reader(v1::UpdateRowsResponse* response) : response_(response) {
        StartRead(&message_);
      }
      void OnReadDone(bool ok) override {
        if (!ok) {
          response_->set_sequence(response_->messages());
          return Finish(grpc::Status::OK);
        }
        response_->set_rows(response_->rows() + message_.indices().shape(0));
        response_->set_messages(response_->messages() + 1);
        StartRead(&message_);
      }
      void OnDone() override { delete this; }

     private:
      v1::UpdateRowsResponse* response_;
      v1::UpdateRowsRequest message_;
    };
    return new Reader(response);
  }
};

// A stream of `first` then `messages` in turn, `count` messages in all; the seconds from opening
// it to its answer, or -1 (with the reason on stderr) if the answer is not OK or miscounts.
double StreamOnce(v1::TensorCompute::Stub& stub, const v1::UpdateRowsRequest& first,
                  const std::vector<v1::UpdateRowsRequest>& messages, int64_t count,
                  int64_t* sequence) {
  const absl::Time start = absl::Now();
  grpc::ClientContext context;
  v1::UpdateRowsResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::UpdateRowsRequest>> writer =
      stub.UpdateRows(&context, &response);
  bool writing = writer->Write(first);
  for (int64_t k = 1; writing && k < count; ++k)
    writing = writer->Write(messages[k % messages.size()]);
  if (writing) writer->WritesDone();
  const grpc::Status status = writer->Finish();
  const double s = absl::ToDoubleSeconds(absl::Now() - start);
  const int64_t rows = first.indices().shape(0) * count;
  if (!status.ok()) {
    std::fprintf(stderr, "error: UpdateRows: code %d: %s\n", static_cast<int>(status.error_code()),
                 status.error_message().c_str());
    return -1;
  }
  if (response.rows() != rows || response.messages() != count ||
      response.sequence() != *sequence + count) {
    std::fprintf(stderr, "error: UpdateRows answered %s after sequence %lld, %lld rows sent\n",
                 response.ShortDebugString().c_str(), static_cast<long long>(*sequence),
                 static_cast<long long>(rows));
    return -1;
  }
  *sequence = response.sequence();
  return s;
}

int Throughput(server::Server& tc) {
  const int64_t table_rows = absl::GetFlag(FLAGS_table_rows);
  const int64_t n = absl::GetFlag(FLAGS_message_rows);
  const int64_t count = absl::GetFlag(FLAGS_stream_mib) * (int64_t{1} << 20) / (n * kRowBytes);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  if (n < 1 || n > table_rows || count < 1 || repeats < 1) return 2;
  std::mt19937_64 rng(41);
  const v1::UpdateRowsRequest first = MakeUpdate(table_rows, n, rng, kTableName);
  std::vector<v1::UpdateRowsRequest> messages;
  for (int i = 0; i < 16; ++i) messages.push_back(MakeUpdate(table_rows, n, rng));

  SinkService sink;
  int sink_port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &sink_port);
  builder.SetMaxReceiveMessageSize(kMessageBytes);
  builder.RegisterService(&sink);
  std::unique_ptr<grpc::Server> sink_server = builder.BuildAndStart();
  std::shared_ptr<grpc::Channel> tc_channel = OwnChannel("tc", tc.port());
  std::shared_ptr<grpc::Channel> sink_channel =
      sink_server ? OwnChannel("sink", sink_port) : nullptr;
  if (tc_channel == nullptr || sink_channel == nullptr) {
    std::fprintf(stderr, "could not start or connect the sink\n");
    return 1;
  }
  auto tc_stub = v1::TensorCompute::NewStub(tc_channel);
  auto sink_stub = v1::TensorCompute::NewStub(sink_channel);
  int64_t tc_sequence = tc.registry().Find(kTableName)->live->sequence();
  int64_t sink_sequence = 0;

  const double mb = static_cast<double>(count * n * kRowBytes) / 1e6;
  std::vector<double> tc_mbs, sink_mbs, ratios;
  // One untimed stream each first: the table's pages and both connections warm.
  int64_t warm_sink = 0;
  if (StreamOnce(*tc_stub, first, messages, count, &tc_sequence) < 0 ||
      StreamOnce(*sink_stub, first, messages, count, &warm_sink) < 0) {
    return 1;
  }
  for (int r = 0; r < repeats; ++r) {
    double s[2];
    for (int k = 0; k < 2; ++k) {
      const bool is_tc = (k + r) % 2 == 0;
      sink_sequence = 0;
      s[is_tc ? 0 : 1] = is_tc ? StreamOnce(*tc_stub, first, messages, count, &tc_sequence)
                               : StreamOnce(*sink_stub, first, messages, count, &sink_sequence);
    }
    if (s[0] < 0 || s[1] < 0) return 1;
    tc_mbs.push_back(mb / s[0]);
    sink_mbs.push_back(mb / s[1]);
    ratios.push_back(tc_mbs.back() / sink_mbs.back());
    std::fprintf(stderr, "throughput repeat %d: UpdateRows %.1f MB/s, sink %.1f MB/s, %.3f\n",
                 r + 1, tc_mbs.back(), sink_mbs.back(), ratios.back());
  }
  sink_server->Shutdown();

  std::printf(
      "### Throughput: %lld MiB of 256 B rows per stream, %lld rows (%s of values) per message\n\n"
      "Table float32 [%lld, 64]; %d repeats, UpdateRows and the sink alternating; MB = 10^6 B of "
      "rows.\n\n",
      static_cast<long long>(absl::GetFlag(FLAGS_stream_mib)), static_cast<long long>(n),
      Bytes(n * kRowBytes).c_str(), static_cast<long long>(table_rows), repeats);
  std::printf(
      "| UpdateRows MB/s | rows/s (M) | messages/s | ceiling (sink) MB/s | UpdateRows / ceiling |\n"
      "|---:|---:|---:|---:|---:|\n");
  std::printf("| %.0f | %.2f | %.0f | %.0f | **%.2f** |\n\n", Median(tc_mbs),
              Median(tc_mbs) * 1e6 / kRowBytes / 1e6, Median(tc_mbs) * 1e6 / (n * kRowBytes),
              Median(sink_mbs), Median(ratios));
  std::printf("Per repeat (UpdateRows / sink MB/s): %s\n\n",
              absl::StrJoin(ratios, ", ", [&, i = 0](std::string* out, double) mutable {
                absl::StrAppendFormat(out, "%.0f/%.0f", tc_mbs[i], sink_mbs[i]);
                ++i;
              }).c_str());
  return 0;
}

// ---- 2. Lookups while rows change ----

// Streams UpdateRows messages at `rows_per_s` rows/s on its own connection until Stop().
class PacedWriter {
 public:
  PacedWriter(std::shared_ptr<grpc::Channel> channel, const v1::UpdateRowsRequest* first,
              const std::vector<v1::UpdateRowsRequest>* messages, double rows_per_s)
      : stub_(v1::TensorCompute::NewStub(std::move(channel))),
        first_(*first),
        messages_(*messages),
        interval_(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(first->indices().shape(0) / rows_per_s))),
        thread_([this] { Run(); }) {}

  // Half-closes the stream and returns its status.
  grpc::Status Stop() {
    stop_.store(true);
    thread_.join();
    return status_;
  }

 private:
  void Run() {
    grpc::ClientContext context;
    v1::UpdateRowsResponse response;
    std::unique_ptr<grpc::ClientWriter<v1::UpdateRowsRequest>> writer =
        stub_->UpdateRows(&context, &response);
    auto next = std::chrono::steady_clock::now();
    bool writing = writer->Write(first_);
    for (size_t k = 1; writing && !stop_.load(); ++k) {
      next += interval_;
      const auto now = std::chrono::steady_clock::now();
      if (next > now) {
        std::this_thread::sleep_until(next);
      } else if (now - next > std::chrono::milliseconds(100)) {
        next = now;  // far behind: no burst to catch up, the stream's own pace from here
      }
      writing = writer->Write(messages_[k % messages_.size()]);
    }
    if (writing) writer->WritesDone();
    status_ = writer->Finish();
  }

  std::unique_ptr<v1::TensorCompute::Stub> stub_;
  const v1::UpdateRowsRequest& first_;
  const std::vector<v1::UpdateRowsRequest>& messages_;
  const std::chrono::steady_clock::duration interval_;
  std::atomic<bool> stop_{false};
  grpc::Status status_;
  std::thread thread_;  // last: starts once the rest is built
};

int Lookups(server::Server& tc) {
  const int64_t table_rows = absl::GetFlag(FLAGS_table_rows);
  const int64_t lookup_rows = absl::GetFlag(FLAGS_lookup_rows);
  const int64_t update_rows = absl::GetFlag(FLAGS_update_rows);
  const int concurrency = absl::GetFlag(FLAGS_concurrency);
  const int num_writers = absl::GetFlag(FLAGS_writers);
  const int repetitions = absl::GetFlag(FLAGS_repetitions);
  std::vector<double> rates;
  for (const std::string& s : absl::GetFlag(FLAGS_update_rates)) {
    double r = 0;
    if (!absl::SimpleAtod(s, &r) || r < 0) return 2;
    rates.push_back(r);
  }
  if (rates.empty() || rates[0] != 0 || lookup_rows < 1 || update_rows < 0 ||
      std::max<int64_t>(update_rows, 4000) > table_rows || concurrency < 1 || num_writers < 1 ||
      repetitions < 1) {
    return 2;
  }

  std::mt19937_64 rng(17);
  std::vector<grpc::ByteBuffer> gathers;
  for (int i = 0; i < 64; ++i) {
    v1::GatherRequest g;
    g.set_params_name(kTableName);
    std::vector<int64_t> idx(lookup_rows);
    for (int64_t& v : idx) v = static_cast<int64_t>(rng() % table_rows);
    v1::Tensor* t = g.mutable_indices();
    t->set_dtype(v1::DT_INT64);
    t->add_shape(lookup_rows);
    t->set_data(reinterpret_cast<const char*>(idx.data()), idx.size() * 8);
    grpc::Slice slice(g.SerializeAsString());
    gathers.emplace_back(&slice, 1);
  }
  std::unique_ptr<Target> lookups = Connect("lookups", tc.port(), absl::GetFlag(FLAGS_channels));
  std::vector<std::shared_ptr<grpc::Channel>> writer_channels;
  for (int w = 0; w < num_writers; ++w) writer_channels.push_back(OwnChannel("writer", tc.port()));
  if (lookups == nullptr ||
      std::find(writer_channels.begin(), writer_channels.end(), nullptr) != writer_channels.end()) {
    std::fprintf(stderr, "could not connect\n");
    return 1;
  }
  const core::RequestStats& stats = *tc.registry().Find(kTableName)->stats;

  struct Point {
    double rate;
    int64_t message_rows = 0;
    std::vector<v1::UpdateRowsRequest> firsts;   // one per writer, naming the table
    std::vector<v1::UpdateRowsRequest> updates;  // what the writers send next, in turn
    std::vector<PointResult> results;
    std::vector<double> achieved;  // rows/s the server applied over the point
    std::vector<double> p99_ratio, qps_ratio;
  };
  std::vector<Point> points;
  for (double r : rates) {
    Point& p = points.emplace_back();
    p.rate = r;
    if (r == 0) continue;
    p.message_rows = update_rows > 0
                         ? update_rows
                         : std::clamp<int64_t>(static_cast<int64_t>(r / 100), 1000, 4000);
    for (int w = 0; w < num_writers; ++w) {
      p.firsts.push_back(MakeUpdate(table_rows, p.message_rows, rng, kTableName));
    }
    for (int i = 0; i < 16; ++i) p.updates.push_back(MakeUpdate(table_rows, p.message_rows, rng));
  }
  const absl::Duration warmup = absl::Seconds(absl::GetFlag(FLAGS_warmup_s));
  const absl::Duration duration = absl::Seconds(absl::GetFlag(FLAGS_duration_s));
  int64_t failed = 0;
  std::vector<std::unique_ptr<ClosedLoop>> loops;  // alive until every callback returned
  for (int rep = 0; rep < repetitions; ++rep) {
    for (size_t k = 0; k < points.size(); ++k) {
      Point& p = points[(k + rep) % points.size()];
      std::vector<std::unique_ptr<PacedWriter>> writers;
      const int64_t rows0 = stats.updated_rows();
      const absl::Time t0 = absl::Now();
      if (p.rate > 0) {
        for (int w = 0; w < num_writers; ++w) {
          writers.push_back(std::make_unique<PacedWriter>(writer_channels[w], &p.firsts[w],
                                                          &p.updates, p.rate / num_writers));
        }
      }
      loops.push_back(std::make_unique<ClosedLoop>(lookups.get(), gathers, concurrency, 3));
      PointResult r = loops.back()->Run(warmup, duration, 3 * concurrency, absl::Seconds(60), &tc);
      for (auto& w : writers) {
        const grpc::Status s = w->Stop();
        if (!s.ok()) {
          ++failed;
          std::fprintf(stderr, "error: writer: code %d: %s\n", static_cast<int>(s.error_code()),
                       s.error_message().c_str());
        }
      }
      const double achieved =
          (stats.updated_rows() - rows0) / absl::ToDoubleSeconds(absl::Now() - t0);
      failed += r.failed;
      if (!r.first_error.empty()) std::fprintf(stderr, "error: %s\n", r.first_error.c_str());
      std::fprintf(stderr,
                   "rep %d rate %9.0f: achieved %9.0f rows/s, %7.0f QPS, p50 %.2f ms, p99 %.2f "
                   "ms, %.2f cores\n",
                   rep + 1, p.rate, achieved, r.qps, r.p50_ms, r.p99_ms, r.cpu_cores);
      p.results.push_back(r);
      p.achieved.push_back(achieved);
    }
    const PointResult& base = points[0].results.back();
    for (Point& p : points) {
      p.p99_ratio.push_back(p.results.back().p99_ms / base.p99_ms);
      p.qps_ratio.push_back(p.results.back().qps / base.qps);
    }
  }

  std::printf(
      "### Lookups at C = %d while rows change\n\n"
      "Gather by name of %lld random rows (%s answers) from the float32 [%lld, 64] table, %d "
      "channels; %d writer stream(s) on their own connection(s). %.1f s "
      "per point after %.1f s warm-up, medians of %d repetitions; ratios are medians of the "
      "per-repetition ratios to no updates.\n\n",
      concurrency, static_cast<long long>(lookup_rows), Bytes(lookup_rows * kRowBytes).c_str(),
      static_cast<long long>(table_rows), absl::GetFlag(FLAGS_channels), num_writers,
      absl::ToDoubleSeconds(duration), absl::ToDoubleSeconds(warmup), repetitions);
  std::printf(
      "| updates aimed at (rows/s) | rows per message | achieved (rows/s) | QPS | p50 ms | p99 ms "
      "| p99 / none | QPS / none | CPU cores |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Point& p : points) {
    auto qps = [](const PointResult& r) { return r.qps; };
    auto p50 = [](const PointResult& r) { return r.p50_ms; };
    auto p99 = [](const PointResult& r) { return r.p99_ms; };
    auto cores = [](const PointResult& r) { return r.cpu_cores; };
    std::printf("| %s | %s | %s | %.0f | %s | %s | **%.2f** | %.2f | %.2f |\n",
                p.rate == 0 ? "none" : absl::StrFormat("%.0f", p.rate).c_str(),
                p.rate == 0 ? "-" : absl::StrCat(p.message_rows).c_str(),
                p.rate == 0 ? "-" : absl::StrFormat("%.0f", Median(p.achieved)).c_str(),
                MedianOf(p.results, qps), Ms(MedianOf(p.results, p50)).c_str(),
                Ms(MedianOf(p.results, p99)).c_str(), Median(p.p99_ratio), Median(p.qps_ratio),
                MedianOf(p.results, cores));
  }
  std::printf("\nnon-OK answers (lookups and writers): %lld\n\n", static_cast<long long>(failed));
  return failed == 0 ? 0 : 1;
}

// ---- 3. Freshness ----

// The bucket bound at or below which a fraction q of the observations between `before` and
// `after` lie ("+Inf" past the last bound).
std::string BoundAt(const std::vector<int64_t>& before, const std::vector<int64_t>& after,
                    absl::Span<const double> bounds, double q) {
  int64_t total = 0;
  for (size_t i = 0; i < after.size(); ++i) total += after[i] - before[i];
  int64_t seen = 0;
  for (size_t i = 0; i < after.size(); ++i) {
    seen += after[i] - before[i];
    if (seen >= std::ceil(q * total) && seen > 0) {
      return i < bounds.size() ? absl::StrFormat("<= %g ms", bounds[i] * 1e3) : "+Inf";
    }
  }
  return "-";
}

int Freshness(server::Server& tc) {
  const int64_t table_rows = absl::GetFlag(FLAGS_table_rows);
  const int updates = absl::GetFlag(FLAGS_freshness_updates);
  if (updates < 1) return 2;
  std::shared_ptr<grpc::Channel> writer_channel = OwnChannel("fresh-writer", tc.port());
  std::shared_ptr<grpc::Channel> reader_channel = OwnChannel("fresh-reader", tc.port());
  if (writer_channel == nullptr || reader_channel == nullptr) {
    std::fprintf(stderr, "could not connect\n");
    return 1;
  }
  auto writer = v1::TensorCompute::NewStub(writer_channel);
  auto reader = v1::TensorCompute::NewStub(reader_channel);
  const core::ResidentTensor& table = *tc.registry().Find(kTableName);
  const core::Histogram& visible = table.stats->update_visible();
  std::mt19937_64 rng(5);
  float value = 1000.0f;  // outside [-1, 1): no row holds it before its update

  std::printf(
      "### Freshness: acknowledgement to a lookup on another connection seeing the row\n\n"
      "%d one-row, one-message UpdateRows streams per way, one at a time, idle server. ack: the "
      "UpdateRows call (open, write, half-close, answer). seen: from the answer to the first "
      "Gather on the other connection that returns the new row whole. Server: "
      "tensorcompute_table_update_visible_seconds (arrival to visible) over the same updates.\n\n",
      updates);
  std::printf(
      "| way | ack p50 ms | seen p50 ms | seen p99 ms | seen max ms | Gathers per update | "
      "server visible mean ms | server p50 / p99 |\n|---|---:|---:|---:|---:|---:|---:|---|\n");
  for (const bool by_sequence : {false, true}) {
    std::vector<double> ack_ms, seen_ms;
    int64_t gathers = 0;
    const std::vector<int64_t> buckets0 = visible.buckets();
    const double sum0 = visible.sum();
    const int64_t count0 = visible.count();
    for (int u = 0; u < updates; ++u) {
      const int64_t row = static_cast<int64_t>(rng() % table_rows);
      value += 1.0f;
      v1::UpdateRowsRequest m;
      m.set_name(kTableName);
      m.mutable_indices()->set_dtype(v1::DT_INT64);
      m.mutable_indices()->add_shape(1);
      m.mutable_indices()->set_data(reinterpret_cast<const char*>(&row), 8);
      const std::vector<float> values(kRowFloats, value);
      m.mutable_values()->set_dtype(v1::DT_FLOAT32);
      m.mutable_values()->add_shape(1);
      m.mutable_values()->add_shape(kRowFloats);
      m.mutable_values()->set_data(reinterpret_cast<const char*>(values.data()), kRowBytes);
      v1::GatherRequest g;
      g.set_params_name(kTableName);
      *g.mutable_indices() = m.indices();

      const auto start = std::chrono::steady_clock::now();
      v1::UpdateRowsResponse acked;
      {
        grpc::ClientContext context;
        auto w = writer->UpdateRows(&context, &acked);
        if (w->Write(m)) w->WritesDone();
        const grpc::Status s = w->Finish();
        if (!s.ok()) {
          std::fprintf(stderr, "error: UpdateRows: %s\n", s.error_message().c_str());
          return 1;
        }
      }
      const auto ack = std::chrono::steady_clock::now();
      if (by_sequence) g.set_min_sequence(acked.sequence());
      for (int polls = 1;; ++polls) {
        grpc::ClientContext context;
        v1::GatherResponse answer;
        const grpc::Status s = reader->Gather(&context, g, &answer);
        ++gathers;
        if (s.ok() && answer.output().data() == m.values().data()) break;
        if (s.ok() && by_sequence) {
          std::fprintf(stderr, "error: min_sequence %lld answered an old row\n",
                       static_cast<long long>(acked.sequence()));
          return 1;
        }
        if (!s.ok() && !(by_sequence && s.error_code() == grpc::StatusCode::FAILED_PRECONDITION)) {
          std::fprintf(stderr, "error: Gather: code %d: %s\n", static_cast<int>(s.error_code()),
                       s.error_message().c_str());
          return 1;
        }
        if (polls > 100000) {
          std::fprintf(stderr, "error: row %lld never showed its update\n",
                       static_cast<long long>(row));
          return 1;
        }
      }
      const auto seen = std::chrono::steady_clock::now();
      ack_ms.push_back(std::chrono::duration<double, std::milli>(ack - start).count());
      seen_ms.push_back(std::chrono::duration<double, std::milli>(seen - ack).count());
    }
    const int64_t n = visible.count() - count0;
    std::printf(
        "| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.3f | %s / %s |\n",
        by_sequence ? "min_sequence" : "poll", Percentile(ack_ms, 0.5), Percentile(seen_ms, 0.5),
        Percentile(seen_ms, 0.99), *std::max_element(seen_ms.begin(), seen_ms.end()),
        static_cast<double>(gathers) / updates, n > 0 ? (visible.sum() - sum0) / n * 1e3 : 0,
        BoundAt(buckets0, visible.buckets(), visible.bounds(), 0.5).c_str(),
        BoundAt(buckets0, visible.buckets(), visible.bounds(), 0.99).c_str());
  }
  std::printf("\n");
  return 0;
}

int Main() {
  spdlog::set_level(spdlog::level::warn);
  const int64_t table_rows = absl::GetFlag(FLAGS_table_rows);
  if (table_rows < 1) return 2;
  auto tc = StartWithTable(server::ServerOptions(), kTableName, table_rows, kRowFloats,
                           /*finite=*/true);
  if (!tc.ok()) {
    std::fprintf(stderr, "tensorcompute-server: %s\n", tc.status().ToString().c_str());
    return 1;
  }
  std::printf("tensorcompute-server: cpu_threads=%d, %u hardware threads\n\n", (*tc)->cpu_threads(),
              std::thread::hardware_concurrency());
  int rc = 0;
  for (const std::string& part : absl::GetFlag(FLAGS_parts)) {
    int r = 2;
    if (part == "throughput") r = Throughput(**tc);
    if (part == "lookups") r = Lookups(**tc);
    if (part == "freshness") r = Freshness(**tc);
    if (r == 2) std::fprintf(stderr, "error: bad flags for %s\n", part.c_str());
    std::fflush(stdout);
    rc = std::max(rc, r);
  }
  (*tc)->Drain();
  return rc;
}

}  // namespace
}  // namespace tensorcompute::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tensorcompute::bench::Main();
}
