#include "server/admission/client_shares.h"

namespace tensorcompute::server {

ClientShares::Client* ClientShares::Enter(absl::string_view name, absl::Time now) {
  Saw(name, now);
  auto [it, added] = clients_.try_emplace(name);
  if (added) it->second.name = std::string(name);
  ++it->second.refs;
  return &it->second;
}

void ClientShares::Leave(Client* client, absl::Time now) {
  if (--client->refs > 0) return;
  Saw(client->name, now);
  // The key is a copy of the name: erase by it before the entry (and its name) goes.
  const std::string name = std::move(client->name);
  clients_.erase(name);
}

bool ClientShares::Contended(const Client& client, absl::Time now) const {
  // Its own entry is one of them: any other is another client with a call in flight.
  if (clients_.size() > 1) return true;
  const absl::Time other_seen = last_name_ == client.name ? other_ : last_;
  return now - other_seen < kPresence;
}

bool ClientShares::Allows(const Client& client, int64_t own, int64_t more, absl::Time now) const {
  return client.held + more <= share_bytes_ || client.held == own || !Contended(client, now);
}

bool ClientShares::AllowsArrival(const Client& client, absl::Time now) const {
  return client.held < share_bytes_ || !Contended(client, now);
}

void ClientShares::Saw(absl::string_view name, absl::Time now) {
  if (name != last_name_) {
    other_ = last_;
    last_name_ = std::string(name);
  }
  last_ = now;
}

}  // namespace tensorcompute::server
