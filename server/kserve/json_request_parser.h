// File: server/kserve/json_request_parser.h
//
// Private to ParseHttpInferRequest (json_request.cc): the SAX handler that decodes an HTTP infer
// request's JSON. nlohmann::json::sax_parse calls it for each token and no document is built.
//
// Two halves. json_request_parser.cc turns the parser's events into values: it tracks the
// nesting (bounded by kMaxJsonDepth, json_request.h), skips what the request does not keep, hands
// an input's `data` to a JsonDataDecoder (json_data.h), and asks a rule what each value is.
// json_request_rules.cc holds the rules, one section per container of the protocol (the
// request, its parameters, an input, an output): a field is one function that sees its value's
// first event (a scalar, or an object or array opening) and says what to do with the rest.
//
// A fault is recorded where it is found (an input's or an output's when its object ends) and
// reported once the whole text has parsed, in the order of the document decoder
// (tests/server/kserve_json_reference.cc, the reference it is tested against), so that a syntax
// error anywhere still comes first; only the bounds (json_request.h) stop the parse at once.
//
// Thread-safety: none; one parser per request, used once. It writes into the caller's request
// and options, and keeps views into the JSON text and the lexer's strings only while a call runs.

#ifndef TENSORCOMPUTE_SERVER_KSERVE_JSON_REQUEST_PARSER_H_
#define TENSORCOMPUTE_SERVER_KSERVE_JSON_REQUEST_PARSER_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "inference/grpc_predict_v2.pb.h"
#include "nlohmann/json.hpp"

#include "server/kserve/json_data.h"
#include "server/kserve/json_input.h"
#include "server/kserve/json_request.h"

namespace tensorcompute::server::kserve {

// The SAX handler of one request (nlohmann::json::sax_parse's interface). `json` is the
// request's JSON, `binary` the bytes after it (the binary data extension).
// REQUIRES: request and options outlive the parser.
class JsonRequestParser {
 public:
  using Json = nlohmann::json;

  JsonRequestParser(absl::string_view json, absl::string_view binary,
                    inference::ModelInferRequest* request, HttpInferOptions* options)
      : json_(json), binary_(binary), request_(request), options_(options) {}

  // Parses the request; returns ParseHttpInferRequest's status (json_request.h).
  absl::Status Parse();

  // An upper bound of what the parse held beyond the text (json_request.h).
  int64_t HeldBytes() const;

  // SAX events. Inside a skipped value they only count levels; inside `data` they go to the
  // data decoder; else each value's first event goes to its rule.
  bool null() { return skip_ > 0 || (data_ ? data_->null() : Scalar(JsonLeaf::Null())); }
  bool boolean(bool v) {
    return skip_ > 0 || (data_ ? data_->boolean(v) : Scalar(JsonLeaf::Bool(v)));
  }
  bool number_integer(Json::number_integer_t v) {
    return skip_ > 0 || (data_ ? data_->number_integer(v) : Scalar(JsonLeaf::Integer(v)));
  }
  bool number_unsigned(Json::number_unsigned_t v) {
    return skip_ > 0 || (data_ ? data_->number_unsigned(v) : Scalar(JsonLeaf::Unsigned(v)));
  }
  bool number_float(Json::number_float_t v, const Json::string_t& text) {
    longest_token_ = std::max(longest_token_, text.size());
    return skip_ > 0 || (data_ ? data_->number_float(v, text) : Scalar(JsonLeaf::Float(v)));
  }
  bool string(Json::string_t& v) {
    longest_token_ = std::max(longest_token_, v.size());
    return skip_ > 0 || (data_ ? data_->string(v) : Scalar(JsonLeaf::String(v)));
  }
  bool binary(Json::binary_t&) { return true; }  // not in JSON text
  bool start_object(size_t) { return Open(Value::Type::kObject); }
  bool end_object() { return Close(/*object=*/true); }
  bool start_array(size_t) { return Open(Value::Type::kArray); }
  bool end_array() { return Close(/*object=*/false); }
  bool key(Json::string_t& key);
  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception& error) {
    return Fail(
        absl::InvalidArgumentError(absl::StrCat("the request is not valid JSON: ", error.what())));
  }

