// tensorcompute-server against a bare gRPC echo of the same bytes, measured in one process.
//
// Two servers run side by side on 127.0.0.1:0, both on gRPC's callback API with 64 MiB
// message limits:
//   tensorcompute  server::Server::Start with default options (cpu_threads = all cores);
//   echo           a TensorCompute service that computes nothing: it parses the same
//                  GatherRequest and answers with a GatherResponse built before the run (the
//                  expected output for that request), copied into the response. Every call
//                  moves the same bytes each way as the real one.
// A closed-loop client keeps C calls outstanding per point, spread round-robin over
// --channels channels (each its own HTTP/2 connection). A point warms up for --warmup_s and
// until each of its C call slots has completed --warmup_calls_per_slot calls (after only one
// round, the 16 MiB points measured the first server of a pair up to 30% slow), then
// measures for --duration_s and until C x --min_calls_per_slot calls have completed (a
// 16 MiB call at C = 64 takes over a second). The client sends a pre-serialized request and
// does not parse responses, so its CPU cost is as small as gRPC allows and the same for both
// servers. Points run tensorcompute and echo back to back (alternating which goes first),
// --repetitions times; the table shows medians, and the ratio is the median of the
// per-repetition tensorcompute/echo ratios, compared unrounded with the target.
//
// Cases (float32 params, int64 indices on axis 0, rows drawn at random):
//   small  params [64, 4] (1 KiB), 16 indices         -> output 256 B;   ratio of QPS.
//   1MiB   params [4096, 256] (4 MiB), 1024 indices   -> output 1 MiB;   ratio of bytes/s.
//   16MiB  params [32768, 256] (32 MiB), 16384 indices -> output 16 MiB; ratio of bytes/s.
// (Params travel with every request, so the large requests are 4 and 32 MiB.)
//
// Before measuring, one call per case to each server must return exactly the expected rows;
// every non-OK answer during the run is counted, and any makes the exit status 1.
//
// Run: build/tests/bench/rpc_bench [--duration_s=2 --warmup_s=0.5 --repetitions=3
//        --channels=4 --concurrency=1,16,64 --cases=small,1MiB,16MiB --device=auto]
//      It prints Markdown tables (docs/performance.md takes them verbatim) and progress on
//      stderr; --only=tensorcompute or --only=echo runs one side alone, for a profiler;
//      --echo_streamed registers the echo's Gather as tensorcompute-server registers it
//      (streamed, the message read when the reactor asks: read after admission), to measure
//      what that shape costs by itself.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/byte_buffer.h"
#include "spdlog/spdlog.h"
#include "tensorcompute/v1/tensorcompute.grpc.pb.h"
#include <sys/resource.h>

#include "core/tensor.h"
#include "core/tensor_registry.h"
#include "server/server.h"
#include "tests/bench/rpc_loop.h"

ABSL_FLAG(double, duration_s, 2.0, "measured seconds per point");
ABSL_FLAG(double, warmup_s, 0.5, "unmeasured seconds before each point");
ABSL_FLAG(int64_t, warmup_calls_per_slot, 3,
          "warm up each point until each of its C calls has completed this many times");
ABSL_FLAG(int64_t, min_calls_per_slot, 3,
          "measure each point until at least C times this many calls completed");
ABSL_FLAG(double, max_duration_s, 30.0, "measured seconds per point at most");
ABSL_FLAG(std::string, only, "",
          "measure only this server (tensorcompute or echo), e.g. under a profiler; the table "
          "then shows 0 for the other");
ABSL_FLAG(std::string, device, "auto",
          "tensorcompute-server's --device: auto, cpu or gpu (the GPU kit runs --device=gpu)");
ABSL_FLAG(int, cpu_threads, 0,
          "tensorcompute-server's cpu_threads (0, the default: one per core); for diagnosis");
ABSL_FLAG(int64_t, inline_compute_bytes, -1,
          "tensorcompute-server's inline_compute_bytes (-1, the default: the server's default); "
          "for diagnosis");
ABSL_FLAG(bool, mutex_deadlock_detection, false,
          "leave absl::Mutex deadlock detection on, as Debian's Abseil has it by default (the "
          "server and CLI turn it off); for A/B runs");
