// Turns the runtime's system-trace documents (nrt_sys_trace_fetch_events, in the real
// runtime's shape: shim/backend/sys_trace_reader.h) into hardware-lane events:
//
//   device_exec start + stop (per NeuronCore, in order)  -> EVENT_DEVICE_EXEC "nc_exec_running"
//                                                           (device clock, the calling thread)
//   tensor_write / tensor_read start + stop (per thread)  -> EVENT_DEVICE_DMA "dma_h2d"/"dma_d2h"
//   dmem_buf_copyin / copyout outside those spans:
//     inside an nrt_load span of its thread              -> EVENT_DEVICE_DMA "dma_model_load"
//     else                                                -> EVENT_DEVICE_DMA "dma_h2d"/"dma_d2h"
//   cc_exec_barrier / cc_running start + stop (per core,  -> EVENT_DEVICE_EXEC "cc_exec_barrier" /
//     by nrta_seq_id)                                        "cc_running" (device clock): the
//                                                           collective's nrta_seq, the rank's
//                                                           worker_gid, its cc_op as the model
//                                                           name, its size as bytes
//   timestamp_sync                                        -> DeviceClockSync
//
// Host-stamped events (tensor and memory copies: CLOCK_REALTIME) are moved to CLOCK_MONOTONIC
// here and flagged host_clock; device-stamped ones keep the device clock for the daemon to map
// through the sync points. A copy inside a tensor call is that call's own transfer and is not
// counted twice. Other event types (nrt_load and nrt_execute themselves — the shim records
// the calls —, model switches, and types it does not know) are skipped; unknown types and
// members are counted. A span's two halves may arrive in different documents: open spans are
// kept until the capture changes. Gaps in a core's nc_local_id (after the first this capture
// shows of the core) are events the runtime's ring overwrote.
//
// A document that is not a system trace in the real shape is refused whole: nothing of it is
// kept, and its events are counted as malformed (a drop reason the daemon shows).
//
// Not thread-safe: the flusher thread owns it, with the StringTable (which must outlive it).
#ifndef NRTPROF_SHIM_BACKEND_DEVICE_TRACE_H_
#define NRTPROF_SHIM_BACKEND_DEVICE_TRACE_H_

#include <time.h>

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "shim/backend/proto_lite/nrtprof.pb.h"
#include "shim/backend/string_table.h"
#include "shim/backend/sys_trace_reader.h"

namespace nrtprof::shim {

// A hardware-lane event as its wire bytes (with `encode`): what the batcher needs of it besides.
struct EncodedDeviceEvent {
  size_t end;  // in DeviceTraceOutput::encoded, where its bytes end (the previous one's: begin)
  nrtprof::EventKind kind;
  uint32_t name_iid, model_name_iid;
};

struct DeviceTraceOutput {
  // Without `encode`: the events.
  std::vector<nrtprof::Event> events;
  // With `encode` (the flusher's): each event written straight as its bytes in an EventBatch's
  // events_encoded, a field `events` (tag, length, Event) after another, the same bytes
  // protobuf writes for the Event (device_trace_test), with no Event object made: at 10,000
  // async executions a second making, encoding and destroying one took ~5% of the flusher.
  bool encode = false;
  std::string encoded;
  std::vector<EncodedDeviceEvent> encoded_events;
  std::vector<nrtprof::DeviceClockSync> clock_syncs;
  uint64_t overwritten = 0;  // newly overwritten events in this document
  uint64_t skipped = 0;      // events of a type (or phase) this shim does not know
  uint64_t malformed = 0;    // events of refused documents, and spans no clock could give

  // Empty again, its vectors' room kept for the next document.
  void Clear() {
    events.clear();
    encoded.clear();
    encoded_events.clear();
    clock_syncs.clear();
    overwritten = skipped = malformed = 0;
  }
  size_t event_count() const { return encode ? encoded_events.size() : events.size(); }
};

// (The offset of the runtime's clock to the shim's: RealtimeOffsetNs, common/clock.h.)

class DeviceTraceParser {
 public:
  explicit DeviceTraceParser(StringTable* strings) : strings_(strings) {}
  DeviceTraceParser(const DeviceTraceParser&) = delete;
  DeviceTraceParser& operator=(const DeviceTraceParser&) = delete;

  // Parses one document fetched from capture `generation` (a capture's counters and open spans
  // start afresh; generations only grow). Appends to *out. False, with a one-line *error, if
  // the document is not a system trace in the real shape; nothing but out->malformed changes
  // then.
  bool Parse(uint64_t generation, std::string_view json, DeviceTraceOutput* out,
             std::string* error);

  // Whether Parse makes anything of the runtime's events of this type (its name in the
  // document). The profiler's own capture asks the runtime for these types only: every other
  // one would cost the program's calls their recording and the flusher its parsing, for
  // nothing drawn.
  static bool UsesType(const char* name);

  uint64_t overwritten_total() const { return overwritten_total_; }
  // The most events one NeuronCore numbered (nc_local_id) in the documents parsed since the
  // last call, overwritten ones included: how full the runtime's fullest ring was by the
  // fetches (the flusher's wait between them: flusher.h).
  uint64_t TakeMostNumberedOnACore();
  uint64_t malformed_total() const { return malformed_total_; }
  uint64_t unknown_types_total() const { return stats_.unknown_types; }
  uint64_t unknown_members_total() const { return stats_.unknown_members; }

  // Tests: CLOCK_REALTIME - CLOCK_MONOTONIC, instead of reading the clocks at each document.
  void set_realtime_offset_for_testing(int64_t ns) {
    fixed_offset_ = true;
    realtime_offset_ns_ = ns;
  }

