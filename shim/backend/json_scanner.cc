#include "shim/backend/json_scanner.h"

#include <algorithm>
#include <cstring>

#include "shim/backend/utf8.h"

namespace nrtprof::shim {

namespace {

constexpr uint64_t kOnes = 0x0101010101010101ull;
constexpr uint64_t kHighs = 0x8080808080808080ull;

// The high bit of each byte of `word` that is a quote, a backslash or below 0x20. A flag may
// also be set on a byte above a flagged one (a borrow), never below: the lowest is exact.
uint64_t StringStops(uint64_t word) {
  const uint64_t quote = word ^ (kOnes * '"');
  const uint64_t backslash = word ^ (kOnes * '\\');
  return ((quote - kOnes) & ~quote & kHighs) | ((backslash - kOnes) & ~backslash & kHighs) |
         ((word - kOnes * 0x20) & ~word & kHighs);
}

}  // namespace

// A JSON string at pos_ (which is '"'). Without escapes, a view of the text; with, of a
// decoded copy that the next String() call replaces. Eight bytes at a time up to the first
// quote, backslash or control character.
bool JsonScanner::String(std::string_view* out) {
  if (!Consume('"')) return false;
  const size_t start = pos_;
  while (pos_ + 8 <= text_.size()) {
    uint64_t word;
    memcpy(&word, text_.data() + pos_, 8);
    const uint64_t stops = StringStops(word);
    if (stops != 0) {
      pos_ += static_cast<size_t>(__builtin_ctzll(stops)) / 8;
      break;
    }
    pos_ += 8;
  }
  while (pos_ < text_.size()) {
    const unsigned char c = static_cast<unsigned char>(text_[pos_]);
    if (c == '"') {
      *out = text_.substr(start, pos_ - start);
      ++pos_;
      return true;
    }
    if (c == '\\') break;
    if (c < 0x20) return Fail("control character in a string");
    ++pos_;
  }
  if (AtEnd()) return Fail("unterminated string");
  scratch_.assign(text_.substr(start, pos_ - start));
  while (true) {
    if (AtEnd()) return Fail("unterminated string");
    const unsigned char c = static_cast<unsigned char>(text_[pos_++]);
    if (c == '"') break;
    if (c < 0x20) return Fail("control character in a string");
    if (c != '\\') {
      scratch_.push_back(static_cast<char>(c));
      continue;
    }
    if (AtEnd()) return Fail("unterminated escape");
    const char esc = text_[pos_++];
    switch (esc) {
      case '"': scratch_.push_back('"'); break;
      case '\\': scratch_.push_back('\\'); break;
      case '/': scratch_.push_back('/'); break;
      case 'b': scratch_.push_back('\b'); break;
      case 'f': scratch_.push_back('\f'); break;
      case 'n': scratch_.push_back('\n'); break;
      case 'r': scratch_.push_back('\r'); break;
      case 't': scratch_.push_back('\t'); break;
      case 'u': {
        uint32_t cp = 0;
        if (!Hex4(&cp)) return false;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          uint32_t low = 0;
          if (text_.substr(pos_, 2) == "\\u") {
            pos_ += 2;
            if (!Hex4(&low)) return false;
          }
          cp = (low >= 0xDC00 && low <= 0xDFFF)
                   ? 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00)
                   : 0xFFFD;
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
          cp = 0xFFFD;
        }
        AppendUtf8(cp, &scratch_);
        break;
      }
      default:
        return Fail("bad escape in a string");
    }
  }
  *out = scratch_;
  return true;
}

bool JsonScanner::Hex4(uint32_t* out) {
  if (text_.size() - pos_ < 4) return Fail("short \\u escape");
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    const char c = text_[pos_++];
    v <<= 4;
    if (c >= '0' && c <= '9') {
      v |= static_cast<uint32_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      v |= static_cast<uint32_t>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      v |= static_cast<uint32_t>(c - 'A' + 10);
    } else {
      return Fail("bad \\u escape");
    }
  }
  *out = v;
  return true;
}

// The members the shape has as integers: digits only, within 64 bits. Up to 19 digits
// cannot overflow; only a 20th is checked.
bool JsonScanner::Unsigned(uint64_t* out, const char* what) {
  const size_t start = pos_;
  const size_t fast_end = std::min(text_.size(), start + 19);
  uint64_t v = 0;
  while (pos_ < fast_end && static_cast<unsigned char>(text_[pos_] - '0') <= 9) {
    v = v * 10 + static_cast<uint64_t>(text_[pos_] - '0');
    ++pos_;
  }
  while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
    const uint64_t digit = static_cast<uint64_t>(text_[pos_] - '0');
    if (v > (UINT64_MAX - digit) / 10) return Fail(std::string(what) + " out of range");
    v = v * 10 + digit;
    ++pos_;
  }
  const char next = Peek();
  if (pos_ == start || next == '.' || next == 'e' || next == 'E' ||
      (pos_ - start > 1 && text_[start] == '0')) {
    return Fail(std::string(what) + " is not an unsigned integer");
  }
  *out = v;
  return true;
}

bool JsonScanner::Signed(int64_t* out, const char* what) {
  const bool negative = Consume('-');
  uint64_t magnitude = 0;
  if (!Unsigned(&magnitude, what)) return false;
  if (magnitude > (negative ? (1ull << 63) : static_cast<uint64_t>(INT64_MAX))) {
    return Fail(std::string(what) + " out of range");
  }
  *out = negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
  return true;
}

// Any JSON value, checked and skipped.
bool JsonScanner::SkipValue(int depth) {
  if (depth > kMaxDepth) return Fail("nested too deeply");
  std::string_view s;
  switch (Peek()) {
    case '{':
      ++pos_;
      return Members([&](std::string_view) { return SkipValue(depth + 1); });
    case '[':
      ++pos_;
      SkipSpace();
      if (Consume(']')) return true;
      while (true) {
        SkipSpace();
        if (!SkipValue(depth + 1)) return false;
        SkipSpace();
        if (Consume(',')) continue;
        if (Consume(']')) return true;
        return Fail("expected ',' or ']'");
      }
    case '"':
      return String(&s) || Fail("bad string");
    case 't': return Literal("true");
    case 'f': return Literal("false");
    case 'n': return Literal("null");
    default: return Number();
  }
}

bool JsonScanner::Literal(std::string_view word) {
  if (text_.substr(pos_, word.size()) != word) return Fail("invalid literal");
  pos_ += word.size();
  return true;
}

bool JsonScanner::Number() {
  Consume('-');
  auto digits = [&] {
    const size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    return pos_ - start;
  };
  const size_t start = pos_;
  const size_t n = digits();
  if (n == 0) return Fail("expected a value");
  if (n > 1 && text_[start] == '0') return Fail("bad number");
  if (Consume('.') && digits() == 0) return Fail("bad number");
  if (Peek() == 'e' || Peek() == 'E') {
    ++pos_;
    if (Peek() == '+' || Peek() == '-') ++pos_;
    if (digits() == 0) return Fail("bad number");
  }
  return true;
}

}  // namespace nrtprof::shim
