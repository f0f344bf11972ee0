#include "server/flag_help.h"

#include <algorithm>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tensorcompute::server {
namespace {

constexpr size_t kWidth = 96;  // help text is wrapped to this many columns

// "--name (default: value)" and the help text, wrapped and indented.
void PrintFlag(std::FILE* out, const absl::CommandLineFlag& flag) {
  std::string value = flag.DefaultValue();
  if (value.empty()) value = "\"\"";
  std::fprintf(out, "  --%s (default: %s)\n", std::string(flag.Name()).c_str(), value.c_str());
  // The help text is re-wrapped word by word: "      " (6 columns) is the indent, and a line
  // holding only it is empty.
  std::string line = "      ";
  for (absl::string_view word : absl::StrSplit(flag.Help(), ' ', absl::SkipEmpty())) {
    if (line.size() > 6 && line.size() + 1 + word.size() > kWidth) {
      std::fprintf(out, "%s\n", line.c_str());
      line = "      ";
    }
    absl::StrAppend(&line, line.size() > 6 ? " " : "", word);
  }
  if (line.size() > 6) std::fprintf(out, "%s\n", line.c_str());
}

}  // namespace

bool AsksForHelp(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") break;  // what follows is not a flag
    if (arg == "--help" || arg == "-help") return true;
  }
  return false;
}

void PrintFlagHelp(std::FILE* out, absl::string_view usage, absl::string_view file,
                   absl::Span<const FlagGroup> groups) {
  std::vector<const absl::CommandLineFlag*> ours;
  // Matched by the end of the file name: the compiler records it as the build gave it, which
  // may be an absolute path.
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (!flag->IsRetired() && absl::EndsWith(flag->Filename(), file)) ours.push_back(flag);
  }
  // GetAllFlags is a hash map: sorted so that "Other" lists in a stable order.
  std::sort(ours.begin(), ours.end(),
            [](const auto* a, const auto* b) { return a->Name() < b->Name(); });
  std::fprintf(out, "%s\n", std::string(usage).c_str());
  absl::flat_hash_set<absl::string_view> listed;
  for (const FlagGroup& group : groups) {
    std::fprintf(out, "\n%s:\n", std::string(group.title).c_str());
    for (absl::string_view name : group.flags) {
      const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
      if (flag == nullptr || !absl::EndsWith(flag->Filename(), file)) {
        std::fprintf(out, "  --%s (no such flag)\n", std::string(name).c_str());
        continue;
      }
      PrintFlag(out, *flag);
      listed.insert(flag->Name());
    }
  }
  bool other = false;
  for (const absl::CommandLineFlag* flag : ours) {
    if (listed.contains(flag->Name())) continue;
    if (!other) std::fprintf(out, "\nOther:\n");
    other = true;
    PrintFlag(out, *flag);
  }
  std::fprintf(out, "\n--helpfull lists every flag, Abseil's own too.\n");
}

}  // namespace tensorcompute::server
