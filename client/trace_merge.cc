#include "client/trace_merge.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/clock_offset.h"
#include "trace/perfetto_trace_reader.h"
#include "proto/perfetto_trace.pb.h"

namespace nrtprof::cli {
namespace {

using perfetto::protos::TracePacket;

constexpr uint32_t kMonotonic = perfetto::protos::BUILTIN_CLOCK_MONOTONIC;
constexpr uint32_t kRealtime = perfetto::protos::BUILTIN_CLOCK_REALTIME;
// The merged file's own sequence (clock snapshot, host tracks); host i's is kFirstHostSequence+i.
constexpr uint32_t kMergeSequence = 1;
constexpr uint32_t kFirstHostSequence = 2;
// Host i's track uuids and flow ids are the writer's (small counters) plus (i + 1) << 40; the
// host tracks of the merge are below 1 << 40.
constexpr int kIdShift = 40;
constexpr int kPidShift = 22;  // above /proc/sys/kernel/pid_max's limit (2^22)

// What one host's packets become in the merged file.
class HostRewrite {
 public:
  // `shift_ns`: the host's trace clock minus ours.
  HostRewrite(size_t index, const HostTrace& host, int64_t shift_ns, bool move_pids)
      : index_(index), host_(host), shift_ns_(shift_ns), move_pids_(move_pids) {}

  // Moves the packet to the host's sequence, its time to ours, its ids to the host's range.
  void Rewrite(uint64_t time_ns, TracePacket* p) const {
    p->set_trusted_packet_sequence_id(kFirstHostSequence + static_cast<uint32_t>(index_));
    if (p->has_clock_snapshot()) {
      // The sequence's first packet: it keeps clearing the incremental state (interning), but
      // its clocks and defaults go: every timestamp below is absolute on MONOTONIC.
      p->clear_clock_snapshot();
      p->clear_trace_packet_defaults();
      p->clear_timestamp();
      p->clear_timestamp_clock_id();
    } else if (p->has_timestamp()) {
      p->set_timestamp(static_cast<uint64_t>(static_cast<int64_t>(time_ns) - shift_ns_));
      p->set_timestamp_clock_id(kMonotonic);
    }
    if (p->has_track_descriptor()) RewriteTrack(p->mutable_track_descriptor());
    if (p->has_track_event()) {
      auto* e = p->mutable_track_event();
      if (e->has_track_uuid()) e->set_track_uuid(Id(e->track_uuid()));
      for (auto& id : *e->mutable_flow_ids()) id = Id(id);
      for (auto& id : *e->mutable_terminating_flow_ids()) id = Id(id);
    }
  }

 private:
  uint64_t Id(uint64_t id) const { return id + (static_cast<uint64_t>(index_ + 1) << kIdShift); }
  int32_t Pid(int32_t pid) const {
    return move_pids_ ? pid + (static_cast<int32_t>(index_ + 1) << kPidShift) : pid;
  }

  void RewriteTrack(perfetto::protos::TrackDescriptor* t) const {
    t->set_uuid(Id(t->uuid()));
    if (t->has_parent_uuid()) t->set_parent_uuid(Id(t->parent_uuid()));
    if (t->has_process()) {
      auto* process = t->mutable_process();
      std::string name = absl::StrCat(process->process_name(), " @ ", host_.host);
      if (move_pids_) absl::StrAppend(&name, " (pid ", process->pid(), ")");
      process->set_process_name(name);
      process->set_pid(Pid(process->pid()));
    }
    if (t->has_thread()) {
      t->mutable_thread()->set_pid(Pid(t->thread().pid()));
      t->mutable_thread()->set_tid(Pid(t->thread().tid()));
    }
  }

