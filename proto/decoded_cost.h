// File: proto/decoded_cost.h
//
// What a protobuf message will cost in memory once it is parsed and its tensors converted to
// core's, counted from its wire bytes *before* it is parsed, so that the server can charge it to
// its in-flight budget (server/admission/byte_budget.h) and refuse a message that would not fit
// without ever building it. A wire message of empty strings (2 bytes each) parses into one
// std::string per element: 62 MiB of them cost about 2 GB parsed.
//
// The scan walks the message's fields by tag with the message type's descriptor, descending
// into submessages (map entries and unknown groups included), and counts what the protobuf
// runtime allocates for each:
//   - a repeated string/bytes element: a pointer slot, a std::string object and, beyond the
//     short-string buffer, its contents; a singular one: the object and its contents;
//   - a repeated numeric element: its C++ size (packed varints are 1 byte on the wire and up to
//     8 parsed);
//   - a submessage: its C++ object (and a pointer slot when repeated);
//   - a field the type does not know (kept as an unknown field): its entry, and its bytes.
// plus what converting the repeated fields to core tensors may cost (one core std::string, its
// vector slot and pointer per string element, one copy per numeric element; kConvertedString
// below). The constants are glibc's and libstdc++'s on 64-bit Linux, checked against the
// allocator's own count in tests/proto/decoded_cost_test.cc.
//
// The counts never fall short of what the parsed message holds: a field the parser would merge
// (a singular message sent twice, a repeated map key) is counted each time it appears. A message
// the scan cannot walk (truncated, a bad wire type, nested deeper than protobuf's 100 levels)
// would not parse either.
//
// Thread-safety: pure functions; the message buffer is read, not changed.

#ifndef TENSORCOMPUTE_PROTO_DECODED_COST_H_
#define TENSORCOMPUTE_PROTO_DECODED_COST_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/zero_copy_stream.h"
#include "grpcpp/support/byte_buffer.h"

namespace tensorcompute::proto {

struct DecodedCost {
  int64_t wire_bytes = 0;       // the message as received
  int64_t parsed_bytes = 0;     // what the parsed message allocates
  int64_t converted_bytes = 0;  // what converting its repeated fields to core tensors adds
  // What the message holds, for errors and tests.
  int64_t strings = 0;         // elements of repeated string/bytes fields
  int64_t scalars = 0;         // elements of repeated numeric, bool and enum fields
  int64_t messages = 0;        // submessages, map entries included
  int64_t unknown_fields = 0;  // fields the type does not declare (unknown groups' included)

  // Everything the request holds at its peak: the received bytes while they are parsed, the
  // parsed message and its conversion.
  int64_t total() const { return wire_bytes + parsed_bytes + converted_bytes; }

  // What the message holds, for errors: "M bytes received; S strings, R repeated numbers, K
  // submessages".
  std::string Summary() const;
};

// Per-element costs (bytes), on glibc malloc and libstdc++ (64-bit):
inline constexpr int64_t kStringObject = 48;  // new std::string: a 32-byte object, a 48-byte chunk
inline constexpr int64_t kPointerSlot = 16;   // a RepeatedPtrField slot: 8 bytes, doubled on growth
// A core string element converted from a parsed one (server/kserve/codec.cc): the temporary
// std::vector<std::string>'s 32 bytes, core::Tensor's strings_ (32) and string_ptrs_ (8).
inline constexpr int64_t kConvertedString = 72;

// The bytes glibc's malloc takes for a request of `n` bytes: 16-byte chunks with an 8-byte
// header, 32 at least; from 128 KiB on, whole pages (mmap).
int64_t MallocChunk(int64_t n);

// The heap a std::string of `length` bytes holds beyond its object: none up to 15 (the short
// buffer); else a chunk of at least 31 bytes (libstdc++ doubles the short capacity, 15, at the
// first growth).
int64_t StringHeap(int64_t length);

// Returns the cost of the message of type `type` in `message`, or INVALID_ARGUMENT when the
// bytes cannot be a message (they would not parse): "the message is not valid protobuf wire
// format at byte N". The ByteBuffer is read in place (its slices are not copied) and left as it
// was.
absl::StatusOr<DecodedCost> ScanDecodedCost(const google::protobuf::Descriptor& type,
                                            grpc::ByteBuffer* message);
absl::StatusOr<DecodedCost> ScanDecodedCost(const google::protobuf::Descriptor& type,
                                            absl::string_view message);

}  // namespace tensorcompute::proto

#endif  // TENSORCOMPUTE_PROTO_DECODED_COST_H_