ABSL_FLAG(int, repetitions, 3, "times each point is measured; the table shows medians");
ABSL_FLAG(int, channels, 4, "client channels (HTTP/2 connections) per server");
ABSL_FLAG(std::vector<std::string>, concurrency, std::vector<std::string>({"1", "16", "64"}),
          "outstanding calls per point (closed loop)");
ABSL_FLAG(bool, embedding, false,
          "run the embedding-lookup benchmark instead: a resident table, by name with batching "
          "on and off, inline slices, and the echo (docs/performance.md, \"Resident tables\")");
ABSL_FLAG(int64_t, table_mib, 1024, "--embedding: the table's size in MiB (rows of 256 B)");
ABSL_FLAG(std::vector<std::string>, lookups, std::vector<std::string>({"16", "256", "4096"}),
          "--embedding: indices per request");
ABSL_FLAG(bool, echo_streamed, false,
          "register the echo's Gather as streamed and read the message when its reactor asks, "
          "as tensorcompute-server does (read after admission): the ceiling of that shape; for "
          "diagnosis");
ABSL_FLAG(std::vector<std::string>, cases, std::vector<std::string>({"small", "1MiB", "16MiB"}),
          "cases to run: small, 1MiB, 16MiB");

namespace tensorcompute::bench {
namespace {

// One request shape: params [rows, row_floats] float32, num_indices random rows.
struct Case {
  std::string name;
  int64_t rows = 0;
  int64_t row_floats = 0;
  int64_t num_indices = 0;
  bool large = false;  // compared on response bytes/s (target 0.80), else on QPS (0.70)
  v1::GatherRequest request;
  v1::GatherResponse expected;
  grpc::ByteBuffer request_buffer;  // request, serialized once
};

std::unique_ptr<Case> MakeCase(const std::string& name) {
  auto c = std::make_unique<Case>();
  c->name = name;
  if (name == "small") {
    c->rows = 64, c->row_floats = 4, c->num_indices = 16;
  } else if (name == "1MiB") {
    c->rows = 4096, c->row_floats = 256, c->num_indices = 1024, c->large = true;
  } else if (name == "16MiB") {
    c->rows = 32768, c->row_floats = 256, c->num_indices = 16384, c->large = true;
  } else {
    return nullptr;
  }
  const int64_t row_bytes = c->row_floats * 4;
  std::mt19937_64 rng(7);
  std::string params(c->rows * row_bytes, '\0');
  for (size_t i = 0; i + 8 <= params.size(); i += 8) {
    const uint64_t x = rng();
    std::memcpy(params.data() + i, &x, 8);
  }
  std::vector<int64_t> idx(c->num_indices);
  for (int64_t& v : idx) v = static_cast<int64_t>(rng() % c->rows);

  v1::Tensor* out = c->expected.mutable_output();
  out->set_dtype(v1::DT_FLOAT32);
  out->add_shape(c->num_indices);
  out->add_shape(c->row_floats);
  std::string* out_data = out->mutable_data();
  for (int64_t v : idx) out_data->append(params, v * row_bytes, row_bytes);

  v1::Tensor* p = c->request.mutable_params();
  p->set_dtype(v1::DT_FLOAT32);
  p->add_shape(c->rows);
  p->add_shape(c->row_floats);
  *p->mutable_data() = std::move(params);
  v1::Tensor* i = c->request.mutable_indices();
  i->set_dtype(v1::DT_INT64);
  i->add_shape(c->num_indices);
  i->set_data(reinterpret_cast<const char*>(idx.data()), idx.size() * 8);

  grpc::Slice slice(c->request.SerializeAsString());
  c->request_buffer = grpc::ByteBuffer(&slice, 1);
  return c;
}

// The ceiling. Answers every Gather with the response registered for its number of index
// bytes (copied into the response, as a real server writes its output once), NOT_FOUND for
// an unknown one. Responses are registered before the server starts and read-only after.
class EchoService final : public v1::TensorCompute::CallbackService {
 public:
  EchoService() {
    if (!absl::GetFlag(FLAGS_echo_streamed)) return;
    MarkMethodStreamed(
        0, new grpc::internal::CallbackBidiHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
               [this](grpc::CallbackServerContext*) { return new StreamedCall(this); }));
  }

