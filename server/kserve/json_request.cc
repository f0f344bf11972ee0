// JsonRequestParser (json_request.h) and ParseHttpInferRequest (json.h) on it.
//
// Why events and not a document: a document costs many times its text (4.5 GB for a 60 MiB body
// of '[', issue 22), and a request's tensors are its bulk: they are written once, where they go.

#include "server/kserve/json_request.h"

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

#include "core/dtype.h"
#include "core/status_macros.h"
#include "server/kserve/json.h"
#include "server/kserve/json_data.h"
#include "server/kserve/json_input.h"

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

}  // namespace

absl::Status JsonRequestParser::Parse() {
  const bool parsed = ParseJsonValue(json_.data(), json_.data() + json_.size(), &cursor_, this,
                                     /*strict=*/true);
  TC_RETURN_IF_ERROR(status_);  // not JSON, or past a bound
  if (!parsed) return absl::InternalError("the JSON parser stopped without a reason");
  return Finish();
}

int64_t JsonRequestParser::HeldBytes() const {
  // nlohmann's lexer keeps a token twice (unescaped, and as read), each in a buffer grown by
  // doubling; a second parse of `data` has its own lexer beside the first.
  const int64_t lexers = reparsed_ ? 2 : 1;
  return static_cast<int64_t>(request_->SpaceUsedLong()) +
         lexers * 4 * static_cast<int64_t>(longest_token_) + kParserStateBytes;
}

