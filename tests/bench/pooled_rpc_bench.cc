// Pooled lookups through the server (issue 23): EmbeddingBag from a resident table against
// the gRPC echo of the same response, and against what users do without it, a Gather of the
// same rows that the client sums.
//
// One process, three servers on 127.0.0.1:0 (64 MiB message limits, gRPC's callback API):
//   tensorcompute  server::Server::Start with default options (batching on, cpu_threads = all
//                  cores) and a --table_mib float32 table of 256 B rows resident (random
//                  values in [-1, 1));
//   echo           a TensorCompute service that computes nothing: it parses the request and
//                  copies a response built before the run into its answer (the ceiling: the
//                  same bytes each way as the real pooled call).
// Ways, each request --bags bags of --bag_size random rows, SUM:
//   P  EmbeddingBag by params_name: indices [bags, bag_size] in, [bags, 64] float32 out;
//   G  Gather by params_name of the same rows ([bags * bag_size] in, every row out), the
//      client then summing each bag's rows into [bags, 64] (in float32, in index order: the
//      server's bytes exactly);
//   E  the echo of P's response.
// Every way's client parses each answer into its message (as a real client would) inside the
// measured call; G's also sums. A closed loop keeps C calls outstanding over --channels
// connections (tests/bench/rpc_loop.h); points run the ways back to back, rotating which goes
// first, --repetitions times; tables show medians, and ratios are medians of per-repetition
// ratios. Before measuring, P's, G's (summed) and E's answers to the first request must equal
// core::EmbeddingBag's bytes; any non-OK answer during the run makes the exit status 1.
//
// Run: build/tests/bench/pooled_rpc_bench [--bags=16,128 --bag_size=32 --concurrency=1,16,64
//        --duration_s=2 --repetitions=3 --table_mib=1024]
//      It prints a Markdown table (docs/performance.md takes it verbatim) and progress on stderr.

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
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "spdlog/spdlog.h"
#include "tensorcompute/v1/tensorcompute.grpc.pb.h"

#include "core/embedding_bag.h"
#include "core/tensor.h"
#include "server/server.h"
#include "tests/bench/rpc_loop.h"

ABSL_FLAG(double, duration_s, 2.0, "measured seconds per point");
ABSL_FLAG(double, warmup_s, 0.5, "unmeasured seconds before each point");
ABSL_FLAG(int64_t, warmup_calls_per_slot, 3,
          "warm up each point until each of its C calls has completed this many times");
ABSL_FLAG(int64_t, min_calls_per_slot, 3,
          "measure each point until at least C times this many calls completed");
ABSL_FLAG(double, max_duration_s, 30.0, "measured seconds per point at most");
ABSL_FLAG(int, repetitions, 3, "times each point is measured; the table shows medians");
ABSL_FLAG(int, channels, 4, "client channels (HTTP/2 connections) per server");
ABSL_FLAG(std::vector<std::string>, concurrency, std::vector<std::string>({"1", "16", "64"}),
          "outstanding calls per point (closed loop)");
ABSL_FLAG(std::vector<std::string>, bags, std::vector<std::string>({"16", "128"}),
          "bags per request");
ABSL_FLAG(int64_t, bag_size, 32, "rows per bag");
ABSL_FLAG(int64_t, table_mib, 1024, "the resident table's size in MiB (rows of 256 B)");

