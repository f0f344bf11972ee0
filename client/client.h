// File: client/client.h
//
// The C++ client of tensorcompute: Gather, GatherNd and EmbeddingBag on core tensors, over one
// or several server replicas, and the resident tensors (tables stored on the server once, then
// gathered from by name) that PutTensor, DeleteTensor and ListTensors manage and UpdateRows
// changes row by row while they are served.
//
//   ClientOptions options;
//   options.target = "10.0.0.7:50051,10.0.0.8:50051";   // or "dns:///tc.ns.svc:50051"
//   auto client = Client::Create(options);
//   absl::StatusOr<core::Tensor> out = (*client)->Gather(params.view(), indices.view(), 1);
//
// Keyed tables (issue 42): a table put with PutOptions::keys is looked up by its sparse int64
// keys as well as by position (GatherByKeys, EmbeddingBagByKeys), with a policy for the keys it
// lacks (core/keyed_rows.h; tensorcompute.proto, KeyedTable and MissingKeys).
//
// Targets. `target` is either one gRPC target URI (a name with a resolver scheme: "dns:",
// "ipv4:", "ipv6:", "unix:", e.g. "ipv4:10.0.0.7:50051,10.0.0.8:50051") or a comma-separated
// list of "host:port" targets. Each target gets its own channel(s); calls go round-robin over
// them, and every channel uses gRPC's round_robin load-balancing policy, so a DNS name that
// resolves to several addresses (a headless Kubernetes Service) spreads calls over all of them.
//
// Deadlines, limits, retries: every call has a deadline (ClientOptions::timeout, or the call's
// own); message limits both ways are max_message_bytes (match the server's
// --max_message_bytes). UNAVAILABLE (overloaded, draining, unreachable) is retried with
// exponential backoff and jitter when RetryOptions::max_attempts > 1 (off by default), each
// attempt on the next channel, all within the call's one deadline. Nothing else is retried.
//
// Resident tensors and replicas. Every server replica holds its own copy of a resident
// tensor; nothing is shared or copied between replicas. PutTensor and DeleteTensor with
// all_targets go to every target of the client in turn (one upload each); without it, to the
// first target only. A target that is one gRPC URI ("dns:///tc.ns.svc:50051") is one target:
// its calls reach whichever address the channel picks, so a table put through it lands on one
// replica. To serve a table from every replica of a Kubernetes Deployment, preload it on every
// pod from a volume (the server's `--preload NAME=PATH.npy`), or list the pods' addresses as
// targets and put with all_targets. A gather by name that reaches a replica without the table
// fails with NOT_FOUND.
//
// Compression: ClientOptions::compression (gzip or deflate) is every channel's default
// compression algorithm, so each message the client sends (the load tester's too, on
// channels()) is compressed; the server decompresses it and answers as it is configured.
//
// Errors are the server's status (code and message) verbatim, or gRPC's own (DEADLINE_EXCEEDED,
// UNAVAILABLE "failed to connect ..."), as absl::Status.
// Thread-safety: a Client is thread-safe; share one across threads.

#ifndef TENSORCOMPUTE_CLIENT_CLIENT_H_
#define TENSORCOMPUTE_CLIENT_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpc/compression.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/security/credentials.h"
#include "tensorcompute/v1/tensorcompute.grpc.pb.h"

#include "client/put_chunker.h"
#include "client/tensor_source.h"
#include "core/dtype.h"
#include "core/embedding_bag.h"
#include "core/keyed_rows.h"
#include "core/shape.h"
#include "core/shard_spec.h"
#include "core/table_storage.h"
#include "core/tensor.h"
#include "proto/grpc_compression.h"

