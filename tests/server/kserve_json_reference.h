// File: tests/server/kserve_json_reference.h
//
// The slow twin of ParseHttpInferRequest (server/kserve/json_request.h): the decoder it replaced,
// which parses the whole body into an nlohmann::json document and then copies it into the request.
// Obviously correct and memory-hungry; tests compare the streaming decoder with it.
//
// Thread-safety: a pure function.

#ifndef TENSORCOMPUTE_TESTS_SERVER_KSERVE_JSON_REFERENCE_H_
#define TENSORCOMPUTE_TESTS_SERVER_KSERVE_JSON_REFERENCE_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "inference/grpc_predict_v2.pb.h"

#include "server/kserve/json_request.h"

namespace tensorcompute::server::kserve {

// ParseHttpInferRequest's contract, by building the document first (no depth or list bounds).
absl::Status ReferenceParseHttpInferRequest(absl::string_view body,
                                            std::optional<int64_t> header_length,
                                            inference::ModelInferRequest* request,
                                            HttpInferOptions* options);

}  // namespace tensorcompute::server::kserve

#endif  // TENSORCOMPUTE_TESTS_SERVER_KSERVE_JSON_REFERENCE_H_
