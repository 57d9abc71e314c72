// The daemon fuzzer's input format: what one fuzz input says a set of shim streams sent the
// daemon, so that the fuzzer mutates real message bytes and the seed corpus is made of real
// shim streams (record_streams.cc writes it).
//
// An input is a sequence of records, each
//   u8      op       bits 0-1: the stream (0-3); bit 2: that stream ends after this record;
//                    bit 3: a Status() call after this record
//   varint  length   of the bytes that follow
//   bytes   message  a serialized nrtprof.ShimMessage, as gRPC would hand it to the daemon
// A record cut short by the end of the input is half a message: it is never delivered, and
// its stream ends as a broken stream does. Bytes that do not parse as a ShimMessage are
// garbage on the stream, which ends it.
//
// Pure functions; thread-safe.
#ifndef NRTPROF_TESTS_FUZZ_FUZZ_INPUT_H_
#define NRTPROF_TESTS_FUZZ_FUZZ_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace nrtprof::fuzz {

inline constexpr int kStreams = 4;
inline constexpr uint8_t kStreamMask = 0x03;
inline constexpr uint8_t kCloseAfter = 0x04;
inline constexpr uint8_t kStatusAfter = 0x08;

struct FuzzRecord {
  int stream = 0;
  bool close_after = false;
  bool status_after = false;
  bool truncated = false;  // half a message: `message` is what arrived of it
  absl::string_view message;
};

// Splits an input into records; never fails (a cut record is the last, `truncated`).
std::vector<FuzzRecord> SplitRecords(absl::string_view input);

// Appends one record.
void AppendRecord(uint8_t op, absl::string_view message, std::string* out);

}  // namespace nrtprof::fuzz

#endif  // NRTPROF_TESTS_FUZZ_FUZZ_INPUT_H_
