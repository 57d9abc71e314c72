// Collective instances matched across the ranks of a capture, their stragglers and the late
// rank's cause (collectives.h says how each figure is made).
#include "trace/collectives.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"

namespace nrtprof::daemon {
namespace {

// common/api_functions.h's wire numbers (a trace read back from its file may carry only names).
constexpr int32_t kCcScheduleFunction = 33;
constexpr int32_t kIsCompletedFunction = 34;
constexpr uint64_t kSeqNumberMask = (uint64_t{1} << 48) - 1;

bool IsSchedule(const ApiCall& c) {
  return c.function == kCcScheduleFunction || c.name == "nrta_cc_schedule";
}
bool IsCompletion(const ApiCall& c) {
  return c.function == kIsCompletedFunction || c.name == "nrta_is_completed";
}

using InstanceKey = std::pair<uint32_t, uint64_t>;  // (queue, number)

struct Request {
  uint64_t arrival_ns = 0;
  uint64_t completed_ns = 0;
  uint64_t correlation_id = 0;
  uint32_t tid = 0;
};

// One process (all its parts) and its collectives.
struct RawMember {
  std::string host;
  uint32_t pid = 0;
  std::vector<size_t> parts;
  std::string executable;
  bool cut_off = false;  // or died: events counted lost from its rings file
  int rank = -1;
  std::map<InstanceKey, Request> requests;
};

bool Contains(uint64_t start, uint64_t duration, uint64_t t) {
  return start <= t && t < start + std::max<uint64_t>(duration, 1);
}

int64_t StepAt(const Trace& trace, const RawMember& m, uint32_t tid, uint64_t t) {
  for (size_t part : m.parts) {
    for (const RangeEvent& r : trace.processes[part].ranges) {
      if (r.tid != tid || !Contains(r.start_ns, r.duration_ns, t)) continue;
      const std::string& name = r.name.str();
      int64_t step = 0;
      if (absl::StartsWith(name, "ProfilerStep#") &&
          absl::SimpleAtoi(name.substr(sizeof("ProfilerStep#") - 1), &step)) {
        return step;
      }
    }
  }
  return -1;
}

// What covered [begin, end) in member `m`'s process, the collective scheduled at `arrival` on
// thread `tid`: per instant the first of device execution, transfer, innermost range of `tid`
// not enclosing the arrival, runtime call of `tid`; the rest is host time outside any range.
std::vector<LateCause> CausesIn(const Trace& trace, const RawMember& m, uint32_t tid,
                                uint64_t begin, uint64_t end, uint64_t arrival) {
  struct Cover {
    uint64_t start, end;
    int rank;  // lower wins
    std::string what;
  };
  std::vector<Cover> covers;
  const auto add = [&](uint64_t start, uint64_t duration, int rank, std::string what) {
    const uint64_t s = std::max(start, begin), e = std::min(start + duration, end);
    if (s < e) covers.push_back({s, e, rank, std::move(what)});
  };
  for (size_t part : m.parts) {
    const ProcessTrace& p = trace.processes[part];
    for (const DeviceEvent& d : p.device) {
      if (d.parent != 0) continue;  // inside an execution: the execution says it
      if (d.name == "cc_exec_barrier" || d.name == "cc_running") continue;
      if (d.kind == DeviceEventKind::kExecution) {
        add(d.start_ns, d.duration_ns, 0,
            absl::StrCat("device: ", d.model_name.empty() ? d.name.str() : d.model_name.str()));
      } else if (d.kind == DeviceEventKind::kDma) {
        add(d.start_ns, d.duration_ns, 1,
            absl::StrCat("transfer: ", d.tensor_name.empty() ? d.name.str() : d.tensor_name.str()));
      }
    }
    for (const RangeEvent& r : p.ranges) {
      if (r.tid != tid || Contains(r.start_ns, r.duration_ns, arrival)) continue;
      // Deeper ranges win: rank 100 - depth keeps them after device work and transfers.
      add(r.start_ns, r.duration_ns, 100 - static_cast<int>(std::min<uint32_t>(r.depth, 90)),
          absl::StrCat("host: ", r.name.str()));
    }
    for (const ApiCall& c : p.calls) {
      if (c.tid != tid) continue;
      // A call that runs a model or moves a tensor is the host waiting on that work (launch
      // included); any other runtime call is host time of its own.
      const absl::string_view name = c.name;
      if (!c.model_name.empty() && absl::StrContains(name, "execute")) {
        add(c.start_ns, c.duration_ns, 2, absl::StrCat("device: ", c.model_name.str()));
      } else if (absl::StartsWith(name, "nrt_tensor_read") ||
                 absl::StartsWith(name, "nrt_tensor_write") ||
                 absl::StartsWith(name, "nrt_tensor_copy") ||
                 absl::StartsWith(name, "nrta_tensor_")) {
        add(c.start_ns, c.duration_ns, 3,
            absl::StrCat("transfer: ", c.tensor_name.empty() ? c.name.str() : c.tensor_name.str()));
      } else {
        add(c.start_ns, c.duration_ns, 200, absl::StrCat("host: ", c.name.str()));
      }
    }
  }
  std::vector<uint64_t> points = {begin, end};
  for (const Cover& c : covers) {
    points.push_back(c.start);
    points.push_back(c.end);
  }
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  std::map<std::string, uint64_t> by_what;
  for (size_t i = 0; i + 1 < points.size(); ++i) {
    const uint64_t s = points[i], e = points[i + 1];
    const Cover* best = nullptr;
    for (const Cover& c : covers) {
      if (c.start <= s && e <= c.end && (best == nullptr || c.rank < best->rank)) best = &c;
    }
    by_what[best != nullptr ? best->what : "host: (outside any range)"] += e - s;
  }
  std::vector<LateCause> causes;
  for (auto& [what, ns] : by_what) causes.push_back({what, ns});
  std::sort(causes.begin(), causes.end(), [](const LateCause& a, const LateCause& b) {
    return a.ns != b.ns ? a.ns > b.ns : a.what < b.what;
  });
  return causes;
}

void MergeCauses(const std::vector<LateCause>& from, std::vector<LateCause>* into) {
  for (const LateCause& c : from) {
    auto it = std::find_if(into->begin(), into->end(),
                           [&](const LateCause& x) { return x.what == c.what; });
    if (it == into->end()) {
      into->push_back(c);
    } else {
      it->ns += c.ns;
    }
  }
  std::sort(into->begin(), into->end(), [](const LateCause& a, const LateCause& b) {
    return a.ns != b.ns ? a.ns > b.ns : a.what < b.what;
  });
}

// Where a command line says its rank: the index of the flag and how many arguments it takes
// (2 for `--rank N`, 1 for `--rank=N`), and the rank; {0, 0, -1} when it does not say.
struct RankArgument {
  size_t index = 0;
  size_t count = 0;
  int rank = -1;
};

RankArgument FindRankArgument(const std::vector<std::string>& argv) {
  static const char* const kFlags[] = {"--rank", "--local_rank", "--local-rank"};
  for (size_t i = 0; i < argv.size(); ++i) {
    for (const char* flag : kFlags) {
      absl::string_view value;
      size_t count = 0;
      if (argv[i] == flag && i + 1 < argv.size()) {
        value = argv[i + 1];
        count = 2;
      } else if (absl::StartsWith(argv[i], flag) && argv[i].size() > strlen(flag) &&
                 argv[i][strlen(flag)] == '=') {
        value = absl::string_view(argv[i]).substr(strlen(flag) + 1);
        count = 1;
      } else {
        continue;
      }
      int rank = -1;
      if (absl::SimpleAtoi(value, &rank) && rank >= 0) return {i, count, rank};
    }
  }
  return {};
}

}  // namespace

int RankFromCommandLine(const std::vector<std::string>& argv) {
  return FindRankArgument(argv).rank;
}

std::string JobFromCommandLine(const std::vector<std::string>& argv) {
  // What differs between the hosts of one job: a launcher's share of the ranks on this host.
  static const char* const kPerHost[] = {"--local-ranks", "--local_ranks", "--node-rank",
                                         "--node_rank"};
  const RankArgument r = FindRankArgument(argv);
  std::string job;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (r.count != 0 && i >= r.index && i < r.index + r.count) continue;
    if (i > 0 && std::any_of(std::begin(kPerHost), std::end(kPerHost), [&](const char* flag) {
          return argv[i] == flag || absl::StartsWith(argv[i], absl::StrCat(flag, "="));
        })) {
      if (argv[i].find('=') == std::string::npos) ++i;  // and its value
      continue;
    }
    absl::string_view arg = argv[i];
    if (i == 0)
      arg = arg.substr(arg.rfind('/') == absl::string_view::npos ? 0 : arg.rfind('/') + 1);
    absl::StrAppend(&job, job.empty() ? "" : " ", arg);
  }
  return job;
}

