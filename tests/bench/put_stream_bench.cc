// The ceiling of `tensorcompute put` (issue 28): a bare gRPC client stream of PutTensor
// messages to a running server, the same bytes in the same chunks as the CLI sends, with
// nothing else: no file, no tensor in memory, no per-chunk work but setting `offset`.
//
// It uploads a float32 tensor [--bytes / 1024, 256] named --name with replace=true, in messages
// of --chunk_bytes bytes of data (whole elements; 1 MiB, the CLI's --chunk-bytes default). As
// client/put_chunker.cc builds them, the first message carries the description (name, dtype,
// shape, device "" for the server's own, replace) and the first chunk; every message carries
// its `offset`. The messages (first, middle, last) are built once, from one chunk of float32
// values, before anything is timed; a repeat sets `offset` on them and writes them in order,
// then WritesDone and Finish. The channel (the CLI's message limits, --max_message_bytes) is
// connected before the first repeat, so a repeat's time runs from opening the stream to Finish
// returning, and Finish must return OK with the shape sent (else exit 1). With --delete_after
// (the default) the tensor is deleted after each repeat, untimed, so that the server holds one
// copy at a time.
//
// Run: build/tests/bench/put_stream_bench --target=127.0.0.1:PORT --bytes=1073741824
//        [--chunk_bytes=1048576 --name=put_stream_bench --repeats=3 --delete_after=true]
//      A line per repeat on stderr, then one JSON line on stdout (MB = 10^6 bytes):
//      {"bytes": B, "chunk_bytes": C, "messages": M, "seconds": [...], "mb_per_s": [...],
//       "median_seconds": S, "median_mb_per_s": R}
//      tools/bench/loading_bench.py runs it against the server that `tensorcompute put` just used.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "tensorcompute/v1/tensorcompute.grpc.pb.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "the server, host:port");
ABSL_FLAG(int64_t, bytes, int64_t{1} << 30,
          "tensor bytes to upload: a float32 [bytes / 1024, 256]; a multiple of 1024");
ABSL_FLAG(int64_t, chunk_bytes, int64_t{1} << 20,
          "tensor bytes per message (the CLI's --chunk-bytes default)");
ABSL_FLAG(std::string, name, "put_stream_bench", "the tensor's name");
ABSL_FLAG(int, repeats, 3, "uploads; the JSON line has each and their median");
ABSL_FLAG(bool, delete_after, true, "delete the tensor after each upload (untimed)");
ABSL_FLAG(int64_t, max_message_bytes, int64_t{64} << 20,
          "largest message sent or received (the CLI's default)");

