#include "server/compute/shard_updater.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/client_callback.h"
#include "tensorcompute/v1/tensorcompute.grpc.pb.h"
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "core/status_macros.h"
#include "proto/grpc_status.h"
#include "proto/tensor_codec.h"
#include "server/compute/peer_channel.h"

namespace tensorcompute::server {
namespace {

// Every address `host` resolves to, as single-address gRPC targets with `port`.
absl::StatusOr<std::vector<ReplicaAddress>> Resolve(const std::string& target,
                                                    const std::string& host,
                                                    const std::string& port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int error = getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
  if (error != 0) {
    return absl::UnavailableError(
        absl::StrCat("target '", target, "' resolves to no address: ", gai_strerror(error)));
  }
  std::vector<ReplicaAddress> addresses;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    std::string address;
    if (a->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
      address = absl::StrCat("ipv4:", text, ":", port);
    } else if (a->ai_family == AF_INET6) {
      const auto* in = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
      inet_ntop(AF_INET6, &in->sin6_addr, text, sizeof(text));
      address = absl::StrCat("ipv6:[", text, "]:", port);
    } else {
      continue;
    }
    const bool seen = std::any_of(addresses.begin(), addresses.end(),
                                  [&](const ReplicaAddress& r) { return r.target == address; });
    if (!seen) addresses.push_back({address, host});
  }
  freeaddrinfo(found);
  if (addresses.empty()) {
    return absl::UnavailableError(absl::StrCat("target '", target, "' resolves to no address"));
  }
  return addresses;
}

}  // namespace

absl::StatusOr<std::vector<ReplicaAddress>> ReplicaAddresses(const std::string& target) {
  std::vector<ReplicaAddress> addresses;
  for (absl::string_view scheme : {"ipv4:", "ipv6:"}) {
    if (!absl::StartsWith(target, scheme)) continue;
    for (absl::string_view address :
         absl::StrSplit(absl::string_view(target).substr(scheme.size()), ',', absl::SkipEmpty())) {
      addresses.push_back({absl::StrCat(scheme, address), ""});
    }
    return addresses;
  }
  // A DNS name: dns:///host:port, dns://authority/host:port, dns:host:port or host:port.
  absl::string_view name = target;
  if (absl::StartsWith(name, "dns://")) {
    name.remove_prefix(6);
    name.remove_prefix(std::min(name.size(), name.find('/') + 1));
  } else if (absl::StartsWith(name, "dns:")) {
    name.remove_prefix(4);
  } else if (absl::StrContains(name, ":/") || absl::StartsWith(name, "unix:") ||
             absl::StartsWith(name, "unix-abstract:") || absl::StartsWith(name, "vsock:")) {
    return std::vector<ReplicaAddress>{{target, ""}};  // another scheme: one address
  }
  std::string host(name), port = "443";  // gRPC's default port
  if (absl::StartsWith(name, "[")) {     // [v6 literal]:port
    const size_t close = name.find(']');
    if (close != absl::string_view::npos) {
      host = std::string(name.substr(1, close - 1));
      if (close + 2 <= name.size() && name[close + 1] == ':')
        port = std::string(name.substr(close + 2));
    }
  } else if (const size_t colon = name.rfind(':'); colon != absl::string_view::npos) {
    host = std::string(name.substr(0, colon));
    port = std::string(name.substr(colon + 1));
  }
  return Resolve(target, host, port);
}

// One replica's client stream. Its `held`, `writing` and `failed_write` are guarded by its
// update's mu_. Between messages the stream is kept open by a hold, let go when the stream is
// half-closed (Finish), its write failed, or the update was cancelled, so that OnDone comes.
class ShardUpdate::Replica final : public grpc::ClientWriteReactor<v1::UpdateRowsRequest> {
 public:
  Replica(ShardUpdate* owner, int32_t shard, std::string target,
          std::shared_ptr<grpc::Channel> channel)
      : owner(*owner),
        shard(shard),
        target(std::move(target)),
        stub(v1::TensorCompute::NewStub(std::move(channel))) {}

  void OnWriteDone(bool ok) override { owner.WriteDone(*this, ok); }
  void OnDone(const grpc::Status& status) override {
    // The update may go with the last reference, and this replica with it: nothing after.
    std::shared_ptr<ShardUpdate> keep = std::move(self);
    keep->StreamDone(*this, proto::FromGrpcStatus(status), response.sequence());
  }

