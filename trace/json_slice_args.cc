#include "trace/json_slice_args.h"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "common/json_text.h"
#include "trace/api_function.h"
#include "trace/async_requests.h"
#include "trace/json_out.h"
#include "trace/trace_model.h"

namespace nrtprof::daemon {
namespace json_out {
namespace {

// Every argument SliceArgs gives, its name and value, fits in this many bytes but for its
// string's text: at most 16 arguments, each a comma, a quoted name of at most 16 bytes and a
// colon, and a value of at most 23.
constexpr size_t kArgsFixedRoom = 16 * 48 + 16;

size_t NameRoom(const Name& name) { return name.empty() ? 0 : JsonStringRoom(name.str()); }

// ,"KEY":VALUE. The comma leads each argument: PutSliceArgs turns the first one into the
// object's brace.
template <size_t N>
char* Uint(const char (&key)[N], uint64_t v, char* p) {
  return PutJsonUint(v, PutLiteral(key, p));
}
template <size_t N>
char* Int(const char (&key)[N], int64_t v, char* p) {
  return PutJsonInt(v, PutLiteral(key, p));
}
template <size_t N>
char* String(const char (&key)[N], std::string_view v, char* p) {
  return PutJsonString(v, PutLiteral(key, p));
}

// CallArgs (trace_lanes.cc).
char* PutCallArgs(const ApiCall& c, std::string* text, char* p) {
  p = Int(",\"status\":", c.status, p);
  p = Uint(",\"correlation_id\":", c.correlation_id, p);
  if (c.bytes != 0) p = Uint(",\"bytes\":", c.bytes, p);
  if (!c.model_name.empty()) p = String(",\"model\":", c.model_name.str(), p);
  if (!c.tensor_name.empty()) p = String(",\"tensor\":", c.tensor_name.str(), p);
  if (c.nc_idx >= 0) p = Int(",\"nc\":", c.nc_idx, p);
  if (c.repeat != 0) p = Uint(",\"repeat\":", c.repeat, p);
  if (c.nrta_seq != 0) {
    p = Uint(",\"nrta_seq\":", c.nrta_seq, p);
    p = Uint(",\"queue\":", c.nrta_seq >> kNrtaQueueShift, p);
    p = Uint(",\"seq\":", c.nrta_seq & kNrtaSeqMask, p);
  }
  if (IsCompletionPoll(c.function)) p = Uint(",\"polls\":", c.polls, p);
  if (!c.stack.empty()) {
    *text = absl::StrJoin(c.stack, " <- ");
    p = String(",\"stack\":", *text, p);
  }
  return p;
}

// DeviceArgs (trace_lanes.cc).
char* PutDeviceArgs(const DeviceEvent& e, const ApiCall* scheduled_by, char* p) {
  const bool child = e.parent != 0;
  const bool dma = e.kind == DeviceEventKind::kDma;
  if (e.kind == DeviceEventKind::kCollective) {
    if (!e.model_name.empty()) p = String(",\"collective\":", e.model_name.str(), p);
    p = Uint(",\"bytes\":", e.bytes, p);
    p = Int(",\"worker_gid\":", e.worker_gid, p);
  } else {
    if (!child && !e.model_name.empty()) p = String(",\"model\":", e.model_name.str(), p);
    if (dma ? e.exec_id != 0 : !child) p = Uint(",\"exec_id\":", e.exec_id, p);
  }
  if (!e.engine.empty()) p = String(",\"engine\":", e.engine.str(), p);
  if (dma) p = Uint(",\"bytes\":", e.bytes, p);
  if (!e.tensor_name.empty()) p = String(",\"tensor\":", e.tensor_name.str(), p);
  if (!child && e.correlation_id != 0) p = Uint(",\"correlation_id\":", e.correlation_id, p);
  if (!child && e.submitting_tid != 0) p = Uint(",\"submitting_tid\":", e.submitting_tid, p);
  if (!child && e.nrta_seq != 0) {
    p = Uint(",\"nrta_seq\":", e.nrta_seq, p);
    if (scheduled_by != nullptr &&
        !(e.kind == DeviceEventKind::kCollective && e.name == kCcRunning)) {
      const uint64_t start = scheduled_by->start_ns;
      const uint64_t duration = scheduled_by->duration_ns;
      const uint64_t returned = duration > UINT64_MAX - start ? UINT64_MAX : start + duration;
      p = Uint(",\"queue_wait_ns\":", e.start_ns > returned ? e.start_ns - returned : 0, p);
    }
  }
  return p;
}

// "NAME": for an argument's name, static text (SliceArg::name): each name's text is made once
// and kept by the name's address.
char* PutArgName(const char* name, char* p) {
  struct Made {
    const char* name = nullptr;
    std::string text;
  };
  thread_local std::array<Made, 64> made;
  Made& m = made[(reinterpret_cast<uintptr_t>(name) >> 3) % made.size()];
  if (m.name != name) {
    m.name = name;
    m.text.clear();
    AppendJsonString(name, &m.text);
    m.text.push_back(':');
  }
  CopySmall(p, m.text.data(), m.text.size());
  return p + m.text.size();
}

}  // namespace

size_t SliceArgsRoom(const LaneSlice& slice) {
  if (slice.device != nullptr) {
    const DeviceEvent& e = *slice.device;
    return kArgsFixedRoom + NameRoom(e.model_name) + NameRoom(e.engine) + NameRoom(e.tensor_name);
  }
  if (slice.call != nullptr) {
    const ApiCall& c = *slice.call;
    size_t stack = 0;
    for (const std::string& frame : c.stack) stack += frame.size() + 4;  // and " <- "
    return kArgsFixedRoom + NameRoom(c.model_name) + NameRoom(c.tensor_name) + 6 * stack + 2;
  }
  return 0;
}

char* PutSliceArgs(const LaneSlice& slice, std::string* text, char* p) {
  char* const brace = PutLiteral(",\"args\":", p);
  char* q = brace;
  if (slice.device != nullptr) {
    const DeviceEvent& e = *slice.device;
    q = PutDeviceArgs(e, slice.call, q);
    // SliceArgs: a slice cut to nest in its lane keeps the work's own duration (and how far
    // its start was moved, if it was).
    if (slice.end_ns - slice.start_ns != e.duration_ns) {
      q = Uint(",\"duration_ns\":", e.duration_ns, q);
      if (slice.start_ns > e.start_ns) q = Uint(",\"start_moved_ns\":", slice.start_ns - e.start_ns, q);
    }
  } else if (slice.call != nullptr) {
    q = PutCallArgs(*slice.call, text, q);
  }
  if (q == brace) return p;  // no arguments: no "args"
  *brace = '{';              // the first argument's comma
  *q++ = '}';
  return q;
}

size_t ArgsRoom(const std::vector<SliceArg>& args) {
  size_t n = 16;
  for (const SliceArg& a : args) {
    n += JsonStringRoom(a.name) + 2 +
         (a.type == SliceArg::Type::kString ? JsonStringRoom(a.string_value) : 24);
  }
  return n;
}

char* PutArgs(const std::vector<SliceArg>& args, char* p) {
  p = PutLiteral(",\"args\":{", p);
  bool first = true;
  for (const SliceArg& a : args) {
    if (!first) *p++ = ',';
    first = false;
    p = PutArgName(a.name, p);
    switch (a.type) {
      case SliceArg::Type::kString:
        p = PutJsonString(a.string_value, p);
        break;
      case SliceArg::Type::kUint:
        p = PutJsonUint(a.uint_value, p);
        break;
      case SliceArg::Type::kInt:
        p = PutJsonInt(a.int_value, p);
        break;
    }
  }
  *p++ = '}';
  return p;
}

}  // namespace json_out
}  // namespace nrtprof::daemon
