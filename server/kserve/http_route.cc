#include "server/kserve/http_route.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tensorcompute::server::kserve {
namespace {

absl::string_view PathOf(absl::string_view target) { return target.substr(0, target.find('?')); }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A path segment with its %XX escapes decoded (a malformed escape is kept as it is).
std::string Unescape(absl::string_view segment) {
  std::string out;
  out.reserve(segment.size());
  for (size_t i = 0; i < segment.size(); ++i) {
    if (segment[i] == '%' && i + 2 < segment.size() && HexValue(segment[i + 1]) >= 0 &&
        HexValue(segment[i + 2]) >= 0) {
      out.push_back(static_cast<char>(HexValue(segment[i + 1]) * 16 + HexValue(segment[i + 2])));
      i += 2;
    } else {
      out.push_back(segment[i]);
    }
  }
  return out;
}

}  // namespace

Route MatchRoute(absl::string_view method, absl::string_view target) {
  Route route;
  const absl::string_view path = PathOf(target);
  if (path.empty() || path.front() != '/') return route;
  const std::vector<absl::string_view> parts = absl::StrSplit(path.substr(1), '/');
  const bool get = method == "GET" || method == "HEAD";  // HEAD: the GET without its body
  if (parts.empty() || parts[0] != "v2") return route;
  if (parts.size() == 1) {
    if (get) route.endpoint = Endpoint::kServerMetadata;
    return route;
  }
  if (parts.size() == 3 && parts[1] == "health") {
    if (get && parts[2] == "live") route.endpoint = Endpoint::kLive;
    if (get && parts[2] == "ready") route.endpoint = Endpoint::kReady;
    return route;
  }
  if (parts.size() < 3 || parts[1] != "models" || parts[2].empty()) return route;
  if (parts.size() == 3 && parts[2] == "stats") {
    if (get) route.endpoint = Endpoint::kModelStatistics;  // every model: an empty name
    return route;
  }
  size_t next = 3;
  std::string version;
  if (parts.size() >= 5 && parts[3] == "versions" && !parts[4].empty()) {
    version = Unescape(parts[4]);
    next = 5;
  }
  Endpoint endpoint = Endpoint::kNone;
  if (parts.size() == next) {
    if (get) endpoint = Endpoint::kModelMetadata;
  } else if (parts.size() == next + 1 && parts[next] == "ready") {
    if (get) endpoint = Endpoint::kModelReady;
  } else if (parts.size() == next + 1 && parts[next] == "infer") {
    if (method == "POST") endpoint = Endpoint::kInfer;
  } else if (parts.size() == next + 1 && parts[next] == "config") {
    if (get) endpoint = Endpoint::kModelConfig;
  } else if (parts.size() == next + 1 && parts[next] == "stats") {
    if (get) endpoint = Endpoint::kModelStatistics;
  }
  if (endpoint == Endpoint::kNone) return route;
  route.endpoint = endpoint;
  route.model = Unescape(parts[2]);
  route.version = std::move(version);
  return route;
}

Rpc RpcOf(Endpoint endpoint) {
  switch (endpoint) {
    case Endpoint::kLive:
      return Rpc::kServerLive;
    case Endpoint::kReady:
      return Rpc::kServerReady;
    case Endpoint::kServerMetadata:
      return Rpc::kServerMetadata;
    case Endpoint::kModelMetadata:
      return Rpc::kModelMetadata;
    case Endpoint::kModelReady:
      return Rpc::kModelReady;
    case Endpoint::kModelConfig:
      return Rpc::kModelConfig;
    case Endpoint::kModelStatistics:
      return Rpc::kModelStatistics;
    case Endpoint::kInfer:
    case Endpoint::kNone:
      break;
  }
  return Rpc::kModelInfer;
}

std::string NoSuchEndpointError(absl::string_view method, absl::string_view target) {
  return absl::StrCat(
      "no such endpoint: ", method, " ", PathOf(target),
      " (KServe v2 REST: /v2, /v2/health/{live,ready}, "
      "/v2/models/{name}[/versions/{v}][/ready|/infer|/config|/stats], /v2/models/stats)");
}

}  // namespace tensorcompute::server::kserve
