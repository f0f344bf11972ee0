// Resident tensors through a real server: PutTensor (one chunk, many chunks, larger than the
// message limit, every dtype), ListTensors, gathers by params_name equal to the same gathers
// inline byte for byte, DeleteTensor, NOT_FOUND, ALREADY_EXISTS, replace while 32 clients
// gather (every answer is one version, never a mix), aborted uploads leave nothing, the
// memory cap, preload from .npy, and the admin token.

#include <atomic>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

#include "core/cuda/cuda_executor.h"
#include "core/npy_format.h"
#include "proto/tensor_codec.h"
#include "server/server.h"
#include "tests/server/test_server.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::server {
namespace {

using ::tensorcompute::server::test_support::MakeStub;
using ::tensorcompute::server::test_support::Stub;
using ::tensorcompute::server::test_support::TestOptions;
using ::tensorcompute::server::test_support::ToAbsl;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;
using ::testing::HasSubstr;

std::unique_ptr<grpc::ClientContext> Context(const std::string& token = "") {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
  return context;
}

struct PutOptions {
  bool replace = false;
  int64_t chunk_bytes = 1 << 20;  // data bytes, or strings, per message
  std::string device;
  std::string token;
  // Stop after this many messages and cancel (an aborted upload); -1: send everything.
  int cancel_after = -1;
  // Send this many fewer data bytes (or strings) than the tensor has, then half-close.
  int64_t short_by = 0;
};

// Uploads `t` as `name` in chunks; returns the status and the response.
absl::StatusOr<v1::TensorInfo> Put(Stub& stub, const std::string& name, const core::TensorView& t,
                                   const PutOptions& options = {}) {
  auto context = Context(options.token);
  v1::PutTensorResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::PutTensorRequest>> writer =
      stub.PutTensor(context.get(), &response);
  v1::PutTensorRequest first;
  first.set_name(name);
  first.set_dtype(proto::ToProtoDataType(t.dtype));
  for (int64_t d : t.shape) first.add_shape(d);
  first.set_device(options.device);
  first.set_replace(options.replace);
  const bool strings = t.dtype == core::DataType::kString;
  const int64_t total =
      (strings ? static_cast<int64_t>(t.strings.size()) : static_cast<int64_t>(t.data.size())) -
      options.short_by;
  int64_t at = 0;
  int sent = 0;
  v1::PutTensorRequest message = std::move(first);
  do {
    const int64_t n = std::min(options.chunk_bytes, total - at);
    message.set_offset(at);
    if (strings) {
      for (int64_t i = at; i < at + n; ++i) message.add_strings(*t.strings[i]);
    } else {
      message.set_data(reinterpret_cast<const char*>(t.data.data()) + at, n);
    }
    at += n;
    if (!writer->Write(message)) break;
    if (++sent == options.cancel_after) {
      context->TryCancel();
      break;
    }
    message.Clear();
  } while (at < total);
  writer->WritesDone();
  absl::Status status = ToAbsl(writer->Finish());
  if (!status.ok()) return status;
  return response.tensor();
}

absl::StatusOr<std::vector<v1::TensorInfo>> List(Stub& stub, const std::string& token = "") {
  auto context = Context(token);
  v1::ListTensorsResponse response;
  absl::Status status = ToAbsl(stub.ListTensors(context.get(), {}, &response));
  if (!status.ok()) return status;
  return std::vector<v1::TensorInfo>(response.tensors().begin(), response.tensors().end());
}

absl::Status Delete(Stub& stub, const std::string& name, const std::string& token = "") {
  auto context = Context(token);
  v1::DeleteTensorRequest request;
  request.set_name(name);
  v1::DeleteTensorResponse response;
  return ToAbsl(stub.DeleteTensor(context.get(), request, &response));
}

// Gather by name (when `name` is set) or inline; returns the response's output.
absl::StatusOr<v1::Tensor> Gather(Stub& stub, const std::string& name,
                                  const core::TensorView* params, const core::TensorView& indices,
                                  std::optional<int64_t> axis = std::nullopt) {
  auto context = Context();
  v1::GatherRequest request;
  if (!name.empty()) request.set_params_name(name);
  if (params != nullptr) proto::ToProto(*params, request.mutable_params());
  proto::ToProto(indices, request.mutable_indices());
  if (axis) request.set_axis(*axis);
  v1::GatherResponse response;
  absl::Status status = ToAbsl(stub.Gather(context.get(), request, &response));
  if (!status.ok()) return status;
  return response.output();
}

absl::StatusOr<v1::Tensor> GatherNd(Stub& stub, const std::string& name,
                                    const core::TensorView* params,
                                    const core::TensorView& indices) {
  auto context = Context();
  v1::GatherNdRequest request;
  if (!name.empty()) request.set_params_name(name);
  if (params != nullptr) proto::ToProto(*params, request.mutable_params());
  proto::ToProto(indices, request.mutable_indices());
  v1::GatherNdResponse response;
  absl::Status status = ToAbsl(stub.GatherNd(context.get(), request, &response));
  if (!status.ok()) return status;
  return response.output();
}

class ResidentTensorTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer(TestOptions()); }

  void StartServer(const ServerOptions& options) {
    server_.reset();
    server_ = test_support::StartServer(options);
    ASSERT_NE(server_, nullptr);
    stub_ = MakeStub(server_->port());
  }

  std::unique_ptr<Server> server_;
  std::unique_ptr<Stub> stub_;
};

