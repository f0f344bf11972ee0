// Decoding a KServe HTTP infer request body (server/kserve/json_request.h): the streaming decoder
// against the document-building decoder it replaced (tests/server/kserve_json_reference.h),
// on a 16 MiB body of FP32 JSON (random normals, 7 significant digits), `data` last as
// tritonclient writes it, and `data` first (which the streaming decoder parses twice).
//
// Counters: body_MiB and tensor_MiB of the case, and peak_alloc_MiB, the most bytes the decode
// held at once (heap, counted by this binary's operator new, which replaces the global one).
//
// Run: build/tests/bench/kserve_json_bench --benchmark_repetitions=3
//        --benchmark_report_aggregates_only=true

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include <malloc.h>

#include "server/kserve/json_request.h"
#include "tests/server/kserve_json_reference.h"

namespace {

std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};

void* Counted(void* p) {
  if (p == nullptr) throw std::bad_alloc();
  const int64_t live = g_live += static_cast<int64_t>(malloc_usable_size(p));
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
  }
  return p;
}

void Uncounted(void* p) {
  if (p == nullptr) return;
  g_live -= static_cast<int64_t>(malloc_usable_size(p));
  std::free(p);
}

}  // namespace

void* operator new(size_t n) { return Counted(std::malloc(n)); }
void* operator new[](size_t n) { return Counted(std::malloc(n)); }
void operator delete(void* p) noexcept { Uncounted(p); }
void operator delete[](void* p) noexcept { Uncounted(p); }
void operator delete(void* p, size_t) noexcept { Uncounted(p); }
void operator delete[](void* p, size_t) noexcept { Uncounted(p); }

namespace tensorcompute::server::kserve {
namespace {

constexpr double kMiB = 1 << 20;

struct Body {
  std::string text;
  int64_t elements = 0;
};

const Body& Fp32Body(bool data_first) {
  static const Body* const bodies = [] {
    auto* out = new Body[2];
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0, 100);
    std::string data = "[";
    int64_t n = 0;
    char number[32];
    while (data.size() < (16 << 20) - 64) {
      std::snprintf(number, sizeof(number), "%s%.7g", n > 0 ? "," : "", normal(rng));
      data += number;
      ++n;
    }
    data += "]";
    const std::string fields =
        absl::StrCat(R"("name":"params","datatype":"FP32","shape":[)", n, "]");
    out[0].text = absl::StrCat(R"({"inputs":[{)", fields, R"(,"data":)", data, "}]}");
    out[1].text = absl::StrCat(R"({"inputs":[{"data":)", data, ",", fields, "}]}");
    out[0].elements = out[1].elements = n;
    return out;
  }();
  return bodies[data_first ? 1 : 0];
}

using Decoder = absl::Status (*)(absl::string_view, std::optional<int64_t>,
                                 inference::ModelInferRequest*, HttpInferOptions*);

void BM_DecodeFp32(benchmark::State& state, Decoder decode, bool data_first) {
  const Body& body = Fp32Body(data_first);
  int64_t peak = 0;
  for (auto _ : state) {
    const int64_t start = g_live.load();
    g_peak = start;
    {
      inference::ModelInferRequest request;
      HttpInferOptions options;
      const absl::Status status = decode(body.text, std::nullopt, &request, &options);
      if (!status.ok()) state.SkipWithError(std::string(status.message()).c_str());
      benchmark::DoNotOptimize(request);
    }
    peak = std::max(peak, g_peak.load() - start);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(body.text.size()));
  state.counters["body_MiB"] = static_cast<double>(body.text.size()) / kMiB;
  state.counters["tensor_MiB"] = static_cast<double>(4 * body.elements) / kMiB;
  state.counters["peak_alloc_MiB"] = static_cast<double>(peak) / kMiB;
}

BENCHMARK_CAPTURE(BM_DecodeFp32, streaming, &ParseHttpInferRequest, false)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_DecodeFp32, streaming_data_first, &ParseHttpInferRequest, true)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_DecodeFp32, document, &ReferenceParseHttpInferRequest, false)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tensorcompute::server::kserve

BENCHMARK_MAIN();
