// tensorcompute: the command-line client and load tester.
//
//   tensorcompute gather    --target HOST:PORT (--params FILE | --params-name NAME)
//                           --indices FILE [--axis N] [--batch-dims N] [--out FILE]
//   tensorcompute gather-nd --target HOST:PORT (--params FILE | --params-name NAME)
//                           --indices FILE [--batch-dims N] [--out FILE]
//   tensorcompute embedding-bag --target HOST:PORT (--params FILE | --params-name NAME)
//                           --indices FILE [--offsets FILE] [--per-sample-weights FILE]
//                           [--mode sum|mean|max|sqrtn] [--include-last-offset]
//                           [--padding-idx N] [--out FILE]   (client/cli_embedding_bag.h)
//   tensorcompute put       NAME --input FILE [--device D] [--replace] [--chunk-bytes N]
//                           [--storage as-is|float16|int8-rowwise|int8-rowwise-prequantized]
//                           [--all-targets] [--shards N --targets T0,T1,...]
//   tensorcompute delete    NAME [--all-targets]
//   tensorcompute list      [--json]
//   tensorcompute health    --target HOST:PORT [--service NAME]
//   tensorcompute load      --target HOST:PORT [--op gather|gather-nd|embedding-bag]
//                           [--bag-size N] [--params-name NAME] [shape, loop and report
//                           flags; see --help]
//                           [--sweep-concurrency 1,2,4,... | --sweep-rate R1,R2,...]
//                           [--csv FILE] [--json FILE]   (sweeps: client/load_sweep.h)
//
// Every subcommand also takes --tls, --tls-ca FILE, --tls-cert FILE, --tls-key FILE,
// --tls-server-name NAME (TLS and mTLS), --auth-token-file FILE (or $TENSORCOMPUTE_TOKEN) and
// --admin-token-file FILE (or $TENSORCOMPUTE_ADMIN_TOKEN; sent by put and delete instead of
// the auth token, for a server with --admin_token_file) and --compression none|gzip|deflate
// (the messages the client sends; ClientOptions::compression).
//
// Resident tensors (put, delete, list; client/cli_tensors.h): every replica holds its own
// copy. put and delete reach the first target, or every target with --all-targets; list asks
// every target. put reads a C-order .npy of numbers as it sends it (any size in a little
// memory), draws a progress bar when stderr is a terminal, and without --timeout gives the
// upload 30 s plus 1 s per 10 MB. --params-name gathers (or looks up, in embedding-bag) from a
// resident tensor, sending only the indices; `load
// --params-name` reads the tensor's dtype and shape from the first target's list.
//
// Tensors are .npy or .json files (client/tensor_io.h); without --out the result is printed
// as one line of JSON. Exit codes: 0 success; 2 usage error; 3 RPC error (or a health status
// other than SERVING), printed as "error: CODE: message"; 4 I/O error (a tensor file that
// cannot be read, parsed or written).
//
// Flags are parsed with CLI11 rather than absl flags (STYLE.md section 8 names absl): each
// subcommand has its own flags, required ones, and its own --help, which absl flags cannot do.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include <unistd.h>

#include "client/cli_embedding_bag.h"
#include "client/cli_tensors.h"
#include "client/client.h"
#include "client/load_sweep.h"
#include "client/load_tester.h"
#include "client/tensor_io.h"
#include "core/dtype.h"
#include "core/shard_spec.h"
#include "core/table_storage.h"
#include "proto/grpc_compression.h"

