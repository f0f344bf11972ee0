// File: server/builder_options.h
//
// What the main grpc::Server is built with, from ServerOptions: message limits, the transport
// settings that protect against each kind of client (concurrent streams, stream window,
// keepalive and its enforcement, idle and maximum connection age), the option that keeps a
// listener's port its own, and the one that drops gRPC's reflection service.
//
// Thread-safety: pure functions of their arguments.

#ifndef TENSORCOMPUTE_SERVER_BUILDER_OPTIONS_H_
#define TENSORCOMPUTE_SERVER_BUILDER_OPTIONS_H_

#include <memory>

#include "grpcpp/server_builder.h"

#include "server/server_options.h"

namespace tensorcompute::server {

// Sets `builder`'s message limits and channel arguments as `options` says (server_options.h
// documents each). REQUIRES: options.Validate() is OK.
void ApplyBuilderOptions(const ServerOptions& options, grpc::ServerBuilder* builder);

// A ServerBuilder option that drops gRPC's reflection plugin (which every ServerBuilder gets
// once grpc++_reflection is linked): for the health-only listener, and for the main server when
// tokens are required (reflection is gRPC's own service, which cannot check them).
std::unique_ptr<grpc::ServerBuilderOption> WithoutReflection();

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_BUILDER_OPTIONS_H_
