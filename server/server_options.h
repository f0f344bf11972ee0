// File: server/server_options.h
//
// Everything an operator can set on tensorcompute-server, with its default and, for limits,
// the status code a request that exceeds it gets. server/main.cc maps flags onto this struct
// one to one (the flag names are the field names); the library never reads flags.

#ifndef TENSORCOMPUTE_SERVER_SERVER_OPTIONS_H_
#define TENSORCOMPUTE_SERVER_SERVER_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

#include "server/admission/send_deadline.h"

namespace tensorcompute::server {

struct ServerOptions {
  // Address to listen on, "host:port". Port 0 picks a free port (Server::port() tells).
  std::string listen = "0.0.0.0:50051";

  // Where gathers run: "auto" (default) uses the GPUs when this build has CUDA and a device
  // is visible, else the CPU (with a log line saying why); "gpu" requires a GPU (Start fails
  // with UNAVAILABLE when none is visible, UNIMPLEMENTED in a build without CUDA); "cpu"
  // never touches CUDA. Anything else: INVALID_ARGUMENT. On a GPU, strings (and whatever
  // else the GPU does not serve) still run on the CPU executor, transparently.
  std::string device = "auto";

  // CUDA ordinals of the GPUs to use; empty (default) means every visible one. An ordinal
  // that does not exist makes Start fail (UNAVAILABLE) with device "gpu", and falls back to
  // the CPU with "auto".
  std::vector<int> gpus;

  // Streams per GPU, each running one batch at a time with its own staging buffers, so that
  // the copies and kernels of up to this many batches overlap. In [1, 64]; default 4.
  int gpu_streams = 4;

  // Pinned host staging per stream, in bytes: transfers larger than half of it are chunked.
  // In [kMinGpuStagingBytes, kMaxGpuStagingBytes] (64 KiB to 1 TiB); default 16 MiB.
  static constexpr int64_t kMinGpuStagingBytes = int64_t{64} << 10;
  static constexpr int64_t kMaxGpuStagingBytes = int64_t{1} << 40;
  int64_t gpu_staging_bytes = int64_t{16} << 20;

  // The longest wait for a GPU (a batch's copy or kernel, a table's upload) before the GPU is
  // taken out of service: its requests in flight and later ones are answered by the CPU, and
  // with device "gpu" health turns NOT_SERVING. At least 1 ms; default 10 s.
  absl::Duration gpu_timeout = absl::Seconds(10);

  // Threads of the CPU executor's pool; <= 0 means one per hardware thread.
  int cpu_threads = 0;

  // A request whose output is at most this many bytes, arriving with the queue empty and the
  // executor free, is computed on the thread that received it instead of being handed to the
  // pool (batching::CpuExecutorOptions::inline_task_bytes): the hand-offs cost more than such
  // a copy. Below the pool's split threshold (4 MiB) a gather runs on one thread either way;
  // 1 MiB bounds how long it holds the receiving thread. 0: never. Default 1 MiB
  // (docs/performance.md, "Inline compute up to 1 MiB", has the figures).
  int64_t inline_compute_bytes = int64_t{1} << 20;

  // Nice value of the CPU executor's threads (Linux setpriority on each thread, in [0, 19]):
  // compute yields the CPU to the threads that receive, refuse and answer RPCs (gRPC's, at
  // the process's own priority). Under overload the front end then always has the CPU to
  // answer UNAVAILABLE at once, and requests queue in the batcher (bounded by queue_capacity
  // and deadline admission) instead of unseen inside gRPC, where they would wait past their
  // deadlines. It costs nothing while the front end is idle. 0: same priority. Default 10.
  int compute_nice = 10;

  // Dynamic batching: most requests per batch, and how long the oldest queued request may
  // wait for a batch to fill while an executor slot is free (0: never wait).
  int64_t max_batch_size = 32;
  int64_t max_queue_delay_us = 0;

  // Most requests waiting in the queue; beyond it UNAVAILABLE ("server overloaded: N requests
  // queued; retry with backoff").
  int64_t queue_capacity = 1024;

  // Deadline admission: also refuse, with UNAVAILABLE ("server overloaded: N requests queued,
  // an expected wait of X, longer than the Y left before the deadline; retry with backoff"), a
  // request whose expected wait in the queue (requests queued × recent compute time per
  // request / batches in flight) is longer than the time left before its deadline: it would
  // only expire in the queue. Never refuses a request that finds the queue empty. Default on.
  bool deadline_admission = true;

