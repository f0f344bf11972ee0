// http_request_fuzzer: bytes -> the KServe v2 HTTP/REST front end's request path without
// sockets, as server/kserve/http_session.cc walks it.
//
// The input is the raw stream a client sends on one connection (one request, or several
// pipelined). Each request is fed to a boost::beast::http::request_parser configured as the
// session configures it (header limit http_max_header_bytes, no body limit while the header is
// read), then checked by the session's own rule (CheckRequestHeader: field count, framing,
// encodings), routed (MatchRoute) and, for an infer POST, its Content-Length checked against
// the body limit, the body read under that limit, decoded (ParseHttpInferRequest, both
// overloads, with and without Inference-Header-Content-Length), planned (PrepareInfer with the
// server's default plan limits; max_output_bytes 4 MiB here, for speed), computed with core's
// CPU gather into the response (PrepareInferOutput, ExecuteGather, CompleteInferResponse) and
// written (WriteHttpInferResponse). The body limit is 6 KiB here rather than the server's
// 64 MiB, so that inputs of -max_len 8192 can pass it; the rule is the same.
//
// Besides tests/fuzz/fuzz_check.h's checks, it asserts:
//   - every refusal CheckRequestHeader, the route, the decode, the plan or the gather makes is
//     answered with a status of the documented set (docs/kserve.md: 400, 404, 413, 415, 429,
//     431, 501 on this path; never 500) and a message;
//   - the parser never accepted a body beyond the body limit;
//   - an OK decode's held_bytes bound is at least request.SpaceUsedLong(), and it has one
//     raw_input_contents per input holding shape x element size bytes per fixed-size input (for
//     JSON `data` at once; binary data as sent, so once PrepareInfer accepted it);
//   - both overloads of ParseHttpInferRequest give the same status;
//   - an OK response's JSON part is as long as its Inference-Header-Content-Length says, and
//     its raw output holds the plan's bytes.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "inference/grpc_predict_v2.pb.h"
#include <boost/asio/buffer.hpp>
#include <boost/beast/http.hpp>

#include "core/dtype.h"
#include "core/gather.h"
#include "core/gather_plan.h"
#include "core/shape.h"
#include "core/tensor.h"
#include "proto/kserve_wire.h"
#include "server/kserve/codec.h"
#include "server/kserve/http_reply.h"
#include "server/kserve/http_request_checks.h"
#include "server/kserve/http_route.h"
#include "server/kserve/json.h"
#include "server/kserve/json_request.h"
#include "server/kserve/kserve_front_end.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/infer_check.h"

