// File: server/kserve/json_request.h
//
// The SAX handler that decodes an HTTP infer request's JSON (ParseHttpInferRequest, json.h):
// nlohmann::json::sax_parse calls it for each token. Only the protocol's containers keep state
// (the request, the inputs and outputs arrays, one input or output, a parameters object, a
// shape): `frames_` is at most four deep, and any other value is skipped with a depth count.
// An input's `data` goes to a JsonDataDecoder (json_data.h) while it is parsed, or is parsed
// again when the input ends (json_input.h). A fault is recorded where it is found (an input's or
// an output's when its object ends) and reported once the whole text has parsed, in the order of
// the document decoder (tests/server/kserve_json_reference.cc, the reference it is tested against)
// that came before, so that a syntax error anywhere still comes first; only the bounds (json.h)
// stop the parse at once.
//
// Thread-safety: none; one parser per request, used once. It writes into the caller's request
// and options, and keeps views into the JSON text and the lexer's strings only while a call runs.

#ifndef TENSORCOMPUTE_SERVER_KSERVE_JSON_REQUEST_H_
#define TENSORCOMPUTE_SERVER_KSERVE_JSON_REQUEST_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "inference/grpc_predict_v2.pb.h"
#include "nlohmann/json.hpp"

#include "server/kserve/json.h"
#include "server/kserve/json_data.h"
#include "server/kserve/json_input.h"

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

  // Parses the request; returns ParseHttpInferRequest's status (json.h).
  absl::Status Parse();

  // An upper bound of what the parse held beyond the text (json.h).
  int64_t HeldBytes() const;

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

  // --- Implementation details below ------------------------------------------------------
 private:
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

  // An output's fields until its object ends.
  struct OutputState {
    JsonField name = JsonField::kAbsent;
    std::string name_value;
    JsonField parameters = JsonField::kAbsent;
    JsonField binary_data = JsonField::kAbsent;
    bool binary_data_value = false;
  };

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
    return input_.name == JsonField::kPresent ? absl::StrCat("input '", input_.name_value, "'")
                                              : absl::StrCat("inputs[", input_index_, "]");
  }
  // An input's or an output's object has ended: check it and add it to the request.
  void FinishInput();
  void FinishOutput();
  absl::Status CheckOutput();
  // The text has parsed: the first fault in the document decoder's order, else OK (and the
  // options set).
  absl::Status Finish();
  void Record(int fault, absl::Status status) {
    if (!faults_[fault].has_value()) faults_[fault] = std::move(status);
  }

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
  JsonField inputs_ = JsonField::kAbsent;
  // The request's faults, kept until the whole text has parsed (a syntax error anywhere comes
  // first, as when the document was built first) and then reported in the document decoder's
  // order (Finish): the first of each kind.
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
  std::optional<absl::Status> faults_[kFaults];
  std::map<std::string, absl::Status> parameter_faults_;  // by name: the first reported
  int input_index_ = 0;
  size_t binary_at_ = 0;
  JsonInput input_;
  int output_index_ = 0;
  OutputState output_;
  std::optional<bool> outputs_binary_;  // the first output's binary_data
  size_t longest_token_ = 0;            // string or number, as the lexer buffers it
  bool reparsed_ = false;               // some `data` was parsed a second time
};

}  // namespace tensorcompute::server::kserve

#endif  // TENSORCOMPUTE_SERVER_KSERVE_JSON_REQUEST_H_
