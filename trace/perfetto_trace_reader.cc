#include "trace/perfetto_trace_reader.h"

#include <zlib.h>

#include <map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace nrtprof::daemon {
namespace {

using perfetto::protos::TracePacket;

absl::StatusOr<std::string> Inflate(const std::string& in) {
  z_stream zs{};
  if (inflateInit(&zs) != Z_OK) return absl::InternalError("inflateInit failed");
  std::string out;
  char buf[1 << 16];
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  int ret = Z_OK;
  while (ret == Z_OK) {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof(buf);
    ret = inflate(&zs, Z_NO_FLUSH);
    out.append(buf, sizeof(buf) - zs.avail_out);
  }
  inflateEnd(&zs);
  if (ret != Z_STREAM_END) return absl::DataLossError("a compressed_packets bundle is corrupt");
  return out;
}

// The clocks of one packet sequence, as ClockSnapshots declared them.
struct SequenceClocks {
  struct Clock {
    uint64_t reading = 0;  // the clock's current value, in its unit
    uint64_t unit_ns = 1;
    int64_t to_primary = 0;  // primary = reading * unit + to_primary
    bool incremental = false;
  };
  std::map<uint32_t, Clock> clocks;
  uint32_t default_clock = 0;
};

}  // namespace

absl::StatusOr<ReadTrace> ReadPerfettoTrace(const std::string& bytes) {
  ReadTrace out;
  perfetto::protos::Trace top;
  if (!top.ParseFromString(bytes)) return absl::DataLossError("not a Perfetto trace");
  for (TracePacket& packet : *top.mutable_packet()) {
    if (!packet.has_compressed_packets()) {
      *out.trace.add_packet() = std::move(packet);
      continue;
    }
    absl::StatusOr<std::string> inflated = Inflate(packet.compressed_packets());
    if (!inflated.ok()) return inflated.status();
    perfetto::protos::Trace inner;
    if (!inner.ParseFromString(*inflated)) {
      return absl::DataLossError("a compressed_packets bundle does not hold packets");
    }
    for (TracePacket& p : *inner.mutable_packet()) *out.trace.add_packet() = std::move(p);
    ++out.bundles;
  }

  std::map<uint32_t, SequenceClocks> sequences;
  std::map<uint32_t, int64_t> builtin_to_primary;  // builtin clock -> offset to the primary
  for (const TracePacket& p : out.trace.packet()) {
    SequenceClocks& seq = sequences[p.trusted_packet_sequence_id()];
    if (p.sequence_flags() & TracePacket::SEQ_INCREMENTAL_STATE_CLEARED) seq = SequenceClocks();
    if (p.has_trace_packet_defaults()) {
      seq.default_clock = p.trace_packet_defaults().timestamp_clock_id();
    }
    if (p.has_clock_snapshot()) {
      const auto& snapshot = p.clock_snapshot();
      const uint32_t primary =
          snapshot.has_primary_trace_clock()
              ? static_cast<uint32_t>(snapshot.primary_trace_clock())
              : static_cast<uint32_t>(perfetto::protos::BUILTIN_CLOCK_BOOTTIME);
      int64_t primary_ns = -1;
      for (const auto& c : snapshot.clocks()) {
        if (c.clock_id() == primary) primary_ns = static_cast<int64_t>(c.timestamp());
      }
      if (primary_ns < 0) return absl::DataLossError("a clock snapshot without the primary clock");
      for (const auto& c : snapshot.clocks()) {
        const uint64_t unit = c.unit_multiplier_ns() != 0 ? c.unit_multiplier_ns() : 1;
        const int64_t offset = primary_ns - static_cast<int64_t>(c.timestamp() * unit);
        if (c.clock_id() >= 64) {
          seq.clocks[c.clock_id()] = {c.timestamp(), unit, offset, c.is_incremental()};
        } else {
          builtin_to_primary[c.clock_id()] = offset;
        }
      }
      out.times.push_back(p.has_timestamp() ? p.timestamp() : 0);  // on the primary, here
      continue;
    }
    if (!p.has_timestamp()) {
      out.times.push_back(0);
      continue;
    }
    const uint32_t clock_id =
        p.has_timestamp_clock_id() ? p.timestamp_clock_id() : seq.default_clock;
    if (clock_id >= 64) {
      auto it = seq.clocks.find(clock_id);
      if (it == seq.clocks.end()) {
        return absl::DataLossError(absl::StrCat("timestamp on undeclared clock ", clock_id));
      }
      SequenceClocks::Clock& c = it->second;
      c.reading = c.incremental ? c.reading + p.timestamp() : p.timestamp();
      out.times.push_back(
          static_cast<uint64_t>(static_cast<int64_t>(c.reading * c.unit_ns) + c.to_primary));
    } else {
      auto it = builtin_to_primary.find(clock_id);
      if (it == builtin_to_primary.end()) {
        return absl::DataLossError(
            absl::StrCat("timestamp on clock ", clock_id, " with no snapshot to convert it"));
      }
      out.times.push_back(static_cast<uint64_t>(static_cast<int64_t>(p.timestamp()) + it->second));
    }
    if (p.has_track_event() &&
        p.track_event().type() == perfetto::protos::TrackEvent::TYPE_COUNTER) {
      out.counters[p.track_event().track_uuid()].emplace_back(out.times.back(),
                                                             p.track_event().counter_value());
    }
  }
  return out;
}

}  // namespace nrtprof::daemon