  // The memory budget for work in flight (server/admission/byte_budget.h). A call's message is read
  // only with room for twice the largest message reserved (the received bytes and their parsed
  // copy); once read, the request holds what its message costs decoded (proto/decoded_cost.h,
  // counted before parsing) plus its output's bytes until its answer is sent. A message whose
  // decoded cost exceeds the whole budget is RESOURCE_EXHAUSTED, unparsed ("the request would
  // take N bytes once decoded (...), more than the whole max_inflight_bytes budget of B bytes
  // (--max_inflight_bytes); send less in one request"). A call is answered UNAVAILABLE at once, its
  // message unread, when accepted work leaves no such room ("server overloaded: M of the
  // max_inflight_bytes budget of B bytes are in use, and reading a request needs C bytes free
  // (twice max_message_bytes); retry with backoff"), and a read request whose output no longer fits
  // (others took the room meanwhile) is answered UNAVAILABLE ("server overloaded: this request
  // needs N bytes but M of the max_inflight_bytes budget of B are in use; retry with backoff")
  // before its output is allocated. Calls waiting for room to be read wait in arrival order, up to
  // queue_capacity of them, until their deadline. A request alone always runs when its decoded
  // message fits the budget (its output may exceed it). Default 1 GiB.
  int64_t max_inflight_bytes = int64_t{1} << 30;

  // The fair share of that budget (server/admission/client_shares.h): while other clients use
  // it, one client (server/admission/client_identity.h: its address; its token when tokens are
  // required; behind a trusted proxy, the address the proxy names) may hold at most this
  // fraction of max_inflight_bytes. Beyond it its new calls are answered UNAVAILABLE at once
  // ("server overloaded: this client (C) holds H bytes of the max_inflight_bytes budget of B,
  // and may hold S (--max_inflight_share) while other clients use it; retry with backoff"), and
  // so is a call whose output would take it past, while other clients' calls go on. A client's
  // only call, and a client alone (no other with a call in flight within the last second), may
  // use the whole budget. In (0, 1]; 1 turns it off. Default 0.25.
  double max_inflight_share = 0.25;

  // Proxies whose x-forwarded-for header is believed to name the client
  // (server/admission/client_identity.h): comma-separated addresses and CIDR blocks, e.g.
  // "127.0.0.1,::1" for an edge on the same host. Empty (default): no header is believed, and
  // every client is its connection's address.
  std::string trusted_proxies;

  // Largest request and response message in bytes (gRPC receive and send limits). A larger
  // request gets RESOURCE_EXHAUSTED from gRPC itself. Default 64 MiB.
  int64_t max_message_bytes = int64_t{64} << 20;

  // Largest output in bytes; a request whose output would be larger gets RESOURCE_EXHAUSTED
  // before anything is allocated. 0 (default) means as large as fits a response under
  // max_message_bytes (max_message_bytes - 64 KiB of headroom for framing).
  int64_t max_output_bytes = 0;

  // Highest rank accepted for params and indices; above it INVALID_ARGUMENT.
  int64_t max_rank = 32;

  // On SIGTERM/SIGINT: stop accepting (new requests get UNAVAILABLE), answer every accepted
  // request, and exit; requests still running after this long are cancelled.
  absl::Duration drain_timeout = absl::Seconds(30);

  // The start of a drain is a notice period: health is NOT_SERVING and new RPCs get
  // UNAVAILABLE, but connections stay open, for at least this long (within drain_timeout).
  // Clients that watch health (gRPC client-side health checking, which the bundled clients
  // turn on) stop sending here, and others retry elsewhere; only then are connections closed
  // (GOAWAY). Without it, calls already on the wire when the server closes would be cancelled
  // by gRPC (CANCELLED, which clients do not retry). Default 500 ms; 0: close at once.
  absl::Duration drain_notice = absl::Milliseconds(500);

  // Prometheus metrics (docs/deploy.md lists them) over HTTP at http://<this>/metrics,
  // "host:port"; port 0 picks a free port (Server::metrics_port() tells). Empty (the library's
  // default; the binary's --metrics_listen defaults to 0.0.0.0:9090): no endpoint. Start fails
  // with UNAVAILABLE when it cannot be bound.
  std::string metrics_listen;

