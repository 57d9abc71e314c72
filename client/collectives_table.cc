// The cells of `nrtprof collectives`' tables, from the collectives' analysis, and the capture's
// Trace as the command and the report read it (collectives_table.h).
#include "client/collectives_table.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/trace_merge.h"
#include "trace/perfetto_trace_reader.h"
#include "trace/trace_from_pftrace.h"

namespace nrtprof::cli {
namespace {

std::string Ms(uint64_t ns) { return absl::StrFormat("%.3fms", ns / 1e6); }

// Below this chance of being last so often in a balanced job, a rank stands out.
constexpr double kStandsOutBelow = 0.05;

std::string Rank(const daemon::CollectivesAnalysis& a, size_t member) {
  return absl::StrCat(a.members[member].rank);
}

// The causes over 1% of the time, at most `limit`, with their shares: "host: x 99%, ...".
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

CollectivesTable MakeCollectivesTable(const daemon::CollectivesAnalysis& a) {
  CollectivesTable t;
  uint64_t origin = UINT64_MAX;
  for (const daemon::CollectiveInstance& c : a.instances) {
    origin = std::min(origin, c.first_arrival_ns);
  }
  std::string hosts;
  for (const daemon::CollectiveMember& m : a.members) {
    if (!absl::StrContains(absl::StrCat(",", hosts, ","), absl::StrCat(",", m.host, ","))) {
      absl::StrAppend(&hosts, hosts.empty() ? "" : ",", m.host);
    }
  }
  t.heading = absl::StrFormat(
      "%zu ranks on %s, %zu collectives; ranks %s. Times from the first arrival.", a.members.size(),
      hosts.empty() ? "one host" : hosts, a.instances.size(),
      // Where a rank comes from, the first found (docs/running.md, "Ranks"): RANK, else the
      // other launchers' variables the shim reads (NEURON_PJRT_PROCESS_INDEX, OMPI_COMM_WORLD_RANK,
      // PMI_RANK, SLURM_PROCID), else the command line.
      a.ranks_said ? "as each process said (RANK or another launcher's rank variable, --rank N)"
                   : "numbered by host and pid (a process said no rank: RANK or another "
                     "launcher's rank variable, --rank N)");
  for (const daemon::CollectiveInstance& c : a.instances) {
    const size_t ranks = c.arrivals.size() + c.missing.size();
    std::string last = Rank(a, c.last);
    if (!c.missing.empty()) {
      last = "";
      for (size_t m : c.missing) absl::StrAppend(&last, last.empty() ? "" : ",", Rank(a, m));
      last += " missing";
    }
    std::string before = c.missing.empty() ? Causes(c.late_causes, 2) : "(a rank not in the capture)";
    if (c.within_noise) {
      last = "-";
      before = absl::StrCat("(every rank within the noise floor, ", Ms(a.noise_floor_ns), ")");
    }
    t.instances.push_back({c.step < 0 ? "-" : absl::StrCat(c.step),
                           absl::StrCat("#", c.number, " on queue ", c.queue),
                           absl::StrCat(c.arrivals.size(), "/", ranks), Ms(c.skew_ns()), last,
                           Ms(c.start_ns - origin), c.end_ns == 0 ? "-" : Ms(c.end_ns - origin),
                           before});
    t.skew_ns.push_back(c.skew_ns());
  }
  t.stragglers_heading = absl::StrCat(
      "Stragglers (last to arrive, of ", a.late_instances, " collectives every rank reached",
      a.within_noise == 0 ? ""
                          : absl::StrCat(" with a skew above the noise floor (", a.within_noise,
                                         " more within ", Ms(a.noise_floor_ns), ")"),
      "; wait cost: the other ranks' time waiting for it; waited: its own time waiting for the "
      "others):");
  for (const daemon::Straggler& s : a.stragglers) {
    const daemon::CollectiveMember& m = a.members[s.member];
    t.stragglers.push_back({absl::StrCat(m.rank), m.host, absl::StrCat(m.pid),
                            absl::StrCat(s.times_last), Ms(s.wait_cost_ns), Ms(s.waited_ns),
                            Causes(s.causes, 3)});
  }
  if (!a.stragglers.empty() && a.stragglers.front().times_last > 0) {
    const daemon::Straggler& s = a.stragglers.front();
    const daemon::CollectiveMember& m = a.members[s.member];
    t.slowest = absl::StrCat("Slowest rank: ", m.rank, " (", m.host, " pid ", m.pid, "), last in ",
                             s.times_last, " of ", a.late_instances,
                             " collectives, the others waited ", Ms(s.wait_cost_ns),
                             " for it in all; before it arrived: ", Causes(s.causes, 1));
    // A balanced job has a last rank in every collective too: said when this one is no more
    // often last than one of its N ranks would be by chance.
    if (s.chance >= kStandsOutBelow) {
      absl::StrAppend(&t.slowest, absl::StrFormat(
                                      " -- but one of %zu ranks is last this often by chance "
                                      "(p = %.2f): no rank stands out",
                                      a.members.size(), s.chance));
    }
  } else if (a.within_noise > 0) {
    t.slowest = absl::StrCat("Slowest rank: none: every rank arrived within the noise floor (",
                             Ms(a.noise_floor_ns), ") in all ", a.within_noise,
                             " collectives every rank reached");
  }
  t.notes = a.notes;
  return t;
}

absl::StatusOr<daemon::Trace> ReadCollectivesTrace(const std::string& given,
                                                   uint64_t* clock_error_ns) {
  if (clock_error_ns != nullptr) *clock_error_ns = 0;
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
  absl::StatusOr<daemon::ReadTrace> read = daemon::ReadPerfettoPackets(bytes.str());
  if (!read.ok() || read->packet_count() == 0) {
    return absl::DataLossError(
        absl::StrCat(path, " does not read back as a Perfetto trace (",
                     read.ok() ? std::string("no packets") : std::string(read.status().message()),
                     "): the capture is damaged"));
  }
  std::vector<MergedHost> parts = SplitMergedTrace(*read);
  if (parts.empty()) parts.push_back({"", 0, *std::move(read)});
  daemon::Trace all;
  // Two hosts' arrivals are apart by up to the sum of their offsets' bounds.
  uint64_t widest = 0, second = 0;
  for (const MergedHost& part : parts) {
    if (part.error_bound_ns > widest) {
      second = widest;
      widest = part.error_bound_ns;
    } else {
      second = std::max(second, part.error_bound_ns);
    }
  }
  if (clock_error_ns != nullptr && parts.size() > 1) *clock_error_ns = widest + second;
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

}  // namespace nrtprof::cli