  void Add(const Case& c) { Add(c.request.indices().data().size(), c.expected); }
  void Add(size_t index_bytes, const v1::GatherResponse& response) {
    responses_[index_bytes] = response;
  }

  // Read after admission's shape: the reactor reads the one message, answers, deletes itself.
  class StreamedCall final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
   public:
    explicit StreamedCall(EchoService* echo) : echo_(*echo) { StartRead(&message_); }
    void OnReadDone(bool ok) override {
      v1::GatherRequest request;
      if (!ok ||
          !grpc::SerializationTraits<v1::GatherRequest>::Deserialize(&message_, &request).ok()) {
        return Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no message"));
      }
      auto it = echo_.responses_.find(request.indices().data().size());
      if (it == echo_.responses_.end()) {
        return Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, "no canned response"));
      }
      v1::GatherResponse response = it->second;
      bool own = false;
      grpc::SerializationTraits<v1::GatherResponse>::Serialize(response, &reply_, &own);
      StartWriteAndFinish(&reply_, grpc::WriteOptions(), grpc::Status::OK);
    }
    void OnDone() override { delete this; }

   private:
    EchoService& echo_;
    grpc::ByteBuffer message_, reply_;
  };

  grpc::ServerUnaryReactor* Gather(grpc::CallbackServerContext* context,
                                   const v1::GatherRequest* request,
                                   v1::GatherResponse* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    auto it = responses_.find(request->indices().data().size());
    if (it == responses_.end()) {
      reactor->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, "no canned response"));
    } else {
      *response = it->second;
      reactor->Finish(grpc::Status::OK);
    }
    return reactor;
  }

 private:
  std::map<size_t, v1::GatherResponse> responses_;
};

// Serves `service` on 127.0.0.1 (a free port, written to *port) with the benchmark's limits.
std::unique_ptr<grpc::Server> StartEcho(EchoService* service, int* port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), port);
  builder.SetMaxReceiveMessageSize(kMessageBytes);
  builder.SetMaxSendMessageSize(kMessageBytes);
  builder.RegisterService(service);
  return builder.BuildAndStart();
}

// One call through the typed stub; returns "" when the answer equals `expected`.
std::string Validate(const Target& t, const v1::GatherRequest& request,
                     const v1::GatherResponse& expected) {
  auto stub = v1::TensorCompute::NewStub(t.channels[0]);
  grpc::ClientContext context;
  v1::GatherResponse response;
  const grpc::Status s = stub->Gather(&context, request, &response);
  if (!s.ok()) return absl::StrCat("status ", s.error_code(), ": ", s.error_message());
  const v1::Tensor& got = response.output();
  const v1::Tensor& want = expected.output();
  if (got.dtype() != want.dtype() || got.shape_size() != want.shape_size() ||
      !std::equal(got.shape().begin(), got.shape().end(), want.shape().begin())) {
    return "wrong dtype or shape";
  }
  if (got.data() != want.data()) return "wrong output bytes";
  return "";
}

// All repetitions of one (case, concurrency) point, for both servers.
struct Point {
  const Case* c;
  int concurrency;
  std::vector<PointResult> tc, echo;
  std::vector<double> ratio;
  // Finished loops: gRPC may still be returning from their last callbacks.
  std::vector<std::unique_ptr<ClosedLoop>> loops;
};

// ---- The embedding lookup (--embedding): a resident table, only indices on the wire ----

constexpr int64_t kRowFloats = 64;  // rows of 256 B
constexpr int kVariants = 64;       // distinct requests per case, sent in turn
constexpr char kTableName[] = "embeddings";

// `lookups` random rows per request, kVariants requests: by name (indices only), and inline
// with the slice of the table they touch as params (the rows, in order; indices 0..n-1
// shuffled the same way), which is what a client without resident tables would send.
struct EmbeddingCase {
  int64_t lookups = 0;
  std::vector<grpc::ByteBuffer> by_name, inline_params;
  v1::GatherRequest first_by_name, first_inline;
  v1::GatherResponse first_expected;
  int64_t response_bytes = 0;
};

