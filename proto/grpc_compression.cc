#include "proto/grpc_compression.h"

#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tensorcompute::proto {
namespace {

constexpr std::array<std::pair<absl::string_view, grpc_compression_algorithm>, 3> kCompressions{{
    {"none", GRPC_COMPRESS_NONE},
    {"gzip", GRPC_COMPRESS_GZIP},
    {"deflate", GRPC_COMPRESS_DEFLATE},
}};

std::string OneOf() { return absl::StrJoin(CompressionNames(), ", "); }

}  // namespace

const std::vector<std::string>& CompressionNames() {
  static const auto* names = [] {
    auto* list = new std::vector<std::string>;
    for (const auto& [name, algorithm] : kCompressions) list->emplace_back(name);
    return list;
  }();
  return *names;
}

absl::StatusOr<grpc_compression_algorithm> ParseCompression(absl::string_view name) {
  for (const auto& [known, algorithm] : kCompressions) {
    if (name == known) return algorithm;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("compression '", name, "' is not one of ", OneOf()));
}

absl::Status CheckCompression(grpc_compression_algorithm algorithm) {
  for (const auto& [name, known] : kCompressions) {
    if (algorithm == known) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("compression must be one of ", OneOf()));
}

grpc_compression_level CompressionLevelFor(grpc_compression_algorithm algorithm) {
  switch (algorithm) {
    case GRPC_COMPRESS_GZIP:
      return GRPC_COMPRESS_LEVEL_LOW;
    case GRPC_COMPRESS_DEFLATE:
      return GRPC_COMPRESS_LEVEL_HIGH;
    default:
      return GRPC_COMPRESS_LEVEL_NONE;
  }
}

}  // namespace tensorcompute::proto
