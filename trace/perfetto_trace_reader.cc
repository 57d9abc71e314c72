#include "trace/perfetto_trace_reader.h"

#include <libdeflate.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <new>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "trace/pftrace_wire.h"

namespace nrtprof::daemon {
namespace {

namespace pb = perfetto::protos;
using pb::TracePacket;
using pftrace::PacketFields;

// The packets' bytes are kept in blocks of this much (a bundle inflates to about 256 KiB):
// few allocations, and no copy of an inflated bundle.
constexpr size_t kBlockBytes = size_t{16} << 20;
// An inflated bundle is tried in what is left of a block only if at least this much is.
constexpr size_t kMinRoom = size_t{1} << 20;

// Where the packets' bytes go: the inflated bundles and copies of the file's own packets, in
// blocks that the ReadTrace keeps.
class PacketStore {
 public:
  explicit PacketStore(ReadTrace* out) : out_(out) {}
  PacketStore(const PacketStore&) = delete;
  PacketStore& operator=(const PacketStore&) = delete;
  ~PacketStore() { libdeflate_free_decompressor(inflater_); }

  // A copy of `bytes`.
  std::string_view Copy(std::string_view bytes) {
    char* to = Room(bytes.size());
    if (!bytes.empty()) memcpy(to, bytes.data(), bytes.size());
    used_ += bytes.size();
    return std::string_view(to, bytes.size());
  }

  // A bundle inflated (a zlib stream, as Perfetto writes compressed_packets; bytes after its
  // end are ignored, as zlib's inflate ignores them).
  absl::StatusOr<std::string_view> Inflate(std::string_view in) {
    if (inflater_ == nullptr) inflater_ = libdeflate_alloc_decompressor();
    if (inflater_ == nullptr) return absl::ResourceExhaustedError("no memory to inflate");
    size_t room = left() >= kMinRoom ? left() : std::max(kBlockBytes, in.size() * 4);
    for (;;) {
      char* to = Room(room);
      size_t in_used = 0, out_size = 0;
      const libdeflate_result r = libdeflate_zlib_decompress_ex(
          inflater_, in.data(), in.size(), to, left(), &in_used, &out_size);
      if (r == LIBDEFLATE_SUCCESS) {
        used_ += out_size;
        return std::string_view(to, out_size);
      }
      if (r != LIBDEFLATE_INSUFFICIENT_SPACE) {
        return absl::DataLossError("a compressed_packets bundle is corrupt");
      }
      // Deflate makes at most about 1032 bytes of 1: more room, in a block of its own.
      if (left() >= in.size() * 1100 + 1024) {
        return absl::DataLossError("a compressed_packets bundle is corrupt");
      }
      room = std::max(kBlockBytes, left() * 2);
      block_size_ = 0;  // the next Room starts a block
      used_ = 0;
    }
  }

 private:
  size_t left() const { return block_size_ - used_; }

  // At least n bytes at the end of the current block, or of a new one. A block is huge pages
  // (huge_page_allocator.h): filling 4 KiB pages one fault at a time was a tenth of the read.
  char* Room(size_t n) {
    if (left() < n) {
      const size_t size = RoundUpToHugePages(std::max(kBlockBytes, n));
      char* bytes = static_cast<char*>(AllocateHugePages(size));
      if (bytes == nullptr) throw std::bad_alloc();
      std::shared_ptr<char[]> block(bytes, [size](char* b) { FreeHugePages(b, size); });
      block_ = bytes;
      block_size_ = size;
      used_ = 0;
      out_->buffers.push_back(std::move(block));
    }
    return block_ + used_;
  }

  ReadTrace* out_;
  libdeflate_decompressor* inflater_ = nullptr;
  char* block_ = nullptr;
  size_t block_size_ = 0;
  size_t used_ = 0;
};

// The clocks of one packet sequence, as ClockSnapshots declared them.
struct SequenceClocks {
  struct Clock {
    uint32_t id = 0;
    uint64_t reading = 0;  // the clock's current value, in its unit
    uint64_t unit_ns = 1;
    int64_t to_primary = 0;  // primary = reading * unit + to_primary
    bool incremental = false;
  };
  std::vector<Clock> clocks;  // a sequence declares one or two
  uint32_t default_clock = 0;

