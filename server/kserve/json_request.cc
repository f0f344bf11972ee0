// ParseHttpInferRequest (json.h): the request body's JSON as a stream of SAX events, decoded
// into the ModelInferRequest as they come. Only protocol containers (the request, the inputs
// and outputs arrays, one input or output, a parameters object, a shape) keep state; any other
// value is skipped with a depth count, and `data` goes to a JsonDataDecoder.
//
// The old decoder built the document first and then checked it field by field. Within an
// input (and an output) the checks are still made in that order, when the object ends, so a
// request with one fault gets the same message whatever the order of its fields.

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

#include "core/dtype.h"
#include "core/shape.h"
#include "proto/kserve_wire.h"
#include "server/kserve/codec.h"
#include "server/kserve/json.h"
#include "server/kserve/json_data.h"

namespace tensorcompute::server::kserve {
namespace {

using core::DataType;
using Json = nlohmann::json;
using Kind = JsonLeaf::Kind;

constexpr absl::string_view kRequest = "the request";
// The parser's own state: its frames (at most kMaxJsonDepth), one input's and one output's
// fields, a lexer's fixed part; generously.
constexpr int64_t kParserStateBytes = 16 << 10;

absl::Status Invalid(absl::string_view what, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", problem));
}

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

// Parses the JSON value at `begin` (with `strict`, exactly [begin, end)) with `sax`, which
// finds the parser's position in `*cursor`.
template <typename Sax>
bool SaxParse(const char* begin, const char* end, const char** cursor, Sax* sax, bool strict) {
  *cursor = begin;
  const char* stop = end;
  return Json::sax_parse(TrackedIterator(cursor), TrackedIterator(&stop), sax,
                         Json::input_format_t::json, strict);
}

absl::Status NotAParameter(const std::string& name, const JsonLeaf& value) {
  return absl::InvalidArgumentError(absl::StrCat(
      "parameter '", name, "' must be a boolean, a number or a string, not ", QuoteLeaf(value)));
}

// A JSON parameter as an InferParameter: booleans, integers, other numbers and strings.
absl::Status ToParameter(const std::string& name, const JsonLeaf& value,
                         inference::InferParameter* p) {
  switch (value.kind) {
    case Kind::kBool:
      p->set_bool_param(value.b);
      return absl::OkStatus();
    case Kind::kUnsigned:
      if (value.u > uint64_t{INT64_MAX}) {
        p->set_uint64_param(value.u);
      } else {
        p->set_int64_param(static_cast<int64_t>(value.u));
      }
      return absl::OkStatus();
    case Kind::kInteger:
      p->set_int64_param(value.i);
      return absl::OkStatus();
    case Kind::kFloat:
      p->set_double_param(value.d);
      return absl::OkStatus();
    case Kind::kString:
      p->set_string_param(std::string(value.text));
      return absl::OkStatus();
    default:
      return NotAParameter(name, value);
  }
}

// What the next value is to the request: a protocol container, a field, or nothing (kIgnore).
enum class Role {
  kRoot,
  kId,
  kParams,
  kParamValue,
  kInputs,
  kInput,
  kName,
  kDatatype,
  kShape,
  kDim,
  kInputParams,
  kBinaryDataSize,
  kData,
  kOutputs,
  kOutput,
  kOutputName,
  kOutputParams,
  kBinaryData,
  kIgnore
};

// A field of an input or an output, until the object ends.
enum class Field { kAbsent, kPresent, kWrongType };

struct InputState {
  Field name = Field::kAbsent;
  std::string name_value;
  Field datatype = Field::kAbsent;
  std::string datatype_value;
  Field shape = Field::kAbsent;
  bool shape_bad = false;  // an element that is not an integer
  core::Shape dims;
  Field parameters = Field::kAbsent;
  Field binary_size = Field::kAbsent;
  int64_t binary_size_value = 0;
  Field data = Field::kAbsent;  // kWrongType: not an array
  const char* data_start = nullptr;
  std::optional<DataType> decoded_as;  // `raw` holds the data decoded as this
  int64_t count = 0;
  absl::Status bad;
  std::string bad_quote;
  std::string raw;
};

struct OutputState {
  Field name = Field::kAbsent;
  std::string name_value;
  Field parameters = Field::kAbsent;
  Field binary_data = Field::kAbsent;
  bool binary_data_value = false;
};

// The SAX handler of a request (nlohmann::json::sax_parse's interface).
class RequestParser {
 public:
  RequestParser(absl::string_view json, absl::string_view binary,
                inference::ModelInferRequest* request, HttpInferOptions* options)
      : json_(json), binary_(binary), request_(request), options_(options) {}