namespace tensorcompute::client {

struct RetryOptions {
  // Attempts per call, the first included; 1 (default) means no retries.
  int max_attempts = 1;
  // Backoff before retry n (n = 1, 2, ...): min(initial_backoff * multiplier^(n-1),
  // max_backoff), scaled by a random factor in [0.5, 1] (jitter), and never past the deadline.
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(2);
  double backoff_multiplier = 2.0;
};

// Transport security (the server's --tls_cert / --tls_client_ca). PEM files, read by Create.
struct TlsOptions {
  bool enabled = false;  // TLS instead of plaintext; the fields below need it
  // CA certificate(s) to verify the server with; empty: the system's roots (gRPC's default).
  std::string ca_file;
  // mTLS: this client's certificate chain and private key; both or neither.
  std::string cert_file;
  std::string key_file;
  // The name checked against the server's certificate instead of the target's host (e.g. when
  // dialling an IP address that the certificate does not list). Empty: the target's host.
  std::string server_name;
};

struct ClientOptions {
  // See the file comment: one gRPC target URI or "host:port[,host:port...]".
  std::string target = "localhost:50051";
  // Deadline of each call, retries included; absl::InfiniteDuration() for none.
  absl::Duration timeout = absl::Seconds(30);
  // Largest message sent and received, in bytes; larger ones fail with RESOURCE_EXHAUSTED.
  int64_t max_message_bytes = int64_t{64} << 20;
  // HTTP/2 connections per target (each its own channel); more than one spreads a heavy load
  // over several connections.
  int connections_per_target = 1;
  RetryOptions retry;
  TlsOptions tls;
  // Sent on every call as "authorization: Bearer <auth_token>" (the server's
  // --auth_token_file); empty: none. Over plaintext it travels unencrypted: use TLS.
  std::string auth_token;
  // Sent instead of auth_token on PutTensor, DeleteTensor and UpdateRows, as "authorization: Bearer
  // <admin_token>" (the server's --admin_token_file); empty: those calls send auth_token.
  std::string admin_token;
  // How the messages sent are compressed: GRPC_COMPRESS_NONE (default), GRPC_COMPRESS_GZIP or
  // GRPC_COMPRESS_DEFLATE (ParseCompression reads the names); others are INVALID_ARGUMENT.
  // Worth it for compressible requests (inline params with repeats, zeros) on a slow link;
  // it costs client and server CPU on every call.
  grpc_compression_algorithm compression = GRPC_COMPRESS_NONE;
};

// Per-call overrides.
struct CallOptions {
  std::optional<absl::Duration> timeout;  // default: ClientOptions::timeout
  // Lookups (Gather, GatherNd, EmbeddingBag and their ByName forms) only: the least sequence
  // the resident table must have reached (GatherRequest.min_sequence), e.g. what UpdateRows
  // returned, to read one's own writes. A replica that is behind answers FAILED_PRECONDITION
  // naming both numbers. 0 (default): any. With inline params it must be 0 (the server says
  // INVALID_ARGUMENT).
  int64_t min_sequence = 0;
};

// The optional parts of an EmbeddingBag call (tensorcompute.proto, EmbeddingBagRequest).
struct EmbeddingBagArgs {
  core::EmbeddingBagMode mode = core::EmbeddingBagMode::kSum;
  // Where each bag starts in rank-1 indices; null for rank-2 indices [bags, n] (fixed bags).
  const core::TensorView* offsets = nullptr;
  // One weight per index (float32 or the params' dtype); null: every weight 1.
  const core::TensorView* per_sample_weights = nullptr;
  // offsets has one entry more than there are bags, the last being len(indices).
  bool include_last_offset = false;
  // A row to skip; unset: none.
  std::optional<int64_t> padding_idx;
};

// How PutTensor uploads a tensor.
struct PutOptions {
  // Where the server keeps it: "" (the server's --device), "cpu", "gpu" (GPU 0) or "gpu:N".
  // DT_STRING always lives on the CPU.
  std::string device;
  // Replace a resident tensor of the same name (gathers already holding the old version finish
  // on it). Without it an existing name is ALREADY_EXISTS.
  bool replace = false;
  // The most tensor bytes per message (whole elements; for strings, their wire size): 1 MiB
  // keeps every message far below gRPC's and the server's message limits (4 MiB and
  // --max_message_bytes), whatever the tensor's size. Must be > 0 (else INVALID_ARGUMENT).
  int64_t chunk_bytes = int64_t{1} << 20;
  // Upload to every target (each replica holds its own copy; see the file comment), one after
  // the other; false: to the first target only.
  bool all_targets = false;
  // How the server stores it (tensorcompute.proto, TableStorage): kFloat16 and kInt8Rowwise
  // take a float32 [rows, dim] tensor and convert it as it arrives; kInt8RowwisePrequantized
  // takes uint8 [rows, dim + 8] in FBGEMM's fused layout.
  core::TableStorage storage = core::TableStorage::kAsIs;
  // Where the server keeps its rows (tensorcompute.proto, TableTier): kDisk in a file under
  // its --table_dir, behind a row cache of --table_cache_bytes (FAILED_PRECONDITION from a
  // server without --table_dir).
  TableTier tier = TableTier::kMemory;
  // The tensor is this shard of a table sharded by row ranges (core/shard_spec.h): its rows
  // must be core::ShardRows(*shard). Unset: a whole tensor.
  std::optional<core::ShardSpec> shard = std::nullopt;
  // Called on the uploading thread after each message is sent, with how much of the tensor has
  // gone and all of it (bytes; elements for strings); from 0 again when an upload is retried
  // or goes to the next target. Unset: not called.
  std::function<void(int64_t sent, int64_t total)> on_progress;