ProcessJob JobOf(const std::string& job_id, const std::vector<std::string>& argv) {
  if (!job_id.empty()) return {job_id, false};
  if (RankFromCommandLine(argv) < 0) return {};
  return {JobFromCommandLine(argv), true};
}

int RankOf(const ProcessTrace& p) {
  return p.rank >= 0 ? p.rank : RankFromCommandLine(p.command_line);
}

ProcessJob JobOf(const ProcessTrace& p) {
  if (p.job.empty() && p.rank >= 0) return {JobFromCommandLine(p.command_line), true};
  return JobOf(p.job, p.command_line);
}

double AtLeastByChance(uint64_t k, uint64_t n, double p) {
  if (k == 0) return 1.0;
  if (k > n || p <= 0.0) return 0.0;
  if (p >= 1.0) return 1.0;
  // Summed in log space: n may be thousands of collectives.
  const double log_p = std::log(p), log_q = std::log1p(-p);
  const double log_n_fact = std::lgamma(static_cast<double>(n) + 1.0);
  double tail = 0.0;
  for (uint64_t i = k; i <= n; ++i) {
    const double log_choose = log_n_fact - std::lgamma(static_cast<double>(i) + 1.0) -
                              std::lgamma(static_cast<double>(n - i) + 1.0);
    tail += std::exp(log_choose + static_cast<double>(i) * log_p +
                     static_cast<double>(n - i) * log_q);
  }
  return std::min(tail, 1.0);
}

