// `nrtprof collectives CAPTURE_DIR_OR_TRACE`: which rank of a distributed job is slow, and why
// (issue 40). Reads the capture's trace.pftrace (each host's part of a merged one), matches
// each collective across the ranks (trace/collectives.h), and prints per step and collective
// the arrival skew and the last rank, then the straggler table — rank, host, pid, how often
// last, the wait it cost the others — and what the late rank was doing before it arrived.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/commands.h"
#include "client/trace_merge.h"
#include "trace/collectives.h"
#include "trace/perfetto_trace_reader.h"
#include "trace/trace_from_pftrace.h"

ABSL_DECLARE_FLAG(int, limit);  // command_summary.cc

namespace nrtprof::cli {
namespace {

int Fail(const std::string& line, int code = 1) {
  fprintf(stderr, "nrtprof collectives: %s\n", line.c_str());
  return code;
}

std::string Ms(uint64_t ns) { return absl::StrFormat("%.3fms", ns / 1e6); }

// The capture's Trace, rebuilt from its trace.pftrace (every host's part of a merged one).
absl::StatusOr<daemon::Trace> LoadTrace(const std::string& given) {
  struct stat st;
  if (stat(given.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(given, ": no such file or folder"));
  }
  const std::string path = S_ISDIR(st.st_mode) ? given + "/trace.pftrace" : given;
  std::ifstream file(path, std::ios::binary);
  if (!file && S_ISDIR(st.st_mode) && stat((given + "/summary.json").c_str(), &st) == 0) {
    return absl::NotFoundError(absl::StrCat(
        given, " has no trace.pftrace, which this needs (capture with --files pftrace,...)"));
  }
  if (!file) {
    return absl::NotFoundError(
        absl::StrCat(given, " is not an nrtprof capture (no readable ", path, ")"));
  }
  std::stringstream bytes;
  bytes << file.rdbuf();
  absl::StatusOr<daemon::ReadTrace> read = daemon::ReadPerfettoTrace(bytes.str());
  if (!read.ok() || read->trace.packet_size() == 0) {
    return absl::DataLossError(absl::StrCat(
        path, " does not read back as a Perfetto trace (",
        read.ok() ? std::string("no packets") : std::string(read.status().message()),
        "): the capture is damaged"));
  }
  std::vector<MergedHost> parts = SplitMergedTrace(*read);
  if (parts.empty()) parts.push_back({"", *std::move(read)});
  daemon::Trace all;
  for (const MergedHost& part : parts) {
    absl::StatusOr<daemon::Trace> trace = daemon::TraceFromPerfetto(part.read);
    if (!trace.ok()) {
      return absl::DataLossError(absl::StrCat(path, " is not laid out as nrtprof writes it (",
                                              trace.status().message(), ")"));
    }
    for (daemon::ProcessTrace& p : trace->processes) {
      // A merged capture's host is the one the user named (--hosts): the machines' own names
      // may be alike (several daemons on one machine) or differ from it.
      if (p.host.empty() || !part.host.empty()) p.host = part.host;
      all.processes.push_back(std::move(p));
    }
  }
  return all;
}

std::string Rank(const daemon::CollectivesAnalysis& a, size_t member) {
  return absl::StrCat(a.members[member].rank);
}

std::string Causes(const std::vector<daemon::LateCause>& causes, size_t limit) {
  uint64_t total = 0;
  for (const daemon::LateCause& c : causes) total += c.ns;
  std::string out;
  for (size_t i = 0; i < causes.size() && i < limit; ++i) {
    if (i > 0 && causes[i].ns * 100 < total) break;  // under 1%: not worth a line
    absl::StrAppend(&out, i == 0 ? "" : ", ", causes[i].what,
                    absl::StrFormat(" %.0f%%", total == 0 ? 0.0 : 100.0 * causes[i].ns / total));
  }
  return out.empty() ? "-" : out;
}

}  // namespace

int CollectivesCommand(int argc, char** argv) {
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) return Fail("usage: nrtprof collectives CAPTURE_DIR [--limit N]", 2);
  const int limit = absl::GetFlag(FLAGS_limit);
  if (limit < 0) return Fail("--limit must not be negative", 2);
  absl::StatusOr<daemon::Trace> trace = LoadTrace(args[1]);
  if (!trace.ok()) return Fail(std::string(trace.status().message()));
  absl::StatusOr<daemon::CollectivesAnalysis> a = daemon::AnalyzeCollectives(*trace);
  if (!a.ok()) return Fail(absl::StrCat(args[1], ": ", a.status().message()));