  // gRPC's maximum connection age: a connection older than this (give or take 10%, so that
  // clients do not reconnect in step) is sent GOAWAY, and the client reconnects, through its
  // load balancer, possibly to another replica: what lets clients behind a Kubernetes ClusterIP
  // service spread onto pods added by a scale-up. RPCs in flight on it get the grace to finish
  // before the connection is closed. Zero (default): connections live for ever.
  absl::Duration max_connection_age = absl::ZeroDuration();
  absl::Duration max_connection_age_grace = absl::Seconds(30);

  // How the compute RPCs' answers (Gather, GatherNd, EmbeddingBag, ModelInfer) are compressed:
  // "none" (default), "gzip" or "deflate", as far as the client's grpc-accept-encoding allows:
  // a client that does not accept this one gets the other one if it accepts that, else plain
  // answers (proto::CompressionLevelFor). Health and the small metadata answers stay plain.
  // Compressed requests are accepted whatever this says, and max_message_bytes bounds them
  // decompressed. Compression costs CPU on both sides and pays only for compressible tables over
  // slow networks (docs/performance.md).
  std::string grpc_compression = "none";

  // How long an OK answer of the compute RPCs (Gather, GatherNd, EmbeddingBag, ModelInfer) may
  // take to be sent, from its Finish to gRPC's OnDone: base + its bytes / min_bytes_per_s
  // (server/admission/send_deadline.h); past it the call is cancelled (the client sees its
  // stream reset, CANCELLED) and its share of max_inflight_bytes freed, counted in
  // tensorcompute_answers_cancelled_unsent_total and logged once per client address. Without
  // it, an answer a client never takes (its HTTP/2 window never opened, the connection kept
  // alive by answered pings) holds its budget for as long as the connection lives. The
  // KServe HTTP front end takes the same rate with its http_write_timeout as base. Defaults
  // 10 s and 1 MiB/s (a 64 MiB answer, the largest by default, may take 74 s).
  SendLimit answer_send_limit;

  // --- gRPC transport settings for production (each protects against one kind of client) ---
  // Most concurrent calls on one connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS): one
  // connection cannot hold more calls than this at once; a client's further calls wait on its
  // side. Default 256 (gRPC's own: unlimited).
  int64_t max_concurrent_streams = 256;
  // HTTP/2 flow-control window of a call whose message the server has not started reading
  // (gRPC's stream lookahead, with BDP probing off): how much of a waiting call's message gRPC
  // buffers. Small keeps max_inflight_bytes a real memory bound, since calls waiting for room
  // hold only this much each; a call being read gets a window of its whole message. 0: gRPC's
  // automatic sizing (BDP probing), which lets every call push megabytes before it is read, so
  // memory is not bounded. Default 64 KiB.
  int64_t stream_window_bytes = int64_t{64} << 10;
  // Ping a connection that has been quiet this long, and close it if the ping is not answered
  // within keepalive_timeout: finds peers that vanished without closing (a pulled cable, a
  // node gone), whose connections would otherwise hold memory for ever. Defaults 60 s and 20 s
  // (gRPC's own: 2 hours).
  absl::Duration keepalive_time = absl::Seconds(60);
  absl::Duration keepalive_timeout = absl::Seconds(20);
  // Keepalive enforcement: a client that pings more often than this (with or without calls in
  // flight) gets GOAWAY "too_many_pings" after two strikes, so pings cannot be used to keep
  // the server busy. Default 10 s (gRPC's own: 5 minutes, which rejects the common 30 s
  // client keepalive).
  absl::Duration keepalive_min_client_interval = absl::Seconds(10);
  // Close connections that have had no call for this long (GOAWAY; clients reconnect when they
  // next call): bounds what idle clients hold. Zero (default): never.
  absl::Duration max_connection_idle = absl::ZeroDuration();
  // Close a connection that has not finished its handshake (TLS, and the client's HTTP/2
  // preface and SETTINGS) this long after it was accepted: connections that send nothing give
  // their descriptors back. Default 10 s (gRPC's own: 120 s).
  absl::Duration handshake_timeout = absl::Seconds(10);
  // File descriptors the gRPC listeners leave free for the rest of the server (tables' files,
  // the HTTP front end, TLS files re-read on SIGHUP, metrics scrapes): a connection that
  // arrives when fewer are free under the soft limit on open files is closed at once
  // (grpc_acceptor.h). Default 128.
  int64_t descriptor_reserve = 128;

