#include "tests/client/test_client.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tensorcompute::client::test_support {

ClientOptions TestClientOptions(const std::string& target) {
  ClientOptions options;
  options.target = target;
  options.timeout = absl::Seconds(60);
  options.retry.max_attempts = 1;
  options.retry.initial_backoff = absl::Milliseconds(1);
  return options;
}

ClientOptions TestClientOptions(int port) {
  return TestClientOptions(absl::StrCat("127.0.0.1:", port));
}

std::unique_ptr<Client> MakeClient(const ClientOptions& options) {
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

}  // namespace tensorcompute::client::test_support