EmbeddingCase MakeEmbeddingCase(const core::Tensor& table, int64_t lookups) {
  EmbeddingCase c;
  c.lookups = lookups;
  const int64_t rows = table.shape()[0], row_bytes = kRowFloats * 4;
  const auto* data = reinterpret_cast<const char*>(table.view().data.data());
  std::mt19937_64 rng(lookups);
  for (int v = 0; v < kVariants; ++v) {
    std::vector<int64_t> idx(lookups), local(lookups);
    for (int64_t& i : idx) i = static_cast<int64_t>(rng() % rows);
    v1::GatherRequest by_name, inline_request;
    by_name.set_params_name(kTableName);
    v1::Tensor* indices = by_name.mutable_indices();
    indices->set_dtype(v1::DT_INT64);
    indices->add_shape(lookups);
    indices->set_data(reinterpret_cast<const char*>(idx.data()), idx.size() * 8);
    v1::Tensor* params = inline_request.mutable_params();
    params->set_dtype(v1::DT_FLOAT32);
    params->add_shape(lookups);
    params->add_shape(kRowFloats);
    std::string* slice = params->mutable_data();
    for (int64_t i = 0; i < lookups; ++i) local[i] = (i * 7919) % lookups;  // a permutation
    slice->resize(lookups * row_bytes);
    for (int64_t i = 0; i < lookups; ++i) {
      std::memcpy(slice->data() + local[i] * row_bytes, data + idx[i] * row_bytes, row_bytes);
    }
    v1::Tensor* inline_indices = inline_request.mutable_indices();
    *inline_indices = *indices;
    inline_indices->set_data(reinterpret_cast<const char*>(local.data()), local.size() * 8);
    if (v == 0) {
      v1::Tensor* out = c.first_expected.mutable_output();
      out->set_dtype(v1::DT_FLOAT32);
      out->add_shape(lookups);
      out->add_shape(kRowFloats);
      for (int64_t i : idx) out->mutable_data()->append(data + i * row_bytes, row_bytes);
      c.response_bytes = static_cast<int64_t>(c.first_expected.ByteSizeLong());
      c.first_by_name = by_name;
      c.first_inline = inline_request;
    }
    grpc::Slice a(by_name.SerializeAsString()), b(inline_request.SerializeAsString());
    c.by_name.emplace_back(&a, 1);
    c.inline_params.emplace_back(&b, 1);
  }
  return c;
}

// The flags that set tensorcompute-server's options (--device, --cpu_threads,
// --inline_compute_bytes), for every server the benchmark starts.
void ApplyServerFlags(server::ServerOptions* options) {
  options->device = absl::GetFlag(FLAGS_device);
  options->cpu_threads = absl::GetFlag(FLAGS_cpu_threads);
  if (absl::GetFlag(FLAGS_inline_compute_bytes) >= 0) {
    options->inline_compute_bytes = absl::GetFlag(FLAGS_inline_compute_bytes);
  }
}

// A server with the table resident.
absl::StatusOr<std::unique_ptr<server::Server>> StartWithTable(server::ServerOptions options,
                                                               int64_t rows) {
  ApplyServerFlags(&options);
  return bench::StartWithTable(std::move(options), kTableName, rows, kRowFloats);
}

