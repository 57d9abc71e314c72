#include "shim/backend/utf8.h"

#include <cstdint>

#include "common/json_text.h"

namespace nrtprof::shim {

std::string SanitizeUtf8(std::string_view s) {
  if (IsValidUtf8(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  while (!s.empty()) {
    const size_t n = Utf8SequenceLength(s);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      s.remove_prefix(1);
    } else {
      out.append(s.data(), n);
      s.remove_prefix(n);
    }
  }
  return out;
}

std::string_view TrimIncompleteUtf8Tail(std::string_view s) {
  // Walk back over at most three continuation bytes to the lead byte of the last sequence.
  size_t i = s.size();
  size_t continuation = 0;
  while (i > 0 && continuation < 3 && (static_cast<uint8_t>(s[i - 1]) & 0xC0) == 0x80) {
    --i;
    ++continuation;
  }
  if (i == 0) return s;
  const uint8_t lead = static_cast<uint8_t>(s[i - 1]);
  size_t want = 0;
  if (lead >= 0xC0 && lead <= 0xDF) want = 2;
  if (lead >= 0xE0 && lead <= 0xEF) want = 3;
  if (lead >= 0xF0 && lead <= 0xF7) want = 4;
  if (want != 0 && continuation + 1 < want) return s.substr(0, i - 1);
  return s;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace nrtprof::shim
