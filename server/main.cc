// tensorcompute-server: serves tensorcompute.v1.TensorCompute (Gather, GatherNd, EmbeddingBag,
// resident tables) over gRPC, with the standard health service and reflection, and KServe v2
// over gRPC and HTTP (server/kserve/). Runs with no flags (CPU, 0.0.0.0:50051).
// The only file with flags; everything else takes ServerOptions (server_options.h documents
// each one, its default and the status code it produces; server/kserve/kserve_front_end.h the
// KServe ones).

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "spdlog/pattern_formatter.h"
#include "spdlog/spdlog.h"
#include <signal.h>
#include <sys/resource.h>

#include "server/flag_help.h"
#include "server/kserve/kserve_front_end.h"
#include "server/server.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:50051", "host:port to serve on; port 0 picks one");
ABSL_FLAG(std::string, device, "auto",
          "auto|cpu|gpu: auto uses the GPUs when the build has CUDA and one is present, else the "
          "CPU; gpu without one exits with an error");
ABSL_FLAG(std::string, gpus, "", "comma-separated CUDA ordinals to use, e.g. 0,1; empty = all");
ABSL_FLAG(int, gpu_streams, 4, "streams (batches in flight) per GPU, 1 to 64");
ABSL_FLAG(int64_t, gpu_staging_mib, 16,
          "pinned host staging per GPU stream, MiB; larger transfers are chunked through it");
ABSL_FLAG(absl::Duration, gpu_timeout, absl::Seconds(10),
          "longest wait for a GPU (a copy, a kernel) before it is taken out of service and the "
          "CPU answers, e.g. 10s");
ABSL_FLAG(int, cpu_threads, 0, "CPU executor threads; 0 = one per core");
ABSL_FLAG(int, compute_nice, 10,
          "nice value (0 to 19) of the CPU executor threads, below the RPC threads");
ABSL_FLAG(int64_t, max_batch_size, 32, "most requests per batch");
ABSL_FLAG(int64_t, max_queue_delay_us, 0,
          "longest a queued request waits for its batch to fill while an executor is free");
ABSL_FLAG(int64_t, queue_capacity, 1024,
          "most queued requests; beyond it UNAVAILABLE (server overloaded)");
ABSL_FLAG(bool, deadline_admission, true,
          "refuse (UNAVAILABLE) a request whose expected queue wait exceeds its deadline");
ABSL_FLAG(int64_t, max_inflight_bytes, int64_t{1} << 30,
          "memory budget of requests in flight (their messages and outputs); beyond it "
          "UNAVAILABLE (server overloaded)");
ABSL_FLAG(double, max_inflight_share, 0.25,
          "the most of --max_inflight_bytes one client (address, token, or the address a trusted "
          "proxy names) may hold while other clients use it; beyond it its calls get "
          "UNAVAILABLE; 1 = no share");
ABSL_FLAG(std::string, trusted_proxies, "",
          "proxies (addresses, CIDR blocks, comma-separated) whose X-Forwarded-For header names "
          "the client for --max_inflight_share; empty = believe no header");
ABSL_FLAG(int64_t, max_concurrent_streams, 256, "most concurrent calls on one connection");
ABSL_FLAG(int64_t, stream_window_bytes, int64_t{64} << 10,
          "HTTP/2 window of a call not yet being read (what gRPC buffers of a waiting call's "
          "message); 0 = gRPC's automatic (BDP) sizing, which does not bound memory");
ABSL_FLAG(int64_t, keepalive_time_s, 60,
          "ping connections quiet this long; close them if no answer in keepalive_timeout_s");
ABSL_FLAG(int64_t, keepalive_timeout_s, 20, "how long a keepalive ping may go unanswered");
ABSL_FLAG(int64_t, keepalive_min_client_interval_s, 10,
          "clients pinging more often than this get GOAWAY too_many_pings");
ABSL_FLAG(int64_t, max_connection_idle_s, 0,
          "close connections with no call for this long; 0 = never");
ABSL_FLAG(int64_t, handshake_timeout_s, 10,
          "close gRPC connections that have not finished their handshake (TLS, HTTP/2 preface "
          "and SETTINGS) this long after they were accepted");
ABSL_FLAG(int64_t, descriptor_reserve, 128,
          "file descriptors the gRPC listeners leave free: a connection arriving when fewer are "
          "free under the open-files limit is closed at once");