bool JsonRequestParser::key(Json::string_t& key) {
  longest_token_ = std::max(longest_token_, key.size());
  if (skip_ > 0) return true;
  if (data_) return data_->key(key);
  switch (frames_.back()) {
    case Role::kRoot:  // a key given twice: the last value counts, faults and all
      if (key == "id") {
        faults_[kIdFault].reset();
        next_ = Role::kId;
      } else if (key == "parameters") {
        faults_[kParametersFault].reset();
        parameter_faults_.clear();
        next_ = Role::kParams;
      } else if (key == "inputs") {
        faults_[kInputsFault].reset();
        faults_[kInputFault].reset();
        next_ = Role::kInputs;
      } else if (key == "outputs") {
        faults_[kOutputsFault].reset();
        faults_[kOutputFault].reset();
        next_ = Role::kOutputs;
      } else {
        next_ = Role::kIgnore;
      }
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
        input_.name = JsonField::kAbsent;
        next_ = Role::kName;
      } else if (key == "datatype") {
        input_.datatype = JsonField::kAbsent;
        next_ = Role::kDatatype;
      } else if (key == "shape") {
        input_.shape = JsonField::kAbsent;
        input_.shape_bad = false;
        input_.dims.clear();
        next_ = Role::kShape;
      } else if (key == "parameters") {
        input_.parameters = input_.binary_size = JsonField::kAbsent;
        next_ = Role::kInputParams;
      } else if (key == "data") {
        input_.data = JsonField::kAbsent;
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
        output_.name = JsonField::kAbsent;
        next_ = Role::kOutputName;
      } else if (key == "parameters") {
        output_.parameters = output_.binary_data = JsonField::kAbsent;
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

bool JsonRequestParser::Leaf(const JsonLeaf& leaf) {
  const bool is_string = leaf.kind == Kind::kString;
  const bool is_integer = leaf.kind == Kind::kInteger || leaf.kind == Kind::kUnsigned;
  const int64_t integer = leaf.kind == Kind::kUnsigned ? static_cast<int64_t>(leaf.u) : leaf.i;
  switch (next_) {
    case Role::kRoot:
      Record(kRootFault, Invalid(kRequest, "must be a JSON object"));
      break;
    case Role::kId:
      if (!is_string) {
        Record(kIdFault, Invalid(kRequest, "'id' must be a string"));
        break;
      }
      request_->set_id(std::string(leaf.text));
      break;
    case Role::kParams:
      Record(kParametersFault, Invalid(kRequest, "'parameters' must be an object"));
      break;
    case Role::kParamValue:
      if (absl::Status converted =
              ToParameter(param_name_, leaf, &(*request_->mutable_parameters())[param_name_]);
          !converted.ok()) {
        parameter_faults_[param_name_] = std::move(converted);
      } else {
        parameter_faults_.erase(param_name_);
      }
      break;
    case Role::kInputs:
      inputs_ = JsonField::kWrongType;
      Record(kInputsFault, Invalid(kRequest, "'inputs' must be an array"));
      break;
    case Role::kInput:
      Record(kInputFault, Invalid(absl::StrCat("inputs[", input_index_, "]"), "must be an object"));
      break;
    case Role::kName:
      input_.name = is_string ? JsonField::kPresent : JsonField::kWrongType;
      if (is_string) input_.name_value = std::string(leaf.text);
      break;
    case Role::kDatatype:
      input_.datatype = is_string ? JsonField::kPresent : JsonField::kWrongType;
      if (is_string) input_.datatype_value = std::string(leaf.text);
      break;
    case Role::kShape:
      input_.shape = JsonField::kWrongType;
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
      input_.parameters = JsonField::kWrongType;
      break;
    case Role::kBinaryDataSize:
      input_.binary_size = is_integer ? JsonField::kPresent : JsonField::kWrongType;
      input_.binary_size_value = integer;
      break;
    case Role::kData:
      input_.data = JsonField::kWrongType;
      break;
    case Role::kOutputs:
      Record(kOutputsFault, Invalid(kRequest, "'outputs' must be an array"));
      break;
    case Role::kOutput:
      Record(kOutputFault,
             Invalid(absl::StrCat("outputs[", output_index_, "]"), "must be an object"));
      break;
    case Role::kOutputName:
      output_.name = is_string ? JsonField::kPresent : JsonField::kWrongType;
      if (is_string) output_.name_value = std::string(leaf.text);
      break;
    case Role::kOutputParams:
      output_.parameters = JsonField::kWrongType;
      break;
    case Role::kBinaryData:
      output_.binary_data = leaf.kind == Kind::kBool ? JsonField::kPresent : JsonField::kWrongType;
      output_.binary_data_value = leaf.b;
      break;
    case Role::kIgnore:
      break;
  }
  next_ = ElementRole();
  return true;
}

bool JsonRequestParser::Start(bool object) {
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
      if (!object) {
        Record(kRootFault, Invalid(kRequest, "must be a JSON object"));
        return StartSkip(Role::kIgnore);
      }
      return Push(Role::kRoot);
    case Role::kParams:
      if (!object) {
        Record(kParametersFault, Invalid(kRequest, "'parameters' must be an object"));
        return StartSkip(Role::kIgnore);
      }
      request_->mutable_parameters()->clear();
      return Push(Role::kParams);
    case Role::kInputs:
      if (object) {
        inputs_ = JsonField::kWrongType;
        Record(kInputsFault, Invalid(kRequest, "'inputs' must be an array"));
        return StartSkip(Role::kIgnore);
      }
      inputs_ = JsonField::kPresent;
      request_->clear_inputs();
      request_->clear_raw_input_contents();
      input_index_ = 0;
      binary_at_ = 0;
      return Push(Role::kInputs);
    case Role::kInput:
      if (!object) {
        Record(kInputFault,
               Invalid(absl::StrCat("inputs[", input_index_, "]"), "must be an object"));
        return StartSkip(Role::kIgnore);
      }
      if (faults_[kInputFault].has_value()) return StartSkip(Role::kIgnore);  // as it stopped
      if (input_index_ >= kMaxJsonListLength) {
        return Fail(Invalid(kRequest, absl::StrCat("more than ", kMaxJsonListLength, " inputs")));
      }
      input_ = JsonInput();
      return Push(Role::kInput);
    case Role::kShape:
      if (object) {
        input_.shape = JsonField::kWrongType;
        return StartSkip(Role::kIgnore);
      }
      input_.shape = JsonField::kPresent;
      return Push(Role::kShape);
    case Role::kInputParams:
      if (!object) {
        input_.parameters = JsonField::kWrongType;
        return StartSkip(Role::kIgnore);
      }
      input_.parameters = JsonField::kPresent;
      return Push(Role::kInputParams);
    case Role::kData:
      if (object) {
        input_.data = JsonField::kWrongType;
        return StartSkip(Role::kIgnore);
      }
      input_.data = JsonField::kPresent;
      input_.data_start = cursor_ - 1;
      if (const std::optional<DataType> dtype = input_.DecodeAtOnceAs()) {
        const size_t left = static_cast<size_t>(json_.data() + json_.size() - input_.data_start);
        data_.emplace(*dtype, &input_.raw, &cursor_, input_.ReserveFor(*dtype, left));
        input_.decoded_as = *dtype;
        return data_->start_array(0);
      }
      return StartSkip(Role::kIgnore);  // decoded from the text when the input ends
    case Role::kOutputs:
      if (object) {
        Record(kOutputsFault, Invalid(kRequest, "'outputs' must be an array"));
        return StartSkip(Role::kIgnore);
      }
      request_->clear_outputs();
      output_index_ = 0;
      outputs_binary_.reset();
      return Push(Role::kOutputs);
    case Role::kOutput:
      if (!object) {
        Record(kOutputFault,
               Invalid(absl::StrCat("outputs[", output_index_, "]"), "must be an object"));
        return StartSkip(Role::kIgnore);
      }
      if (faults_[kOutputFault].has_value()) return StartSkip(Role::kIgnore);
      if (output_index_ >= kMaxJsonListLength) {
        return Fail(Invalid(kRequest, absl::StrCat("more than ", kMaxJsonListLength, " outputs")));
      }
      output_ = OutputState();
      return Push(Role::kOutput);
    case Role::kOutputParams:
      if (!object) {
        output_.parameters = JsonField::kWrongType;
        return StartSkip(Role::kIgnore);
      }
      output_.parameters = JsonField::kPresent;
      return Push(Role::kOutputParams);
    case Role::kId:
      Record(kIdFault, Invalid(kRequest, "'id' must be a string"));
      return StartSkip(Role::kIgnore);
    case Role::kParamValue:
      return StartSkip(Role::kParamValue);  // refused, quoted, when it ends
    case Role::kName:
      input_.name = JsonField::kWrongType;
      return StartSkip(Role::kIgnore);
    case Role::kDatatype:
      input_.datatype = JsonField::kWrongType;
      return StartSkip(Role::kIgnore);
    case Role::kDim:
      input_.shape_bad = true;
      return StartSkip(Role::kIgnore);
    case Role::kBinaryDataSize:
      input_.binary_size = JsonField::kWrongType;
      return StartSkip(Role::kIgnore);
    case Role::kOutputName:
      output_.name = JsonField::kWrongType;
      return StartSkip(Role::kIgnore);
    case Role::kBinaryData:
      output_.binary_data = JsonField::kWrongType;
      return StartSkip(Role::kIgnore);
    case Role::kIgnore:
      return StartSkip(Role::kIgnore);
  }
  return true;
}

bool JsonRequestParser::End(bool object) {
  --depth_;
  if (skip_ > 0) {
    if (--skip_ > 0) return true;
    if (skipping_ == Role::kParamValue) {
      const absl::string_view text(skip_start_, static_cast<size_t>(cursor_ - skip_start_));
      parameter_faults_[param_name_] = NotAParameter(param_name_, JsonLeaf::Object(text));
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
  if (role == Role::kInput) FinishInput();
  if (role == Role::kOutput) FinishOutput();
  return true;
}

void JsonRequestParser::FinishInput() {
  bool reparsed = false;
  absl::Status finished =
      FinishJsonInput(&input_, input_index_, json_, binary_, &binary_at_, request_, &reparsed);
  reparsed_ = reparsed_ || reparsed;
  if (!finished.ok()) {
    Record(kInputFault, std::move(finished));
    return;
  }
  ++input_index_;
}

void JsonRequestParser::FinishOutput() {
  absl::Status finished = CheckOutput();
  if (!finished.ok()) {
    Record(kOutputFault, std::move(finished));
    return;
  }
  if (output_.binary_data == JsonField::kPresent && !outputs_binary_.has_value()) {
    outputs_binary_ = output_.binary_data_value;
  }
  ++output_index_;
}

// The checks and messages of the document decoder (tests/server/kserve_json_reference.cc, the
// reference it is tested against), in its order.
absl::Status JsonRequestParser::CheckOutput() {
  const std::string what = absl::StrCat("outputs[", output_index_, "]");
  if (output_.name == JsonField::kWrongType) return Invalid(what, "'name' must be a string");
  if (output_.name == JsonField::kAbsent) return Invalid(what, "has no 'name'");
  request_->add_outputs()->set_name(output_.name_value);
  if (output_.parameters == JsonField::kWrongType) {
    return Invalid(what, "'parameters' must be an object");
  }
  if (output_.binary_data == JsonField::kWrongType) {
    return Invalid(what, "'binary_data' must be a boolean");
  }
  return absl::OkStatus();
}

// The document decoder checked the request in this order once the text had parsed.
absl::Status JsonRequestParser::Finish() {
  for (Fault fault : {kRootFault, kIdFault, kParametersFault}) {
    if (faults_[fault].has_value()) return *faults_[fault];
  }
  if (!parameter_faults_.empty()) return parameter_faults_.begin()->second;  // first by name
  if (faults_[kInputsFault].has_value()) return *faults_[kInputsFault];
  if (inputs_ == JsonField::kAbsent) return Invalid(kRequest, "has no 'inputs'");
  if (faults_[kInputFault].has_value()) return *faults_[kInputFault];
  if (binary_at_ != binary_.size()) {
    return Invalid(kRequest, absl::StrCat(binary_.size() - binary_at_,
                                          " bytes of binary data follow the JSON that no "
                                          "input's binary_data_size accounts for"));
  }
  for (Fault fault : {kOutputsFault, kOutputFault}) {
    if (faults_[fault].has_value()) return *faults_[fault];
  }
  const auto& params = request_->parameters();
  if (const auto it = params.find("binary_data_output"); it != params.end()) {
    options_->binary_output = it->second.bool_param();
  }
  if (const auto it = params.find("timeout"); it != params.end() && it->second.int64_param() > 0) {
    options_->timeout_us = it->second.int64_param();
  }
  if (outputs_binary_.has_value()) options_->binary_output = *outputs_binary_;
  return absl::OkStatus();
}

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
  JsonRequestParser parser(json_text, binary, request, options);
  absl::Status status = parser.Parse();
  *held_bytes = parser.HeldBytes();
  return status;
}

}  // namespace tensorcompute::server::kserve
