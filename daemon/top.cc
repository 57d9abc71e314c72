#include "daemon/top.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "trace/collectives.h"
#include "trace/summary.h"

namespace nrtprof::daemon {
namespace {

void SortByDeviceTime(google::protobuf::RepeatedPtrField<nrtprof::TopRow>* rows) {
  std::sort(rows->begin(), rows->end(), [](const nrtprof::TopRow& a, const nrtprof::TopRow& b) {
    return std::make_tuple(b.device_ns(), b.calls(), a.name(), a.pid()) <
           std::make_tuple(a.device_ns(), a.calls(), b.name(), b.pid());
  });
}

}  // namespace

nrtprof::TopReply ComputeTop(const Trace& trace, uint64_t window_ns) {
  nrtprof::TopReply reply;
  reply.set_window_ns(window_ns);
  std::map<std::pair<uint32_t, std::string>, nrtprof::TopRow> models;
  uint64_t events = 0;
  for (const ProcessTrace& p : trace.processes) {
    nrtprof::TopRow* process = reply.add_processes();
    process->set_name(p.executable);
    process->set_pid(p.pid);
    // Its runtime calls as the summary counts them: a recorded completion poll stands for the
    // polls before it that saw nothing new, and a thread's last ones come as tallies.
    uint64_t calls = p.calls.size();
    for (const ApiCall& c : p.calls) calls += c.polls;
    for (const PollTally& t : p.poll_tallies) calls += t.polls;
    process->set_calls(calls);
    if (const int rank = RankOf(p); rank >= 0) process->set_rank(rank);
    process->set_job(p.job);  // the job it named, as `nrtprof status` has it (none: empty)
    process->set_executions_held_by_program(p.executions_held_by_program);
    process->set_executions_held_lost(p.executions_held_lost);
    events += p.calls.size() + p.ranges.size() + p.device.size();
    for (const DeviceEvent& e : p.device) {
      if (e.parent != 0) continue;  // inside an execution: its time is the execution's
      process->set_device_ns(process->device_ns() + e.duration_ns);
      if (e.kind != DeviceEventKind::kExecution) continue;
      const std::string name = e.model_name.empty() ? "unknown" : e.model_name;
      nrtprof::TopRow& model = models[{p.pid, name}];
      model.set_name(name);
      model.set_pid(p.pid);
      model.set_calls(model.calls() + 1);
      model.set_device_ns(model.device_ns() + e.duration_ns);
    }
  }
  for (auto& [key, row] : models) *reply.add_models() = std::move(row);
  for (const SummaryRow& r : ComputeSummary(trace).rows) {
    nrtprof::TopRow* op = reply.add_ops();
    op->set_name(r.name);
    op->set_calls(r.calls);
    op->set_device_ns(r.self_device_ns);
    op->set_host_ns(r.self_cpu_ns);
  }
  reply.set_events(events);
  SortByDeviceTime(reply.mutable_processes());
  SortByDeviceTime(reply.mutable_models());
  SortByDeviceTime(reply.mutable_ops());
  return reply;
}

}  // namespace nrtprof::daemon
