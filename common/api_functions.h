// The libnrt functions nrtprof interposes, in one list: the shim's enum, names and wrapper
// table (shim/preload/record.h, shim/preload/interpose.cc) and the daemon's view of a call
// (nrtprof.ApiFunction on the wire, daemon/ingest.cc) are all made from it.
//
// X(ENUMERATOR, function, WIRE_ENUMERATOR, wire_number):
//   ENUMERATOR       the shim's ApiFunction (its order is the ring's and the wrapper table's)
//   function         the exported C name
//   WIRE_ENUMERATOR  the nrtprof.ApiFunction value the shim sends with the call's event
//   wire_number      its number: fixed forever, as a proto field number is (a static_assert
//                    where the proto is compiled ties the two: shim/backend/event_builder.cc)
//
// The explicit async API (nrt/nrt_async.h, nrta_*) is recorded like the rest, except the two
// completion queries, which programs poll: only a poll that saw something new is recorded
// (shim/preload/interpose.cc), the others are counted on the next recorded one.
//
// Recorded functions are runtime-lane events; arbitrated ones are only shared between the
// program and the profiler (the system trace, device profiles) and never recorded. A new
// function goes at the end of its list, with the next unused wire number.
#ifndef NRTPROF_COMMON_API_FUNCTIONS_H_
#define NRTPROF_COMMON_API_FUNCTIONS_H_

#define NRTPROF_RECORDED_API_FUNCTIONS(X)                                                  \
  X(kNrtInit, nrt_init, API_NRT_INIT, 1)                                                   \
  X(kNrtClose, nrt_close, API_NRT_CLOSE, 2)                                                \
  X(kNrtLoad, nrt_load, API_NRT_LOAD, 3)                                                   \
  X(kNrtUnload, nrt_unload, API_NRT_UNLOAD, 4)                                             \
  X(kNrtExecute, nrt_execute, API_NRT_EXECUTE, 5)                                          \
  X(kNrtExecuteRepeat, nrt_execute_repeat, API_NRT_EXECUTE_REPEAT, 6)                      \
  X(kNrtTensorAllocate, nrt_tensor_allocate, API_NRT_TENSOR_ALLOCATE, 7)                   \
  X(kNrtTensorAllocateEmpty, nrt_tensor_allocate_empty, API_NRT_TENSOR_ALLOCATE_EMPTY, 8)  \
  X(kNrtTensorAttachBuffer, nrt_tensor_attach_buffer, API_NRT_TENSOR_ATTACH_BUFFER, 9)     \
  X(kNrtTensorAllocateSlice, nrt_tensor_allocate_slice, API_NRT_TENSOR_ALLOCATE_SLICE, 10) \
  X(kNrtTensorFree, nrt_tensor_free, API_NRT_TENSOR_FREE, 11)                              \
  X(kNrtTensorRead, nrt_tensor_read, API_NRT_TENSOR_READ, 12)                              \
  X(kNrtTensorWrite, nrt_tensor_write, API_NRT_TENSOR_WRITE, 13)                           \
  X(kNrtTensorReadBatch, nrt_tensor_read_batch, API_NRT_TENSOR_READ_BATCH, 14)             \
  X(kNrtTensorWriteBatch, nrt_tensor_write_batch, API_NRT_TENSOR_WRITE_BATCH, 15)          \
  X(kNrtTensorCopy, nrt_tensor_copy, API_NRT_TENSOR_COPY, 16)                              \
  X(kNrtTensorMemset, nrt_tensor_memset, API_NRT_TENSOR_MEMSET, 17)                        \
  X(kNrtAllocateTensorSet, nrt_allocate_tensor_set, API_NRT_ALLOCATE_TENSOR_SET, 18)       \
  X(kNrtDestroyTensorSet, nrt_destroy_tensor_set, API_NRT_DESTROY_TENSOR_SET, 19)          \
  X(kNrtAddTensorToTensorSet, nrt_add_tensor_to_tensor_set, API_NRT_ADD_TENSOR_TO_TENSOR_SET, 20) \
  X(kNrtLoadCollectives, nrt_load_collectives, API_NRT_LOAD_COLLECTIVES, 27)                \
  X(kNrtaTensorWrite, nrta_tensor_write, API_NRTA_TENSOR_WRITE, 28)                         \
  X(kNrtaTensorRead, nrta_tensor_read, API_NRTA_TENSOR_READ, 29)                            \
  X(kNrtaTensorCopy, nrta_tensor_copy, API_NRTA_TENSOR_COPY, 30)                            \
  X(kNrtaExecuteSchedule, nrta_execute_schedule, API_NRTA_EXECUTE_SCHEDULE, 31)             \
  X(kNrtaCcPrepare, nrta_cc_prepare, API_NRTA_CC_PREPARE, 32)                               \
  X(kNrtaCcSchedule, nrta_cc_schedule, API_NRTA_CC_SCHEDULE, 33)                            \
  X(kNrtaIsCompleted, nrta_is_completed, API_NRTA_IS_COMPLETED, 34)                         \
  X(kNrtaGetSequence, nrta_get_sequence, API_NRTA_GET_SEQUENCE, 35)                         \
  X(kNrtaEventRegisterSeqIdCompletion, nrta_event_register_seq_id_completion,               \
    API_NRTA_EVENT_REGISTER_SEQ_ID_COMPLETION, 36)                                          \
  X(kNrtaEventRegisterXuCompletion, nrta_event_register_xu_completion,                      \
    API_NRTA_EVENT_REGISTER_XU_COMPLETION, 37)

#define NRTPROF_ARBITRATED_API_FUNCTIONS(X)                                   \
  X(kNrtSysTraceStart, nrt_sys_trace_start, API_NRT_SYS_TRACE_START, 21)      \
  X(kNrtSysTraceStop, nrt_sys_trace_stop, API_NRT_SYS_TRACE_STOP, 22)         \
  X(kNrtSysTraceFetchEvents, nrt_sys_trace_fetch_events, API_NRT_SYS_TRACE_FETCH_EVENTS, 23) \
  X(kNrtSysTraceBufferFree, nrt_sys_trace_buffer_free, API_NRT_SYS_TRACE_BUFFER_FREE, 24) \
  X(kNrtProfileStart, nrt_profile_start, API_NRT_PROFILE_START, 25)           \
  X(kNrtProfileStop, nrt_profile_stop, API_NRT_PROFILE_STOP, 26)

#endif  // NRTPROF_COMMON_API_FUNCTIONS_H_
