#include "client/kserve_http_load_encoder.h"

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "inference/grpc_predict_v2.pb.h"
#include "nlohmann/json.hpp"

#include "client/kserve_grpc_load_encoder.h"
#include "core/dtype.h"
#include "core/shape.h"

namespace tensorcompute::client {

KserveHttpLoadEncoder::KserveHttpLoadEncoder(const LoadRequestSpec& spec,
                                             const core::Tensor* params) {
  const inference::ModelInferRequest head = KserveLoadHead(spec, params);
  const core::Shape index_shape = LoadIndexShape(spec);
  const int64_t index_bytes = core::Product(index_shape, 0, index_shape.size()) *
                              static_cast<int64_t>(core::ElementSize(spec.index_dtype));
  nlohmann::json header = {{"inputs", nlohmann::json::array()},
                           {"parameters", {{"binary_data_output", true}}}};
  for (const auto& [name, value] : head.parameters()) {
    if (value.has_int64_param()) header["parameters"][name] = value.int64_param();
    if (value.has_string_param()) header["parameters"][name] = value.string_param();
  }
  for (const auto& input : head.inputs()) {
    const int64_t size = input.name() == "params"
                             ? static_cast<int64_t>(head.raw_input_contents(0).size())
                             : index_bytes;
    header["inputs"].push_back(
        {{"name", input.name()},
         {"datatype", input.datatype()},
         {"shape", std::vector<int64_t>(input.shape().begin(), input.shape().end())},
         {"parameters", {{"binary_data_size", size}}}});
  }
  header_ = header.dump();
  params_ = head.raw_input_contents().empty() ? "" : head.raw_input_contents(0);
  path_ = absl::StrCat("/v2/models/", head.model_name(), "/infer");
}

std::string KserveHttpLoadEncoder::method() const { return "POST " + path_; }

std::string KserveHttpLoadEncoder::http_path() const { return path_; }

void KserveHttpLoadEncoder::Add(const core::Tensor& indices, LoadRequests* out) const {
  out->http_bodies.push_back(absl::StrCat(header_, params_, KserveRawContents(indices)));
  out->http_header_bytes.push_back(static_cast<int64_t>(header_.size()));
}

}  // namespace tensorcompute::client
