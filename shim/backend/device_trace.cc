#include "shim/backend/device_trace.h"

#include <time.h>

#include <algorithm>
#include <cstring>

#include "shim/backend/event_wire.h"

namespace nrtprof::shim {
namespace {

int64_t ReadClock(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace

namespace {

// Counts what a refused document held, as well as can be said of text that is not JSON.
uint64_t CountEventsIn(std::string_view json) {
  uint64_t n = 0;
  for (size_t at = json.find("\"event_type\""); at != std::string_view::npos;
       at = json.find("\"event_type\"", at + 1)) {
    ++n;
  }
  return std::max<uint64_t>(n, 1);
}

}  // namespace

void DeviceTraceParser::Emit(const DeviceEvent& d, DeviceTraceOutput* out) {
  if (!out->encode) {
    nrtprof::Event& event = out->events.emplace_back();
    event.set_kind(d.kind);
    event.set_start_ns(d.start_ns);
    event.set_duration_ns(d.duration_ns);
    event.set_tid(d.tid);
    event.set_name_iid(d.name_iid);
    event.set_bytes(d.bytes);
    event.set_nc_idx(d.nc_idx);
    event.set_device_id(d.device_id);
    event.set_exec_id(d.exec_id);
    event.set_model_name_iid(d.model_name_iid);
    event.set_host_clock(d.host_clock);
    event.set_nrta_seq(d.nrta_seq);
    event.set_worker_gid(d.worker_gid);
    return;
  }
  // Event's fields in their numbers' order (proto/nrtprof.proto), as protobuf writes them,
  // after room for the field's tag and length: then one append.
  char buffer[wire::kMaxEventBytes];
  char* const body = buffer + 3;
  char* p = body;
  p = wire::PutField(p, 1, wire::Int32Bits(d.kind));
  p = wire::PutField(p, 2, d.start_ns);
  p = wire::PutField(p, 3, d.duration_ns);
  p = wire::PutField(p, 4, d.tid);
  p = wire::PutField(p, 5, d.name_iid);
  p = wire::PutField(p, 8, d.bytes);
  p = wire::PutField(p, 14, wire::Int32Bits(d.nc_idx));
  p = wire::PutField(p, 15, d.device_id);
  p = wire::PutField(p, 17, d.exec_id);
  p = wire::PutField(p, 18, d.model_name_iid);
  p = wire::PutField(p, 23, d.host_clock ? 1 : 0);
  p = wire::PutField(p, 25, d.nrta_seq);
  p = wire::PutField(p, 27, wire::Int32Bits(d.worker_gid));
  wire::AppendAsBatchEvent(body, p, &out->encoded);
  out->encoded_events.push_back({out->encoded.size(), d.kind, d.name_iid, d.model_name_iid});
}

uint64_t DeviceTraceParser::ToMonotonic(uint64_t realtime_ns) const {
  // In unsigned arithmetic, clamped: a document may carry any 64-bit value.
  if (realtime_offset_ns_ >= 0) {
    const uint64_t offset = static_cast<uint64_t>(realtime_offset_ns_);
    return realtime_ns > offset ? realtime_ns - offset : 0;
  }
  const uint64_t add = static_cast<uint64_t>(-(realtime_offset_ns_ + 1)) + 1;
  return realtime_ns > UINT64_MAX - add ? UINT64_MAX : realtime_ns + add;
}

bool DeviceTraceParser::Plausible(uint64_t start_ns, uint64_t end_ns, DeviceTraceOutput* out) {
  // What the daemon refuses a whole batch for (a span over a week, or one that ends past the
  // clock's end) is a malformed event here, counted and left out.
  if (end_ns - start_ns <= kMaxSpanNs && start_ns <= UINT64_MAX - (end_ns - start_ns)) {
    return true;
  }
  ++out->malformed;
  ++malformed_total_;
  return false;
}

bool DeviceTraceParser::Parse(uint64_t generation, std::string_view json,
                              DeviceTraceOutput* out, std::string* error) {
  pending_.clear();
  pending_names_.clear();
  decoded_names_.clear();
  pending_cc_ops_.clear();
  SysTraceReadStats stats;
  const bool ok = ReadSysTrace(
      json,
      [this, json](const SysTraceEvent& e) {
        pending_.push_back(Pack(e));
        if (!e.model_name.empty() && e.has_model_id) {
          // A name read from the text stays valid during Parse; one decoded from escapes is
          // the reader's, copied.
          std::string_view name = e.model_name;
          if (name.data() < json.data() || name.data() >= json.data() + json.size()) {
            name = decoded_names_.emplace_back(name);
          }
          pending_names_.emplace_back(e.model_id, name);
        }
        if (!e.cc_op.empty()) {
          // A handful of names (the collective kinds), kept for the process's life. Interned
          // when the event is applied: a refused document interns nothing.
          auto op = cc_op_iids_.find(e.cc_op);
          if (op == cc_op_iids_.end() && cc_op_iids_.size() < kMaxCcOps) {
            op = cc_op_iids_.emplace(std::string(e.cc_op), 0).first;
          }
          if (op != cc_op_iids_.end()) pending_cc_ops_.emplace_back(pending_.size() - 1, &*op);
        }
      },
      &stats, error);
  if (!ok) {
    const uint64_t lost = std::max<uint64_t>(CountEventsIn(json), stats.events);
    out->malformed += lost;
    malformed_total_ += lost;
    return false;
  }
  stats_.events += stats.events;
  stats_.unknown_types += stats.unknown_types;
  stats_.unknown_members += stats.unknown_members;
  out->skipped += stats.unknown_types;
  if (generation != generation_) {
    generation_ = generation;
    for (const auto& [nc, numbers] : cores_) {
      most_numbered_ = std::max(most_numbered_, numbers.numbered);
    }
    cores_.clear();
    open_execs_.clear();
    open_collectives_.clear();
    threads_.clear();
  }
  if (!fixed_offset_) realtime_offset_ns_ = RealtimeOffsetNs(ReadClock);
  for (const auto& [model_id, name] : pending_names_) {
    ModelName& known = model_names_[model_id];
    if (known.name != name) known = {std::string(name), 0};
  }
  auto cc_op = pending_cc_ops_.begin();
  for (size_t i = 0; i < pending_.size(); ++i) {
    uint32_t cc_op_iid = 0;
    if (cc_op != pending_cc_ops_.end() && cc_op->first == i) {
      if (cc_op->second->second == 0) cc_op->second->second = strings_->Intern(cc_op->second->first);
      cc_op_iid = cc_op->second->second;
      ++cc_op;
    }
    Apply(pending_[i], cc_op_iid, out);
  }
  return true;
}

DeviceTraceParser::PendingEvent DeviceTraceParser::Pack(const SysTraceEvent& e) {
  PendingEvent p;
  p.type = e.type;
  p.phase = e.phase;
  p.has_clocks = e.has_nc_timestamp_ns && e.has_cpu_timestamp_ns;
  p.nc_idx = e.nc_idx;
  p.id = e.id;
  p.nc_local_id = e.nc_local_id;
  p.thread_id = e.thread_id;
  p.timestamp_ns = e.timestamp_ns;
  p.nrta_seq = e.has_nrta_seq_id ? e.nrta_seq_id : 0;
  switch (e.type) {
    case SysTraceType::kDeviceExec:
      p.exec = {e.exec_id, e.model_id};
      break;
    case SysTraceType::kTimestampSync:
      p.sync = {e.nc_timestamp_ns, e.cpu_timestamp_ns};
      break;
    default:
      p.transfer = {e.size, e.worker_gid};  // the reader's size is 0 when none was sent
      break;
  }
  return p;
}

uint64_t DeviceTraceParser::TakeMostNumberedOnACore() {
  uint64_t most = most_numbered_;
  most_numbered_ = 0;
  for (auto& [nc, numbers] : cores_) {
    most = std::max(most, numbers.numbered);
    numbers.numbered = 0;
  }
  return most;
}

bool DeviceTraceParser::UsesType(const char* name) {
  for (SysTraceType type :
       {SysTraceType::kNrtLoad, SysTraceType::kDeviceExec, SysTraceType::kTensorRead,
        SysTraceType::kTensorWrite, SysTraceType::kDmemBufCopyin, SysTraceType::kDmemBufCopyout,
        SysTraceType::kTimestampSync, SysTraceType::kCcExecBarrier, SysTraceType::kCcRunning}) {
    if (strcmp(name, SysTraceTypeName(type)) == 0) return true;
  }
  // Not these: nrt_execute (the shim records the call itself), model_switch, and what this
  // parser does not know (Apply draws none of them).
  return false;
}

uint32_t DeviceTraceParser::NameIid(const char* name) {
  for (const auto& [known, iid] : name_iids_) {
    if (known == name) return iid;
  }
  const uint32_t iid = strings_->Intern(name);
  name_iids_.emplace_back(name, iid);
  return iid;
}

void DeviceTraceParser::Apply(const PendingEvent& e, uint32_t cc_op_iid,
                              DeviceTraceOutput* out) {
  // Each core numbers its events one after another; what is missing between two was lost.
  // The first of a capture sets where the count starts (whether the runtime numbers from 1 at
  // each start is not publicly known: assuming it could report losses that never happened).
  auto core = cores_.find(e.nc_idx);
  if (core == cores_.end()) core = cores_.emplace(e.nc_idx, CoreNumbers{e.nc_local_id}).first;
  uint64_t& expected = core->second.next_local_id;
  if (e.nc_local_id > expected) {
    out->overwritten += e.nc_local_id - expected;
    overwritten_total_ += e.nc_local_id - expected;
  }
  if (e.nc_local_id >= expected) {
    core->second.numbered += e.nc_local_id + 1 - expected;
    expected = e.nc_local_id + 1;
  }

  if (e.type != SysTraceType::kUnknown && e.nc_idx >= kMaxNeuronCores) {
    // The wire allows cores 0 to 4095: an event of another is malformed here, not a batch the
    // daemon would refuse whole.
    ++out->malformed;
    ++malformed_total_;
    return;
  }
  const bool start = e.phase == SysTracePhase::kStart;
  const bool stop = e.phase == SysTracePhase::kStop;
  switch (e.type) {
    case SysTraceType::kDeviceExec: {
      std::deque<OpenExec>& open = open_execs_[e.nc_idx];
      if (start) {
        open.push_back(
            {e.timestamp_ns, e.id, e.thread_id, e.exec.exec_id, e.exec.model_id, e.nrta_seq});
        return;
      }
      if (!stop || open.empty()) return;  // a stop whose start was lost
      const OpenExec x = open.front();
      open.pop_front();
      const uint64_t end = std::max(e.timestamp_ns, x.device_ns);
      if (!Plausible(x.device_ns, end, out)) return;
      DeviceEvent event;
      event.kind = nrtprof::EVENT_DEVICE_EXEC;
      event.start_ns = x.device_ns;
      event.duration_ns = end - x.device_ns;
      event.tid = static_cast<uint32_t>(x.thread_id);
      event.name_iid = NameIid("nc_exec_running");
      event.nc_idx = static_cast<int32_t>(e.nc_idx);
      event.device_id = x.id;
      event.exec_id = x.exec_id;
      event.nrta_seq = x.nrta_seq;
      if (auto name = model_names_.find(x.model_id); name != model_names_.end()) {
        if (name->second.iid == 0) name->second.iid = strings_->Intern(name->second.name);
        event.model_name_iid = name->second.iid;
      }
      Emit(event, out);
      return;
    }
    case SysTraceType::kTimestampSync: {
      if (!e.has_clocks) return;
      nrtprof::DeviceClockSync& sync = out->clock_syncs.emplace_back();
      sync.set_nc_idx(static_cast<int32_t>(e.nc_idx));
      sync.set_device_ns(e.sync.nc_timestamp_ns);
      sync.set_host_monotonic_ns(ToMonotonic(e.sync.cpu_timestamp_ns));
      return;
    }
    case SysTraceType::kNrtLoad: {
      ThreadSpans& thread = threads_[e.thread_id];
      if (start) ++thread.loads;
      if (stop && thread.loads > 0) --thread.loads;
      return;
    }
    case SysTraceType::kTensorRead:
    case SysTraceType::kTensorWrite: {
      ThreadSpans& thread = threads_[e.thread_id];
      if (start) {
        thread.spans.push_back({e.type, e.timestamp_ns, e.id, e.transfer.size, e.nc_idx,
                                e.type == SysTraceType::kTensorWrite ? "dma_h2d" : "dma_d2h",
                                e.nrta_seq});
      } else if (stop) {
        CloseSpan(e, &thread, out);
      }
      return;
    }
    case SysTraceType::kDmemBufCopyin:
    case SysTraceType::kDmemBufCopyout: {
      ThreadSpans& thread = threads_[e.thread_id];
      if (start) {
        OpenCopy(e, &thread);
      } else if (stop) {
        CloseSpan(e, &thread, out);
      }
      return;
    }
    case SysTraceType::kCcExecBarrier:
    case SysTraceType::kCcRunning:
      Collective(e, cc_op_iid, out);
      return;
    case SysTraceType::kNrtExecute:
    case SysTraceType::kModelSwitch:
    case SysTraceType::kUnknown:
      return;
  }
}

void DeviceTraceParser::Collective(const PendingEvent& e, uint32_t cc_op_iid,
                                   DeviceTraceOutput* out) {
  // Device-stamped: timestamp_ns is the device's clock, as device_exec's. A core's collectives
  // on different queues may be open at once: a stop closes the open span of its type with its
  // request's number (the oldest of its type when the runtime gives none).
  std::vector<OpenCollective>& open = open_collectives_[e.nc_idx];
  const uint64_t seq = e.nrta_seq;
  if (e.phase == SysTracePhase::kStart) {
    open.push_back({e.type, e.timestamp_ns, e.id, e.thread_id, seq, e.transfer.size,
                    e.transfer.worker_gid, cc_op_iid});
    return;
  }
  if (e.phase != SysTracePhase::kStop) return;
  auto it = std::find_if(open.begin(), open.end(), [&](const OpenCollective& c) {
    return c.type == e.type && (seq == 0 || c.nrta_seq == seq);
  });
  if (it == open.end()) return;  // a stop whose start was lost
  const OpenCollective c = *it;
  open.erase(it);
  const uint64_t end = std::max(e.timestamp_ns, c.device_ns);
  if (!Plausible(c.device_ns, end, out)) return;
  DeviceEvent event;
  event.kind = nrtprof::EVENT_DEVICE_EXEC;
  event.start_ns = c.device_ns;
  event.duration_ns = end - c.device_ns;
  event.tid = static_cast<uint32_t>(c.thread_id);
  event.name_iid = NameIid(SysTraceTypeName(c.type));
  event.nc_idx = static_cast<int32_t>(e.nc_idx);
  event.device_id = c.id;
  event.nrta_seq = c.nrta_seq;
  event.bytes = c.size;
  event.worker_gid =
      static_cast<int32_t>(std::clamp<int64_t>(c.worker_gid, INT32_MIN, INT32_MAX));
  event.model_name_iid = cc_op_iid != 0 ? cc_op_iid : c.cc_op_iid;
  Emit(event, out);
}

void DeviceTraceParser::OpenCopy(const PendingEvent& e, ThreadSpans* thread) {
  const bool in = e.type == SysTraceType::kDmemBufCopyin;
  const char* name = in ? "dma_h2d" : "dma_d2h";
  for (const OpenSpan& s : thread->spans) {
    if (s.type == SysTraceType::kTensorRead || s.type == SysTraceType::kTensorWrite) {
      name = nullptr;  // the tensor call's own transfer, already on the DMA lane
    }
  }
  if (name != nullptr && in && thread->loads > 0) name = "dma_model_load";
  thread->spans.push_back({e.type, e.timestamp_ns, e.id, e.transfer.size, e.nc_idx, name,
                           e.nrta_seq});
}

void DeviceTraceParser::CloseSpan(const PendingEvent& e, ThreadSpans* thread,
                                  DeviceTraceOutput* out) {
  auto& spans = thread->spans;
  // An async request's transfers may overlap on one thread (two queues): its stop closes the
  // span of its own request. Otherwise the innermost open span of the type.
  const uint64_t seq = e.nrta_seq;
  auto it = std::find_if(spans.rbegin(), spans.rend(), [&](const OpenSpan& s) {
    return s.type == e.type && (seq == 0 || s.nrta_seq == seq);
  });
  if (it == spans.rend()) return;  // a stop whose start was lost
  const OpenSpan span = *it;
  spans.erase(std::next(it).base());
  if (span.name == nullptr) return;
  const uint64_t begin = ToMonotonic(span.start_ns);
  const uint64_t end = std::max(begin, ToMonotonic(e.timestamp_ns));
  if (!Plausible(begin, end, out)) return;
  DeviceEvent event;
  event.kind = nrtprof::EVENT_DEVICE_DMA;
  event.host_clock = true;
  event.start_ns = begin;
  event.duration_ns = end - begin;
  event.tid = static_cast<uint32_t>(e.thread_id);
  event.name_iid = NameIid(span.name);
  event.nc_idx = static_cast<int32_t>(span.nc_idx);
  event.device_id = span.id;
  event.bytes = span.size;
  event.nrta_seq = span.nrta_seq;
  Emit(event, out);
}

}  // namespace nrtprof::shim