namespace tensorcompute::bench {
namespace {

constexpr int64_t kRowFloats = 256;
constexpr int64_t kRowBytes = kRowFloats * 4;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// One upload of `total` bytes: `first` at offset 0, then `middle` at each chunk boundary, and
// `last` (the remainder) at the end. Returns the call's status; `response` holds the answer.
grpc::Status Upload(v1::TensorCompute::Stub& stub, int64_t total, int64_t chunk,
                    v1::PutTensorRequest& first, v1::PutTensorRequest& middle,
                    v1::PutTensorRequest& last, v1::PutTensorResponse* response) {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientWriter<v1::PutTensorRequest>> writer =
      stub.PutTensor(&context, response);
  bool writing = writer->Write(first);
  for (int64_t offset = chunk; writing && offset < total; offset += chunk) {
    v1::PutTensorRequest& message = offset + chunk < total ? middle : last;
    message.set_offset(offset);
    writing = writer->Write(message);
  }
  // A failed Write means the call is over (the server answered early): Finish says why.
  if (writing) writer->WritesDone();
  return writer->Finish();
}

int Main() {
  const int64_t total = absl::GetFlag(FLAGS_bytes);
  const std::string name = absl::GetFlag(FLAGS_name);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  if (total <= 0 || total % kRowBytes != 0 || absl::GetFlag(FLAGS_chunk_bytes) <= 0 ||
      repeats <= 0) {
    std::fprintf(stderr,
                 "error: --bytes must be a positive multiple of %lld, --chunk_bytes and "
                 "--repeats positive\n",
                 static_cast<long long>(kRowBytes));
    return 2;
  }
  // Whole float32 elements per message, as the CLI's PutChunker cuts them.
  const int64_t chunk = std::max<int64_t>(4, absl::GetFlag(FLAGS_chunk_bytes) / 4 * 4);
  const int64_t messages = (total + chunk - 1) / chunk;

  std::string data(static_cast<size_t>(std::min(chunk, total)), '\0');
  for (size_t i = 0; i + 4 <= data.size(); i += 4) {
    const float value = static_cast<float>(i / 4 % 4096) * 0.5f;
    std::memcpy(data.data() + i, &value, 4);
  }
  v1::PutTensorRequest first;
  first.set_name(name);
  first.set_dtype(v1::DT_FLOAT32);
  first.add_shape(total / kRowBytes);
  first.add_shape(kRowFloats);
  first.set_replace(true);
  first.set_offset(0);
  first.set_data(data);
  v1::PutTensorRequest middle;
  middle.set_data(data);
  v1::PutTensorRequest last;
  last.set_data(data.substr(0, static_cast<size_t>(total - (messages - 1) * chunk)));

  grpc::ChannelArguments args;
  const int limit =
      static_cast<int>(std::min<int64_t>(absl::GetFlag(FLAGS_max_message_bytes), INT32_MAX));
  args.SetMaxReceiveMessageSize(limit);
  args.SetMaxSendMessageSize(limit);
  const std::string target = absl::GetFlag(FLAGS_target);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  if (!channel->WaitForConnected(absl::ToChronoTime(absl::Now() + absl::Seconds(10)))) {
    std::fprintf(stderr, "error: cannot connect to %s\n", target.c_str());
    return 1;
  }
  std::unique_ptr<v1::TensorCompute::Stub> stub = v1::TensorCompute::NewStub(channel);

  std::vector<double> seconds;
  std::vector<double> mb_per_s;
  for (int r = 0; r < repeats; ++r) {
    v1::PutTensorResponse response;
    const absl::Time start = absl::Now();
    const grpc::Status status = Upload(*stub, total, chunk, first, middle, last, &response);
    const double s = absl::ToDoubleSeconds(absl::Now() - start);
    if (!status.ok()) {
      std::fprintf(stderr, "error: PutTensor %s: code %d: %s\n", name.c_str(),
                   static_cast<int>(status.error_code()), status.error_message().c_str());
      return 1;
    }
    const v1::TensorInfo& info = response.tensor();
    if (info.shape_size() != 2 || info.shape(0) != total / kRowBytes ||
        info.shape(1) != kRowFloats || info.dtype() != v1::DT_FLOAT32) {
      std::fprintf(stderr, "error: the server stored %s\n", info.ShortDebugString().c_str());
      return 1;
    }
    seconds.push_back(s);
    mb_per_s.push_back(static_cast<double>(total) / s / 1e6);
    std::fprintf(stderr, "repeat %d: %lld bytes in %lld messages: %.3f s, %.1f MB/s\n", r + 1,
                 static_cast<long long>(total), static_cast<long long>(messages), s,
                 mb_per_s.back());
    if (absl::GetFlag(FLAGS_delete_after)) {
      grpc::ClientContext context;
      v1::DeleteTensorRequest request;
      request.set_name(name);
      v1::DeleteTensorResponse deleted;
      if (grpc::Status d = stub->DeleteTensor(&context, request, &deleted); !d.ok()) {
        std::fprintf(stderr, "error: DeleteTensor %s: %s\n", name.c_str(),
                     d.error_message().c_str());
        return 1;
      }
    }
  }
  auto list = [](const std::vector<double>& v) {
    return absl::StrJoin(v, ", ",
                         [](std::string* out, double x) { absl::StrAppendFormat(out, "%.4f", x); });
  };
  std::printf(
      "{\"bytes\": %lld, \"chunk_bytes\": %lld, \"messages\": %lld, \"seconds\": [%s], "
      "\"mb_per_s\": [%s], \"median_seconds\": %.4f, \"median_mb_per_s\": %.4f}\n",
      static_cast<long long>(total), static_cast<long long>(chunk),
      static_cast<long long>(messages), list(seconds).c_str(), list(mb_per_s).c_str(),
      Median(seconds), Median(mb_per_s));
  return 0;
}

}  // namespace
}  // namespace tensorcompute::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tensorcompute::bench::Main();
}
