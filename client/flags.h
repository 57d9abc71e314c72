// Flags shared by several commands.
#ifndef NRTPROF_CLIENT_FLAGS_H_
#define NRTPROF_CLIENT_FLAGS_H_

#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(std::string, addr);

#endif  // NRTPROF_CLIENT_FLAGS_H_