absl::StatusOr<CollectivesAnalysis> AnalyzeCollectives(const Trace& trace,
                                                       const CollectivesOptions& options) {
  // Every process (its parts together) and its collective requests.
  std::vector<RawMember> raw;
  std::map<std::pair<std::string, uint32_t>, size_t> by_process;
  for (size_t i = 0; i < trace.processes.size(); ++i) {
    const ProcessTrace& p = trace.processes[i];
    auto [it, fresh] = by_process.emplace(std::make_pair(p.host, p.pid), raw.size());
    if (fresh) {
      raw.emplace_back();
      raw.back().host = p.host;
      raw.back().pid = p.pid;
      raw.back().rank = RankOf(p);
      raw.back().executable =
          !p.executable.empty() || p.command_line.empty() ? p.executable : p.command_line[0];
    }
    RawMember& m = raw[it->second];
    m.parts.push_back(i);
    m.cut_off = m.cut_off || p.cut_off || p.drops.process_died > 0;
    std::map<uint64_t, uint64_t> barrier_start, running_end;  // by nrta_seq
    for (const DeviceEvent& d : p.device) {
      if (d.nrta_seq == 0) continue;
      if (d.name == "cc_exec_barrier") {
        auto [b, ok] = barrier_start.emplace(d.nrta_seq, d.start_ns);
        if (!ok) b->second = std::min(b->second, d.start_ns);
      } else if (d.name == "cc_running") {
        running_end[d.nrta_seq] = std::max(running_end[d.nrta_seq], d.start_ns + d.duration_ns);
      }
    }
    std::map<uint64_t, uint64_t> completion;  // by nrta_seq: the first poll that saw it done
    for (const ApiCall& c : p.calls) {
      if (IsCompletion(c) && c.nrta_seq != 0) completion.emplace(c.nrta_seq, c.start_ns);
    }
    for (const ApiCall& c : p.calls) {
      if (!IsSchedule(c) || c.status != 0 || c.nrta_seq == 0) continue;
      Request& r = m.requests[{static_cast<uint32_t>(c.nrta_seq >> 48), c.nrta_seq & kSeqNumberMask}];
      r.arrival_ns = c.start_ns;
      r.correlation_id = c.correlation_id;
      r.tid = c.tid;
      if (auto b = barrier_start.find(c.nrta_seq); b != barrier_start.end()) {
        r.arrival_ns = b->second;
      }
      if (auto e = running_end.find(c.nrta_seq); e != running_end.end()) {
        r.completed_ns = e->second;
      } else if (auto done = completion.find(c.nrta_seq); done != completion.end()) {
        r.completed_ns = done->second;
      }
    }
  }
  // Processes without collectives are not ranks, except a copy of a rank's program that died
  // (or says its rank) before any of its collectives reached the capture: a rank that vanished.
  std::set<std::string> rank_programs;
  for (const RawMember& m : raw) {
    if (!m.requests.empty()) rank_programs.insert(m.executable);
  }
  if (rank_programs.empty()) {
    return absl::NotFoundError("the capture has no collectives (no nrta_cc_schedule call)");
  }
  raw.erase(std::remove_if(raw.begin(), raw.end(),
                           [&](const RawMember& m) {
                             return m.requests.empty() &&
                                    !(rank_programs.count(m.executable) > 0 &&
                                      (m.cut_off || m.rank >= 0));
                           }),
            raw.end());

  CollectivesAnalysis out;
  // Ranks from the command lines when every process gives a distinct one; else by host and pid.
  std::set<int> ranks;
  for (const RawMember& m : raw) {
    if (m.rank >= 0) ranks.insert(m.rank);
  }
  out.ranks_said = ranks.size() == raw.size();
  if (out.ranks_said) {
    std::sort(raw.begin(), raw.end(),
              [](const RawMember& a, const RawMember& b) { return a.rank < b.rank; });
  } else {
    std::sort(raw.begin(), raw.end(), [](const RawMember& a, const RawMember& b) {
      return std::tie(a.host, a.pid) < std::tie(b.host, b.pid);
    });
    for (size_t i = 0; i < raw.size(); ++i) raw[i].rank = static_cast<int>(i);
  }
  for (const RawMember& m : raw) {
    out.members.push_back({m.rank, m.host, m.pid, m.parts.front(), m.cut_off});
  }

  std::set<InstanceKey> keys;
  for (const RawMember& m : raw) {
    for (const auto& [key, r] : m.requests) keys.insert(key);
  }
  out.stragglers.resize(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) out.stragglers[i].member = i;
  std::map<size_t, std::vector<std::string>> missed;  // member: the instances it never reached
  for (const InstanceKey& key : keys) {
    CollectiveInstance inst;
    inst.queue = key.first;
    inst.number = key.second;
    for (size_t i = 0; i < raw.size(); ++i) {
      auto it = raw[i].requests.find(key);
      if (it == raw[i].requests.end()) {
        inst.missing.push_back(i);
        continue;
      }
      inst.arrivals.push_back({i, it->second.arrival_ns, it->second.completed_ns,
                               it->second.correlation_id});
    }
    std::sort(inst.arrivals.begin(), inst.arrivals.end(),
              [](const CollectiveArrival& a, const CollectiveArrival& b) {
                return std::tie(a.arrival_ns, a.member) < std::tie(b.arrival_ns, b.member);
              });
    const CollectiveArrival& last = inst.arrivals.back();
    const Request& last_request = raw[last.member].requests.at(key);
    inst.last = last.member;
    inst.first_arrival_ns = inst.arrivals.front().arrival_ns;
    inst.start_ns = last.arrival_ns;
    for (const CollectiveArrival& a : inst.arrivals) {
      inst.wait_cost_ns += inst.start_ns - a.arrival_ns;
      if (a.completed_ns != 0 && (inst.end_ns == 0 || a.completed_ns < inst.end_ns)) {
        inst.end_ns = a.completed_ns;
      }
    }
    inst.step = StepAt(trace, raw[last.member], last_request.tid, last.arrival_ns);
    if (!inst.missing.empty()) {
      for (size_t i : inst.missing) {
        missed[i].push_back(absl::StrCat("#", inst.number, " on queue ", inst.queue));
      }
    } else if (inst.arrivals.size() >= 2 && inst.skew_ns() <= options.noise_floor_ns) {
      inst.within_noise = true;
      ++out.within_noise;
    } else if (inst.arrivals.size() >= 2) {
      ++out.late_instances;
      const uint64_t since = inst.arrivals[inst.arrivals.size() - 2].arrival_ns;
      inst.late_causes = CausesIn(trace, raw[last.member], last_request.tid, since,
                                  last.arrival_ns, last.arrival_ns);
      for (const CollectiveArrival& a : inst.arrivals) {
        out.stragglers[a.member].waited_ns += inst.start_ns - a.arrival_ns;
      }
      Straggler& s = out.stragglers[last.member];
      ++s.times_last;
      s.wait_cost_ns += inst.wait_cost_ns;
      MergeCauses(inst.late_causes, &s.causes);
    }
    out.instances.push_back(std::move(inst));
  }
  std::sort(out.instances.begin(), out.instances.end(),
            [](const CollectiveInstance& a, const CollectiveInstance& b) {
              return std::tie(a.start_ns, a.queue, a.number) <
                     std::tie(b.start_ns, b.queue, b.number);
            });
  std::sort(out.stragglers.begin(), out.stragglers.end(),
            [](const Straggler& a, const Straggler& b) {
              return std::make_tuple(b.times_last, b.wait_cost_ns, a.member) <
                     std::make_tuple(a.times_last, a.wait_cost_ns, b.member);
            });
  out.noise_floor_ns = options.noise_floor_ns;
  for (Straggler& s : out.stragglers) {
    s.chance = AtLeastByChance(s.times_last, out.late_instances, 1.0 / out.members.size());
  }
  for (const auto& [i, which] : missed) {
    const CollectiveMember& m = out.members[i];
    std::string list = which.front();
    if (which.size() > 1) absl::StrAppend(&list, " and ", which.size() - 1, " more");
    out.notes.push_back(absl::StrCat(
        "rank ", m.rank, " (", m.host, " pid ", m.pid, ") is missing from collective ", list,
        " that the other ranks scheduled",
        m.cut_off ? ": its process ended without its final batch (killed or crashed)"
                  : " (it stopped, or the capture missed its calls)"));

  }
  return out;
}

}  // namespace nrtprof::daemon
