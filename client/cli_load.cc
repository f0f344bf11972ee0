#include "client/cli_load.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include <unistd.h>

#include "client/load_sweep.h"
#include "client/load_tester.h"
#include "client/update_writer.h"
#include "core/dtype.h"
#include "core/shape.h"

namespace tensorcompute::client {
namespace {

absl::StatusOr<core::Shape> ParseShape(const std::string& text) {
  core::Shape shape;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int64_t d;
    if (!absl::SimpleAtoi(part, &d) || d < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--params-shape %s: expected dimensions like 1024,64", text));
    }
    shape.push_back(d);
  }
  if (shape.empty()) return absl::InvalidArgumentError("--params-shape is empty");
  return shape;
}

// Writes `text` to `path` (the flag `flag`'s value); false, after saying so, when it cannot.
bool WriteTextFile(const char* flag, const std::string& path, const std::string& text) {
  FILE* file = std::fopen(path.c_str(), "w");
  const bool ok = file != nullptr && std::fputs(text.c_str(), file) >= 0;
  if ((file != nullptr && std::fclose(file) != 0) || !ok) {
    std::fprintf(stderr, "error: %s %s: cannot write\n", flag, path.c_str());
    return false;
  }
  return true;
}

// Writes the points to --csv and --json ("-": stdout). Returns the exit code.
int EmitSweep(const LoadFlags& f, const std::vector<SweepPoint>& points) {
  const SweepLabels labels{f.op, f.protocol};
  if (!f.csv.empty()) {
    absl::StatusOr<std::string> csv = SweepCsv(points, labels);
    if (!csv.ok()) {
      std::fprintf(stderr, "error: --csv: %s\n", std::string(csv.status().message()).c_str());
      return kUsage;
    }
    if (f.csv == "-") {
      std::printf("%s", csv->c_str());
    } else if (!WriteTextFile("--csv", f.csv, *csv)) {
      return kIoError;
    }
  }
  if (!f.json.empty()) {
    const std::string json = SweepJson(points, labels) + "\n";
    if (f.json == "-") {
      std::printf("%s", json.c_str());
    } else if (!WriteTextFile("--json", f.json, json)) {
      return kIoError;
    }
  }
  return kOk;
}

// The checks made before anything else: the sweep's values (into `*sweep` when there is one)
// and the flags that cannot go together. Returns kOk or kUsage, after saying why.
int CheckRunFlags(const CommonFlags& common, const LoadFlags& f, std::optional<Sweep>* sweep) {
  if (!f.sweep_concurrency.empty() || !f.sweep_rate.empty()) {
    const SweepKind kind = f.sweep_rate.empty() ? SweepKind::kConcurrency : SweepKind::kRate;
    absl::StatusOr<std::vector<double>> values =
        ParseSweepList(kind, kind == SweepKind::kRate ? f.sweep_rate : f.sweep_concurrency);
    if (!values.ok()) return ReportUsageError(values.status());
    *sweep = Sweep{kind, *std::move(values)};
    if (kind == SweepKind::kRate && f.protocol == "kserve-http") {
      std::fprintf(stderr,
                   "error: --sweep-rate: --protocol kserve-http is closed loop only; use "
                   "--sweep-concurrency\n");
      return kUsage;
    }
  }
  if (f.csv == "-" && f.json == "-") {
    std::fprintf(stderr, "error: --csv - and --json - cannot both write to stdout\n");
    return kUsage;
  }
  if (f.protocol == "kserve-http" && common.compression != "none") {
    std::fprintf(stderr,
                 "error: --compression is gRPC's; --protocol kserve-http sends plain HTTP\n");
    return kUsage;
  }
  return kOk;
}

// The requests the flags describe, but for --params-name (ResolveParamsName). Returns kOk or
// kUsage, after saying why.
int BuildSpec(const LoadFlags& f, LoadRequestSpec* spec) {
  spec->op = f.op == "gather-nd"       ? LoadOp::kGatherNd
             : f.op == "embedding-bag" ? LoadOp::kEmbeddingBag
                                       : LoadOp::kGather;
  spec->bag_size = f.bag_size;
  spec->kserve = f.protocol != "native";
  spec->http = f.protocol == "kserve-http";
  const std::optional<core::DataType> dtype = core::DataTypeFromName(f.dtype);
  if (!dtype.has_value()) {
    std::fprintf(stderr, "error: --dtype %s is not a dtype (e.g. float32, int64, string)\n",
                 f.dtype.c_str());
    return kUsage;
  }
  spec->dtype = *dtype;
  spec->index_dtype = f.index_dtype == "int64" ? core::DataType::kInt64 : core::DataType::kInt32;
  if (f.params_shape.empty()) {
    spec->params_shape = {f.rows, f.slice};
  } else {
    absl::StatusOr<core::Shape> shape = ParseShape(f.params_shape);
    if (!shape.ok()) return ReportUsageError(shape.status());
    spec->params_shape = *shape;
  }
  spec->num_indices = f.indices;
  spec->index_depth = f.index_depth;
  spec->invalid_fraction = f.invalid_fraction;
  spec->distinct_requests = f.distinct;
  return kOk;
}

// With --params-name: the resident table into `*spec`, with its dtype and shape (for the index
// ranges) from the first target's list, except over HTTP, which cannot list (--dtype and
// --rows/--slice or --params-shape describe it). Returns kOk or kRpcError, after saying why.
int ResolveParamsName(Client& client, const LoadFlags& f, LoadRequestSpec* spec,
                      std::optional<TensorInfo>* table) {
  if (f.params_name.empty()) return kOk;
  if (spec->http) {
    spec->params_name = f.params_name;
    return kOk;
  }
  absl::StatusOr<std::vector<TensorInfo>> list = client.ListTensors();
  if (!list.ok()) return ReportRpcError(list.status());
  auto it = std::find_if(list->begin(), list->end(),
                         [&](const TensorInfo& t) { return t.name == f.params_name; });
  if (it == list->end()) {
    return ReportRpcError(absl::NotFoundError(
        absl::StrFormat("--params-name %s: no resident tensor of that name on %s", f.params_name,
                        client.targets()[0])));
  }
  spec->params_name = f.params_name;
  spec->dtype = it->dtype;
  spec->params_shape = it->shape;
  *table = *it;
  return kOk;
}

// With --update-rate: what the writer sends, from the table's description, and on which
// channel (a client of its own: its connection is apart from the lookups'). Returns kOk, or
// kUsage after saying why.
int PrepareUpdates(const CommonFlags& common, const LoadFlags& f, const Client& client,
                   const TensorInfo& table, UpdateLoadSpec* spec,
                   std::unique_ptr<Client>* writer_client) {
  spec->name = table.name;
  spec->dtype = table.dtype;
  spec->shape = table.shape;
  spec->storage = table.storage;
  spec->rows_per_second = f.update_rate;
  spec->rows_per_message = f.update_rows;
  const std::string& token = client.options().admin_token.empty() ? client.options().auth_token
                                                                  : client.options().admin_token;
  if (!token.empty()) spec->authorization = "Bearer " + token;
  if (absl::Status ok = CheckUpdateLoadSpec(*spec); !ok.ok()) {
    return ReportUsageError(
        absl::InvalidArgumentError(absl::StrCat("--update-rows: ", ok.message())));
  }
  CommonFlags one = common;
  one.target = client.targets()[0];
  one.connections = 1;
  absl::StatusOr<std::unique_ptr<Client>> made = MakeClient(one);
  if (!made.ok()) return ReportUsageError(made.status());
  *writer_client = *std::move(made);
  return kOk;
}

// The loop's options from the flags, with progress on stderr: a line rewritten in place on a
// terminal (`tty`), else a line every --progress-interval.
LoadOptions MakeLoadOptions(const CommonFlags& common, const LoadFlags& f, std::string auth_token,
                            bool tty) {
  LoadOptions options;
  options.concurrency = f.concurrency;
  options.rate = f.rate;
  options.max_outstanding = f.max_outstanding;
  options.duration = absl::Seconds(f.duration_s);
  options.requests = f.requests;
  options.warmup = absl::Seconds(f.warmup_s);
  options.timeout = absl::Seconds(common.timeout_s);
  options.max_attempts = 1 + common.retries;
  options.auth_token = std::move(auth_token);
  options.progress_interval = absl::Seconds(tty ? 0.25 : f.progress_interval_s);
  options.on_progress = [tty](const LoadProgress& p) {
    const std::string line =
        p.warming_up ? absl::StrFormat("[warmup] %.0f QPS", p.qps)
                     : absl::StrFormat("[%6.1fs] %d done, %.0f QPS, %d errors",
                                       absl::ToDoubleSeconds(p.elapsed), p.done, p.qps, p.errors);
    std::fprintf(stderr, tty ? "\r\033[K%s" : "%s\n", line.c_str());
    std::fflush(stderr);
  };
  return options;
}

// Runs every point of `sweep`, a line on stderr as each starts (and its summary on stdout as it
// ends, when stdout is not --csv's or --json's), then writes --csv and --json.
int RunSweepPoints(const LoadFlags& f, const Sweep& sweep, const LoadOptions& options,
                   const RunPointFn& run_point) {
  SweepCallbacks callbacks;
  callbacks.on_point_start = [](int index, int count, const LoadOptions& o) {
    const std::string what = o.rate > 0 ? absl::StrFormat("rate %g", o.rate)
                                        : absl::StrFormat("concurrency %d", o.concurrency);
    std::fprintf(stderr, "sweep: point %d of %d: %s\n", index + 1, count, what.c_str());
  };
  if (f.csv != "-" && f.json != "-") {  // stdout is free: a line per point as it ends
    callbacks.on_point_done = [](const SweepPoint& p) {
      std::printf("%s\n", SweepPointSummary(p).c_str());
      std::fflush(stdout);
    };
  }
  absl::StatusOr<std::vector<SweepPoint>> points = RunSweep(sweep, options, run_point, callbacks);
  if (!points.ok()) return ReportUsageError(points.status());
  return EmitSweep(f, *points);
}

// Runs once and prints the report as text (unless --csv or --json is stdout), then writes
// --csv (one row) and --json.
int RunOnce(const LoadFlags& f, const LoadOptions& options, const RunPointFn& run_point) {
  absl::StatusOr<LoadReport> report = run_point(options);
  if (!report.ok()) return ReportUsageError(report.status());
  if (!f.csv.empty()) {
    // One run is a sweep of one point; --json keeps its one object.
    const SweepPoint point{f.rate > 0 ? SweepKind::kRate : SweepKind::kConcurrency,
                           f.rate > 0 ? f.rate : static_cast<double>(f.concurrency), *report};
    LoadFlags csv_only = f;
    csv_only.json.clear();
    if (int code = EmitSweep(csv_only, {point}); code != kOk) return code;
  }
  if (f.json == "-") {
    std::printf("%s\n", report->ToJson().c_str());
    return kOk;
  }
  if (f.csv != "-") std::printf("%s", report->ToText().c_str());
  if (!f.json.empty() && !WriteTextFile("--json", f.json, report->ToJson() + "\n")) {
    return kIoError;
  }
  return kOk;
}

}  // namespace

