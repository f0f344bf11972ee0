// JsonRequestParser's rules (json_request_parser.h): what each value of a request's JSON is to
// the request, one section per protocol container. A field's rule sees its value's first event:
// a scalar it takes or refuses, a container it enters, skips or decodes. A field given the
// wrong JSON type is recorded, not refused at once: the faults are reported in the order of the
// document decoder (tests/server/kserve_json_reference.cc, the reference this is tested
// against) once the text has parsed (Finish, at the end of this file).

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

#include "core/dtype.h"
#include "server/kserve/json_data.h"
#include "server/kserve/json_input.h"
#include "server/kserve/json_request.h"
#include "server/kserve/json_request_parser.h"

namespace tensorcompute::server::kserve {
namespace {

using core::DataType;
using Kind = JsonLeaf::Kind;

constexpr absl::string_view kRequest = "the request";

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

// A field of an input or an output: present with a value of the right type, or of the wrong one.
JsonField Typed(bool right) { return right ? JsonField::kPresent : JsonField::kWrongType; }

}  // namespace

// --- The request ---------------------------------------------------------------------------

JsonRequestParser::Then JsonRequestParser::Request(const Value& value) {
  if (!value.object()) {
    Record(kRootFault, Invalid(kRequest, "must be a JSON object"));
    return Pass(value);
  }
  return Object(&JsonRequestParser::RequestFields);
}

JsonRequestParser::Rule JsonRequestParser::RequestFields(const std::string& key) {
  if (key == "id") return &JsonRequestParser::Id;
  if (key == "parameters") return &JsonRequestParser::Parameters;
  if (key == "inputs") return &JsonRequestParser::Inputs;
  if (key == "outputs") return &JsonRequestParser::Outputs;
  return &JsonRequestParser::Ignore;
}

JsonRequestParser::Then JsonRequestParser::Id(const Value& value) {
  faults_[kIdFault].reset();
  if (!value.is_string()) {
    Record(kIdFault, Invalid(kRequest, "'id' must be a string"));
    return Pass(value);
  }
  request_->set_id(std::string(value.leaf.text));
  return Pass(value);
}

JsonRequestParser::Then JsonRequestParser::Inputs(const Value& value) {
  faults_[kInputsFault].reset();
  faults_[kInputFault].reset();
  if (!value.array()) {
    inputs_ = JsonField::kWrongType;
    Record(kInputsFault, Invalid(kRequest, "'inputs' must be an array"));
    return Pass(value);
  }
  inputs_ = JsonField::kPresent;
  request_->clear_inputs();
  request_->clear_raw_input_contents();
  input_index_ = 0;
  binary_at_ = 0;
  return Array(&JsonRequestParser::Input);
}

JsonRequestParser::Then JsonRequestParser::Outputs(const Value& value) {
  faults_[kOutputsFault].reset();
  faults_[kOutputFault].reset();
  if (!value.array()) {
    Record(kOutputsFault, Invalid(kRequest, "'outputs' must be an array"));
    return Pass(value);
  }
  request_->clear_outputs();
  output_index_ = 0;
  outputs_binary_.reset();
  return Array(&JsonRequestParser::Output);
}

// --- The request's parameters --------------------------------------------------------------

JsonRequestParser::Then JsonRequestParser::Parameters(const Value& value) {
  faults_[kParametersFault].reset();
  parameter_faults_.clear();
  if (!value.object()) {
    Record(kParametersFault, Invalid(kRequest, "'parameters' must be an object"));
    return Pass(value);
  }
  request_->mutable_parameters()->clear();
  return Object(&JsonRequestParser::ParameterName);
}

JsonRequestParser::Rule JsonRequestParser::ParameterName(const std::string& key) {
  if (request_->parameters().size() >= kMaxJsonListLength &&
      request_->parameters().count(key) == 0) {
    Fail(Invalid(kRequest, absl::StrCat("more than ", kMaxJsonListLength, " parameters")));
    return nullptr;
  }
  param_name_ = key;
  return &JsonRequestParser::ParameterValue;
}

JsonRequestParser::Then JsonRequestParser::ParameterValue(const Value& value) {
  if (!value.scalar()) return SkipThen(&JsonRequestParser::NotScalarParameter);
  if (absl::Status converted =
          ToParameter(param_name_, value.leaf, &(*request_->mutable_parameters())[param_name_]);
      !converted.ok()) {
    parameter_faults_[param_name_] = std::move(converted);
  } else {
    parameter_faults_.erase(param_name_);
  }
  return Pass(value);
}

// An object or an array, refused with its text quoted.
void JsonRequestParser::NotScalarParameter(absl::string_view text) {
  parameter_faults_[param_name_] = NotAParameter(param_name_, JsonLeaf::Object(text));
}

// --- An input ------------------------------------------------------------------------------

JsonRequestParser::Then JsonRequestParser::Input(const Value& value) {
  if (!value.object()) {
    Record(kInputFault, Invalid(absl::StrCat("inputs[", input_index_, "]"), "must be an object"));
    return Pass(value);
  }
  // After a faulty input, kserve_json_reference.cc stopped reading the inputs.
  if (faults_[kInputFault].has_value()) return Pass(value);
  if (input_index_ >= kMaxJsonListLength) {
    return Stop(Invalid(kRequest, absl::StrCat("more than ", kMaxJsonListLength, " inputs")));
  }
  input_ = JsonInput();
  return Object(&JsonRequestParser::InputFields, &JsonRequestParser::InputEnded);
}

JsonRequestParser::Rule JsonRequestParser::InputFields(const std::string& key) {
  if (key == "name") return &JsonRequestParser::InputName;
  if (key == "datatype") return &JsonRequestParser::Datatype;
  if (key == "shape") return &JsonRequestParser::Shape;
  if (key == "parameters") return &JsonRequestParser::InputParameters;
  if (key == "data") return &JsonRequestParser::Data;
  return &JsonRequestParser::Ignore;
}

JsonRequestParser::Then JsonRequestParser::InputName(const Value& value) {
  input_.name = Typed(value.is_string());
  if (value.is_string()) input_.name_value = std::string(value.leaf.text);
  return Pass(value);
}

JsonRequestParser::Then JsonRequestParser::Datatype(const Value& value) {
  input_.datatype = Typed(value.is_string());
  if (value.is_string()) input_.datatype_value = std::string(value.leaf.text);
  return Pass(value);
}

JsonRequestParser::Then JsonRequestParser::Shape(const Value& value) {
  input_.shape_bad = false;
  input_.dims.clear();
  input_.shape = Typed(value.array());
  return value.array() ? Array(&JsonRequestParser::Dim) : Pass(value);
}

JsonRequestParser::Then JsonRequestParser::Dim(const Value& value) {
  if (input_.shape_bad) return Pass(value);
  if (!value.is_integer()) {
    input_.shape_bad = true;
    return Pass(value);
  }
  if (input_.dims.size() >= kMaxJsonListLength) {
    return Stop(Invalid(InputWhat(),
                        absl::StrCat("'shape' has more than ", kMaxJsonListLength, " dimensions")));
  }
  input_.dims.push_back(value.integer());
  return Pass(value);
}

JsonRequestParser::Then JsonRequestParser::InputParameters(const Value& value) {
  input_.binary_size = JsonField::kAbsent;
  input_.parameters = Typed(value.object());
  return value.object() ? Object(&JsonRequestParser::InputParameterFields) : Pass(value);
}

JsonRequestParser::Rule JsonRequestParser::InputParameterFields(const std::string& key) {
  return key == "binary_data_size" ? &JsonRequestParser::BinaryDataSize
                                   : &JsonRequestParser::Ignore;
}

JsonRequestParser::Then JsonRequestParser::BinaryDataSize(const Value& value) {
  input_.binary_size = Typed(value.is_integer());
  input_.binary_size_value = value.integer();
  return Pass(value);
}

// Decoded as it is parsed when the datatype and the shape came first (JsonInput::DecodeAtOnceAs),
// else skipped, and decoded from the text when the input ends (FinishJsonInput).
JsonRequestParser::Then JsonRequestParser::Data(const Value& value) {
  input_.decoded_as.reset();
  input_.raw.clear();
  input_.data = Typed(value.array());
  if (!value.array()) return Pass(value);
  input_.data_start = cursor_ - 1;
  const std::optional<DataType> dtype = input_.DecodeAtOnceAs();
  if (!dtype.has_value()) return Pass(value);
  const size_t left = static_cast<size_t>(json_.data() + json_.size() - input_.data_start);
  data_.emplace(*dtype, &input_.raw, &cursor_, input_.ReserveFor(*dtype, left));
  input_.decoded_as = *dtype;
  return Decode(&JsonRequestParser::DataDecoded);
}

void JsonRequestParser::DataDecoded(absl::string_view) {
  input_.count = data_->count();
  input_.bad = data_->bad();
  input_.bad_quote = data_->bad_quote();
}

// The input is checked and added to the request; a fault stops the inputs that follow.
void JsonRequestParser::InputEnded(absl::string_view) {
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

// --- An output -----------------------------------------------------------------------------

JsonRequestParser::Then JsonRequestParser::Output(const Value& value) {
  if (!value.object()) {
    Record(kOutputFault,
           Invalid(absl::StrCat("outputs[", output_index_, "]"), "must be an object"));
    return Pass(value);
  }
  // After a faulty output, kserve_json_reference.cc stopped reading the outputs.
  if (faults_[kOutputFault].has_value()) return Pass(value);
  if (output_index_ >= kMaxJsonListLength) {
    return Stop(Invalid(kRequest, absl::StrCat("more than ", kMaxJsonListLength, " outputs")));
  }
  output_ = OutputState();
  return Object(&JsonRequestParser::OutputFields, &JsonRequestParser::OutputEnded);
}

JsonRequestParser::Rule JsonRequestParser::OutputFields(const std::string& key) {
  if (key == "name") return &JsonRequestParser::OutputName;
  if (key == "parameters") return &JsonRequestParser::OutputParameters;
  return &JsonRequestParser::Ignore;
}

JsonRequestParser::Then JsonRequestParser::OutputName(const Value& value) {
  output_.name = Typed(value.is_string());
  if (value.is_string()) output_.name_value = std::string(value.leaf.text);
  return Pass(value);
}

JsonRequestParser::Then JsonRequestParser::OutputParameters(const Value& value) {
  output_.binary_data = JsonField::kAbsent;
  output_.parameters = Typed(value.object());
  return value.object() ? Object(&JsonRequestParser::OutputParameterFields) : Pass(value);
}

JsonRequestParser::Rule JsonRequestParser::OutputParameterFields(const std::string& key) {
  return key == "binary_data" ? &JsonRequestParser::BinaryData : &JsonRequestParser::Ignore;
}

JsonRequestParser::Then JsonRequestParser::BinaryData(const Value& value) {
  output_.binary_data = Typed(value.is_bool());
  output_.binary_data_value = value.leaf.b;
  return Pass(value);
}

// The output is checked and added to the request; a fault stops the outputs that follow.
void JsonRequestParser::OutputEnded(absl::string_view) {
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

// The checks and messages of the document decoder (tests/server/kserve_json_reference.cc), in
// its order.
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

// --- The faults, in order --------------------------------------------------------------------

// The document decoder (tests/server/kserve_json_reference.cc) checked the request in this
// order once the text had parsed.
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

}  // namespace tensorcompute::server::kserve