namespace tensorcompute::bench {
namespace {

constexpr int64_t kRowFloats = 64;  // rows of 256 B
constexpr int kVariants = 64;       // distinct requests per case, sent in turn
constexpr char kTableName[] = "embeddings";

// One request size: kVariants pooled and gather requests of the same rows, and the answer to
// the first.
struct BagCase {
  int64_t bags = 0;
  int64_t bag_size = 0;
  std::vector<grpc::ByteBuffer> pooled, gathers;
  v1::EmbeddingBagRequest first_pooled;
  v1::GatherRequest first_gather;
  v1::EmbeddingBagResponse expected;  // core::EmbeddingBag of the first request
  int64_t response_bytes = 0;         // of the pooled answer
};

v1::Tensor Int64Tensor(const std::vector<int64_t>& values, std::vector<int64_t> shape) {
  v1::Tensor t;
  t.set_dtype(v1::DT_INT64);
  for (int64_t d : shape) t.add_shape(d);
  t.set_data(reinterpret_cast<const char*>(values.data()), values.size() * 8);
  return t;
}

BagCase MakeBagCase(const core::Tensor& table, int64_t bags, int64_t bag_size) {
  BagCase c;
  c.bags = bags;
  c.bag_size = bag_size;
  const int64_t rows = table.shape()[0];
  std::mt19937_64 rng(static_cast<uint64_t>(bags * 1000 + bag_size));
  for (int v = 0; v < kVariants; ++v) {
    std::vector<int64_t> idx(bags * bag_size);
    for (int64_t& i : idx) i = static_cast<int64_t>(rng() % rows);
    v1::EmbeddingBagRequest pooled;
    pooled.set_params_name(kTableName);
    *pooled.mutable_indices() = Int64Tensor(idx, {bags, bag_size});
    pooled.set_mode(v1::EmbeddingBagRequest::SUM);
    v1::GatherRequest gather;
    gather.set_params_name(kTableName);
    *gather.mutable_indices() = Int64Tensor(idx, {bags * bag_size});
    if (v == 0) {
      core::TensorView indices{core::DataType::kInt64,
                               {bags, bag_size},
                               {reinterpret_cast<const uint8_t*>(idx.data()), idx.size() * 8},
                               {}};
      absl::StatusOr<core::Tensor> sums =
          core::EmbeddingBag(table.view(), indices, nullptr, nullptr);
      v1::Tensor* out = c.expected.mutable_output();
      out->set_dtype(v1::DT_FLOAT32);
      out->add_shape(bags);
      out->add_shape(kRowFloats);
      out->set_data(reinterpret_cast<const char*>(sums->bytes().data()), sums->bytes().size());
      c.response_bytes = static_cast<int64_t>(c.expected.ByteSizeLong());
      c.first_pooled = pooled;
      c.first_gather = gather;
    }
    grpc::Slice a(pooled.SerializeAsString()), b(gather.SerializeAsString());
    c.pooled.emplace_back(&a, 1);
    c.gathers.emplace_back(&b, 1);
  }
  return c;
}

// What the G client does with a Gather's rows: each bag's bag_size rows summed in float32, in
// order (acc = 0, then acc += row), as core's unweighted SUM does.
std::string SumBags(const v1::GatherResponse& response, int64_t bag_size) {
  const std::string& rows = response.output().data();
  const int64_t n = static_cast<int64_t>(rows.size() / (kRowFloats * 4));
  const int64_t bags = n / bag_size;
  std::string sums(bags * kRowFloats * 4, '\0');
  const auto* in = reinterpret_cast<const float*>(rows.data());
  auto* out = reinterpret_cast<float*>(sums.data());
  for (int64_t b = 0; b < bags; ++b) {
    float* acc = out + b * kRowFloats;
    for (int64_t r = 0; r < bag_size; ++r) {
      const float* row = in + (b * bag_size + r) * kRowFloats;
      for (int64_t e = 0; e < kRowFloats; ++e) acc[e] += row[e];
    }
  }
  return sums;
}

// The ceiling: answers every EmbeddingBag with the response registered for its number of
// index bytes; NOT_FOUND for an unknown one. Read-only once serving.
class EchoService final : public v1::TensorCompute::CallbackService {
 public:
  void Add(const BagCase& c) { responses_[c.first_pooled.indices().data().size()] = c.expected; }

