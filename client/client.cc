#include "client/client.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <type_traits>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "tensorcompute/v1/tensorcompute.grpc.pb.h"

#include "client/keyed_requests.h"
#include "client/put_upload.h"
#include "client/update_chunker.h"
#include "core/status_macros.h"
#include "proto/grpc_status.h"
#include "proto/service_config.h"
#include "proto/tensor_codec.h"

namespace tensorcompute::client {
namespace {

// The delay before retry `n` (1, 2, ...), with jitter in [0.5, 1].
absl::Duration Backoff(const RetryOptions& retry, int n) {
  absl::Duration backoff = retry.initial_backoff;
  // Stops multiplying once the cap is reached, so a large `n` costs no more iterations.
  for (int i = 1; i < n && backoff < retry.max_backoff; ++i) backoff *= retry.backoff_multiplier;
  backoff = std::min(backoff, retry.max_backoff);
  // A Client is shared across threads and a BitGen is not thread-safe: one per thread, no lock.
  thread_local absl::BitGen gen;
  return backoff * absl::Uniform(gen, 0.5, 1.0);
}

TensorInfo FromProtoInfo(const v1::TensorInfo& info) {
  TensorInfo out;
  out.name = info.name();
  out.dtype = proto::FromProtoDataType(info.dtype());
  out.shape.assign(info.shape().begin(), info.shape().end());
  out.bytes = info.bytes();
  out.device = info.device();
  out.version = info.version();
  out.sequence = info.sequence();
  out.storage = static_cast<core::TableStorage>(info.storage());
  if (info.has_shard()) {
    out.shard = core::ShardSpec{info.shard().index(), info.shard().count(),
                                info.shard().total_rows(), info.shard().by_key()};
  }
  if (info.has_keyed()) out.keyed = FromProtoKeyedInfo(info.keyed());
  out.tier = static_cast<TableTier>(info.tier());
  if (info.has_disk()) {
    out.disk = DiskInfo{info.disk().file(), info.disk().file_bytes(), info.disk().cache_rows(),
                        info.disk().cached_rows()};
  }
  out.created =
      absl::FromUnixSeconds(info.created().seconds()) + absl::Nanoseconds(info.created().nanos());
  return out;
}

absl::StatusOr<std::string> ReadPem(const char* option, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  if (!in || in.bad()) {
    return absl::InvalidArgumentError(absl::StrCat(option, " ", path, ": cannot read the file"));
  }
  return text.str();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsOptions& tls) {
  if (!tls.enabled) {
    if (!tls.ca_file.empty() || !tls.cert_file.empty() || !tls.key_file.empty()) {
      return absl::InvalidArgumentError("tls: CA, certificate or key files need tls enabled");
    }
    return grpc::InsecureChannelCredentials();
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "tls: a client certificate (mTLS) needs both cert_file and key_file");
  }
  grpc::SslCredentialsOptions ssl;
  if (!tls.ca_file.empty()) {
    TC_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPem("tls ca_file", tls.ca_file));
  }
  if (!tls.cert_file.empty()) {
    TC_ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadPem("tls cert_file", tls.cert_file));
    TC_ASSIGN_OR_RETURN(ssl.pem_private_key, ReadPem("tls key_file", tls.key_file));
  }
  return grpc::SslCredentials(ssl);
}