  uint64_t origin = UINT64_MAX;
  for (const daemon::CollectiveInstance& c : a->instances) {
    origin = std::min(origin, c.first_arrival_ns);
  }
  std::string hosts;
  for (const daemon::CollectiveMember& m : a->members) {
    if (!absl::StrContains(absl::StrCat(",", hosts, ","), absl::StrCat(",", m.host, ","))) {
      absl::StrAppend(&hosts, hosts.empty() ? "" : ",", m.host);
    }
  }
  printf("%zu ranks on %s, %zu collectives; ranks %s. Times from the first arrival.\n\n",
         a->members.size(), hosts.empty() ? "one host" : hosts.c_str(), a->instances.size(),
         a->ranks_from_command_line ? "from their command lines"
                                    : "numbered by host and pid (no command line said its rank)");
  printf("%6s  %-18s  %7s  %12s  %9s  %12s  %12s  %s\n", "step", "collective", "ranks", "skew",
         "last rank", "could start", "ended", "the last rank before it arrived");
  size_t shown = 0;
  for (const daemon::CollectiveInstance& c : a->instances) {
    if (limit > 0 && shown++ == static_cast<size_t>(limit)) {
      printf("%6s  ... %zu more\n", "", a->instances.size() - limit);
      break;
    }
    const size_t ranks = c.arrivals.size() + c.missing.size();
    std::string last = Rank(*a, c.last);
    if (!c.missing.empty()) {
      last = "";
      for (size_t m : c.missing) absl::StrAppend(&last, last.empty() ? "" : ",", Rank(*a, m));
      last += " missing";
    }
    printf("%6s  %-18s  %7s  %12s  %9s  %12s  %12s  %s\n",
           c.step < 0 ? "-" : absl::StrCat(c.step).c_str(),
           absl::StrCat("#", c.number, " on queue ", c.queue).c_str(),
           absl::StrCat(c.arrivals.size(), "/", ranks).c_str(), Ms(c.skew_ns()).c_str(),
           last.c_str(), Ms(c.start_ns - origin).c_str(),
           c.end_ns == 0 ? "-" : Ms(c.end_ns - origin).c_str(),
           c.missing.empty() ? Causes(c.late_causes, 2).c_str() : "(a rank not in the capture)");
  }

  size_t complete = 0;
  for (const daemon::CollectiveInstance& c : a->instances) complete += c.missing.empty() ? 1 : 0;
  printf("\nStragglers (last to arrive, of %zu collectives every rank reached; wait cost: the "
         "other ranks' time waiting for it; waited: its own time waiting for the others):\n",
         complete);
  printf("%6s  %-16s  %8s  %10s  %12s  %12s  %s\n", "rank", "host", "pid", "times last",
         "wait cost", "waited", "before it arrived");
  for (const daemon::Straggler& s : a->stragglers) {
    const daemon::CollectiveMember& m = a->members[s.member];
    printf("%6d  %-16s  %8u  %10llu  %12s  %12s  %s\n", m.rank, m.host.c_str(), m.pid,
           static_cast<unsigned long long>(s.times_last), Ms(s.wait_cost_ns).c_str(),
           Ms(s.waited_ns).c_str(), Causes(s.causes, 3).c_str());
  }
  if (!a->stragglers.empty() && a->stragglers.front().times_last > 0) {
    const daemon::Straggler& s = a->stragglers.front();
    const daemon::CollectiveMember& m = a->members[s.member];
    printf("\nSlowest rank: %d (%s pid %u), last in %llu of %zu collectives, the others waited "
           "%s for it in all; before it arrived: %s\n",
           m.rank, m.host.c_str(), m.pid, static_cast<unsigned long long>(s.times_last), complete,
           Ms(s.wait_cost_ns).c_str(), Causes(s.causes, 1).c_str());
  }
  for (const std::string& note : a->notes) printf("note: %s\n", note.c_str());
  return 0;
}

}  // namespace nrtprof::cli
