#include "proto/decoded_cost.h"

#include <algorithm>
#include <climits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/message.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/support/proto_buffer_reader.h"

namespace tensorcompute::proto {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::MessageFactory;
using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;
using WireType = WireFormatLite::WireType;

// protobuf's default recursion limit is 100 levels below the message; one more here, so that the
// scan is never the stricter of the two.
constexpr int kMaxDepth = 101;
// An unknown field: a 16-byte UnknownField in a vector that doubles as it grows.
constexpr int64_t kUnknownField = 32;
// A message's first unknown field allocates its container (the UnknownFieldSet and an arena
// pointer).
constexpr int64_t kUnknownContainer = 48;
// An unknown group's own UnknownFieldSet (a 24-byte vector).
constexpr int64_t kUnknownGroup = 32;

// The C++ size of one element of a numeric field in a RepeatedField.
int64_t ElementSize(const FieldDescriptor& field) {
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_BOOL:
      return 1;
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_FLOAT:
    case FieldDescriptor::CPPTYPE_ENUM:
      return 4;
    default:
      return 8;
  }
}

class Scanner {
 public:
  explicit Scanner(CodedInputStream* in) : in_(*in) {}

  // Scans fields of `type` (nullptr: an unknown group) until the end of the input or limit
  // (`end_group` 0), or until the end tag of group `end_group`. False: it would not parse.
  bool Message(const Descriptor* type, int depth, uint32_t end_group) {
    if (depth > kMaxDepth) return false;
    bool has_unknown = false;
    // A map entry whose value is a message and is missing on the wire: the parser puts a
    // default value message in the map all the same.
    const bool message_value = type != nullptr && type->options().map_entry() &&
                               type->map_value()->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
    bool saw_value = false;
    while (true) {
      const int before = in_.CurrentPosition();
      const uint32_t tag = in_.ReadTag();
      if (tag == 0) {
        // The end of the input or of the limit reads no byte; a zero byte is not a tag.
        const bool ok = end_group == 0 && in_.CurrentPosition() == before &&
                        (depth == 0 || in_.BytesUntilLimit() == 0);
        if (ok && message_value && !saw_value) ++cost.messages;
        return ok;
      }
      const auto wire_type = static_cast<WireType>(WireFormatLite::GetTagWireType(tag));
      const uint32_t number = static_cast<uint32_t>(WireFormatLite::GetTagFieldNumber(tag));
      // An end-group tag ends the group it closes; anywhere else the parser refuses it.
      if (wire_type == WireFormatLite::WIRETYPE_END_GROUP) {
        return end_group != 0 && number == end_group;
      }
      const FieldDescriptor* field =
          type == nullptr ? nullptr : type->FindFieldByNumber(static_cast<int>(number));
      if (field != nullptr && Accepts(*field, wire_type)) {
        if (message_value && field == type->map_value()) saw_value = true;
        if (!Known(*field, wire_type, depth, type->options().map_entry())) return false;
        continue;
      }
      // The parser keeps what the type does not declare (or declares with another wire type)
      // as an unknown field.
      if (type != nullptr && !has_unknown) {
        has_unknown = true;
        cost.parsed_bytes += kUnknownContainer;
      }
      if (!Unknown(wire_type, number, depth)) return false;
    }
  }

  DecodedCost cost;

