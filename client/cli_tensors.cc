#include "client/cli_tensors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include <unistd.h>

#include "client/progress_line.h"
#include "client/tensor_io.h"
#include "client/tensor_source.h"
#include "client/update_chunker.h"
#include "core/dtype.h"
#include "core/key_split.h"
#include "core/shape.h"
#include "core/shard_spec.h"
#include "core/table_storage.h"

namespace tensorcompute::client {
namespace {

std::string Describe(const TensorInfo& t) {
  const std::string stored = t.storage == core::TableStorage::kAsIs
                                 ? ""
                                 : absl::StrCat(" (", core::TableStorageFlagName(t.storage), ")");
  const std::string shard =
      t.shard.has_value() ? absl::StrFormat(", shard %d of %d", t.shard->index, t.shard->count)
                          : "";
  const std::string keyed =
      t.keyed.has_value()
          ? absl::StrFormat(", %d keys of %d, missing %s%s", t.keyed->keys, t.keyed->capacity,
                            core::MissingKeysName(t.keyed->missing),
                            t.keyed->has_default_row ? ", a default row" : "")
          : "";
  const std::string disk =
      t.disk.has_value() ? absl::StrFormat(", on disk (%d bytes in %s, a cache of %d rows)",
                                           t.disk->file_bytes, t.disk->file, t.disk->cache_rows)
                         : "";
  return absl::StrFormat("%s %s%s%s%s%s%s, %d bytes, %s, version %d", t.name,
                         core::DataTypeName(t.dtype), core::ShapeToString(t.shape), stored, shard,
                         keyed, disk, t.bytes, t.device, t.version);
}

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

}  // namespace

int CheckComputeFlags(const std::string& params, const std::string& params_name,
                      const std::string& out) {
  if (params.empty() == params_name.empty()) {
    std::fprintf(stderr, "error: expected exactly one of --params FILE and --params-name NAME\n");
    return kUsage;
  }
  if (!out.empty() && !FormatFromPath(out).ok()) {
    std::fprintf(stderr, "error: --out %s: expected a .npy or .json file name\n", out.c_str());
    return kUsage;
  }
  return kOk;
}

std::optional<core::Tensor> ReadFlagTensor(const char* flag, const std::string& path) {
  absl::StatusOr<core::Tensor> tensor = ReadTensorFile(path);
  if (!tensor.ok()) {
    std::fprintf(stderr, "error: %s %s: %s\n", flag, path.c_str(),
                 std::string(tensor.status().message()).c_str());
    return std::nullopt;
  }
  return *std::move(tensor);
}

int EmitResult(const core::TensorView& result, const std::string& out) {
  if (out.empty()) {
    std::printf("%s\n", SerializeJson(result).c_str());
    return kOk;
  }
  if (absl::Status written = WriteTensorFile(result, out); !written.ok()) {
    std::fprintf(stderr, "error: --out %s: %s\n", out.c_str(),
                 std::string(written.message()).c_str());
    return kIoError;
  }
  return kOk;
}

namespace {

// The tensor a put uploads: a C-order .npy of fixed-size elements is read as it is sent
// (`source`: the CLI holds the chunks in flight, whatever its size); anything else is read whole
// (`tensor`).
struct PutInput {
  std::optional<core::Tensor> tensor;
  std::optional<TensorSource> source;
  // Set when the source's read failed during an upload (an I/O error, not the call's): the
  // status the put returns is the read's own, and cannot tell. Shared, because the wrapped
  // read is copied (into each attempt's chunker, into shards' sources) and PutInput is moved.
  std::shared_ptr<bool> read_failed = std::make_shared<bool>(false);