  Clock* Find(uint32_t id) {
    for (Clock& c : clocks) {
      if (c.id == id) return &c;
    }
    return nullptr;
  }
};

// Each packet's time, from the clocks its sequence declared: the reader's second half, packet
// by packet in the file's order.
class Clocks {
 public:
  explicit Clocks(ReadTrace* out) : out_(out) { builtin_set_.fill(false); }

  absl::Status Add(std::string_view bytes, const PacketFields& p) {
    SequenceClocks& seq = Sequence(p.sequence_id);
    if (p.sequence_flags & TracePacket::SEQ_INCREMENTAL_STATE_CLEARED) seq = SequenceClocks();
    if (p.trace_packet_defaults.present()) {
      pb::TracePacketDefaults defaults;
      if (!pftrace::ParseOccurrences(bytes, TracePacket::kTracePacketDefaultsFieldNumber,
                                     p.trace_packet_defaults, &defaults)) {
        return absl::DataLossError("a packet's defaults are not TracePacketDefaults");
      }
      seq.default_clock = defaults.timestamp_clock_id();
    }
    if (p.clock_snapshot.present()) {
      pb::ClockSnapshot snapshot;
      if (!pftrace::ParseOccurrences(bytes, TracePacket::kClockSnapshotFieldNumber,
                                     p.clock_snapshot, &snapshot)) {
        return absl::DataLossError("a clock snapshot is not a ClockSnapshot");
      }
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
          SequenceClocks::Clock* clock = seq.Find(c.clock_id());
          if (clock == nullptr) clock = &seq.clocks.emplace_back();
          *clock = {c.clock_id(), c.timestamp(), unit, offset, c.is_incremental()};
        } else {
          builtin_to_primary_[c.clock_id()] = offset;
          builtin_set_[c.clock_id()] = true;
        }
      }
      out_->times.push_back(p.has_timestamp ? p.timestamp : 0);  // on the primary, here
      return absl::OkStatus();
    }
    if (!p.has_timestamp) {
      out_->times.push_back(0);
      return absl::OkStatus();
    }
    const uint32_t clock_id = p.has_timestamp_clock_id ? p.timestamp_clock_id : seq.default_clock;
    if (clock_id >= 64) {
      SequenceClocks::Clock* c = seq.Find(clock_id);
      if (c == nullptr) {
        return absl::DataLossError(absl::StrCat("timestamp on undeclared clock ", clock_id));
      }
      c->reading = c->incremental ? c->reading + p.timestamp : p.timestamp;
      out_->times.push_back(
          static_cast<uint64_t>(static_cast<int64_t>(c->reading * c->unit_ns) + c->to_primary));
    } else {
      if (!builtin_set_[clock_id]) {
        return absl::DataLossError(
            absl::StrCat("timestamp on clock ", clock_id, " with no snapshot to convert it"));
      }
      out_->times.push_back(
          static_cast<uint64_t>(static_cast<int64_t>(p.timestamp) + builtin_to_primary_[clock_id]));
    }
    if (p.track_event.present()) {
      pftrace::EventFields e;
      if (!ReadEvent(bytes, p, &e)) return absl::DataLossError("a track event is not a TrackEvent");
      if (e.type == pb::TrackEvent::TYPE_COUNTER) {
        out_->counters[e.track_uuid].emplace_back(out_->times.back(), e.counter_value);
      } else if (e.type == pb::TrackEvent::TYPE_SLICE_BEGIN) {
        if (begun_ == nullptr || e.track_uuid != begun_uuid_) {
          begun_uuid_ = e.track_uuid;
          begun_ = &out_->slices_begun[e.track_uuid];  // a map's elements stay put
        }
        ++*begun_;
      }
    }
    return absl::OkStatus();
  }

