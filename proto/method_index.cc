#include "proto/method_index.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "google/protobuf/descriptor.h"

namespace tensorcompute::proto {

int MethodIndex(absl::string_view service, absl::string_view method) {
  const google::protobuf::ServiceDescriptor* descriptor =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(std::string(service));
  const google::protobuf::MethodDescriptor* found =
      descriptor == nullptr ? nullptr : descriptor->FindMethodByName(std::string(method));
  if (found == nullptr) {
    std::fprintf(stderr, "MethodIndex: no method %.*s in service %.*s\n",
                 static_cast<int>(method.size()), method.data(), static_cast<int>(service.size()),
                 service.data());
    std::abort();
  }
  return found->index();
}

}  // namespace tensorcompute::proto
