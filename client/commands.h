// The CLI's commands, one file each (command_*.cc); cli_main.cc dispatches through a table.
// Each takes its own argv (argv[0] is "nrtprof COMMAND") and returns the process exit code.
#ifndef NRTPROF_CLIENT_COMMANDS_H_
#define NRTPROF_CLIENT_COMMANDS_H_

namespace nrtprof::cli {

int RunCommand(int argc, char** argv);
int CaptureCommand(int argc, char** argv);
int SummaryCommand(int argc, char** argv);
int DiffCommand(int argc, char** argv);
int StatusCommand(int argc, char** argv);
int FleetCommand(int argc, char** argv);

// nrtprof's main(): dispatches argv[1] to a command.
int CliMain(int argc, char** argv);

}  // namespace nrtprof::cli

#endif  // NRTPROF_CLIENT_COMMANDS_H_
