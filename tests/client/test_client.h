// File: tests/client/test_client.h
//
// The C++ client as the client tests make it: TestClientOptions(target) is what every test
// starts from (a generous timeout for a loaded 2-core machine, one attempt and a 1 ms first
// backoff, so that a test of retries says how many it wants); MakeClient creates the client
// and makes a failure to create it a test failure (null is returned then).

#ifndef TENSORCOMPUTE_TESTS_CLIENT_TEST_CLIENT_H_
#define TENSORCOMPUTE_TESTS_CLIENT_TEST_CLIENT_H_

#include <memory>
#include <string>

#include "client/client.h"

namespace tensorcompute::client::test_support {

// target as given; timeout 60 s; retry.max_attempts 1, retry.initial_backoff 1 ms.
ClientOptions TestClientOptions(const std::string& target);
// "127.0.0.1:port".
ClientOptions TestClientOptions(int port);

std::unique_ptr<Client> MakeClient(const ClientOptions& options);

}  // namespace tensorcompute::client::test_support

#endif  // TENSORCOMPUTE_TESTS_CLIENT_TEST_CLIENT_H_
