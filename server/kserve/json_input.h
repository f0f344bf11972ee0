// File: server/kserve/json_input.h
//
// One input of an HTTP infer request's JSON ({"name", "datatype", "shape", "parameters",
// "data"}), gathered field by field as the request parser (json_request_rules.cc) meets them, in
// any order, and checked when its object ends: in the order, and with the words, of the
// document-building decoder that came before (tests/server/kserve_json_reference.cc), so that an
// input with one fault gets the same message whatever the order of its fields.
//
// Thread-safety: none; one JsonInput per input being parsed. It owns the input's decoded
// bytes (`raw`) until FinishJsonInput moves them into the request.

#ifndef TENSORCOMPUTE_SERVER_KSERVE_JSON_INPUT_H_
#define TENSORCOMPUTE_SERVER_KSERVE_JSON_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "inference/grpc_predict_v2.pb.h"

#include "core/dtype.h"
#include "core/shape.h"

namespace tensorcompute::server::kserve {

// A field of an input (or an output) until its object ends. A key given twice: the parser
// resets the field, and the last value counts.
enum class JsonField { kAbsent, kPresent, kWrongType };

struct JsonInput {
  JsonField name = JsonField::kAbsent;
  std::string name_value;
  JsonField datatype = JsonField::kAbsent;
  std::string datatype_value;
  JsonField shape = JsonField::kAbsent;
  bool shape_bad = false;  // an element that is not an integer
  core::Shape dims;
  JsonField parameters = JsonField::kAbsent;
  JsonField binary_size = JsonField::kAbsent;  // the "binary_data_size" parameter
  int64_t binary_size_value = 0;
  JsonField data = JsonField::kAbsent;       // kWrongType: not an array
  const char* data_start = nullptr;          // its '[' in the JSON text
  std::optional<core::DataType> decoded_as;  // `raw` holds the data decoded as this
  int64_t count = 0;                         // elements decoded
  absl::Status bad;                          // the first bad element's problem (JsonDataDecoder)
  std::string bad_quote;
  std::string raw;

  // The datatype to decode `data` as while it is parsed, when that can be done: "datatype" (a
  // known one) and "shape" came before it, and no binary_data_size. Else nullopt: the data is
  // skipped, and FinishJsonInput parses it again from the text.
  std::optional<core::DataType> DecodeAtOnceAs() const;

  // Bytes to reserve for data of `dtype` whose text (with what follows it) is `text_left` bytes:
  // the shape's bytes, but never more than the text can hold (an element takes at least two
  // characters); 0 for BYTES or without a usable shape.
  size_t ReserveFor(core::DataType dtype, size_t text_left) const;
};

// Checks `*input`, the `index`-th of the request, and adds it to `request` with its raw
// contents: its decoded data (parsed again from `json` first when it was not decoded as its
// datatype, then *reparsed is set), or the binary_data_size bytes at `*binary_at` in `binary`
// (advancing it). Returns OK, or INVALID_ARGUMENT with the message of the
// document decoder (tests/server/kserve_json_reference.cc, the reference tested against): no or a
// mistyped name, datatype, shape or parameters, an unknown datatype (codec.h's ParseDatatype),
// both or neither of data and binary_data_size, too few binary bytes left, data that is not an
// array, a bad element, an element count that differs from the shape's.
// REQUIRES: `json` holds input->data_start when data is present; all pointers non-null.
absl::Status FinishJsonInput(JsonInput* input, int index, absl::string_view json,
                             absl::string_view binary, size_t* binary_at,
                             inference::ModelInferRequest* request, bool* reparsed);

}  // namespace tensorcompute::server::kserve

#endif  // TENSORCOMPUTE_SERVER_KSERVE_JSON_INPUT_H_