  ShardUpdate& owner;
  const int32_t shard;
  const std::string target;
  std::unique_ptr<v1::TensorCompute::Stub> stub;
  grpc::ClientContext context;
  v1::UpdateRowsResponse response;
  std::shared_ptr<ShardUpdate> self;  // from Start until OnDone
  bool held = false;
  bool writing = false;
  bool failed_write = false;  // its write failed; OnDone counts it done
};

absl::StatusOr<std::shared_ptr<ShardUpdate>> ShardUpdater::Begin(const core::ResidentTensor& table,
                                                                 absl::Time deadline) {
  const core::ShardSpec& spec = *table.shard;
  if (static_cast<int64_t>(options_.peers.size()) != spec.count) {
    return absl::FailedPreconditionError(
        absl::StrCat("tensor '", table.name, "' is shard ", spec.index, " of ", spec.count,
                     " and --shard_peers lists ", options_.peers.size(),
                     " targets; UpdateRows sends each shard's rows to the replicas of its target"));
  }
  std::shared_ptr<ShardUpdate> update(new ShardUpdate(table.name, spec.count));
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>> channels;  // this call's
  for (int32_t s = 0; s < spec.count; ++s) {
    const std::string& target = options_.peers[static_cast<size_t>(s)];
    absl::StatusOr<std::vector<ReplicaAddress>> addresses = ReplicaAddresses(target);
    if (!addresses.ok()) {
      return absl::UnavailableError(absl::StrCat("shard ", s, " of ", spec.count, " of table '",
                                                 table.name, "': ", addresses.status().message()));
    }
    for (const ReplicaAddress& address : *addresses) {
      auto replica = std::make_unique<ShardUpdate::Replica>(update.get(), s, address.target,
                                                            Channel(address, &channels));
      replica->context.AddMetadata(kHopMetadata, "1");
      // Per-call metadata, as the router's sub-calls (shard_router.cc says why).
      if (options_.token != nullptr) {
        replica->context.AddMetadata("authorization", options_.token->Authorization());
      }
      if (deadline != absl::InfiniteFuture()) {
        replica->context.set_deadline(absl::ToChronoTime(deadline));
      }
      update->replicas_.push_back(std::move(replica));
    }
  }
  {
    // The addresses every entry resolves to now are all the replicas: the channels of the
    // others (pods gone, their addresses not reused) go, once the calls using them end.
    absl::MutexLock lock(&mu_);
    channels_ = std::move(channels);
  }
  update->parts_.resize(static_cast<size_t>(spec.count));
  update->Start();
  return update;
}

std::shared_ptr<grpc::Channel> ShardUpdater::Channel(
    const ReplicaAddress& address,
    absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>>* used) {
  const std::string key = absl::StrCat(address.target, " ", address.tls_host);
  std::shared_ptr<grpc::Channel> channel;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = channels_.find(key); it != channels_.end()) channel = it->second;
  }
  if (channel == nullptr) {
    PeerChannelOptions options = options_.channel;
    // An address resolved from a name is verified as that name, as the router's channel does.
    if (options.tls_server_name.empty()) options.tls_server_name = address.tls_host;
    channel = MakePeerChannel(address.target, options);
  }
  (*used)[key] = channel;
  return channel;
}

ShardUpdate::ShardUpdate(std::string table, int32_t count)
    : table_(std::move(table)), count_(count) {}

ShardUpdate::~ShardUpdate() = default;

void ShardUpdate::Start() {
  {
    absl::MutexLock lock(&mu_);
    open_ = replicas_.size();
  }
  for (const auto& replica : replicas_) {
    replica->self = shared_from_this();
    replica->stub->async()->UpdateRows(&replica->context, &replica->response, replica.get());
    {
      absl::MutexLock lock(&mu_);
      replica->held = true;
    }
    replica->AddHold();
    replica->StartCall();
  }
}