  // A keyed table (tensorcompute.proto, KeyedTable): int64 [rows], row i's key keys[i], unique
  // (the server answers INVALID_ARGUMENT naming both positions of a duplicate). Streamed beside
  // the rows, within chunk_bytes (client/put_chunker.h). Viewed, not copied: it must outlive
  // the call. Unset: a table without keys, and then the three fields below must keep their
  // defaults (else INVALID_ARGUMENT, before any call).
  std::optional<core::TensorView> keys = std::nullopt;
  // What a lookup of a key the table lacks gives, unless the request says otherwise: kTable
  // (default) or kError is INVALID_ARGUMENT, kZero a row of zeros, kDefaultRow `default_row`.
  core::MissingKeys missing = core::MissingKeys::kTable;
  // The row kDefaultRow gives, in the dtype lookups return and the row shape (float32 [dim]
  // for float16 and int8-rowwise storage). Viewed, not copied. Unset: the table has none.
  std::optional<core::TensorView> default_row = std::nullopt;
  // The rows the table may hold, at least its rows (UpdateRows adds keys into the rest);
  // 0 (default): its rows.
  int64_t capacity = 0;
};

// How a lookup by keys treats the keys its table lacks (tensorcompute.proto, GatherRequest).
struct KeyedLookupOptions {
  // kTable (default): the table's policy; kError, kZero, kDefaultRow for this call alone;
  // kSkip (EmbeddingBagByKeys only) leaves the key out of its bag.
  core::MissingKeys missing = core::MissingKeys::kTable;
  // Also answer `found`, whether each key is in the table.
  bool return_found = false;
};

// What a lookup by keys answers.
struct KeyedLookupResult {
  core::Tensor output;
  // With KeyedLookupOptions::return_found: bool of the keys' shape, true where the key is in
  // the table. Unset otherwise.
  std::optional<core::Tensor> found;
};

// How UpdateRows sends rows.
struct UpdateOptions {
  // The most bytes of rows (values and indices) per message, in whole rows, at least one per
  // message: 1 MiB keeps every message far below gRPC's and the server's limits, whatever the
  // number of rows. Capped at the client's max_message_bytes less kUpdateMessageOverhead.
  // Must be > 0 (else INVALID_ARGUMENT).
  int64_t chunk_bytes = int64_t{1} << 20;
  // Called on the sending thread after each message is sent, with the bytes of values sent so
  // far and all of them; from 0 again when the stream is retried. Unset: not called.
  std::function<void(int64_t sent, int64_t total)> on_progress;
  // A keyed table (PutOptions::keys): UpdateRows' `indices` are the keys whose rows `values`
  // holds (int64, rank 1; UpdateRowsRequest.keys): a key the table holds gets its row
  // replaced, a new key a free slot (the server grows the table when none is left, within
  // --max_resident_bytes). false (default): row indices.
  bool by_keys = false;
  // With by_keys: keys to remove (int64, rank 1; UpdateRowsRequest.delete_keys), sent before
  // the rows so that their slots are free for new keys. Must outlive the call; unset: none.
  core::TensorView delete_keys;
};

// Room left in an UpdateRows message, beyond its rows, for the name and the tensors' headers.
inline constexpr int64_t kUpdateMessageOverhead = 4096;

// What UpdateRows answers (tensorcompute.proto, UpdateRowsResponse).
struct UpdateRowsResult {
  int64_t sequence = 0;  // the table's sequence once the last message was applied
  int64_t rows = 0;      // rows applied
  int64_t messages = 0;  // messages applied
};

// A keyed table's key index as the server describes it (tensorcompute.proto, KeyedInfo).
struct KeyedInfo {
  core::MissingKeys missing = core::MissingKeys::kError;  // the table's policy
  bool has_default_row = false;
  int64_t capacity = 0;  // its slots now: the capacity put, or what updates grew it to
  int64_t keys = 0;      // the keys it holds now
};

// A table on disk (tensorcompute.proto, DiskInfo).
struct DiskInfo {
  std::string file;         // the --preload file, or "TABLE_DIR/(unnamed)"
  int64_t file_bytes = 0;   // its rows' bytes in the file
  int64_t cache_rows = 0;   // the rows its cache may hold
  int64_t cached_rows = 0;  // ... and holds now
};

// A resident tensor as the server describes it (tensorcompute.proto, TensorInfo).
struct TensorInfo {
  std::string name;
  core::DataType dtype = core::DataType::kUnspecified;
  core::Shape shape;
  int64_t bytes = 0;    // what it counts against the server's --max_resident_bytes
  std::string device;   // "cpu" or "gpu:N"
  int64_t version = 0;  // 1 for a name's first tensor, one more per replacement
  absl::Time created;   // when this version became visible
  // How it is stored (core/table_storage.h); a compact table's dtype and shape are what
  // lookups return (float32 [rows, dim]) and `bytes` what it holds.
  core::TableStorage storage = core::TableStorage::kAsIs;
  // Set for one shard of a table: `shape` is then the whole table's.
  std::optional<core::ShardSpec> shard = std::nullopt;
  // The changes this server applied to the name's rows: UpdateRows messages and
  // replacements (tensorcompute.proto, TensorInfo.sequence).
  int64_t sequence = 0;
  // Set for a keyed table.
  std::optional<KeyedInfo> keyed = std::nullopt;
  // Where its rows are kept; a table on disk's `bytes` is its row cache's.
  TableTier tier = TableTier::kMemory;
  std::optional<DiskInfo> disk = std::nullopt;  // set for a table on disk
};

class Client {
 public:
  // Returns a client (channels connect lazily, on the first call), or INVALID_ARGUMENT for an
  // empty target or a bad option.
  static absl::StatusOr<std::unique_ptr<Client>> Create(ClientOptions options);

