#include "server/kserve/json_data.h"

#include <cstring>
#include <limits>
#include <type_traits>

#include "core/half_float.h"
#include "proto/kserve_wire.h"

namespace tensorcompute::server::kserve {
namespace {

using core::DataType;
using Json = nlohmann::json;
using Kind = JsonLeaf::Kind;

template <typename T>
void Append(T value, std::string* out) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian hosts only, as the raw wire form
  out->append(bytes, sizeof(T));
}

template <typename T>
absl::Status AppendInteger(const JsonLeaf& leaf, std::string* out) {
  if (leaf.kind == Kind::kUnsigned) {
    if (leaf.u > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
      return absl::OutOfRangeError("does not fit");
    }
    Append(static_cast<T>(leaf.u), out);
    return absl::OkStatus();
  }
  if (leaf.kind == Kind::kInteger) {
    const int64_t v = leaf.i;
    if constexpr (std::is_signed_v<T>) {
      if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max()) {
        return absl::OutOfRangeError("does not fit");
      }
    } else {
      if (v < 0 || static_cast<uint64_t>(v) > std::numeric_limits<T>::max()) {
        return absl::OutOfRangeError("does not fit");
      }
    }
    Append(static_cast<T>(v), out);
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError("is not an integer for");
}

std::string Shorten(std::string s) {
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// An object's text as the old decoder quoted it: its dump (keys sorted, duplicates dropped). A
// large object is not parsed into a document for a message: its text is quoted as written,
// without the whitespace outside strings.
std::string QuoteObject(absl::string_view text) {
  constexpr size_t kParseAtMost = 4096;
  if (text.size() <= kParseAtMost) {
    return Shorten(Dump(Json::parse(text.begin(), text.end(), nullptr, false)));
  }
  std::string out;
  bool in_string = false;
  bool escaped = false;
  for (char c : text) {
    if (out.size() > 40) break;
    if (in_string) {
      in_string = escaped || c != '"';
      escaped = !escaped && c == '\\';
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      continue;
    } else {
      in_string = c == '"';
    }
    out.push_back(c);
  }
  return Shorten(std::move(out));
}

}  // namespace

absl::Status AppendLeaf(DataType dtype, const JsonLeaf& leaf, std::string* out) {
  switch (dtype) {
    case DataType::kBool:
      if (leaf.kind != Kind::kBool) return absl::InvalidArgumentError("is not true or false for");
      out->push_back(leaf.b ? 1 : 0);
      return absl::OkStatus();
    case DataType::kInt8:
      return AppendInteger<int8_t>(leaf, out);
    case DataType::kInt16:
      return AppendInteger<int16_t>(leaf, out);
    case DataType::kInt32:
      return AppendInteger<int32_t>(leaf, out);
    case DataType::kInt64:
      return AppendInteger<int64_t>(leaf, out);
    case DataType::kUint8:
      return AppendInteger<uint8_t>(leaf, out);
    case DataType::kUint16:
      return AppendInteger<uint16_t>(leaf, out);
    case DataType::kUint32:
      return AppendInteger<uint32_t>(leaf, out);
    case DataType::kUint64:
      return AppendInteger<uint64_t>(leaf, out);
    case DataType::kString:
      if (leaf.kind != Kind::kString) return absl::InvalidArgumentError("is not a string for");
      proto::AppendKserveBytesElement(leaf.text, out);
      return absl::OkStatus();
    default:
      break;
  }
  double v = 0;
  switch (leaf.kind) {
    case Kind::kInteger:
      v = static_cast<double>(leaf.i);
      break;
    case Kind::kUnsigned:
      v = static_cast<double>(leaf.u);
      break;
    case Kind::kFloat:
      v = leaf.d;
      break;
    default:
      return absl::InvalidArgumentError("is not a number for");
  }
  switch (dtype) {
    case DataType::kFloat16:
      Append(core::FloatToHalf(core::DoubleToFloat(v)), out);
      return absl::OkStatus();
    case DataType::kBfloat16:
      Append(core::FloatToBFloat16(core::DoubleToFloat(v)), out);
      return absl::OkStatus();
    case DataType::kFloat32:
      Append(core::DoubleToFloat(v), out);
      return absl::OkStatus();
    case DataType::kFloat64:
      Append(v, out);
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError("cannot be given as JSON for");
  }
}

std::string QuoteLeaf(const JsonLeaf& leaf) {
  switch (leaf.kind) {
    case Kind::kNull:
      return "null";
    case Kind::kBool:
      return leaf.b ? "true" : "false";
    case Kind::kInteger:
      return Dump(Json(leaf.i));
    case Kind::kUnsigned:
      return Dump(Json(leaf.u));
    case Kind::kFloat:
      return Shorten(Dump(Json(leaf.d)));
    case Kind::kString:
      // Each byte dumps to at least one character: 64 bytes decide the first 40 characters.
      return Shorten(Dump(Json(std::string(leaf.text.substr(0, 64)))));
    case Kind::kObject:
      return QuoteObject(leaf.text);
  }
  return "";
}

JsonDataDecoder::JsonDataDecoder(DataType dtype, std::string* raw, const char* const* cursor,
                                 size_t reserve)
    : dtype_(dtype), raw_(raw), cursor_(cursor) {
  raw_->reserve(raw_->size() + reserve);
}

void JsonDataDecoder::Leaf(const JsonLeaf& leaf) {
  if (!bad_.ok()) return;
  if (absl::Status added = AppendLeaf(dtype_, leaf, raw_); !added.ok()) {
    bad_ = std::move(added);
    bad_quote_ = QuoteLeaf(leaf);
    return;
  }
  ++count_;
}

bool JsonDataDecoder::null() {
  if (object_depth_ == 0) Leaf(JsonLeaf::Null());
  return true;
}

bool JsonDataDecoder::boolean(bool value) {
  if (object_depth_ == 0) Leaf(JsonLeaf::Bool(value));
  return true;
}

bool JsonDataDecoder::number_integer(Json::number_integer_t value) {
  if (object_depth_ == 0) Leaf(JsonLeaf::Integer(value));
  return true;
}

bool JsonDataDecoder::number_unsigned(Json::number_unsigned_t value) {
  if (object_depth_ == 0) Leaf(JsonLeaf::Unsigned(value));
  return true;
}

bool JsonDataDecoder::number_float(Json::number_float_t value, const Json::string_t&) {
  if (object_depth_ == 0) Leaf(JsonLeaf::Float(value));
  return true;
}

bool JsonDataDecoder::string(Json::string_t& value) {
  if (object_depth_ == 0) Leaf(JsonLeaf::String(value));
  return true;
}

bool JsonDataDecoder::binary(Json::binary_t&) { return true; }  // not in JSON text

bool JsonDataDecoder::start_object(size_t) {
  // An object element is an error once it has ended (it is quoted): skip to its end.
  if (object_depth_++ == 0) object_start_ = *cursor_ - 1;
  ++depth_;
  return true;
}

bool JsonDataDecoder::key(Json::string_t&) { return true; }

bool JsonDataDecoder::end_object() {
  --depth_;
  if (--object_depth_ == 0) {
    const absl::string_view text(object_start_, static_cast<size_t>(*cursor_ - object_start_));
    Leaf(JsonLeaf::Object(text));
  }
  return true;
}

bool JsonDataDecoder::start_array(size_t) {
  started_ = true;
  ++depth_;
  if (object_depth_ > 0) ++object_depth_;
  return true;
}

bool JsonDataDecoder::end_array() {
  --depth_;
  if (object_depth_ > 0) --object_depth_;
  return true;
}

bool JsonDataDecoder::parse_error(size_t, const std::string&, const nlohmann::detail::exception&) {
  return false;  // the request's parser has seen this text before and reports its errors
}

}  // namespace tensorcompute::server::kserve
