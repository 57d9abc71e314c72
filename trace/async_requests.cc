#include "trace/async_requests.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "absl/container/flat_hash_set.h"
#include "trace/api_function.h"
#include "trace/id_index.h"

namespace nrtprof::daemon {
namespace {

uint64_t EndOf(uint64_t start, uint64_t duration) {
  return duration > std::numeric_limits<uint64_t>::max() - start
             ? std::numeric_limits<uint64_t>::max()
             : start + duration;
}

}  // namespace

std::vector<AsyncRequest> AsyncRequests(const ProcessTrace& p) {
  std::vector<AsyncRequest> out;
  if (std::none_of(p.calls.begin(), p.calls.end(),
                   [](const ApiCall& c) { return c.nrta_seq != 0; })) {
    return out;
  }
  const IdIndex<ApiCall, &ApiCall::correlation_id, CaptureVector<ApiCall>> calls(p.calls);
  absl::flat_hash_set<const ApiCall*> with_work;
  std::map<uint32_t, std::set<int32_t>> cores_of_xu;
  uint64_t last_ns = 0;  // the end of the process's last event
  for (const RangeEvent& r : p.ranges) {
    last_ns = std::max(last_ns, EndOf(r.start_ns, r.duration_ns));
  }
  for (const ApiCall& c : p.calls) last_ns = std::max(last_ns, EndOf(c.start_ns, c.duration_ns));
  for (const DeviceEvent& d : p.device) {
    last_ns = std::max(last_ns, EndOf(d.start_ns, d.duration_ns));
    if (d.nrta_seq == 0 || d.parent != 0) continue;
    // A collective's request retires when it has run (its barrier comes before).
    if (d.kind != DeviceEventKind::kExecution && d.kind != DeviceEventKind::kDma &&
        !(d.kind == DeviceEventKind::kCollective && d.name == kCcRunning)) {
      continue;
    }
    cores_of_xu[static_cast<uint32_t>(d.nrta_seq >> kNrtaQueueShift)].insert(d.nc_idx);
    const ApiCall* call = d.correlation_id != 0 ? calls.Find(d.correlation_id) : nullptr;
    if (call == nullptr || !with_work.insert(call).second) continue;  // one request, one work
    AsyncRequest& r = out.emplace_back();
    r.nc_idx = d.nc_idx;
    r.xu = static_cast<uint32_t>(d.nrta_seq >> kNrtaQueueShift);
    r.seq = d.nrta_seq & kNrtaSeqMask;
    r.scheduled_ns = EndOf(call->start_ns, call->duration_ns);
    r.retired_ns = std::max(r.scheduled_ns, EndOf(d.start_ns, d.duration_ns));
    r.call = call;
    r.device = &d;
  }
  for (const ApiCall& c : p.calls) {
    if (c.nrta_seq == 0 || c.status != 0 || !IsAsyncSchedule(c.function) ||
        with_work.count(&c) != 0) {
      continue;
    }
    const uint32_t xu = static_cast<uint32_t>(c.nrta_seq >> kNrtaQueueShift);
    int32_t nc = c.nc_idx;
    if (nc < 0) {
      auto cores = cores_of_xu.find(xu);
      if (cores == cores_of_xu.end() || cores->second.size() != 1) continue;  // no queue known
      nc = *cores->second.begin();
    }
    AsyncRequest& r = out.emplace_back();
    r.nc_idx = nc;
    r.xu = xu;
    r.seq = c.nrta_seq & kNrtaSeqMask;
    r.scheduled_ns = EndOf(c.start_ns, c.duration_ns);
    r.call = &c;
  }
  std::sort(out.begin(), out.end(), [](const AsyncRequest& a, const AsyncRequest& b) {
    return std::tie(a.nc_idx, a.xu, a.seq, a.scheduled_ns) <
           std::tie(b.nc_idx, b.xu, b.seq, b.scheduled_ns);
  });
  // Work not in the capture: retired when the next later request of its queue starts on the
  // device (the queue runs them in order), else at the process's last event.
  const uint64_t kNone = std::numeric_limits<uint64_t>::max();
  uint64_t next_start = kNone;
  for (size_t i = out.size(); i-- > 0;) {
    AsyncRequest& r = out[i];
    if (i + 1 < out.size() && (out[i + 1].nc_idx != r.nc_idx || out[i + 1].xu != r.xu)) {
      next_start = kNone;
    }
    if (r.device != nullptr) {
      next_start = r.device->start_ns;
    } else {
      r.retired_ns = std::max(r.scheduled_ns, next_start != kNone ? next_start : last_ns);
    }
  }
  return out;
}

}  // namespace nrtprof::daemon