  // The whole input as a source (REQUIRES: fixed-size elements).
  TensorSource AsSource() const { return source.has_value() ? *source : SourceOf(tensor->view()); }
};

// `path` (flag `flag`'s) opened for a put or an update, or nullopt after printing
// "error: FLAG PATH: message".
std::optional<PutInput> OpenPutInput(const std::string& path, const char* flag = "--input") {
  PutInput input;
  if (FormatFromPath(path).value_or(TensorFormat::kJson) == TensorFormat::kNpy) {
    absl::StatusOr<std::optional<TensorSource>> source = OpenNpySource(path);
    if (!source.ok()) {
      std::fprintf(stderr, "error: %s %s: %s\n", flag, path.c_str(),
                   std::string(source.status().message()).c_str());
      return std::nullopt;
    }
    if (source->has_value()) {
      input.source = **std::move(source);
      input.source->read = [read = std::move(input.source->read), failed = input.read_failed](
                               int64_t offset, absl::Span<uint8_t> out) {
        absl::Status status = read(offset, out);
        if (!status.ok()) *failed = true;
        return status;
      };
      return input;
    }
  }
  input.tensor = ReadFlagTensor(flag, path);
  if (!input.tensor.has_value()) return std::nullopt;
  return input;
}

// Prints an upload's failure; kIoError when reading the input failed, else kRpcError.
int PutFailed(const PutInput& input, const std::string& path, const absl::Status& status,
              const char* flag = "--input") {
  if (*input.read_failed) {
    std::fprintf(stderr, "error: %s %s: %s\n", flag, path.c_str(),
                 std::string(status.message()).c_str());
    return kIoError;
  }
  return ReportRpcError(status);
}

// `options` drawing a progress bar for `what` on stderr when it is a terminal.
PutOptions WithProgress(const PutOptions& options, ProgressLine* progress) {
  PutOptions out = options;
  out.on_progress = [progress](int64_t sent, int64_t total) { progress->Update(sent, total); };
  return out;
}

bool StderrIsATerminal() { return ::isatty(STDERR_FILENO) == 1; }

// The bytes a put sends of `input` (elements for strings: they are small).
int64_t InputBytes(const PutInput& input) {
  if (input.source.has_value()) return SourceBytes(*input.source).value_or(0);
  return static_cast<int64_t>(input.tensor->bytes().size());
}

}  // namespace

absl::Duration PutDeadline(absl::Duration client_timeout, int64_t bytes, bool timeout_given) {
  if (timeout_given) return client_timeout;
  return client_timeout + absl::Seconds(static_cast<double>(bytes) / 10e6);  // 1 s per 10 MB
}

int RunPut(Client& client, const PutFlags& f) {
  PutOptions keyed_options = f.options;
  PutKeyTensors keys;  // viewed by keyed_options until the upload is over
  if (int code = ReadPutKeys(f.keyed, &keys, &keyed_options); code != kOk) return code;
  std::optional<PutInput> input = OpenPutInput(f.input);
  if (!input.has_value()) return kIoError;
  ProgressLine progress(absl::StrCat("put ", f.name), StderrIsATerminal());
  const PutOptions options = WithProgress(keyed_options, &progress);
  const CallOptions call{
      PutDeadline(client.options().timeout, InputBytes(*input), f.timeout_given)};
  absl::StatusOr<TensorInfo> info =
      input->source.has_value() ? client.PutTensor(f.name, *input->source, options, call)
                                : client.PutTensor(f.name, input->tensor->view(), options, call);
  progress.Done();
  if (!info.ok()) return PutFailed(*input, f.input, info.status());
  const int targets = f.options.all_targets ? static_cast<int>(client.targets().size()) : 1;
  std::printf("stored %s%s\n", Describe(*info).c_str(),
              targets > 1 ? absl::StrFormat(" (on %d targets)", targets).c_str() : "");
  return kOk;
}

namespace {

// Puts shard `s` of --shards (`part`, `bytes` long) on each replica its --targets entry lists
// ('|'-separated), a client each, whatever --all-targets says, printing "stored shard s of N
// <held> on REPLICA: ..." for each. The first failure stops it, naming the shard and replica.
template <typename Part>
int PutShardOnReplicas(const PutFlags& f, const std::string& entry, int32_t s, const Part& part,
                       int64_t bytes, PutOptions options, const std::string& held,
                       const PutInput& input, const ClientFactory& connect) {
  options.all_targets = false;
  for (absl::string_view replica : absl::StrSplit(entry, '|')) {
    absl::StatusOr<std::unique_ptr<Client>> client = connect(std::string(replica));
    if (!client.ok()) {
      PrintError(client.status());
      return kUsage;
    }
    ProgressLine progress(absl::StrCat("put ", f.name, " shard ", s, " to ", replica),
                          StderrIsATerminal());
    const CallOptions call{PutDeadline((*client)->options().timeout, bytes, f.timeout_given)};
    absl::StatusOr<TensorInfo> info =
        (*client)->PutTensor(f.name, part, WithProgress(options, &progress), call);
    progress.Done();
    if (!info.ok()) {
      return PutFailed(
          input, f.input,
          absl::Status(info.status().code(),
                       absl::StrCat("shard ", s, " on ", replica, ": ", info.status().message())));
    }
    std::printf("stored shard %d of %d %s on %s: %s\n", s, f.shards, held.c_str(),
                std::string(replica).c_str(), Describe(*info).c_str());
  }
  return kOk;
}

// `put --keys --shards N`: the rows of each key go to shard KeyShard(key, N) (core/key_split.h),
// the whole input read into memory first (its rows are picked, not a range). --capacity applies
// to each shard; without it a shard's capacity is its keys.
int PutShardedByKey(const PutFlags& f, const std::vector<std::string>& targets,
                    const PutInput& input, const ClientFactory& connect) {
  PutOptions keyed_options = f.options;
  PutKeyTensors keys;
  if (int code = ReadPutKeys(f.keyed, &keys, &keyed_options); code != kOk) return code;
  const TensorSource whole = input.AsSource();
  const int64_t rows = whole.shape[0];
  const core::TensorView key_view = keys.keys->view();
  if (key_view.dtype != core::DataType::kInt64 || key_view.shape != core::Shape{rows}) {
    std::fprintf(stderr, "error: --keys %s: expected int64 [%lld] (a key per row), got %s %s\n",
                 f.keyed.keys.c_str(), static_cast<long long>(rows),
                 core::DataTypeName(key_view.dtype).c_str(),
                 core::ShapeToString(key_view.shape).c_str());
    return kUsage;
  }
  absl::StatusOr<core::Tensor> table = core::Tensor::Allocate(whole.dtype, whole.shape);
  if (!table.ok()) return ReportRpcError(table.status());
  if (absl::Status read = whole.read(0, table->mutable_bytes()); !read.ok()) {
    std::fprintf(stderr, "error: --input %s: %s\n", f.input.c_str(),
                 std::string(read.message()).c_str());
    return kIoError;
  }
  std::vector<int64_t> all_keys(static_cast<size_t>(rows));
  if (rows > 0) std::memcpy(all_keys.data(), key_view.data.data(), all_keys.size() * 8);
  const core::KeyUpdateSplit split = core::SplitKeyUpdate(all_keys, {}, f.shards);
  const size_t row_bytes = rows == 0 ? 0 : table->bytes().size() / static_cast<size_t>(rows);
  for (int32_t s = 0; s < f.shards; ++s) {
    const std::vector<int64_t>& positions = split.positions[static_cast<size_t>(s)];
    const int64_t n = static_cast<int64_t>(positions.size());
    core::Shape part_shape = whole.shape;
    part_shape[0] = n;
    absl::StatusOr<core::Tensor> part = core::Tensor::Allocate(whole.dtype, part_shape);
    if (!part.ok()) return ReportRpcError(part.status());
    std::vector<int64_t> part_keys;
    part_keys.reserve(positions.size());
    uint8_t* dst = part->mutable_bytes().data();
    for (int64_t position : positions) {
      if (row_bytes > 0) {
        std::memcpy(dst, table->bytes().data() + static_cast<size_t>(position) * row_bytes,
                    row_bytes);
        dst += row_bytes;
      }
      part_keys.push_back(all_keys[static_cast<size_t>(position)]);
    }
    const core::Tensor key_tensor = core::Tensor::FromValues<int64_t>(
        core::DataType::kInt64, {n}, absl::MakeConstSpan(part_keys));
    PutOptions options = keyed_options;
    options.keys = key_tensor.view();
    options.shard = core::ShardSpec{s, f.shards, rows, /*by_key=*/true};
    const int code =
        PutShardOnReplicas(f, targets[static_cast<size_t>(s)], s, part->view(),
                           static_cast<int64_t>(part->bytes().size()), options,
                           absl::StrFormat("by key (%d of %d keys)", n, rows), input, connect);
    if (code != kOk) return code;
  }
  return kOk;
}

}  // namespace

int RunPutSharded(const PutFlags& f, const ClientFactory& connect) {
  const std::vector<std::string> targets = absl::StrSplit(f.targets, ',');
  if (f.targets.empty() || static_cast<int64_t>(targets.size()) != f.shards) {
    std::fprintf(stderr, "error: --shards %d needs --targets with %d comma-separated targets\n",
                 f.shards, f.shards);
    return kUsage;
  }
  std::optional<PutInput> input = OpenPutInput(f.input);
  if (!input.has_value()) return kIoError;
  const bool strings =
      input->tensor.has_value() && input->tensor->dtype() == core::DataType::kString;
  const core::Shape& shape =
      input->source.has_value() ? input->source->shape : input->tensor->shape();
  if (shape.empty() || strings) {
    std::fprintf(stderr,
                 "error: --input %s: a sharded table has rank >= 1 and fixed-size "
                 "elements\n",
                 f.input.c_str());
    return kUsage;
  }
  if (!f.keyed.keys.empty()) return PutShardedByKey(f, targets, *input, connect);
  const TensorSource whole = input->AsSource();
  const int64_t total = shape[0];
  for (int32_t s = 0; s < f.shards; ++s) {
    const core::RowRange rows = core::ShardRows(total, f.shards, s);
    PutOptions options = f.options;
    options.shard = core::ShardSpec{s, f.shards, total};
    const TensorSource part = SourceRows(whole, rows);
    const int code = PutShardOnReplicas(
        f, targets[static_cast<size_t>(s)], s, part, SourceBytes(part).value_or(0), options,
        absl::StrFormat("(rows [%d, %d))", rows.begin, rows.end), *input, connect);
    if (code != kOk) return code;
  }
  return kOk;
}

int RunUpdate(Client& client, const UpdateFlags& f) {
  const bool by_keys = !f.keys.empty() || !f.delete_keys.empty();
  if (by_keys == !f.indices.empty() ||
      (f.values.empty() != (f.indices.empty() && f.keys.empty()))) {
    std::fprintf(stderr,
                 "error: give --indices and --values, or (a keyed table) --keys and --values, "
                 "--delete-keys, or both\n");
    return kUsage;
  }
  // Deletes alone: no rows (an empty int64 key list and no values).
  std::optional<core::Tensor> indices;
  if (!f.indices.empty() || !f.keys.empty()) {
    indices = ReadFlagTensor(by_keys ? "--keys" : "--indices", by_keys ? f.keys : f.indices);
    if (!indices.has_value()) return kIoError;
  } else {
    indices = core::Tensor::FromValues<int64_t>(core::DataType::kInt64, {0}, {});
  }
  std::optional<core::Tensor> doomed;
  if (!f.delete_keys.empty()) {
    doomed = ReadFlagTensor("--delete-keys", f.delete_keys);
    if (!doomed.has_value()) return kIoError;
  }
  std::optional<PutInput> values;
  if (f.values.empty()) {
    values.emplace();
    values->tensor = core::Tensor::FromValues<float>(core::DataType::kFloat32, {0}, {});
  } else {
    values = OpenPutInput(f.values, "--values");
  }
  if (!values.has_value()) return kIoError;
  if (values->tensor.has_value() && values->tensor->dtype() == core::DataType::kString) {
    std::fprintf(stderr,
                 "error: --values %s: string tables are not updated in place (put them with "
                 "--replace)\n",
                 f.values.c_str());
    return kUsage;
  }
  const TensorSource source = values->AsSource();
  if (absl::Status fit = CheckUpdateRows(indices->view(), source, by_keys); !fit.ok()) {
    return ReportUsageError(fit);
  }
  ProgressLine progress(absl::StrCat("update ", f.name), StderrIsATerminal());
  UpdateOptions options = f.options;
  options.by_keys = by_keys;
  if (doomed.has_value()) options.delete_keys = doomed->view();
  options.on_progress = [&progress](int64_t sent, int64_t total) { progress.Update(sent, total); };
  const CallOptions call{
      PutDeadline(client.options().timeout, InputBytes(*values), f.timeout_given)};
  absl::StatusOr<UpdateRowsResult> result =
      client.UpdateRows(f.name, indices->view(), source, options, call);
  progress.Done();
  if (!result.ok()) return PutFailed(*values, f.values, result.status(), "--values");
  std::printf("updated %s: %lld rows in %lld messages, sequence %lld\n", f.name.c_str(),
              static_cast<long long>(result->rows), static_cast<long long>(result->messages),
              static_cast<long long>(result->sequence));
  return kOk;
}

int RunDelete(Client& client, const std::string& name, bool all_targets) {
  absl::StatusOr<TensorInfo> info = client.DeleteTensor(name, all_targets);
  if (!info.ok()) return ReportRpcError(info.status());
  const int targets = all_targets ? static_cast<int>(client.targets().size()) : 1;
  std::printf("deleted %s%s\n", Describe(*info).c_str(),
              targets > 1 ? absl::StrFormat(" (on %d targets)", targets).c_str() : "");
  return kOk;
}

int RunList(Client& client, bool json) {
  const std::vector<std::string>& targets = client.targets();
  const bool several = targets.size() > 1;
  std::vector<std::vector<std::string>> rows;
  if (several)
    rows.push_back({"TARGET"});
  else
    rows.emplace_back();
  for (const char* h : {"NAME", "DTYPE", "SHAPE", "STORAGE", "BYTES", "DEVICE", "VERSION",
                        "CREATED", "SHARD", "SEQUENCE", "KEYS"}) {
    rows[0].push_back(h);
  }
  nlohmann::json array = nlohmann::json::array();
  int code = kOk;
  bool answered = false;
  for (int i = 0; i < static_cast<int>(targets.size()); ++i) {
    absl::StatusOr<std::vector<TensorInfo>> list = client.ListTensors(i);
    answered = answered || list.ok();
    // One target's failure does not hide the others' tables; it only sets the exit code.
    if (!list.ok()) {
      std::fprintf(stderr, "error: %s: %s: %s\n", targets[i].c_str(),
                   absl::StatusCodeToString(list.status().code()).c_str(),
                   std::string(list.status().message()).c_str());
      code = kRpcError;
      continue;
    }
    for (const TensorInfo& t : *list) {
      array.push_back(
          {{"target", targets[i]},
           {"name", t.name},
           {"dtype", core::DataTypeName(t.dtype)},
           {"shape", std::vector<int64_t>(t.shape.begin(), t.shape.end())},
           {"storage", core::TableStorageFlagName(t.storage)},
           {"bytes", t.bytes},
           {"device", t.device},
           {"version", t.version},
           {"created", Rfc3339(t.created)},
           {"sequence", t.sequence},
           {"shard", t.shard.has_value() ? nlohmann::json{{"index", t.shard->index},
                                                          {"count", t.shard->count},
                                                          {"total_rows", t.shard->total_rows},
                                                          {"by_key", t.shard->by_key}}
                                         : nlohmann::json(nullptr)},
           {"keyed", t.keyed.has_value()
                         ? nlohmann::json{{"keys", t.keyed->keys},
                                          {"capacity", t.keyed->capacity},
                                          {"missing", core::MissingKeysName(t.keyed->missing)},
                                          {"has_default_row", t.keyed->has_default_row}}
                         : nlohmann::json(nullptr)},
           {"tier", t.tier == TableTier::kDisk ? "disk" : "memory"},
           {"disk", t.disk.has_value() ? nlohmann::json{{"file", t.disk->file},
                                                        {"file_bytes", t.disk->file_bytes},
                                                        {"cache_rows", t.disk->cache_rows},
                                                        {"cached_rows", t.disk->cached_rows}}
                                       : nlohmann::json(nullptr)}});
      std::vector<std::string> row;
      if (several) row.push_back(targets[i]);
      for (std::string cell :
           {t.name, core::DataTypeName(t.dtype), core::ShapeToString(t.shape),
            core::TableStorageFlagName(t.storage), absl::StrCat(t.bytes), t.device,
            absl::StrCat(t.version), Rfc3339(t.created),
            t.shard.has_value()
                ? absl::StrCat(t.shard->index, "/", t.shard->count, t.shard->by_key ? ":key" : "")
                : std::string("-"),
            absl::StrCat(t.sequence),
            t.keyed.has_value() ? absl::StrCat(t.keyed->keys, "/", t.keyed->capacity)
                                : std::string("-")}) {
        row.push_back(std::move(cell));
      }
      rows.push_back(std::move(row));
    }
  }
  if (json) {
    std::printf("%s\n", array.dump().c_str());
    return code;
  }
  if (!answered) return code;  // no table when no target answered
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += c + 1 < row.size() ? absl::StrFormat("%-*s  ", widths[c], row[c]) : row[c];
    }
    std::printf("%s\n", line.c_str());
  }
  return code;
}

}  // namespace tensorcompute::client
