#include "shim/backend/event_builder.h"

#include <string_view>

#include "shim/backend/utf8.h"

namespace nrtprof::shim {

EventBuilder::EventBuilder(StringTable* strings, StackTable* stacks)
    : strings_(strings), stacks_(stacks) {}

uint32_t EventBuilder::RecordNameIid(const Record& record) {
  std::string_view name(record.name(), record.name_len);
  if (record.flags & kRecordNameTruncated) name = TrimIncompleteUtf8Tail(name);
  return name.empty() ? 0 : strings_->Intern(name);
}

void EventBuilder::Build(const Record& record, uint32_t tid, const TickConverter& clock,
                         nrtprof::Event* event) {
  // TickConverter::DurationNs without converting the start a second time.
  const uint64_t start_ns = clock.ToNs(record.start_ticks);
  const uint64_t end_ns =
      record.end_ticks > record.start_ticks ? clock.ToNs(record.end_ticks) : start_ns;
  event->set_start_ns(start_ns);
  event->set_duration_ns(end_ns > start_ns ? end_ns - start_ns : 0);
  event->set_tid(tid);
  event->set_nc_idx(record.nc_idx);
  if (record.kind == RecordKind::kRange) {
    event->set_kind(nrtprof::EVENT_RANGE);
    event->set_name_iid(RecordNameIid(record));
    event->set_depth(record.depth);
    return;
  }
  BuildApiCall(record, event);
}

// The one list's wire numbers are the proto's.
#define NRTPROF_CHECK_WIRE(enumerator, function, wire, number) \
  static_assert(nrtprof::wire == number, #function " has another number on the wire");
NRTPROF_RECORDED_API_FUNCTIONS(NRTPROF_CHECK_WIRE)
NRTPROF_ARBITRATED_API_FUNCTIONS(NRTPROF_CHECK_WIRE)
#undef NRTPROF_CHECK_WIRE

void EventBuilder::BuildApiCall(const Record& record, nrtprof::Event* event) {
  event->set_kind(nrtprof::EVENT_API_CALL);
  const unsigned api = record.api < kNumApiFunctions ? record.api : 0;
  if (api_name_iids_[api] == 0) api_name_iids_[api] = strings_->Intern(ApiFunctionName(api));
  event->set_name_iid(api_name_iids_[api]);
  event->set_function(static_cast<nrtprof::ApiFunction>(ApiFunctionWireNumber(api)));
  event->set_correlation_id(record.correlation_id);
  event->set_status(record.status);
  event->set_bytes(record.bytes);
  // The record's two handle fields, by call (record.h).
  uint64_t tensor = 0;
  switch (api) {
    case kNrtLoad:
    case kNrtLoadCollectives:
    case kNrtUnload:
      event->set_model_handle(record.handle);
      break;
    case kNrtExecute:
    case kNrtExecuteRepeat:
      event->set_model_handle(record.handle);
      event->set_repeat(static_cast<uint32_t>(record.aux));
      break;
    case kNrtTensorAllocate:
      tensor = record.handle;
      event->set_placement(static_cast<int32_t>(static_cast<int64_t>(record.aux)));
      break;
    case kNrtTensorAllocateSlice:
    case kNrtTensorCopy:
      tensor = record.handle;
      event->set_tensor_handle2(record.aux);
      break;
    case kNrtaExecuteSchedule:
      event->set_model_handle(record.handle);
      event->set_repeat(1);
      event->set_nrta_seq(record.aux);
      break;
    case kNrtaTensorWrite:
    case kNrtaTensorRead:
    case kNrtaTensorCopy:
      tensor = record.handle;
      event->set_nrta_seq(record.aux);
      break;
    case kNrtaCcSchedule:
    case kNrtaEventRegisterSeqIdCompletion:
      event->set_nrta_seq(record.aux);
      break;
    case kNrtaIsCompleted:
    case kNrtaGetSequence:
      event->set_nrta_seq(record.aux);
      event->set_polls(record.bytes);
      event->set_bytes(0);
      if (record.flags & kRecordPollsOnly) event->set_polls_only(true);
      break;
    case kNrtaCcPrepare:
    case kNrtaEventRegisterXuCompletion:
      break;
    default:
      tensor = record.handle;
      break;
  }
  event->set_tensor_handle(tensor);
  if (record.stack_depth > 0) {
    event->set_stack_iid(stacks_->Intern(record.frames(), record.stack_depth));
  }

  switch (api) {
    case kNrtTensorAllocate:
    case kNrtTensorAllocateEmpty:
    case kNrtTensorAllocateSlice: {
      const uint32_t name = RecordNameIid(record);
      event->set_tensor_name_iid(name);
      if (record.status == 0 && tensor != 0 && name != 0 &&
          tensor_names_.size() < kMaxTrackedTensors) {
        tensor_names_[tensor] = name;
      }
      break;
    }
    case kNrtAddTensorToTensorSet: {
      // The tensor's own name if known, else the name it takes in the set.
      auto it = tensor_names_.find(tensor);
      event->set_tensor_name_iid(it != tensor_names_.end() ? it->second : RecordNameIid(record));
      break;
    }
    case kNrtTensorFree: {
      auto it = tensor_names_.find(tensor);
      if (it != tensor_names_.end()) {
        event->set_tensor_name_iid(it->second);
        tensor_names_.erase(it);
      }
      break;
    }
    case kNrtClose:
      tensor_names_.clear();  // the runtime frees every tensor
      break;
    default:
      if (tensor != 0) {
        auto it = tensor_names_.find(tensor);
        if (it != tensor_names_.end()) event->set_tensor_name_iid(it->second);
      }
      break;
  }
}

}  // namespace nrtprof::shim
