// ParseHttpInferRequest (json_request.h): the body split into its JSON and its binary data, and the
// JSON decoded by a JsonRequestParser (json_request_parser.h).
//
// Why events and not a document: a document costs many times its text (4.5 GB for a 60 MiB body
// of '[', issue 22), and a request's tensors are its bulk: they are written once, where they go.

#include "server/kserve/json_request.h"

#include <cstdint>
#include <optional>

#include "absl/strings/str_cat.h"

#include "server/kserve/json_request_parser.h"

namespace tensorcompute::server::kserve {

absl::Status ParseHttpInferRequest(absl::string_view body, std::optional<int64_t> header_length,
                                   inference::ModelInferRequest* request,
                                   HttpInferOptions* options) {
  int64_t held_bytes = 0;
  return ParseHttpInferRequest(body, header_length, request, options, &held_bytes);
}

absl::Status ParseHttpInferRequest(absl::string_view body, std::optional<int64_t> header_length,
                                   inference::ModelInferRequest* request, HttpInferOptions* options,
                                   int64_t* held_bytes) {
  *held_bytes = 0;
  absl::string_view json_text = body;
  absl::string_view binary;
  if (header_length.has_value()) {
    if (*header_length < 0 || static_cast<uint64_t>(*header_length) > body.size()) {
      return absl::InvalidArgumentError(absl::StrCat("Inference-Header-Content-Length is ",
                                                     *header_length, " but the request body has ",
                                                     body.size(), " bytes"));
    }
    json_text = body.substr(0, static_cast<size_t>(*header_length));
    binary = body.substr(static_cast<size_t>(*header_length));
  }
  JsonRequestParser parser(json_text, binary, request, options);
  absl::Status status = parser.Parse();
  *held_bytes = parser.HeldBytes();
  return status;
}

}  // namespace tensorcompute::server::kserve
