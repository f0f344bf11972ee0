// File: client/cli_load.h
//
// The `load` subcommand of the `tensorcompute` CLI: builds requests once (client/load_tester.h),
// sends them closed or open loop, once or as a sweep over concurrencies or rates
// (client/load_sweep.h), and reports:
//
//   tensorcompute load --target HOST:PORT [--op gather|gather-nd|embedding-bag] [--bag-size N]
//       [--dtype D] [--rows N --slice N | --params-shape D0,D1,...] [--indices N]
//       [--index-depth N] [--index-dtype int32|int64] [--invalid-fraction F] [--distinct N]
//       [--concurrency N | --rate R [--max-outstanding N]] [--duration S | --requests N]
//       [--warmup S] [--progress-interval S] [--params-name NAME]
//       [--protocol native|kserve|kserve-http]
//       [--sweep-concurrency 1,2,4,... | --sweep-rate R1,R2,...] [--csv FILE] [--json FILE]
//       [--update-rate R [--update-rows N]]
//
// --params-name gathers from a resident tensor whose dtype and shape are read from the first
// target's list (kserve-http cannot list: the flags describe it). Output: progress on stderr
// (one rewritten line on a terminal, a line every --progress-interval otherwise), then the
// report as text on stdout; --json FILE and --csv FILE ("-": stdout) write it as JSON and CSV
// too (a sweep: one report and one row per point, a summary line per point as it ends).
// --update-rate streams UpdateRows of random rows of the --params-name table beside the
// lookups, --update-rows per message at R rows per second, on a connection of its own to the
// first target (client/update_writer.h), during each run or point (its warmup included); the
// report's "updates" line (and JSON object) says what was applied and the stream errors.
// Thread-safety: single-threaded use, as in a CLI.

#ifndef TENSORCOMPUTE_CLIENT_CLI_LOAD_H_
#define TENSORCOMPUTE_CLIENT_CLI_LOAD_H_

#include <cstdint>
#include <string>

#include "client/cli_common.h"

namespace tensorcompute::client {

// The load flags; each default is the one --help shows (AddLoadFlags says what each does).
struct LoadFlags {
  std::string op = "gather", dtype = "float32", index_dtype = "int32", params_shape, json;
  std::string params_name, protocol = "native";
  std::string sweep_concurrency, sweep_rate, csv;  // client/load_sweep.h
  int64_t rows = 1024, slice = 64, indices = 16, index_depth = 1, bag_size = 8, requests = 0;
  int64_t distinct = 16, max_outstanding = 10000;
  double update_rate = 0;      // --update-rate: rows per second; 0: no updates
  int64_t update_rows = 1000;  // --update-rows: rows per UpdateRows message
  double invalid_fraction = 0, rate = 0, duration_s = 10, warmup_s = 1, progress_interval_s = 1;
  int concurrency = 1;
};

// Adds the load flags, with their help and the checks CLI11 makes of each value, to the
// subcommand `app`; parsing fills `*f`.
void AddLoadFlags(CLI::App* app, LoadFlags* f);

// Runs the load test that `common` and `f` describe and prints its report. Returns kOk;
// kUsage after "error: message" for flags that cannot run together or describe no valid
// request (--update-rate without --params-name, over kserve-http, or with --update-rows
// beyond the table's rows), a client that cannot be made, or a run that fails; kRpcError
// when the --params-name table cannot be listed or is not on the first target; kIoError when --csv
// or --json cannot be written.
int RunLoadCommand(const CommonFlags& common, const LoadFlags& f);

}  // namespace tensorcompute::client

#endif  // TENSORCOMPUTE_CLIENT_CLI_LOAD_H_