  // How often freed memory is given back to the operating system (glibc malloc_trim; see
  // server/memory_trimmer.h): without it, RSS keeps each burst's high-water mark of gRPC's
  // buffers. Zero: never. Default 10 s.
  absl::Duration malloc_trim_interval = absl::Seconds(10);

  // At most this many error log lines per second; the rest are counted and summarised.
  int64_t error_log_per_second = 20;

  // --- Security (credentials.h, server/admission/token_auth.h, health_listener.h; docs/deploy.md
  // "TLS and tokens")
  // --- TLS: PEM files of the server's certificate chain and its (unencrypted) private key; both or
  // neither. Empty (default): plaintext. A client speaking plaintext to a TLS server, or TLS with a
  // CA that did not sign this certificate, fails the handshake: it sees UNAVAILABLE.
  std::string tls_cert;
  std::string tls_key;
  // mTLS: PEM file of the CA(s) that sign client certificates; needs tls_cert and tls_key.
  // Every client must then present a certificate signed by it (else the handshake fails).
  std::string tls_client_ca;
  // A second, plaintext listener, "host:port", that serves grpc.health.v1 only (no
  // TensorCompute: UNIMPLEMENTED; no reflection) and mirrors the main server's health: for
  // Kubernetes gRPC probes, which cannot speak TLS. Port 0 picks one (Server::health_port()).
  // Empty (default): none.
  std::string health_listen;
  // A file of accepted bearer tokens, one per line (blank lines and '#' comments ignored;
  // list the old and the new token while rotating). Every RPC except grpc.health.v1 then needs
  // the metadata "authorization: Bearer <token>"; without it, or with another token:
  // UNAUTHENTICATED. Server::ReloadAuthTokens() re-reads it (the binary: on SIGHUP). Reflection
  // is not served then (it cannot check tokens). Empty (default): no tokens needed.
  std::string auth_token_file;
  // A file of admin tokens (same format). With it, PutTensor and DeleteTensor need an admin
  // token: an ordinary one (auth_token_file) gets PERMISSION_DENIED, none or an unknown one
  // UNAUTHENTICATED; admin tokens are also accepted wherever an ordinary token is. Re-read with
  // the ordinary tokens (SIGHUP). Empty (default): admin RPCs need what other RPCs need.
  std::string admin_token_file;
  // Any of these files unreadable or malformed (or only one of tls_cert / tls_key): Start
  // fails with INVALID_ARGUMENT.