absl::StatusOr<std::vector<std::string>> SplitTargets(absl::string_view target) {
  target = absl::StripAsciiWhitespace(target);
  for (absl::string_view scheme : {"dns:", "ipv4:", "ipv6:", "unix:", "unix-abstract:", "vsock:"}) {
    if (absl::StartsWith(target, scheme)) return std::vector<std::string>{std::string(target)};
  }
  std::vector<std::string> targets;
  for (absl::string_view part : absl::StrSplit(target, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (!part.empty()) targets.emplace_back(part);
  }
  if (targets.empty()) {
    return absl::InvalidArgumentError(
        "target is empty; expected host:port, host:port,host:port or a gRPC URI such as "
        "dns:///name:port");
  }
  return targets;
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target, int64_t max_message_bytes,
                                           int index, bool health_checking,
                                           std::shared_ptr<grpc::ChannelCredentials> credentials,
                                           const std::string& server_name,
                                           grpc_compression_algorithm compression) {
  grpc::ChannelArguments args;
  // gRPC's message-size arguments are ints: a larger limit is capped, not wrapped.
  const int limit = static_cast<int>(std::min<int64_t>(max_message_bytes, INT32_MAX));
  args.SetMaxReceiveMessageSize(limit);
  args.SetMaxSendMessageSize(limit);
  args.SetServiceConfigJSON(proto::ServiceConfigJson(health_checking));
  // Channels with equal arguments share connections (the global subchannel pool); a distinct
  // argument per index keeps each of them on its own.
  args.SetInt("tensorcompute.client_channel", index);
  if (!server_name.empty()) args.SetSslTargetNameOverride(server_name);
  if (compression != GRPC_COMPRESS_NONE) args.SetCompressionAlgorithm(compression);
  if (credentials == nullptr) credentials = grpc::InsecureChannelCredentials();
  return grpc::CreateCustomChannel(target, credentials, args);
}

absl::StatusOr<std::unique_ptr<Client>> Client::Create(ClientOptions options) {
  TC_ASSIGN_OR_RETURN(std::vector<std::string> targets, SplitTargets(options.target));
  if (options.max_message_bytes <= 0) {
    return absl::InvalidArgumentError("max_message_bytes must be > 0");
  }
  if (options.connections_per_target < 1) {
    return absl::InvalidArgumentError("connections_per_target must be >= 1");
  }
  if (options.retry.max_attempts < 1 || options.retry.backoff_multiplier < 1 ||
      options.retry.initial_backoff < absl::ZeroDuration() ||
      options.retry.max_backoff < options.retry.initial_backoff) {
    return absl::InvalidArgumentError(
        "retry: expected max_attempts >= 1, backoff_multiplier >= 1 and "
        "0 <= initial_backoff <= max_backoff");
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("timeout must be > 0 (or infinite)");
  }
  TC_RETURN_IF_ERROR(proto::CheckCompression(options.compression));
  // A token is sent as a metadata (HTTP/2 header) value, which may not hold CR or LF: refused
  // here, before any call.
  if (options.auth_token.find_first_of("\r\n") != std::string::npos ||
      options.admin_token.find_first_of("\r\n") != std::string::npos) {
    return absl::InvalidArgumentError("auth_token and admin_token must be one line each");
  }
  TC_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                      MakeChannelCredentials(options.tls));
  // Process-wide, not per Client: the subchannel pool is global, so two Clients of the same
  // target would otherwise share connections (see MakeChannel).
  static std::atomic<int> next_index{0};
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (const std::string& target : targets) {
    for (int i = 0; i < options.connections_per_target; ++i) {
      channels.push_back(MakeChannel(target, options.max_message_bytes, next_index++,
                                     /*health_checking=*/true, credentials, options.tls.server_name,
                                     options.compression));
    }
  }
  return std::unique_ptr<Client>(new Client(std::move(options), std::move(targets),
                                            std::move(channels), std::move(credentials)));
}

Client::Client(ClientOptions options, std::vector<std::string> targets,
               std::vector<std::shared_ptr<grpc::Channel>> channels,
               std::shared_ptr<grpc::ChannelCredentials> credentials)
    : options_(std::move(options)),
      targets_(std::move(targets)),
      channels_(std::move(channels)),
      credentials_(std::move(credentials)) {
  for (const auto& channel : channels_) stubs_.push_back(v1::TensorCompute::NewStub(channel));
}

void Client::Authorize(grpc::ClientContext* context, bool admin) const {
  const std::string& token =
      admin && !options_.admin_token.empty() ? options_.admin_token : options_.auth_token;
  if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
}

template <typename Attempt>
grpc::Status Client::WithRetries(int target, bool admin, const CallOptions& call,
                                 Attempt&& attempt) {
  const absl::Duration timeout = call.timeout.value_or(options_.timeout);
  // One deadline for the call, fixed before the first attempt: retries share it, they do not
  // each get a fresh timeout. (Now() + InfiniteDuration() is InfiniteFuture().)
  const absl::Time deadline = absl::Now() + timeout;
  const uint64_t per_target = static_cast<uint64_t>(options_.connections_per_target);
  grpc::Status status;
  for (int n = 1;; ++n) {
    const uint64_t next = next_channel_.fetch_add(1);
    // channels_ is grouped by target (Create), so target t's channels are
    // [t * per_target, (t + 1) * per_target).
    const size_t channel = target < 0
                               ? next % channels_.size()
                               : static_cast<size_t>(target) * per_target + next % per_target;
    // A fresh context per attempt: gRPC forbids reusing a ClientContext for a second call.
    grpc::ClientContext context;
    if (deadline != absl::InfiniteFuture()) context.set_deadline(absl::ToChronoTime(deadline));
    Authorize(&context, admin);
    status = attempt(channel, &context);
    if (status.ok() || status.error_code() != grpc::StatusCode::UNAVAILABLE ||
        n >= options_.retry.max_attempts) {
      return status;
    }
    const absl::Duration wait = Backoff(options_.retry, n);
    // A retry that could not start before the deadline is not waited for: the caller gets the
    // server's UNAVAILABLE now rather than DEADLINE_EXCEEDED later.
    if (absl::Now() + wait >= deadline) return status;
    absl::SleepFor(wait);
  }
}