namespace tensorcompute::fuzz {
namespace {

namespace http = boost::beast::http;
using server::kserve::HttpReply;

constexpr int64_t kMaxOutputBytes = int64_t{4} << 20;
constexpr int64_t kMaxBodyBytes = int64_t{6} << 10;
// Pipelined requests served per input: enough to cover "the next one", bounded for speed.
constexpr int kMaxRequests = 4;

core::PlanOptions ServerPlanOptions() {
  core::PlanOptions options;  // max_rank: the server's default, 32
  options.max_output_bytes = kMaxOutputBytes;
  return options;
}

// The statuses docs/kserve.md lists for what this path can refuse.
void CheckReply(const HttpReply& reply, const char* stage) {
  const int s = reply.status;
  if (Verbose()) std::fprintf(stderr, "%s: %d %s\n", stage, s, reply.body.c_str());
  Check(s == 400 || s == 404 || s == 413 || s == 415 || s == 429 || s == 431 || s == 501,
        absl::StrCat(stage, ": status ", s, " is not of the documented set: ", reply.body));
  Check(reply.body.size() > 12, absl::StrCat(stage, ": a refusal without a message"));
}

void CheckStatus(const absl::Status& status, const char* stage) {
  Check(!status.ok() && !status.message().empty(),
        absl::StrCat(stage, ": a refusal without a message"));
  CheckReply(server::kserve::StatusReply(status), stage);
}

std::optional<absl::string_view> FieldOf(const http::request_header<>& header,
                                         absl::string_view name) {
  const auto it = header.find(boost::beast::string_view(name.data(), name.size()));
  if (it == header.end()) return std::nullopt;
  return absl::string_view(it->value().data(), it->value().size());
}

// A decoded request's held-bytes bound, and its inputs: each fixed-size one holds exactly its
// shape's bytes. For JSON `data` the decoder makes it so; binary data (`binary`: the body had
// an Inference-Header-Content-Length) is passed through as sent, and PrepareInfer checks it.
void CheckDecoded(const inference::ModelInferRequest& request, std::optional<int64_t> held_bytes,
                  bool binary) {
  if (held_bytes.has_value()) {
    Check(*held_bytes >= static_cast<int64_t>(request.SpaceUsedLong()),
          absl::StrCat("held_bytes ", *held_bytes, " < the request's SpaceUsedLong ",
                       request.SpaceUsedLong()));
  }
  Check(request.raw_input_contents_size() == request.inputs_size(),
        "decode: one raw_input_contents per input");
  if (binary) return;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const auto& input = request.inputs(i);
    const std::optional<core::DataType> dtype = proto::KserveDatatypeOf(input.datatype());
    if (!dtype.has_value() || *dtype == core::DataType::kString) continue;
    core::Shape shape;
    for (int64_t d : input.shape()) shape.push_back(d);
    const std::optional<int64_t> n = core::CheckedNumElements(shape);
    if (!n.has_value()) continue;  // PrepareInfer's to refuse
    const int64_t want = *n * static_cast<int64_t>(core::ElementSize(*dtype));
    Check(static_cast<int64_t>(request.raw_input_contents(i).size()) == want,
          absl::StrCat("decode: input ", i, " holds ", request.raw_input_contents(i).size(),
                       " bytes; its shape wants ", want));
  }
}

// HttpInferCall::Submit and Answer, with core's CPU gather in place of the batcher.
void ServeInfer(const server::kserve::Route& route, absl::string_view body,
                std::optional<absl::string_view> header_field) {
  std::optional<int64_t> header_length;
  if (header_field.has_value()) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(*header_field, &n)) return;  // INVALID_ARGUMENT: 400
    header_length = n;
  }
  inference::ModelInferRequest request;
  server::kserve::HttpInferOptions options;
  int64_t held_bytes = -1;
  const absl::Status parsed =
      server::kserve::ParseHttpInferRequest(body, header_length, &request, &options, &held_bytes);
  Check(held_bytes >= 0, "decode: held_bytes not set");
  {
    inference::ModelInferRequest again;
    server::kserve::HttpInferOptions again_options;
    const absl::Status status =
        server::kserve::ParseHttpInferRequest(body, header_length, &again, &again_options);
    Check(status == parsed, "the two ParseHttpInferRequest overloads disagree: " +
                                status.ToString() + " vs " + parsed.ToString());
    if (header_length.has_value()) {  // the body taken as all JSON
      again.Clear();
      const absl::Status as_json =
          server::kserve::ParseHttpInferRequest(body, std::nullopt, &again, &again_options);
      if (!as_json.ok()) CheckStatus(as_json, "decode (no header length)");
    }
  }
  if (!parsed.ok()) return CheckStatus(parsed, "decode");
  CheckDecoded(request, held_bytes, header_length.has_value());
  request.set_model_name(route.model);
  request.set_model_version(route.version);

  server::kserve::InferJob job;
  const absl::Status prepared = server::kserve::PrepareInfer(
      request, nullptr, ServerPlanOptions(), BagOptionsOf(ServerPlanOptions()), &job);
  if (!prepared.ok()) return CheckStatus(prepared, "PrepareInfer");
  CheckDecoded(request, std::nullopt, /*binary=*/false);  // binary data too, once planned
  inference::ModelInferResponse response;
  const absl::Status executed = ExecuteAndCheckInfer(request, &job, &response);
  if (!executed.ok()) return CheckStatus(executed, "execute");
  Check(response.raw_output_contents_size() == 1, "response: one raw output");
  if (batching::OutputDataType(job.plan) != core::DataType::kString) {
    Check(static_cast<int64_t>(response.raw_output_contents(0).size()) ==
              batching::OutputBytes(job.plan),
          "response: raw output size != plan's output bytes");
  }
  const server::kserve::HttpBody written =
      server::kserve::WriteHttpInferResponse(response, options.binary_output);
  // As the session sends it: the JSON, then the output's bytes viewed in the response.
  const server::kserve::HttpBody viewed = server::kserve::WriteHttpInferResponse(
      response, options.binary_output, /*append_binary=*/false);
  std::string sent = viewed.body;
  for (absl::string_view part : viewed.binary) absl::StrAppend(&sent, part);
  Check(sent == written.body && viewed.header_length == written.header_length,
        "response: appended and viewed binary output differ");
  if (options.binary_output) {
    Check(
        written.header_length.has_value() &&
            *written.header_length + static_cast<int64_t>(response.raw_output_contents(0).size()) ==
                static_cast<int64_t>(written.body.size()),
        "response: JSON + binary output != body");
  } else {
    Check(!written.header_length.has_value(), "response: a header length without binary data");
  }
}