 private:
  struct OpenExec {
    uint64_t device_ns, id, thread_id, exec_id, model_id;
    uint64_t nrta_seq;  // the async request it ran, or 0
  };
  struct OpenSpan {
    SysTraceType type;
    uint64_t start_ns, id, size;
    uint32_t nc_idx;
    const char* name;  // the DMA event it becomes; null: folded into the enclosing call
    uint64_t nrta_seq;  // the async request it moved, or 0: its stop is found by this number
  };
  // A collective's barrier or running span, open on its core (several may be: one per queue).
  struct OpenCollective {
    SysTraceType type;
    uint64_t device_ns, id, thread_id, nrta_seq, size;
    int64_t worker_gid;
    uint32_t cc_op_iid;  // 0: the runtime did not say
  };
  struct ThreadSpans {
    std::vector<OpenSpan> spans;
    int loads = 0;  // open nrt_load spans
  };

  // An event the parser makes: the fields of Event it sets, all others zero. (The 64-bit
  // fields first: made for each event, it is zeroed with a few stores, not a `rep stos`.)
  struct DeviceEvent {
    uint64_t start_ns = 0, duration_ns = 0;
    uint64_t bytes = 0;
    uint64_t device_id = 0, exec_id = 0;
    uint64_t nrta_seq = 0;
    nrtprof::EventKind kind = nrtprof::EVENT_KIND_UNSPECIFIED;
    uint32_t tid = 0, name_iid = 0;
    int32_t nc_idx = 0;
    uint32_t model_name_iid = 0;
    int32_t worker_gid = 0;
    bool host_clock = false;
  };
  // Into out->events, or with out->encode, its bytes into out->encoded.
  static void Emit(const DeviceEvent& d, DeviceTraceOutput* out);

  // What Apply reads of an event, in one cache line: a document's events wait in pending_
  // until the whole document has been read (issue 38: the reader's whole record, 184 bytes,
  // copied there and read back was 6-9% of the flusher at 10,000 async executions a second).
  struct PendingEvent {
    SysTraceType type;
    SysTracePhase phase;
    bool has_clocks;  // timestamp_sync: both nc_timestamp_ns and cpu_timestamp_ns were sent
    uint32_t nc_idx;
    uint64_t id, nc_local_id, thread_id, timestamp_ns;
    uint64_t nrta_seq;  // nrta_seq_id, or 0 if the runtime sent none
    // By type: device_exec's data, timestamp_sync's, or a transfer's or collective's.
    union {
      struct {
        uint64_t exec_id, model_id;
      } exec;
      struct {
        uint64_t nc_timestamp_ns, cpu_timestamp_ns;
      } sync;
      struct {
        uint64_t size;
        int64_t worker_gid;
      } transfer;
    };
  };
  static PendingEvent Pack(const SysTraceEvent& e);

  void Apply(const PendingEvent& e, uint32_t cc_op_iid, DeviceTraceOutput* out);
  void OpenCopy(const PendingEvent& e, ThreadSpans* thread);
  void Collective(const PendingEvent& e, uint32_t cc_op_iid, DeviceTraceOutput* out);
  void CloseSpan(const PendingEvent& e, ThreadSpans* thread, DeviceTraceOutput* out);
  uint64_t ToMonotonic(uint64_t realtime_ns) const;
  // The interned id of a fixed event name, interned once.
  uint32_t NameIid(const char* name);
  bool Plausible(uint64_t start_ns, uint64_t end_ns, DeviceTraceOutput* out);

  static constexpr uint64_t kMaxSpanNs = 7ull * 24 * 3600 * 1000000000;  // the daemon's bounds
  static constexpr uint32_t kMaxNeuronCores = 4096;
  static constexpr size_t kMaxCcOps = 64;  // distinct cc_op names kept; others are left out

  StringTable* const strings_;
  uint64_t generation_ = 0;
  bool fixed_offset_ = false;
  int64_t realtime_offset_ns_ = 0;
  SysTraceReadStats stats_;
  uint64_t overwritten_total_ = 0;
  uint64_t malformed_total_ = 0;
  // Per capture.
  struct CoreNumbers {
    uint64_t next_local_id;
    uint64_t numbered = 0;  // since TakeMostNumberedOnACore
  };
  std::map<uint32_t, CoreNumbers> cores_;
  uint64_t most_numbered_ = 0;  // of the cores of earlier captures, since the last take
  std::map<uint32_t, std::deque<OpenExec>> open_execs_;
  std::map<uint32_t, std::vector<OpenCollective>> open_collectives_;  // per core
  std::map<uint64_t, ThreadSpans> threads_;
  // model_id -> name, when the runtime gives one, and its id once an execution used it (ids
  // for the life of the process: interned at first use, as each event's names are).
  struct ModelName {
    std::string name;
    uint32_t iid = 0;
  };
  std::map<uint64_t, ModelName> model_names_;
  // The interned ids of the fixed event names (dma_h2d, ...), by the literal's address.
  std::vector<std::pair<const char*, uint32_t>> name_iids_;
  // One document's events, read whole before any is applied (reused).
  std::vector<PendingEvent> pending_;
  // The model names the document gives, by model_id: into the text, or:
  std::vector<std::pair<uint64_t, std::string_view>> pending_names_;
  std::deque<std::string> decoded_names_;  // names the reader decoded from escapes
  // The collectives' op names (cc_op: "all_reduce", ...) by text, interned at first use; and
  // the one of each pending event that has one, by its index in pending_.
  using CcOpIid = std::pair<const std::string, uint32_t>;  // iid 0: not interned yet
  std::map<std::string, uint32_t, std::less<>> cc_op_iids_;
  std::vector<std::pair<size_t, CcOpIid*>> pending_cc_ops_;
};

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_BACKEND_DEVICE_TRACE_H_
