// File: server/flag_help.h
//
// The server's --help. Abseil's own --help lists only the flags of a file named like the
// program, which ours is not (server/main.cc), so it printed "No flags matched". This one lists
// the flags of one source file in the caller's groups (listeners, limits, ...), each with its
// default and its help text; a flag of that file that no group names is listed last, under
// "Other", so that none is ever left out. --helpfull stays Abseil's: every flag of every file.

#ifndef TENSORCOMPUTE_SERVER_FLAG_HELP_H_
#define TENSORCOMPUTE_SERVER_FLAG_HELP_H_

#include <cstdio>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tensorcompute::server {

struct FlagGroup {
  absl::string_view title;               // "Listeners and shutdown"
  std::vector<absl::string_view> flags;  // names without "--", in the order to list them
};

// True when the command line asks for help: an argument "--help" or "-help". The caller
// prints the help and exits 0 before absl::ParseCommandLine, which would print Abseil's.
bool AsksForHelp(int argc, char** argv);

// Writes `usage`, then every flag whose source file name ends with `file` (e.g.
// "server/main.cc"), group by group, then the flags no group names; a name in a group that is
// no flag of `file` is a programming error and is listed as "(no such flag)", so tests see it.
void PrintFlagHelp(std::FILE* out, absl::string_view usage, absl::string_view file,
                   absl::Span<const FlagGroup> groups);

}  // namespace tensorcompute::server

#endif  // TENSORCOMPUTE_SERVER_FLAG_HELP_H_
