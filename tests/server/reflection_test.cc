// Server reflection (grpc.reflection.v1alpha), what grpcurl and other generic tools use: the
// server lists its services and sends the descriptor of tensorcompute.proto.
//
// Debian ships the reflection messages inside libgrpc++_reflection without headers, so the
// client builds them from protobuf's generated pool (that library registers them there) and
// calls the streaming method through grpc::GenericStub.

#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/dynamic_message.h"
#include "google/protobuf/message.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"

#include "server/server.h"
#include "tests/server/test_server.h"

namespace tensorcompute::server {
namespace {

using ::google::protobuf::Descriptor;
using ::google::protobuf::DescriptorPool;
using ::google::protobuf::Message;
using ::google::protobuf::MessageFactory;
using ::tensorcompute::server::test_support::MakeChannel;
using ::tensorcompute::server::test_support::TestOptions;
using ::testing::Contains;
using ::testing::HasSubstr;

constexpr char kMethod[] = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";

std::unique_ptr<Message> NewMessage(const std::string& type) {
  const Descriptor* descriptor = DescriptorPool::generated_pool()->FindMessageTypeByName(type);
  if (descriptor == nullptr) return nullptr;
  return std::unique_ptr<Message>(
      MessageFactory::generated_factory()->GetPrototype(descriptor)->New());
}

grpc::ByteBuffer Serialize(const Message& message) {
  const std::string bytes = message.SerializeAsString();
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

bool Parse(const grpc::ByteBuffer& buffer, Message* message) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return false;
  std::string bytes;
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return message->ParseFromString(bytes);
}

// One bidirectional reflection stream driven step by step on a completion queue.
class ReflectionStream {
 public:
  explicit ReflectionStream(int port) : stub_(MakeChannel(port)) {
    context_.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    call_ = stub_.PrepareCall(&context_, kMethod, &cq_);
    call_->StartCall(this);
    ok_ = Step();
  }
  ~ReflectionStream() {
    context_.TryCancel();
    grpc::Status status;
    call_->Finish(&status, this);
    Step();
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
    }
  }

  // Sends `request` and returns the one response, or nullptr if the stream failed.
  std::unique_ptr<Message> Ask(const Message& request) {
    if (!ok_) return nullptr;
    call_->Write(Serialize(request), this);
    if (!Step()) return nullptr;
    grpc::ByteBuffer buffer;
    call_->Read(&buffer, this);
    if (!Step()) return nullptr;
    std::unique_ptr<Message> response =
        NewMessage("grpc.reflection.v1alpha.ServerReflectionResponse");
    if (!Parse(buffer, response.get())) return nullptr;
    return response;
  }

 private:
  // Waits for the one outstanding operation; returns its ok.
  bool Step() {
    void* tag = nullptr;
    bool ok = false;
    const auto status =
        cq_.AsyncNext(&tag, &ok, absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    return status == grpc::CompletionQueue::GOT_EVENT && ok;
  }

  grpc::GenericStub stub_;
  grpc::ClientContext context_;
  grpc::CompletionQueue cq_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
  bool ok_ = false;
};

// A ServerReflectionRequest with the string field `field` set to `value`.
std::unique_ptr<Message> ReflectionRequest(const std::string& field, const std::string& value) {
  std::unique_ptr<Message> request = NewMessage("grpc.reflection.v1alpha.ServerReflectionRequest");
  if (request == nullptr) return nullptr;
  request->GetReflection()->SetString(request.get(),
                                      request->GetDescriptor()->FindFieldByName(field), value);
  return request;
}

TEST(Reflection, ListsTheTensorComputeService) {
  auto server = Server::Start(TestOptions());
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<Message> request = ReflectionRequest("list_services", "*");
  ASSERT_TRUE(request != nullptr) << "reflection messages are not in the generated pool";
  ReflectionStream stream((*server)->port());
  std::unique_ptr<Message> response = stream.Ask(*request);
  ASSERT_TRUE(response != nullptr);
  EXPECT_THAT(response->DebugString(), HasSubstr("name: \"tensorcompute.v1.TensorCompute\""));
}

TEST(Reflection, DescribesTheTensorComputeService) {
  auto server = Server::Start(TestOptions());
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<Message> request =
      ReflectionRequest("file_containing_symbol", "tensorcompute.v1.TensorCompute");
  ASSERT_TRUE(request != nullptr) << "reflection messages are not in the generated pool";
  ReflectionStream stream((*server)->port());
  std::unique_ptr<Message> response = stream.Ask(*request);
  ASSERT_TRUE(response != nullptr);

  // file_descriptor_response.file_descriptor_proto[0] is the serialized FileDescriptorProto.
  const auto* reflection = response->GetReflection();
  const auto* field = response->GetDescriptor()->FindFieldByName("file_descriptor_response");
  ASSERT_TRUE(reflection->HasField(*response, field)) << response->DebugString();
  const Message& files = reflection->GetMessage(*response, field);
  const auto* bytes_field = files.GetDescriptor()->FindFieldByName("file_descriptor_proto");
  ASSERT_GE(files.GetReflection()->FieldSize(files, bytes_field), 1);
  google::protobuf::FileDescriptorProto file;
  ASSERT_TRUE(
      file.ParseFromString(files.GetReflection()->GetRepeatedString(files, bytes_field, 0)));
  EXPECT_EQ(file.name(), "tensorcompute/v1/tensorcompute.proto");
  ASSERT_EQ(file.service_size(), 1);
  std::vector<std::string> methods;
  for (const auto& method : file.service(0).method()) methods.push_back(method.name());
  EXPECT_THAT(methods, Contains("Gather"));
  EXPECT_THAT(methods, Contains("GatherNd"));
}

}  // namespace
}  // namespace tensorcompute::server
