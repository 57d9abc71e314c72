#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "client/commands.h"
#include "client/flags.h"
#include "common/flag_help.h"

namespace nrtprof::cli {
namespace {

constexpr char kVersion[] = "0.1.0";

// The flags that reach a daemon, shared by the commands that talk to one.
#define NRTPROF_DAEMON_FLAGS "addr", "tls_ca", "token_file", "tls_cert", "tls_key"

struct Command {
  const char* name;
  int (*run)(int argc, char** argv);
  // The synopsis, after "nrtprof ", and what it is for: each line at most 85 columns (its
  // line breaks are indented in --help and `nrtprof help`, which stay within 100).
  const char* usage;
  const char* what;
  // The flags it takes (absl's names), in the order its --help lists them; their help lines
  // are generated from their ABSL_FLAG definitions (common/flag_help.h).
  std::vector<const char*> flags;
  // What its --help says after the flags: notes and examples.
  const char* notes;
  bool takes_program = false;  // run: everything from the first argument on is CMD
  // Its flags' lines in --help, when a flag it shares with another command means something
  // else to it (export's --format and -o); else they are generated.
  const char* flag_lines = nullptr;
  // What a flag it shares does in it, by name, where the flag's definition (its help written
  // for the command that defines it) would say another command's meaning.
  std::map<std::string, std::string, std::less<>> flag_help = {};
};

// The help of the flags that reach a standing daemon says nothing of run's private daemon.
constexpr char kRunAddrHelp[] =
    "the daemon: unix:/path, /path, or HOST:PORT (TLS: with --tls_ca, and --token_file or "
    "--tls_cert and --tls_key); default $NRTPROF_ADDR, else the per-user socket if a trusted "
    "daemon answers there, else a private daemon of run's own";

const std::vector<Command>& Commands() {
  static const std::vector<Command> kCommands = {
      {"run", RunCommand,
       "run [--out DIR] [--files KINDS] [--stacks N] [--device-profile]\n"
       "[--mode best_effort|lossless] [--quiet] [--addr ADDRESS ...] [--] CMD ARGS...",
       "run CMD under the profiler and print where its device time went",
       {"out", "files", "stacks", "device_profile", "mode", "quiet", NRTPROF_DAEMON_FLAGS},
       "Everything from CMD on is the program's, flags included; `--` before CMD is optional.\n"
       "Exits with CMD's exit code; 3 when CMD exited 0 but the capture is empty (no process of\n"
       "CMD called libnrt).\n\n"
       "examples:\n"
       "  nrtprof run -- python3 train.py --epochs 1\n"
       "  nrtprof run --out rmsnorm-naive --stacks 8 ./rmsnorm --variant naive\n",
       true, nullptr, {{"addr", kRunAddrHelp}}},
      {"capture", CaptureCommand,
       "capture (--duration D | --last L [--duration D] | --iterations N [--step_multiple K]\n"
       "[--step_timeout T]) [--pid PID]... [--out DIR] [--files KINDS] [--stacks N] [--quiet]\n"
       "[--addr ADDRESS ...]",
       "record the programs streaming to a standing daemon (Ctrl-C ends it early)",
       {"duration", "last", "iterations", "step_multiple", "step_timeout", "pid", "out", "files",
        "stacks", "quiet", "hosts", NRTPROF_DAEMON_FLAGS},
       "Exits 0 when the capture is written, 1 on an error, 2 on a usage error, and 3 when it is\n"
       "written but empty: no process connected, or none called libnrt or marked the steps\n"
       "(--hosts: every host's part empty, each host said why).\n\n"
       "examples:\n"
       "  nrtprof capture --last 30s\n"
       "  nrtprof capture --last 30s --files pftrace,summary\n"
       "  nrtprof capture --duration 10s --pid 4242 --out slow-step\n"
       "  nrtprof capture --iterations 5 --step_multiple 100\n"
       "  nrtprof capture --hosts trn1:50051,trn2:50051 --tls_ca ca.pem --token_file token \\\n"
       "      --iterations 3 --step_multiple 100 --out step-1200\n",
       false, nullptr,
       {{"out",
         "the capture's folder (default: the standing daemon's captures folder; --hosts needs "
         "it)"}}},
      {"summary", SummaryCommand,
       "summary CAPTURE_DIR_OR_FILE [--sort KEY] [--format text|csv|json] [--limit N]\n"
       "[--from-trace]",
       "the key_averages table of a capture, re-sorted or re-formatted",
       {"sort", "format", "limit", "from_trace"},
       "examples:\n"
       "  nrtprof summary nrtprof-captures/20261203-101500 --sort calls --limit 10\n"
       "  nrtprof summary cap/summary.json --format csv > table.csv\n"
       "  nrtprof summary cap/trace.pftrace --from-trace\n"},
      {"diff", DiffCommand, "diff CAPTURE_A CAPTURE_B [--format text|csv|json] [--limit N]",
       "two captures side by side, row by row: device time and per call, by how much it changed",
       {"format", "limit"},
       "examples:\n"
       "  nrtprof diff rmsnorm-naive rmsnorm-compiled\n"
       "  nrtprof diff before/summary.json after --format csv > change.csv\n",
       false, nullptr,
       {{"limit", "print only the first N rows (0: all): those whose device time changed most"}}},
      {"report", ReportCommand,
       "report CAPTURE_DIR [-o report.html] [--max_slices N] [--noise_floor DURATION]",
       "one HTML file of a capture to open in a browser: table, chart, timeline, chains",
       {"o", "max_slices", "noise_floor"},
       "The file is self-contained: it fetches nothing and opens offline.\n\n"
       "examples:\n"
       "  nrtprof report nrtprof-captures/rmsnorm-naive\n"
       "  nrtprof report slow-step -o /tmp/slow-step.html\n"},
      {"export", ExportCommand, "export CAPTURE_DIR [--format pprof|collapsed] [-o FILE]",
       "a capture's device and host time by stack, for pprof, Pyroscope, Parca or a flame graph",
       {"format", "o"},
       "Each stack, leaf first: engine op (--device-profile), model, runtime call, the framework\n"
       "ranges innermost first, the host call stack (--stacks N). pprof's sample types are\n"
       "device_time and host_time (ns) and executions; a range's cumulative device time is its\n"
       "row's NEURON total in the summary, to the nanosecond. Labels: host, pid, tid, thread,\n"
       "neuron_core. Folded stacks are root first, one line per stack, device ns as the value.\n\n"
       "examples:\n"
       "  nrtprof export nrtprof-captures/rmsnorm-naive -o naive.pb.gz\n"
       "  go tool pprof -sample_index=device_time -top -cum naive.pb.gz\n"
       "  go tool pprof -top -diff_base compiled.pb.gz naive.pb.gz\n"
       "  nrtprof export slow-step --format collapsed -o - | flamegraph.pl > slow-step.svg\n",
       false,
       "  --format pprof|collapsed  a pprof Profile, or folded stacks (default: pprof)\n"
       "  -o FILE                   the file to write, gzipped if it ends in .gz; - for stdout\n"
       "                            (default: CAPTURE_DIR/profile.pb.gz, or profile.folded)\n"},
      {"collectives", CollectivesCommand,
       "collectives CAPTURE_DIR [--limit N] [--noise_floor DURATION]",
       "a distributed job's collectives: per collective the arrival skew and the last rank,\n"
       "which rank is slow and what it was doing",
       {"limit", "noise_floor"},
       "Each collective is matched across the ranks (the processes that scheduled it) by its\n"
       "queue and number; a rank's number is RANK in its environment (as torchrun sets it) or\n"
       "another launcher's (NEURON_PJRT_PROCESS_INDEX, OMPI_COMM_WORLD_RANK, PMI_RANK,\n"
       "SLURM_PROCID), or its command line's --rank N (--local_rank N), else ranks are\n"
       "numbered by host and pid.\n"
       "Exits 1 for a capture without collectives. A collective whose ranks all arrived within\n"
       "--noise_floor (default 50us; a merged capture adds its hosts' clock error) has no late\n"
       "rank; the slowest rank is said not to stand out when a balanced job's ranks would be\n"
       "last as often by chance.\n\n"
       "examples:\n"
       "  nrtprof collectives job       (after: nrtprof run --out job -- ./launcher ...)\n"
       "  nrtprof collectives nrtprof-captures/20261203-101500 --limit 20\n",
       false, nullptr,
       {{"limit",
         "list only the first N collectives, in the order they could start (0: all); a last "
         "line counts the rest, and the stragglers are of them all"}}},
      {"top", TopCommand,
       "top [--interval D] [--window D] [--iterations N] [--addr ADDRESS ...]",
       "a live view of the host: processes, models and ops by device time, as top(1) shows",
       {"interval", "window", "iterations", NRTPROF_DAEMON_FLAGS},
       "On a terminal it redraws one screen and q quits; piped, it prints one block per refresh.\n\n"
       "examples:\n"
       "  nrtprof top\n"
       "  nrtprof top --interval 1s --iterations 5 > top.txt\n",
       false, nullptr, {{"iterations", "stop after N refreshes (0: until q or Ctrl-C)"}}},
      {"status", StatusCommand, "status [--json] [--addr ADDRESS ...]",
       "the daemon's address, uptime, processes, events, drops and flight recorder",
       {"json", NRTPROF_DAEMON_FLAGS},
       "examples:\n"
       "  nrtprof status\n"
       "  nrtprof status --json --addr unix:/run/nrtprof/nrtprofd.sock\n"},
      {"captures", CapturesCommand, "captures [--addr ADDRESS ...]",
       "the captures the daemon's trigger rules took, with their reasons, and the rules' counts",
       {NRTPROF_DAEMON_FLAGS},
       "The rules are nrtprofd's (--trigger, docs/triggers.md); each capture is an ordinary one\n"
       "in the daemon's output root: nrtprof report DIR, nrtprof summary DIR.\n\n"
       "examples:\n"
       "  nrtprof captures\n"
       "  nrtprof captures --addr unix:/run/nrtprof/nrtprofd.sock\n"},
      {"fleet", FleetCommand,
       "fleet top [--since 1h] [--by op|model|host|process|rank] [--where KEY=VALUE]...\n"
       "  [--limit N] [--format text|csv|json]\n"
       "| fleet export [--since 1h] [--where KEY=VALUE]... [--format pprof|collapsed] -o FILE\n"
       "| fleet query \"SQL\"\n"
       "  (each with [--clickhouse_url URL ...])",
       "the fleet store (ClickHouse, filled by nrtprofd --clickhouse_url): what spent the most\n"
       "device time across hosts",
       {"since", "by", "where", "limit", "format", "o", "clickhouse_url", "clickhouse_database",
        "clickhouse_user", "clickhouse_password_file"},
       "fleet query runs any SQL and prints ClickHouse's answer (TabSeparated unless it says "
       "FORMAT).\nfleet top --by rank lists the ranks of distributed jobs by what they made the "
       "others wait in\ncollectives (docs/fleet.md).\nfleet export writes fleet top's sums as a "
       "pprof profile (--format pprof, the default) or folded\nstacks (--format collapsed) to -o "
       "FILE, gzipped if it ends in .gz: each stack model > op, host and\npid as labels.\n\n"
       "examples:\n"
       "  nrtprof fleet top --clickhouse_url http://clickhouse:8123 --since 1h --limit 10\n"
       "  nrtprof fleet top --by model --where host=trn1-07 --format csv\n"
       "  nrtprof fleet top --by rank --since 1h   # the ranks that made the others wait\n"
       "  nrtprof fleet export --since 1h -o fleet.pb.gz   # model > op stacks, host and pid "
       "labels\n"
       "  nrtprof fleet query \"SELECT host, sum(device_ns) FROM fleet_ops GROUP BY host\"\n",
       false, nullptr,
       {{"limit", "fleet top: print only the first N rows (0: all)"},
        {"format",
         "fleet top: text, csv or json (default: text); fleet export: pprof or collapsed "
         "(default: pprof)"},
        {"o", "fleet export: the profile, gzipped if it ends in .gz (no default)"}}},
  };
  return kCommands;
}

// `text` with each line after the first indented by `indent` spaces.
std::string Indented(absl::string_view text, size_t indent) {
  return absl::StrJoin(absl::StrSplit(text, '\n'), "\n" + std::string(indent, ' '));
}

// `nrtprof COMMAND --help`: the synopsis, the flags from their definitions (or the command's own
// help of a shared one), the notes.
void PrintCommandHelp(const Command& c) {
  std::vector<const absl::CommandLineFlag*> flags;
  for (const char* name : c.flags) flags.push_back(absl::FindCommandLineFlag(name));
  printf("usage: nrtprof %s\n%s\n\nflags:\n%s\n%s",
         Indented(c.usage, strlen("usage: nrtprof ")).c_str(), c.what,
         c.flag_lines != nullptr ? c.flag_lines : FlagHelpLines(flags, c.flag_help).c_str(),
         c.notes);
}

void PrintUsage(FILE* out) {
  fprintf(out, "usage: nrtprof COMMAND [FLAGS]   (nrtprof COMMAND --help for one)\n\ncommands:\n");
  for (const Command& c : Commands()) {
    fprintf(out, "  nrtprof %s\n      %s\n", Indented(c.usage, strlen("  nrtprof ")).c_str(),
            Indented(c.what, 6).c_str());
  }
  fprintf(out, "  nrtprof --version\n");
}

bool Contains(const std::vector<const char*>& names, absl::string_view name) {
  for (const char* n : names) {
    if (name == n) return true;
  }
  return false;
}

// One of the command's flags, and a bool (given alone, it means true).
bool IsBoolFlag(const Command& c, absl::string_view name) {
  const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  return Contains(c.flags, name) && flag != nullptr && flag->IsOfType<bool>();
}

std::set<std::string>& GivenFlags() {
  static auto* given = new std::set<std::string>();
  return *given;
}

// Checks the command's flags before abseil sees them: --help prints the command's own help,
// a flag of another command (or of none) is one line and exit 2, and for run the program's
// arguments are set apart with `--` (abseil would read its flags as nrtprof's). Returns -1 to
// go on, else the exit code. *args may gain a "--".
int CheckArguments(const Command& c, std::vector<char*>* args, std::string* dashes,
                   std::deque<std::string>* rewritten) {
  for (size_t i = 1; i < args->size(); ++i) {
    // --step-multiple is --step_multiple: dashes inside a flag's name are underscores to abseil.
    if (absl::string_view raw = (*args)[i]; raw.size() > 2 && raw[0] == '-' && raw != "--") {
      const size_t start = raw[1] == '-' ? 2 : 1;
      const size_t name_end = std::min(raw.find('='), raw.size());
      std::string fixed(raw);
      std::replace(fixed.begin() + start, fixed.begin() + name_end, '-', '_');
      if (fixed != raw) {
        rewritten->push_back(std::move(fixed));
        (*args)[i] = rewritten->back().data();
      }
    }
    const absl::string_view a = (*args)[i];
    if (a == "--") return -1;
    if (a == "--help" || a == "-h" || a == "-help" || a == "--helpfull") {
      PrintCommandHelp(c);
      return 0;
    }
    if (a.size() < 2 || a[0] != '-') {
      if (c.takes_program) {
        // CMD starts here: all that follows is its own.
        args->insert(args->begin() + i, dashes->data());
        return -1;
      }
      continue;  // a positional argument (summary's folder)
    }
    absl::string_view name = a.substr(a[1] == '-' ? 2 : 1);
    const size_t eq = name.find('=');
    const bool has_value = eq != absl::string_view::npos;
    name = name.substr(0, eq);
    absl::string_view negated = name;
    const bool is_bool = IsBoolFlag(c, name) ||
                         (absl::ConsumePrefix(&negated, "no") && IsBoolFlag(c, negated));
    if (!Contains(c.flags, name) && !is_bool) {
      std::vector<std::string> flags;
      for (const char* f : c.flags) flags.push_back(std::string("--") + f);
      fprintf(stderr, "nrtprof %s: unknown flag --%.*s (it takes %s; see nrtprof %s --help)\n",
              c.name, static_cast<int>(name.size()), name.data(),
              absl::StrJoin(flags, ", ").c_str(), c.name);
      return 2;
    }
    GivenFlags().insert(std::string(is_bool && !IsBoolFlag(c, name) ? negated : name));
    if (is_bool && !has_value) continue;  // --json, --device-profile; a value is checked below
    std::string value;
    if (has_value) {
      value = std::string(a.substr(a.find('=') + 1));
    } else if (i + 1 < args->size()) {
      value = (*args)[++i];
    } else {
      fprintf(stderr, "nrtprof %s: --%.*s needs a value (see nrtprof %s --help)\n", c.name,
              static_cast<int>(name.size()), name.data(), c.name);
      return 2;
    }
    // A value of the wrong type is a usage error (exit 2), said in one line, before abseil
    // (which would exit 1).
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    std::string why;
    if (flag != nullptr && name != "pid" && !flag->ParseFrom(value, &why)) {
      // abseil's reason for a duration ("Illegal value '10' specified for flag 'duration'")
      // repeats the line and hides the usual mistake: a number without its unit.
      if (double number = 0; flag->IsOfType<absl::Duration>() && absl::SimpleAtod(value, &number)) {
        fprintf(stderr, "nrtprof %s: --%.*s '%s' needs a unit, as %ss, 500ms or 1m30s\n", c.name,
                static_cast<int>(name.size()), name.data(), value.c_str(), value.c_str());
        return 2;
      }
      if (flag->IsOfType<absl::Duration>()) {
        why = "a duration is a number and a unit, as 10s, 500ms or 1m30s";
      }
      fprintf(stderr, "nrtprof %s: bad value '%s' for --%.*s: %s\n", c.name, value.c_str(),
              static_cast<int>(name.size()), name.data(), why.c_str());
      return 2;
    }
  }
  return -1;
}

}  // namespace

bool FlagGiven(absl::string_view name) { return GivenFlags().count(std::string(name)) != 0; }

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
  if (name == "--version" || name == "version") {
    printf("nrtprof %s\n", kVersion);
    return 0;
  }
  for (const Command& c : Commands()) {
    if (name == c.name) {
      // The command sees "nrtprof NAME" as its program name.
      std::string program = std::string("nrtprof ") + c.name;
      std::string dashes = "--";
      std::deque<std::string> rewritten;  // stable addresses for args
      std::vector<char*> args = {program.data()};
      for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
      if (const int code = CheckArguments(c, &args, &dashes, &rewritten); code >= 0) return code;
      args.push_back(nullptr);
      return c.run(static_cast<int>(args.size()) - 1, args.data());
    }
  }
  // The list is the commands' own, so that a command added later is named here too.
  std::vector<std::string> names;
  for (const Command& c : Commands()) names.push_back(c.name);
  fprintf(stderr, "nrtprof: unknown command '%s' (commands: %s; see nrtprof help)\n", name.c_str(),
          absl::StrJoin(names, ", ").c_str());
  return 2;
}

}  // namespace nrtprof::cli