  // tf.gather(params, indices, axis, batch_dims); axis unset means batch_dims (TF's default).
  // Returns the output, or the error status of the call.
  absl::StatusOr<core::Tensor> Gather(const core::TensorView& params,
                                      const core::TensorView& indices,
                                      std::optional<int64_t> axis = std::nullopt,
                                      int64_t batch_dims = 0, const CallOptions& call = {});

  // tf.gather_nd(params, indices, batch_dims).
  absl::StatusOr<core::Tensor> GatherNd(const core::TensorView& params,
                                        const core::TensorView& indices, int64_t batch_dims = 0,
                                        const CallOptions& call = {});

  // Gather and GatherNd from the resident tensor `params_name` instead of inline params
  // (GatherRequest.params_name): only the indices travel. The answer is byte for byte the one
  // the inline call with the same params gets. NOT_FOUND when the replica that answers holds no
  // tensor of that name.
  absl::StatusOr<core::Tensor> GatherByName(const std::string& params_name,
                                            const core::TensorView& indices,
                                            std::optional<int64_t> axis = std::nullopt,
                                            int64_t batch_dims = 0, const CallOptions& call = {});
  absl::StatusOr<core::Tensor> GatherNdByName(const std::string& params_name,
                                              const core::TensorView& indices,
                                              int64_t batch_dims = 0, const CallOptions& call = {});