// Puts a random table of every dtype (device `device`, "" for the default) and checks that
// gathers by name equal the same gathers inline, byte for byte; strings always live on the CPU.
// `expected_version`: the names' version after the put (a delete does not reset it).
void CheckEveryDtype(Stub& stub, const std::string& device, const std::string& expected_device,
                     int64_t expected_version = 1) {
  testing::Rng rng(9);
  const core::DataType dtypes[] = {
      core::DataType::kBool,    core::DataType::kInt8,      core::DataType::kInt16,
      core::DataType::kInt32,   core::DataType::kInt64,     core::DataType::kUint8,
      core::DataType::kUint16,  core::DataType::kUint32,    core::DataType::kUint64,
      core::DataType::kFloat16, core::DataType::kBfloat16,  core::DataType::kFloat32,
      core::DataType::kFloat64, core::DataType::kComplex64, core::DataType::kComplex128,
      core::DataType::kString};
  for (core::DataType dtype : dtypes) {
    SCOPED_TRACE(core::DataTypeName(dtype));
    const core::Tensor table = testing::RandomTensor(dtype, {7, 3, 2}, rng);
    const std::string name = absl::StrCat("t_", core::DataTypeName(dtype));
    // Small chunks: the strings and the bytes arrive in several messages.
    PutOptions put;
    put.chunk_bytes = 5;
    put.device = dtype == core::DataType::kString ? "" : device;
    absl::StatusOr<v1::TensorInfo> info = Put(stub, name, table.view(), put);
    ASSERT_THAT(info.status(), IsOk());
    EXPECT_EQ(info->name(), name);
    EXPECT_EQ(info->dtype(), proto::ToProtoDataType(dtype));
    EXPECT_THAT(info->shape(), ::testing::ElementsAre(7, 3, 2));
    EXPECT_EQ(info->device(), dtype == core::DataType::kString ? "cpu" : expected_device);
    EXPECT_EQ(info->version(), expected_version);
    for (core::DataType index_dtype : {core::DataType::kInt32, core::DataType::kInt64}) {
      const core::Tensor indices =
          testing::RandomIndices(index_dtype, {4, 2}, {7}, rng);  // negatives included
      const core::TensorView view = table.view();
      absl::StatusOr<v1::Tensor> by_name = Gather(stub, name, nullptr, indices.view());
      absl::StatusOr<v1::Tensor> inline_ = Gather(stub, "", &view, indices.view());
      ASSERT_THAT(by_name.status(), IsOk());
      ASSERT_THAT(inline_.status(), IsOk());
      EXPECT_EQ(by_name->SerializeAsString(), inline_->SerializeAsString());
      // Another axis, and GatherNd.
      const core::Tensor on_axis1 = testing::RandomIndices(index_dtype, {5}, {3}, rng);
      by_name = Gather(stub, name, nullptr, on_axis1.view(), 1);
      inline_ = Gather(stub, "", &view, on_axis1.view(), 1);
      ASSERT_THAT(by_name.status(), IsOk());
      EXPECT_EQ(by_name->SerializeAsString(), inline_->SerializeAsString());
      const core::Tensor tuples = testing::MakeIndices(index_dtype, {3, 2}, {0, 1, 6, -1, -7, 2});
      by_name = GatherNd(stub, name, nullptr, tuples.view());
      inline_ = GatherNd(stub, "", &view, tuples.view());
      ASSERT_THAT(by_name.status(), IsOk());
      EXPECT_EQ(by_name->SerializeAsString(), inline_->SerializeAsString());
    }
  }
  absl::StatusOr<std::vector<v1::TensorInfo>> list = List(stub);
  ASSERT_THAT(list.status(), IsOk());
  EXPECT_EQ(list->size(), std::size(dtypes));
}