void ShardUpdate::Send(const core::ShardedRowUpdate& split, const core::TensorView& values,
                       Done done) {
  const int64_t n = values.shape.empty() ? 0 : values.shape[0];
  const size_t row_bytes = n == 0 ? 0 : values.data.size() / static_cast<size_t>(n);
  for (int32_t s = 0; s < count_; ++s) {
    const core::ShardedRowUpdate::Part& part = split.shards[static_cast<size_t>(s)];
    v1::UpdateRowsRequest& message = parts_[static_cast<size_t>(s)];
    message.Clear();
    if (first_) message.set_name(table_);
    v1::Tensor& indices = *message.mutable_indices();
    indices.set_dtype(v1::DT_INT64);
    indices.add_shape(static_cast<int64_t>(part.rows.size()));
    indices.mutable_data()->assign(reinterpret_cast<const char*>(part.rows.data()),
                                   part.rows.size() * sizeof(int64_t));
    v1::Tensor& rows = *message.mutable_values();
    rows.set_dtype(proto::ToProtoDataType(values.dtype));
    rows.add_shape(static_cast<int64_t>(part.positions.size()));
    for (size_t d = 1; d < values.shape.size(); ++d) rows.add_shape(values.shape[d]);
    std::string& data = *rows.mutable_data();
    data.reserve(part.positions.size() * row_bytes);
    for (int64_t position : part.positions) {
      data.append(reinterpret_cast<const char*>(values.data.data()) +
                      static_cast<size_t>(position) * row_bytes,
                  row_bytes);
    }
  }
  first_ = false;
  Write(std::move(done));
}

void ShardUpdate::SendKeys(const core::KeyUpdateSplit& split, absl::Span<const int64_t> keys,
                           const core::TensorView& values, Done done) {
  const int64_t n = static_cast<int64_t>(keys.size());
  const size_t row_bytes = n == 0 ? 0 : values.data.size() / static_cast<size_t>(n);
  for (int32_t s = 0; s < count_; ++s) {
    const std::vector<int64_t>& positions = split.positions[static_cast<size_t>(s)];
    const std::vector<int64_t>& deletes = split.delete_keys[static_cast<size_t>(s)];
    v1::UpdateRowsRequest& message = parts_[static_cast<size_t>(s)];
    message.Clear();
    if (first_) message.set_name(table_);
    // Always set, if empty: the message is one by keys, and advances the replica's sequence.
    v1::Tensor& part_keys = *message.mutable_keys();
    part_keys.set_dtype(v1::DT_INT64);
    part_keys.add_shape(static_cast<int64_t>(positions.size()));
    std::string& key_bytes = *part_keys.mutable_data();
    key_bytes.reserve(positions.size() * sizeof(int64_t));
    for (int64_t position : positions) {
      key_bytes.append(reinterpret_cast<const char*>(&keys[static_cast<size_t>(position)]),
                       sizeof(int64_t));
    }
    if (!positions.empty()) {
      v1::Tensor& rows = *message.mutable_values();
      rows.set_dtype(proto::ToProtoDataType(values.dtype));
      rows.add_shape(static_cast<int64_t>(positions.size()));
      for (size_t d = 1; d < values.shape.size(); ++d) rows.add_shape(values.shape[d]);
      std::string& data = *rows.mutable_data();
      data.reserve(positions.size() * row_bytes);
      for (int64_t position : positions) {
        data.append(reinterpret_cast<const char*>(values.data.data()) +
                        static_cast<size_t>(position) * row_bytes,
                    row_bytes);
      }
    }
    if (!deletes.empty()) {
      v1::Tensor& part_deletes = *message.mutable_delete_keys();
      part_deletes.set_dtype(v1::DT_INT64);
      part_deletes.add_shape(static_cast<int64_t>(deletes.size()));
      part_deletes.mutable_data()->assign(reinterpret_cast<const char*>(deletes.data()),
                                          deletes.size() * sizeof(int64_t));
    }
  }
  first_ = false;
  Write(std::move(done));
}

void ShardUpdate::Write(Done done) {
  bool accepted = false;
  {
    absl::MutexLock lock(&mu_);
    if (error_.ok()) {
      accepted = true;
      sent_ = std::move(done);
      writing_ = replicas_.size();
      for (const auto& replica : replicas_) replica->writing = true;
    }
  }
  if (!accepted) return std::move(done)(CurrentError());
  // A write that fails (a cancel meanwhile included) completes with ok false.
  for (const auto& replica : replicas_) {
    replica->StartWrite(&parts_[static_cast<size_t>(replica->shard)]);
  }
}

