// tensorcompute: the command-line client and load tester.
//
//   tensorcompute gather    --target HOST:PORT (--params FILE | --params-name NAME)
//                           --indices FILE [--axis N] [--batch-dims N] [--out FILE]
//   tensorcompute gather    --target HOST:PORT --params-name NAME --keys FILE
//                           [--missing POLICY] [--found-out FILE] [--out FILE]
//   tensorcompute gather-nd --target HOST:PORT (--params FILE | --params-name NAME)
//                           --indices FILE [--batch-dims N] [--out FILE]   (client/cli_gather.h)
//   tensorcompute embedding-bag --target HOST:PORT (--params FILE | --params-name NAME)
//                           --indices FILE [--offsets FILE] [--per-sample-weights FILE]
//                           [--mode sum|mean|max|sqrtn] [--include-last-offset]
//                           [--padding-idx N] [--out FILE]   (client/cli_embedding_bag.h)
//                           (or --params-name NAME --keys FILE [--missing POLICY]
//                           [--found-out FILE] in place of --indices and --padding-idx)
//   tensorcompute put       NAME --input FILE [--device D] [--replace] [--chunk-bytes N]
//                           [--storage as-is|float16|int8-rowwise|int8-rowwise-prequantized]
//                           [--tier memory|disk]
//                           [--all-targets] [--shards N --targets T0,T1,...]
//                           [--keys FILE [--missing error|zero|default] [--default-row FILE]
//                           [--capacity N]]   (a keyed table; client/cli_keys.h)
//   tensorcompute update    NAME --indices FILE --values FILE [--chunk-bytes N]
//   tensorcompute delete    NAME [--all-targets]
//   tensorcompute list      [--json]
//   tensorcompute health    --target HOST:PORT [--service NAME]
//   tensorcompute load      --target HOST:PORT [--op gather|gather-nd|embedding-bag]
//                           [--bag-size N] [--params-name NAME] [shape, loop and report
//                           flags; see --help]
//                           [--sweep-concurrency 1,2,4,... | --sweep-rate R1,R2,...]
//                           [--csv FILE] [--json FILE]   (client/cli_load.h)
//
// Every subcommand also takes --tls, --tls-ca FILE, --tls-cert FILE, --tls-key FILE,
// --tls-server-name NAME (TLS and mTLS), --auth-token-file FILE (or $TENSORCOMPUTE_TOKEN) and
// --admin-token-file FILE (or $TENSORCOMPUTE_ADMIN_TOKEN; sent by put, update and delete
// instead of the auth token, for a server with --admin_token_file) and --compression
// none|gzip|deflate (the messages the client sends; ClientOptions::compression):
// client/cli_common.h.
//
// Resident tensors (put, update, delete, list; client/cli_tensors.h): every replica holds its own
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
// cannot be read, parsed or written). client/cli_common.h defines them (CliExitCode).
//
// This file is the table of subcommands: each one's flags put on its CLI11 subcommand, and the
// runner called once they parse. A subcommand with a file of its own (gather, embedding-bag,
// load) declares its flags there; the runners of put, delete and list are in cli_tensors.h.
//
// Flags are parsed with CLI11 rather than absl flags (STYLE.md section 8 names absl): each
// subcommand has its own flags, required ones, and its own --help, which absl flags cannot do.

#include <cstdio>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

#include "client/cli_common.h"
#include "client/cli_embedding_bag.h"
#include "client/cli_gather.h"
#include "client/cli_keys.h"
#include "client/cli_load.h"
#include "client/cli_tensors.h"
#include "client/client.h"
#include "core/shard_spec.h"
#include "core/table_storage.h"