int EmbeddingMain() {
  spdlog::set_level(spdlog::level::warn);
  const int64_t rows = absl::GetFlag(FLAGS_table_mib) * (int64_t{1} << 20) / (kRowFloats * 4);
  std::vector<int> concurrencies;
  for (const std::string& s : absl::GetFlag(FLAGS_concurrency)) {
    int c = 0;
    if (!absl::SimpleAtoi(s, &c) || c < 1) return 2;
    concurrencies.push_back(c);
  }
  server::ServerOptions batched_options, unbatched_options;
  unbatched_options.max_batch_size = 1;
  auto batched = StartWithTable(batched_options, rows);
  auto unbatched = StartWithTable(unbatched_options, rows);
  if (!batched.ok() || !unbatched.ok()) {
    std::fprintf(stderr, "tensorcompute-server: %s %s\n", batched.status().ToString().c_str(),
                 unbatched.status().ToString().c_str());
    return 1;
  }
  const core::Tensor& table = (*batched)->registry().Find(kTableName)->tensor;
  std::vector<EmbeddingCase> cases;
  EchoService echo_service;
  for (const std::string& s : absl::GetFlag(FLAGS_lookups)) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(s, &n) || n < 1) return 2;
    cases.push_back(MakeEmbeddingCase(table, n));
    echo_service.Add(n * 8, cases.back().first_expected);
  }
  int echo_port = 0;
  std::unique_ptr<grpc::Server> echo = StartEcho(&echo_service, &echo_port);
  const int num_channels = absl::GetFlag(FLAGS_channels);
  std::unique_ptr<Target> b_target = Connect("batched", (*batched)->port(), num_channels);
  std::unique_ptr<Target> u_target = Connect("unbatched", (*unbatched)->port(), num_channels);
  std::unique_ptr<Target> e_target =
      echo ? Connect("echo", echo_port, num_channels) : std::unique_ptr<Target>();
  if (b_target == nullptr || u_target == nullptr || e_target == nullptr) {
    std::fprintf(stderr, "could not start or connect\n");
    return 1;
  }
  for (const EmbeddingCase& c : cases) {
    const std::string errors[] = {Validate(*b_target, c.first_by_name, c.first_expected),
                                  Validate(*u_target, c.first_by_name, c.first_expected),
                                  Validate(*b_target, c.first_inline, c.first_expected),
                                  Validate(*e_target, c.first_by_name, c.first_expected)};
    for (const std::string& e : errors) {
      if (!e.empty()) {
        std::fprintf(stderr, "validation of %lld lookups failed: %s\n",
                     static_cast<long long>(c.lookups), e.c_str());
        return 1;
      }
    }
  }

  // The four ways of making the same answers, measured back to back, rotating the order.
  enum Way { kBatched, kUnbatched, kInline, kEcho, kWays };
  const char* const way_names[] = {"by name, batching on", "by name, batching off",
                                   "inline slice, batching on", "echo"};
  struct EmbeddingPoint {
    const EmbeddingCase* c;
    int concurrency;
    std::vector<PointResult> results[kWays];
    std::vector<double> vs_echo, vs_unbatched, inline_vs_echo;
    std::vector<std::unique_ptr<ClosedLoop>> loops;
  };
  std::vector<EmbeddingPoint> points;
  for (const EmbeddingCase& c : cases) {
    for (int conc : concurrencies) points.push_back(EmbeddingPoint{&c, conc, {}, {}, {}, {}, {}});
  }
  const absl::Duration warmup = absl::Seconds(absl::GetFlag(FLAGS_warmup_s));
  const absl::Duration duration = absl::Seconds(absl::GetFlag(FLAGS_duration_s));
  const absl::Duration max_duration = absl::Seconds(absl::GetFlag(FLAGS_max_duration_s));
  const int repetitions = absl::GetFlag(FLAGS_repetitions);
  for (int rep = 0; rep < repetitions; ++rep) {
    for (EmbeddingPoint& p : points) {
      PointResult r[kWays];
      for (int k = 0; k < kWays; ++k) {
        const int way = (k + rep) % kWays;
        Target* target = way == kBatched || way == kInline ? b_target.get()
                         : way == kUnbatched               ? u_target.get()
                                                           : e_target.get();
        const server::Server* tc = way == kBatched || way == kInline ? batched->get()
                                   : way == kUnbatched               ? unbatched->get()
                                                                     : nullptr;
        p.loops.push_back(std::make_unique<ClosedLoop>(
            target, way == kInline ? p.c->inline_params : p.c->by_name, p.concurrency,
            absl::GetFlag(FLAGS_warmup_calls_per_slot)));
        r[way] = p.loops.back()->Run(warmup, duration,
                                     absl::GetFlag(FLAGS_min_calls_per_slot) * p.concurrency,
                                     max_duration, tc);
      }
      p.vs_echo.push_back(r[kEcho].qps > 0 ? r[kBatched].qps / r[kEcho].qps : 0);
      p.vs_unbatched.push_back(r[kUnbatched].qps > 0 ? r[kBatched].qps / r[kUnbatched].qps : 0);
      p.inline_vs_echo.push_back(r[kEcho].qps > 0 ? r[kInline].qps / r[kEcho].qps : 0);
      std::fprintf(stderr,
                   "rep %d n=%-5lld C=%-3d batched %8.0f/s unbatched %8.0f/s inline %8.0f/s echo "
                   "%8.0f/s\n",
                   rep + 1, static_cast<long long>(p.c->lookups), p.concurrency, r[kBatched].qps,
                   r[kUnbatched].qps, r[kInline].qps, r[kEcho].qps);
      for (int w = 0; w < kWays; ++w) p.results[w].push_back(std::move(r[w]));
    }
  }

  std::printf(
      "Embedding lookups: a %lld MiB float32 table of 256 B rows resident in tensorcompute-server "
      "(cpu_threads=%d), requests of random int64 indices; 127.0.0.1, %d channels per server, "
      "%.1f s per point after %.1f s warm-up, median of %d repetitions. Ways: %s (B), %s (U), "
      "%s (I), %s (E).\n\n",
      static_cast<long long>(absl::GetFlag(FLAGS_table_mib)), (*batched)->cpu_threads(),
      num_channels, absl::ToDoubleSeconds(duration), absl::ToDoubleSeconds(warmup), repetitions,
      way_names[kBatched], way_names[kUnbatched], way_names[kInline], way_names[kEcho]);
  std::printf(
      "| lookups → response | C | QPS B / U / I / E | response MB/s B / E | p50 ms B / U / I / E | "
      "p99 ms B / U / I / E | B/E | B/U | I/E | requests per batch B |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  int64_t failed = 0;
  for (const EmbeddingPoint& p : points) {
    auto qps = [](const PointResult& r) { return r.qps; };
    auto p50 = [](const PointResult& r) { return r.p50_ms; };
    auto p99 = [](const PointResult& r) { return r.p99_ms; };
    auto batch = [](const PointResult& r) { return r.mean_batch; };
    const auto& R = p.results;
    std::printf(
        "| %lld → %s | %d | %.0f / %.0f / %.0f / %.0f | %.1f / %.1f | %s / %s / %s / %s | "
        "%s / %s / %s / %s | **%.2f** | **%.2f** | %.2f | %.1f |\n",
        static_cast<long long>(p.c->lookups), Bytes(p.c->response_bytes).c_str(), p.concurrency,
        MedianOf(R[kBatched], qps), MedianOf(R[kUnbatched], qps), MedianOf(R[kInline], qps),
        MedianOf(R[kEcho], qps), MedianOf(R[kBatched], qps) * p.c->response_bytes / 1e6,
        MedianOf(R[kEcho], qps) * p.c->response_bytes / 1e6, Ms(MedianOf(R[kBatched], p50)).c_str(),
        Ms(MedianOf(R[kUnbatched], p50)).c_str(), Ms(MedianOf(R[kInline], p50)).c_str(),
        Ms(MedianOf(R[kEcho], p50)).c_str(), Ms(MedianOf(R[kBatched], p99)).c_str(),
        Ms(MedianOf(R[kUnbatched], p99)).c_str(), Ms(MedianOf(R[kInline], p99)).c_str(),
        Ms(MedianOf(R[kEcho], p99)).c_str(), Median(p.vs_echo), Median(p.vs_unbatched),
        Median(p.inline_vs_echo), MedianOf(R[kBatched], batch));
    for (const auto& results : R) {
      for (const PointResult& r : results) {
        failed += r.failed;
        if (!r.first_error.empty()) std::fprintf(stderr, "error: %s\n", r.first_error.c_str());
      }
    }
  }
  std::printf("\nnon-OK answers: %lld\n", static_cast<long long>(failed));
  echo->Shutdown();
  (*batched)->Drain();
  (*unbatched)->Drain();
  return failed == 0 ? 0 : 1;
}

