// File: client/load_sweep.h
//
// A load sweep: the same load test (client/load_tester.h) run at several concurrencies
// (closed loop) or several rates (open loop), one point after the other, and the points
// written as CSV and JSON for tools/plot_load.py. `tensorcompute load --sweep-concurrency
// 1,2,4 --csv F --json G` is the CLI's form.
//
//   auto values = ParseSweepList(SweepKind::kConcurrency, "1,2,4,8");
//   auto points = RunSweep({SweepKind::kConcurrency, *values}, options,
//                          [&](const LoadOptions& o) { return RunLoad(channels, requests, o); });
//   std::string csv = SweepCsv(*points, {"gather", "native"});
//
// Each point runs with `base` LoadOptions (duration or requests, warmup, timeout, ...) but its
// own concurrency (rate 0) or rate: nothing is shared between points but the channels, so a
// point's warmup runs again after the previous point's calls have all been answered.
//
// The CSV (SweepCsv) has a header line and one row per point, in sweep order:
//   mode         "closed" (a concurrency sweep) or "open" (a rate sweep)
//   value        the point's concurrency, or its rate in calls per second
//   op, protocol as given (e.g. "gather", "native" / "kserve" / "kserve-http")
//   sent, not_sent, ok, errors   measured calls (LoadReport's counts; ok = by_code["OK"])
//   seconds      measured wall time
//   throughput_rps               answered calls per second (LoadReport::qps)
//   sent_bytes_per_s, received_bytes_per_s   serialized request / response message bytes per
//                second, before any gRPC compression (LoadReport's bytes over its seconds)
//   p50_us, p90_us, p99_us, p999_us, max_us   latency of answered calls, microseconds
// Numbers are plain decimals (no thousands separators); fields never need quoting (op and
// protocol are checked to hold no comma, quote or line break).
//
// The JSON (SweepJson) is an array of LoadReport::ToJson() objects, one per point, each with
// "sweep" ("concurrency" or "rate"), "value", "op" and "protocol" added.
//
// Thread-safety: RunSweep runs the points on the calling thread, one at a time; `run` and the
// callbacks are called on it.

#ifndef TENSORCOMPUTE_CLIENT_LOAD_SWEEP_H_
#define TENSORCOMPUTE_CLIENT_LOAD_SWEEP_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "client/load_tester.h"

namespace tensorcompute::client {

// The most points one sweep runs.
inline constexpr int kMaxSweepPoints = 64;
// The largest concurrency the load tester accepts (--concurrency and every sweep value).
inline constexpr int kMaxLoadConcurrency = 10000;
// The largest open-loop rate a sweep accepts, calls per second.
inline constexpr double kMaxSweepRate = 1e7;

enum class SweepKind { kConcurrency, kRate };

// "concurrency" or "rate".
const char* SweepKindName(SweepKind kind);

// Parses a comma-separated list of sweep values, e.g. "1,2,4,8" or "100,250.5,1000" (spaces
// around values allowed). Concurrencies are integers in [1, kMaxLoadConcurrency]; rates
// finite numbers in (0, kMaxSweepRate]. Returns the values in the order given (repeats
// allowed), or INVALID_ARGUMENT naming the flag (--sweep-concurrency / --sweep-rate) and the
// first bad entry: an empty list or entry, a value that is not a number (or not an integer
// for a concurrency), out of range, or more than kMaxSweepPoints values.
absl::StatusOr<std::vector<double>> ParseSweepList(SweepKind kind, absl::string_view text);

struct Sweep {
  SweepKind kind = SweepKind::kConcurrency;
  std::vector<double> values;  // as ParseSweepList returns them
};

struct SweepPoint {
  SweepKind kind = SweepKind::kConcurrency;
  double value = 0;  // the concurrency or the rate
  LoadReport report;
};

// Runs one point: RunLoad or RunHttpLoad with the point's options.
using RunPointFn = std::function<absl::StatusOr<LoadReport>(const LoadOptions&)>;

struct SweepCallbacks {
  // Before point `index` (0-based) of `count` runs, with its options. Optional.
  std::function<void(int index, int count, const LoadOptions&)> on_point_start;
  // After a point ran. Optional.
  std::function<void(const SweepPoint&)> on_point_done;
};

// Runs `run` once per value of `sweep`, in order: with options = `base` but concurrency set
// to the value and rate 0 (kConcurrency), or rate set to the value (kRate). Returns one point
// per value, or INVALID_ARGUMENT for a sweep with no value, more than kMaxSweepPoints, or a
// value out of range; or the first error `run` returns (the points before it are lost: a
// point fails only on options the load tester refuses, which the first point shows).
absl::StatusOr<std::vector<SweepPoint>> RunSweep(const Sweep& sweep, const LoadOptions& base,
                                                 const RunPointFn& run,
                                                 const SweepCallbacks& callbacks = {});

// What every row names besides the point.
struct SweepLabels {
  std::string op;        // "gather", "gather-nd", "embedding-bag"
  std::string protocol;  // "native", "kserve", "kserve-http"
};

// The CSV text (header and one line per point; see the file comment), or INVALID_ARGUMENT
// when a label holds a comma, a quote or a line break.
absl::StatusOr<std::string> SweepCsv(const std::vector<SweepPoint>& points,
                                     const SweepLabels& labels);

// The JSON array (see the file comment), on one line.
std::string SweepJson(const std::vector<SweepPoint>& points, const SweepLabels& labels);

// One line for people about a finished point, e.g. "concurrency 4: 1234.5 QPS, p50 310.2 us,
// p99 802.0 us, 0 errors".
std::string SweepPointSummary(const SweepPoint& point);

}  // namespace tensorcompute::client

#endif  // TENSORCOMPUTE_CLIENT_LOAD_SWEEP_H_