template <typename Request, typename Response>
absl::Status Client::Send(Request& request, const CallOptions& call, Response* response) {
  request.set_min_sequence(call.min_sequence);
  const grpc::Status status = WithRetries(
      /*target=*/-1, /*admin=*/false, call, [&](size_t channel, grpc::ClientContext* context) {
        if constexpr (std::is_same_v<Request, v1::GatherNdRequest>) {
          return stubs_[channel]->GatherNd(context, request, response);
        } else if constexpr (std::is_same_v<Request, v1::EmbeddingBagRequest>) {
          return stubs_[channel]->EmbeddingBag(context, request, response);
        } else {
          return stubs_[channel]->Gather(context, request, response);
        }
      });
  return proto::FromGrpcStatus(status);
}

template <typename Request, typename Response>
absl::StatusOr<core::Tensor> Client::Call(Request& request, const CallOptions& call) {
  Response response;
  TC_RETURN_IF_ERROR((Send<Request, Response>(request, call, &response)));
  // The output is copied out of the response, which dies here; the answer is still checked
  // (dtype, shape against bytes), but its rank is not limited.
  return proto::FromProto(response.output(), "output", INT64_MAX);
}

absl::StatusOr<core::Tensor> Client::Gather(const core::TensorView& params,
                                            const core::TensorView& indices,
                                            std::optional<int64_t> axis, int64_t batch_dims,
                                            const CallOptions& call) {
  v1::GatherRequest request;
  proto::ToProto(params, request.mutable_params());
  proto::ToProto(indices, request.mutable_indices());
  if (axis.has_value()) request.set_axis(*axis);
  request.set_batch_dims(batch_dims);
  return Call<v1::GatherRequest, v1::GatherResponse>(request, call);
}

absl::StatusOr<core::Tensor> Client::GatherNd(const core::TensorView& params,
                                              const core::TensorView& indices, int64_t batch_dims,
                                              const CallOptions& call) {
  v1::GatherNdRequest request;
  proto::ToProto(params, request.mutable_params());
  proto::ToProto(indices, request.mutable_indices());
  request.set_batch_dims(batch_dims);
  return Call<v1::GatherNdRequest, v1::GatherNdResponse>(request, call);
}

absl::StatusOr<core::Tensor> Client::GatherByName(const std::string& params_name,
                                                  const core::TensorView& indices,
                                                  std::optional<int64_t> axis, int64_t batch_dims,
                                                  const CallOptions& call) {
  v1::GatherRequest request;
  request.set_params_name(params_name);
  proto::ToProto(indices, request.mutable_indices());
  if (axis.has_value()) request.set_axis(*axis);
  request.set_batch_dims(batch_dims);
  return Call<v1::GatherRequest, v1::GatherResponse>(request, call);
}

absl::StatusOr<core::Tensor> Client::GatherNdByName(const std::string& params_name,
                                                    const core::TensorView& indices,
                                                    int64_t batch_dims, const CallOptions& call) {
  v1::GatherNdRequest request;
  request.set_params_name(params_name);
  proto::ToProto(indices, request.mutable_indices());
  request.set_batch_dims(batch_dims);
  return Call<v1::GatherNdRequest, v1::GatherNdResponse>(request, call);
}

namespace {

// The request's fields other than params and indices (or keys), from `args`.
v1::EmbeddingBagRequest EmbeddingBagProto(const EmbeddingBagArgs& args) {
  v1::EmbeddingBagRequest request;
  if (args.offsets != nullptr) proto::ToProto(*args.offsets, request.mutable_offsets());
  if (args.per_sample_weights != nullptr) {
    proto::ToProto(*args.per_sample_weights, request.mutable_per_sample_weights());
  }
  request.set_mode(static_cast<v1::EmbeddingBagRequest::Mode>(args.mode));
  request.set_include_last_offset(args.include_last_offset);
  if (args.padding_idx.has_value()) request.set_padding_idx(*args.padding_idx);
  return request;
}

}  // namespace

