// A slice's arguments written as trace.json's ,"args":{...} straight from the call or device
// event it draws: the text PutArgs makes of SliceArgs (trace_lanes.h), the same arguments in the
// same order, without the vector of SliceArg made and read back for each of a capture's millions
// of slices (that was a third of the JSON writer's time). chrome_json_writer_test checks the
// two agree over every argument SliceArgs can give.
//
// Thread-safe: pure functions.
#ifndef NRTPROF_TRACE_JSON_SLICE_ARGS_H_
#define NRTPROF_TRACE_JSON_SLICE_ARGS_H_

#include <cstddef>
#include <string>
#include <vector>

#include "trace/trace_lanes.h"

namespace nrtprof::daemon {
namespace json_out {

// The most bytes PutSliceArgs writes for the slice.
size_t SliceArgsRoom(const LaneSlice& slice);

// ,"args":{"NAME":VALUE,...} of SliceArgs(slice), or nothing when it has none; *text is
// scratch (the joined call stack).
char* PutSliceArgs(const LaneSlice& slice, std::string* text, char* p);

// The most bytes PutArgs writes for `args`.
size_t ArgsRoom(const std::vector<SliceArg>& args);

// ,"args":{"NAME":VALUE,...} of `args`.
char* PutArgs(const std::vector<SliceArg>& args, char* p);

}  // namespace json_out
}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_JSON_SLICE_ARGS_H_
