// Flags shared by several commands.
#ifndef NRTPROF_CLIENT_FLAGS_H_
#define NRTPROF_CLIENT_FLAGS_H_

#include <string>

#include "absl/flags/declare.h"
#include "absl/strings/string_view.h"

ABSL_DECLARE_FLAG(std::string, addr);   // command_status.cc
ABSL_DECLARE_FLAG(std::string, out);    // command_run.cc
ABSL_DECLARE_FLAG(int, stacks);         // command_run.cc
ABSL_DECLARE_FLAG(std::string, files);  // command_run.cc
ABSL_DECLARE_FLAG(bool, quiet);         // progress.cc

namespace nrtprof::cli {

// Whether the command line named the flag (by abseil's name, --step_multiple for
// --step-multiple), even with its default's value (--iterations 0): the CLI's check of the
// arguments (cli_main.cc) notes each flag before abseil reads them.
bool FlagGiven(absl::string_view name);

}  // namespace nrtprof::cli

#endif  // NRTPROF_CLIENT_FLAGS_H_