// Feeds `in` to `parser` until it stops: done, an error, or the input is used up (then the
// client's end of stream). Returns what it consumed.
size_t Feed(http::request_parser<http::string_body>& parser, absl::string_view in, bool header,
            boost::beast::error_code& ec) {
  size_t used = 0;
  while (!(header ? parser.is_header_done() : parser.is_done())) {
    if (used == in.size()) {
      parser.put_eof(ec);
      return used;
    }
    const size_t n = parser.put(boost::asio::buffer(in.data() + used, in.size() - used), ec);
    used += n;
    if (ec == http::error::need_more) {
      ec = {};
      if (n == 0) {  // what is left is not enough: no more bytes will come
        parser.put_eof(ec);
        return used;
      }
    } else if (ec) {
      return used;
    }
  }
  return used;
}

// One request from the front of `in`: answers it (or not) as the session would. Returns what
// it consumed, or nullopt when the connection closes after it.
std::optional<size_t> ServeOne(absl::string_view in) {
  server::kserve::Options options;  // the front end's default limits
  http::request_parser<http::string_body> parser;
  parser.header_limit(static_cast<uint32_t>(options.http_max_header_bytes));
  parser.body_limit(boost::none);
  boost::beast::error_code ec;
  size_t used = Feed(parser, in, /*header=*/true, ec);
  // 431 (header_limit), 400 (malformed) or the end of the stream: the connection ends.
  if (ec) return std::nullopt;
  const http::request_header<>& header = parser.get().base();
  const bool keep_alive = parser.get().keep_alive();
  if (std::optional<HttpReply> refused = server::kserve::CheckRequestHeader(header, options)) {
    CheckReply(*refused, "CheckRequestHeader");
    return std::nullopt;
  }
  const absl::string_view method(header.method_string().data(), header.method_string().size());
  const absl::string_view target(header.target().data(), header.target().size());
  const server::kserve::Route route = server::kserve::MatchRoute(method, target);
  if (route.endpoint == server::kserve::Endpoint::kNone) {
    CheckReply(server::kserve::ErrorReply(404, server::kserve::NoSuchEndpointError(method, target)),
               "route");
  }
  if (route.endpoint != server::kserve::Endpoint::kInfer) {
    // Answered without reading a body: a pending one closes the connection.
    return parser.is_done() && keep_alive ? std::optional<size_t>(used) : std::nullopt;
  }
  const boost::optional<uint64_t> length = parser.content_length();
  if (length.has_value() && *length > static_cast<uint64_t>(kMaxBodyBytes)) return std::nullopt;
  parser.body_limit(static_cast<uint64_t>(kMaxBodyBytes));
  used += Feed(parser, in.substr(used), /*header=*/false, ec);
  const std::string& body = parser.get().body();
  Check(static_cast<int64_t>(body.size()) <= kMaxBodyBytes,
        absl::StrCat("the parser accepted ", body.size(), " body bytes; the limit is ",
                     kMaxBodyBytes));
  if (ec) return std::nullopt;  // 413, 400, or the client went away before the end
  Check(parser.is_done(), "body read without error but not done");
  ServeInfer(route, body, FieldOf(parser.get(), server::kserve::kHeaderLengthField));
  return parser.get().keep_alive() ? std::optional<size_t>(used) : std::nullopt;
}

}  // namespace
}  // namespace tensorcompute::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view in(reinterpret_cast<const char*>(data), size);
  for (int i = 0; i < tensorcompute::fuzz::kMaxRequests && !in.empty(); ++i) {
    const std::optional<size_t> used = tensorcompute::fuzz::ServeOne(in);
    if (!used.has_value() || *used == 0) break;
    in.remove_prefix(*used);
  }
  return 0;
}