 private:
  // The event's own fields (its annotations framed only), every occurrence merged.
  static bool ReadEvent(std::string_view bytes, const PacketFields& p, pftrace::EventFields* e) {
    std::vector<pftrace::Annotation>* none = nullptr;
    if (p.track_event.count == 1) return pftrace::ReadEventFields(p.track_event.first, e, none);
    bool ok = true;
    pftrace::ForEachOccurrence(bytes, TracePacket::kTrackEventFieldNumber,
                               [&](std::string_view b) {
                                 ok = ok && pftrace::ReadEventFields(b, e, none);
                               });
    return ok;
  }

  // The sequence's clocks, and the sequence noted among the trace's.
  SequenceClocks& Sequence(uint32_t id) {
    if (last_ != nullptr && id == last_id_) return *last_;
    if (last_ == nullptr || id != last_id_) {
      out_->sequence_runs.emplace_back(out_->times.size(), id);
    }
    auto it = sequences_.try_emplace(id).first;
    last_id_ = id;
    last_ = &it->second;
    return *last_;
  }

  ReadTrace* out_;
  uint64_t begun_uuid_ = 0;  // the track of the last slice begun, and its count
  size_t* begun_ = nullptr;
  std::map<uint32_t, SequenceClocks> sequences_;  // its nodes stay put
  uint32_t last_id_ = 0;
  SequenceClocks* last_ = nullptr;
  // Builtin clock -> offset to the primary, for the clocks a snapshot gave.
  std::array<int64_t, 64> builtin_to_primary_{};
  std::array<bool, 64> builtin_set_;
};

// `messages`: each packet parsed into read->trace too (ReadPerfettoTrace).
absl::StatusOr<ReadTrace> Read(std::string_view bytes, bool messages) {
  ReadTrace out;
  PacketStore store(&out);
  // The file's own records first, all of them, as protobuf parses the whole Trace before
  // anything is made of it: a bundle's bytes, or a packet.
  struct Record {
    std::string_view bytes;
    bool bundle;
  };
  std::vector<Record> records;
  {
    WireReader r(bytes.data(), bytes.data() + bytes.size());
    uint32_t field = 0, type = 0;
    bool ok = true;
    PacketFields p;
    while (pftrace::NextField(&r, &field, &type, &ok)) {
      if (field != pb::Trace::kPacketFieldNumber || type != kLengthDelimited) {
        if (!pftrace::SkipField(&r, field, type)) return absl::DataLossError("not a Perfetto trace");
        continue;
      }
      const char* b = nullptr;
      const char* e = nullptr;
      if (!r.Bytes(&b, &e) || !pftrace::ReadPacketFields(std::string_view(b, e - b), &p)) {
        return absl::DataLossError("not a Perfetto trace");
      }
      if (p.has_compressed_packets) {
        records.push_back({p.compressed_packets, true});
      } else {
        records.push_back({std::string_view(b, static_cast<size_t>(e - b)), false});
      }
    }
    if (!ok) return absl::DataLossError("not a Perfetto trace");
  }

  // Room for the packets made as the records are read: as many more as the records read so
  // far had for their bytes, and a quarter more. What is not used is address space only.
  size_t record_bytes = 0;
  for (const Record& record : records) record_bytes += record.bytes.size();
  size_t bytes_read = 0;
  auto grow = [&] {
    const size_t n = out.times.size();
    size_t want = bytes_read == 0 ? record_bytes / 16
                                  : static_cast<size_t>(static_cast<double>(n) * record_bytes /
                                                        bytes_read * 1.25);
    want = std::max({want, 2 * n, size_t{1024}});
    out.times.reserve(want);
    if (!messages) out.packet_bytes.reserve(want);
  };

  Clocks clocks(&out);
  // A bundle's errors come before a timestamp's, as they did when every bundle was inflated
  // before any time was read: the first timestamp error waits for the end.
  absl::Status time_error;
  PacketFields p;
  auto add = [&](std::string_view packet, bool in_bundle) -> absl::Status {
    if (!pftrace::ReadPacketFields(packet, &p)) {
      return absl::DataLossError(in_bundle ? "a compressed_packets bundle does not hold packets"
                                           : "not a Perfetto trace");
    }
    if (out.times.size() == out.times.capacity()) grow();
    if (p.track_descriptor.present()) out.track_descriptor_packets.push_back(out.times.size());
    if (messages && !out.trace.add_packet()->ParseFromArray(packet.data(),
                                                            static_cast<int>(packet.size()))) {
      return absl::DataLossError(in_bundle ? "a compressed_packets bundle does not hold packets"
                                           : "not a Perfetto trace");
    }
    if (!messages) out.packet_bytes.push_back(packet);
    if (time_error.ok()) {
      time_error = clocks.Add(packet, p);
    } else {
      out.times.push_back(0);
    }
    return absl::OkStatus();
  };
  for (const Record& record : records) {
    if (!record.bundle) {
      if (absl::Status s = add(store.Copy(record.bytes), false); !s.ok()) return s;
      bytes_read += record.bytes.size();
      continue;
    }
    absl::StatusOr<std::string_view> inflated = store.Inflate(record.bytes);
    if (!inflated.ok()) return inflated.status();
    WireReader r(inflated->data(), inflated->data() + inflated->size());
    uint32_t field = 0, type = 0;
    bool ok = true;
    while (pftrace::NextField(&r, &field, &type, &ok)) {
      const char* b = nullptr;
      const char* e = nullptr;
      if (field != pb::Trace::kPacketFieldNumber || type != kLengthDelimited) {
        ok = pftrace::SkipField(&r, field, type);
      } else if (!r.Bytes(&b, &e)) {
        ok = false;
      } else if (absl::Status s = add(std::string_view(b, static_cast<size_t>(e - b)), true);
                 !s.ok()) {
        return s;
      }
      if (!ok) break;
    }
    if (!ok) return absl::DataLossError("a compressed_packets bundle does not hold packets");
    ++out.bundles;
    bytes_read += record.bytes.size();
  }
  if (!time_error.ok()) return time_error;
  if (messages) {
    out.buffers.clear();  // the messages have it all
    out.buffers.shrink_to_fit();
    out.track_descriptor_packets.clear();
  }
  return out;
}

}  // namespace

