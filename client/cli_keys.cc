#include "client/cli_keys.h"

#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"

#include "client/cli_common.h"
#include "client/cli_tensors.h"
#include "client/tensor_io.h"

namespace tensorcompute::client {
namespace {

// Adds --missing: `help` lists the spellings; parsed by core::ParseMissingKeys into `*missing`.
void AddMissingFlag(CLI::App* app, std::optional<core::MissingKeys>* missing,
                    const std::string& help) {
  app->add_option_function<std::string>(
         "--missing",
         [missing](const std::string& text) { *missing = core::ParseMissingKeys(text); }, help)
      ->check([](const std::string& text) -> std::string {
        if (core::ParseMissingKeys(text)) return "";
        return "unknown policy '" + text + "'; expected table, error, zero, default or skip";
      });
}

}  // namespace

void AddPutKeyFlags(CLI::App* app, PutKeyFlags* f) {
  app->add_option("--keys", f->keys,
                  "make a keyed table: int64 [rows], row i's key the i-th, unique; .npy or .json");
  AddMissingFlag(app, &f->missing,
                 "with --keys: what a lookup of a key the table lacks gives, unless it says "
                 "otherwise: error (default), zero or default (--default-row)");
  app->add_option("--default-row", f->default_row,
                  "with --keys: the row 'default' gives, [row shape...] in the dtype lookups "
                  "return; .npy or .json");
  app->add_option("--capacity", f->capacity,
                  "with --keys: the rows the table may hold (update adds keys up to it); "
                  "default the rows put")
      ->check(CLI::NonNegativeNumber);
}

int ReadPutKeys(const PutKeyFlags& f, PutKeyTensors* tensors, PutOptions* options) {
  if (f.keys.empty()) {
    if (f.missing.has_value() || !f.default_row.empty() || f.capacity != 0) {
      return ReportUsageError(
          absl::InvalidArgumentError("--missing, --default-row and --capacity need --keys"));
    }
    return kOk;
  }
  tensors->keys = ReadFlagTensor("--keys", f.keys);
  if (!tensors->keys.has_value()) return kIoError;
  options->keys = tensors->keys->view();
  if (!f.default_row.empty()) {
    tensors->default_row = ReadFlagTensor("--default-row", f.default_row);
    if (!tensors->default_row.has_value()) return kIoError;
    options->default_row = tensors->default_row->view();
  }
  options->missing = f.missing.value_or(core::MissingKeys::kTable);
  options->capacity = f.capacity;
  return kOk;
}

void AddLookupKeyFlags(CLI::App* app, LookupKeyFlags* f, bool pooled) {
  app->add_option("--keys", f->keys,
                  "look up a keyed table (--params-name) by these int64 keys instead of "
                  "--indices; .npy or .json");
  AddMissingFlag(app, &f->missing,
                 pooled ? "with --keys: what a key the table lacks gives: table (its policy, "
                          "default), error, zero, default (its default row) or skip (left out "
                          "of its bag)"
                        : "with --keys: what a key the table lacks gives: table (its policy, "
                          "default), error, zero or default (its default row)");
  app->add_option("--found-out", f->found_out,
                  "with --keys: write whether each key is in the table (bool, the keys' shape) "
                  "to this .npy or .json file");
}

int CheckLookupKeyFlags(const std::string& indices, const std::string& params_name,
                        const LookupKeyFlags& f) {
  if (indices.empty() == f.keys.empty()) {
    return ReportUsageError(
        absl::InvalidArgumentError("expected exactly one of --indices FILE and --keys FILE"));
  }
  if (!f.keys.empty() && params_name.empty()) {
    return ReportUsageError(absl::InvalidArgumentError(
        "--keys looks up a keyed resident table: it needs --params-name NAME"));
  }
  if (f.keys.empty() && (f.missing.has_value() || !f.found_out.empty())) {
    return ReportUsageError(absl::InvalidArgumentError("--missing and --found-out need --keys"));
  }
  if (!f.found_out.empty() && !FormatFromPath(f.found_out).ok()) {
    return ReportUsageError(absl::InvalidArgumentError("--found-out " + f.found_out +
                                                       ": expected a .npy or .json file name"));
  }
  return kOk;
}

KeyedLookupOptions LookupOptionsOf(const LookupKeyFlags& f) {
  return KeyedLookupOptions{.missing = f.missing.value_or(core::MissingKeys::kTable),
                            .return_found = !f.found_out.empty()};
}

int EmitKeyedResult(const KeyedLookupResult& result, const std::string& out,
                    const LookupKeyFlags& f) {
  if (int code = EmitResult(result.output.view(), out); code != kOk) return code;
  if (f.found_out.empty() || !result.found.has_value()) return kOk;
  if (absl::Status written = WriteTensorFile(result.found->view(), f.found_out); !written.ok()) {
    std::fprintf(stderr, "error: --found-out %s: %s\n", f.found_out.c_str(),
                 std::string(written.message()).c_str());
    return kIoError;
  }
  return kOk;
}

}  // namespace tensorcompute::client
