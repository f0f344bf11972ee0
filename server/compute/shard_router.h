// File: server/compute/shard_router.h
//
// Lookups on a table sharded by row ranges (core/shard_spec.h) over several servers. A server
// holding shard i of table T answers any lookup on T, whatever rows it reads:
//
//   split      the request, planned and checked against the whole table (bad indices refused
//              with the unsharded words and position, core/shard_split.h), is split by the
//              shard owning each row;
//   fan out    each part goes to its owner in parallel: this server's own part to its own
//              executors (ComputeEntry::SubmitCharged), every other one as a Gather or
//              GatherNd sub-call on `T` to the shard's gRPC target (--shard_peers), with the
//              request's deadline, cancelled with it, marked as a sub-call (kHopMetadata) so
//              that the owner serves it from its own rows and never routes it again, with
//              this server's credentials for its peers (a bearer token, TLS or mTLS:
//              --shard_peer_token_file, --shard_peer_tls), and the request's min_sequence
//              (each shard checks its own table's sequence; this server's part was checked by
//              the front end);
//   assemble   the parts' rows are copied into the output in the request's order. A pooled
//              lookup fetches each distinct row once (unpooled) and pools the fetched rows
//              here with the request's own plan, so the answer is bit for bit the unsharded one.
//
// Which requests split: Gather of axis 0 (batch_dims 0), GatherNd without batch dimensions
// (tuples routed by their first component, any depth), EmbeddingBag, on every storage kind
// (server/compute/table_plans.h refuses the others with INVALID_ARGUMENT).
//
// Each shard's target is one gRPC channel (peer_channel.h): round-robin over what it resolves
// to (a DNS name of several replicas, or an ipv4:/ipv6: list), client-side health checking (a
// draining replica gets no new sub-call), and UNAVAILABLE retried on another replica within the
// deadline. A part that fails anyway fails the request: UNAVAILABLE (also for a peer that does
// not hold the table: NOT_FOUND there; a TLS handshake that fails; and a peer refusing this
// server's token: UNAUTHENTICATED there, with a hint at --shard_peer_token_file) naming the
// shard and its target, "shard 2 of 3 of table 'T' (dns:///tc-2.tc:50051): ...";
// DEADLINE_EXCEEDED, CANCELLED, RESOURCE_EXHAUSTED (a part over the shard's output cap) and
// FAILED_PRECONDITION (a shard holding other rows than its index says: --shard_peers out of
// order; a shard behind the request's min_sequence) with their own codes, named the same way. The
// parts' bytes (their rows, and a pooled lookup's fetched table) count against the in-flight budget
// with the output (UNAVAILABLE, ByteBudget::NeedsError, when they do not fit).
//
// A server without --shard_peers serves a sharded table's lookups whose rows it holds; any
// other is FAILED_PRECONDITION naming the shard that holds the row.
//
// A keyed table sharded by key (core/key_split.h; its own rows on each shard, no row range) is
// routed by key (key_shard_call.cc): a lookup by keys (Gather of axis 0, EmbeddingBag) whose
// keys are all this shard's is served here as it is; any other has its keys split by
// KeyShard, each shard's distinct keys fetched as a Gather by keys (this server's through its
// own executors), with return_found and a policy that never fails (MISSING_DEFAULT_ROW when the
// request's is DEFAULT_ROW, else MISSING_ZERO), and the request's own policy applied here with
// the request's positions: ERROR's "keys[1,0] = 90210 is not a key of table 'users'", the
// found mask, SKIP's bags. A pooled lookup pools the fetched rows here with the request's own
// plan, so every answer is byte for byte the unsharded one. Peers' errors as above. Without
// --shard_peers a key of another shard is FAILED_PRECONDITION naming it and its shard; a lookup
// by indices (or GatherNd) on such a table is INVALID_ARGUMENT ("... is sharded by key: look it
// up by keys").
//
// Thread-safety: Route and NoticeCancel may be called from any thread.