ABSL_FLAG(int64_t, max_message_bytes, int64_t{64} << 20,
          "largest request/response message; a larger request gets RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, max_output_bytes, 0,
          "largest output; larger gets RESOURCE_EXHAUSTED; 0 = what fits max_message_bytes");
ABSL_FLAG(int64_t, max_rank, 32, "highest rank of params and indices; above: INVALID_ARGUMENT");
ABSL_FLAG(int64_t, drain_timeout_s, 30,
          "on SIGTERM/SIGINT, how long accepted requests may take before they are cancelled");
ABSL_FLAG(int64_t, drain_notice_ms, 500,
          "at the start of a drain, how long health says NOT_SERVING and new requests get "
          "UNAVAILABLE before connections close, so clients move to other replicas first");
ABSL_FLAG(std::string, metrics_listen, "0.0.0.0:9090",
          "host:port of the Prometheus endpoint (GET /metrics); port 0 picks one; empty = none");
ABSL_FLAG(std::string, http_listen, "",
          "host:port for KServe v2 HTTP/REST (port 0 picks one); empty = no HTTP endpoint");
ABSL_FLAG(int, http_threads, 8,
          "I/O threads serving every HTTP connection (--http_listen), asynchronously");
ABSL_FLAG(int, http_max_connections, 1024,
          "most open HTTP connections; at the limit a new one closes the connection idle "
          "longest (waiting for a request), or, none idle, is closed at once (both counted)");
ABSL_FLAG(int64_t, http_max_header_bytes, 16 << 10,
          "largest HTTP request header (request line and fields); larger gets 431");
ABSL_FLAG(int, http_max_header_fields, 100, "most HTTP request header fields; more gets 431");
ABSL_FLAG(int64_t, http_header_timeout_s, 10,
          "seconds from an HTTP request's first byte (a connection's accept) to its header's end; "
          "then the connection closes");
ABSL_FLAG(int64_t, http_body_progress_timeout_s, 10,
          "longest wait for the next byte of an HTTP request body; then the connection closes");
ABSL_FLAG(int64_t, http_body_timeout_s, 120,
          "longest a whole HTTP request body may take to arrive; then the connection closes");
ABSL_FLAG(int64_t, http_idle_timeout_s, 60,
          "close a keep-alive HTTP connection with no request for this long");
ABSL_FLAG(int64_t, http_write_timeout_s, 60,
          "longest the writing of one HTTP response may take; then the connection closes");
ABSL_FLAG(int64_t, answer_send_timeout_s, 10,
          "a gRPC compute answer not taken by its client within this + its size / "
          "answer_send_min_bytes_per_s is cancelled and its budget freed");
ABSL_FLAG(int64_t, answer_send_min_bytes_per_s, int64_t{1} << 20,
          "the slowest rate an answer is waited for (gRPC: + answer_send_timeout_s; HTTP: + "
          "http_write_timeout_s), in bytes a second");
ABSL_FLAG(int64_t, max_connection_age_s, 0,
          "send GOAWAY to connections older than this (+-10%), so clients reconnect and spread "
          "over new replicas; 0 = never");
ABSL_FLAG(int64_t, max_connection_age_grace_s, 30,
          "after that GOAWAY, how long the connection's RPCs in flight may take");
ABSL_FLAG(std::string, grpc_compression, "none",
          "compress gRPC answers for clients that accept it: none, gzip or deflate (requests "
          "may always come compressed)");
// Security (server_options.h; docs/deploy.md "TLS and tokens").
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain: serve TLS (with --tls_key)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA certificate(s): mTLS, clients must present a certificate it signed");
ABSL_FLAG(std::string, health_listen, "",
          "host:port of a plaintext listener serving grpc.health.v1 only (for probes that "
          "cannot speak TLS); empty = none");
ABSL_FLAG(std::string, auth_token_file, "",
          "file of accepted bearer tokens, one per line; every RPC but health then needs "
          "'authorization: Bearer <token>'; re-read on SIGHUP");
ABSL_FLAG(int64_t, inline_compute_bytes, 1 << 20,
          "requests with outputs up to this many bytes that find the server idle are computed "
          "on the receiving thread, without a hand-off to the pool; 0 = never");
