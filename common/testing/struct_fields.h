// Reading one field of a JSON object parsed into a google::protobuf::Struct, for the tests that
// check the JSON nrtprof and the simulated runtime write (trace.json, summary.json, the system
// trace). A missing field never passes for a present one: Num() gives NaN, which compares
// false with every number, and Str() the empty string.
//
// Test-only. Header-only, pure functions: thread-safe.
#ifndef NRTPROF_COMMON_TESTING_STRUCT_FIELDS_H_
#define NRTPROF_COMMON_TESTING_STRUCT_FIELDS_H_

#include <cmath>
#include <string>

#include "google/protobuf/struct.pb.h"

namespace nrtprof::testing {

// The number at `key`; NaN when there is none (or it is not a number).
inline double Num(const google::protobuf::Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  if (it == s.fields().end() || !it->second.has_number_value()) return NAN;
  return it->second.number_value();
}

// The string at `key`; empty when there is none (or it is not a string).
inline std::string Str(const google::protobuf::Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  return it == s.fields().end() ? "" : it->second.string_value();
}

}  // namespace nrtprof::testing

#endif  // NRTPROF_COMMON_TESTING_STRUCT_FIELDS_H_
