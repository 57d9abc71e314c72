// Flags shared by several commands.
#ifndef NRTPROF_CLIENT_FLAGS_H_
#define NRTPROF_CLIENT_FLAGS_H_

#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(std::string, addr);   // command_status.cc
ABSL_DECLARE_FLAG(std::string, out);    // command_run.cc
ABSL_DECLARE_FLAG(int, stacks);         // command_run.cc
ABSL_DECLARE_FLAG(std::string, files);  // command_run.cc
ABSL_DECLARE_FLAG(bool, quiet);         // progress.cc

#endif  // NRTPROF_CLIENT_FLAGS_H_