ABSL_FLAG(std::string, admin_token_file, "",
          "file of admin tokens: PutTensor and DeleteTensor then need one of them "
          "(PERMISSION_DENIED for an ordinary token); re-read on SIGHUP");
ABSL_FLAG(int64_t, max_resident_bytes, int64_t{8} << 30,
          "most bytes of resident tensors (PutTensor, --preload); beyond: RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, max_upload_bytes, int64_t{1} << 30,
          "memory share of uploads in progress (PutTensor), apart from --max_inflight_bytes: "
          "each holds twice --max_message_bytes while it reads; without room: UNAVAILABLE");
ABSL_FLAG(int64_t, upload_idle_timeout_s, 120,
          "longest wait for an upload's next message; past it: DEADLINE_EXCEEDED, nothing "
          "stored; 0 = no bound");
ABSL_FLAG(std::vector<std::string>, preload, {},
          "NAME=PATH.npy[:KIND][:disk][,...]: tensors loaded at start-up, before health turns "
          "SERVING; KIND stores a float32 [rows, dim] table compactly: float16, int8-rowwise, "
          "or int8-rowwise-prequantized (uint8 [rows, dim + 8]); default as-is; :disk leaves "
          "the rows in the file, behind a row cache of --table_cache_bytes");
ABSL_FLAG(int64_t, table_cache_bytes, int64_t{1} << 30,
          "the row cache of each table on disk (--preload ...:disk, PutTensor tier DISK), "
          "counted against --max_resident_bytes; at most the table's own size");
ABSL_FLAG(std::string, table_dir, "",
          "a directory on a local disk where PutTensor's tables on disk (tier DISK) keep their "
          "rows, in unnamed files gone with their table or the server; empty: no such puts");
ABSL_FLAG(int64_t, max_table_dir_bytes, int64_t{64} << 30,
          "the most bytes the files of tables on disk under --table_dir may hold together");
ABSL_FLAG(std::vector<std::string>, preload_keys, {},
          "NAME=KEYS.npy[:POLICY][,...]: make --preload table NAME keyed by sparse int64 keys "
          "(KEYS.npy: int64 [rows], unique); POLICY for keys it lacks: error (default) or zero");
ABSL_FLAG(int32_t, shard_index, 0,
          "with --shard_count > 1: every --preload is loaded as this shard of its table, "
          "reading only its rows of the file (a --preload_keys table: sharded by key, the whole "
          "files read and the keys k with KeyShard(k, count) == index kept)");
ABSL_FLAG(int32_t, shard_count, 1,
          "shards the --preload tables are split into by rows (keyed tables: by key)");
ABSL_FLAG(std::string, shard_peers, "",
          "TARGET[,TARGET...]: one gRPC target per shard index (e.g. "
          "dns:///tc-1.tc:50051; ipv4:A:P|B:P for several replicas): lookups on a sharded table "
          "send the rows this server does not hold to their shard; UpdateRows on one goes to "
          "every replica of every shard (this server's own entry must list it)");
ABSL_FLAG(std::string, shard_peer_token_file, "",
          "token file (--auth_token_file's format, may be the same file): its first token is "
          "sent to the --shard_peers as 'authorization: Bearer <token>'; re-read on SIGHUP");
ABSL_FLAG(bool, shard_peer_tls, false,
          "TLS to the --shard_peers (verified against --shard_peer_tls_ca); with --tls_cert and "
          "--tls_key, presented as the client certificate for peers with --tls_client_ca");
ABSL_FLAG(std::string, shard_peer_tls_ca, "",
          "PEM CA certificate(s) that signed the peers' certificates; empty = the system's roots");
ABSL_FLAG(std::string, shard_peer_tls_server_name, "",
          "name verified against the peers' certificates instead of each target's host (peers "
          "addressed by IP, or sharing one certificate)");
ABSL_FLAG(int64_t, malloc_trim_interval_s, 10,
          "give freed memory back to the OS (malloc_trim) this often; 0 = never");
ABSL_FLAG(std::string, log_level, "info", "trace|debug|info|warn|error|critical|off");
ABSL_FLAG(std::string, log_format, "text", "text|json (one JSON object per line)");