  const size_t index_;
  const HostTrace& host_;
  const int64_t shift_ns_;
  const bool move_pids_;
};

// How far the host's trace times are ahead of our CLOCK_MONOTONIC. Through the wall clocks
// when the trace states its own (its clock snapshot's REALTIME): host time + its REALTIME -
// MONOTONIC is its wall clock, less its offset is ours, less our REALTIME - MONOTONIC is our
// monotonic time. Else by the monotonic offset itself.
int64_t ShiftOf(const HostTrace& host, const perfetto::protos::Trace& trace,
                int64_t realtime_minus_monotonic_ns) {
  for (const TracePacket& p : trace.packet()) {
    if (!p.has_clock_snapshot()) continue;
    int64_t monotonic = -1, realtime = -1;
    for (const auto& c : p.clock_snapshot().clocks()) {
      if (c.clock_id() == kMonotonic) monotonic = static_cast<int64_t>(c.timestamp());
      if (c.clock_id() == kRealtime) realtime = static_cast<int64_t>(c.timestamp());
    }
    if (monotonic >= 0 && realtime >= 0) {
      return host.realtime_offset_ns + realtime_minus_monotonic_ns - (realtime - monotonic);
    }
  }
  return host.monotonic_offset_ns;
}

// The pids and tids a host's descriptors name.
std::set<int32_t> IdsOf(const perfetto::protos::Trace& trace) {
  std::set<int32_t> ids;
  for (const TracePacket& p : trace.packet()) {
    if (p.track_descriptor().has_process()) ids.insert(p.track_descriptor().process().pid());
    if (p.track_descriptor().has_thread()) {
      ids.insert(p.track_descriptor().thread().pid());
      ids.insert(p.track_descriptor().thread().tid());
    }
  }
  return ids;
}

// The name the merge gave instant and annotation of a host's clock (AddHostTrack).
constexpr char kHostClockInstant[] = "nrtprof host clock";

TracePacket MergePacket(uint64_t time_ns) {
  TracePacket p;
  p.set_trusted_packet_sequence_id(kMergeSequence);
  p.set_timestamp(time_ns);
  p.set_timestamp_clock_id(kMonotonic);
  return p;
}

void AddAnnotation(perfetto::protos::TrackEvent* e, const char* name, int64_t value) {
  auto* a = e->add_debug_annotations();
  a->set_name(name);
  a->set_int_value(value);
}

// The host's track and the instant that states its clock.
void AddHostTrack(size_t index, const HostTrace& host, uint64_t time_ns,
                  perfetto::protos::Trace* out) {
  const uint64_t uuid = index + 1;
  TracePacket track;
  track.set_trusted_packet_sequence_id(kMergeSequence);
  track.mutable_track_descriptor()->set_uuid(uuid);
  track.mutable_track_descriptor()->set_name(
      absl::StrCat("host ", host.host, host.hostname.empty() ? "" : " (" + host.hostname + ")",
                   ": clock ", FormatOffset(host.realtime_offset_ns, host.error_bound_ns)));
  *out->add_packet() = std::move(track);
  TracePacket instant = MergePacket(time_ns);
  auto* e = instant.mutable_track_event();
  e->set_type(perfetto::protos::TrackEvent::TYPE_INSTANT);
  e->set_track_uuid(uuid);
  e->set_name(kHostClockInstant);
  auto* h = e->add_debug_annotations();
  h->set_name("host");
  h->set_string_value(host.host);
  AddAnnotation(e, "clock_offset_ns", host.realtime_offset_ns);
  AddAnnotation(e, "monotonic_offset_ns", host.monotonic_offset_ns);
  AddAnnotation(e, "error_bound_ns", static_cast<int64_t>(host.error_bound_ns));
  *out->add_packet() = std::move(instant);
}

}  // namespace

absl::StatusOr<std::string> MergeHostTraces(const std::vector<HostTrace>& hosts,
                                            int64_t realtime_minus_monotonic_ns) {
  std::vector<daemon::ReadTrace> read;
  std::vector<int64_t> shifts;
  uint64_t first_ns = UINT64_MAX;
  for (const HostTrace& host : hosts) {
    absl::StatusOr<daemon::ReadTrace> r = daemon::ReadPerfettoTrace(host.pftrace);
    if (!r.ok()) {
      return absl::DataLossError(
          absl::StrCat("the trace of ", host.host, " does not read back: ", r.status().message()));
    }
    shifts.push_back(ShiftOf(host, r->trace, realtime_minus_monotonic_ns));
    for (uint64_t t : r->times) {
      if (t == 0) continue;
      const int64_t ours = static_cast<int64_t>(t) - shifts.back();
      if (ours > 0 && static_cast<uint64_t>(ours) < first_ns) first_ns = ours;
    }
    read.push_back(*std::move(r));
  }
  if (first_ns == UINT64_MAX) first_ns = 1;

  perfetto::protos::Trace out;
  TracePacket snapshot = MergePacket(first_ns);
  snapshot.set_sequence_flags(TracePacket::SEQ_INCREMENTAL_STATE_CLEARED);
  auto* clocks = snapshot.mutable_clock_snapshot();
  auto* monotonic = clocks->add_clocks();
  monotonic->set_clock_id(kMonotonic);
  monotonic->set_timestamp(first_ns);
  if (realtime_minus_monotonic_ns > 0) {
    auto* realtime = clocks->add_clocks();
    realtime->set_clock_id(kRealtime);
    realtime->set_timestamp(first_ns + static_cast<uint64_t>(realtime_minus_monotonic_ns));
  }
  clocks->set_primary_trace_clock(perfetto::protos::BUILTIN_CLOCK_MONOTONIC);
  *out.add_packet() = std::move(snapshot);
  for (size_t i = 0; i < hosts.size(); ++i) AddHostTrack(i, hosts[i], first_ns, &out);

  std::set<int32_t> seen_ids;
  for (size_t i = 0; i < hosts.size(); ++i) {
    const std::set<int32_t> ids = IdsOf(read[i].trace);
    bool meets = false;
    for (int32_t id : ids) meets = meets || seen_ids.count(id) != 0;
    seen_ids.insert(ids.begin(), ids.end());
    const HostRewrite rewrite(i, hosts[i], shifts[i], meets);
    auto* packets = read[i].trace.mutable_packet();
    for (int k = 0; k < packets->size(); ++k) {
      TracePacket* p = packets->Mutable(k);
      rewrite.Rewrite(read[i].times[k], p);
      *out.add_packet() = std::move(*p);
    }
  }
  return out.SerializeAsString();
}

std::vector<MergedHost> SplitMergedTrace(const daemon::ReadTrace& merged) {
  if (merged.trace.packet_size() == 0 && !merged.packet_bytes.empty()) {
    // Read as packets' bytes (ReadPerfettoPackets): the merge's own sequence is parsed to see
    // if it is a merged trace, and the rest only if it is. A packet that does not parse is
    // left to the reader of the packets to name.
    absl::StatusOr<daemon::ReadTrace> own = daemon::WithMessages(merged, kMergeSequence);
    if (!own.ok() || SplitMergedTrace(*own).empty()) return {};
    absl::StatusOr<daemon::ReadTrace> all = daemon::WithMessages(merged);
    if (!all.ok()) return {};
    return SplitMergedTrace(*all);
  }
  // The merge's own sequence: the caller's clocks, and each host's clock instant on the host's
  // track (uuid index + 1), naming it and its wall-clock offset.
  struct Found {
    std::string host;
    int64_t clock_offset_ns = 0;
    uint64_t error_bound_ns = 0;
  };
  std::map<uint64_t, Found> by_index;
  int64_t monotonic = -1, realtime = -1;
  for (const TracePacket& p : merged.trace.packet()) {
    if (p.trusted_packet_sequence_id() != kMergeSequence) continue;
    for (const auto& c : p.clock_snapshot().clocks()) {
      if (c.clock_id() == kMonotonic) monotonic = static_cast<int64_t>(c.timestamp());
      if (c.clock_id() == kRealtime) realtime = static_cast<int64_t>(c.timestamp());
    }
    const auto& e = p.track_event();
    if (e.name() != kHostClockInstant || e.track_uuid() == 0 ||
        e.track_uuid() >= (uint64_t{1} << kIdShift)) {
      continue;
    }
    Found found;
    for (const auto& a : e.debug_annotations()) {
      if (a.name() == "host") found.host = a.string_value();
      if (a.name() == "clock_offset_ns") found.clock_offset_ns = a.int_value();
      if (a.name() == "error_bound_ns" && a.int_value() > 0) {
        found.error_bound_ns = static_cast<uint64_t>(a.int_value());
      }
    }
    by_index[e.track_uuid() - 1] = found;
  }
  std::vector<MergedHost> hosts;
  if (by_index.empty() || by_index.rbegin()->first + 1 != by_index.size()) return hosts;

  for (const auto& [index, found] : by_index) {
    MergedHost& h = hosts.emplace_back();
    h.host = found.host;
    h.error_bound_ns = found.error_bound_ns;
    const uint32_t sequence = kFirstHostSequence + static_cast<uint32_t>(index);
    const int32_t moved_by = static_cast<int32_t>(index + 1) << kPidShift;
    // The host's wall clock, stated as its own file did (its snapshots were left out).
    if (monotonic >= 0 && realtime >= 0) {
      TracePacket* clocks = h.read.trace.add_packet();
      clocks->set_trusted_packet_sequence_id(sequence);
      auto* snapshot = clocks->mutable_clock_snapshot();
      auto* m = snapshot->add_clocks();
      m->set_clock_id(kMonotonic);
      m->set_timestamp(static_cast<uint64_t>(monotonic));
      auto* r = snapshot->add_clocks();
      r->set_clock_id(kRealtime);
      r->set_timestamp(static_cast<uint64_t>(realtime + found.clock_offset_ns));
      snapshot->set_primary_trace_clock(perfetto::protos::BUILTIN_CLOCK_MONOTONIC);
      h.read.times.push_back(static_cast<uint64_t>(monotonic));
    }
    for (int k = 0; k < merged.trace.packet_size(); ++k) {
      const TracePacket& from = merged.trace.packet(k);
      if (from.trusted_packet_sequence_id() != sequence) continue;
      TracePacket* p = h.read.trace.add_packet();
      *p = from;
      h.read.times.push_back(merged.times[k]);
      if (!p->has_track_descriptor()) continue;
      // Undo HostRewrite: pids above any Linux pid were moved; the name says "@ HOST".
      auto* t = p->mutable_track_descriptor();
      auto real = [moved_by](int32_t id) { return id >= moved_by ? id - moved_by : id; };
      if (t->has_process()) {
        auto* process = t->mutable_process();
        const int32_t pid = process->pid();
        process->set_pid(real(pid));
        const std::string suffix = absl::StrCat(
            " @ ", h.host, pid >= moved_by ? absl::StrCat(" (pid ", real(pid), ")") : "");
        if (absl::EndsWith(process->process_name(), suffix)) {
          process->set_process_name(
              process->process_name().substr(0, process->process_name().size() - suffix.size()));
        }
      }
      if (t->has_thread()) {
        t->mutable_thread()->set_pid(real(t->thread().pid()));
        t->mutable_thread()->set_tid(real(t->thread().tid()));
      }
    }
  }
  return hosts;
}

}  // namespace nrtprof::cli
