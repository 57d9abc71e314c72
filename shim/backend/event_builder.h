// Turns the records the hot path wrote (record.h) into nrtprof.Events, off the program's
// threads: names interned, stacks interned and symbolized, and each tensor call given the
// name its tensor was allocated with (the record carries only the handle).
//
// Not thread-safe: the flusher thread owns it, with the tables (which must outlive it).
#ifndef NRTPROF_SHIM_BACKEND_EVENT_BUILDER_H_
#define NRTPROF_SHIM_BACKEND_EVENT_BUILDER_H_

#include <cstdint>
#include <unordered_map>

#include "shim/backend/proto_lite/nrtprof.pb.h"
#include "shim/preload/record.h"
#include "shim/backend/stack_table.h"
#include "shim/backend/string_table.h"
#include "shim/preload/tick_clock.h"

namespace nrtprof::shim {

class EventBuilder {
 public:
  static constexpr size_t kMaxTrackedTensors = 1 << 20;

  EventBuilder(StringTable* strings, StackTable* stacks);
  EventBuilder(const EventBuilder&) = delete;
  EventBuilder& operator=(const EventBuilder&) = delete;

  // `tid`: the thread whose ring held the record; `clock` turns its ticks into nanoseconds.
  void Build(const Record& record, uint32_t tid, const TickConverter& clock,
             nrtprof::Event* event);

 private:
  uint32_t RecordNameIid(const Record& record);
  void BuildApiCall(const Record& record, nrtprof::Event* event);

  StringTable* const strings_;
  StackTable* const stacks_;
  uint32_t api_name_iids_[kNumApiFunctions] = {};
  std::unordered_map<uint64_t, uint32_t> tensor_names_;  // live tensor handle -> name iid
};

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_BACKEND_EVENT_BUILDER_H_