TEST_F(ResidentTensorTest, GatherByNameEqualsInlineForEveryDtype) {
  // The server's default device (TC_TEST_DEVICE=gpu puts the whole suite on a GPU).
  CheckEveryDtype(*stub_, "", server_->device() == "cpu" ? "cpu" : "gpu:0");
}

TEST_F(ResidentTensorTest, ATableLargerThanTheMessageLimitArrivesInChunks) {
  ServerOptions options = TestOptions();
  options.max_message_bytes = 1 << 20;
  StartServer(options);
  testing::Rng rng(3);
  const core::Tensor table = testing::RandomTensor(core::DataType::kFloat32, {3072, 256}, rng);
  PutOptions put;
  put.chunk_bytes = 256 << 10;  // 12 messages of 256 KiB: 3 MiB in all, 3x the limit
  absl::StatusOr<v1::TensorInfo> info = Put(*stub_, "big", table.view(), put);
  ASSERT_THAT(info.status(), IsOk());
  EXPECT_EQ(info->bytes(), 3072 * 256 * 4);
  const core::Tensor indices = testing::MakeIndices(core::DataType::kInt64, {3}, {0, 3071, -2});
  absl::StatusOr<v1::Tensor> out = Gather(*stub_, "big", nullptr, indices.view());
  ASSERT_THAT(out.status(), IsOk());
  const float* rows = table.values<float>().data();
  const std::string& data = out->data();
  ASSERT_EQ(data.size(), 3u * 256 * 4);
  EXPECT_EQ(std::memcmp(data.data(), rows, 1024), 0);
  EXPECT_EQ(std::memcmp(data.data() + 1024, rows + 3071 * 256, 1024), 0);
  EXPECT_EQ(std::memcmp(data.data() + 2048, rows + 3070 * 256, 1024), 0);
}

