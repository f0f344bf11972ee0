// An outside program on the installed C++ client: `consumer HOST:PORT` gathers from a server
// and checks the answers. Exits 0 when every answer is the expected one, 1 otherwise (saying
// which), 2 on bad usage.
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tensorcompute/v1/tensorcompute.pb.h"

#include "client/client.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace tc = tensorcompute;

namespace {

int failures = 0;

void Expect(bool ok, const std::string& what) {
  std::cout << (ok ? "ok: " : "FAILED: ") << what << "\n";
  if (!ok) ++failures;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: consumer HOST:PORT\n";
    return 2;
  }
  tc::client::ClientOptions options;
  options.target = argv[1];
  options.timeout = absl::Seconds(20);
  auto client = tc::client::Client::Create(options);
  if (!client.ok()) {
    std::cerr << "Client::Create: " << client.status() << "\n";
    return 1;
  }

  // README's first request: rows 2 and -3 (= 0) of a float32 [3, 2].
  tc::core::Tensor params = tc::core::Tensor::FromValues<float>(
      tc::core::DataType::kFloat32, {3, 2}, std::vector<float>{1, 2, 3, 4, 5, 6});
  tc::core::Tensor indices = tc::core::Tensor::FromValues<int64_t>(tc::core::DataType::kInt64, {2},
                                                                   std::vector<int64_t>{2, -3});
  absl::StatusOr<tc::core::Tensor> out = (*client)->Gather(params.view(), indices.view());
  if (!out.ok()) {
    Expect(false, "Gather: " + out.status().ToString());
  } else {
    const auto values = out->values<float>();
    Expect(out->dtype() == tc::core::DataType::kFloat32 && out->shape() == tc::core::Shape{2, 2} &&
               std::vector<float>(values.begin(), values.end()) == std::vector<float>{5, 6, 1, 2},
           "Gather rows [2, -3] of [[1, 2], [3, 4], [5, 6]] is [[5, 6], [1, 2]]");
  }

  // An index out of range is the server's INVALID_ARGUMENT, with its words.
  tc::core::Tensor bad = tc::core::Tensor::FromValues<int64_t>(tc::core::DataType::kInt64, {1},
                                                               std::vector<int64_t>{7});
  absl::StatusOr<tc::core::Tensor> refused = (*client)->Gather(params.view(), bad.view());
  Expect(!refused.ok() && absl::IsInvalidArgument(refused.status()) &&
             refused.status().message().find("is not in [-3, 3)") != std::string::npos,
         "Gather of index 7 is INVALID_ARGUMENT: " + refused.status().ToString());

  // The generated messages are usable as they are (the wire enum equals core's).
  Expect(tc::v1::DT_FLOAT32 == static_cast<int>(tc::core::DataType::kFloat32),
         "tensorcompute.v1.DT_FLOAT32 is core::DataType::kFloat32");

  return failures == 0 ? 0 : 1;
}
