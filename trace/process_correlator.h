// One process's part of a capture correlated: the matching that correlator.h describes, for
// one process's stream (or one part of it). Correlate and CaptureCorrelator (correlator.h) call
// it for each and put the processes together; nothing else should.
//
// A pure function of its input: thread-safe.
#ifndef NRTPROF_TRACE_PROCESS_CORRELATOR_H_
#define NRTPROF_TRACE_PROCESS_CORRELATOR_H_

#include <cstdint>
#include <memory>

#include "trace/process_capture.h"
#include "trace/trace_model.h"
#include "trace/trace_name.h"

namespace nrtprof::daemon {

// `in` correlated, its ids taken from *next_id on. `drops`: what the process lost during the
// capture (ProcessDrops), given to the first of its streams (the others' add nothing but the
// daemon's correlation's own). `names` holds the text of the ProcessTrace's names (shared by
// the Trace's processes). `consume`, if not null, is `in`'s events, freed as soon as they have
// been read, so that the last step reuses their pages (huge_page_allocator.h).
ProcessTrace CorrelateProcess(const ProcessCapture& in, uint64_t* next_id,
                              const DropCounts& drops, std::shared_ptr<NameTable> names,
                              IngestedEvents* consume);

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_PROCESS_CORRELATOR_H_
