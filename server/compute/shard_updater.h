// File: server/compute/shard_updater.h
//
// UpdateRows on a sharded table (issue 41), sent to any replica of any shard: the call forwards
// each message to every replica of every shard, each getting the rows its shard owns, and
// answers once all of them applied every message.
//
//   replicas   each --shard_peers entry (ParseShardPeers) is enumerated at the start of each
//              UpdateRows call (ReplicaAddresses): an ipv4:/ipv6: list gives its addresses, a
//              DNS name (dns:///host:port, dns:host:port or host:port) every address
//              getaddrinfo resolves it to, anything else (unix:) itself. Each replica gets its
//              own client stream (not the entry's round-robin channel: every replica must apply
//              every message), on a channel per address, kept while the address is resolved
//              (MakePeerChannel, the router's credentials; a resolved DNS name's host is the
//              name TLS verifies unless --shard_peer_tls_server_name says otherwise), marked
//              as a sub-call (kHopMetadata: the replica applies it to its own rows and never
//              forwards it), with the router's token (ShardRouterOptions.token) and the
//              caller's deadline.
//   self       this server does not apply the messages itself: its own shard's entry must list
//              it too, and it applies them when they come back through the network, like any
//              other replica. So each replica applies each message exactly once.
//   messages   every replica gets every message, possibly with no rows (an empty message still
//              advances its sequence by one), in the caller's order: the sequences of a table's
//              replicas stay equal, so that min_sequence can be asked of any of them. Row
//              indices are the whole table's (PrepareRowUpdate on a shard takes them). A keyed
//              table sharded by key gets messages by keys: each shard its keys (with their
//              rows) and delete_keys (core/key_split.h), every shard a message by keys.
//   memory     one message at a time: Send's `done` comes once every replica's write has
//              completed, and the caller reads no next message before (backpressure). The
//              parts sent are at most the message's bytes, one copy per shard.
//   answer     Finish half-closes every stream and gives the largest sequence the replicas
//              answered.
//   errors     the first replica that fails fails the call, and the others are cancelled:
//              UNAVAILABLE (unreachable, its error, a token or TLS refused) naming it, "shard 1
//              of 2 of table 'T', replica ipv4:127.0.0.1:5002: ...; the rows applied elsewhere
//              are absolute values, safe to send again"; a replica's NOT_FOUND,
//              INVALID_ARGUMENT and FAILED_PRECONDITION (a replica holding another shard, a
//              table replaced meanwhile), and DEADLINE_EXCEEDED and CANCELLED keep their code,
//              named the same way. Begin fails with FAILED_PRECONDITION when --shard_peers does
//              not list one entry per shard, UNAVAILABLE when an entry resolves to no address.
//
// Thread-safety: ShardUpdater's methods may be called from any thread. A ShardUpdate's Send and
// Finish are called one at a time (each after the previous one's `done`); Cancel from any
// thread at any time.

#ifndef TENSORCOMPUTE_SERVER_COMPUTE_SHARD_UPDATER_H_
#define TENSORCOMPUTE_SERVER_COMPUTE_SHARD_UPDATER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "grpcpp/channel.h"
#include "tensorcompute/v1/tensorcompute.pb.h"

#include "core/key_split.h"
#include "core/live_rows.h"
#include "core/tensor.h"
#include "core/tensor_registry.h"
#include "server/compute/shard_router.h"

namespace tensorcompute::server {

// One replica of a shard's target: the gRPC target of that address alone, and the host name
// TLS verifies on it (empty: the target's own).
struct ReplicaAddress {
  std::string target;
  std::string tls_host;
};

// The replicas of one --shard_peers target (as ParseShardPeers gives it), resolving a DNS name
// now. UNAVAILABLE, naming the target, when it resolves to no address.
absl::StatusOr<std::vector<ReplicaAddress>> ReplicaAddresses(const std::string& target);

class ShardUpdate;

class ShardUpdater {
 public:
  // `options` as the router's (the same peers, credentials and token).
  explicit ShardUpdater(ShardRouterOptions options) : options_(std::move(options)) {}

