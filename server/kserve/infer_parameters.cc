#include "server/kserve/infer_parameters.h"

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

#include "core/status_macros.h"

namespace tensorcompute::server::kserve {

using inference::InferParameter;

absl::StatusOr<std::optional<int64_t>> IntParameter(const InferParameters& parameters,
                                                    const std::string& name) {
  const auto it = parameters.find(name);
  if (it == parameters.end()) return std::optional<int64_t>();
  const InferParameter& p = it->second;
  switch (p.parameter_choice_case()) {
    case InferParameter::kInt64Param:
      return std::optional<int64_t>(p.int64_param());
    case InferParameter::kUint64Param:
      if (p.uint64_param() <= static_cast<uint64_t>(INT64_MAX)) {
        return std::optional<int64_t>(static_cast<int64_t>(p.uint64_param()));
      }
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", name, "' = ", p.uint64_param(), " does not fit int64"));
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", name, "' must be an integer (int64_param)"));
  }
}

absl::StatusOr<std::optional<bool>> BoolParameter(const InferParameters& parameters,
                                                  const std::string& name) {
  const auto it = parameters.find(name);
  if (it == parameters.end()) return std::optional<bool>();
  if (it->second.parameter_choice_case() != InferParameter::kBoolParam) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter '", name, "' must be a boolean (bool_param)"));
  }
  return std::optional<bool>(it->second.bool_param());
}

namespace {

absl::StatusOr<core::EmbeddingBagMode> ModeParameter(const InferParameters& parameters) {
  const auto it = parameters.find("mode");
  if (it == parameters.end()) return core::EmbeddingBagMode::kSum;
  constexpr absl::string_view kExpected =
      "parameter 'mode' must be the string \"sum\" (the default), \"mean\", \"max\" or "
      "\"sqrtn\" (in any case)";
  const InferParameter& p = it->second;
  if (p.parameter_choice_case() != InferParameter::kStringParam) {
    return absl::InvalidArgumentError(absl::StrCat(kExpected, " (string_param)"));
  }
  const std::string mode = absl::AsciiStrToLower(p.string_param());
  if (mode == "sum") return core::EmbeddingBagMode::kSum;
  if (mode == "mean") return core::EmbeddingBagMode::kMean;
  if (mode == "max") return core::EmbeddingBagMode::kMax;
  if (mode == "sqrtn") return core::EmbeddingBagMode::kSqrtn;
  // Quoted as sent, but escaped and cut: the text is the caller's.
  constexpr size_t kQuoted = 64;
  const absl::string_view sent = p.string_param();
  return absl::InvalidArgumentError(absl::StrCat(kExpected, ", not \"",
                                                 absl::CHexEscape(sent.substr(0, kQuoted)),
                                                 sent.size() > kQuoted ? "...\"" : "\""));
}

}  // namespace

absl::StatusOr<core::EmbeddingBagOptions> EmbeddingBagParameters(
    const InferParameters& parameters, const core::EmbeddingBagOptions& base) {
  core::EmbeddingBagOptions options = base;
  TC_ASSIGN_OR_RETURN(options.mode, ModeParameter(parameters));
  TC_ASSIGN_OR_RETURN(const std::optional<bool> last,
                      BoolParameter(parameters, "include_last_offset"));
  options.include_last_offset = last.value_or(false);
  TC_ASSIGN_OR_RETURN(options.padding_idx, IntParameter(parameters, "padding_idx"));
  return options;
}

}  // namespace tensorcompute::server::kserve
