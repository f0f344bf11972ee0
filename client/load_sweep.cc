#include "client/load_sweep.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

#include "core/status_macros.h"

namespace tensorcompute::client {
namespace {

const char* FlagName(SweepKind kind) {
  return kind == SweepKind::kConcurrency ? "--sweep-concurrency" : "--sweep-rate";
}

// INVALID_ARGUMENT unless `value` is a valid point of a `kind` sweep.
absl::Status CheckValue(SweepKind kind, double value) {
  if (kind == SweepKind::kConcurrency) {
    if (value >= 1 && value <= kMaxLoadConcurrency && std::floor(value) == value) {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrFormat("concurrency %g is not an integer in [1, %d]", value, kMaxLoadConcurrency));
  }
  if (std::isfinite(value) && value > 0 && value <= kMaxSweepRate) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("rate %g is not a number in (0, %.0f]", value, kMaxSweepRate));
}

absl::Status CheckCount(SweepKind kind, size_t count) {
  if (count == 0) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: no value", FlagName(kind)));
  }
  if (count > static_cast<size_t>(kMaxSweepPoints)) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %d values; at most %d per sweep",
                                                      FlagName(kind), count, kMaxSweepPoints));
  }
  return absl::OkStatus();
}

int64_t Ok(const LoadReport& report) {
  auto it = report.by_code.find("OK");
  return it == report.by_code.end() ? 0 : it->second;
}

double PerSecond(int64_t bytes, double seconds) { return seconds > 0 ? bytes / seconds : 0; }

}  // namespace

const char* SweepKindName(SweepKind kind) {
  return kind == SweepKind::kConcurrency ? "concurrency" : "rate";
}

absl::StatusOr<std::vector<double>> ParseSweepList(SweepKind kind, absl::string_view text) {
  std::vector<double> values;
  if (absl::StripAsciiWhitespace(text).empty()) TC_RETURN_IF_ERROR(CheckCount(kind, 0));
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    const absl::string_view entry = absl::StripAsciiWhitespace(part);
    // Checked before parsing the entry past the limit, so that a huge list is refused after
    // kMaxSweepPoints entries rather than parsed whole.
    if (values.size() == static_cast<size_t>(kMaxSweepPoints)) {
      TC_RETURN_IF_ERROR(CheckCount(kind, values.size() + 1));
    }
    double value = 0;
    bool parsed = false;
    if (kind == SweepKind::kConcurrency) {
      int64_t n = 0;
      parsed = absl::SimpleAtoi(entry, &n);
      value = static_cast<double>(n);
    } else {
      parsed = absl::SimpleAtod(entry, &value);
    }
    if (entry.empty() || !parsed) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s %s: entry %d ('%s') is not %s", FlagName(kind), text, values.size() + 1, entry,
          kind == SweepKind::kConcurrency ? "an integer" : "a number"));
    }
    if (absl::Status status = CheckValue(kind, value); !status.ok()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s %s: entry %d: %s", FlagName(kind), text,
                                                        values.size() + 1, status.message()));
    }
    values.push_back(value);
  }
  return values;
}

absl::StatusOr<std::vector<SweepPoint>> RunSweep(const Sweep& sweep, const LoadOptions& base,
                                                 const RunPointFn& run,
                                                 const SweepCallbacks& callbacks) {
  // Every value checked before the first point runs: a bad one must not surface only after
  // minutes of load.
  TC_RETURN_IF_ERROR(CheckCount(sweep.kind, sweep.values.size()));
  for (double value : sweep.values) TC_RETURN_IF_ERROR(CheckValue(sweep.kind, value));
  std::vector<SweepPoint> points;
  const int count = static_cast<int>(sweep.values.size());
  for (int i = 0; i < count; ++i) {
    LoadOptions options = base;
    if (sweep.kind == SweepKind::kConcurrency) {
      options.concurrency = static_cast<int>(sweep.values[i]);
      options.rate = 0;
    } else {
      options.rate = sweep.values[i];
    }
    if (callbacks.on_point_start) callbacks.on_point_start(i, count, options);
    TC_ASSIGN_OR_RETURN(LoadReport report, run(options));
    points.push_back({sweep.kind, sweep.values[i], std::move(report)});
    if (callbacks.on_point_done) callbacks.on_point_done(points.back());
  }
  return points;
}

absl::StatusOr<std::string> SweepCsv(const std::vector<SweepPoint>& points,
                                     const SweepLabels& labels) {
  // The labels are written unquoted: one holding a CSV metacharacter is refused, not escaped.
  for (const std::string* label : {&labels.op, &labels.protocol}) {
    if (label->find_first_of(",\"\r\n") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrFormat("CSV label '%s' holds a comma, quote or line break", *label));
    }
  }
  std::string csv =
      "mode,value,op,protocol,sent,not_sent,ok,errors,seconds,throughput_rps,"
      "sent_bytes_per_s,received_bytes_per_s,p50_us,p90_us,p99_us,p999_us,max_us\n";
  for (const SweepPoint& p : points) {
    const LoadReport& r = p.report;
    absl::StrAppendFormat(
        &csv, "%s,%.10g,%s,%s,%d,%d,%d,%d,%.6f,%.3f,%.0f,%.0f,%.1f,%.1f,%.1f,%.1f,%.1f\n",
        p.kind == SweepKind::kConcurrency ? "closed" : "open", p.value, labels.op, labels.protocol,
        r.sent, r.not_sent, Ok(r), r.errors, r.seconds, r.qps, PerSecond(r.bytes_sent, r.seconds),
        PerSecond(r.bytes_received, r.seconds), r.latency_us_p50, r.latency_us_p90,
        r.latency_us_p99, r.latency_us_p999, r.latency_us_max);
  }
  return csv;
}

std::string SweepJson(const std::vector<SweepPoint>& points, const SweepLabels& labels) {
  nlohmann::json array = nlohmann::json::array();
  for (const SweepPoint& p : points) {
    // Through ToJson, so the object has exactly the single run's fields, plus the sweep's.
    nlohmann::json j = nlohmann::json::parse(p.report.ToJson());
    j["sweep"] = SweepKindName(p.kind);
    j["value"] = p.value;
    j["op"] = labels.op;
    j["protocol"] = labels.protocol;
    array.push_back(std::move(j));
  }
  return array.dump();
}

std::string SweepPointSummary(const SweepPoint& point) {
  const LoadReport& r = point.report;
  return absl::StrFormat("%s %g: %.1f QPS, p50 %.1f us, p99 %.1f us, %d errors",
                         SweepKindName(point.kind), point.value, r.qps, r.latency_us_p50,
                         r.latency_us_p99, r.errors);
}

}  // namespace tensorcompute::client