namespace tensorcompute::client {
namespace {

struct CommonFlags {
  std::string target = "localhost:50051";
  double timeout_s = 30;
  int64_t max_message_bytes = int64_t{64} << 20;
  int retries = 0;
  int connections = 1;
  std::string compression = "none";
  bool tls = false;
  std::string tls_ca, tls_cert, tls_key, tls_server_name, auth_token_file, admin_token_file;
};

struct GatherFlags {
  std::string params, params_name, indices, out;
  std::optional<int64_t> axis;
  int64_t batch_dims = 0;
};

struct LoadFlags {
  std::string op = "gather", dtype = "float32", index_dtype = "int32", params_shape, json;
  std::string params_name, protocol = "native";
  std::string sweep_concurrency, sweep_rate, csv;  // client/load_sweep.h
  int64_t rows = 1024, slice = 64, indices = 16, index_depth = 1, bag_size = 8, requests = 0;
  int64_t distinct = 16, max_outstanding = 10000;
  double invalid_fraction = 0, rate = 0, duration_s = 10, warmup_s = 1, progress_interval_s = 1;
  int concurrency = 1;
};

// A token: the first line of `file` that is not blank or a '#' comment (the server's file
// format), else $`env`, else none. `flag` names the file's flag in errors.
absl::StatusOr<std::string> ReadToken(const char* flag, const std::string& file, const char* env) {
  if (file.empty()) {
    const char* value = std::getenv(env);
    return std::string(value == nullptr ? "" : value);
  }
  std::ifstream in(file);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrFormat("%s %s: cannot read the file", flag, file));
  }
  for (std::string line; std::getline(in, line);) {
    const absl::string_view token = absl::StripAsciiWhitespace(line);
    if (!token.empty() && token[0] != '#') return std::string(token);
  }
  return absl::InvalidArgumentError(absl::StrFormat("%s %s: no token in the file", flag, file));
}

absl::StatusOr<std::string> AuthToken(const CommonFlags& f) {
  return ReadToken("--auth-token-file", f.auth_token_file, "TENSORCOMPUTE_TOKEN");
}

absl::StatusOr<std::unique_ptr<Client>> MakeClient(const CommonFlags& f) {
  ClientOptions options;
  absl::StatusOr<std::string> token = AuthToken(f);
  if (!token.ok()) return token.status();
  options.auth_token = *std::move(token);
  absl::StatusOr<std::string> admin_token =
      ReadToken("--admin-token-file", f.admin_token_file, "TENSORCOMPUTE_ADMIN_TOKEN");
  if (!admin_token.ok()) return admin_token.status();
  options.admin_token = *std::move(admin_token);
  // Any TLS file implies --tls.
  options.tls.enabled = f.tls || !f.tls_ca.empty() || !f.tls_cert.empty() || !f.tls_key.empty() ||
                        !f.tls_server_name.empty();
  options.tls.ca_file = f.tls_ca;
  options.tls.cert_file = f.tls_cert;
  options.tls.key_file = f.tls_key;
  options.tls.server_name = f.tls_server_name;
  options.target = f.target;
  options.timeout = absl::Seconds(f.timeout_s);
  options.max_message_bytes = f.max_message_bytes;
  options.connections_per_target = f.connections;
  options.retry.max_attempts = 1 + f.retries;
  absl::StatusOr<grpc_compression_algorithm> compression = ParseCompression(f.compression);
  if (!compression.ok()) return compression.status();
  options.compression = *compression;
  return Client::Create(options);
}

int RunGather(const CommonFlags& common, const GatherFlags& f, bool nd) {
  if (int code = CheckComputeFlags(f.params, f.params_name, f.out); code != kOk) return code;
  auto client = MakeClient(common);
  if (!client.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(client.status().message()).c_str());
    return kUsage;
  }
  std::optional<core::Tensor> params;  // unset with --params-name
  if (f.params_name.empty()) {
    params = ReadFlagTensor("--params", f.params);
    if (!params.has_value()) return kIoError;
  }
  std::optional<core::Tensor> indices = ReadFlagTensor("--indices", f.indices);
  if (!indices.has_value()) return kIoError;
  Client& c = **client;
  absl::StatusOr<core::Tensor> result =
      !f.params_name.empty()
          ? (nd ? c.GatherNdByName(f.params_name, indices->view(), f.batch_dims)
                : c.GatherByName(f.params_name, indices->view(), f.axis, f.batch_dims))
          : (nd ? c.GatherNd(params->view(), indices->view(), f.batch_dims)
                : c.Gather(params->view(), indices->view(), f.axis, f.batch_dims));
  if (!result.ok()) {
    PrintError(result.status());
    return kRpcError;
  }
  return EmitResult(result->view(), f.out);
}

