// How long AnalyzeCollectives takes on a synthetic capture of many ranks (issue 40 asks for
// 1,024 ranks in at most 2 s): each rank a process with, per step, a ProfilerStep range, a
// device execution and its call, a gradient write, and an all-reduce scheduled and polled; one
// rank stalls on the host before each all-reduce. Prints the time and whether the analysis named
// that rank.
//
//   bazel run //trace:collectives_benchmark -- [RANKS [STEPS]]   (default 1024 ranks, 20 steps)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "trace/collectives.h"

namespace nrtprof::daemon {
namespace {

Trace Synthetic(int ranks, int steps, int slow) {
  constexpr uint64_t kMs = 1000000;
  Trace t;
  uint64_t id = 1;
  for (int r = 0; r < ranks; ++r) {
    ProcessTrace& p = t.processes.emplace_back();
    p.pid = 10000 + r;
    p.host = "host" + std::to_string(r / 64);
    p.executable = "/bin/train";
    p.command_line = {"/bin/train", "--rank", std::to_string(r)};
    for (int s = 0; s < steps; ++s) {
      const uint64_t t0 = (s + 1) * 100 * kMs + r * 1000;  // ranks a microsecond apart
      const uint64_t arrival = t0 + (r == slow ? 40 : 10) * kMs;
      const auto range = [&](const char* name, uint64_t start, uint64_t end, uint32_t depth) {
        p.ranges.push_back({id++, Name::Lasting(name), 1, start, end - start, depth, 0});
      };
      const auto call = [&](const char* name, uint64_t start, uint64_t end, uint64_t seq) {
        ApiCall c;
        c.correlation_id = id++;
        c.name = Name::Lasting(name);
        c.tid = 1;
        c.start_ns = start;
        c.duration_ns = end - start;
        c.nrta_seq = seq;
        p.calls.push_back(c);
      };
      range(("ProfilerStep#" + std::to_string(s)).c_str(), t0, arrival + 2 * kMs, 0);
      range("forward_backward", t0, t0 + 5 * kMs, 1);
      call("nrt_execute", t0 + kMs, t0 + 5 * kMs, 0);
      DeviceEvent d;
      d.id = id++;
      d.name = "nc_exec_running";
      d.model_name = Name::Lasting("forward_backward");
      d.start_ns = t0 + 2 * kMs;
      d.duration_ns = 3 * kMs;
      p.device.push_back(d);
      range("grad_to_device", t0 + 5 * kMs, t0 + 6 * kMs, 1);
      call("nrt_tensor_write", t0 + 5 * kMs, t0 + 6 * kMs, 0);
      if (r == slow) range("data_loader_stall", t0 + 6 * kMs, arrival, 1);
      range("all_reduce", arrival, arrival + 2 * kMs, 1);
      const uint64_t seq = (uint64_t{32} << 48) | (s + 1);
      call("nrta_cc_schedule", arrival, arrival + 10000, seq);
      call("nrta_is_completed", arrival + kMs + 500000, arrival + kMs + 500000, seq);
    }
  }
  return t;
}

}  // namespace
}  // namespace nrtprof::daemon

int main(int argc, char** argv) {
  const int ranks = argc > 1 ? std::atoi(argv[1]) : 1024;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 20;
  if (ranks < 2 || steps < 1) {
    fprintf(stderr, "usage: collectives_benchmark [RANKS >= 2 [STEPS >= 1]]\n");
    return 2;
  }
  const int slow = ranks * 2 / 3;
  const nrtprof::daemon::Trace trace = nrtprof::daemon::Synthetic(ranks, steps, slow);
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<nrtprof::daemon::CollectivesAnalysis> a =
      nrtprof::daemon::AnalyzeCollectives(trace);
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!a.ok()) {
    fprintf(stderr, "collectives_benchmark: %s\n", std::string(a.status().message()).c_str());
    return 1;
  }
  const auto& top = a->stragglers.front();
  const int named = a->members[top.member].rank;
  printf("%d ranks, %d steps (%zu collectives): analysed in %.3f s; slowest rank %d (%s), last "
         "in %llu; before it arrived: %s\n",
         ranks, steps, a->instances.size(), s, named, named == slow ? "right" : "WRONG",
         static_cast<unsigned long long>(top.times_last),
         top.causes.empty() ? "-" : top.causes.front().what.c_str());
  return named == slow ? 0 : 1;
}
