#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "client/commands.h"

namespace nrtprof::cli {
namespace {

struct Command {
  const char* name;
  int (*run)(int argc, char** argv);
  const char* usage;
};

constexpr Command kCommands[] = {
    {"run", RunCommand,
     "run [--out DIR] [--stacks N] [--addr ADDRESS [--tls_ca PEM --token_file PATH]] -- CMD "
     "ARGS...\n"
     "      run CMD under the profiler and print where its device time went"},
    {"capture", CaptureCommand,
     "capture --duration D [--pid PID]... [--out DIR] [--stacks N] [--addr ADDRESS ...]\n"
     "      record the programs streaming to a standing daemon for D (Ctrl-C ends it early)"},
    {"summary", SummaryCommand,
     "summary CAPTURE_DIR_OR_FILE [--sort KEY] [--format text|csv|json] [--limit N]\n"
     "      the key_averages table of a capture, re-sorted or re-formatted"},
    {"status", StatusCommand, "status [--json] [--addr ADDRESS [--tls_ca PEM --token_file PATH]]\n"
                              "      the daemon's address, uptime, processes, events and drops"},
};

void PrintUsage(FILE* out) {
  fprintf(out, "usage: nrtprof COMMAND [FLAGS]\n\ncommands:\n");
  for (const Command& c : kCommands) fprintf(out, "  nrtprof %s\n", c.usage);
}

}  // namespace

int CliMain(int argc, char** argv) {
  if (argc < 2) {
    PrintUsage(stderr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "help" || name == "--help" || name == "-h") {
    PrintUsage(stdout);
    return 0;
  }
  for (const Command& c : kCommands) {
    if (name == c.name) {
      // The command sees "nrtprof NAME" as its program name.
      std::string program = std::string("nrtprof ") + c.name;
      std::vector<char*> args = {program.data()};
      for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
      args.push_back(nullptr);
      return c.run(static_cast<int>(args.size()) - 1, args.data());
    }
  }
  fprintf(stderr, "nrtprof: unknown command '%s' (commands: run, capture, summary, status; see nrtprof help)\n",
          name.c_str());
  return 2;
}

}  // namespace nrtprof::cli
