// server/kserve/http_route.h: which KServe v2 REST endpoint a request line names.

#include "gtest/gtest.h"

#include "server/kserve/http_route.h"

namespace tensorcompute::server::kserve {
namespace {

TEST(HttpRoute, HealthAndServerMetadata) {
  EXPECT_EQ(MatchRoute("GET", "/v2/health/live").endpoint, Endpoint::kLive);
  EXPECT_EQ(MatchRoute("GET", "/v2/health/ready").endpoint, Endpoint::kReady);
  EXPECT_EQ(MatchRoute("GET", "/v2").endpoint, Endpoint::kServerMetadata);
  EXPECT_EQ(MatchRoute("GET", "/v2?verbose=1").endpoint, Endpoint::kServerMetadata);
  EXPECT_EQ(MatchRoute("HEAD", "/v2/health/ready").endpoint, Endpoint::kReady);
}

TEST(HttpRoute, ModelEndpointsWithAndWithoutVersion) {
  const Route metadata = MatchRoute("GET", "/v2/models/gather");
  EXPECT_EQ(metadata.endpoint, Endpoint::kModelMetadata);
  EXPECT_EQ(metadata.model, "gather");
  EXPECT_EQ(metadata.version, "");
  const Route ready = MatchRoute("GET", "/v2/models/table/versions/1/ready");
  EXPECT_EQ(ready.endpoint, Endpoint::kModelReady);
  EXPECT_EQ(ready.model, "table");
  EXPECT_EQ(ready.version, "1");
  const Route infer = MatchRoute("POST", "/v2/models/gather_nd/infer");
  EXPECT_EQ(infer.endpoint, Endpoint::kInfer);
  EXPECT_EQ(infer.model, "gather_nd");
}

TEST(HttpRoute, TritonsConfigAndStatistics) {
  const Route config = MatchRoute("GET", "/v2/models/emb/versions/1/config");
  EXPECT_EQ(config.endpoint, Endpoint::kModelConfig);
  EXPECT_EQ(config.model, "emb");
  EXPECT_EQ(config.version, "1");
  const Route stats = MatchRoute("GET", "/v2/models/gather/stats");
  EXPECT_EQ(stats.endpoint, Endpoint::kModelStatistics);
  EXPECT_EQ(stats.model, "gather");
  const Route all = MatchRoute("GET", "/v2/models/stats");
  EXPECT_EQ(all.endpoint, Endpoint::kModelStatistics);
  EXPECT_EQ(all.model, "");
  EXPECT_EQ(MatchRoute("POST", "/v2/models/gather/stats").endpoint, Endpoint::kNone);
  EXPECT_EQ(MatchRoute("POST", "/v2/models/gather/config").endpoint, Endpoint::kNone);
  EXPECT_EQ(RpcOf(Endpoint::kModelConfig), Rpc::kModelConfig);
  EXPECT_EQ(RpcOf(Endpoint::kModelStatistics), Rpc::kModelStatistics);
}

TEST(HttpRoute, NameAndVersionAreUnescaped) {
  const Route route = MatchRoute("GET", "/v2/models/my%20table/versions/%31");
  EXPECT_EQ(route.endpoint, Endpoint::kModelMetadata);
  EXPECT_EQ(route.model, "my table");
  EXPECT_EQ(route.version, "1");
  EXPECT_EQ(MatchRoute("GET", "/v2/models/a%2").model, "a%2");
  EXPECT_EQ(MatchRoute("GET", "/v2/models/a%zz").model, "a%zz");
}

TEST(HttpRoute, WrongMethodOrPathIsNone) {
  EXPECT_EQ(MatchRoute("POST", "/v2/health/live").endpoint, Endpoint::kNone);
  EXPECT_EQ(MatchRoute("GET", "/v2/models/gather/infer").endpoint, Endpoint::kNone);
  EXPECT_EQ(MatchRoute("PUT", "/v2").endpoint, Endpoint::kNone);
  EXPECT_EQ(MatchRoute("HEAD", "/v2/models/x/infer").endpoint, Endpoint::kNone);
  EXPECT_EQ(MatchRoute("GET", "/v3").endpoint, Endpoint::kNone);
  EXPECT_EQ(MatchRoute("GET", "/v2/models/").endpoint, Endpoint::kNone);
  EXPECT_EQ(MatchRoute("GET", "/v2/models/a/b/c").endpoint, Endpoint::kNone);
  EXPECT_EQ(MatchRoute("GET", "*").endpoint, Endpoint::kNone);
}

TEST(HttpRoute, NoSuchEndpointNamesTheRequestAndTheEndpoints) {
  EXPECT_EQ(NoSuchEndpointError("GET", "/v3/nothing?x=1"),
            "no such endpoint: GET /v3/nothing (KServe v2 REST: /v2, /v2/health/{live,ready}, "
            "/v2/models/{name}[/versions/{v}][/ready|/infer|/config|/stats], /v2/models/stats)");
}

}  // namespace
}  // namespace tensorcompute::server::kserve
