// Client::PutTensor / DeleteTensor / ListTensors / GatherByName against real in-process
// servers: uploads in one chunk and in many (larger than the server's message limit), every
// dtype family, gathers by name equal to the inline gather byte for byte, the server's error
// codes passed through, and uploads to every target of a two-server client.

#include <algorithm>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "client/client.h"
#include "core/tensor.h"
#include "server/server.h"
#include "tests/client/test_client.h"
#include "tests/server/test_server.h"
#include "tests/testing/random_tensor.h"
#include "tests/testing/reference_gather.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::client {
namespace {

using ::tensorcompute::server::Server;
using ::tensorcompute::server::ServerOptions;
using ::tensorcompute::server::test_support::StartServer;
using ::tensorcompute::server::test_support::TestOptions;
using ::tensorcompute::testing::IsOk;
using ::tensorcompute::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string Local(const Server& server) { return absl::StrCat("127.0.0.1:", server.port()); }

std::unique_ptr<Client> MakeClient(const std::string& target, const std::string& auth_token = "",
                                   const std::string& admin_token = "") {
  ClientOptions options = test_support::TestClientOptions(target);
  options.auth_token = auth_token;
  options.admin_token = admin_token;
  return test_support::MakeClient(options);
}

// The names that target `target` lists (a failed list fails the test and lists none).
std::vector<std::string> Names(Client& client, int target = 0) {
  absl::StatusOr<std::vector<TensorInfo>> list = client.ListTensors(target);
  EXPECT_THAT(list.status(), IsOk());
  std::vector<std::string> names;
  if (list.ok()) {
    for (const TensorInfo& t : *list) names.push_back(t.name);
  }
  return names;
}

// Rows of `table` picked by random indices: the gather by name must equal the inline gather
// (and the reference) byte for byte.
void ExpectGathersByNameMatchInline(Client& client, const std::string& name,
                                    const core::Tensor& table, uint64_t seed) {
  testing::Rng rng(seed);
  const core::Tensor indices =
      testing::RandomIndices(core::DataType::kInt64, {3, 5}, {table.shape()[0]}, rng);
  auto by_name = client.GatherByName(name, indices.view());
  ASSERT_THAT(by_name.status(), IsOk());
  auto reference = testing::ReferenceGather(table.view(), indices.view(), 0, 0);
  ASSERT_THAT(reference.status(), IsOk());
  EXPECT_TRUE(core::IdenticalTensors(by_name->view(), reference->view()));
  auto inline_result = client.Gather(table.view(), indices.view());
  if (inline_result.ok()) {  // a table over the message limit cannot go inline
    EXPECT_TRUE(core::IdenticalTensors(by_name->view(), inline_result->view()));
  }
  if (table.shape().size() >= 2) {
    const core::Tensor nd_indices = testing::RandomIndices(
        core::DataType::kInt32, {4, 2}, {table.shape()[0], table.shape()[1]}, rng);
    auto nd_by_name = client.GatherNdByName(name, nd_indices.view());
    ASSERT_THAT(nd_by_name.status(), IsOk());
    auto nd_reference = testing::ReferenceGatherNd(table.view(), nd_indices.view(), 0);
    ASSERT_THAT(nd_reference.status(), IsOk());
    EXPECT_TRUE(core::IdenticalTensors(nd_by_name->view(), nd_reference->view()));
  }
}

TEST(ResidentTensors, PutListGatherByNameDelete) {
  auto server = StartServer();
  auto client = MakeClient(Local(*server));
  testing::Rng rng(7);
  const core::Tensor table = testing::RandomTensor(core::DataType::kFloat32, {100, 8}, rng);

  auto stored = client->PutTensor("emb", table.view());
  ASSERT_THAT(stored.status(), IsOk());
  EXPECT_EQ(stored->name, "emb");
  EXPECT_EQ(stored->dtype, core::DataType::kFloat32);
  EXPECT_THAT(stored->shape, ElementsAre(100, 8));
  EXPECT_EQ(stored->bytes, 100 * 8 * 4);
  EXPECT_EQ(stored->device, "cpu");
  EXPECT_EQ(stored->version, 1);
  EXPECT_LE(absl::AbsDuration(stored->created - absl::Now()), absl::Minutes(1));

  auto list = client->ListTensors();
  ASSERT_THAT(list.status(), IsOk());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].name, "emb");
  EXPECT_THAT((*list)[0].shape, ElementsAre(100, 8));
  EXPECT_EQ((*list)[0].version, 1);

  ExpectGathersByNameMatchInline(*client, "emb", table, 1);

  auto deleted = client->DeleteTensor("emb");
  ASSERT_THAT(deleted.status(), IsOk());
  EXPECT_EQ(deleted->name, "emb");
  EXPECT_THAT(Names(*client), IsEmpty());
  const core::Tensor indices = testing::MakeIndices(core::DataType::kInt32, {1}, {0});
  EXPECT_THAT(client->GatherByName("emb", indices.view()).status(),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(client->GatherNdByName("emb", indices.view()).status(),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(client->DeleteTensor("emb").status(), StatusIs(absl::StatusCode::kNotFound));
}

TEST(ResidentTensors, ASourceIsReadAsItIsSentAndAFailedReadStoresNothing) {
  auto server = StartServer();
  auto client = MakeClient(Local(*server));
  testing::Rng rng(11);
  const core::Tensor table = testing::RandomTensor(core::DataType::kInt16, {1000, 33}, rng);
  PutOptions put;
  put.chunk_bytes = 4096;
  std::vector<int64_t> progress;
  put.on_progress = [&](int64_t sent, int64_t total) {
    EXPECT_EQ(total, 1000 * 33 * 2);
    progress.push_back(sent);
  };
  auto stored = client->PutTensor("src", SourceOf(table.view()), put);
  ASSERT_THAT(stored.status(), IsOk());
  ExpectGathersByNameMatchInline(*client, "src", table, 3);
  ASSERT_EQ(progress.size(), (1000u * 33 * 2 + 4095) / 4096);
  EXPECT_TRUE(std::is_sorted(progress.begin(), progress.end()));
  EXPECT_EQ(progress.back(), 1000 * 33 * 2);

  // A read that fails half-way ends the upload with its error; the server keeps nothing.
  TensorSource failing = SourceOf(table.view());
  failing.read = [read = failing.read](int64_t offset, absl::Span<uint8_t> out) {
    if (offset >= 8 * 4096) return absl::DataLossError("the disk went away");
    return read(offset, out);
  };
  EXPECT_THAT(client->PutTensor("half", failing, put).status(),
              StatusIs(absl::StatusCode::kDataLoss, "the disk went away"));
  EXPECT_THAT(Names(*client), ElementsAre("src"));
  // Nor does a string source or an overflowing shape get as far as a call.
  TensorSource strings{core::DataType::kString, {2}, failing.read};
  EXPECT_THAT(client->PutTensor("s", strings).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  TensorSource huge{core::DataType::kFloat64, {int64_t{1} << 40, int64_t{1} << 30}, failing.read};
  EXPECT_THAT(client->PutTensor("h", huge).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ResidentTensors, ManyChunksLargerThanTheServersMessageLimit) {
  ServerOptions options = TestOptions();
  options.max_message_bytes = int64_t{1} << 20;
  auto server = StartServer(options);
  auto client = MakeClient(Local(*server));
  testing::Rng rng(8);
  // 3 MiB of float64 in 64 KiB chunks (48 messages), three times the message limit.
  const core::Tensor table = testing::RandomTensor(core::DataType::kFloat64, {3 * 1024, 128}, rng);
  PutOptions put;
  put.chunk_bytes = 64 << 10;
  auto stored = client->PutTensor("big", table.view(), put);
  ASSERT_THAT(stored.status(), IsOk());
  EXPECT_EQ(stored->bytes, 3 << 20);
  ExpectGathersByNameMatchInline(*client, "big", table, 2);

  // Strings in many chunks, empty strings and long ones included.
  std::vector<std::string> values;
  for (int i = 0; i < 2000; ++i) {
    values.push_back(i % 7 == 0 ? "" : std::string(1 + (i * 37) % 900, static_cast<char>(i)));
  }
  const core::Tensor strings = testing::MakeStrings({500, 4}, values);
  put.chunk_bytes = 4096;
  ASSERT_THAT(client->PutTensor("words", strings.view(), put).status(), IsOk());
  ExpectGathersByNameMatchInline(*client, "words", strings, 3);

  // The default (1 MiB) chunks plus framing would pass this server's limit: refused, and
  // nothing is left behind.
  put.chunk_bytes = int64_t{1} << 20;
  EXPECT_THAT(client->PutTensor("too_big_chunks", table.view(), put).status(),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(Names(*client), ::testing::UnorderedElementsAre("big", "words"));
}

TEST(ResidentTensors, EmptyTensorAndEveryDtypeFamily) {
  auto server = StartServer();
  auto client = MakeClient(Local(*server));
  testing::Rng rng(9);
  auto empty = core::Tensor::Allocate(core::DataType::kInt32, {0, 4});
  ASSERT_THAT(empty.status(), IsOk());
  auto stored = client->PutTensor("empty", empty->view());
  ASSERT_THAT(stored.status(), IsOk());
  EXPECT_THAT(stored->shape, ElementsAre(0, 4));
  EXPECT_EQ(stored->bytes, 0);
  for (core::DataType dtype : {core::DataType::kBool, core::DataType::kInt8,
                               core::DataType::kFloat16, core::DataType::kComplex128}) {
    const core::Tensor table = testing::RandomTensor(dtype, {33, 3}, rng);
    const std::string name = absl::StrCat("t", static_cast<int>(dtype));
    PutOptions put;
    put.chunk_bytes = 40;  // several chunks, whole elements each
    ASSERT_THAT(client->PutTensor(name, table.view(), put).status(), IsOk());
    ExpectGathersByNameMatchInline(*client, name, table, 4);
  }
}

TEST(ResidentTensors, AlreadyExistsUnlessReplace) {
  auto server = StartServer();
  auto client = MakeClient(Local(*server));
  const core::Tensor v1 = testing::MakeTensor<int32_t>({3}, {1, 2, 3});
  const core::Tensor v2 = testing::MakeTensor<int32_t>({2}, {7, 8});
  ASSERT_THAT(client->PutTensor("t", v1.view()).status(), IsOk());
  EXPECT_THAT(client->PutTensor("t", v2.view()).status(),
              StatusIs(absl::StatusCode::kAlreadyExists));
  PutOptions replace;
  replace.replace = true;
  auto stored = client->PutTensor("t", v2.view(), replace);
  ASSERT_THAT(stored.status(), IsOk());
  EXPECT_EQ(stored->version, 2);
  const core::Tensor indices = testing::MakeIndices(core::DataType::kInt32, {2}, {1, 0});
  auto out = client->GatherByName("t", indices.view());
  ASSERT_THAT(out.status(), IsOk());
  EXPECT_TRUE(
      core::IdenticalTensors(out->view(), testing::MakeTensor<int32_t>({2}, {8, 7}).view()));
}

TEST(ResidentTensors, BadOptionsAreRefusedBeforeAnyCall) {
  // Nothing listens on port 1: an RPC would fail UNAVAILABLE, not INVALID_ARGUMENT.
  auto client = MakeClient("127.0.0.1:1");
  const core::Tensor t = testing::MakeTensor<int32_t>({1}, {1});
  PutOptions put;
  put.chunk_bytes = 0;
  EXPECT_THAT(client->PutTensor("t", t.view(), put).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("chunk_bytes")));
  EXPECT_THAT(client->ListTensors(1).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ResidentTensors, PutAndDeleteOnEveryTargetOfATwoServerClient) {
  auto a = StartServer();
  auto b = StartServer();
  auto client = MakeClient(Local(*a) + "," + Local(*b));
  const core::Tensor table = testing::MakeTensor<int64_t>({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  PutOptions all;
  all.all_targets = true;
  ASSERT_THAT(client->PutTensor("shared", table.view(), all).status(), IsOk());
  EXPECT_THAT(Names(*client, 0), ElementsAre("shared"));
  EXPECT_THAT(Names(*client, 1), ElementsAre("shared"));
  // Round-robin gathers by name reach both replicas, and both answer.
  for (int i = 0; i < 4; ++i) ExpectGathersByNameMatchInline(*client, "shared", table, 10 + i);

  // Delete from the first target only; a put to all without replace then fails on the second
  // alone, and the message says which target failed and which succeeded.
  ASSERT_THAT(client->DeleteTensor("shared").status(), IsOk());
  EXPECT_THAT(Names(*client, 0), IsEmpty());
  EXPECT_THAT(Names(*client, 1), ElementsAre("shared"));
  absl::Status status = client->PutTensor("shared", table.view(), all).status();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kAlreadyExists,
                               HasSubstr(absl::StrCat("failed on 1 of 2 targets: ", Local(*b),
                                                      ": ALREADY_EXISTS"))));
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("succeeded on: ", Local(*a))));
  EXPECT_THAT(Names(*client, 0), ElementsAre("shared"));  // the copy stored stays

  ASSERT_THAT(client->DeleteTensor("shared", /*all_targets=*/true).status(), IsOk());
  EXPECT_THAT(Names(*client, 0), IsEmpty());
  EXPECT_THAT(Names(*client, 1), IsEmpty());
  EXPECT_THAT(client->DeleteTensor("shared", /*all_targets=*/true).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("failed on 2 of 2 targets")));
}

TEST(ResidentTensors, OverTheResidentByteCapIsResourceExhausted) {
  ServerOptions options = TestOptions();
  options.max_resident_bytes = 1000;
  auto server = StartServer(options);
  auto client = MakeClient(Local(*server));
  testing::Rng rng(5);
  const core::Tensor small = testing::RandomTensor(core::DataType::kUint8, {10, 60}, rng);
  const core::Tensor large = testing::RandomTensor(core::DataType::kUint8, {10, 50}, rng);
  ASSERT_THAT(client->PutTensor("small", small.view()).status(), IsOk());
  PutOptions put;
  put.chunk_bytes = 100;
  EXPECT_THAT(client->PutTensor("large", large.view(), put).status(),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(Names(*client), ElementsAre("small"));
  ASSERT_THAT(client->DeleteTensor("small").status(), IsOk());
  ASSERT_THAT(client->PutTensor("large", large.view(), put).status(), IsOk());
}

TEST(ResidentTensors, PutAndDeleteSendTheAdminToken) {
  ServerOptions options = TestOptions();
  options.auth_token_file = absl::StrCat(::testing::TempDir(), "/resident_reader_tokens");
  options.admin_token_file = absl::StrCat(::testing::TempDir(), "/resident_admin_tokens");
  std::ofstream(options.auth_token_file, std::ios::trunc) << "reader\n";
  std::ofstream(options.admin_token_file, std::ios::trunc) << "admin\n";
  auto server = StartServer(options);
  const core::Tensor t = testing::MakeTensor<int32_t>({2}, {5, 6});
  const core::Tensor indices = testing::MakeIndices(core::DataType::kInt32, {1}, {1});

  auto reader = MakeClient(Local(*server), "reader");
  EXPECT_THAT(reader->PutTensor("t", t.view()).status(),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("admin token")));
  auto admin = MakeClient(Local(*server), "reader", "admin");
  ASSERT_THAT(admin->PutTensor("t", t.view()).status(), IsOk());
  // Gathers and lists need only the ordinary token.
  EXPECT_THAT(Names(*reader), ElementsAre("t"));
  auto out = reader->GatherByName("t", indices.view());
  ASSERT_THAT(out.status(), IsOk());
  EXPECT_TRUE(core::IdenticalTensors(out->view(), testing::MakeTensor<int32_t>({1}, {6}).view()));
  EXPECT_THAT(reader->DeleteTensor("t").status(), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(admin->DeleteTensor("t").status(), IsOk());
}

}  // namespace
}  // namespace tensorcompute::client