#ifndef TENSORCOMPUTE_SERVER_SHARD_ROUTER_H_
#define TENSORCOMPUTE_SERVER_SHARD_ROUTER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "tensorcompute/v1/tensorcompute.grpc.pb.h"

#include "server/admission/byte_budget.h"
#include "server/admission/peer_token.h"
#include "server/compute/compute_entry.h"
#include "server/compute/peer_channel.h"
#include "server/metrics/metrics.h"

namespace tensorcompute::server {

// The metadata key marking a sub-call of a router: its owner serves it from its own rows.
inline constexpr char kHopMetadata[] = "tc-shard-hop";

struct ShardRouterOptions {
  // One gRPC target per shard index (--shard_peers); empty: lookups are served from this
  // server's rows only.
  std::vector<std::string> peers;
  // How each peer's channel is made: its credentials, TLS name and answer size cap.
  PeerChannelOptions channel;
  // Sent on every sub-call as its "authorization" metadata (--shard_peer_token_file); null:
  // none. Not owned; outlives the router.
  const PeerToken* token = nullptr;
};

// Parses --shard_peers: comma-separated gRPC targets, one per shard index; within one, '|'
// separates several addresses of an ipv4: or ipv6: list (ipv4:127.0.0.1:5001|127.0.0.1:5002).
// INVALID_ARGUMENT for an empty entry.
absl::StatusOr<std::vector<std::string>> ParseShardPeers(const std::string& flag);

class ShardRouter {
 public:
  // `compute` computes the local parts and the pooling; `metrics` counts the sub-calls. Both
  // not owned, and outlive the router.
  ShardRouter(ComputeEntry* compute, Metrics* metrics, ShardRouterOptions options);
  ~ShardRouter();

  ShardRouter(const ShardRouter&) = delete;
  ShardRouter& operator=(const ShardRouter&) = delete;

  // Computes `request`, whose table is a shard and whose plan was made on plan_view().
  // Contract as ComputeEntry::Submit; request.from_router: served from this server's rows
  // only.
  void Route(ComputeRequest request, ByteBudget::Reservation* reservation, ComputeEntry::Done done);

  // A routed request's cancel flag may have been set: its sub-calls are cancelled.
  void NoticeCancel();

  // One routed request in flight, as NoticeCancel sees it.
  class Routed {
   public:
    virtual ~Routed() = default;
    // Cancels the remote parts when the request's cancel flag is set.
    virtual void NoticeCancel() = 0;
  };
  class FanOut;   // what every routed request shares (shard_fan_out.h)
  class Call;     // one routed request on a table sharded by rows (shard_router.cc)
  class KeyCall;  // one on a table sharded by key (key_shard_call.cc)

 private:
  struct Peer {
    std::string target;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::TensorCompute::Stub> stub;
  };

  friend class FanOut;
  friend class Call;
  friend class KeyCall;
  // Route's part for a table sharded by key (key_shard_call.cc).
  void RouteByKey(ComputeRequest request, ByteBudget::Reservation* reservation,
                  ComputeEntry::Done done);
  void Route(std::shared_ptr<Routed> call);  // registers it, for NoticeCancel
  void Forget(Routed* call);
  // A sub-call's context: the request's deadline, the hop mark and this server's token.
  std::unique_ptr<grpc::ClientContext> SubCallContext(const ComputeRequest& request) const;
  // A remote part's error, named after its shard and target (the file comment's codes).
  absl::Status Named(const core::ResidentTensor& table, int32_t shard,
                     const absl::Status& status) const;
  // Empty when a part for `shard` (another than this server's) can be routed; else why not:
  // "this server has no --shard_peers to route it to", etc.
  std::string Unroutable(const core::ShardSpec& spec, const ComputeRequest& request,
                         int32_t shard) const;

  ComputeEntry* const compute_;
  Metrics* const metrics_;
  const ShardRouterOptions options_;
  std::vector<std::unique_ptr<Peer>> peers_;
  absl::Mutex mu_;
  absl::flat_hash_map<Routed*, std::weak_ptr<Routed>> calls_ ABSL_GUARDED_BY(mu_);  // in flight
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_SHARD_ROUTER_H_