absl::StatusOr<ReadTrace> ReadPerfettoTrace(std::string_view bytes) { return Read(bytes, true); }

absl::StatusOr<ReadTrace> ReadPerfettoPackets(std::string_view bytes) {
  return Read(bytes, false);
}

absl::StatusOr<ReadTrace> WithMessages(const ReadTrace& read, std::optional<uint32_t> only) {
  ReadTrace out;
  if (read.packet_bytes.empty()) {
    for (int i = 0; i < read.trace.packet_size(); ++i) {
      const perfetto::protos::TracePacket& p = read.trace.packet(i);
      if (only.has_value() && p.trusted_packet_sequence_id() != *only) continue;
      *out.trace.add_packet() = p;
      out.times.push_back(static_cast<size_t>(i) < read.times.size() ? read.times[i] : 0);
    }
    if (!only.has_value()) {
      out.sequence_runs = read.sequence_runs;
      out.bundles = read.bundles;
      out.slices_begun = read.slices_begun;
      out.counters = read.counters;
    }
    return out;
  }
  if (!only.has_value()) {
    out.times = read.times;
    out.sequence_runs = read.sequence_runs;
    out.bundles = read.bundles;
    out.slices_begun = read.slices_begun;
    out.counters = read.counters;
    out.trace.mutable_packet()->Reserve(static_cast<int>(read.packet_bytes.size()));
  }
  for (size_t run = 0; run < read.sequence_runs.size(); ++run) {
    const auto [first, sequence] = read.sequence_runs[run];
    if (only.has_value() && sequence != *only) continue;
    const size_t end = run + 1 < read.sequence_runs.size() ? read.sequence_runs[run + 1].first
                                                           : read.packet_bytes.size();
    for (size_t i = first; i < end && i < read.packet_bytes.size(); ++i) {
      const std::string_view b = read.packet_bytes[i];
      if (!out.trace.add_packet()->ParseFromArray(b.data(), static_cast<int>(b.size()))) {
        return absl::DataLossError(absl::StrCat("packet ", i, " is not a TracePacket"));
      }
      if (only.has_value()) out.times.push_back(i < read.times.size() ? read.times[i] : 0);
    }
  }
  return out;
}

}  // namespace nrtprof::daemon
