#include "server/server_options.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

#include "core/shard_spec.h"
#include "proto/grpc_compression.h"
#include "server/admission/client_identity.h"

namespace tensorcompute::server {

absl::Status ServerOptions::Validate() const {
  // At the 128 KiB floor, EffectiveMaxOutputBytes (64 KiB of framing headroom off
  // max_message_bytes) still leaves outputs 64 KiB.
  if (max_batch_size < 1 || queue_capacity < 1 || max_message_bytes < (int64_t{128} << 10) ||
      max_queue_delay_us < 0) {
    return absl::InvalidArgumentError(
        "need max_batch_size >= 1, queue_capacity >= 1, max_queue_delay_us >= 0 and "
        "max_message_bytes >= 131072");
  }
  if (device != "auto" && device != "cpu" && device != "gpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("device must be auto, cpu or gpu, not \"", device, "\""));
  }
  if (absl::Status known = proto::ParseCompression(grpc_compression).status(); !known.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("grpc_compression: ", known.message()));
  }
  if (max_connection_age < absl::ZeroDuration() ||
      max_connection_age_grace < absl::ZeroDuration() || drain_notice < absl::ZeroDuration() ||
      max_connection_idle < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "need max_connection_age, max_connection_age_grace, max_connection_idle and "
        "drain_notice >= 0");
  }
  if (max_inflight_bytes < 1 || max_concurrent_streams < 1 || stream_window_bytes < 0 ||
      keepalive_time <= absl::ZeroDuration() || keepalive_timeout <= absl::ZeroDuration() ||
      keepalive_min_client_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "need max_inflight_bytes >= 1, max_concurrent_streams >= 1, stream_window_bytes >= 0, "
        "keepalive_time and "
        "keepalive_timeout > 0 and keepalive_min_client_interval >= 0");
  }
  if (!(max_inflight_share > 0 && max_inflight_share <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("need 0 < max_inflight_share <= 1 (1: no share), not ", max_inflight_share));
  }
  if (absl::Status proxies = ClientIdentity::Create(trusted_proxies, false).status();
      !proxies.ok()) {
    return proxies;
  }
  if (handshake_timeout <= absl::ZeroDuration() || descriptor_reserve < 0) {
    return absl::InvalidArgumentError("need handshake_timeout > 0 and descriptor_reserve >= 0");
  }
  if (absl::Status valid =
          answer_send_limit.Validate("answer_send_timeout_s", "answer_send_min_bytes_per_s");
      !valid.ok()) {
    return valid;
  }
  if (shard_count < 1 || shard_count > core::kMaxShards || shard_index < 0 ||
      shard_index >= shard_count) {
    return absl::InvalidArgumentError(absl::StrCat("need 1 <= shard_count <= ", core::kMaxShards,
                                                   " and 0 <= shard_index < shard_count"));
  }
  // Targets are counted by their commas, ParseShardPeers' separator ('|' separates the
  // addresses within one target).
  if (const int64_t peers = std::count(shard_peers.begin(), shard_peers.end(), ',') + 1;
      shard_count > 1 && !shard_peers.empty() && peers != shard_count) {
    return absl::InvalidArgumentError(absl::StrCat("shard_peers lists ", peers,
                                                   " targets; shard_count is ", shard_count,
                                                   ": one target per shard"));
  }
  if (shard_peers.empty() && (!shard_peer_token_file.empty() || shard_peer_tls)) {
    return absl::InvalidArgumentError(
        "shard_peer_token_file and shard_peer_tls are credentials for the sub-calls to "
        "shard_peers: set shard_peers too");
  }
  if (!shard_peer_tls && (!shard_peer_tls_ca.empty() || !shard_peer_tls_server_name.empty())) {
    return absl::InvalidArgumentError(
        "shard_peer_tls_ca and shard_peer_tls_server_name need shard_peer_tls (TLS to the "
        "shard peers)");
  }
  if (compute_nice < 0 || compute_nice > 19 || malloc_trim_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("need 0 <= compute_nice <= 19 and malloc_trim_interval >= 0");
  }
  if (gpu_streams < 1 || gpu_streams > 64 || gpu_staging_bytes < kMinGpuStagingBytes ||
      gpu_staging_bytes > kMaxGpuStagingBytes || gpu_timeout < absl::Milliseconds(1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "need 1 <= gpu_streams <= 64, ", kMinGpuStagingBytes,
        " <= gpu_staging_bytes <= ", kMaxGpuStagingBytes, " (1 TiB) and gpu_timeout >= 1ms"));
  }
  if (max_resident_bytes < 1 || max_upload_bytes < 1 ||
      upload_idle_timeout < absl::ZeroDuration() || table_cache_bytes < 1 ||
      max_table_dir_bytes < 0) {
    return absl::InvalidArgumentError(
        "need max_resident_bytes >= 1, max_upload_bytes >= 1, upload_idle_timeout >= 0, "
        "table_cache_bytes >= 1 and max_table_dir_bytes >= 0");
  }
  return absl::OkStatus();
}

}  // namespace tensorcompute::server