absl::StatusOr<core::Tensor> Client::EmbeddingBag(const core::TensorView& params,
                                                  const core::TensorView& indices,
                                                  const EmbeddingBagArgs& args,
                                                  const CallOptions& call) {
  v1::EmbeddingBagRequest request = EmbeddingBagProto(args);
  proto::ToProto(indices, request.mutable_indices());
  proto::ToProto(params, request.mutable_params());
  return Call<v1::EmbeddingBagRequest, v1::EmbeddingBagResponse>(request, call);
}

absl::StatusOr<core::Tensor> Client::EmbeddingBagByName(const std::string& params_name,
                                                        const core::TensorView& indices,
                                                        const EmbeddingBagArgs& args,
                                                        const CallOptions& call) {
  v1::EmbeddingBagRequest request = EmbeddingBagProto(args);
  proto::ToProto(indices, request.mutable_indices());
  request.set_params_name(params_name);
  return Call<v1::EmbeddingBagRequest, v1::EmbeddingBagResponse>(request, call);
}

absl::StatusOr<KeyedLookupResult> Client::GatherByKeys(const std::string& params_name,
                                                       const core::TensorView& keys,
                                                       const KeyedLookupOptions& keyed,
                                                       const CallOptions& call) {
  v1::GatherRequest request;
  request.set_params_name(params_name);
  SetKeys(keys, keyed, &request);
  v1::GatherResponse response;
  TC_RETURN_IF_ERROR((Send<v1::GatherRequest, v1::GatherResponse>(request, call, &response)));
  return ReadKeyedAnswer(response.output(), response.has_found(), response.found());
}

absl::StatusOr<KeyedLookupResult> Client::EmbeddingBagByKeys(const std::string& params_name,
                                                             const core::TensorView& keys,
                                                             const EmbeddingBagArgs& args,
                                                             const KeyedLookupOptions& keyed,
                                                             const CallOptions& call) {
  v1::EmbeddingBagRequest request = EmbeddingBagProto(args);
  request.set_params_name(params_name);
  SetKeys(keys, keyed, &request);
  v1::EmbeddingBagResponse response;
  TC_RETURN_IF_ERROR(
      (Send<v1::EmbeddingBagRequest, v1::EmbeddingBagResponse>(request, call, &response)));
  return ReadKeyedAnswer(response.output(), response.has_found(), response.found());
}

absl::StatusOr<std::string> Client::Health(int target_index, const std::string& service,
                                           const CallOptions& call) {
  if (target_index < 0 || target_index >= static_cast<int>(targets_.size())) {
    return absl::InvalidArgumentError("target_index out of range");
  }
  // Not the call channels: they watch health, so they would not call a server that is not
  // SERVING (UNAVAILABLE instead of the answer "NOT_SERVING"). Health checks are rare: a
  // channel of their own each time.
  const std::shared_ptr<grpc::Channel> channel = MakeChannel(
      targets_[target_index], options_.max_message_bytes, /*index=*/-1,
      /*health_checking=*/false, credentials_, options_.tls.server_name, options_.compression);
  grpc::ClientContext context;
  Authorize(&context);  // health needs none, but a proxy in front may
  const absl::Duration timeout = call.timeout.value_or(options_.timeout);
  if (timeout != absl::InfiniteDuration()) {
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  }
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status =
      grpc::health::v1::Health::NewStub(channel)->Check(&context, request, &response);
  if (!status.ok()) return proto::FromGrpcStatus(status);
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
}

// --- Resident tensors --------------------------------------------------------------------------

template <typename One>
absl::StatusOr<TensorInfo> Client::OnTargets(const char* what, const std::string& name,
                                             bool all_targets, One&& one) {
  const int n = all_targets ? static_cast<int>(targets_.size()) : 1;
  // One target: its status as it is, without the "failed on 1 of 1 targets" wrapping.
  if (n == 1) return one(0);
  std::optional<TensorInfo> first;
  absl::Status first_error;
  std::vector<std::string> failed, succeeded;
  for (int t = 0; t < n; ++t) {
    absl::StatusOr<TensorInfo> info = one(t);
    if (info.ok()) {
      if (!first.has_value()) first = *std::move(info);
      succeeded.push_back(targets_[t]);
      continue;
    }
    if (first_error.ok()) first_error = info.status();
    failed.push_back(absl::StrCat(targets_[t], ": ", absl::StatusCodeToString(info.status().code()),
                                  ": ", info.status().message()));
  }
  if (failed.empty()) return *std::move(first);
  return absl::Status(
      first_error.code(),
      absl::StrCat(what, " ", name, ": failed on ", failed.size(), " of ", n,
                   " targets: ", absl::StrJoin(failed, "; "), "; ",
                   succeeded.empty()
                       ? "succeeded on none"
                       : absl::StrCat("succeeded on: ", absl::StrJoin(succeeded, ", "))));
}

