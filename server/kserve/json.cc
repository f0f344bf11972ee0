#include "server/kserve/json.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

#include "core/dtype.h"
#include "core/half_float.h"
#include "server/kserve/codec.h"

namespace tensorcompute::server::kserve {
namespace {

using core::DataType;
using Json = nlohmann::json;

template <typename T>
T Load(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

// A finite float as a JSON number; NaN and infinities (which JSON lacks) as null.
Json Number(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

// The elements of `raw` (raw output contents of `dtype`) as a flat JSON array.
Json RawToData(DataType dtype, const std::string& raw) {
  Json data = Json::array();
  const char* p = raw.data();
  const char* end = p + raw.size();
  const size_t size = dtype == DataType::kString ? 1 : core::ElementSize(dtype);
  if (dtype == DataType::kString) {
    while (end - p >= 4) {
      const uint32_t n = Load<uint32_t>(p);
      p += 4;
      const size_t take = std::min<size_t>(n, static_cast<size_t>(end - p));
      data.push_back(std::string(p, take));
      p += take;
    }
    return data;
  }
  for (; end - p >= static_cast<ptrdiff_t>(size); p += size) {
    switch (dtype) {
      case DataType::kBool:
        data.push_back(*p != 0);
        break;
      case DataType::kInt8:
        data.push_back(Load<int8_t>(p));
        break;
      case DataType::kInt16:
        data.push_back(Load<int16_t>(p));
        break;
      case DataType::kInt32:
        data.push_back(Load<int32_t>(p));
        break;
      case DataType::kInt64:
        data.push_back(Load<int64_t>(p));
        break;
      case DataType::kUint8:
        data.push_back(Load<uint8_t>(p));
        break;
      case DataType::kUint16:
        data.push_back(Load<uint16_t>(p));
        break;
      case DataType::kUint32:
        data.push_back(Load<uint32_t>(p));
        break;
      case DataType::kUint64:
        data.push_back(Load<uint64_t>(p));
        break;
      case DataType::kFloat16:
        data.push_back(Number(core::HalfToFloat(Load<uint16_t>(p))));
        break;
      case DataType::kBfloat16:
        data.push_back(Number(core::BFloat16ToFloat(Load<uint16_t>(p))));
        break;
      case DataType::kFloat32:
        data.push_back(Number(Load<float>(p)));
        break;
      case DataType::kFloat64:
        data.push_back(Number(Load<double>(p)));
        break;
      default:
        return data;
    }
  }
  return data;
}

// A protobuf repeated field as a JSON array.
template <typename Repeated>
Json List(const Repeated& values) {
  Json out = Json::array();
  for (const auto& v : values) out.push_back(v);
  return out;
}

std::string Dump(const Json& j) {
  // BYTES elements need not be UTF-8: invalid sequences become U+FFFD in JSON (binary output
  // returns them unchanged).
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

HttpBody WriteHttpInferResponse(const inference::ModelInferResponse& response, bool binary_output,
                                bool append_binary) {
  Json root = Json::object();
  root["model_name"] = response.model_name();
  root["model_version"] = response.model_version();
  if (!response.id().empty()) root["id"] = response.id();
  Json outputs = Json::array();
  std::vector<const std::string*> binary;
  for (int i = 0; i < response.outputs_size(); ++i) {
    const auto& output = response.outputs(i);
    Json o = {
        {"name", output.name()}, {"datatype", output.datatype()}, {"shape", List(output.shape())}};
    static const std::string kEmpty;
    const std::string& raw =
        i < response.raw_output_contents_size() ? response.raw_output_contents(i) : kEmpty;
    if (binary_output) {
      o["parameters"] = {{"binary_data_size", raw.size()}};
      binary.push_back(&raw);
    } else {
      absl::StatusOr<DataType> dtype = ParseDatatype(output.datatype(), "output");
      o["data"] = dtype.ok() ? RawToData(*dtype, raw) : Json::array();
    }
    outputs.push_back(std::move(o));
  }
  root["outputs"] = std::move(outputs);
  HttpBody out;
  out.body = Dump(root);
  if (binary_output) {
    out.header_length = static_cast<int64_t>(out.body.size());
    for (const std::string* raw : binary) {
      if (append_binary) {
        out.body.append(*raw);
      } else {
        out.binary.emplace_back(*raw);
      }
    }
  }
  return out;
}

std::string ServerMetadataJson(const inference::ServerMetadataResponse& metadata) {
  return Dump({{"name", metadata.name()},
               {"version", metadata.version()},
               {"extensions", List(metadata.extensions())}});
}

std::string ModelMetadataJson(const inference::ModelMetadataResponse& metadata) {
  auto tensors = [](const auto& list) {
    Json out = Json::array();
    for (const auto& t : list) {
      out.push_back({{"name", t.name()}, {"datatype", t.datatype()}, {"shape", List(t.shape())}});
    }
    return out;
  };
  return Dump({{"name", metadata.name()},
               {"versions", List(metadata.versions())},
               {"platform", metadata.platform()},
               {"inputs", tensors(metadata.inputs())},
               {"outputs", tensors(metadata.outputs())}});
}

std::string ModelConfigJson(const inference::ModelConfig& config) {
  Json inputs = Json::array();
  for (const inference::ModelInput& input : config.input()) {
    inputs.push_back({{"name", input.name()},
                      {"data_type", inference::DataType_Name(input.data_type())},
                      {"format", "FORMAT_NONE"},
                      {"dims", List(input.dims())},
                      {"optional", input.optional()}});
  }
  Json outputs = Json::array();
  for (const inference::ModelOutput& output : config.output()) {
    outputs.push_back({{"name", output.name()},
                       {"data_type", inference::DataType_Name(output.data_type())},
                       {"dims", List(output.dims())}});
  }
  Json parameters = Json::object();
  for (const auto& [name, parameter] : config.parameters()) {
    parameters[name] = {{"string_value", parameter.string_value()}};
  }
  Json root = {{"name", config.name()},
               {"platform", config.platform()},
               {"backend", config.backend()},
               {"max_batch_size", config.max_batch_size()},
               {"input", std::move(inputs)},
               {"output", std::move(outputs)},
               {"parameters", std::move(parameters)}};
  if (config.has_dynamic_batching()) {
    const inference::ModelDynamicBatching& batching = config.dynamic_batching();
    root["dynamic_batching"] = {
        {"preferred_batch_size", List(batching.preferred_batch_size())},
        {"max_queue_delay_microseconds", batching.max_queue_delay_microseconds()}};
  }
  return Dump(root);
}

std::string ModelStatisticsJson(const inference::ModelStatisticsResponse& response) {
  auto duration = [](const inference::StatisticDuration& d) {
    return Json{{"count", d.count()}, {"ns", d.ns()}};
  };
  Json models = Json::array();
  for (const inference::ModelStatistics& m : response.model_stats()) {
    const inference::InferStatistics& s = m.inference_stats();
    Json memory = Json::array();
    for (const inference::MemoryUsage& u : m.memory_usage()) {
      memory.push_back({{"type", u.type()}, {"id", u.id()}, {"byte_size", u.byte_size()}});
    }
    models.push_back({{"name", m.name()},
                      {"version", m.version()},
                      {"last_inference", m.last_inference()},
                      {"inference_count", m.inference_count()},
                      {"execution_count", m.execution_count()},
                      {"inference_stats",
                       {{"success", duration(s.success())},
                        {"fail", duration(s.fail())},
                        {"queue", duration(s.queue())},
                        {"compute_input", duration(s.compute_input())},
                        {"compute_infer", duration(s.compute_infer())},
                        {"compute_output", duration(s.compute_output())},
                        {"cache_hit", duration(s.cache_hit())},
                        {"cache_miss", duration(s.cache_miss())}}},
                      {"batch_stats", Json::array()},
                      {"memory_usage", std::move(memory)}});
  }
  return Dump({{"model_stats", std::move(models)}});
}

std::string ErrorJson(absl::string_view message) { return Dump({{"error", std::string(message)}}); }

}  // namespace tensorcompute::server::kserve
