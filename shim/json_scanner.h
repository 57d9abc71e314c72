// The primitives of the shim's one-pass JSON readers (sys_trace_reader.h, the runtime's system
// trace; device_profile_reader.h, the simulator's device profile): a cursor over the text that
// checks and reads one value at a time and builds no tree. A reader derives from it and walks
// its document's shape with these calls; the first failure is kept as the reason, with where.
//
// Strings without escapes are views of the text; with escapes, of a scratch copy that the next
// String() replaces (InScratch says which). Integers the shapes use are unsigned or signed
// 64-bit, exact. Thread-compatible: one scanner per document.
#ifndef NRTPROF_SHIM_JSON_SCANNER_H_
#define NRTPROF_SHIM_JSON_SCANNER_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace nrtprof::shim {

class JsonScanner {
 public:
  explicit JsonScanner(std::string_view text) : text_(text) {}

  // The first failure's reason and where it happened.
  std::string error() const { return error_ + " (at byte " + std::to_string(pos_) + ")"; }

 protected:
  static constexpr int kMaxDepth = 64;

  bool Fail(std::string what) {
    if (error_.empty()) error_ = std::move(what);
    return false;
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }
  void SkipSpace() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c != ' ' && c != '\n' && c != '\r' && c != '\t') break;
      ++pos_;
    }
  }
  bool Consume(char c) {
    if (Peek() != c) return false;
    ++pos_;
    return true;
  }
  // After the document's value: only white space may follow.
  bool End() {
    SkipSpace();
    return pos_ == text_.size() || Fail("characters after the document");
  }

  // An object's members after its '{': `member(key)` reads each value.
  template <typename Fn>
  bool Members(Fn&& member) {
    SkipSpace();
    if (Consume('}')) return true;
    while (true) {
      SkipSpace();
      std::string_view key;
      if (Peek() != '"' || !String(&key)) return Fail("expected a member name");
      SkipSpace();
      if (!Consume(':')) return Fail("expected ':'");
      SkipSpace();
      if (!member(key)) return false;
      SkipSpace();
      if (Consume(',')) continue;
      if (Consume('}')) return true;
      return Fail("expected ',' or '}'");
    }
  }

  // An array's items after its '[': `item()` reads each value. `what` names the array in
  // the failure's reason.
  template <typename Fn>
  bool Items(const char* what, Fn&& item) {
    SkipSpace();
    if (Consume(']')) return true;
    while (true) {
      SkipSpace();
      if (!item()) return false;
      SkipSpace();
      if (Consume(',')) continue;
      if (Consume(']')) return true;
      return Fail(std::string("expected ',' or ']' in ") + what);
    }
  }

  // A JSON string at pos_ (which is '"').
  bool String(std::string_view* out);
  // Whether `s` is the scratch copy (the next String() call overwrites it).
  bool InScratch(std::string_view s) const { return s.data() == scratch_.data(); }
  // The members the shapes have as integers: digits only, within 64 bits.
  bool Unsigned(uint64_t* out, const char* what);
  bool Signed(int64_t* out, const char* what);
  // Any JSON value, checked and skipped; `depth` is the value's nesting.
  bool SkipValue(int depth);

 private:
  bool Hex4(uint32_t* out);
  bool Literal(std::string_view word);
  bool Number();

  const std::string_view text_;
  size_t pos_ = 0;
  std::string error_;
  std::string scratch_;
};

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_JSON_SCANNER_H_
