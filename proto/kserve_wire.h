// File: proto/kserve_wire.h
//
// The Open Inference Protocol's (KServe v2) wire-level rules that both the server's KServe
// front ends (server/kserve_*) and the load tester (client/kserve_*_load_encoder.cc and
// load_tester.cc) must agree on, written once:
//   - the v2 datatype names and the core type each one means;
//   - the BYTES framing of raw contents: each element is a 4-byte little-endian length, then
//     its bytes (Triton's binary data extension);
//   - the map between status codes and HTTP statuses, both ways.
//
// Protocol:   https://kserve.github.io/website/latest/modelserving/data_plane/v2_protocol/
// BYTES form:
// https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_binary_data.md
//
// Nothing here knows gRPC, protobuf or HTTP libraries; absl::StatusCode numbers equal
// grpc::StatusCode's, so a gRPC caller may cast. Everything is a pure function; thread-safe.

#ifndef TENSORCOMPUTE_PROTO_KSERVE_WIRE_H_
#define TENSORCOMPUTE_PROTO_KSERVE_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

#include "core/dtype.h"

namespace tensorcompute::proto {

// --- Datatypes ----------------------------------------------------------------------------

// Returns the v2 datatype name of `dtype`: "BOOL", "UINT8".."UINT64", "INT8".."INT64", "FP16",
// "BF16", "FP32", "FP64", or "BYTES" for strings. Returns nullopt for kComplex64, kComplex128,
// kUnspecified and out-of-enum values, which v2 cannot name.
std::optional<absl::string_view> KserveDatatypeName(core::DataType dtype);

// Returns the core type of the v2 datatype `name` (exact, case-sensitive match), or nullopt
// for any other string.
std::optional<core::DataType> KserveDatatypeOf(absl::string_view name);

// Returns every accepted name, ", "-joined, in the table's order: "BOOL, UINT8, UINT16,
// UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, BF16, FP32, FP64, BYTES" (error messages
// quote it; tests elsewhere match it).
std::string KserveDatatypeNames();

// --- BYTES framing ------------------------------------------------------------------------

// Each BYTES element on the raw wire is this many bytes of little-endian length, then the
// element's bytes.
inline constexpr size_t kKserveBytesLengthSize = 4;

// Appends `element` in BYTES framing (its length, then its bytes) to `*out`.
// REQUIRES: element.size() <= UINT32_MAX; out != nullptr.
void AppendKserveBytesElement(absl::string_view element, std::string* out);

// Returns the length prefix stored at `p`.
// REQUIRES: p points to kKserveBytesLengthSize (4) readable bytes.
uint32_t ReadKserveBytesLength(const uint8_t* p);

// --- Status codes <-> HTTP ----------------------------------------------------------------

// Returns the HTTP status the server answers for `code`: OK 200; INVALID_ARGUMENT,
// OUT_OF_RANGE, FAILED_PRECONDITION 400; UNAUTHENTICATED 401; PERMISSION_DENIED 403;
// NOT_FOUND 404; RESOURCE_EXHAUSTED 429; UNIMPLEMENTED 501; UNAVAILABLE 503;
// DEADLINE_EXCEEDED 504; any other code 500.
int HttpStatusOf(absl::StatusCode code);

// The inverse, for clients: returns the code an HTTP status stands for: 200 OK;
// 400 INVALID_ARGUMENT; 401 UNAUTHENTICATED; 403 PERMISSION_DENIED; 404 NOT_FOUND; 413 (a body
// over the server's limit) and 429 RESOURCE_EXHAUSTED; 501 UNIMPLEMENTED; 503 UNAVAILABLE;
// 504 DEADLINE_EXCEEDED; any other status INTERNAL.
absl::StatusCode StatusCodeOfHttp(int http_status);

}  // namespace tensorcompute::proto

#endif  // TENSORCOMPUTE_PROTO_KSERVE_WIRE_H_