TEST_F(ResidentTensorTest, NamesAreCheckedAndExistingOnesNeedReplace) {
  const core::Tensor v1 = testing::MakeTensor<int32_t>({3}, {1, 2, 3});
  const core::Tensor v2 = testing::MakeTensor<int32_t>({2}, {7, 8});
  ASSERT_THAT(Put(*stub_, "t", v1.view()).status(), IsOk());
  EXPECT_THAT(Put(*stub_, "t", v2.view()).status(),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       HasSubstr("tensor 't' exists (version 1); delete it first or put with "
                                 "replace = true")));
  PutOptions replace;
  replace.replace = true;
  absl::StatusOr<v1::TensorInfo> info = Put(*stub_, "t", v2.view(), replace);
  ASSERT_THAT(info.status(), IsOk());
  EXPECT_EQ(info->version(), 2);
  const core::Tensor zero = testing::MakeIndices(core::DataType::kInt32, {1}, {-1});
  absl::StatusOr<v1::Tensor> out = Gather(*stub_, "t", nullptr, zero.view());
  ASSERT_THAT(out.status(), IsOk());
  EXPECT_EQ(out->data(), std::string("\x08\0\0\0", 4));

  EXPECT_THAT(Put(*stub_, "has space", v1.view()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("printable ASCII")));
  EXPECT_THAT(Put(*stub_, "", v1.view()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected 1 to 256")));
  const core::Tensor scalar = testing::MakeTensor<int32_t>({}, {1});
  EXPECT_THAT(Put(*stub_, "s", scalar.view()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("scalar")));
  PutOptions bad_device;
  bad_device.device = "tpu";
  EXPECT_THAT(Put(*stub_, "d", v1.view(), bad_device).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("device 'tpu'")));
  bad_device.device = "gpu";
  if (server_->device() == "cpu") {  // a GPU server (TC_TEST_DEVICE=gpu) takes it
    EXPECT_THAT(Put(*stub_, "d", v1.view(), bad_device).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("computes on the CPU")));
  }
}

