// Tests of ServerOptions::compute_nice: the CPU executor's threads run at that nice value and
// every other thread of the process keeps its own, and a value outside [0, 19] fails Start.

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include <dirent.h>

#include "server/server.h"
#include "tests/server/test_server.h"
#include "tests/testing/status_matchers.h"

namespace tensorcompute::server {
namespace {

using ::tensorcompute::testing::StatusIs;

// The nice value of every thread of this process (field 19 of /proc/self/task/<tid>/stat).
std::vector<int> ThreadNiceValues() {
  std::vector<int> nice;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return nice;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    std::ifstream stat(std::string("/proc/self/task/") + entry->d_name + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;  // the thread exited meanwhile
    std::istringstream fields(line.substr(line.rfind(')') + 2));
    std::string field;
    for (int i = 3; i <= 19 && fields >> field; ++i) {
    }
    nice.push_back(std::stoi(field));
  }
  closedir(dir);
  return nice;
}

int CountEqual(const std::vector<int>& values, int value) {
  int n = 0;
  for (int v : values) n += v == value ? 1 : 0;
  return n;
}

TEST(ComputeNice, TheExecutorThreadsAndOnlyThemRunAtIt) {
  ServerOptions options = test_support::TestOptions();
  options.cpu_threads = 3;
  options.compute_nice = 7;
  const int before = CountEqual(ThreadNiceValues(), 7);
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  // Each worker lowers its own priority as it starts, which may be just after Start returns.
  EXPECT_TRUE(test_support::WaitFor([&] { return CountEqual(ThreadNiceValues(), 7) == before + 3; },
                                    absl::Seconds(10)))
      << "threads at nice 7: " << CountEqual(ThreadNiceValues(), 7) - before << " of 3";
  EXPECT_GT(CountEqual(ThreadNiceValues(), 0), 0);  // gRPC's threads, this one
  // And it serves.
  auto stub = test_support::MakeStub((*server)->port());
  EXPECT_TRUE(test_support::SendGather(*stub, test_support::SmallGather()).ok());
}

TEST(ComputeNice, OutsideZeroToNineteenFailsStart) {
  for (int nice : {-1, 20}) {
    ServerOptions options = test_support::TestOptions();
    options.compute_nice = nice;
    EXPECT_THAT(Server::Start(options).status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         "need 0 <= compute_nice <= 19 and malloc_trim_interval >= 0"))
        << nice;
  }
}

}  // namespace
}  // namespace tensorcompute::server