 private:
  // Whether the parser reads `wire_type` as `field`: its declared wire type, or a packed run
  // (length-delimited) for a repeated numeric field, in whichever form it was declared.
  static bool Accepts(const FieldDescriptor& field, WireType wire_type) {
    const auto declared =
        WireFormatLite::WireTypeForFieldType(static_cast<WireFormatLite::FieldType>(field.type()));
    return wire_type == declared ||
           (field.is_packable() && wire_type == WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
  }

  // `in_map_node`: the field is a map entry's key or value, held inside the map's node.
  bool Known(const FieldDescriptor& field, WireType wire_type, int depth, bool in_map_node) {
    uint32_t length = 0;
    switch (field.cpp_type()) {
      case FieldDescriptor::CPPTYPE_STRING: {
        if (!ReadLength(&length)) return false;
        const int64_t heap = StringHeap(length);
        if (field.is_repeated()) {
          ++cost.strings;
          cost.parsed_bytes += kPointerSlot + kStringObject + heap;
          cost.converted_bytes += kConvertedString + heap;
        } else {
          cost.parsed_bytes += (in_map_node ? 0 : kStringObject) + heap;
        }
        return in_.Skip(static_cast<int>(length));
      }
      case FieldDescriptor::CPPTYPE_MESSAGE: {
        ++cost.messages;
        if (field.is_map()) {
          cost.parsed_bytes += MallocChunk(ObjectSize(field.message_type()));  // a node
        } else if (!in_map_node) {
          cost.parsed_bytes += (field.is_repeated() ? kPointerSlot : 0) +
                               MallocChunk(ObjectSize(field.message_type()));
        }
        if (wire_type == WireFormatLite::WIRETYPE_START_GROUP) {
          return Message(field.message_type(), depth + 1, static_cast<uint32_t>(field.number()));
        }
        if (!ReadLength(&length)) return false;
        const CodedInputStream::Limit limit = in_.PushLimit(static_cast<int>(length));
        const bool ok = Message(field.message_type(), depth + 1, 0);
        in_.PopLimit(limit);
        return ok;
      }
      default:
        break;
    }
    int64_t count = 1;
    if (wire_type == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      if (!ReadLength(&length) || !CountPacked(field, length, &count)) return false;
    } else if (!SkipValue(wire_type)) {
      return false;
    }
    if (field.is_repeated()) {
      const int64_t size = ElementSize(field);
      cost.scalars += count;
      cost.parsed_bytes += 2 * size * count;  // a RepeatedField doubles as it grows
      cost.converted_bytes += size * count;
    }
    return true;
  }

  bool Unknown(WireType wire_type, uint32_t number, int depth) {
    ++cost.unknown_fields;
    cost.parsed_bytes += kUnknownField;
    uint32_t length = 0;
    switch (wire_type) {
      case WireFormatLite::WIRETYPE_LENGTH_DELIMITED:
        if (!ReadLength(&length)) return false;
        cost.parsed_bytes += kStringObject + StringHeap(length);
        return in_.Skip(static_cast<int>(length));
      case WireFormatLite::WIRETYPE_START_GROUP:
        cost.parsed_bytes += kUnknownGroup;
        return Message(nullptr, depth + 1, number);
      default:
        return SkipValue(wire_type);
    }
  }

  // A length prefix; one beyond INT_MAX cannot be a length within a message.
  bool ReadLength(uint32_t* length) {
    return in_.ReadVarint32(length) && *length <= static_cast<uint32_t>(INT_MAX);
  }

  // Reads past one varint or fixed-size value.
  bool SkipValue(WireType wire_type) {
    uint32_t u32 = 0;
    uint64_t u64 = 0;
    switch (wire_type) {
      case WireFormatLite::WIRETYPE_VARINT:
        return in_.ReadVarint64(&u64);
      case WireFormatLite::WIRETYPE_FIXED32:
        return in_.ReadLittleEndian32(&u32);
      case WireFormatLite::WIRETYPE_FIXED64:
        return in_.ReadLittleEndian64(&u64);
      default:
        return false;
    }
  }

  // The elements of a packed field of `length` bytes: a fixed-size element per 4 or 8 bytes, or
  // a varint per byte without the continuation bit, read where the buffer lies.
  bool CountPacked(const FieldDescriptor& field, uint32_t length, int64_t* count) {
    const auto element_wire_type =
        WireFormatLite::WireTypeForFieldType(static_cast<WireFormatLite::FieldType>(field.type()));
    if (element_wire_type != WireFormatLite::WIRETYPE_VARINT) {
      const int64_t size = element_wire_type == WireFormatLite::WIRETYPE_FIXED32 ? 4 : 8;
      // Rounded up: never short of what the parser builds from a length that is not a multiple.
      *count = (int64_t{length} + size - 1) / size;
      return in_.Skip(static_cast<int>(length));
    }
    *count = 0;
    const CodedInputStream::Limit limit = in_.PushLimit(static_cast<int>(length));
    const void* data = nullptr;
    int size = 0;
    while (in_.GetDirectBufferPointer(&data, &size)) {
      const auto* bytes = static_cast<const uint8_t*>(data);
      *count += std::count_if(bytes, bytes + size, [](uint8_t b) { return b < 0x80; });
      in_.Skip(size);
    }
    const bool complete = in_.BytesUntilLimit() == 0;
    in_.PopLimit(limit);
    return complete;
  }

  // What a new object of `type` takes: its default instance's size, once per type.
  int64_t ObjectSize(const Descriptor* type) {
    if (auto it = sizes_.find(type); it != sizes_.end()) return it->second;
    int64_t size = 256;  // kept only for a type with no generated prototype: a fixed guess
    if (type->options().map_entry()) {
      // A map's node: its key and value, a next pointer, and its share of the bucket array
      // (at most 3 slots of 8 bytes). What the key and value hold beyond that is counted as
      // their fields'.
      const FieldDescriptor& value = *type->map_value();
      size =
          32 +
          (value.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE ? ObjectSize(value.message_type())
                                                                : 32) +
          8 + 24;
    } else if (const google::protobuf::Message* prototype =
                   MessageFactory::generated_factory()->GetPrototype(type)) {
      size = static_cast<int64_t>(prototype->SpaceUsedLong());
    }
    sizes_[type] = size;
    return size;
  }

  CodedInputStream& in_;
  absl::flat_hash_map<const Descriptor*, int64_t> sizes_;
};

absl::StatusOr<DecodedCost> Scan(const Descriptor& type,
                                 google::protobuf::io::ZeroCopyInputStream* stream,
                                 int64_t wire_bytes) {
  CodedInputStream in(stream);
  in.SetTotalBytesLimit(INT_MAX);
  Scanner scanner(&in);
  if (!scanner.Message(&type, 0, 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the message is not valid protobuf wire format at byte ", in.CurrentPosition()));
  }
  scanner.cost.wire_bytes = wire_bytes;
  return scanner.cost;
}

}  // namespace

std::string DecodedCost::Summary() const {
  return absl::StrCat(wire_bytes, " bytes received; ", strings, " strings, ", scalars,
                      " repeated numbers, ", messages, " submessages");
}

int64_t MallocChunk(int64_t n) {
  constexpr int64_t kMmapThreshold = 128 << 10;
  const int64_t chunk = std::max<int64_t>(32, (n + 8 + 15) & ~int64_t{15});
  if (n < kMmapThreshold) return chunk;
  return (chunk + 8 + 4095) & ~int64_t{4095};
}

int64_t StringHeap(int64_t length) {
  return length <= 15 ? 0 : MallocChunk(std::max<int64_t>(length, 30) + 1);
}

absl::StatusOr<DecodedCost> ScanDecodedCost(const Descriptor& type, grpc::ByteBuffer* message) {
  grpc::ProtoBufferReader reader(message);
  if (!reader.status().ok()) {
    return absl::InvalidArgumentError("the message's buffer cannot be read");
  }
  return Scan(type, &reader, static_cast<int64_t>(message->Length()));
}

absl::StatusOr<DecodedCost> ScanDecodedCost(const Descriptor& type, absl::string_view message) {
  google::protobuf::io::ArrayInputStream stream(message.data(), static_cast<int>(message.size()));
  return Scan(type, &stream, static_cast<int64_t>(message.size()));
}

}  // namespace tensorcompute::proto