absl::StatusOr<TensorInfo> Client::PutTensor(const std::string& name,
                                             const core::TensorView& tensor,
                                             const PutOptions& options, const CallOptions& call) {
  if (options.chunk_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk_bytes must be > 0, got ", options.chunk_bytes));
  }
  TC_RETURN_IF_ERROR(core::ValidateTensor(tensor, "tensor", INT64_MAX));
  TC_RETURN_IF_ERROR(CheckPutKeys(options, tensor.shape));
  return OnTargets("put", name, options.all_targets, [&](int target) {
    return PutOne(
        target, [&](const PutChunkerOptions& chunks) { return PutChunker(name, tensor, chunks); },
        options, call);
  });
}

absl::StatusOr<TensorInfo> Client::PutTensor(const std::string& name, const TensorSource& source,
                                             const PutOptions& options, const CallOptions& call) {
  if (options.chunk_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk_bytes must be > 0, got ", options.chunk_bytes));
  }
  if (source.dtype == core::DataType::kString || source.dtype == core::DataType::kUnspecified ||
      !SourceBytes(source).has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a tensor source has a fixed-size dtype and a shape of at most 2^63 bytes; "
                     "got ",
                     core::DataTypeName(source.dtype), " ", core::ShapeToString(source.shape)));
  }
  TC_RETURN_IF_ERROR(CheckPutKeys(options, source.shape));
  return OnTargets("put", name, options.all_targets, [&](int target) {
    return PutOne(
        target, [&](const PutChunkerOptions& chunks) { return PutChunker(name, source, chunks); },
        options, call);
  });
}

absl::StatusOr<TensorInfo> Client::PutOne(
    int target, const std::function<PutChunker(const PutChunkerOptions&)>& make_chunker,
    const PutOptions& options, const CallOptions& call) {
  v1::PutTensorResponse response;
  absl::Status read_error;
  const grpc::Status status =
      WithRetries(target, /*admin=*/true, call, [&](size_t channel, grpc::ClientContext* context) {
        response.Clear();
        // A new chunker per attempt: a stream cannot be resumed, so a retried upload starts
        // again from the first message (and the tensor's first byte).
        PutChunker chunker = make_chunker({.device = options.device,
                                           .replace = options.replace,
                                           .chunk_bytes = options.chunk_bytes,
                                           .storage = options.storage,
                                           .shard = options.shard,
                                           .keyed = PutKeysOf(options),
                                           .tier = options.tier});
        const grpc::Status sent =
            UploadPut(channels_[channel], context, &chunker, options.on_progress, &response);
        // An incomplete tensor: the read's error is what the caller gets.
        read_error = chunker.status();
        return sent;
      });
  if (!read_error.ok()) return read_error;
  if (!status.ok()) return proto::FromGrpcStatus(status);
  return FromProtoInfo(response.tensor());
}

absl::StatusOr<UpdateRowsResult> Client::UpdateRows(const std::string& name,
                                                    const core::TensorView& indices,
                                                    const core::TensorView& values,
                                                    const UpdateOptions& options,
                                                    const CallOptions& call) {
  if (values.dtype == core::DataType::kString) {
    return absl::InvalidArgumentError(
        "values: string tables are not updated in place (replace them with PutTensor)");
  }
  TC_RETURN_IF_ERROR(core::ValidateTensor(values, "values", INT64_MAX));
  return UpdateRows(name, indices, SourceOf(values), options, call);
}