namespace tensorcompute::client {
namespace {

// Runs `run` on a Client made from `common`: kUsage, after "error: message", when none can be
// made (an unreadable token file, ...).
int WithClient(const CommonFlags& common, absl::FunctionRef<int(Client&)> run) {
  absl::StatusOr<std::unique_ptr<Client>> client = MakeClient(common);
  if (!client.ok()) return ReportUsageError(client.status());
  return run(**client);
}

// Prints each target's grpc.health.v1 status for `service` ("" the whole server), one line each.
// kOk when every one is SERVING, else kRpcError.
int RunHealth(Client& client, const std::string& service) {
  int code = kOk;
  for (int i = 0; i < static_cast<int>(client.targets().size()); ++i) {
    const std::string& target = client.targets()[i];
    absl::StatusOr<std::string> status = client.Health(i, service);
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

void AddPutFlags(CLI::App* app, PutFlags* put) {
  app->add_option("name", put->name, "the tensor's name")->required();
  app->add_option("--input", put->input, "the tensor, .npy or .json")->required();
  app->add_option("--device", put->options.device,
                  "cpu, gpu or gpu:N (default: the server's --device)");
  app->add_flag("--replace", put->options.replace, "replace a tensor of the same name");
  app->add_option_function<std::string>(
         "--storage",
         [put](const std::string& kind) { put->options.storage = *core::ParseTableStorage(kind); },
         "how the server stores a table: " + core::TableStorageChoices() +
             " (float16 and int8-rowwise take float32 [rows, dim]; "
             "int8-rowwise-prequantized uint8 [rows, dim + 8]); default as-is")
      ->check([](const std::string& kind) -> std::string {
        if (core::ParseTableStorage(kind)) return "";
        return "unknown storage '" + kind + "'; expected one of " + core::TableStorageChoices();
      });
  app->add_option_function<std::string>(
         "--tier",
         [put](const std::string& tier) {
           put->options.tier = tier == "disk" ? TableTier::kDisk : TableTier::kMemory;
         },
         "where the server keeps the table's rows: memory (default), or disk (a file under its "
         "--table_dir, behind a row cache of --table_cache_bytes)")
      ->check(CLI::IsMember({"memory", "disk"}));
  app->add_option("--chunk-bytes", put->options.chunk_bytes, "tensor bytes per message")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_flag("--all-targets", put->options.all_targets,
                "store on every target (default: the first)");
  app->add_option("--shards", put->shards,
                  "split the table's rows into this many shards, shard i to --targets entry i "
                  "(with --keys: by key, the rows of the keys k with KeyShard(k, N) == i; "
                  "--capacity then applies to each shard)")
      ->check(CLI::Range(1, static_cast<int>(core::kMaxShards)));
  app->add_option("--targets", put->targets,
                  "with --shards: one target per shard, comma-separated; 'a:p|b:p' uploads "
                  "the shard to each replica");
  AddPutKeyFlags(app, &put->keyed);
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
  AddPutFlags(put_cmd, &put);
  UpdateFlags update;
  CLI::App* update_cmd = app.add_subcommand(
      "update",
      "replace rows of a resident table while it is served (UpdateRows); prints the table's "
      "new sequence");
  AddCommonFlags(update_cmd, &common);
  update_cmd->add_option("name", update.name, "the table's name")->required();
  update_cmd->add_option("--indices", update.indices,
                         "the rows to replace: int32 or int64, rank 1, .npy or .json");
  update_cmd->add_option("--values", update.values,
                         "the new rows, [len(indices), row shape...] in the table's dtype "
                         "(float32 for float16 and int8-rowwise tables, uint8 [n, dim + 8] for "
                         "int8-rowwise-prequantized), .npy or .json");
  update_cmd->add_option("--keys", update.keys,
                         "a keyed table: the keys whose rows --values holds (int64, rank 1; a "
                         "key held is replaced, a new one added), instead of --indices");
  update_cmd->add_option("--delete-keys", update.delete_keys,
                         "a keyed table: keys to remove (int64, rank 1), sent first");
  update_cmd
      ->add_option("--chunk-bytes", update.options.chunk_bytes,
                   "bytes of rows per message (whole rows)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
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
  AddLoadFlags(load_cmd, &load);

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
  if (gather_cmd->parsed() || nd_cmd->parsed()) {
    const bool nd = nd_cmd->parsed();
    const GatherFlags& f = nd ? gather_nd : gather;
    if (int code = CheckComputeFlags(f.params, f.params_name, f.out); code != kOk) return code;
    if (!nd) {
      if (int code = CheckLookupKeyFlags(f.indices, f.params_name, f.keyed); code != kOk) {
        return code;
      }
    }
    return WithClient(common, [&](Client& client) { return RunGather(client, f, nd); });
  }
  if (health_cmd->parsed()) {
    return WithClient(common, [&](Client& client) { return RunHealth(client, service); });
  }
  if (embedding_bag_cmd->parsed()) {
    const EmbeddingBagFlags& f = embedding_bag;
    if (int code = CheckComputeFlags(f.params, f.params_name, f.out); code != kOk) return code;
    if (int code = CheckLookupKeyFlags(f.indices, f.params_name, f.keyed); code != kOk) {
      return code;
    }
    return WithClient(common, [&](Client& client) { return RunEmbeddingBag(client, f); });
  }
  if (put_cmd->parsed()) {
    // An upload's deadline grows with its size unless --timeout says otherwise (PutFlags).
    put.timeout_given = put_cmd->get_option("--timeout")->count() > 0;
    if (put.shards > 0) {
      return RunPutSharded(put, [&common](const std::string& target) {
        CommonFlags one = common;
        one.target = target;
        return MakeClient(one);
      });
    }
    return WithClient(common, [&](Client& client) { return RunPut(client, put); });
  }
  if (update_cmd->parsed()) {
    update.timeout_given = update_cmd->get_option("--timeout")->count() > 0;
    return WithClient(common, [&](Client& client) { return RunUpdate(client, update); });
  }
  if (delete_cmd->parsed()) {
    return WithClient(common,
                      [&](Client& client) { return RunDelete(client, delete_name, delete_all); });
  }
  if (list_cmd->parsed()) {
    return WithClient(common, [&](Client& client) { return RunList(client, list_json); });
  }
  return RunLoadCommand(common, load);
}

}  // namespace
}  // namespace tensorcompute::client

int main(int argc, char** argv) { return tensorcompute::client::Main(argc, argv); }
