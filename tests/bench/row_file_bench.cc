// Random row reads from a file on disk through core/disk/row_file.h (issue 43), to hold against
// the disk's own random-read IOPS that fio measures on the same file in the same run
// (tools/bench/disk_bench.sh; docs/performance.md, "Tables on disk").
//
// Each of --threads threads reads batches of --batch distinct random rows (a batch's misses) with
// one RowFile::Read each, for --seconds. Prints, per thread count, rows read per second, the
// bytes moved per second and the median and 99th percentile of a batch's time.
//
// Run: build/tests/bench/row_file_bench --file /var/tmp/table.bin --row_bytes 256
//        --data_offset 128 --threads 1,2,4 --seconds 10

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include <sys/stat.h>

#include "core/disk/row_file.h"

namespace {

using tensorcompute::core::disk::RowFile;

struct Args {
  std::string file;
  int64_t row_bytes = 256;
  int64_t data_offset = 128;
  int64_t batch = 2000;
  double seconds = 10;
  std::vector<int> threads = {1, 2, 4};
  bool direct = true;
};

bool Parse(int argc, char** argv, Args* args) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    bool ok = true;
    if (flag == "--file") {
      args->file = value;
    } else if (flag == "--row_bytes") {
      ok = absl::SimpleAtoi(value, &args->row_bytes);
    } else if (flag == "--data_offset") {
      ok = absl::SimpleAtoi(value, &args->data_offset);
    } else if (flag == "--batch") {
      ok = absl::SimpleAtoi(value, &args->batch);
    } else if (flag == "--seconds") {
      ok = absl::SimpleAtod(value, &args->seconds);
    } else if (flag == "--direct") {
      args->direct = value != "0";
    } else if (flag == "--threads") {
      args->threads.clear();
      for (absl::string_view t : absl::StrSplit(value, ',')) {
        int n = 0;
        ok = ok && absl::SimpleAtoi(t, &n) && n > 0;
        args->threads.push_back(n);
      }
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "bad flag %s %s\n", flag.c_str(), value.c_str());
      return false;
    }
  }
  return !args->file.empty();
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!Parse(argc, argv, &args)) {
    std::fprintf(stderr,
                 "usage: row_file_bench --file PATH [--row_bytes 256] [--data_offset 128] "
                 "[--batch 2000] [--threads 1,2,4] [--seconds 10] [--direct 1]\n");
    return 2;
  }
  struct stat st {};
  if (::stat(args.file.c_str(), &st) != 0) {
    std::perror(args.file.c_str());
    return 1;
  }
  const int64_t rows = (st.st_size - args.data_offset) / args.row_bytes;
  RowFile::Options options;
  options.direct = args.direct;
  auto file = RowFile::Open(args.file, args.data_offset, rows, args.row_bytes, options);
  if (!file.ok()) {
    std::fprintf(stderr, "%s\n", file.status().ToString().c_str());
    return 1;
  }
  std::printf(
      "file %s: %lld rows of %lld B from byte %lld; direct %d, io_uring %d, %d in flight"
      " a thread\n",
      args.file.c_str(), static_cast<long long>(rows), static_cast<long long>(args.row_bytes),
      static_cast<long long>(args.data_offset), (*file)->direct(), (*file)->uring(),
      (*file)->InFlight());
  std::printf("%8s %14s %12s %12s %12s\n", "threads", "rows/s", "MiB/s moved", "batch p50",
              "batch p99");
  for (int threads : args.threads) {
    std::atomic<int64_t> total_rows{0};
    std::atomic<bool> failed{false};
    std::vector<std::vector<double>> batch_ms(threads);
    const auto start = std::chrono::steady_clock::now();
    const auto stop = start + std::chrono::duration<double>(args.seconds);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        std::mt19937_64 rng(1234 + t);
        std::uniform_int_distribution<int64_t> pick(0, rows - 1);
        std::vector<int64_t> batch(args.batch);
        std::vector<uint8_t> out(args.batch * args.row_bytes);
        std::vector<uint8_t*> dest(args.batch);
        for (int64_t i = 0; i < args.batch; ++i) dest[i] = out.data() + i * args.row_bytes;
        while (std::chrono::steady_clock::now() < stop) {
          for (auto& r : batch) r = pick(rng);
          const auto b0 = std::chrono::steady_clock::now();
          if (!(*file)->Read(batch, dest.data()).ok()) {
            failed = true;
            return;
          }
          batch_ms[t].push_back(
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - b0)
                  .count());
          total_rows += args.batch;
        }
      });
    }
    for (auto& th : pool) th.join();
    if (failed) {
      std::fprintf(stderr, "a read failed\n");
      return 1;
    }
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::vector<double> all;
    for (auto& v : batch_ms) all.insert(all.end(), v.begin(), v.end());
    std::sort(all.begin(), all.end());
    const double rate = static_cast<double>(total_rows.load()) / elapsed;
    // Each row moves a 4 KiB block, two for the rows that cross a block boundary.
    const double crossing =
        static_cast<double>((args.row_bytes + RowFile::kBlockBytes - 1) / RowFile::kBlockBytes);
    std::printf("%8d %14.0f %12.1f %10.2fms %10.2fms\n", threads, rate,
                rate * crossing * RowFile::kBlockBytes / (1 << 20),
                all.empty() ? 0.0 : all[all.size() / 2],
                all.empty() ? 0.0 : all[std::min(all.size() - 1, all.size() * 99 / 100)]);
  }
  return 0;
}