  // Pooled lookups (torch.nn.functional.embedding_bag, plus TensorFlow's "sqrtn"): one reduced
  // row per bag, [bags, dim] in the params' dtype; see tensorcompute.proto for every rule.
  // Returns the output or the call's error (INVALID_ARGUMENT naming the field and position).
  absl::StatusOr<core::Tensor> EmbeddingBag(const core::TensorView& params,
                                            const core::TensorView& indices,
                                            const EmbeddingBagArgs& args = {},
                                            const CallOptions& call = {});
  // The same from the resident tensor `params_name` (NOT_FOUND when it is not resident).
  absl::StatusOr<core::Tensor> EmbeddingBagByName(const std::string& params_name,
                                                  const core::TensorView& indices,
                                                  const EmbeddingBagArgs& args = {},
                                                  const CallOptions& call = {});

  // Gather (axis 0) and EmbeddingBag on the keyed resident table `params_name` by its keys:
  // `keys` is int64 of any shape Gather takes (EmbeddingBag: rank 1 with args.offsets, or
  // [bags, n]), in place of indices, and the output is byte for byte the one the same call by
  // the keys' rows would get. args.padding_idx must be unset (with keys, kSkip leaves missing
  // keys out). Returns the output (and the found mask when asked), or the call's error:
  //   INVALID_ARGUMENT  keys not int64, a missing key under kError ("keys[3] = 90210 is not a
  //                     key of table 'users'"), kDefaultRow on a table without a default row,
  //                     kSkip in a gather, a table without keys, padding_idx;
  //   NOT_FOUND         the replica that answers holds no tensor of that name.
  absl::StatusOr<KeyedLookupResult> GatherByKeys(const std::string& params_name,
                                                 const core::TensorView& keys,
                                                 const KeyedLookupOptions& keyed = {},
                                                 const CallOptions& call = {});
  absl::StatusOr<KeyedLookupResult> EmbeddingBagByKeys(const std::string& params_name,
                                                       const core::TensorView& keys,
                                                       const EmbeddingBagArgs& args = {},
                                                       const KeyedLookupOptions& keyed = {},
                                                       const CallOptions& call = {});

  // Uploads `tensor` as the resident tensor `name`, in chunks of options.chunk_bytes (so any
  // size that the server's --max_resident_bytes allows fits, whatever the message limits), to
  // the first target or, with options.all_targets, to every target. Sends admin_token when set.
  // The call's deadline covers each target's upload on its own.
  // Returns the stored tensor's description (the first target's), or:
  //   INVALID_ARGUMENT  chunk_bytes <= 0, a malformed `tensor`, keys that are not int64 [rows]
  //                     or keyed options without keys (CheckPutKeys; before any call), or
  //                     the server's: a bad name, a scalar, an unknown device, a duplicate
  //                     key, a default row of the wrong dtype or shape;
  //   ALREADY_EXISTS    the name is taken and options.replace is false;
  //   RESOURCE_EXHAUSTED over the server's --max_resident_bytes;
  //   PERMISSION_DENIED without the admin token the server requires; any call error.
  // With several targets and all_targets, the uploads go on after a failure; if any failed, the
  // status is the first failure's code with a message naming every target and its outcome
  // ("put emb: failed on 1 of 2 targets: 10.0.0.8:50051: ALREADY_EXISTS: ...; stored on:
  // 10.0.0.7:50051"). Copies already stored stay stored.
  absl::StatusOr<TensorInfo> PutTensor(const std::string& name, const core::TensorView& tensor,
                                       const PutOptions& options = {},
                                       const CallOptions& call = {});
  // The same, reading the tensor from `source` as it sends (client/tensor_source.h), so that
  // it never holds more than one chunk of it: a large file uploads in little memory. A read's
  // error ends the upload (the server discards what it got) and is returned as it is; it is
  // not retried. INVALID_ARGUMENT, before any call, for a string dtype, a negative dimension or
  // a shape whose bytes overflow.
  absl::StatusOr<TensorInfo> PutTensor(const std::string& name, const TensorSource& source,
                                       const PutOptions& options = {},
                                       const CallOptions& call = {});

