// Checks that a capture's files are what their readers can read, whatever the profiled
// program sent: used by the daemon's fuzzer on every input, and by tests of hostile input.
//
// Each returns OK or one line saying what is wrong and where. Pure functions; thread-safe.
#ifndef NRTPROF_TESTS_FUZZ_OUTPUT_CHECKS_H_
#define NRTPROF_TESTS_FUZZ_OUTPUT_CHECKS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace nrtprof::fuzz {

// Well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
absl::Status CheckUtf8(absl::string_view text);

// One JSON text as RFC 8259 has it (what Python's json.load and browsers accept), in UTF-8.
absl::Status CheckJson(absl::string_view text);

// Every file of the capture folder `dir` (trace.json, trace.pftrace, summary.*, the
// artifacts) reads back: the JSON files are JSON, the Perfetto trace parses, summary.json
// reads back with ParseSummaryJson() with `rows` rows, summary.csv has a header and `rows`
// records, summary.txt has one line per row. Also that the folder holds nothing but files with
// the writers' names (nothing half-written, nothing named by the program).
absl::Status CheckCaptureFolder(const std::string& dir, size_t rows);

}  // namespace nrtprof::fuzz

#endif  // NRTPROF_TESTS_FUZZ_OUTPUT_CHECKS_H_