namespace {

using tensorcompute::server::AsksForHelp;
using tensorcompute::server::FlagGroup;
using tensorcompute::server::PrintFlagHelp;

// spdlog flag %* : the message, escaped for a JSON string. (%v would write it raw, and a quote or
// a newline in a message would break the line's JSON.)
class JsonMessage : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    for (char c : std::string_view(msg.payload.data(), msg.payload.size())) {
      switch (c) {
        case '"':
          dest.append(std::string_view("\\\""));
          break;
        case '\\':
          dest.append(std::string_view("\\\\"));
          break;
        case '\n':
          dest.append(std::string_view("\\n"));
          break;
        default:
          // JSON allows no raw control characters in a string; bytes >= 0x80 (UTF-8) pass.
          if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            dest.append(std::string_view(buf));
          } else {
            dest.push_back(c);
          }
      }
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessage>();
  }
};

bool SetUpLogging() {
  // from_str answers `off` for a name it does not know: only "off" itself may mean that.
  const spdlog::level::level_enum level = spdlog::level::from_str(absl::GetFlag(FLAGS_log_level));
  if (level == spdlog::level::off && absl::GetFlag(FLAGS_log_level) != "off") return false;
  spdlog::set_level(level);
  const std::string format = absl::GetFlag(FLAGS_log_format);
  if (format == "json") {
    // UTC, as the pattern's trailing Z says.
    auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
    formatter->add_flag<JsonMessage>('*').set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","msg":"%*"})");
    spdlog::set_formatter(std::move(formatter));
  } else if (format != "text") {
    return false;
  }
  return true;
}

// Raises the soft limit on open files to the hard one: every connection is a descriptor, and at
// the soft limit (often 1024) accept() fails with EMFILE, so connections would queue in the
// kernel unseen by --http_max_connections and its idle-connection rule. Logs the limit.
void RaiseFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t before = limit.rlim_cur;
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) limit.rlim_cur = before;
  }
  spdlog::info("open files: soft limit {} (was {}, hard limit {})",
               static_cast<uint64_t>(limit.rlim_cur), static_cast<uint64_t>(before),
               static_cast<uint64_t>(limit.rlim_max));
}

// "0,1" -> {0, 1}; "" -> {} (every GPU). False for anything else.
bool ParseOrdinals(const std::string& text, std::vector<int>* ordinals) {
  if (text.empty()) return true;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int ordinal = 0;
    if (!absl::SimpleAtoi(part, &ordinal) || ordinal < 0) return false;
    ordinals->push_back(ordinal);
  }
  return true;
}

// "host:0" with the port the server really bound.
std::string BoundAddress(const std::string& listen, int port) {
  // The last colon, so that an IPv6 host ("[::]:0") keeps its own.
  const size_t colon = listen.rfind(':');
  return absl::StrCat(colon == std::string::npos ? listen : listen.substr(0, colon), ":", port);
}

// --help's groups (flag_help.h): every flag above is in one of them.
const std::vector<FlagGroup>& FlagGroups() {
  // Never destroyed (Google style for a static of non-trivial type).
  static const auto* groups = new std::vector<FlagGroup>{
      {"Listeners and shutdown",
       {"listen", "http_listen", "metrics_listen", "health_listen", "http_threads",
        "grpc_compression", "keepalive_time_s", "keepalive_timeout_s",
        "keepalive_min_client_interval_s", "max_connection_idle_s", "max_connection_age_s",
        "max_connection_age_grace_s", "handshake_timeout_s", "drain_timeout_s", "drain_notice_ms"}},
      {"Limits (each refusal's status code: docs/errors.md)",
       {"max_message_bytes", "max_output_bytes", "max_rank", "max_inflight_bytes",
        "max_inflight_share", "trusted_proxies", "max_concurrent_streams", "stream_window_bytes",
        "descriptor_reserve", "http_max_connections", "http_max_header_bytes",
        "http_max_header_fields", "http_header_timeout_s", "http_body_progress_timeout_s",
        "http_body_timeout_s", "http_idle_timeout_s", "http_write_timeout_s",
        "answer_send_timeout_s", "answer_send_min_bytes_per_s"}},
      {"Batching and the CPU",
       {"max_batch_size", "max_queue_delay_us", "queue_capacity", "deadline_admission",
        "inline_compute_bytes", "cpu_threads", "compute_nice"}},
      {"Devices", {"device", "gpus", "gpu_streams", "gpu_staging_mib", "gpu_timeout"}},
      {"Security", {"tls_cert", "tls_key", "tls_client_ca", "auth_token_file", "admin_token_file"}},
      {"Tables",
       {"preload", "preload_keys", "table_cache_bytes", "table_dir", "max_table_dir_bytes",
        "max_resident_bytes", "max_upload_bytes", "upload_idle_timeout_s",
        "malloc_trim_interval_s"}},
      {"Sharding",
       {"shard_index", "shard_count", "shard_peers", "shard_peer_token_file", "shard_peer_tls",
        "shard_peer_tls_ca", "shard_peer_tls_server_name"}},
      {"Logging", {"log_level", "log_format"}},
  };
  return *groups;
}

}  // namespace

