// summary.json's writer, for summary.cc's FormatSummary (the reader, ParseSummaryJson, is
// declared in summary.h). Internal to the summary library.
#ifndef NRTPROF_TRACE_SUMMARY_JSON_H_
#define NRTPROF_TRACE_SUMMARY_JSON_H_

#include <string>
#include <vector>

#include "trace/summary.h"

namespace nrtprof::daemon {

// The summary and its rows, in the order given, as summary.json.
std::string FormatJson(const Summary& s, const std::vector<SummaryRow>& rows);

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_SUMMARY_JSON_H_