  // --- Resident tensors (PutTensor, params_name; core/tensor_registry.h) ---
  // Most bytes of resident tensors (their data; for strings, payload plus 32 bytes per element),
  // counting deleted or replaced versions still used by gathers in flight. An upload or preload
  // that would pass it gets RESOURCE_EXHAUSTED before anything is allocated. Default 8 GiB.
  int64_t max_resident_bytes = int64_t{8} << 30;
  // The row cache of each table on disk (--preload NAME=PATH.npy[:KIND]:disk, PutTensor with
  // tier DISK; core/disk_rows.h), in bytes of its rows, counted against max_resident_bytes with
  // its bookkeeping (26 to 36 bytes a row); at most the table's size. A cache of fewer than 8
  // rows is INVALID_ARGUMENT at load. Default 1 GiB.
  int64_t table_cache_bytes = int64_t{1} << 30;
  // The directory where PutTensor's tables on disk (tier DISK) keep their rows, in unnamed files
  // gone with their table or the server (server/native/disk_upload.h). Empty (default): such a
  // put is FAILED_PRECONDITION. Start fails (INVALID_ARGUMENT) if no file can be made there.
  std::string table_dir;
  // The most bytes those files may hold together (their tables' stored rows); a put past it is
  // RESOURCE_EXHAUSTED before anything is written, as is one the file system has no room for.
  // Default 64 GiB.
  int64_t max_table_dir_bytes = int64_t{64} << 30;
  // The memory share of uploads in progress (server/admission/upload_budget.h), apart from
  // max_inflight_bytes: each upload holds room for the message it reads and its parsed copy
  // (twice max_message_bytes, capped to this) until it ends, plus what a message costs decoded
  // beyond that; the tensor it builds is max_resident_bytes'. An upload without room is
  // UNAVAILABLE before any message is read ("server overloaded: U of the max_upload_bytes
  // budget of B bytes are held by uploads in progress, and an upload needs S (twice
  // max_message_bytes); retry with backoff"); a message whose decoded cost exceeds the whole
  // share is RESOURCE_EXHAUSTED, unparsed; one whose cost beyond the slot does not fit now is
  // UNAVAILABLE. An upload alone is always admitted. Default 1 GiB: 8 uploads at once with the
  // default max_message_bytes.
  int64_t max_upload_bytes = int64_t{1} << 30;
  // The longest an upload may wait for its next message; past it the upload is answered
  // DEADLINE_EXCEEDED and what it holds is dropped. Zero: no bound. Default 2 minutes (time for
  // a 64 MiB message at about 0.5 MB/s).
  absl::Duration upload_idle_timeout = absl::Minutes(2);
  // Tensors loaded at start-up, each "NAME=PATH.npy", on the default device; health turns
  // SERVING only once every one is loaded. A file that cannot be read or parsed fails Start
  // (INVALID_ARGUMENT naming it). The file is read whole, then converted: about twice its size
  // in memory while loading.
  std::vector<std::string> preload;
  // Keys of preloaded tables, each "NAME=KEYS.npy[:POLICY]" (server/preload.h): table NAME of
  // `preload` becomes a keyed table (core/keyed_rows.h).
  std::vector<std::string> preload_keys;

  // --- Sharded tables (core/shard_spec.h, server/compute/shard_router.h; docs/deploy.md "Sharded
  // tables") --- With shard_count > 1, every --preload is loaded as shard shard_index of
  // shard_count of its table: only that shard's rows are read from the file.
  int32_t shard_index = 0;
  int32_t shard_count = 1;
  // gRPC targets of a sharded table's shards, one per shard index (ParseShardPeers): a lookup
  // on a table of which this server holds a shard sends the rows it does not hold to them, and
  // an UpdateRows on it goes to every replica of every entry, this server's own included
  // (server/compute/shard_updater.h: its own entry must list it). Empty (default): lookups and
  // updates of other shards' rows are FAILED_PRECONDITION. With
  // shard_count > 1, one target per shard (else Start fails, INVALID_ARGUMENT).
  std::string shard_peers;
  // --- Credentials of the sub-calls to shard_peers (docs/deploy.md "TLS and tokens"); each
  // needs shard_peers (else INVALID_ARGUMENT) ---
  // A token file (auth_token_file's format): its first token is sent on every sub-call as
  // "authorization: Bearer <token>", so it can be the peers' own auth_token_file (rotate by
  // adding the new token second everywhere, then moving it first). Re-read with the other token
  // files (Server::ReloadAuthTokens, SIGHUP). Empty (default): sub-calls carry no token, and a
  // peer with auth_token_file refuses them (UNAVAILABLE naming the shard).
  std::string shard_peer_token_file;
  // TLS to the peers, verified against shard_peer_tls_ca (empty: the system's roots). When this
  // server has tls_cert and tls_key, it presents them as its client certificate, for peers
  // with tls_client_ca (mTLS): that certificate then needs the clientAuth extended key usage
  // too (or none). Default off: plaintext.
  bool shard_peer_tls = false;
  std::string shard_peer_tls_ca;
  // The name verified against the peers' certificates instead of each target's host (gRPC's
  // ssl_target_name_override): for peers addressed by IP, or sharing one certificate. Needs
  // shard_peer_tls, as does shard_peer_tls_ca. Empty (default): the target's host.
  std::string shard_peer_tls_server_name;

  // OK, or INVALID_ARGUMENT naming the options out of range (what Server::Start checks first).
  absl::Status Validate() const;

  // The output cap that applies, after resolving max_output_bytes = 0.
  int64_t EffectiveMaxOutputBytes() const {
    const int64_t fits = max_message_bytes - (int64_t{64} << 10);
    return max_output_bytes > 0 && max_output_bytes < fits ? max_output_bytes : fits;
  }
};

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_SERVER_OPTIONS_H_