  ShardUpdater(const ShardUpdater&) = delete;
  ShardUpdater& operator=(const ShardUpdater&) = delete;

  // Whether updates of a sharded table are forwarded (the server has --shard_peers).
  bool routes() const { return !options_.peers.empty(); }

  // Opens a stream to every replica of every shard of `table` (a shard), with `deadline`.
  // REQUIRES: routes(), table.shard is set.
  absl::StatusOr<std::shared_ptr<ShardUpdate>> Begin(const core::ResidentTensor& table,
                                                     absl::Time deadline);

 private:
  // The channel of `address`, the one kept or a new one, added to `used` (the call's).
  std::shared_ptr<grpc::Channel> Channel(
      const ReplicaAddress& address,
      absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>>* used);

  const ShardRouterOptions options_;
  absl::Mutex mu_;
  // By target and TLS host: those of the last call's replicas (each call resolves them all),
  // reused by the next.
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
};

// One UpdateRows call's streams to the replicas (shard_updater.cc). Made by ShardUpdater::Begin.
class ShardUpdate : public std::enable_shared_from_this<ShardUpdate> {
 public:
  using Done = absl::AnyInvocable<void(absl::Status) &&>;
  using Answered = absl::AnyInvocable<void(absl::StatusOr<int64_t>) &&>;

  ~ShardUpdate();

  // Sends one message, checked and split (core::SplitRowUpdate): shard s's rows of `values`
  // (the message's, [n, row shape...]) to every replica of shard s. `done` is called once,
  // from any thread (possibly before Send returns): OK once every replica's write completed,
  // or the first error (see the file comment).
  void Send(const core::ShardedRowUpdate& split, const core::TensorView& values, Done done);
  // Send for a keyed table sharded by key: shard s's keys (split.positions[s] of `keys`) with
  // their rows of `values` ([len(keys), row shape...], or unset when keys is empty), and its
  // delete_keys. Every replica gets a message by keys, possibly empty.
  void SendKeys(const core::KeyUpdateSplit& split, absl::Span<const int64_t> keys,
                const core::TensorView& values, Done done);

  // Half-closes every stream; `done` gets the largest sequence the replicas answered, or the
  // first error.
  void Finish(Answered done);

  // Cancels every stream (the caller's call was cancelled); a pending `done` gets the error.
  void Cancel();

  class Replica;  // one replica's stream (shard_updater.cc)

 private:
  friend class ShardUpdater;
  friend class Replica;
  ShardUpdate(std::string table, int32_t count);

  void Start();
  // Writes parts_ to every replica; `done` as Send's.
  void Write(Done done);
  void WriteDone(Replica& replica, bool ok);
  void StreamDone(Replica& replica, absl::Status status, int64_t sequence);
  absl::Status Named(const Replica& replica, const absl::Status& status) const;
  // Records the first error; true when it was the first (the caller then calls CancelAll).
  bool Fail(const Replica& replica, const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Cancels every stream, and lets go of the idle ones so that they finish.
  void CancelAll();
  absl::Status CurrentError();
  // Calls the `done` whose wait is over (after the first error, at once).
  void CallReady();

  const std::string table_;
  const int32_t count_;
  std::vector<std::unique_ptr<Replica>> replicas_;  // filled by Begin, then fixed
  // The message being sent, by shard: each replica's write reads its shard's.
  std::vector<v1::UpdateRowsRequest> parts_;
  bool first_ = true;  // the next message is the first (it names the table)

  absl::Mutex mu_;                           // also guards the replicas' state
  size_t writing_ ABSL_GUARDED_BY(mu_) = 0;  // replicas whose write of parts_ is not done
  size_t open_ ABSL_GUARDED_BY(mu_) = 0;     // streams not done
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);  // the first
  int64_t sequence_ ABSL_GUARDED_BY(mu_) = 0;
  Done sent_ ABSL_GUARDED_BY(mu_);
  Answered answered_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_COMPUTE_SHARD_UPDATER_H_