int RunHealth(const CommonFlags& common, const std::string& service) {
  auto client = MakeClient(common);
  if (!client.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(client.status().message()).c_str());
    return kUsage;
  }
  int code = kOk;
  for (int i = 0; i < static_cast<int>((*client)->targets().size()); ++i) {
    const std::string& target = (*client)->targets()[i];
    absl::StatusOr<std::string> status = (*client)->Health(i, service);
    if (status.ok()) {
      std::printf("%s %s\n", target.c_str(), status->c_str());
      if (*status != "SERVING") code = kRpcError;
    } else {
      std::printf("%s error: %s: %s\n", target.c_str(),
                  absl::StatusCodeToString(status.status().code()).c_str(),
                  std::string(status.status().message()).c_str());
      code = kRpcError;
    }
  }
  return code;
}

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

int RunLoadCommand(const CommonFlags& common, const LoadFlags& f) {
  // A sweep (client/load_sweep.h): its values, checked before anything is sent.
  std::optional<Sweep> sweep;
  if (!f.sweep_concurrency.empty() || !f.sweep_rate.empty()) {
    const SweepKind kind = f.sweep_rate.empty() ? SweepKind::kConcurrency : SweepKind::kRate;
    absl::StatusOr<std::vector<double>> values =
        ParseSweepList(kind, kind == SweepKind::kRate ? f.sweep_rate : f.sweep_concurrency);
    if (!values.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(values.status().message()).c_str());
      return kUsage;
    }
    sweep = Sweep{kind, *std::move(values)};
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
  LoadRequestSpec spec;
  spec.op = f.op == "gather-nd"       ? LoadOp::kGatherNd
            : f.op == "embedding-bag" ? LoadOp::kEmbeddingBag
                                      : LoadOp::kGather;
  spec.bag_size = f.bag_size;
  spec.kserve = f.protocol != "native";
  spec.http = f.protocol == "kserve-http";
  const std::optional<core::DataType> dtype = core::DataTypeFromName(f.dtype);
  if (!dtype.has_value()) {
    std::fprintf(stderr, "error: --dtype %s is not a dtype (e.g. float32, int64, string)\n",
                 f.dtype.c_str());
    return kUsage;
  }
  spec.dtype = *dtype;
  spec.index_dtype = f.index_dtype == "int64" ? core::DataType::kInt64 : core::DataType::kInt32;
  if (f.params_shape.empty()) {
    spec.params_shape = {f.rows, f.slice};
  } else {
    auto shape = ParseShape(f.params_shape);
    if (!shape.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(shape.status().message()).c_str());
      return kUsage;
    }
    spec.params_shape = *shape;
  }
  spec.num_indices = f.indices;
  spec.index_depth = f.index_depth;
  spec.invalid_fraction = f.invalid_fraction;
  spec.distinct_requests = f.distinct;
  auto client = MakeClient(common);
  if (!client.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(client.status().message()).c_str());
    return kUsage;
  }
  if (spec.http && (common.tls || !common.tls_ca.empty() || !common.tls_cert.empty())) {
    std::fprintf(stderr, "error: --protocol kserve-http is plaintext HTTP: no TLS flags\n");
    return kUsage;
  }
  if (spec.http && !f.params_name.empty()) {
    // No ListTensors over HTTP: --dtype and --rows/--slice or --params-shape describe it.
    spec.params_name = f.params_name;
  } else if (!f.params_name.empty()) {
    // The table's dtype and shape (for the index ranges) from the first target's list.
    absl::StatusOr<std::vector<TensorInfo>> list = (*client)->ListTensors();
    if (!list.ok()) {
      PrintError(list.status());
      return kRpcError;
    }
    auto it = std::find_if(list->begin(), list->end(),
                           [&](const TensorInfo& t) { return t.name == f.params_name; });
    if (it == list->end()) {
      PrintError(absl::NotFoundError(
          absl::StrFormat("--params-name %s: no resident tensor of that name on %s", f.params_name,
                          (*client)->targets()[0])));
      return kRpcError;
    }
    spec.params_name = f.params_name;
    spec.dtype = it->dtype;
    spec.params_shape = it->shape;
  }
  auto requests = BuildLoadRequests(spec);
  if (!requests.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(requests.status().message()).c_str());
    return kUsage;
  }

  LoadOptions options;
  options.concurrency = f.concurrency;
  options.rate = f.rate;
  options.max_outstanding = f.max_outstanding;
  options.duration = absl::Seconds(f.duration_s);
  options.requests = f.requests;
  options.warmup = absl::Seconds(f.warmup_s);
  options.timeout = absl::Seconds(common.timeout_s);
  options.max_attempts = 1 + common.retries;
  options.auth_token = *AuthToken(common);  // MakeClient has read it
  const bool tty = isatty(STDERR_FILENO) == 1;
  options.progress_interval = absl::Seconds(tty ? 0.25 : f.progress_interval_s);
  options.on_progress = [tty](const LoadProgress& p) {
    const std::string line =
        p.warming_up ? absl::StrFormat("[warmup] %.0f QPS", p.qps)
                     : absl::StrFormat("[%6.1fs] %d done, %.0f QPS, %d errors",
                                       absl::ToDoubleSeconds(p.elapsed), p.done, p.qps, p.errors);
    std::fprintf(stderr, tty ? "\r\033[K%s" : "%s\n", line.c_str());
    std::fflush(stderr);
  };
  std::fprintf(stderr, "load: %s to %s, %d requests of ~%d bytes\n", requests->method.c_str(),
               common.target.c_str(), static_cast<int>(requests->valid.size()),
               static_cast<int>(requests->request_bytes));
  const int targets = static_cast<int>((*client)->targets().size());
  const RunPointFn run_point = [&](const LoadOptions& o) -> absl::StatusOr<LoadReport> {
    absl::StatusOr<LoadReport> report = spec.http ? RunHttpLoad((*client)->targets(), *requests, o)
                                                  : RunLoad((*client)->channels(), *requests, o);
    if (tty) std::fprintf(stderr, "\r\033[K");
    if (report.ok()) report->targets = targets;
    return report;
  };
  if (sweep.has_value()) {
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
    absl::StatusOr<std::vector<SweepPoint>> points =
        RunSweep(*sweep, options, run_point, callbacks);
    if (!points.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(points.status().message()).c_str());
      return kUsage;
    }
    return EmitSweep(f, *points);
  }
  auto report = run_point(options);
  if (!report.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(report.status().message()).c_str());
    return kUsage;
  }
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

