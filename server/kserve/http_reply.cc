#include "server/kserve/http_reply.h"

#include "proto/kserve_wire.h"
#include "server/kserve/json.h"

namespace tensorcompute::server::kserve {

HttpReply ErrorReply(int status, absl::string_view message) {
  HttpReply reply;
  reply.status = status;
  reply.body = ErrorJson(message);
  return reply;
}

HttpReply StatusReply(const absl::Status& status) {
  return ErrorReply(proto::HttpStatusOf(status.code()), status.message());
}

}  // namespace tensorcompute::server::kserve
