#include "proto/kserve_wire.h"

#include <vector>

#include "absl/strings/str_join.h"

namespace tensorcompute::proto {
namespace {

using core::DataType;

struct DatatypeName {
  DataType dtype;
  absl::string_view name;
};

// The order is the one KserveDatatypeNames() prints (and error messages quote).
constexpr DatatypeName kDatatypes[] = {
    {DataType::kBool, "BOOL"},     {DataType::kUint8, "UINT8"},   {DataType::kUint16, "UINT16"},
    {DataType::kUint32, "UINT32"}, {DataType::kUint64, "UINT64"}, {DataType::kInt8, "INT8"},
    {DataType::kInt16, "INT16"},   {DataType::kInt32, "INT32"},   {DataType::kInt64, "INT64"},
    {DataType::kFloat16, "FP16"},  {DataType::kBfloat16, "BF16"}, {DataType::kFloat32, "FP32"},
    {DataType::kFloat64, "FP64"},  {DataType::kString, "BYTES"},
};

}  // namespace

std::optional<absl::string_view> KserveDatatypeName(DataType dtype) {
  for (const DatatypeName& d : kDatatypes) {
    if (d.dtype == dtype) return d.name;
  }
  return std::nullopt;
}

std::optional<DataType> KserveDatatypeOf(absl::string_view name) {
  for (const DatatypeName& d : kDatatypes) {
    if (d.name == name) return d.dtype;
  }
  return std::nullopt;
}

std::string KserveDatatypeNames() {
  std::vector<absl::string_view> names;
  for (const DatatypeName& d : kDatatypes) names.push_back(d.name);
  return absl::StrJoin(names, ", ");
}

// Byte by byte rather than memcpy of a uint32_t: the wire is little-endian whatever the host.
void AppendKserveBytesElement(absl::string_view element, std::string* out) {
  const auto n = static_cast<uint32_t>(element.size());
  const char length[kKserveBytesLengthSize] = {static_cast<char>(n), static_cast<char>(n >> 8),
                                               static_cast<char>(n >> 16),
                                               static_cast<char>(n >> 24)};
  out->append(length, kKserveBytesLengthSize);
  out->append(element.data(), element.size());
}

uint32_t ReadKserveBytesLength(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

int HttpStatusOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

absl::StatusCode StatusCodeOfHttp(int http_status) {
  switch (http_status) {
    case 200:
      return absl::StatusCode::kOk;
    case 400:
      return absl::StatusCode::kInvalidArgument;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
      return absl::StatusCode::kNotFound;
    case 413:  // the front end's own answer to a body over its size limit
    case 429:
      return absl::StatusCode::kResourceExhausted;
    case 501:
      return absl::StatusCode::kUnimplemented;
    case 503:
      return absl::StatusCode::kUnavailable;
    case 504:
      return absl::StatusCode::kDeadlineExceeded;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace tensorcompute::proto
