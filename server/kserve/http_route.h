// File: server/kserve/http_route.h
//
// Which KServe v2 REST endpoint a request line names (the query string ignored):
//
//   GET  /v2/health/live                              kLive
//   GET  /v2/health/ready                             kReady
//   GET  /v2                                          kServerMetadata
//   GET  /v2/models/{name}[/versions/{v}]             kModelMetadata
//   GET  /v2/models/{name}[/versions/{v}]/ready       kModelReady
//   POST /v2/models/{name}[/versions/{v}]/infer       kInfer
//   GET  /v2/models/{name}[/versions/{v}]/config      kModelConfig (Triton's extension)
//   GET  /v2/models/{name}[/versions/{v}]/stats       kModelStatistics (Triton's extension)
//   GET  /v2/models/stats                             kModelStatistics of every model (an
//                                                     empty name; as Triton, this hides the
//                                                     metadata of a model named "stats")
//
// anything else (another method included) is kNone, answered 404 with NoSuchEndpointError.
// {name} and {v} have their %XX escapes decoded.
// HEAD is served as GET (the session then sends the header only).
//
// Thread-safety: pure functions.

#ifndef TENSORCOMPUTE_SERVER_KSERVE_HTTP_ROUTE_H_
#define TENSORCOMPUTE_SERVER_KSERVE_HTTP_ROUTE_H_

#include <string>

#include "absl/strings/string_view.h"

#include "server/metrics/metrics.h"

namespace tensorcompute::server::kserve {

enum class Endpoint {
  kNone,
  kLive,
  kReady,
  kServerMetadata,
  kModelMetadata,
  kModelReady,
  kInfer,
  kModelConfig,
  kModelStatistics,
};

struct Route {
  Endpoint endpoint = Endpoint::kNone;
  std::string model;    // the model endpoints: {name}
  std::string version;  // {v}; empty without /versions/{v}
};

Route MatchRoute(absl::string_view method, absl::string_view target);

// The gRPC RPC of the same meaning, under which the metrics count it.
// REQUIRES: endpoint is not kNone.
Rpc RpcOf(Endpoint endpoint);

// "no such endpoint: GET /v3 (KServe v2 REST: /v2, /v2/health/{live,ready},
// /v2/models/{name}[/versions/{v}][/ready|/infer|/config|/stats], /v2/models/stats)".
std::string NoSuchEndpointError(absl::string_view method, absl::string_view target);

}  // namespace tensorcompute::server::kserve

#endif  // TENSORCOMPUTE_SERVER_KSERVE_HTTP_ROUTE_H_