int Main() {
  if (absl::GetFlag(FLAGS_embedding)) return EmbeddingMain();
  spdlog::set_level(spdlog::level::warn);
  std::vector<std::unique_ptr<Case>> cases;
  for (const std::string& name : absl::GetFlag(FLAGS_cases)) {
    cases.push_back(MakeCase(name));
    if (cases.back() == nullptr) {
      std::fprintf(stderr, "unknown case %s (small, 1MiB, 16MiB)\n", name.c_str());
      return 2;
    }
  }
  std::vector<int> concurrencies;
  for (const std::string& s : absl::GetFlag(FLAGS_concurrency)) {
    int c = 0;
    if (!absl::SimpleAtoi(s, &c) || c < 1) {
      std::fprintf(stderr, "bad --concurrency %s\n", s.c_str());
      return 2;
    }
    concurrencies.push_back(c);
  }

  server::ServerOptions options;
  options.listen = "127.0.0.1:0";
  ApplyServerFlags(&options);
  absl::StatusOr<std::unique_ptr<server::Server>> tc = server::Server::Start(options);
  if (!tc.ok()) {
    std::fprintf(stderr, "tensorcompute-server: %s\n", tc.status().ToString().c_str());
    return 1;
  }
  EchoService echo_service;
  for (const auto& c : cases) echo_service.Add(*c);
  int echo_port = 0;
  std::unique_ptr<grpc::Server> echo = StartEcho(&echo_service, &echo_port);
  if (echo == nullptr || echo_port == 0) {
    std::fprintf(stderr, "echo server did not start\n");
    return 1;
  }

  const int num_channels = absl::GetFlag(FLAGS_channels);
  std::unique_ptr<Target> tc_target = Connect("tensorcompute", (*tc)->port(), num_channels);
  std::unique_ptr<Target> echo_target = Connect("echo", echo_port, num_channels);
  if (tc_target == nullptr || echo_target == nullptr) {
    std::fprintf(stderr, "could not connect\n");
    return 1;
  }
  for (const auto& c : cases) {
    for (const Target* t : {tc_target.get(), echo_target.get()}) {
      const std::string error = Validate(*t, c->request, c->expected);
      if (!error.empty()) {
        std::fprintf(stderr, "validation of %s on %s failed: %s\n", c->name.c_str(),
                     t->name.c_str(), error.c_str());
        return 1;
      }
    }
  }

  const absl::Duration warmup = absl::Seconds(absl::GetFlag(FLAGS_warmup_s));
  const absl::Duration duration = absl::Seconds(absl::GetFlag(FLAGS_duration_s));
  const int repetitions = absl::GetFlag(FLAGS_repetitions);
  const int64_t min_calls_per_slot = absl::GetFlag(FLAGS_min_calls_per_slot);
  const int64_t warmup_calls_per_slot = absl::GetFlag(FLAGS_warmup_calls_per_slot);
  const std::string only_server = absl::GetFlag(FLAGS_only);
  if (!only_server.empty() && only_server != "tensorcompute" && only_server != "echo") {
    std::fprintf(stderr, "bad --only %s (tensorcompute or echo)\n", only_server.c_str());
    return 2;
  }
  const absl::Duration max_duration = absl::Seconds(absl::GetFlag(FLAGS_max_duration_s));
  std::vector<Point> points;
  for (const auto& c : cases) {
    for (int conc : concurrencies) points.push_back(Point{c.get(), conc, {}, {}, {}, {}});
  }
  for (int rep = 0; rep < repetitions; ++rep) {
    for (Point& p : points) {
      // Alternate which server goes first so slow drift does not favour one.
      const bool tc_first = rep % 2 == 0;
      PointResult tc_r, echo_r;
      for (int k = 0; k < 2; ++k) {
        const bool run_tc = (k == 0) == tc_first;
        if (!only_server.empty() && (only_server == "echo") == run_tc) continue;
        p.loops.push_back(std::make_unique<ClosedLoop>(run_tc ? tc_target.get() : echo_target.get(),
                                                       std::vector{p.c->request_buffer},
                                                       p.concurrency, warmup_calls_per_slot));
        PointResult r = p.loops.back()->Run(warmup, duration, min_calls_per_slot * p.concurrency,
                                            max_duration, run_tc ? tc->get() : nullptr);
        (run_tc ? tc_r : echo_r) = std::move(r);
      }
      p.ratio.push_back(echo_r.qps > 0 ? tc_r.qps / echo_r.qps : 0);
      std::fprintf(stderr, "rep %d %-5s C=%-3d tensorcompute %9.1f/s  echo %9.1f/s  ratio %.2f\n",
                   rep + 1, p.c->name.c_str(), p.concurrency, tc_r.qps, echo_r.qps, p.ratio.back());
      p.tc.push_back(std::move(tc_r));
      p.echo.push_back(std::move(echo_r));
    }
  }

  std::printf(
      "tensorcompute-server (default options, cpu_threads=%d) vs a bare gRPC echo of the same "
      "bytes; 127.0.0.1, %d channels per server, %.1f s per point after %.1f s warm-up, median "
      "of %d repetitions\n\n",
      (*tc)->cpu_threads(), num_channels, absl::ToDoubleSeconds(duration),
      absl::ToDoubleSeconds(warmup), repetitions);
  std::printf(
      "| case: request → response | C | QPS tc / echo | response MB/s tc / echo | "
      "p50 ms tc / echo | p99 ms tc / echo | tc/echo | target |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  int64_t failed = 0;
  bool all_met = true;
  for (const Point& p : points) {
    const int64_t req = p.c->request.ByteSizeLong(), resp = p.c->expected.ByteSizeLong();
    auto qps = [](const PointResult& r) { return r.qps; };
    auto p50 = [](const PointResult& r) { return r.p50_ms; };
    auto p99 = [](const PointResult& r) { return r.p99_ms; };
    const double ratio = Median(p.ratio);
    const double target = p.c->large ? 0.80 : 0.70;
    all_met = all_met && ratio >= target;
    std::printf(
        "| %s: %s → %s | %d | %.0f / %.0f | %.1f / %.1f | %s / %s | %s / %s | **%.2f** | %s |\n",
        p.c->name.c_str(), Bytes(req).c_str(), Bytes(resp).c_str(), p.concurrency,
        MedianOf(p.tc, qps), MedianOf(p.echo, qps), MedianOf(p.tc, qps) * resp / 1e6,
        MedianOf(p.echo, qps) * resp / 1e6, Ms(MedianOf(p.tc, p50)).c_str(),
        Ms(MedianOf(p.echo, p50)).c_str(), Ms(MedianOf(p.tc, p99)).c_str(),
        Ms(MedianOf(p.echo, p99)).c_str(), ratio,
        ratio >= target ? absl::StrFormat("≥ %.2f met", target).c_str()
                        : absl::StrFormat("≥ %.2f **missed** (%.3f)", target, ratio).c_str());
    for (const PointResult& r : p.tc) failed += r.failed;
    for (const PointResult& r : p.echo) failed += r.failed;
  }

  std::printf("\nSamples and CPU (medians; CPU is the whole process: client and both servers)\n\n");
  std::printf(
      "| case | C | calls measured tc / echo | seconds tc / echo | CPU cores busy tc / echo | "
      "CPU µs per call tc / echo | tc requests per batch |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const Point& p : points) {
    auto cores = [](const PointResult& r) { return r.cpu_cores; };
    auto per = [](const PointResult& r) { return r.cpu_us_per_call; };
    auto batch = [](const PointResult& r) { return r.mean_batch; };
    auto calls = [](const PointResult& r) { return static_cast<double>(r.calls); };
    auto secs = [](const PointResult& r) { return r.seconds; };
    std::printf("| %s | %d | %.0f / %.0f | %.1f / %.1f | %.2f / %.2f | %.0f / %.0f | %.2f |\n",
                p.c->name.c_str(), p.concurrency, MedianOf(p.tc, calls), MedianOf(p.echo, calls),
                MedianOf(p.tc, secs), MedianOf(p.echo, secs), MedianOf(p.tc, cores),
                MedianOf(p.echo, cores), MedianOf(p.tc, per), MedianOf(p.echo, per),
                MedianOf(p.tc, batch));
  }
  std::printf("\nnon-OK answers: %lld%s; targets %s\n", static_cast<long long>(failed),
              failed ? " (FAILED)" : "", all_met ? "all met" : "NOT all met");
  for (const Point& p : points) {
    for (const PointResult& r : p.tc) {
      if (!r.first_error.empty()) std::printf("  tensorcompute: %s\n", r.first_error.c_str());
    }
    for (const PointResult& r : p.echo) {
      if (!r.first_error.empty()) std::printf("  echo: %s\n", r.first_error.c_str());
    }
  }

  echo->Shutdown();
  (*tc)->Drain();
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace tensorcompute::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // As in tensorcompute-server's main (server/main.cc): Debian's Abseil has deadlock
  // detection on, which production turns off; the benchmark measures production's setting.
  if (!absl::GetFlag(FLAGS_mutex_deadlock_detection)) {
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  }
  return tensorcompute::bench::Main();
}
