#include "shim/json_reader.h"

#include <cmath>
#include <cstdlib>

#include "shim/utf8.h"

namespace nrtprof::shim {

const JsonValue* JsonValue::Find(std::string_view key) const {
  for (const auto& [name, value] : members_) {
    if (name == key) return &value;
  }
  return nullptr;
}

uint64_t JsonValue::AsUint64() const {
  if (type_ != Type::kNumber) return 0;
  if (integral_) return negative_ ? 0 : int_;
  if (!(double_ > 0)) return 0;
  if (double_ >= 18446744073709551615.0) return UINT64_MAX;
  return static_cast<uint64_t>(double_);
}

int64_t JsonValue::AsInt64() const {
  if (type_ != Type::kNumber) return 0;
  if (integral_) {
    if (negative_) return int_ > (1ull << 63) ? INT64_MIN : -static_cast<int64_t>(int_ - 1) - 1;
    return int_ > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(int_);
  }
  if (std::isnan(double_)) return 0;
  if (double_ >= 9223372036854775807.0) return INT64_MAX;
  if (double_ <= -9223372036854775808.0) return INT64_MIN;
  return static_cast<int64_t>(double_);
}

double JsonValue::AsDouble() const {
  if (type_ != Type::kNumber) return 0;
  if (integral_) return negative_ ? -static_cast<double>(int_) : static_cast<double>(int_);
  return double_;
}

const std::string& JsonValue::AsString() const {
  static const std::string* const kEmpty = new std::string();
  return type_ == Type::kString ? string_ : *kEmpty;
}

class JsonParser {
 public:
  explicit JsonParser(std::string_view text) : text_(text) {}

  bool Parse(JsonValue* value, std::string* error) {
    SkipSpace();
    if (!ParseValue(value, 0)) {
      *error = error_ + " at byte " + std::to_string(pos_);
      return false;
    }
    SkipSpace();
    if (pos_ != text_.size()) {
      *error = "trailing characters at byte " + std::to_string(pos_);
      return false;
    }
    return true;
  }

 private:
  bool Fail(const char* what) {
    error_ = what;
    return false;
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }
  void SkipSpace() {
    while (!AtEnd() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
                        text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return Fail("invalid literal");
    pos_ += word.size();
    return true;
  }

  bool ParseValue(JsonValue* v, int depth) {
    if (depth > kMaxJsonDepth) return Fail("nested too deeply");
    switch (Peek()) {
      case '{':
        return ParseObject(v, depth);
      case '[':
        return ParseArray(v, depth);
      case '"':
        v->type_ = JsonValue::Type::kString;
        return ParseString(&v->string_);
      case 't':
        v->type_ = JsonValue::Type::kBool;
        v->bool_ = true;
        return Literal("true");
      case 'f':
        v->type_ = JsonValue::Type::kBool;
        v->bool_ = false;
        return Literal("false");
      case 'n':
        v->type_ = JsonValue::Type::kNull;
        return Literal("null");
      default:
        return ParseNumber(v);
    }
  }

  bool ParseObject(JsonValue* v, int depth) {
    v->type_ = JsonValue::Type::kObject;
    ++pos_;  // '{'
    SkipSpace();
    if (Peek() == '}') {
      ++pos_;
      return true;
    }
    while (true) {
      SkipSpace();
      if (Peek() != '"') return Fail("expected a member name");
      std::string key;
      if (!ParseString(&key)) return false;
      SkipSpace();
      if (Peek() != ':') return Fail("expected ':'");
      ++pos_;
      SkipSpace();
      v->members_.emplace_back(std::move(key), JsonValue());
      if (!ParseValue(&v->members_.back().second, depth + 1)) return false;
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() == '}') {
        ++pos_;
        return true;
      }
      return Fail("expected ',' or '}'");
    }
  }

  bool ParseArray(JsonValue* v, int depth) {
    v->type_ = JsonValue::Type::kArray;
    ++pos_;  // '['
    SkipSpace();
    if (Peek() == ']') {
      ++pos_;
      return true;
    }
    while (true) {
      SkipSpace();
      v->items_.emplace_back();
      if (!ParseValue(&v->items_.back(), depth + 1)) return false;
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() == ']') {
        ++pos_;
        return true;
      }
      return Fail("expected ',' or ']'");
    }
  }

