// The primitives of the shim's one-pass JSON readers (sys_trace_reader.h, the runtime's system
// trace; device_profile_reader.h, the simulator's device profile): a cursor over the text that
// checks and reads one value at a time and builds no tree. A reader derives from it and walks
// its document's shape with these calls; the first failure is kept as the reason, with where.
//
// Strings without escapes are views of the text; with escapes, of a scratch copy that the next
// String() replaces (InScratch says which). Integers the shapes use are unsigned or signed
// 64-bit, exact. Thread-compatible: one scanner per document.
#ifndef NRTPROF_SHIM_BACKEND_JSON_SCANNER_H_
#define NRTPROF_SHIM_BACKEND_JSON_SCANNER_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace nrtprof::shim {

// Whether the N-1 bytes at `p` (which must be readable) are `literal`'s, compared in words of
// eight bytes, inline: the length is known when compiled (memcmp, which std::string_view's ==
// calls, is a call for most lengths).
template <size_t N>
inline bool BytesAre(const char* p, const char (&literal)[N]) {
  constexpr size_t n = N - 1;
  if constexpr (n < 8) {
    for (size_t i = 0; i < n; ++i) {
      if (p[i] != literal[i]) return false;
    }
    return true;
  } else {
    uint64_t a, b;
    for (size_t i = 0; i + 8 <= n; i += 8) {
      memcpy(&a, p + i, 8);
      memcpy(&b, literal + i, 8);
      if (a != b) return false;
    }
    memcpy(&a, p + n - 8, 8);  // the last eight, overlapping
    memcpy(&b, literal + n - 8, 8);
    return a == b;
  }
}

// Whether `s` is `literal`.
template <size_t N>
inline bool EqualsLiteral(std::string_view s, const char (&literal)[N]) {
  return s.size() == N - 1 && BytesAre(s.data(), literal);
}

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

  // The text from the cursor on, and moving the cursor to `at` (within it): for a reader's
  // own fast path over text in a shape it knows (sys_trace_reader.cc).
  std::string_view Rest() const { return text_.substr(pos_); }
  void SkipTo(const char* at) { pos_ = static_cast<size_t>(at - text_.data()); }

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

#endif  // NRTPROF_SHIM_BACKEND_JSON_SCANNER_H_