void AddCommonFlags(CLI::App* app, CommonFlags* f) {
  app->add_option("--target", f->target,
                  "server(s): host:port, host:port,host:port, or a gRPC URI (dns:///name:port)")
      ->capture_default_str();
  app->add_option("--timeout", f->timeout_s, "deadline of each call, seconds")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--max-message-bytes", f->max_message_bytes,
                  "largest message sent or received (match the server's)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--retries", f->retries, "retries on UNAVAILABLE, with backoff")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--connections", f->connections, "connections per target")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--compression", f->compression,
                  "compress the messages sent: none, gzip or deflate (gRPC's per-message "
                  "compression; the server decompresses them)")
      ->capture_default_str()
      ->check(CLI::IsMember(proto::CompressionNames()));
  app->add_flag("--tls", f->tls, "TLS (implied by any --tls-* option)");
  app->add_option("--tls-ca", f->tls_ca,
                  "PEM CA certificate(s) to verify the server (default: "
                  "the system's roots)");
  app->add_option("--tls-cert", f->tls_cert, "mTLS: PEM client certificate chain");
  app->add_option("--tls-key", f->tls_key, "mTLS: PEM private key of --tls-cert");
  app->add_option("--tls-server-name", f->tls_server_name,
                  "name to verify the server's certificate against (default: the target's host)");
  app->add_option("--auth-token-file", f->auth_token_file,
                  "file whose first line is the bearer token sent on every call (default: "
                  "$TENSORCOMPUTE_TOKEN, if set)");
  app->add_option("--admin-token-file", f->admin_token_file,
                  "file whose first line is the bearer token that put and delete send instead "
                  "(default: $TENSORCOMPUTE_ADMIN_TOKEN, if set)");
}

