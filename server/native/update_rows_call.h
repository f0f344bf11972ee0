// File: server/native/update_rows_call.h
//
// UpdateRows (a client-streaming call): rows of a resident table replaced in place while it
// is served (core/live_rows.h). Reading, admission (the admin token, a slot in the uploads'
// share), each message's decoded cost and the idle timeout are upload_stream_call.h's, as for
// PutTensor. The first message names the table, which the call holds for the whole stream;
// each message is checked whole and converted to the stored form (core::PrepareRowUpdate)
// before any of it is applied (core::ApplyRowUpdate), so a bad message changes nothing, and is
// applied before the next is read. Its converted rows are never more bytes than its values,
// so they fit in the slot the upload holds (twice max_message_bytes) beside the message.
//
// Answer: UpdateRowsResponse (the table's sequence after the last message, the rows and
// messages applied), once the client half-closed. An error stops the stream; the messages
// before it stay applied (they are absolute values: safe to send again). A table replaced or
// deleted meanwhile is FAILED_PRECONDITION or NOT_FOUND (ApplyRowUpdate's words). A keyed
// table that a message by keys outgrows grows within max_resident_bytes (core/table_growth.h,
// placed on its device as PutTensor places an upload); the call then holds the grown table.
//
// A sharded table's update on a server with --shard_peers (not itself a forwarded one, marked
// kHopMetadata) is not applied here: each message, checked against the whole table
// (core::SplitRowUpdate), goes to every replica of every shard, this server included through
// its own shard's entry (server/compute/shard_updater.h), and the next is read once it is
// written to all of them; the answer waits for every replica's, and its sequence is the
// largest of theirs. Without --shard_peers, rows of another shard are FAILED_PRECONDITION.
//
// Each message applied is counted in the table's statistics (core::RequestStats::RecordUpdate):
// its rows, and the time from its arrival to its rows being visible.
//
// Thread-safety: gRPC calls the reactor from its threads, one at a time.

#ifndef TENSORCOMPUTE_SERVER_NATIVE_UPDATE_ROWS_CALL_H_
#define TENSORCOMPUTE_SERVER_NATIVE_UPDATE_ROWS_CALL_H_

#include "grpcpp/server_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"

#include "server/native/put_tensor_call.h"

namespace tensorcompute::server {

// A new call for an UpdateRows RPC, begun; it deletes itself when done, having written its
// serialized UpdateRowsResponse into `reply` when it is OK. What `env` points to must outlive
// it.
grpc::ServerReadReactor<grpc::ByteBuffer>* StartUpdateRows(const ResidentEnv* env,
                                                           grpc::CallbackServerContext* context,
                                                           grpc::ByteBuffer* reply);

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_NATIVE_UPDATE_ROWS_CALL_H_
