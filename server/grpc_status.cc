#include "server/grpc_status.h"

#include <string>

namespace tensorcompute::server {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  std::string message(status.message());
  if (message.size() > kMaxErrorMessageBytes) {
    message.resize(kMaxErrorMessageBytes - 3);
    message += "...";
  }
  // absl::StatusCode and grpc::StatusCode share their numbering (0..16).
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), message);
}

}  // namespace tensorcompute::server