absl::StatusOr<UpdateRowsResult> Client::UpdateRows(const std::string& name,
                                                    const core::TensorView& indices,
                                                    const TensorSource& values,
                                                    const UpdateOptions& options,
                                                    const CallOptions& call) {
  if (options.chunk_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk_bytes must be > 0, got ", options.chunk_bytes));
  }
  TC_RETURN_IF_ERROR(CheckUpdateRows(indices, values, options.by_keys));
  const core::TensorView& doomed = options.delete_keys;
  const bool deletes = doomed.dtype != core::DataType::kUnspecified;
  if (deletes &&
      (!options.by_keys || doomed.dtype != core::DataType::kInt64 || doomed.rank() != 1 ||
       doomed.data.size() != static_cast<size_t>(doomed.shape[0]) * 8)) {
    return absl::InvalidArgumentError(
        absl::StrCat("delete_keys must be int64 of rank 1, with by_keys; got ",
                     core::DataTypeName(doomed.dtype), " ", core::ShapeToString(doomed.shape)));
  }
  const int64_t chunk_bytes =
      std::min(options.chunk_bytes,
               std::max<int64_t>(1, options_.max_message_bytes - kUpdateMessageOverhead));
  v1::UpdateRowsResponse response;
  absl::Status read_error;
  const grpc::Status status =
      WithRetries(0, /*admin=*/true, call, [&](size_t channel, grpc::ClientContext* context) {
        response.Clear();
        // A new chunker per attempt: a retried stream starts again from the first row.
        UpdateChunker chunker(name, indices, values, chunk_bytes, options.by_keys);
        std::unique_ptr<grpc::ClientWriter<v1::UpdateRowsRequest>> writer =
            stubs_[channel]->UpdateRows(context, &response);
        v1::UpdateRowsRequest message;
        // Deletes first, in messages of at most chunk_bytes of keys; then the rows (none when
        // a call by keys only deletes).
        const bool rows = !(options.by_keys && indices.shape[0] == 0 && deletes);
        bool open = true;
        for (int64_t first = 0; deletes && open && (first == 0 || first < doomed.shape[0]);) {
          const int64_t n =
              std::min(std::max<int64_t>(1, chunk_bytes / 8), doomed.shape[0] - first);
          message.Clear();
          if (first == 0) message.set_name(name);
          v1::Tensor* keys = message.mutable_delete_keys();
          keys->set_dtype(v1::DT_INT64);
          keys->add_shape(n);
          keys->mutable_data()->assign(
              reinterpret_cast<const char*>(doomed.data.data()) + first * 8,
              static_cast<size_t>(n) * 8);
          open = writer->Write(message);
          first += std::max<int64_t>(n, 1);
        }
        while (open && rows && chunker.Next(&message)) {
          // A failed write means the call is over (the server answered early, or the
          // connection broke): Finish says how.
          if (!writer->Write(message)) break;
          if (options.on_progress) options.on_progress(chunker.bytes_sent(), chunker.total_bytes());
        }
        read_error = chunker.status();
        if (!read_error.ok()) {
          context->TryCancel();  // the rows sent stay applied; the rest never leave
        } else {
          writer->WritesDone();
        }
        return writer->Finish();
      });
  if (!read_error.ok()) return read_error;
  if (!status.ok()) return proto::FromGrpcStatus(status);
  return UpdateRowsResult{response.sequence(), response.rows(), response.messages()};
}

absl::StatusOr<TensorInfo> Client::DeleteTensor(const std::string& name, bool all_targets,
                                                const CallOptions& call) {
  return OnTargets("delete", name, all_targets,
                   [&](int target) { return DeleteOne(target, name, call); });
}

absl::StatusOr<TensorInfo> Client::DeleteOne(int target, const std::string& name,
                                             const CallOptions& call) {
  v1::DeleteTensorRequest request;
  request.set_name(name);
  v1::DeleteTensorResponse response;
  const grpc::Status status =
      WithRetries(target, /*admin=*/true, call, [&](size_t channel, grpc::ClientContext* context) {
        return stubs_[channel]->DeleteTensor(context, request, &response);
      });
  if (!status.ok()) return proto::FromGrpcStatus(status);
  return FromProtoInfo(response.tensor());
}

absl::StatusOr<std::vector<TensorInfo>> Client::ListTensors(int target_index,
                                                            const CallOptions& call) {
  if (target_index < 0 || target_index >= static_cast<int>(targets_.size())) {
    return absl::InvalidArgumentError("target_index out of range");
  }
  v1::ListTensorsResponse response;
  const grpc::Status status = WithRetries(
      target_index, /*admin=*/false, call, [&](size_t channel, grpc::ClientContext* context) {
        return stubs_[channel]->ListTensors(context, v1::ListTensorsRequest(), &response);
      });
  if (!status.ok()) return proto::FromGrpcStatus(status);
  std::vector<TensorInfo> out;
  for (const v1::TensorInfo& info : response.tensors()) out.push_back(FromProtoInfo(info));
  return out;
}

}  // namespace tensorcompute::client
