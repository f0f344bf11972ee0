#include "client/cli_tensors.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

#include "client/tensor_io.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/table_storage.h"

namespace tensorcompute::client {
namespace {

std::string Describe(const TensorInfo& t) {
  const std::string stored = t.storage == core::TableStorage::kAsIs
                                 ? ""
                                 : absl::StrCat(" (", core::TableStorageFlagName(t.storage), ")");
  return absl::StrFormat("%s %s%s%s, %d bytes, %s, version %d", t.name, core::DataTypeName(t.dtype),
                         core::ShapeToString(t.shape), stored, t.bytes, t.device, t.version);
}

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

}  // namespace

void PrintError(const absl::Status& status) {
  std::fprintf(stderr, "error: %s: %s\n", absl::StatusCodeToString(status.code()).c_str(),
               std::string(status.message()).c_str());
}

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

int RunPut(Client& client, const PutFlags& f) {
  std::optional<core::Tensor> tensor = ReadFlagTensor("--input", f.input);
  if (!tensor.has_value()) return kIoError;
  absl::StatusOr<TensorInfo> info = client.PutTensor(f.name, tensor->view(), f.options);
  if (!info.ok()) {
    PrintError(info.status());
    return kRpcError;
  }
  const int targets = f.options.all_targets ? static_cast<int>(client.targets().size()) : 1;
  std::printf("stored %s%s\n", Describe(*info).c_str(),
              targets > 1 ? absl::StrFormat(" (on %d targets)", targets).c_str() : "");
  return kOk;
}

int RunDelete(Client& client, const std::string& name, bool all_targets) {
  absl::StatusOr<TensorInfo> info = client.DeleteTensor(name, all_targets);
  if (!info.ok()) {
    PrintError(info.status());
    return kRpcError;
  }
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
  for (const char* h :
       {"NAME", "DTYPE", "SHAPE", "STORAGE", "BYTES", "DEVICE", "VERSION", "CREATED"}) {
    rows[0].push_back(h);
  }
  nlohmann::json array = nlohmann::json::array();
  int code = kOk;
  bool answered = false;
  for (int i = 0; i < static_cast<int>(targets.size()); ++i) {
    absl::StatusOr<std::vector<TensorInfo>> list = client.ListTensors(i);
    answered = answered || list.ok();
    if (!list.ok()) {
      std::fprintf(stderr, "error: %s: %s: %s\n", targets[i].c_str(),
                   absl::StatusCodeToString(list.status().code()).c_str(),
                   std::string(list.status().message()).c_str());
      code = kRpcError;
      continue;
    }
    for (const TensorInfo& t : *list) {
      array.push_back({{"target", targets[i]},
                       {"name", t.name},
                       {"dtype", core::DataTypeName(t.dtype)},
                       {"shape", std::vector<int64_t>(t.shape.begin(), t.shape.end())},
                       {"storage", core::TableStorageFlagName(t.storage)},
                       {"bytes", t.bytes},
                       {"device", t.device},
                       {"version", t.version},
                       {"created", Rfc3339(t.created)}});
      std::vector<std::string> row;
      if (several) row.push_back(targets[i]);
      for (std::string cell : {t.name, core::DataTypeName(t.dtype), core::ShapeToString(t.shape),
                               core::TableStorageFlagName(t.storage), absl::StrCat(t.bytes),
                               t.device, absl::StrCat(t.version), Rfc3339(t.created)}) {
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
