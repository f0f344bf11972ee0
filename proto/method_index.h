// File: proto/method_index.h
//
// A gRPC method's index in its service: the number the generated service code gives it, which
// grpc::Service's MarkMethodStreamed, MarkMethodRawCallback and the like take. It is the
// method's place in the .proto's service, read here from the descriptor, so that a method
// added in the middle of a service moves every index with it instead of misrouting calls.

#ifndef TENSORCOMPUTE_PROTO_METHOD_INDEX_H_
#define TENSORCOMPUTE_PROTO_METHOD_INDEX_H_

#include "absl/strings/string_view.h"

namespace tensorcompute::proto {

// `service`: the full name ("tensorcompute.v1.TensorCompute", as the generated
// service_full_name() gives it); `method`: the method's name ("Gather"). A service or method
// that the linked descriptors do not have is a programming error: the process aborts, naming
// both.
int MethodIndex(absl::string_view service, absl::string_view method);

}  // namespace tensorcompute::proto

#endif  // TENSORCOMPUTE_PROTO_METHOD_INDEX_H_
