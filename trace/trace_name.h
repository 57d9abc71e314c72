// Names in a Trace: the runtime functions, models, tensors, device ops and engines that nearly
// every event carries. A capture holds millions of events and a few hundred distinct names, so
// an event keeps a Name, one pointer to text held once in a NameTable, where it kept strings of
// its own (32 bytes each, and a copy of the text for every event). Copying a Name copies the
// pointer.
//
// A Name reads as the text it points to: it converts to `const std::string&` and to string
// views, compares with text, and prints (absl::StrCat takes `name.str()`). The text lives as long as its table:
// ProcessTrace keeps its table (trace_model.h), and a string literal's Name lives as long as
// the program.
//
// Thread-safety: a Name is a value, readable from any thread while its table lives. A NameTable
// is thread-compatible: Intern from one thread at a time. Name("literal") may be used from any
// thread (the literals' own table is locked).
#ifndef NRTPROF_TRACE_TRACE_NAME_H_
#define NRTPROF_TRACE_TRACE_NAME_H_

#include <cstddef>
#include <deque>
#include <ostream>
#include <string>
#include <string_view>
#include <unordered_map>

#include "absl/strings/string_view.h"

namespace nrtprof::daemon {

class Name {
 public:
  Name() = default;  // ""
  // A string literal (or any char array that lives as long as the program): its text is kept
  // in a table of the program's own literals, which stays as small as the code they come from.
  template <size_t N>
  Name(const char (&literal)[N])  // NOLINT: implicit, so that `call.name = "nrt_execute"` reads
      : Name(Literal(std::string_view(literal, N - 1))) {}

  // `text` kept until the program ends, in the literals' table: for text the program makes
  // itself (tests, fixed labels), never for what a shim sent (that goes in a NameTable that
  // goes with its trace).
  static Name Lasting(std::string_view text) { return Literal(text); }

  const std::string& str() const { return text_ != nullptr ? *text_ : Empty(); }
  std::string_view view() const { return str(); }
  operator const std::string&() const { return str(); }  // NOLINT: reads as its text
  operator std::string_view() const { return str(); }     // NOLINT
  operator absl::string_view() const { return str(); }    // NOLINT
  bool empty() const { return text_ == nullptr; }
  size_t size() const { return str().size(); }
  const char* c_str() const { return str().c_str(); }
  // Equal for two Names of one table exactly when their texts are equal (the empty name is
  // nullptr): a key for tables that need not compare text. Names of different tables may have
  // different ids for the same text.
  const void* id() const { return text_; }

  friend bool operator==(const Name& a, const Name& b) {
    return a.text_ == b.text_ || a.view() == b.view();
  }
  friend bool operator==(const Name& a, std::string_view b) { return a.view() == b; }
  friend bool operator==(std::string_view a, const Name& b) { return a == b.view(); }
  friend bool operator==(const Name& a, const char* b) { return a.view() == b; }
  friend bool operator==(const char* a, const Name& b) { return a == b.view(); }
  friend bool operator!=(const Name& a, const Name& b) { return !(a == b); }
  friend bool operator!=(const Name& a, std::string_view b) { return !(a == b); }
  friend bool operator!=(std::string_view a, const Name& b) { return !(a == b); }
  friend bool operator!=(const Name& a, const char* b) { return !(a == b); }
  friend bool operator!=(const char* a, const Name& b) { return !(a == b); }
  friend bool operator<(const Name& a, const Name& b) { return a.view() < b.view(); }
  friend std::ostream& operator<<(std::ostream& os, const Name& n) { return os << n.view(); }

 private:
  friend class NameTable;
  explicit Name(const std::string* text) : text_(text) {}
  static Name Literal(std::string_view text);
  static const std::string& Empty();

  const std::string* text_ = nullptr;  // never points at an empty string
};

// Holds the text of Names; each distinct text once. Names stay valid while the table lives;
// the table may be moved (its texts do not move).
class NameTable {
 public:
  NameTable() = default;
  NameTable(const NameTable&) = delete;
  NameTable& operator=(const NameTable&) = delete;
  NameTable(NameTable&&) = default;  // moves the texts' storage, not the texts
  NameTable& operator=(NameTable&&) = default;

  Name Intern(std::string_view text);
  size_t size() const { return texts_.size(); }

 private:
  std::deque<std::string> texts_;  // a deque: its elements never move as it grows
  std::unordered_map<std::string_view, const std::string*> by_text_;  // views of texts_
};

// A model file's name in a capture's folder, from its bytes (or, without them, from its name):
// 64-bit FNV-1a as 16 lowercase hex digits. Names the artifacts (artifact_writer.h) and, where
// the runtime names no model, the model itself ("model_<hash>", correlator.h).
std::string ModelHash(absl::string_view bytes);

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_TRACE_NAME_H_