  // Replaces rows of the resident table `name` on the first target while it is served: row
  // indices[i] becomes values[i] (tensorcompute.proto, UpdateRowsRequest). The rows are
  // streamed in messages of at most options.chunk_bytes (whole rows; client/update_chunker.h),
  // applied in order, each message atomically. `values` is in the table's dtype: float32
  // [n, dim] for a compact table (float16, int8-rowwise), uint8 [n, dim + 8] for an
  // int8-rowwise-prequantized one, else the table's own. Sends admin_token when set. Values
  // are absolute, so a stream retried on UNAVAILABLE (the retry policy) resends them harmlessly.
  // Returns the server's answer (a lookup with CallOptions::min_sequence = sequence reads
  // these rows), or:
  //   INVALID_ARGUMENT  chunk_bytes <= 0, indices not int32/int64 of rank 1, or values not one
  //                     row per index (CheckUpdateRows; before any call), or the server's: an
  //                     index out of range, a repeated index in one message, a wrong dtype or
  //                     row shape (that message and those after it change nothing);
  //   NOT_FOUND, FAILED_PRECONDITION (the table was deleted or replaced meanwhile),
  //   PERMISSION_DENIED, UNAVAILABLE, any call error. Messages applied before an error stay
  //   applied.
  absl::StatusOr<UpdateRowsResult> UpdateRows(const std::string& name,
                                              const core::TensorView& indices,
                                              const core::TensorView& values,
                                              const UpdateOptions& options = {},
                                              const CallOptions& call = {});
  // The same, reading the values from `source` as it sends (a large .npy file in little
  // memory). A read's error ends the stream (cancelled: the messages sent before it stay
  // applied) and is returned as it is; it is not retried.
  absl::StatusOr<UpdateRowsResult> UpdateRows(const std::string& name,
                                              const core::TensorView& indices,
                                              const TensorSource& values,
                                              const UpdateOptions& options = {},
                                              const CallOptions& call = {});

  // Deletes the resident tensor `name` from the first target or, with all_targets, from every
  // target (failures reported as PutTensor does). Sends admin_token when set. Returns the
  // deleted tensor's description (the first target's), or NOT_FOUND when there is none of that
  // name, PERMISSION_DENIED, or any call error.
  absl::StatusOr<TensorInfo> DeleteTensor(const std::string& name, bool all_targets = false,
                                          const CallOptions& call = {});

  // The resident tensors of target `target_index`, by name, or the call's error
  // (INVALID_ARGUMENT for a target_index out of range).
  absl::StatusOr<std::vector<TensorInfo>> ListTensors(int target_index = 0,
                                                      const CallOptions& call = {});

  // The grpc.health.v1 status ("SERVING", "NOT_SERVING", ...) of target `target_index` for
  // `service` ("" = the whole server), or the call's error.
  absl::StatusOr<std::string> Health(int target_index = 0, const std::string& service = "",
                                     const CallOptions& call = {});

  // The options it was made with.
  const ClientOptions& options() const { return options_; }
  // The targets that the option named, one per entry (see SplitTargets).
  const std::vector<std::string>& targets() const { return targets_; }
  // Every channel: connections_per_target per target, grouped by target.
  const std::vector<std::shared_ptr<grpc::Channel>>& channels() const { return channels_; }