  absl::Status Parse() {
    const bool parsed = SaxParse(json_.data(), json_.data() + json_.size(), &cursor_, this,
                                 /*strict=*/true);
    if (!status_.ok()) return status_;
    if (!parsed) return absl::InternalError("the JSON parser stopped without a reason");
    return absl::OkStatus();
  }

  // An upper bound of what the parse held beyond the text (json.h).
  int64_t HeldBytes() const {
    // nlohmann's lexer keeps a token twice (unescaped, and as read), each in a buffer grown by
    // doubling; a second parse of `data` has its own lexer beside the first.
    const int64_t lexers = reparsed_ ? 2 : 1;
    return static_cast<int64_t>(request_->SpaceUsedLong()) +
           lexers * 4 * static_cast<int64_t>(longest_token_) + kParserStateBytes;
  }

  bool null() { return skip_ > 0 || (data_ ? data_->null() : Leaf(JsonLeaf::Null())); }
  bool boolean(bool v) {
    return skip_ > 0 || (data_ ? data_->boolean(v) : Leaf(JsonLeaf::Bool(v)));
  }
  bool number_integer(Json::number_integer_t v) {
    return skip_ > 0 || (data_ ? data_->number_integer(v) : Leaf(JsonLeaf::Integer(v)));
  }
  bool number_unsigned(Json::number_unsigned_t v) {
    return skip_ > 0 || (data_ ? data_->number_unsigned(v) : Leaf(JsonLeaf::Unsigned(v)));
  }
  bool number_float(Json::number_float_t v, const Json::string_t& text) {
    longest_token_ = std::max(longest_token_, text.size());
    return skip_ > 0 || (data_ ? data_->number_float(v, text) : Leaf(JsonLeaf::Float(v)));
  }
  bool string(Json::string_t& v) {
    longest_token_ = std::max(longest_token_, v.size());
    return skip_ > 0 || (data_ ? data_->string(v) : Leaf(JsonLeaf::String(v)));
  }
  bool binary(Json::binary_t&) { return true; }  // not in JSON text
  bool start_object(size_t) { return Start(/*object=*/true); }
  bool end_object() { return End(/*object=*/true); }
  bool start_array(size_t) { return Start(/*object=*/false); }
  bool end_array() { return End(/*object=*/false); }
  bool key(Json::string_t& key);
  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception& error) {
    return Fail(
        absl::InvalidArgumentError(absl::StrCat("the request is not valid JSON: ", error.what())));
  }

 private:
  bool Fail(absl::Status status) {
    status_ = std::move(status);
    return false;
  }
  bool Leaf(const JsonLeaf& leaf);
  bool Start(bool object);
  bool End(bool object);
  bool Push(Role role) {
    frames_.push_back(role);
    next_ = ElementRole();
    return true;
  }
  bool StartSkip(Role why) {
    skip_ = 1;
    skipping_ = why;
    skip_start_ = cursor_ - 1;
    return true;
  }
  // The role of the next value in the innermost container (for an object: until its key).
  Role ElementRole() const {
    if (frames_.empty()) return Role::kIgnore;
    switch (frames_.back()) {
      case Role::kInputs:
        return Role::kInput;
      case Role::kOutputs:
        return Role::kOutput;
      case Role::kShape:
        return Role::kDim;
      default:
        return Role::kIgnore;
    }
  }
  std::string InputWhat() const {
    return input_.name == Field::kPresent ? absl::StrCat("input '", input_.name_value, "'")
                                          : absl::StrCat("inputs[", input_index_, "]");
  }
  // The datatype `data` is decoded as when it starts, if it is to be decoded at once.
  std::optional<DataType> DataTypeNow() const;
  // Bytes to reserve for data of `dtype` whose text starts at `from`.
  size_t Reserve(DataType dtype, const char* from) const;
  void DecodeAgain(DataType dtype);
  bool FinishInput();
  bool FinishOutput();
  bool FinishRequest();