int main(int argc, char** argv) {
  constexpr char kUsage[] =
      "tensorcompute-server [--flags]: Gather, GatherNd and EmbeddingBag over gRPC and KServe v2";
  if (AsksForHelp(argc, argv)) {
    PrintFlagHelp(stdout, kUsage, "server/main.cc", FlagGroups());
    return 0;
  }
  absl::SetProgramUsageMessage(kUsage);
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil is built without NDEBUG, which turns absl::Mutex deadlock detection on:
  // every lock (gRPC's included) then updates a process-wide lock graph under one global lock,
  // 4% of the CPU of small calls at 64 clients (perf: GraphCycles). The tests keep it on, to
  // catch lock-order inversions; the server, CLI and benchmarks turn it off.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (!SetUpLogging()) {
    std::fprintf(stderr, "tensorcompute-server: bad --log_level or --log_format\n");
    return 2;
  }
  RaiseFileLimit();
  std::vector<int> gpus;
  if (!ParseOrdinals(absl::GetFlag(FLAGS_gpus), &gpus)) {
    spdlog::critical("--gpus={} is not a comma-separated list of CUDA ordinals",
                     absl::GetFlag(FLAGS_gpus));
    return 2;
  }
  // MiB to bytes, clamped first so that the product cannot overflow: out of range stays out of
  // range (2 TiB, -1 MiB), and Validate refuses it.
  const int64_t staging_mib = absl::GetFlag(FLAGS_gpu_staging_mib);
  const int64_t staging_bytes = std::clamp<int64_t>(staging_mib, -1, int64_t{1} << 21) << 20;

  // Block the stop signals before any thread starts (threads inherit the mask), then wait for
  // them with sigwait on this thread. This works the same as PID 1 in a container, where no
  // default handlers exist.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);  // reloads the token files
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  tensorcompute::server::ServerOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.device = absl::GetFlag(FLAGS_device);
  options.gpus = gpus;
  options.gpu_streams = absl::GetFlag(FLAGS_gpu_streams);
  options.gpu_staging_bytes = staging_bytes;
  options.gpu_timeout = absl::GetFlag(FLAGS_gpu_timeout);
  options.cpu_threads = absl::GetFlag(FLAGS_cpu_threads);
  options.compute_nice = absl::GetFlag(FLAGS_compute_nice);
  options.max_batch_size = absl::GetFlag(FLAGS_max_batch_size);
  options.max_queue_delay_us = absl::GetFlag(FLAGS_max_queue_delay_us);
  options.queue_capacity = absl::GetFlag(FLAGS_queue_capacity);
  options.deadline_admission = absl::GetFlag(FLAGS_deadline_admission);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.max_output_bytes = absl::GetFlag(FLAGS_max_output_bytes);
  options.max_rank = absl::GetFlag(FLAGS_max_rank);
  options.drain_timeout = absl::Seconds(absl::GetFlag(FLAGS_drain_timeout_s));
  options.drain_notice = absl::Milliseconds(absl::GetFlag(FLAGS_drain_notice_ms));
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options.max_inflight_bytes = absl::GetFlag(FLAGS_max_inflight_bytes);
  options.max_inflight_share = absl::GetFlag(FLAGS_max_inflight_share);
  options.trusted_proxies = absl::GetFlag(FLAGS_trusted_proxies);
  options.max_concurrent_streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  options.stream_window_bytes = absl::GetFlag(FLAGS_stream_window_bytes);
  options.keepalive_time = absl::Seconds(absl::GetFlag(FLAGS_keepalive_time_s));
  options.keepalive_timeout = absl::Seconds(absl::GetFlag(FLAGS_keepalive_timeout_s));
  options.keepalive_min_client_interval =
      absl::Seconds(absl::GetFlag(FLAGS_keepalive_min_client_interval_s));
  options.max_connection_idle = absl::Seconds(absl::GetFlag(FLAGS_max_connection_idle_s));
  options.handshake_timeout = absl::Seconds(absl::GetFlag(FLAGS_handshake_timeout_s));
  options.descriptor_reserve = absl::GetFlag(FLAGS_descriptor_reserve);
  options.max_connection_age = absl::Seconds(absl::GetFlag(FLAGS_max_connection_age_s));
  options.max_connection_age_grace = absl::Seconds(absl::GetFlag(FLAGS_max_connection_age_grace_s));
  options.grpc_compression = absl::GetFlag(FLAGS_grpc_compression);
  options.answer_send_limit.base = absl::Seconds(absl::GetFlag(FLAGS_answer_send_timeout_s));
  options.answer_send_limit.min_bytes_per_s = absl::GetFlag(FLAGS_answer_send_min_bytes_per_s);
  options.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key = absl::GetFlag(FLAGS_tls_key);
  options.tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  options.health_listen = absl::GetFlag(FLAGS_health_listen);
  options.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  options.admin_token_file = absl::GetFlag(FLAGS_admin_token_file);
  options.inline_compute_bytes = absl::GetFlag(FLAGS_inline_compute_bytes);
  options.max_resident_bytes = absl::GetFlag(FLAGS_max_resident_bytes);
  options.table_cache_bytes = absl::GetFlag(FLAGS_table_cache_bytes);
  options.table_dir = absl::GetFlag(FLAGS_table_dir);
  options.max_table_dir_bytes = absl::GetFlag(FLAGS_max_table_dir_bytes);
  options.max_upload_bytes = absl::GetFlag(FLAGS_max_upload_bytes);
  options.upload_idle_timeout = absl::Seconds(absl::GetFlag(FLAGS_upload_idle_timeout_s));
  options.preload = absl::GetFlag(FLAGS_preload);
  options.preload_keys = absl::GetFlag(FLAGS_preload_keys);
  options.shard_index = absl::GetFlag(FLAGS_shard_index);
  options.shard_count = absl::GetFlag(FLAGS_shard_count);
  options.shard_peers = absl::GetFlag(FLAGS_shard_peers);
  options.shard_peer_token_file = absl::GetFlag(FLAGS_shard_peer_token_file);
  options.shard_peer_tls = absl::GetFlag(FLAGS_shard_peer_tls);
  options.shard_peer_tls_ca = absl::GetFlag(FLAGS_shard_peer_tls_ca);
  options.shard_peer_tls_server_name = absl::GetFlag(FLAGS_shard_peer_tls_server_name);
  options.malloc_trim_interval = absl::Seconds(absl::GetFlag(FLAGS_malloc_trim_interval_s));
  // Option values are checked in one place (ServerOptions::Validate; Server::Start checks
  // again); a bad flag is exit 2, as the usage errors above.
  if (absl::Status valid = options.Validate(); !valid.ok()) {
    spdlog::critical("bad flag: {}", std::string(valid.message()));
    return 2;
  }

  tensorcompute::server::kserve::Options kserve_options;
  kserve_options.http_listen = absl::GetFlag(FLAGS_http_listen);
  kserve_options.http_threads = absl::GetFlag(FLAGS_http_threads);
  kserve_options.http_max_connections = absl::GetFlag(FLAGS_http_max_connections);
  kserve_options.http_max_header_bytes = absl::GetFlag(FLAGS_http_max_header_bytes);
  kserve_options.http_max_header_fields = absl::GetFlag(FLAGS_http_max_header_fields);
  kserve_options.http_header_timeout = absl::Seconds(absl::GetFlag(FLAGS_http_header_timeout_s));
  kserve_options.http_body_progress_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_http_body_progress_timeout_s));
  kserve_options.http_body_timeout = absl::Seconds(absl::GetFlag(FLAGS_http_body_timeout_s));
  kserve_options.http_idle_timeout = absl::Seconds(absl::GetFlag(FLAGS_http_idle_timeout_s));
  kserve_options.http_write_timeout = absl::Seconds(absl::GetFlag(FLAGS_http_write_timeout_s));
  if (absl::Status valid = kserve_options.Validate(); !valid.ok()) {
    spdlog::critical("bad --http_* flag: {}", std::string(valid.message()));
    return 2;
  }
  auto server = tensorcompute::server::Server::Start(
      options, {tensorcompute::server::kserve::MakeFrontEnd(kserve_options)});
  if (!server.ok()) {
    spdlog::critical("cannot start: {}", std::string(server.status().message()));
    return 1;
  }
  std::string front_end_ports;  // " http_port=8000" (server_process.py reads it)
  for (const auto& [name, port] : (*server)->front_end_ports()) {
    absl::StrAppend(&front_end_ports, " ", name, "=", port);
  }
  const std::string gpu_line =
      (*server)->device() == "cpu"
          ? ""
          : absl::StrCat(" gpu=\"", (*server)->device_description(),
                         "\" gpu_streams=", options.gpu_streams, " gpu_staging_mib=", staging_mib);
  spdlog::info(
      "tensorcompute-server listening on {} port={} device={}{} cpu_threads={} "
      "max_batch_size={} max_queue_delay_us={} queue_capacity={} max_message_bytes={} "
      "max_output_bytes={} max_inflight_bytes={} max_rank={} drain_timeout_s={} metrics_port={}"
      "{} max_connection_age_s={}",
      BoundAddress(options.listen, (*server)->port()), (*server)->port(), (*server)->device(),
      gpu_line, (*server)->cpu_threads(), options.max_batch_size, options.max_queue_delay_us,
      options.queue_capacity, options.max_message_bytes, options.EffectiveMaxOutputBytes(),
      options.max_inflight_bytes, options.max_rank, absl::GetFlag(FLAGS_drain_timeout_s),
      (*server)->metrics_port(), front_end_ports, absl::GetFlag(FLAGS_max_connection_age_s));
  const std::string peers =
      options.shard_peers.empty()
          ? ""
          : absl::StrCat(", to shard peers: ", options.shard_peer_tls ? "tls" : "plaintext",
                         options.shard_peer_tls && !options.tls_cert.empty()
                             ? " with this server's certificate"
                             : "",
                         options.shard_peer_token_file.empty() ? ", no token" : ", a token");
  spdlog::info("security: {}{}{}{}{}{}", options.tls_cert.empty() ? "plaintext" : "tls",
               options.tls_client_ca.empty() ? "" : " mtls (client certificates required)",
               options.auth_token_file.empty() ? ", no token" : ", bearer tokens required",
               options.admin_token_file.empty() ? "" : ", admin token for PutTensor/DeleteTensor",
               peers,
               (*server)->health_port() == 0
                   ? ""
                   : absl::StrCat(", plaintext health on port ", (*server)->health_port()));
  spdlog::default_logger()->flush();

  int signal = 0;
  while (sigwait(&stop_signals, &signal) == 0 && signal == SIGHUP) {
    if (options.auth_token_file.empty() && options.admin_token_file.empty() &&
        options.shard_peer_token_file.empty()) {
      spdlog::info("received SIGHUP: nothing to reload (no --auth_token_file)");
      continue;
    }
    absl::StatusOr<int> tokens = (*server)->ReloadAuthTokens();
    if (tokens.ok()) {
      std::vector<std::string> files;
      for (const std::string* file :
           {&options.auth_token_file, &options.admin_token_file, &options.shard_peer_token_file}) {
        // The peer token file is often the auth_token_file itself: named once.
        if (!file->empty() && std::find(files.begin(), files.end(), *file) == files.end()) {
          files.push_back(*file);
        }
      }
      spdlog::info("received SIGHUP: reloaded {}: {} tokens accepted",
                   absl::StrJoin(files, " and "), *tokens);
    } else {
      spdlog::error("received SIGHUP: cannot reload, keeping the previous tokens: {}",
                    std::string(tokens.status().message()));
    }
    spdlog::default_logger()->flush();
  }
  spdlog::info("received {}, draining (timeout {} s)", signal == SIGTERM ? "SIGTERM" : "SIGINT",
               absl::GetFlag(FLAGS_drain_timeout_s));
  (*server)->Drain();
  spdlog::info("exiting");
  spdlog::shutdown();  // flushes
  // Every request has been answered. Skip destructors: gRPC 1.51's server teardown can stall
  // for about 10 s on an internal thread (seen in about 1 in 5 exits), which would break the
  // promise to exit within --drain_timeout_s.
  std::fflush(nullptr);
  std::_Exit(0);
}