  // --- Implementation details below ------------------------------------------------------
 private:
  // A value's first event, as a rule sees it: a scalar, or an object or an array opening.
  struct Value {
    enum class Type { kScalar, kObject, kArray };
    Type type;
    JsonLeaf leaf;  // kScalar: the value

    bool scalar() const { return type == Type::kScalar; }
    bool object() const { return type == Type::kObject; }
    bool array() const { return type == Type::kArray; }
    bool is_string() const { return scalar() && leaf.kind == JsonLeaf::Kind::kString; }
    bool is_bool() const { return scalar() && leaf.kind == JsonLeaf::Kind::kBool; }
    bool is_integer() const {
      return scalar() &&
             (leaf.kind == JsonLeaf::Kind::kInteger || leaf.kind == JsonLeaf::Kind::kUnsigned);
    }
    // An integer's value (an unsigned one as int64_t, wrapping); 0 for other scalars.
    int64_t integer() const {
      return leaf.kind == JsonLeaf::Kind::kUnsigned ? static_cast<int64_t>(leaf.u) : leaf.i;
    }
  };
  struct Then;
  // What a value is to the request: a field's or an element's rule (json_request_rules.cc).
  using Rule = Then (JsonRequestParser::*)(const Value& value);
  // An object's fields: the rule of the value of `key`; nullptr stops the parse (a bound is
  // passed: status_ says which).
  using Fields = Rule (JsonRequestParser::*)(const std::string& key);
  // Called when a container, a skipped value or a decoded `data` ends; `text` is a skipped or
  // decoded value's JSON.
  using Ended = void (JsonRequestParser::*)(absl::string_view text);
  // A protocol container that is open: the rules of its values.
  struct Container {
    Fields fields = nullptr;  // an object's
    Rule element = nullptr;   // an array's: every element's
    Ended ended = nullptr;    // or nullptr
  };
  // What the parser does with the rest of a value once its rule has seen the first event.
  struct Then {
    enum class Do { kNothing, kSkip, kEnter, kDecode, kStop };
    Do what = Do::kNothing;
    Container container;    // kEnter
    Ended ended = nullptr;  // kSkip, kDecode: called when the value ends
  };
  // A rule's answers. Pass: a scalar is taken, a container skipped. SkipThen: `ended` is called
  // with the skipped text. Object and Array: the value is a container whose values have rules.
  // Decode: `data_` was set for the value, `ended` is called when it ends. Stop: a bound.
  static Then Pass(const Value& value) {
    return {value.scalar() ? Then::Do::kNothing : Then::Do::kSkip, {}, nullptr};
  }
  static Then SkipThen(Ended ended) { return {Then::Do::kSkip, {}, ended}; }
  static Then Object(Fields fields, Ended ended = nullptr) {
    return {Then::Do::kEnter, {fields, nullptr, ended}, nullptr};
  }
  static Then Array(Rule element) {
    return {Then::Do::kEnter, {nullptr, element, nullptr}, nullptr};
  }
  static Then Decode(Ended ended) { return {Then::Do::kDecode, {}, ended}; }
  Then Stop(absl::Status status) {
    Fail(std::move(status));
    return {Then::Do::kStop, {}, nullptr};
  }

  // The events' part (json_request_parser.cc).
  bool Fail(absl::Status status) {
    status_ = std::move(status);
    return false;
  }
  bool Scalar(const JsonLeaf& leaf) { return Apply((this->*rule_)({Value::Type::kScalar, leaf})); }
  bool Open(Value::Type type);
  bool Close(bool object);
  bool Apply(const Then& then);
  void ValueEnded();  // a skipped or decoded value has ended: calls ended_
  // The rule of the next value in the innermost container (for an object: until its key).
  Rule ElementRule() const {
    return frames_.empty() || frames_.back().element == nullptr ? &JsonRequestParser::Ignore
                                                                : frames_.back().element;
  }