void ShardUpdate::Finish(Answered done) {
  std::vector<Replica*> closing;
  bool accepted = false;
  {
    absl::MutexLock lock(&mu_);
    if (error_.ok()) {
      accepted = true;
      finishing_ = true;
      answered_ = std::move(done);
      for (const auto& replica : replicas_) {
        if (replica->held) closing.push_back(replica.get());
        replica->held = false;
      }
    }
  }
  if (!accepted) return std::move(done)(CurrentError());
  for (Replica* replica : closing) {
    replica->StartWritesDone();
    replica->RemoveHold();
  }
}

void ShardUpdate::Cancel() {
  {
    absl::MutexLock lock(&mu_);
    if (error_.ok())
      error_ = absl::CancelledError(absl::StrCat("the update of '", table_, "' was cancelled"));
  }
  CancelAll();
  CallReady();
}

absl::Status ShardUpdate::CurrentError() {
  absl::MutexLock lock(&mu_);
  return error_;
}

void ShardUpdate::WriteDone(Replica& replica, bool ok) {
  bool release = false;
  {
    absl::MutexLock lock(&mu_);
    replica.writing = false;
    if (!ok) {
      replica.failed_write = true;  // OnDone, with the stream's status, counts it
    } else {
      --writing_;
    }
    // A failed stream ends; after an error (here or elsewhere) every stream does.
    if (replica.held && (!ok || !error_.ok())) {
      replica.held = false;
      release = true;
    }
  }
  if (release) replica.RemoveHold();
  CallReady();
}

void ShardUpdate::StreamDone(Replica& replica, absl::Status status, int64_t sequence) {
  bool first_error = false;
  {
    absl::MutexLock lock(&mu_);
    --open_;
    if (replica.failed_write) {
      replica.failed_write = false;
      --writing_;
    }
    if (status.ok() && !finishing_) {
      status = absl::InternalError("the replica ended the stream before the last message");
    }
    if (status.ok()) {
      sequence_ = std::max(sequence_, sequence);
    } else {
      first_error = Fail(replica, status);
    }
  }
  if (first_error) CancelAll();
  CallReady();
}

absl::Status ShardUpdate::Named(const Replica& replica, const absl::Status& status) const {
  absl::StatusCode code = status.code();
  if (code != absl::StatusCode::kNotFound && code != absl::StatusCode::kInvalidArgument &&
      code != absl::StatusCode::kFailedPrecondition &&
      code != absl::StatusCode::kDeadlineExceeded && code != absl::StatusCode::kCancelled) {
    code = absl::StatusCode::kUnavailable;
  }
  const bool refused = status.code() == absl::StatusCode::kUnauthenticated ||
                       status.code() == absl::StatusCode::kPermissionDenied;
  return absl::Status(
      code, absl::StrCat("shard ", replica.shard, " of ", count_, " of table '", table_,
                         "', replica ", replica.target, ": ", status.message(),
                         refused ? " (the replica refused this server's update: check its "
                                   "--shard_peer_token_file, an admin token where the replicas "
                                   "require one)"
                                 : "",
                         "; the rows applied elsewhere are absolute values, safe to send again"));
}

bool ShardUpdate::Fail(const Replica& replica, const absl::Status& status) {
  if (!error_.ok()) return false;
  error_ = Named(replica, status);
  return true;
}

void ShardUpdate::CancelAll() {
  std::vector<Replica*> idle;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& replica : replicas_) {
      if (replica->held && !replica->writing) {
        replica->held = false;
        idle.push_back(replica.get());
      }
    }
  }
  // TryCancel is thread-safe, and harmless on a stream already done; a write in flight then
  // fails, and its OnWriteDone lets the stream go.
  for (const auto& replica : replicas_) replica->context.TryCancel();
  for (Replica* replica : idle) replica->RemoveHold();
}

void ShardUpdate::CallReady() {
  Done sent;
  Answered answered;
  absl::StatusOr<int64_t> answer = int64_t{0};
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    status = error_;
    if (sent_ != nullptr && (writing_ == 0 || !error_.ok())) {
      sent = std::move(sent_);
      sent_ = nullptr;
    }
    if (answered_ != nullptr && ((finishing_ && open_ == 0) || !error_.ok())) {
      answered = std::move(answered_);
      answered_ = nullptr;
      if (error_.ok()) {
        answer = sequence_;
      } else {
        answer = error_;
      }
    }
  }
  // Outside mu_: the callers read their next message or answer from here.
  if (sent != nullptr) std::move(sent)(status);
  if (answered != nullptr) std::move(answered)(std::move(answer));
}

}  // namespace tensorcompute::server