  grpc::ServerUnaryReactor* EmbeddingBag(grpc::CallbackServerContext* context,
                                         const v1::EmbeddingBagRequest* request,
                                         v1::EmbeddingBagResponse* response) override {
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
  std::map<size_t, v1::EmbeddingBagResponse> responses_;
};

// "" when the typed calls answer what `c` expects: P and E exactly, G once summed.
std::string Validate(const Target& tc, const Target& echo, const BagCase& c) {
  const std::string& want = c.expected.output().data();
  for (const Target* t : {&tc, &echo}) {
    auto stub = v1::TensorCompute::NewStub(t->channels[0]);
    grpc::ClientContext context;
    v1::EmbeddingBagResponse response;
    const grpc::Status s = stub->EmbeddingBag(&context, c.first_pooled, &response);
    if (!s.ok()) return absl::StrCat(t->name, ": status ", s.error_code(), ": ", s.error_message());
    if (response.output().data() != want) return absl::StrCat(t->name, ": wrong pooled bytes");
  }
  auto stub = v1::TensorCompute::NewStub(tc.channels[0]);
  grpc::ClientContext context;
  v1::GatherResponse response;
  const grpc::Status s = stub->Gather(&context, c.first_gather, &response);
  if (!s.ok()) return absl::StrCat("gather: status ", s.error_code(), ": ", s.error_message());
  if (SumBags(response, c.bag_size) != want) return "gather: the client's sums differ";
  return "";
}

// Each way's client work on an answer: parse it (and, for G, sum the bags).
template <typename Response>
ClosedLoop::OnResponse Parse(int64_t expected_bytes) {
  return [expected_bytes](grpc::ByteBuffer& buffer) {
    Response response;
    if (!grpc::SerializationTraits<Response>::Deserialize(&buffer, &response).ok()) return false;
    return static_cast<int64_t>(response.output().data().size()) == expected_bytes;
  };
}

ClosedLoop::OnResponse ParseAndSum(int64_t bag_size, int64_t expected_bytes) {
  return [bag_size, expected_bytes](grpc::ByteBuffer& buffer) {
    v1::GatherResponse response;
    if (!grpc::SerializationTraits<v1::GatherResponse>::Deserialize(&buffer, &response).ok()) {
      return false;
    }
    return static_cast<int64_t>(SumBags(response, bag_size).size()) == expected_bytes;
  };
}

int Main() {
  spdlog::set_level(spdlog::level::warn);
  const int64_t rows = absl::GetFlag(FLAGS_table_mib) * (int64_t{1} << 20) / (kRowFloats * 4);
  const int64_t bag_size = absl::GetFlag(FLAGS_bag_size);
  std::vector<int> concurrencies;
  for (const std::string& s : absl::GetFlag(FLAGS_concurrency)) {
    int c = 0;
    if (!absl::SimpleAtoi(s, &c) || c < 1) return 2;
    concurrencies.push_back(c);
  }
  auto tc = StartWithTable(server::ServerOptions(), kTableName, rows, kRowFloats, /*finite=*/true);
  if (!tc.ok()) {
    std::fprintf(stderr, "tensorcompute-server: %s\n", tc.status().ToString().c_str());
    return 1;
  }
  const core::Tensor& table = (*tc)->registry().Find(kTableName)->tensor;
  std::vector<BagCase> cases;
  EchoService echo_service;
  for (const std::string& s : absl::GetFlag(FLAGS_bags)) {
    int64_t bags = 0;
    if (!absl::SimpleAtoi(s, &bags) || bags < 1 || bag_size < 1) return 2;
    cases.push_back(MakeBagCase(table, bags, bag_size));
    echo_service.Add(cases.back());
  }
  int echo_port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &echo_port);
  builder.SetMaxReceiveMessageSize(kMessageBytes);
  builder.SetMaxSendMessageSize(kMessageBytes);
  builder.RegisterService(&echo_service);
  std::unique_ptr<grpc::Server> echo = builder.BuildAndStart();
  const int num_channels = absl::GetFlag(FLAGS_channels);
  std::unique_ptr<Target> tc_target = Connect("tensorcompute", (*tc)->port(), num_channels);
  std::unique_ptr<Target> echo_target =
      echo ? Connect("echo", echo_port, num_channels) : std::unique_ptr<Target>();
  if (tc_target == nullptr || echo_target == nullptr) {
    std::fprintf(stderr, "could not start or connect\n");
    return 1;
  }
  for (const BagCase& c : cases) {
    const std::string error = Validate(*tc_target, *echo_target, c);
    if (!error.empty()) {
      std::fprintf(stderr, "validation of %lld bags failed: %s\n", static_cast<long long>(c.bags),
                   error.c_str());
      return 1;
    }
  }

  enum Way { kPooled, kGather, kEcho, kWays };
  struct Point {
    const BagCase* c;
    int concurrency;
    std::vector<PointResult> results[kWays];
    std::vector<double> vs_echo, vs_gather;
    std::vector<std::unique_ptr<ClosedLoop>> loops;
  };
  std::vector<Point> points;
  for (const BagCase& c : cases) {
    for (int conc : concurrencies) points.push_back(Point{&c, conc, {}, {}, {}, {}});
  }
  const absl::Duration warmup = absl::Seconds(absl::GetFlag(FLAGS_warmup_s));
  const absl::Duration duration = absl::Seconds(absl::GetFlag(FLAGS_duration_s));
  const absl::Duration max_duration = absl::Seconds(absl::GetFlag(FLAGS_max_duration_s));
  const int repetitions = absl::GetFlag(FLAGS_repetitions);
  for (int rep = 0; rep < repetitions; ++rep) {
    for (Point& p : points) {
      const int64_t pooled_bytes = p.c->bags * kRowFloats * 4;
      PointResult r[kWays];
      for (int k = 0; k < kWays; ++k) {
        const int way = (k + rep) % kWays;
        Target* target = way == kEcho ? echo_target.get() : tc_target.get();
        const server::Server* server = way == kEcho ? nullptr : tc->get();
        std::unique_ptr<ClosedLoop> loop;
        if (way == kGather) {
          loop = std::make_unique<ClosedLoop>(target, p.c->gathers, p.concurrency,
                                              absl::GetFlag(FLAGS_warmup_calls_per_slot),
                                              kGatherMethod, ParseAndSum(bag_size, pooled_bytes));
        } else {
          loop = std::make_unique<ClosedLoop>(
              target, p.c->pooled, p.concurrency, absl::GetFlag(FLAGS_warmup_calls_per_slot),
              kEmbeddingBagMethod, Parse<v1::EmbeddingBagResponse>(pooled_bytes));
        }
        p.loops.push_back(std::move(loop));
        r[way] = p.loops.back()->Run(warmup, duration,
                                     absl::GetFlag(FLAGS_min_calls_per_slot) * p.concurrency,
                                     max_duration, server);
      }
      p.vs_echo.push_back(r[kEcho].qps > 0 ? r[kPooled].qps / r[kEcho].qps : 0);
      p.vs_gather.push_back(r[kGather].qps > 0 ? r[kPooled].qps / r[kGather].qps : 0);
      std::fprintf(stderr,
                   "rep %d bags=%-4lld C=%-3d pooled %8.0f/s gather+sum %8.0f/s echo %8.0f/s\n",
                   rep + 1, static_cast<long long>(p.c->bags), p.concurrency, r[kPooled].qps,
                   r[kGather].qps, r[kEcho].qps);
      for (int w = 0; w < kWays; ++w) p.results[w].push_back(std::move(r[w]));
    }
  }