  // The rules (json_request_rules.cc), by container. A key given twice: the last value counts,
  // faults and all.
  Then Ignore(const Value& value) { return Pass(value); }
  // The request: the JSON value, an object {"id", "parameters", "inputs", "outputs"}.
  Then Request(const Value& value);
  Rule RequestFields(const std::string& key);
  Then Id(const Value& value);
  Then Inputs(const Value& value);
  Then Outputs(const Value& value);
  // The request's "parameters": {name: a boolean, a number or a string}.
  Then Parameters(const Value& value);
  Rule ParameterName(const std::string& key);
  Then ParameterValue(const Value& value);
  void NotScalarParameter(absl::string_view text);
  // An input: {"name", "datatype", "shape": [dims], "parameters": {"binary_data_size"},
  // "data"}.
  Then Input(const Value& value);
  Rule InputFields(const std::string& key);
  Then InputName(const Value& value);
  Then Datatype(const Value& value);
  Then Shape(const Value& value);
  Then Dim(const Value& value);
  Then InputParameters(const Value& value);
  Rule InputParameterFields(const std::string& key);
  Then BinaryDataSize(const Value& value);
  Then Data(const Value& value);
  void DataDecoded(absl::string_view text);
  void InputEnded(absl::string_view text);
  std::string InputWhat() const {
    return input_.name == JsonField::kPresent ? absl::StrCat("input '", input_.name_value, "'")
                                              : absl::StrCat("inputs[", input_index_, "]");
  }
  // An output: {"name", "parameters": {"binary_data"}}.
  Then Output(const Value& value);
  Rule OutputFields(const std::string& key);
  Then OutputName(const Value& value);
  Then OutputParameters(const Value& value);
  Rule OutputParameterFields(const std::string& key);
  Then BinaryData(const Value& value);
  void OutputEnded(absl::string_view text);
  absl::Status CheckOutput();
  // The text has parsed: the first fault in the document decoder's order
  // (tests/server/kserve_json_reference.cc), else OK (and the options set).
  absl::Status Finish();

  // The request's faults, kept until the whole text has parsed (a syntax error anywhere comes
  // first, as when the document was built first) and then reported in the document decoder's
  // order (Finish; tests/server/kserve_json_reference.cc): the first of each kind.
  enum Fault {
    kRootFault,
    kIdFault,
    kParametersFault,
    kInputsFault,
    kInputFault,
    kOutputsFault,
    kOutputFault,
    kFaults
  };
  void Record(Fault fault, absl::Status status) {
    if (!faults_[fault].has_value()) faults_[fault] = std::move(status);
  }

  // An output's fields until its object ends.
  struct OutputState {
    JsonField name = JsonField::kAbsent;
    std::string name_value;
    JsonField parameters = JsonField::kAbsent;
    JsonField binary_data = JsonField::kAbsent;
    bool binary_data_value = false;
  };

  const absl::string_view json_;
  const absl::string_view binary_;
  inference::ModelInferRequest* const request_;
  HttpInferOptions* const options_;
  const char* cursor_ = nullptr;  // the parser's position in json_
  absl::Status status_;
  // The events' state.
  int depth_ = 0;                            // arrays and objects open
  std::vector<Container> frames_;            // the protocol containers open (at most four)
  Rule rule_ = &JsonRequestParser::Request;  // the next value's
  int skip_ = 0;                             // > 0: levels open in a value being skipped
  const char* value_start_ = nullptr;        // a skipped or decoded value's first character
  Ended ended_ = nullptr;                    // called when it ends
  std::optional<JsonDataDecoder> data_;      // set while a `data` value is being decoded
  size_t longest_token_ = 0;                 // string or number, as the lexer buffers it
  bool reparsed_ = false;                    // some `data` was parsed a second time
  // The rules' state.
  std::optional<absl::Status> faults_[kFaults];
  std::map<std::string, absl::Status> parameter_faults_;  // by name: the first reported
  std::string param_name_;
  JsonField inputs_ = JsonField::kAbsent;
  int input_index_ = 0;
  size_t binary_at_ = 0;
  JsonInput input_;
  int output_index_ = 0;
  OutputState output_;
  std::optional<bool> outputs_binary_;  // the first output's binary_data
};

}  // namespace tensorcompute::server::kserve

#endif  // TENSORCOMPUTE_SERVER_KSERVE_JSON_REQUEST_PARSER_H_
