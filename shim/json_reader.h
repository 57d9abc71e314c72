// A small JSON reader for the runtime's system-trace documents (sim/README.md, "System
// trace"): a DOM of null/bool/number/string/array/object values.
//
// Why not google.protobuf.Struct: its numbers are doubles, and device timestamps, event ids
// and host clocks are 64-bit integers that a double rounds once a machine has been up for
// about 104 days. Integers here are kept exact.
//
// Strings: the runtime escapes byte by byte (\u00XX for each byte outside printable ASCII).
// Each \u00XX is first taken as that byte; if the result is not valid UTF-8, the escapes are
// taken as code points instead (what a standard JSON writer means by \u00e9). Invalid input
// yields an error, never a crash; nesting deeper than kMaxDepth is an error.
// Thread-compatible.
#ifndef NRTPROF_SHIM_JSON_READER_H_
#define NRTPROF_SHIM_JSON_READER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nrtprof::shim {

class JsonValue {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };

  Type type() const { return type_; }
  bool is_object() const { return type_ == Type::kObject; }
  bool is_array() const { return type_ == Type::kArray; }

  // The member `key` of an object, or null.
  const JsonValue* Find(std::string_view key) const;
  // Numbers: exact for integers that fit; doubles are truncated; anything else is 0.
  uint64_t AsUint64() const;
  int64_t AsInt64() const;
  double AsDouble() const;
  bool AsBool() const { return type_ == Type::kBool && bool_; }
  // Strings; "" for anything else.
  const std::string& AsString() const;
  // Array items; empty for anything else.
  const std::vector<JsonValue>& items() const { return items_; }
  const std::vector<std::pair<std::string, JsonValue>>& members() const { return members_; }

 private:
  friend class JsonParser;

  Type type_ = Type::kNull;
  bool bool_ = false;
  // Numbers: an integer in int_/negative_ when integral and within 64 bits, else double_.
  bool integral_ = false;
  bool negative_ = false;
  uint64_t int_ = 0;  // magnitude
  double double_ = 0;
  std::string string_;
  std::vector<JsonValue> items_;
  std::vector<std::pair<std::string, JsonValue>> members_;
};

inline constexpr int kMaxJsonDepth = 64;

// Parses the whole of `text`; on failure returns false and says where in *error.
bool ParseJson(std::string_view text, JsonValue* value, std::string* error);

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_JSON_READER_H_