  std::printf(
      "Pooled lookups: bags of %lld random rows (SUM) from a %lld MiB float32 table of 256 B rows "
      "resident in tensorcompute-server (cpu_threads=%d); 127.0.0.1, %d channels per server, "
      "%.1f s per point after %.1f s warm-up, median of %d repetitions. Ways: EmbeddingBag by "
      "name (P), Gather by name of the same rows summed by the client (G), echo of P's answer "
      "(E).\n\n",
      static_cast<long long>(bag_size), static_cast<long long>(absl::GetFlag(FLAGS_table_mib)),
      (*tc)->cpu_threads(), num_channels, absl::ToDoubleSeconds(duration),
      absl::ToDoubleSeconds(warmup), repetitions);
  std::printf(
      "| bags → response | C | QPS P / G / E | rows read/s P / G (M) | response MB/s P / E | "
      "p50 ms P / G / E | p99 ms P / G / E | P/E | P/G | requests per batch P |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  int64_t failed = 0;
  for (const Point& p : points) {
    auto qps = [](const PointResult& r) { return r.qps; };
    auto p50 = [](const PointResult& r) { return r.p50_ms; };
    auto p99 = [](const PointResult& r) { return r.p99_ms; };
    auto batch = [](const PointResult& r) { return r.mean_batch; };
    const auto& R = p.results;
    const double lookups = static_cast<double>(p.c->bags * p.c->bag_size);
    std::printf(
        "| %lld × %lld → %s | %d | %.0f / %.0f / %.0f | %.1f / %.1f | %.1f / %.1f | %s / %s / %s "
        "| %s / %s / %s | **%.2f** | **%.2f** | %.1f |\n",
        static_cast<long long>(p.c->bags), static_cast<long long>(p.c->bag_size),
        Bytes(p.c->response_bytes).c_str(), p.concurrency, MedianOf(R[kPooled], qps),
        MedianOf(R[kGather], qps), MedianOf(R[kEcho], qps),
        MedianOf(R[kPooled], qps) * lookups / 1e6, MedianOf(R[kGather], qps) * lookups / 1e6,
        MedianOf(R[kPooled], qps) * p.c->response_bytes / 1e6,
        MedianOf(R[kEcho], qps) * p.c->response_bytes / 1e6, Ms(MedianOf(R[kPooled], p50)).c_str(),
        Ms(MedianOf(R[kGather], p50)).c_str(), Ms(MedianOf(R[kEcho], p50)).c_str(),
        Ms(MedianOf(R[kPooled], p99)).c_str(), Ms(MedianOf(R[kGather], p99)).c_str(),
        Ms(MedianOf(R[kEcho], p99)).c_str(), Median(p.vs_echo), Median(p.vs_gather),
        MedianOf(R[kPooled], batch));
    for (const auto& results : R) {
      for (const PointResult& r : results) {
        failed += r.failed;
        if (!r.first_error.empty()) std::fprintf(stderr, "error: %s\n", r.first_error.c_str());
      }
    }
  }
  std::printf("\nnon-OK answers: %lld\n", static_cast<long long>(failed));
  echo->Shutdown();
  (*tc)->Drain();
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace tensorcompute::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tensorcompute::bench::Main();
}