TEST_F(ResidentTensorTest, UnknownNamesBothParamsAndDeletes) {
  const core::Tensor t = testing::MakeTensor<int32_t>({3}, {1, 2, 3});
  const core::Tensor indices = testing::MakeIndices(core::DataType::kInt32, {1}, {0});
  EXPECT_THAT(Gather(*stub_, "nope", nullptr, indices.view()).status(),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("params_name: no resident tensor named 'nope'")));
  EXPECT_THAT(GatherNd(*stub_, "nope", nullptr, indices.view()).status(),
              StatusIs(absl::StatusCode::kNotFound));
  ASSERT_THAT(Put(*stub_, "t", t.view()).status(), IsOk());
  const core::TensorView view = t.view();
  EXPECT_THAT(Gather(*stub_, "t", &view, indices.view()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not both")));
  // An out-of-range index names its position, as inline.
  const core::Tensor bad = testing::MakeIndices(core::DataType::kInt32, {2}, {0, 3});
  EXPECT_THAT(Gather(*stub_, "t", nullptr, bad.view()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("indices[1] = 3 is not in")));
  EXPECT_THAT(Delete(*stub_, "t"), IsOk());
  EXPECT_THAT(Delete(*stub_, "t"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no tensor named 't'")));
  EXPECT_THAT(Gather(*stub_, "t", nullptr, indices.view()).status(),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_TRUE(List(*stub_)->empty());
  EXPECT_TRUE(test_support::WaitFor([&] { return server_->registry().resident_bytes() == 0; }));
}

TEST_F(ResidentTensorTest, AbortedAndShortUploadsLeaveNothing) {
  testing::Rng rng(5);
  const core::Tensor t = testing::RandomTensor(core::DataType::kFloat64, {1000, 16}, rng);
  PutOptions cancel;
  cancel.chunk_bytes = 4096;
  cancel.cancel_after = 3;
  EXPECT_THAT(Put(*stub_, "t", t.view(), cancel).status(), StatusIs(absl::StatusCode::kCancelled));
  PutOptions short_upload;
  short_upload.chunk_bytes = 4096;
  short_upload.short_by = 8;
  EXPECT_THAT(Put(*stub_, "t", t.view(), short_upload).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the upload ended after 127992 of 128000 bytes; nothing was "
                                 "stored")));
  const core::Tensor s = testing::MakeStrings({3}, {"a", "bb", "ccc"});
  short_upload.short_by = 1;
  EXPECT_THAT(Put(*stub_, "s", s.view(), short_upload).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("after 2 of 3 strings")));
  EXPECT_TRUE(List(*stub_)->empty());
  EXPECT_TRUE(test_support::WaitFor([&] { return server_->registry().resident_bytes() == 0; }));
}

TEST_F(ResidentTensorTest, TheMemoryCapRefusesBeforeAllocating) {
  ServerOptions options = TestOptions();
  options.max_resident_bytes = 1000;
  StartServer(options);
  const core::Tensor small = testing::MakeTensor<int64_t>({100}, std::vector<int64_t>(100, 1));
  const core::Tensor more = testing::MakeTensor<int64_t>({50}, std::vector<int64_t>(50, 2));
  ASSERT_THAT(Put(*stub_, "a", small.view()).status(), IsOk());
  EXPECT_THAT(Put(*stub_, "b", more.view()).status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("tensor 'b' needs 400 bytes but 800 of max_resident_bytes = "
                                 "1000 are in use")));
  ASSERT_THAT(Delete(*stub_, "a"), IsOk());
  EXPECT_THAT(Put(*stub_, "b", more.view()).status(), IsOk());
  // Strings count their payload as it arrives.
  const core::Tensor s = testing::MakeStrings({2}, {std::string(300, 'x'), std::string(300, 'y')});
  EXPECT_THAT(Put(*stub_, "s", s.view()).status(), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(server_->registry().resident_bytes(), 400);
}

// A description of more strings than the server could ever hold is refused from the first
// message, before anything is reserved or allocated for it, and the server goes on serving.
TEST_F(ResidentTensorTest, AHugeStringShapeIsRefusedBeforeAllocating) {
  auto describe_only = [&](int64_t elements) {
    auto context = Context("");
    v1::PutTensorResponse response;
    std::unique_ptr<grpc::ClientWriter<v1::PutTensorRequest>> writer =
        stub_->PutTensor(context.get(), &response);
    v1::PutTensorRequest first;
    first.set_name("huge");
    first.set_dtype(v1::DT_STRING);
    first.add_shape(elements);
    writer->Write(first);
    writer->WritesDone();
    return writer->Finish();
  };
  // 2^62 strings: their bookkeeping alone overflows int64.
  EXPECT_EQ(describe_only(int64_t{1} << 62).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // 2^40 strings: 32 TiB of bookkeeping, over max_resident_bytes.
  EXPECT_EQ(describe_only(int64_t{1} << 40).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(server_->registry().resident_bytes(), 0);
  const core::Tensor small = testing::MakeTensor<int64_t>({4}, {1, 2, 3, 4});
  EXPECT_THAT(Put(*stub_, "after", small.view()).status(), IsOk());
}

TEST_F(ResidentTensorTest, ReplaceWhile32ClientsGatherGivesOneVersionPerAnswer) {
  // Version v holds v in every element: an answer mixing versions would show two values.
  constexpr int64_t kRows = 512, kCols = 64;
  auto version = [](int32_t v) {
    return testing::MakeTensor<int32_t>({kRows, kCols}, std::vector<int32_t>(kRows * kCols, v));
  };
  ASSERT_THAT(Put(*stub_, "t", version(1).view()).status(), IsOk());
  std::atomic<bool> stop{false};
  std::atomic<int64_t> answers{0}, errors{0}, mixed{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 32; ++c) {
    clients.emplace_back([&, c] {
      auto stub = MakeStub(server_->port());
      std::vector<int32_t> rows(64);
      for (int i = 0; i < 64; ++i) rows[i] = (i * 37 + c) % kRows;
      const core::Tensor indices = testing::MakeTensor<int32_t>({64}, rows);
      while (!stop.load()) {
        absl::StatusOr<v1::Tensor> out = Gather(*stub, "t", nullptr, indices.view());
        if (!out.ok()) {
          ++errors;
          continue;
        }
        const auto* values = reinterpret_cast<const int32_t*>(out->data().data());
        const size_t n = out->data().size() / 4;
        for (size_t i = 1; i < n; ++i) {
          if (values[i] != values[0]) {
            ++mixed;
            break;
          }
        }
        ++answers;
      }
    });
  }
  PutOptions replace;
  replace.replace = true;
  replace.chunk_bytes = 16 << 10;
  for (int32_t v = 2; v <= 11; ++v) {
    EXPECT_THAT(Put(*stub_, "t", version(v).view(), replace).status(), IsOk());
    absl::SleepFor(absl::Milliseconds(50));
  }
  stop.store(true);
  for (auto& t : clients) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(mixed.load(), 0);
  EXPECT_GT(answers.load(), 32);
  absl::StatusOr<std::vector<v1::TensorInfo>> list = List(*stub_);
  ASSERT_THAT(list.status(), IsOk());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].version(), 11);
  // Old versions are freed once no gather holds them: one table's bytes remain.
  EXPECT_TRUE(test_support::WaitFor(
      [&] { return server_->registry().resident_bytes() == kRows * kCols * 4; }));
}

TEST_F(ResidentTensorTest, PreloadsNpyFilesBeforeServing) {
  testing::Rng rng(11);
  const core::Tensor table = testing::RandomTensor(core::DataType::kFloat32, {10, 4}, rng);
  const std::string path = absl::StrCat(::testing::TempDir(), "/resident_preload.npy");
  {
    absl::StatusOr<std::string> bytes = core::SerializeNpy(table.view());
    ASSERT_THAT(bytes.status(), IsOk());
    std::ofstream(path, std::ios::binary | std::ios::trunc) << *bytes;
  }
  ServerOptions options = TestOptions();
  options.preload = {absl::StrCat("emb=", path)};
  StartServer(options);
  absl::StatusOr<std::vector<v1::TensorInfo>> list = List(*stub_);
  ASSERT_THAT(list.status(), IsOk());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].name(), "emb");
  EXPECT_EQ((*list)[0].bytes(), 160);
  const core::Tensor indices = testing::MakeIndices(core::DataType::kInt32, {2}, {9, 0});
  const core::TensorView view = table.view();
  absl::StatusOr<v1::Tensor> by_name = Gather(*stub_, "emb", nullptr, indices.view());
  absl::StatusOr<v1::Tensor> inline_ = Gather(*stub_, "", &view, indices.view());
  ASSERT_THAT(by_name.status(), IsOk());
  EXPECT_EQ(by_name->SerializeAsString(), inline_->SerializeAsString());

  options.preload = {"emb=/nonexistent/table.npy"};
  EXPECT_THAT(Server::Start(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--preload emb=/nonexistent/table.npy: cannot open it: ")));
  options.preload = {"no_equals_sign"};
  EXPECT_THAT(Server::Start(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected NAME=PATH.npy")));
  // Tables load in parallel; of several failures, the first in flag order is the one said.
  options.preload = {absl::StrCat("ok=", path), "first=/nonexistent/a.npy",
                     "second=/nonexistent/b.npy", absl::StrCat("ok2=", path)};
  EXPECT_THAT(Server::Start(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--preload first=/nonexistent/a.npy: cannot open it: ")));
  // A storage kind after the path: the table held compactly, its bytes counted as held (a
  // table of finite values within float16's range: the random one holds any bits).
  const std::string finite = absl::StrCat(::testing::TempDir(), "/resident_preload_finite.npy");
  {
    std::vector<float> values(40);
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) / 3 - 5;
    const core::Tensor small = testing::MakeTensor<float>({10, 4}, values);
    absl::StatusOr<std::string> bytes = core::SerializeNpy(small.view());
    ASSERT_THAT(bytes.status(), IsOk());
    std::ofstream(finite, std::ios::binary | std::ios::trunc) << *bytes;
  }
  options.preload = {absl::StrCat("q8=", finite, ":int8-rowwise"),
                     absl::StrCat("f16=", finite, ":FLOAT16")};
  StartServer(options);
  list = List(*stub_);
  ASSERT_THAT(list.status(), IsOk());
  ASSERT_EQ(list->size(), 2u);
  for (const v1::TensorInfo& info : *list) {
    EXPECT_EQ(info.dtype(), v1::DT_FLOAT32);
    EXPECT_THAT(info.shape(), ::testing::ElementsAre(10, 4));
    EXPECT_EQ(info.storage(), info.name() == "q8" ? v1::INT8_ROWWISE : v1::FLOAT16);
    EXPECT_EQ(info.bytes(), info.name() == "q8" ? 10 * (4 + 8) : 10 * 4 * 2);
  }
  options.preload = {absl::StrCat("x=", path, ":int4")};
  EXPECT_THAT(Server::Start(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown storage 'int4'; expected one of as-is, float16")));
  options.preload = {absl::StrCat("x=", path, ":int8-rowwise-prequantized")};
  EXPECT_THAT(Server::Start(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("INT8_ROWWISE_PREQUANTIZED storage takes uint8")));
  options.preload = {absl::StrCat("emb=", path)};
  options.max_resident_bytes = 100;
  EXPECT_THAT(Server::Start(options).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("max_resident_bytes")));
}

TEST_F(ResidentTensorTest, AdminOperationsNeedTheAdminToken) {
  const std::string dir = ::testing::TempDir();
  const std::string ordinary = absl::StrCat(dir, "/resident_tokens"),
                    admin = absl::StrCat(dir, "/resident_admin_tokens");
  std::ofstream(ordinary, std::ios::trunc) << "user-token\n";
  std::ofstream(admin, std::ios::trunc) << "admin-token\n";
  ServerOptions options = TestOptions();
  options.auth_token_file = ordinary;
  options.admin_token_file = admin;
  StartServer(options);
  const core::Tensor t = testing::MakeTensor<int32_t>({3}, {1, 2, 3});
  PutOptions put;
  put.token = "user-token";
  EXPECT_THAT(Put(*stub_, "t", t.view(), put).status(),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("need an admin token")));
  put.token = "";
  EXPECT_THAT(Put(*stub_, "t", t.view(), put).status(),
              StatusIs(absl::StatusCode::kUnauthenticated));
  put.token = "wrong";
  EXPECT_THAT(Put(*stub_, "t", t.view(), put).status(),
              StatusIs(absl::StatusCode::kUnauthenticated));
  put.token = "admin-token";
  EXPECT_THAT(Put(*stub_, "t", t.view(), put).status(), IsOk());
  EXPECT_THAT(List(*stub_, "user-token").status(), IsOk());
  EXPECT_THAT(List(*stub_, "admin-token").status(), IsOk());
  EXPECT_THAT(List(*stub_).status(), StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(Delete(*stub_, "t", "user-token"), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(Delete(*stub_, "t", "admin-token"), IsOk());
}

// ---- with a GPU: tables in device memory ----

TEST_F(ResidentTensorTest, OnTheGpuGatherByNameEqualsInlineForEveryDtype) {
  if (cuda::CudaDeviceCount() == 0) {
    GTEST_SKIP() << "no CUDA device: " << cuda::CudaDeviceDescription(0).status().message();
  }
  ServerOptions options = TestOptions();
  options.device = "gpu";
  StartServer(options);
  CheckEveryDtype(*stub_, "", "gpu:0");  // the default device of a GPU server
  // The list outlives the loop (a range over *List(...) would read a destroyed temporary).
  const absl::StatusOr<std::vector<v1::TensorInfo>> listed = List(*stub_);
  ASSERT_THAT(listed.status(), IsOk());
  for (const v1::TensorInfo& info : *listed) ASSERT_THAT(Delete(*stub_, info.name()), IsOk());
  CheckEveryDtype(*stub_, "gpu:0", "gpu:0", /*expected_version=*/2);
  const core::Tensor s = testing::MakeStrings({2}, {"a", "b"});
  PutOptions put;
  put.device = "gpu";
  EXPECT_THAT(Put(*stub_, "strings", s.view(), put).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("live on the CPU")));
  put.device = "cpu";
  testing::Rng rng(2);
  const core::Tensor t = testing::RandomTensor(core::DataType::kFloat32, {64, 8}, rng);
  absl::StatusOr<v1::TensorInfo> info = Put(*stub_, "on_cpu", t.view(), put);
  ASSERT_THAT(info.status(), IsOk());
  EXPECT_EQ(info->device(), "cpu");
}

}  // namespace
}  // namespace tensorcompute::server
