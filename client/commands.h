// The CLI's commands, one file each (command_*.cc); cli_main.cc dispatches through a table.
// Each takes its own argv (argv[0] is "nrtprof COMMAND") and returns the process exit code.
#ifndef NRTPROF_CLIENT_COMMANDS_H_
#define NRTPROF_CLIENT_COMMANDS_H_

#include <memory>
#include <string>

#include "client/daemon_connection.h"

namespace nrtprof::cli {

int RunCommand(int argc, char** argv);
int CaptureCommand(int argc, char** argv);
int SummaryCommand(int argc, char** argv);
int DiffCommand(int argc, char** argv);
int ReportCommand(int argc, char** argv);
int ExportCommand(int argc, char** argv);
int StatusCommand(int argc, char** argv);
int CapturesCommand(int argc, char** argv);
int TopCommand(int argc, char** argv);
int FleetCommand(int argc, char** argv);
int CollectivesCommand(int argc, char** argv);

// The standing daemon that --addr (and the TLS flags), $NRTPROF_ADDR or the per-user socket
// name, connected; or null after one line on stderr ("nrtprof COMMAND: ...", with how to
// start a daemon when none answers) and *exit_code set (2 for a setting that cannot be used).
// *address: the address tried (may be null).
std::unique_ptr<DaemonConnection> ConnectToStandingDaemon(const char* command, int* exit_code,
                                                          std::string* address);

// nrtprof's main(): dispatches argv[1] to a command.
int CliMain(int argc, char** argv);

}  // namespace nrtprof::cli

#endif  // NRTPROF_CLIENT_COMMANDS_H_