int RunLoadCommand(const CommonFlags& common, const LoadFlags& f) {
  std::optional<Sweep> sweep;
  if (int code = CheckRunFlags(common, f, &sweep); code != kOk) return code;
  LoadRequestSpec spec;
  if (int code = BuildSpec(f, &spec); code != kOk) return code;
  absl::StatusOr<std::unique_ptr<Client>> client = MakeClient(common);
  if (!client.ok()) return ReportUsageError(client.status());
  if (spec.http && (common.tls || !common.tls_ca.empty() || !common.tls_cert.empty())) {
    std::fprintf(stderr, "error: --protocol kserve-http is plaintext HTTP: no TLS flags\n");
    return kUsage;
  }
  if (f.update_rate > 0 && (f.params_name.empty() || spec.http)) {
    std::fprintf(stderr,
                 "error: --update-rate updates the --params-name table over gRPC: give "
                 "--params-name, with --protocol native or kserve\n");
    return kUsage;
  }
  std::optional<TensorInfo> table;
  if (int code = ResolveParamsName(**client, f, &spec, &table); code != kOk) return code;
  UpdateLoadSpec updates;
  std::unique_ptr<Client> writer_client;
  if (f.update_rate > 0) {
    if (int code = PrepareUpdates(common, f, **client, *table, &updates, &writer_client);
        code != kOk) {
      return code;
    }
  }
  absl::StatusOr<LoadRequests> requests = BuildLoadRequests(spec);
  if (!requests.ok()) return ReportUsageError(requests.status());

  const bool tty = isatty(STDERR_FILENO) == 1;
  const LoadOptions options =
      MakeLoadOptions(common, f, *AuthToken(common), tty);  // MakeClient has read the token
  std::fprintf(stderr, "load: %s to %s, %d requests of ~%d bytes\n", requests->method.c_str(),
               common.target.c_str(), static_cast<int>(requests->valid.size()),
               static_cast<int>(requests->request_bytes));
  const int targets = static_cast<int>((*client)->targets().size());
  const RunPointFn run_point = [&](const LoadOptions& o) -> absl::StatusOr<LoadReport> {
    // The writer runs through the whole point, its warmup included, so that the lookups
    // measured all see updates streaming.
    std::unique_ptr<UpdateWriter> writer;
    if (writer_client != nullptr) {
      absl::StatusOr<std::unique_ptr<UpdateWriter>> started =
          UpdateWriter::Start(writer_client->channels()[0], updates);
      if (!started.ok()) return started.status();
      writer = *std::move(started);
    }
    absl::StatusOr<LoadReport> report = spec.http ? RunHttpLoad((*client)->targets(), *requests, o)
                                                  : RunLoad((*client)->channels(), *requests, o);
    if (tty) std::fprintf(stderr, "\r\033[K");
    if (writer != nullptr) {
      const UpdateLoadReport written = writer->Stop();
      if (report.ok()) report->updates = written;
    }
    if (report.ok()) report->targets = targets;
    return report;
  };
  return sweep.has_value() ? RunSweepPoints(f, *sweep, options, run_point)
                           : RunOnce(f, options, run_point);
}

