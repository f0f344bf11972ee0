// File: server/kserve/json_data.h
//
// One input's JSON `data` decoded straight into its raw bytes, element by element, from
// nlohmann-json's SAX events: no document is built. The request parser (json_request_parser.h)
// forwards the events of a `data` value here while it parses the request (when the datatype and
// shape came first), or FinishJsonInput (json_input.h) parses the value a second time with this
// as the handler (when `data` came before them).
//
// Also what both need: a JSON scalar as the parser reports it (JsonLeaf), converted to a
// datatype's bytes (AppendLeaf) or quoted in an error message (QuoteLeaf), with the words and
// conversions of the document decoder (tests/server/kserve_json_reference.cc, the reference it is
// tested against) before them; and ParseJsonValue, nlohmann's SAX parse with the position it has
// reached in the text, which nlohmann does not report.
//
// Thread-safety: none; one decoder per `data` value. The decoder holds no memory of its own
// beyond the bytes it appends to the caller's string.

#ifndef TENSORCOMPUTE_SERVER_KSERVE_JSON_DATA_H_
#define TENSORCOMPUTE_SERVER_KSERVE_JSON_DATA_H_

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

#include "core/dtype.h"

namespace tensorcompute::server::kserve {

// One JSON value that is not an array, as the SAX parser reports it. An object (or, as a
// parameter's value, an array) is kept as its text: it is only ever quoted in an error message.
struct JsonLeaf {
  enum class Kind { kNull, kBool, kInteger, kUnsigned, kFloat, kString, kObject };
  Kind kind = Kind::kNull;
  bool b = false;          // kBool
  int64_t i = 0;           // kInteger (the parser's negative integers)
  uint64_t u = 0;          // kUnsigned (its non-negative integers)
  double d = 0;            // kFloat
  absl::string_view text;  // kString: its bytes; kObject: its JSON text

  static JsonLeaf Null() { return JsonLeaf(); }
  static JsonLeaf Bool(bool v) {
    JsonLeaf leaf(Kind::kBool);
    leaf.b = v;
    return leaf;
  }
  static JsonLeaf Integer(int64_t v) {
    JsonLeaf leaf(Kind::kInteger);
    leaf.i = v;
    return leaf;
  }
  static JsonLeaf Unsigned(uint64_t v) {
    JsonLeaf leaf(Kind::kUnsigned);
    leaf.u = v;
    return leaf;
  }
  static JsonLeaf Float(double v) {
    JsonLeaf leaf(Kind::kFloat);
    leaf.d = v;
    return leaf;
  }
  static JsonLeaf String(absl::string_view v) {
    JsonLeaf leaf(Kind::kString);
    leaf.text = v;
    return leaf;
  }
  static JsonLeaf Object(absl::string_view v) {
    JsonLeaf leaf(Kind::kObject);
    leaf.text = v;
    return leaf;
  }

  JsonLeaf() = default;

 private:
  explicit JsonLeaf(Kind k) : kind(k) {}
};

// Appends `leaf` as one element of `dtype` in the raw wire form (booleans as one byte,
// integers range-checked, FP16/BF16/FP32 rounded to nearest even, strings with a 4-byte length
// before them). Returns OK, OUT_OF_RANGE "does not fit" for an integer out of the type's range,
// or INVALID_ARGUMENT "is not true or false for", "is not an integer for", "is not a string
// for", "is not a number for" or "cannot be given as JSON for" (completed by the datatype's
// name in the caller's message).
absl::Status AppendLeaf(core::DataType dtype, const JsonLeaf& leaf, std::string* out);

// `leaf` as JSON, for an error message: at most 40 characters (the first 37 and "...").
std::string QuoteLeaf(const JsonLeaf& leaf);

// Decodes one `data` value: a flat or nested array of elements of one datatype, flattened in
// row-major order. Feed it the SAX events of the value (it is itself a SAX handler for
// nlohmann::json::sax_parse); done() tells when the value has ended. Never fails the parse:
// the first bad element is recorded, and the elements after it are ignored. The caller bounds
// the nesting (json_request.h, kMaxJsonDepth); the decoder keeps only a depth count.
class JsonDataDecoder {
 public:
  using Json = nlohmann::json;

  // Appends to `*raw`, reserving `reserve` bytes first. `*cursor` is the parser's read position
  // in the JSON text (an object element's text is read from there, to be quoted).
  // REQUIRES: raw and cursor outlive the decoder.
  JsonDataDecoder(core::DataType dtype, std::string* raw, const char* const* cursor,
                  size_t reserve);

  // The value (an array: its first event is start_array) has ended.
  bool done() const { return started_ && depth_ == 0; }
  // Elements appended (until the first bad one).
  int64_t count() const { return count_; }
  // The first bad element: OK when none, else its problem (AppendLeaf's status) with
  // bad_quote() the element quoted.
  const absl::Status& bad() const { return bad_; }
  const std::string& bad_quote() const { return bad_quote_; }

  // SAX events (nlohmann::json::sax_parse's handler interface). Each returns true.
  bool null();
  bool boolean(bool value);
  bool number_integer(Json::number_integer_t value);
  bool number_unsigned(Json::number_unsigned_t value);
  bool number_float(Json::number_float_t value, const Json::string_t& text);
  bool string(Json::string_t& value);
  bool binary(Json::binary_t& value);
  bool start_object(size_t elements);
  bool key(Json::string_t& key);
  bool end_object();
  bool start_array(size_t elements);
  bool end_array();
  bool parse_error(size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& error);

  // --- Implementation details below ------------------------------------------------------
 private:
  // One element that is not an array.
  void Leaf(const JsonLeaf& leaf);

  const core::DataType dtype_;
  std::string* const raw_;
  const char* const* const cursor_;
  bool started_ = false;
  int depth_ = 0;                       // arrays and objects open in the value
  int object_depth_ = 0;                // > 0 inside an object element
  const char* object_start_ = nullptr;  // its opening brace
  int64_t count_ = 0;
  absl::Status bad_;
  std::string bad_quote_;
};

// An input iterator over the JSON text that keeps its position in a variable the handler reads:
// nlohmann's parser reports no positions, and the text of a `data` value (read again) or of an
// object (quoted) is needed. A copy shares the position: the parser advances only one.
class TrackedIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  explicit TrackedIterator(const char** at) : at_(at) {}
  reference operator*() const { return **at_; }
  TrackedIterator& operator++() {
    ++*at_;
    return *this;
  }
  bool operator==(const TrackedIterator& other) const { return *at_ == *other.at_; }
  bool operator!=(const TrackedIterator& other) const { return *at_ != *other.at_; }

 private:
  const char** at_;
};

// Parses the JSON value at `begin` with `sax` (nlohmann::json::sax_parse), which finds the
// parser's position in `*cursor`: right after the last character of the token it reports (a
// string's closing quote, a bracket or brace), or one further after a number. With `strict`
// the text must be exactly [begin, end); without, parsing stops where the value ends.
// Returns what sax_parse returns.
template <typename Sax>
bool ParseJsonValue(const char* begin, const char* end, const char** cursor, Sax* sax,
                    bool strict) {
  *cursor = begin;
  const char* stop = end;
  return nlohmann::json::sax_parse(TrackedIterator(cursor), TrackedIterator(&stop), sax,
                                   nlohmann::json::input_format_t::json, strict);
}

}  // namespace tensorcompute::server::kserve

#endif  // TENSORCOMPUTE_SERVER_KSERVE_JSON_DATA_H_
