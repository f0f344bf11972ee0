#include "server/descriptor_headroom.h"

#include <utility>

#include <dirent.h>
#include <sys/resource.h>

namespace tensorcompute::server {

int64_t OpenDescriptors() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int64_t entries = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++entries;
  }
  closedir(dir);
  return entries - 1;  // the directory's own descriptor
}

int64_t DescriptorLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return -1;
  return static_cast<int64_t>(limit.rlim_cur);
}

DescriptorHeadroom::DescriptorHeadroom(int64_t reserve) : DescriptorHeadroom(reserve, Sources()) {}

DescriptorHeadroom::DescriptorHeadroom(int64_t reserve, Sources sources)
    : reserve_(reserve), sources_(std::move(sources)) {}

void DescriptorHeadroom::Recount(absl::Time now) {
  counted_ = sources_.open();
  limit_ = sources_.limit();
  admitted_ = 0;
  counted_at_ = now;
}

bool DescriptorHeadroom::Admit() {
  const absl::Time now = sources_.now();
  // After a fresh count the new descriptor is in it; after an older one it is one more.
  bool fresh = false;
  if (now - counted_at_ >= absl::Milliseconds(100)) {
    Recount(now);
    fresh = true;
  }
  if (counted_ < 0 || limit_ < 0) return true;
  int64_t open = fresh ? counted_ : counted_ + admitted_ + 1;
  if (open + reserve_ > limit_ && !fresh && now - counted_at_ >= absl::Milliseconds(5)) {
    Recount(now);
    fresh = true;
    if (counted_ < 0 || limit_ < 0) return true;
    open = counted_;
  }
  if (open + reserve_ > limit_) return false;
  if (!fresh) ++admitted_;
  return true;
}

}  // namespace tensorcompute::server