void AddLoadFlags(CLI::App* app, LoadFlags* f) {
  app->add_option("--op", f->op,
                  "gather, gather-nd, or embedding-bag: fixed bags [--indices / --bag-size, "
                  "--bag-size] pooled by SUM from the [--rows, --slice] float table (native "
                  "protocol only)")
      ->capture_default_str()
      ->check(CLI::IsMember({"gather", "gather-nd", "embedding-bag"}));
  app->add_option("--dtype", f->dtype, "params dtype")->capture_default_str();
  app->add_option("--rows", f->rows, "params rows (dimension 0)")->capture_default_str();
  app->add_option("--slice", f->slice, "elements per row")->capture_default_str();
  app->add_option("--params-shape", f->params_shape,
                  "params shape, e.g. 64,32,16 (instead of --rows and --slice)");
  app->add_option("--indices", f->indices,
                  "indices (rows gathered; embedding-bag: lookups, a multiple of --bag-size) "
                  "per request")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--bag-size", f->bag_size, "embedding-bag: lookups per bag")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--index-depth", f->index_depth, "gather-nd: components per index")
      ->capture_default_str();
  app->add_option("--index-dtype", f->index_dtype, "int32 or int64")
      ->capture_default_str()
      ->check(CLI::IsMember({"int32", "int64"}));
  app->add_option("--invalid-fraction", f->invalid_fraction,
                  "share of requests with an out-of-range index")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app->add_option("--distinct", f->distinct, "distinct requests, generated up front")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  CLI::Option* concurrency =
      app->add_option("--concurrency", f->concurrency, "closed loop: calls in flight")
          ->capture_default_str()
          ->check(CLI::Range(1, kMaxLoadConcurrency));
  CLI::Option* rate =
      app->add_option("--rate", f->rate, "open loop: calls per second (0: closed loop)")
          ->capture_default_str()
          ->check(CLI::NonNegativeNumber);
  CLI::Option* sweep_concurrency =
      app->add_option("--sweep-concurrency", f->sweep_concurrency,
                      absl::StrFormat("closed loop at each of these concurrencies in turn, e.g. "
                                      "1,2,4,8 (integers in [1, %d], at most %d), each point "
                                      "with the same --duration/--requests and --warmup",
                                      kMaxLoadConcurrency, kMaxSweepPoints))
          ->excludes(concurrency)
          ->excludes(rate);
  app->add_option("--sweep-rate", f->sweep_rate,
                  absl::StrFormat("open loop at each of these rates (calls per second) in turn, "
                                  "e.g. 100,1000,5000 (at most %d points)",
                                  kMaxSweepPoints))
      ->excludes(concurrency)
      ->excludes(rate)
      ->excludes(sweep_concurrency);
  app->add_option("--csv", f->csv,
                  "write one CSV row per point (a single run: one row) to FILE, or - for stdout: "
                  "mode, value, op, protocol, sent, not_sent, ok, errors, seconds, "
                  "throughput_rps, sent_bytes_per_s, received_bytes_per_s, p50_us, p90_us, "
                  "p99_us, p999_us, max_us (client/load_sweep.h; tools/plot_load.py plots it)");
  app->add_option("--max-outstanding", f->max_outstanding,
                  "open loop: most calls in flight; beyond it calls are not sent")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--duration", f->duration_s, "measured seconds (without --requests)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--requests", f->requests, "measure exactly this many calls")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--warmup", f->warmup_s, "unmeasured seconds first")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--progress-interval", f->progress_interval_s,
                  "seconds between progress lines when stderr is not a terminal")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--json", f->json,
                  "write the report as JSON to FILE, or - for stdout (a sweep: an array of "
                  "reports, each with its sweep, value, op and protocol)");
  app->add_option("--params-name", f->params_name,
                  "gather from this resident tensor (only indices travel); its dtype and "
                  "shape replace --dtype, --rows, --slice and --params-shape");
  app->add_option("--protocol", f->protocol,
                  "native (tensorcompute.v1), kserve (KServe v2 ModelInfer on the same port) "
                  "or kserve-http (KServe v2 over HTTP/1.1 to the server's --http_listen "
                  "address, closed loop only; with --params-name, give the table's --dtype "
                  "and shape)")
      ->capture_default_str()
      ->check(CLI::IsMember({"native", "kserve", "kserve-http"}));
  app->add_option("--update-rate", f->update_rate,
                  "beside the lookups, replace random rows of the --params-name table at this "
                  "many rows per second (UpdateRows on a connection of its own; 0: none); the "
                  "report's updates line says what was applied")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--update-rows", f->update_rows,
                  "with --update-rate: rows per UpdateRows message (distinct random rows, "
                  "random values in the table's dtype)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
}

}  // namespace tensorcompute::client
