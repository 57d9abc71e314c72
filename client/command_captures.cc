// `nrtprof captures`: the captures the daemon's trigger rules took (nrtprofd --trigger,
// docs/triggers.md) and still keeps, oldest first, each with its rule and reason; then each
// rule's counts. From the daemon's Status (StatusReply.triggered_captures, .triggers).
#include <cstdio>
#include <string>

#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "client/commands.h"
#include "client/daemon_connection.h"
#include "common/terminal_text.h"

namespace nrtprof::cli {

int CapturesCommand(int argc, char** argv) {
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() > 1) {
    fprintf(stderr, "nrtprof captures: unexpected argument '%s'\n", args[1]);
    return 2;
  }
  int exit_code = 0;
  std::unique_ptr<DaemonConnection> connection =
      ConnectToStandingDaemon("captures", &exit_code, nullptr);
  if (connection == nullptr) return exit_code;
  absl::StatusOr<StatusReply> status = connection->Status(2000);
  if (!status.ok()) {
    fprintf(stderr, "nrtprof captures: %s\n", std::string(status.status().message()).c_str());
    return 1;
  }
  // A daemon without rules may still keep the captures its peers' rules asked it for.
  if (status->triggers().empty() && status->triggered_captures().empty()) {
    printf("no trigger rules: this daemon takes no captures by itself (nrtprofd --trigger, "
           "docs/triggers.md)\n");
    return 0;
  }
  printf("triggered captures: %d, %.1f of %.1f MiB\n", status->triggered_captures_size(),
         status->triggered_bytes() / 1048576.0, status->triggered_bytes_limit() / 1048576.0);
  for (const TriggeredCapture& c : status->triggered_captures()) {
    const std::string when = absl::FormatTime(
        "%Y-%m-%d %H:%M:%S UTC", absl::FromUnixMillis(static_cast<int64_t>(c.unix_ms())),
        absl::UTCTimeZone());
    // The reason quotes what the processes sent (a model's name, a job): visible text only.
    printf("  %s  %-12s %8.1f MiB  %s\n    %s\n", when.c_str(), TerminalText(c.rule()).c_str(),
           c.bytes() / 1048576.0, TerminalText(c.output_dir()).c_str(),
           TerminalText(c.reason()).c_str());
  }
  printf(status->triggers().empty() ? "rules: none of its own (the captures above were asked "
                                      "for by other daemons' rules: --trigger_peers)\n"
                                    : "rules:\n");
  for (const TriggerRuleStatus& r : status->triggers()) {
    printf("  %s\n    %llu triggered, %llu suppressed, %llu captured, %llu failed, %llu removed\n",
           TerminalText(r.condition()).c_str(), static_cast<unsigned long long>(r.triggers()),
           static_cast<unsigned long long>(r.suppressed()),
           static_cast<unsigned long long>(r.captures()),
           static_cast<unsigned long long>(r.failed()),
           static_cast<unsigned long long>(r.removed()));
    if (r.peer_captures() + r.peer_failed() != 0) {
      printf("    peers asked for the same window: %llu wrote it, %llu did not\n",
             static_cast<unsigned long long>(r.peer_captures()),
             static_cast<unsigned long long>(r.peer_failed()));
    }
  }
  return 0;
}

}  // namespace nrtprof::cli