  // --- implementation details below ---
 private:
  Client(ClientOptions options, std::vector<std::string> targets,
         std::vector<std::shared_ptr<grpc::Channel>> channels,
         std::shared_ptr<grpc::ChannelCredentials> credentials);
  // Adds the authorization metadata, when there is a token: admin_token (if set) for `admin`
  // calls, else auth_token.
  void Authorize(grpc::ClientContext* context, bool admin = false) const;

  // Runs `attempt(channel, context)` (an index into channels_ and stubs_) under the call's
  // deadline and the retry policy: UNAVAILABLE is retried with backoff while attempts and the
  // deadline last. Each attempt goes to the next channel (round-robin), or with `target` >= 0
  // to the next channel of that target.
  template <typename Attempt>
  grpc::Status WithRetries(int target, bool admin, const CallOptions& call, Attempt&& attempt);

  // Sends a lookup, its min_sequence set from `call`, and fills `*response`; the call's status.
  template <typename Request, typename Response>
  absl::Status Send(Request& request, const CallOptions& call, Response* response);
  // Send, then decodes the output.
  template <typename Request, typename Response>
  absl::StatusOr<core::Tensor> Call(Request& request, const CallOptions& call);

  // One upload / deletion on target `target`.
  // `make_chunker` makes each attempt's messages.
  absl::StatusOr<TensorInfo> PutOne(
      int target, const std::function<PutChunker(const PutChunkerOptions&)>& make_chunker,
      const PutOptions& options, const CallOptions& call);
  absl::StatusOr<TensorInfo> DeleteOne(int target, const std::string& name,
                                       const CallOptions& call);
  // Runs `one(target)` on the first target, or on every target when `all_targets`, and
  // combines the outcomes (see PutTensor).
  template <typename One>
  absl::StatusOr<TensorInfo> OnTargets(const char* what, const std::string& name, bool all_targets,
                                       One&& one);

  const ClientOptions options_;
  const std::vector<std::string> targets_;
  const std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;  // for Health's channels
  // One stub per channel, made once (a stub is only the channel and its methods).
  std::vector<std::unique_ptr<v1::TensorCompute::Stub>> stubs_;
  std::atomic<uint64_t> next_channel_{0};
};

// Splits ClientOptions::target: a target with a resolver scheme (dns:, ipv4:, ipv6:, unix:,
// unix-abstract:, vsock:) is one entry as it is; otherwise each comma-separated part is one
// entry (spaces trimmed, empty parts dropped). Returns INVALID_ARGUMENT when nothing is left.
absl::StatusOr<std::vector<std::string>> SplitTargets(absl::string_view target);

// "none", "gzip" or "deflate" as the algorithm ClientOptions::compression takes, or
// INVALID_ARGUMENT naming the three (proto/grpc_compression.h, shared with the server).
using proto::ParseCompression;

// Channel credentials for `tls`: insecure when it is not enabled, else SSL with its files
// read. INVALID_ARGUMENT naming the file when one cannot be read, or when only one of
// cert_file and key_file is set.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsOptions& tls);

// A channel to `target` with the client's message limits and the round_robin policy, which
// with `health_checking` (gRPC client-side health checking) skips servers whose health is not
// SERVING. Channels made with different `index` values never share a connection.
// `credentials` null means plaintext; `server_name` is TlsOptions::server_name; `compression`
// is the channel's default compression algorithm (ClientOptions::compression).
std::shared_ptr<grpc::Channel> MakeChannel(
    const std::string& target, int64_t max_message_bytes, int index, bool health_checking = true,
    std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr,
    const std::string& server_name = "",
    grpc_compression_algorithm compression = GRPC_COMPRESS_NONE);

}  // namespace tensorcompute::client

#endif  // TENSORCOMPUTE_CLIENT_CLIENT_H_