void AddGatherFlags(CLI::App* app, GatherFlags* f, bool nd) {
  CLI::Option* params = app->add_option("--params", f->params, "params tensor, .npy or .json");
  app->add_option("--params-name", f->params_name,
                  "gather from this resident tensor (see put) instead of --params")
      ->excludes(params);
  app->add_option("--indices", f->indices, "indices tensor (int32/int64), .npy or .json")
      ->required();
  if (!nd) app->add_option("--axis", f->axis, "axis to gather along (default: batch_dims)");
  app->add_option("--batch-dims", f->batch_dims, "leading batch dimensions")->capture_default_str();
  app->add_option("--out", f->out, "write the result to this .npy or .json file");
}

void AddEmbeddingBagFlags(CLI::App* app, EmbeddingBagFlags* f) {
  CLI::Option* params =
      app->add_option("--params", f->params, "params: a [rows, dim] float table, .npy or .json");
  app->add_option("--params-name", f->params_name,
                  "look up in this resident tensor (see put) instead of --params")
      ->excludes(params);
  app->add_option("--indices", f->indices,
                  "indices (int32/int64): rank 1 with --offsets, or rank 2 [bags, n] (fixed "
                  "bags) without; .npy or .json")
      ->required();
  app->add_option("--offsets", f->offsets,
                  "where each bag starts in rank-1 indices, .npy or .json");
  app->add_option("--per-sample-weights", f->per_sample_weights,
                  "one weight per index (float32 or the params' dtype), .npy or .json");
  app->add_option("--mode", f->mode, "how a bag is reduced: sum, mean, max or sqrtn")
      ->capture_default_str();
  app->add_flag("--include-last-offset", f->include_last_offset,
                "--offsets has one entry more than there are bags, the last being len(indices)");
  app->add_option("--padding-idx", f->padding_idx,
                  "a row in [-rows, rows) whose lookups add nothing and do not count");
  app->add_option("--out", f->out, "write the result to this .npy or .json file");
}