  bool Hex4(uint32_t* out) {
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

  // Decodes into two readings at once (see the header): `bytes` takes \u00XX as byte XX,
  // `points` as code point U+00XX.
  bool ParseString(std::string* out) {
    ++pos_;  // '"'
    std::string bytes, points;
    bool byte_escapes = false;
    while (true) {
      if (AtEnd()) return Fail("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') break;
      if (static_cast<unsigned char>(c) < 0x20) return Fail("control character in string");
      if (c != '\\') {
        bytes.push_back(c);
        points.push_back(c);
        continue;
      }
      if (AtEnd()) return Fail("unterminated escape");
      const char e = text_[pos_++];
      char simple = 0;
      switch (e) {
        case '"': simple = '"'; break;
        case '\\': simple = '\\'; break;
        case '/': simple = '/'; break;
        case 'b': simple = '\b'; break;
        case 'f': simple = '\f'; break;
        case 'n': simple = '\n'; break;
        case 'r': simple = '\r'; break;
        case 't': simple = '\t'; break;
        case 'u': break;
        default: return Fail("bad escape");
      }
      if (simple != 0) {
        bytes.push_back(simple);
        points.push_back(simple);
        continue;
      }
      uint32_t cp = 0;
      if (!Hex4(&cp)) return false;
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        uint32_t low = 0;
        if (text_.substr(pos_, 2) == "\\u") {
          pos_ += 2;
          if (!Hex4(&low)) return false;
        }
        if (low < 0xDC00 || low > 0xDFFF) {
          cp = 0xFFFD;  // a lone surrogate
        } else {
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        }
      } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        cp = 0xFFFD;
      }
      if (cp >= 0x80 && cp <= 0xFF) {
        byte_escapes = true;
        bytes.push_back(static_cast<char>(cp));
      } else {
        AppendUtf8(cp, &bytes);
      }
      AppendUtf8(cp, &points);
    }
    *out = byte_escapes && !IsValidUtf8(bytes) ? std::move(points) : std::move(bytes);
    return true;
  }

  bool ParseNumber(JsonValue* v) {
    v->type_ = JsonValue::Type::kNumber;
    const size_t start = pos_;
    bool negative = false;
    if (Peek() == '-') {
      negative = true;
      ++pos_;
    }
    if (Peek() < '0' || Peek() > '9') return Fail("expected a value");
    uint64_t magnitude = 0;
    bool overflow = false;
    while (Peek() >= '0' && Peek() <= '9') {
      const uint64_t digit = static_cast<uint64_t>(Peek() - '0');
      if (magnitude > (UINT64_MAX - digit) / 10) overflow = true;
      magnitude = magnitude * 10 + digit;
      ++pos_;
    }
    bool fraction = false;
    if (Peek() == '.') {
      fraction = true;
      ++pos_;
      if (Peek() < '0' || Peek() > '9') return Fail("bad number");
      while (Peek() >= '0' && Peek() <= '9') ++pos_;
    }
    if (Peek() == 'e' || Peek() == 'E') {
      fraction = true;
      ++pos_;
      if (Peek() == '+' || Peek() == '-') ++pos_;
      if (Peek() < '0' || Peek() > '9') return Fail("bad number");
      while (Peek() >= '0' && Peek() <= '9') ++pos_;
    }
    if (!fraction && !overflow) {
      v->integral_ = true;
      v->negative_ = negative && magnitude != 0;
      v->int_ = magnitude;
      return true;
    }
    const std::string literal(text_.substr(start, pos_ - start));
    v->double_ = strtod(literal.c_str(), nullptr);
    return true;
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::string error_;
};

bool ParseJson(std::string_view text, JsonValue* value, std::string* error) {
  *value = JsonValue();
  JsonParser parser(text);
  return parser.Parse(value, error);
}

}  // namespace nrtprof::shim
