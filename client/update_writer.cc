#include "client/update_writer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/client_context.h"
#include "tensorcompute/v1/tensorcompute.grpc.pb.h"

#include "core/half_float.h"
#include "proto/tensor_codec.h"

namespace tensorcompute::client {
namespace {

// How long Stop lets a blocked write (a server that stopped reading) finish before it cancels
// the stream.
constexpr absl::Duration kStopGrace = absl::Seconds(10);
// The pause before a failed stream is opened again.
constexpr absl::Duration kReopenDelay = absl::Milliseconds(100);

// The values' dtype and row shape that `spec`'s table takes.
std::pair<core::DataType, core::Shape> ValuesLayout(const UpdateLoadSpec& spec) {
  core::Shape row(spec.shape.begin() + 1, spec.shape.end());
  if (spec.storage == core::TableStorage::kInt8RowwisePrequantized) {
    if (!row.empty()) row.back() += 8;  // dim codes, then a float32 scale and bias
    return {core::DataType::kUint8, row};
  }
  return {spec.dtype, row};
}

// `n` random rows of `row_elements` elements of `dtype` into `out` (resized): floats in
// [-1, 1), bools 0/1, other types random bytes; prequantized rows end in scale 1/255 and bias
// -0.5 (finite, as the server requires).
void RandomRows(core::DataType dtype, int64_t n, int64_t row_elements, bool prequantized,
                std::mt19937_64& rng, std::string* out) {
  const size_t element = core::ElementSize(dtype);
  out->resize(static_cast<size_t>(n * row_elements) * element);
  auto* bytes = reinterpret_cast<uint8_t*>(out->data());
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (int64_t i = 0; i < n * row_elements; ++i) {
    uint8_t* p = bytes + static_cast<size_t>(i) * element;
    switch (dtype) {
      case core::DataType::kFloat32: {
        const float v = uniform(rng);
        std::memcpy(p, &v, 4);
        break;
      }
      case core::DataType::kFloat64: {
        const double v = uniform(rng);
        std::memcpy(p, &v, 8);
        break;
      }
      case core::DataType::kFloat16: {
        const uint16_t v = core::FloatToHalf(uniform(rng));
        std::memcpy(p, &v, 2);
        break;
      }
      case core::DataType::kBfloat16: {
        const uint16_t v = core::FloatToBFloat16(uniform(rng));
        std::memcpy(p, &v, 2);
        break;
      }
      case core::DataType::kBool:
        *p = static_cast<uint8_t>(rng() & 1);
        break;
      default:
        for (size_t b = 0; b < element; ++b) p[b] = static_cast<uint8_t>(rng());
    }
  }
  if (!prequantized || row_elements < 8) return;
  const float scale = 1.0f / 255.0f, bias = -0.5f;
  for (int64_t r = 0; r < n; ++r) {
    uint8_t* tail = bytes + (r + 1) * row_elements - 8;
    std::memcpy(tail, &scale, 4);
    std::memcpy(tail + 4, &bias, 4);
  }
}

}  // namespace

absl::Status CheckUpdateLoadSpec(const UpdateLoadSpec& spec) {
  if (!(spec.rows_per_second > 0) || !std::isfinite(spec.rows_per_second)) {
    return absl::InvalidArgumentError("the update rate must be > 0 rows per second");
  }
  if (spec.shape.empty() || spec.dtype == core::DataType::kString ||
      spec.dtype == core::DataType::kUnspecified) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table ", spec.name, ": updates need a table of rank >= 1 and fixed-size ",
        "elements; got ", core::DataTypeName(spec.dtype), " ", core::ShapeToString(spec.shape)));
  }
  if (spec.rows_per_message < 1 || spec.rows_per_message > spec.shape[0]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rows per update message must be in [1, ", spec.shape[0],
        "] (the table's rows: a message's indices are distinct); got ", spec.rows_per_message));
  }
  if (spec.distinct_messages < 1) {
    return absl::InvalidArgumentError("distinct update messages must be >= 1");
  }
  return absl::OkStatus();
}

