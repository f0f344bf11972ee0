#include "server/kserve/http_request_checks.h"

#include <iterator>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include <boost/beast/http/field.hpp>

namespace tensorcompute::server::kserve {
namespace {

namespace http = boost::beast::http;

std::optional<absl::string_view> FieldOf(const http::request_header<>& header, http::field field) {
  const auto it = header.find(field);
  if (it == header.end()) return std::nullopt;
  return absl::string_view(it->value().data(), it->value().size());
}

}  // namespace

std::optional<HttpReply> CheckRequestHeader(const http::request_header<>& header,
                                            const Options& options) {
  const auto fields = std::distance(header.begin(), header.end());
  if (fields > options.http_max_header_fields) {
    return ErrorReply(431, absl::StrCat("the request has ", fields, " header fields; at most ",
                                        options.http_max_header_fields,
                                        " are accepted (http_max_header_fields)"));
  }
  const size_t lengths = header.count(http::field::content_length);
  const size_t encodings = header.count(http::field::transfer_encoding);
  if (lengths > 1) return ErrorReply(400, "the request has more than one Content-Length field");
  if (lengths > 0 && encodings > 0) {
    return ErrorReply(400, "the request has both Content-Length and Transfer-Encoding");
  }
  if (encodings > 1 ||
      (encodings == 1 && !absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(*FieldOf(
                                                     header, http::field::transfer_encoding)),
                                                 "chunked"))) {
    return ErrorReply(501, "Transfer-Encoding other than chunked is not supported");
  }
  if (std::optional<absl::string_view> coding = FieldOf(header, http::field::content_encoding);
      coding.has_value() &&
      !absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(*coding), "identity")) {
    return ErrorReply(415, absl::StrCat("Content-Encoding '", *coding,
                                        "' is not supported: send the body uncompressed"));
  }
  return std::nullopt;
}

}  // namespace tensorcompute::server::kserve