  const absl::string_view json_;
  const absl::string_view binary_;
  inference::ModelInferRequest* const request_;
  HttpInferOptions* const options_;
  const char* cursor_ = nullptr;  // the parser's position in json_
  absl::Status status_;
  int depth_ = 0;             // arrays and objects open
  std::vector<Role> frames_;  // the protocol containers open
  Role next_ = Role::kRoot;
  int skip_ = 0;  // > 0: levels open in a value being skipped
  Role skipping_ = Role::kIgnore;
  const char* skip_start_ = nullptr;
  std::optional<JsonDataDecoder> data_;  // set while a `data` value is being decoded
  std::string param_name_;
  bool has_inputs_ = false;
  int input_index_ = 0;
  size_t binary_at_ = 0;
  InputState input_;
  int output_index_ = 0;
  OutputState output_;
  std::optional<bool> outputs_binary_;  // the first output's binary_data
  size_t longest_token_ = 0;            // string or number, as the lexer buffers it
  bool reparsed_ = false;               // some `data` was parsed a second time
};

bool RequestParser::key(Json::string_t& key) {
  longest_token_ = std::max(longest_token_, key.size());
  if (skip_ > 0) return true;
  if (data_) return data_->key(key);
  switch (frames_.back()) {
    case Role::kRoot:
      next_ = key == "id"           ? Role::kId
              : key == "parameters" ? Role::kParams
              : key == "inputs"     ? Role::kInputs
              : key == "outputs"    ? Role::kOutputs
                                    : Role::kIgnore;
      return true;
    case Role::kParams:
      if (request_->parameters().size() >= kMaxJsonListLength &&
          request_->parameters().count(key) == 0) {
        return Fail(
            Invalid(kRequest, absl::StrCat("more than ", kMaxJsonListLength, " parameters")));
      }
      param_name_ = key;
      next_ = Role::kParamValue;
      return true;
    case Role::kInput:  // a key given twice: the last value counts
      if (key == "name") {
        input_.name = Field::kAbsent;
        next_ = Role::kName;
      } else if (key == "datatype") {
        input_.datatype = Field::kAbsent;
        next_ = Role::kDatatype;
      } else if (key == "shape") {
        input_.shape = Field::kAbsent;
        input_.shape_bad = false;
        input_.dims.clear();
        next_ = Role::kShape;
      } else if (key == "parameters") {
        input_.parameters = input_.binary_size = Field::kAbsent;
        next_ = Role::kInputParams;
      } else if (key == "data") {
        input_.data = Field::kAbsent;
        input_.decoded_as.reset();
        input_.raw.clear();
        next_ = Role::kData;
      } else {
        next_ = Role::kIgnore;
      }
      return true;
    case Role::kInputParams:
      next_ = key == "binary_data_size" ? Role::kBinaryDataSize : Role::kIgnore;
      return true;
    case Role::kOutput:
      if (key == "name") {
        output_.name = Field::kAbsent;
        next_ = Role::kOutputName;
      } else if (key == "parameters") {
        output_.parameters = output_.binary_data = Field::kAbsent;
        next_ = Role::kOutputParams;
      } else {
        next_ = Role::kIgnore;
      }
      return true;
    case Role::kOutputParams:
      next_ = key == "binary_data" ? Role::kBinaryData : Role::kIgnore;
      return true;
    default:
      next_ = Role::kIgnore;
      return true;
  }
}

bool RequestParser::Leaf(const JsonLeaf& leaf) {
  const bool is_string = leaf.kind == Kind::kString;
  const bool is_integer = leaf.kind == Kind::kInteger || leaf.kind == Kind::kUnsigned;
  const int64_t integer = leaf.kind == Kind::kUnsigned ? static_cast<int64_t>(leaf.u) : leaf.i;
  switch (next_) {
    case Role::kRoot:
      return Fail(Invalid(kRequest, "must be a JSON object"));
    case Role::kId:
      if (!is_string) return Fail(Invalid(kRequest, "'id' must be a string"));
      request_->set_id(std::string(leaf.text));
      break;
    case Role::kParams:
      return Fail(Invalid(kRequest, "'parameters' must be an object"));
    case Role::kParamValue:
      if (absl::Status converted =
              ToParameter(param_name_, leaf, &(*request_->mutable_parameters())[param_name_]);
          !converted.ok()) {
        return Fail(std::move(converted));
      }
      break;
    case Role::kInputs:
      return Fail(Invalid(kRequest, "'inputs' must be an array"));
    case Role::kInput:
      return Fail(Invalid(absl::StrCat("inputs[", input_index_, "]"), "must be an object"));
    case Role::kName:
      input_.name = is_string ? Field::kPresent : Field::kWrongType;
      if (is_string) input_.name_value = std::string(leaf.text);
      break;
    case Role::kDatatype:
      input_.datatype = is_string ? Field::kPresent : Field::kWrongType;
      if (is_string) input_.datatype_value = std::string(leaf.text);
      break;
    case Role::kShape:
      input_.shape = Field::kWrongType;
      break;
    case Role::kDim:
      if (input_.shape_bad) break;
      if (!is_integer) {
        input_.shape_bad = true;
        break;
      }
      if (input_.dims.size() >= kMaxJsonListLength) {
        return Fail(Invalid(InputWhat(), absl::StrCat("'shape' has more than ", kMaxJsonListLength,
                                                      " dimensions")));
      }
      input_.dims.push_back(integer);
      break;
    case Role::kInputParams:
      input_.parameters = Field::kWrongType;
      break;
    case Role::kBinaryDataSize:
      input_.binary_size = is_integer ? Field::kPresent : Field::kWrongType;
      input_.binary_size_value = integer;
      break;
    case Role::kData:
      input_.data = Field::kWrongType;
      break;
    case Role::kOutputs:
      return Fail(Invalid(kRequest, "'outputs' must be an array"));
    case Role::kOutput:
      return Fail(Invalid(absl::StrCat("outputs[", output_index_, "]"), "must be an object"));
    case Role::kOutputName:
      output_.name = is_string ? Field::kPresent : Field::kWrongType;
      if (is_string) output_.name_value = std::string(leaf.text);
      break;
    case Role::kOutputParams:
      output_.parameters = Field::kWrongType;
      break;
    case Role::kBinaryData:
      output_.binary_data = leaf.kind == Kind::kBool ? Field::kPresent : Field::kWrongType;
      output_.binary_data_value = leaf.b;
      break;
    case Role::kIgnore:
      break;
  }
  next_ = ElementRole();
  return true;
}

bool RequestParser::Start(bool object) {
  if (++depth_ > kMaxJsonDepth) {
    return Fail(
        Invalid(kRequest, absl::StrCat("JSON nests deeper than ", kMaxJsonDepth, " levels")));
  }
  if (skip_ > 0) {
    ++skip_;
    return true;
  }
  if (data_) return object ? data_->start_object(0) : data_->start_array(0);
  switch (next_) {
    case Role::kRoot:
      if (!object) return Fail(Invalid(kRequest, "must be a JSON object"));
      return Push(Role::kRoot);
    case Role::kParams:
      if (!object) return Fail(Invalid(kRequest, "'parameters' must be an object"));
      request_->mutable_parameters()->clear();
      return Push(Role::kParams);
    case Role::kInputs:
      if (object) return Fail(Invalid(kRequest, "'inputs' must be an array"));
      has_inputs_ = true;
      request_->clear_inputs();
      request_->clear_raw_input_contents();
      input_index_ = 0;
      binary_at_ = 0;
      return Push(Role::kInputs);
    case Role::kInput:
      if (!object) {
        return Fail(Invalid(absl::StrCat("inputs[", input_index_, "]"), "must be an object"));
      }
      if (input_index_ >= kMaxJsonListLength) {
        return Fail(Invalid(kRequest, absl::StrCat("more than ", kMaxJsonListLength, " inputs")));
      }
      input_ = InputState();
      return Push(Role::kInput);
    case Role::kShape:
      if (object) {
        input_.shape = Field::kWrongType;
        return StartSkip(Role::kIgnore);
      }
      input_.shape = Field::kPresent;
      return Push(Role::kShape);
    case Role::kInputParams:
      if (!object) {
        input_.parameters = Field::kWrongType;
        return StartSkip(Role::kIgnore);
      }
      input_.parameters = Field::kPresent;
      return Push(Role::kInputParams);
    case Role::kData:
      if (object) {
        input_.data = Field::kWrongType;
        return StartSkip(Role::kIgnore);
      }
      input_.data = Field::kPresent;
      input_.data_start = cursor_ - 1;
      if (const std::optional<DataType> dtype = DataTypeNow()) {
        data_.emplace(*dtype, &input_.raw, &cursor_, Reserve(*dtype, input_.data_start));
        input_.decoded_as = *dtype;
        return data_->start_array(0);
      }
      return StartSkip(Role::kIgnore);  // decoded from the text when the input ends
    case Role::kOutputs:
      if (object) return Fail(Invalid(kRequest, "'outputs' must be an array"));
      request_->clear_outputs();
      output_index_ = 0;
      outputs_binary_.reset();
      return Push(Role::kOutputs);
    case Role::kOutput:
      if (!object) {
        return Fail(Invalid(absl::StrCat("outputs[", output_index_, "]"), "must be an object"));
      }
      if (output_index_ >= kMaxJsonListLength) {
        return Fail(Invalid(kRequest, absl::StrCat("more than ", kMaxJsonListLength, " outputs")));
      }
      output_ = OutputState();
      return Push(Role::kOutput);
    case Role::kOutputParams:
      if (!object) {
        output_.parameters = Field::kWrongType;
        return StartSkip(Role::kIgnore);
      }
      output_.parameters = Field::kPresent;
      return Push(Role::kOutputParams);
    case Role::kId:
      return Fail(Invalid(kRequest, "'id' must be a string"));
    case Role::kParamValue:
      return StartSkip(Role::kParamValue);  // refused, quoted, when it ends
    case Role::kName:
      input_.name = Field::kWrongType;
      return StartSkip(Role::kIgnore);
    case Role::kDatatype:
      input_.datatype = Field::kWrongType;
      return StartSkip(Role::kIgnore);
    case Role::kDim:
      input_.shape_bad = true;
      return StartSkip(Role::kIgnore);
    case Role::kBinaryDataSize:
      input_.binary_size = Field::kWrongType;
      return StartSkip(Role::kIgnore);
    case Role::kOutputName:
      output_.name = Field::kWrongType;
      return StartSkip(Role::kIgnore);
    case Role::kBinaryData:
      output_.binary_data = Field::kWrongType;
      return StartSkip(Role::kIgnore);
    case Role::kIgnore:
      return StartSkip(Role::kIgnore);
  }
  return true;
}

bool RequestParser::End(bool object) {
  --depth_;
  if (skip_ > 0) {
    if (--skip_ > 0) return true;
    if (skipping_ == Role::kParamValue) {
      const absl::string_view text(skip_start_, static_cast<size_t>(cursor_ - skip_start_));
      return Fail(NotAParameter(param_name_, JsonLeaf::Object(text)));
    }
    next_ = ElementRole();
    return true;
  }
  if (data_) {
    object ? data_->end_object() : data_->end_array();
    if (!data_->done()) return true;
    input_.count = data_->count();
    input_.bad = data_->bad();
    input_.bad_quote = data_->bad_quote();
    data_.reset();
    next_ = ElementRole();
    return true;
  }
  const Role role = frames_.back();
  frames_.pop_back();
  next_ = ElementRole();
  switch (role) {
    case Role::kInput:
      return FinishInput();
    case Role::kOutput:
      return FinishOutput();
    case Role::kRoot:
      return FinishRequest();
    default:
      return true;
  }
}

std::optional<DataType> RequestParser::DataTypeNow() const {
  // Without the shape the tensor's size is unknown, and a string grown by doubling can take
  // twice its final size: such data is read again when the input ends, into a reserved buffer.
  if (input_.datatype != Field::kPresent || input_.shape != Field::kPresent || input_.shape_bad ||
      input_.binary_size != Field::kAbsent) {
    return std::nullopt;
  }
  return proto::KserveDatatypeOf(input_.datatype_value);
}

size_t RequestParser::Reserve(DataType dtype, const char* from) const {
  if (dtype == DataType::kString || input_.shape != Field::kPresent || input_.shape_bad) return 0;
  for (int64_t d : input_.dims) {
    if (d < 0) return 0;
  }
  const std::optional<int64_t> n = core::CheckedNumElements(input_.dims);
  if (!n.has_value()) return 0;
  // Never more than the text can hold: each element takes at least two characters ("1,").
  const size_t most = static_cast<size_t>(json_.data() + json_.size() - from) / 2 + 1;
  return std::min(static_cast<size_t>(*n), most) * core::ElementSize(dtype);
}

void RequestParser::DecodeAgain(DataType dtype) {
  reparsed_ = true;
  input_.raw.clear();
  const char* cursor = nullptr;
  JsonDataDecoder decoder(dtype, &input_.raw, &cursor, Reserve(dtype, input_.data_start));
  SaxParse(input_.data_start, json_.data() + json_.size(), &cursor, &decoder, /*strict=*/false);
  input_.decoded_as = dtype;
  input_.count = decoder.count();
  input_.bad = decoder.bad();
  input_.bad_quote = decoder.bad_quote();
}

// The checks and messages of the document decoder's ParseInput, in its order.
bool RequestParser::FinishInput() {
  InputState& in = input_;
  std::string what = absl::StrCat("inputs[", input_index_, "]");
  if (in.name == Field::kWrongType) return Fail(Invalid(what, "'name' must be a string"));
  if (in.name == Field::kAbsent) return Fail(Invalid(what, "has no 'name'"));
  auto* tensor = request_->add_inputs();
  tensor->set_name(in.name_value);
  what = absl::StrCat("input '", tensor->name(), "'");

  if (in.datatype == Field::kWrongType) return Fail(Invalid(what, "'datatype' must be a string"));
  if (in.datatype == Field::kAbsent) return Fail(Invalid(what, "has no 'datatype'"));
  tensor->set_datatype(in.datatype_value);
  absl::StatusOr<DataType> dtype = ParseDatatype(tensor->datatype(), what);
  if (!dtype.ok()) return Fail(dtype.status());

  if (in.shape == Field::kWrongType) return Fail(Invalid(what, "'shape' must be an array"));
  if (in.shape == Field::kAbsent) return Fail(Invalid(what, "has no 'shape'"));
  for (int64_t d : in.dims) tensor->add_shape(d);
  if (in.shape_bad) return Fail(Invalid(what, "'shape' must be an array of integers"));

  if (in.parameters == Field::kWrongType) {
    return Fail(Invalid(what, "'parameters' must be an object"));
  }
  if (in.binary_size == Field::kWrongType) {
    return Fail(Invalid(what, "'binary_data_size' must be an integer"));
  }
  std::string* raw = request_->add_raw_input_contents();
  if (in.binary_size == Field::kPresent) {
    if (in.data != Field::kAbsent) {
      return Fail(
          Invalid(what, "has both 'data' and the binary_data_size parameter: one or the other"));
    }
    const int64_t size = in.binary_size_value;
    if (size < 0 || static_cast<uint64_t>(size) > binary_.size() - binary_at_) {
      return Fail(Invalid(
          what, absl::StrCat("binary_data_size ", size, " but only ", binary_.size() - binary_at_,
                             " bytes of binary data are left after the JSON")));
    }
    raw->assign(binary_.data() + binary_at_, static_cast<size_t>(size));
    binary_at_ += static_cast<size_t>(size);
    ++input_index_;
    return true;
  }
  if (in.data == Field::kAbsent)
    return Fail(Invalid(what, "has neither 'data' nor binary_data_size"));
  if (in.data == Field::kWrongType) return Fail(Invalid(what, "data must be an array"));
  if (in.decoded_as != *dtype) DecodeAgain(*dtype);
  if (!in.bad.ok()) {
    return Fail(Invalid(what, absl::StrCat("data element ", in.count, " (", in.bad_quote, ") ",
                                           in.bad.message(), " ", tensor->datatype())));
  }
  *raw = std::move(in.raw);
  // A shape the codec refuses (a negative dimension, too many elements) is left to it to say.
  bool negative = false;
  for (int64_t d : in.dims) negative = negative || d < 0;
  const std::optional<int64_t> n = core::CheckedNumElements(in.dims);
  if (!negative && n.has_value() && *n != in.count) {
    return Fail(Invalid(what, absl::StrCat("shape ", core::ShapeToString(in.dims), " has ", *n,
                                           " elements but 'data' holds ", in.count)));
  }
  ++input_index_;
  return true;
}

bool RequestParser::FinishOutput() {
  const std::string what = absl::StrCat("outputs[", output_index_, "]");
  if (output_.name == Field::kWrongType) return Fail(Invalid(what, "'name' must be a string"));
  if (output_.name == Field::kAbsent) return Fail(Invalid(what, "has no 'name'"));
  request_->add_outputs()->set_name(output_.name_value);
  if (output_.parameters == Field::kWrongType) {
    return Fail(Invalid(what, "'parameters' must be an object"));
  }
  if (output_.binary_data == Field::kWrongType) {
    return Fail(Invalid(what, "'binary_data' must be a boolean"));
  }
  if (output_.binary_data == Field::kPresent && !outputs_binary_.has_value()) {
    outputs_binary_ = output_.binary_data_value;
  }
  ++output_index_;
  return true;
}

bool RequestParser::FinishRequest() {
  if (!has_inputs_) return Fail(Invalid(kRequest, "has no 'inputs'"));
  if (binary_at_ != binary_.size()) {
    return Fail(Invalid(kRequest, absl::StrCat(binary_.size() - binary_at_,
                                               " bytes of binary data follow the JSON that no "
                                               "input's binary_data_size accounts for")));
  }
  const auto& params = request_->parameters();
  if (const auto it = params.find("binary_data_output"); it != params.end()) {
    options_->binary_output = it->second.bool_param();
  }
  if (const auto it = params.find("timeout"); it != params.end() && it->second.int64_param() > 0) {
    options_->timeout_us = it->second.int64_param();
  }
  if (outputs_binary_.has_value()) options_->binary_output = *outputs_binary_;
  return true;
}

}  // namespace

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
  RequestParser parser(json_text, binary, request, options);
  absl::Status status = parser.Parse();
  *held_bytes = parser.HeldBytes();
  return status;
}

}  // namespace tensorcompute::server::kserve