std::vector<v1::UpdateRowsRequest> BuildUpdateMessages(const UpdateLoadSpec& spec) {
  std::mt19937_64 rng(spec.seed);
  const auto [dtype, row] = ValuesLayout(spec);
  int64_t row_elements = 1;
  for (int64_t d : row) row_elements *= d;
  const int64_t rows = spec.shape[0];
  const int64_t n = spec.rows_per_message;
  std::vector<int64_t> ids;
  std::vector<v1::UpdateRowsRequest> out(static_cast<size_t>(spec.distinct_messages));
  for (v1::UpdateRowsRequest& message : out) {
    message.set_name(spec.name);
    // Distinct indices (a repeated one within a message is INVALID_ARGUMENT): a partial
    // Fisher-Yates shuffle over the table's rows, or rejection when they are many.
    ids.clear();
    if (rows <= 4 * n) {
      std::vector<int64_t> all(static_cast<size_t>(rows));
      std::iota(all.begin(), all.end(), int64_t{0});
      for (int64_t i = 0; i < n; ++i) {
        std::swap(all[i], all[i + static_cast<int64_t>(rng() % (rows - i))]);
      }
      ids.assign(all.begin(), all.begin() + n);
    } else {
      std::vector<bool> taken(static_cast<size_t>(rows), false);
      while (static_cast<int64_t>(ids.size()) < n) {
        const int64_t id = static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
        if (!taken[id]) {
          taken[id] = true;
          ids.push_back(id);
        }
      }
    }
    v1::Tensor* indices = message.mutable_indices();
    indices->set_dtype(v1::DT_INT64);
    indices->add_shape(n);
    indices->set_data(ids.data(), ids.size() * sizeof(int64_t));
    v1::Tensor* values = message.mutable_values();
    values->set_dtype(proto::ToProtoDataType(dtype));
    values->add_shape(n);
    for (int64_t d : row) values->add_shape(d);
    RandomRows(dtype, n, row_elements, spec.storage == core::TableStorage::kInt8RowwisePrequantized,
               rng, values->mutable_data());
  }
  return out;
}

absl::StatusOr<std::unique_ptr<UpdateWriter>> UpdateWriter::Start(
    std::shared_ptr<grpc::Channel> channel, const UpdateLoadSpec& spec) {
  if (absl::Status ok = CheckUpdateLoadSpec(spec); !ok.ok()) return ok;
  return std::unique_ptr<UpdateWriter>(new UpdateWriter(std::move(channel), spec));
}

UpdateWriter::UpdateWriter(std::shared_ptr<grpc::Channel> channel, const UpdateLoadSpec& spec)
    : channel_(std::move(channel)),
      spec_(spec),
      messages_(BuildUpdateMessages(spec)),
      start_(absl::Now()) {
  report_.target_rows_per_s = spec.rows_per_second;
  thread_ = std::thread([this] { Write(); });
}

UpdateWriter::~UpdateWriter() {
  if (!stopped_) Stop();
}

bool UpdateWriter::WaitUntil(absl::Time due) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithDeadline(absl::Condition(&stopping_), due);
}

void UpdateWriter::Write() {
  WriteStreams();
  absl::MutexLock lock(&mu_);
  finished_ = true;
}

void UpdateWriter::WriteStreams() {
  const std::unique_ptr<v1::TensorCompute::Stub> stub = v1::TensorCompute::NewStub(channel_);
  const absl::Duration interval =
      absl::Seconds(static_cast<double>(spec_.rows_per_message) / spec_.rows_per_second);
  int64_t k = 0;  // the next message's number: it is due at start_ + k * interval
  while (true) {
    grpc::ClientContext context;
    if (!spec_.authorization.empty()) context.AddMetadata("authorization", spec_.authorization);
    {
      absl::MutexLock lock(&mu_);
      context_ = &context;
    }
    v1::UpdateRowsResponse response;
    std::unique_ptr<grpc::ClientWriter<v1::UpdateRowsRequest>> writer =
        stub->UpdateRows(&context, &response);
    ++report_.streams;
    bool stopped = false;
    while (true) {
      if (WaitUntil(start_ + interval * static_cast<double>(k))) {
        stopped = true;
        break;
      }
      const v1::UpdateRowsRequest& message = messages_[static_cast<size_t>(k) % messages_.size()];
      if (!writer->Write(message)) break;  // the stream is over: Finish says how
      ++k;
      ++report_.messages_sent;
      report_.rows_sent += spec_.rows_per_message;
    }
    if (stopped) writer->WritesDone();
    const grpc::Status status = writer->Finish();
    {
      absl::MutexLock lock(&mu_);
      context_ = nullptr;
    }
    if (status.ok()) {
      report_.rows_applied += response.rows();
      report_.messages_applied += response.messages();
      report_.sequence = std::max(report_.sequence, response.sequence());
    } else {
      ++report_.errors;
      ++report_.error_codes[absl::StatusCodeToString(
          static_cast<absl::StatusCode>(status.error_code()))];
      report_.last_error =
          absl::StrCat(absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())),
                       ": ", status.error_message());
    }
    if (stopped || WaitUntil(absl::Now() + kReopenDelay)) return;
    // The messages that fell due while the stream was down are skipped, not sent in a burst.
    k = std::max(k, static_cast<int64_t>((absl::Now() - start_) / interval));
  }
}

UpdateLoadReport UpdateWriter::Stop() {
  stopped_ = true;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    // A write blocked on a server that stopped reading would hold Stop forever: after the
    // grace, the stream is cancelled (counted as an error, CANCELLED).
    auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return finished_; };
    if (!mu_.AwaitWithTimeout(absl::Condition(&done), kStopGrace) && context_ != nullptr) {
      context_->TryCancel();
    }
  }
  thread_.join();
  report_.seconds = absl::ToDoubleSeconds(absl::Now() - start_);
  if (report_.seconds > 0) report_.rows_per_s = report_.rows_applied / report_.seconds;
  return report_;
}

}  // namespace tensorcompute::client