int Main(int argc, char** argv) {
  // Debian's Abseil has absl::Mutex deadlock detection on (no NDEBUG): a global lock graph
  // updated on every lock, gRPC's included, a cost the load tester must not pay per call
  // (server/main.cc says more).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CLI::App app(
      "tensorcompute: Gather, GatherNd and EmbeddingBag on a tensorcompute server, resident "
      "tensors, and a load tester",
      "tensorcompute");
  app.require_subcommand(1);
  CommonFlags common;
  GatherFlags gather, gather_nd;
  LoadFlags load;
  std::string service;

  CLI::App* gather_cmd =
      app.add_subcommand("gather", "tf.gather(params, indices, axis, batch_dims)");
  AddCommonFlags(gather_cmd, &common);
  AddGatherFlags(gather_cmd, &gather, false);
  CLI::App* nd_cmd = app.add_subcommand("gather-nd", "tf.gather_nd(params, indices, batch_dims)");
  AddCommonFlags(nd_cmd, &common);
  AddGatherFlags(nd_cmd, &gather_nd, true);
  EmbeddingBagFlags embedding_bag;
  CLI::App* embedding_bag_cmd = app.add_subcommand(
      "embedding-bag",
      "torch.nn.functional.embedding_bag(indices, params, offsets, mode, per_sample_weights, "
      "include_last_offset, padding_idx), plus TensorFlow's sqrtn mode");
  AddCommonFlags(embedding_bag_cmd, &common);
  AddEmbeddingBagFlags(embedding_bag_cmd, &embedding_bag);
  PutFlags put;
  CLI::App* put_cmd = app.add_subcommand(
      "put",
      "store a tensor on the server(s) as a named resident tensor (each replica its own copy)");
  AddCommonFlags(put_cmd, &common);
  put_cmd->add_option("name", put.name, "the tensor's name")->required();
  put_cmd->add_option("--input", put.input, "the tensor, .npy or .json")->required();
  put_cmd->add_option("--device", put.options.device,
                      "cpu, gpu or gpu:N (default: the server's --device)");
  put_cmd->add_flag("--replace", put.options.replace, "replace a tensor of the same name");
  put_cmd
      ->add_option_function<std::string>(
          "--storage",
          [&put](const std::string& kind) { put.options.storage = *core::ParseTableStorage(kind); },
          "how the server stores a table: " + core::TableStorageChoices() +
              " (float16 and int8-rowwise take float32 [rows, dim]; "
              "int8-rowwise-prequantized uint8 [rows, dim + 8]); default as-is")
      ->check([](const std::string& kind) -> std::string {
        if (core::ParseTableStorage(kind)) return "";
        return "unknown storage '" + kind + "'; expected one of " + core::TableStorageChoices();
      });
  put_cmd->add_option("--chunk-bytes", put.options.chunk_bytes, "tensor bytes per message")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  put_cmd->add_flag("--all-targets", put.options.all_targets,
                    "store on every target (default: the first)");
  put_cmd
      ->add_option("--shards", put.shards,
                   "split the table's rows into this many shards, shard i to --targets entry i")
      ->check(CLI::Range(1, static_cast<int>(core::kMaxShards)));
  put_cmd->add_option("--targets", put.targets,
                      "with --shards: one target per shard, comma-separated; 'a:p|b:p' uploads "
                      "the shard to each replica");
  std::string delete_name;
  bool delete_all = false;
  CLI::App* delete_cmd = app.add_subcommand("delete", "delete a resident tensor");
  AddCommonFlags(delete_cmd, &common);
  delete_cmd->add_option("name", delete_name, "the tensor's name")->required();
  delete_cmd->add_flag("--all-targets", delete_all, "delete on every target (default: the first)");
  bool list_json = false;
  CLI::App* list_cmd = app.add_subcommand("list", "list the resident tensors of every target");
  AddCommonFlags(list_cmd, &common);
  list_cmd->add_flag("--json", list_json, "one JSON array instead of a table");

  CLI::App* health_cmd = app.add_subcommand("health", "grpc.health.v1 status of each target");
  AddCommonFlags(health_cmd, &common);
  health_cmd->add_option("--service", service, "service name (default: the whole server)");

  CLI::App* load_cmd = app.add_subcommand("load", "load test: throughput, latency, status codes");
  AddCommonFlags(load_cmd, &common);
  load_cmd
      ->add_option("--op", load.op,
                   "gather, gather-nd, or embedding-bag: fixed bags [--indices / --bag-size, "
                   "--bag-size] pooled by SUM from the [--rows, --slice] float table (native "
                   "protocol only)")
      ->capture_default_str()
      ->check(CLI::IsMember({"gather", "gather-nd", "embedding-bag"}));
  load_cmd->add_option("--dtype", load.dtype, "params dtype")->capture_default_str();
  load_cmd->add_option("--rows", load.rows, "params rows (dimension 0)")->capture_default_str();
  load_cmd->add_option("--slice", load.slice, "elements per row")->capture_default_str();
  load_cmd->add_option("--params-shape", load.params_shape,
                       "params shape, e.g. 64,32,16 (instead of --rows and --slice)");
  load_cmd
      ->add_option("--indices", load.indices,
                   "indices (rows gathered; embedding-bag: lookups, a multiple of --bag-size) "
                   "per request")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  load_cmd->add_option("--bag-size", load.bag_size, "embedding-bag: lookups per bag")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  load_cmd->add_option("--index-depth", load.index_depth, "gather-nd: components per index")
      ->capture_default_str();
  load_cmd->add_option("--index-dtype", load.index_dtype, "int32 or int64")
      ->capture_default_str()
      ->check(CLI::IsMember({"int32", "int64"}));
  load_cmd
      ->add_option("--invalid-fraction", load.invalid_fraction,
                   "share of requests with an out-of-range index")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  load_cmd->add_option("--distinct", load.distinct, "distinct requests, generated up front")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  CLI::Option* concurrency =
      load_cmd->add_option("--concurrency", load.concurrency, "closed loop: calls in flight")
          ->capture_default_str()
          ->check(CLI::Range(1, kMaxLoadConcurrency));
  CLI::Option* rate =
      load_cmd->add_option("--rate", load.rate, "open loop: calls per second (0: closed loop)")
          ->capture_default_str()
          ->check(CLI::NonNegativeNumber);
  CLI::Option* sweep_concurrency =
      load_cmd
          ->add_option("--sweep-concurrency", load.sweep_concurrency,
                       absl::StrFormat("closed loop at each of these concurrencies in turn, e.g. "
                                       "1,2,4,8 (integers in [1, %d], at most %d), each point "
                                       "with the same --duration/--requests and --warmup",
                                       kMaxLoadConcurrency, kMaxSweepPoints))
          ->excludes(concurrency)
          ->excludes(rate);
  load_cmd
      ->add_option("--sweep-rate", load.sweep_rate,
                   absl::StrFormat("open loop at each of these rates (calls per second) in turn, "
                                   "e.g. 100,1000,5000 (at most %d points)",
                                   kMaxSweepPoints))
      ->excludes(concurrency)
      ->excludes(rate)
      ->excludes(sweep_concurrency);
  load_cmd->add_option(
      "--csv", load.csv,
      "write one CSV row per point (a single run: one row) to FILE, or - for stdout: mode, "
      "value, op, protocol, sent, not_sent, ok, errors, seconds, throughput_rps, "
      "sent_bytes_per_s, received_bytes_per_s, p50_us, p90_us, p99_us, p999_us, max_us "
      "(client/load_sweep.h; tools/plot_load.py plots it)");
  load_cmd
      ->add_option("--max-outstanding", load.max_outstanding,
                   "open loop: most calls in flight; beyond it calls are not sent")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  load_cmd->add_option("--duration", load.duration_s, "measured seconds (without --requests)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  load_cmd->add_option("--requests", load.requests, "measure exactly this many calls")
      ->check(CLI::NonNegativeNumber);
  load_cmd->add_option("--warmup", load.warmup_s, "unmeasured seconds first")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  load_cmd
      ->add_option("--progress-interval", load.progress_interval_s,
                   "seconds between progress lines when stderr is not a terminal")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  load_cmd->add_option("--json", load.json,
                       "write the report as JSON to FILE, or - for stdout (a sweep: an array of "
                       "reports, each with its sweep, value, op and protocol)");
  load_cmd->add_option("--params-name", load.params_name,
                       "gather from this resident tensor (only indices travel); its dtype and "
                       "shape replace --dtype, --rows, --slice and --params-shape");
  load_cmd
      ->add_option("--protocol", load.protocol,
                   "native (tensorcompute.v1), kserve (KServe v2 ModelInfer on the same port) "
                   "or kserve-http (KServe v2 over HTTP/1.1 to the server's --http_listen "
                   "address, closed loop only; with --params-name, give the table's --dtype "
                   "and shape)")
      ->capture_default_str()
      ->check(CLI::IsMember({"native", "kserve", "kserve-http"}));

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // prints the message
    return kUsage;
  }
  if (gather_cmd->parsed()) return RunGather(common, gather, false);
  if (nd_cmd->parsed()) return RunGather(common, gather_nd, true);
  if (health_cmd->parsed()) return RunHealth(common, service);
  if (embedding_bag_cmd->parsed()) {
    const EmbeddingBagFlags& f = embedding_bag;
    if (int code = CheckComputeFlags(f.params, f.params_name, f.out); code != kOk) return code;
    auto client = MakeClient(common);
    if (!client.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(client.status().message()).c_str());
      return kUsage;
    }
    return RunEmbeddingBag(**client, f);
  }
  // An upload's deadline grows with its size unless --timeout says otherwise (PutFlags).
  put.timeout_given = put_cmd->parsed() && put_cmd->get_option("--timeout")->count() > 0;
  if (put_cmd->parsed() && put.shards > 0) {
    return RunPutSharded(put, [&common](const std::string& target) {
      CommonFlags one = common;
      one.target = target;
      return MakeClient(one);
    });
  }
  if (put_cmd->parsed() || delete_cmd->parsed() || list_cmd->parsed()) {
    auto client = MakeClient(common);
    if (!client.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(client.status().message()).c_str());
      return kUsage;
    }
    if (put_cmd->parsed()) return RunPut(**client, put);
    if (delete_cmd->parsed()) return RunDelete(**client, delete_name, delete_all);
    return RunList(**client, list_json);
  }
  return RunLoadCommand(common, load);
}

}  // namespace
}  // namespace tensorcompute::client

int main(int argc, char** argv) { return tensorcompute::client::Main(argc, argv); }
