// File: server/kserve/http_reply.h
//
// One HTTP response of the KServe v2 REST front end, as the endpoints (http_endpoints.h) and
// the infer call (http_infer_call.h) produce it and a session (http_session.h) writes it:
// status line, Content-Type, Content-Length, other fields (Server-Timing), the JSON body and, for
// binary output, the outputs' bytes after it, viewed where they lie (no copy).
//
// Thread-safety: a plain value; the storage `binary` views must outlive the write.

#ifndef TENSORCOMPUTE_SERVER_KSERVE_HTTP_REPLY_H_
#define TENSORCOMPUTE_SERVER_KSERVE_HTTP_REPLY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tensorcompute::server::kserve {

inline constexpr char kJsonType[] = "application/json";
// Triton's binary data extension: the JSON part's length, request and response header.
inline constexpr char kHeaderLengthField[] = "Inference-Header-Content-Length";

struct HttpReply {
  int status = 200;
  std::string content_type = kJsonType;
  std::string body;
  // Inference-Header-Content-Length, sent when set (binary output).
  std::optional<int64_t> header_length;
  // Bytes sent after `body`, in order, from storage the producer keeps until written.
  std::vector<absl::string_view> binary;
  // Close the connection after this response (the request's body was not read, or a limit).
  bool close = false;
  // More header fields (name, value), e.g. Server-Timing: values free of CR and LF.
  std::vector<std::pair<std::string, std::string>> headers;
};

// {"error": `message`} with `status`.
HttpReply ErrorReply(int status, absl::string_view message);
// `status` (not OK) as {"error": "<its message>"} with proto::HttpStatusOf(status.code()).
HttpReply StatusReply(const absl::Status& status);

}  // namespace tensorcompute::server::kserve

#endif  // TENSORCOMPUTE_SERVER_KSERVE_HTTP_REPLY_H_
