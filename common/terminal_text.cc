#include "common/terminal_text.h"

#include <cstdint>

#include "common/json_text.h"

namespace nrtprof {

void AppendTerminalText(std::string_view s, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  size_t i = 0;
  while (i < s.size()) {
    // Runs of printable ASCII, nearly every name whole, go in one append.
    size_t run = i;
    while (run < s.size()) {
      const uint8_t r = static_cast<uint8_t>(s[run]);
      if (r < 0x20 || r >= 0x7f) break;
      ++run;
    }
    if (run > i) {
      out->append(s.data() + i, run - i);
      i = run;
      if (i == s.size()) break;
    }
    const uint8_t c = static_cast<uint8_t>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      switch (c) {
        case '\n':
          out->append("\\n");
          break;
        case '\r':
          out->append("\\r");
          break;
        case '\t':
          out->append("\\t");
          break;
        case '\0':
          out->append("\\0");
          break;
        default:
          out->append("\\x");
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 0xf]);
      }
      ++i;
    } else if (const size_t n = Utf8SequenceLength(s.substr(i)); n > 0) {
      // U+0080-U+009F, the C1 controls, are 0xc2 0x80 to 0xc2 0x9f in UTF-8.
      if (n == 2 && c == 0xc2 && static_cast<uint8_t>(s[i + 1]) <= 0x9f) {
        const uint8_t low = static_cast<uint8_t>(s[i + 1]);
        out->append("\\u00");
        out->push_back(kHex[low >> 4]);
        out->push_back(kHex[low & 0xf]);
      } else {
        out->append(s.data() + i, n);
      }
      i += n;
    } else {
      out->append("\xef\xbf\xbd");  // U+FFFD
      ++i;
    }
  }
}

std::string TerminalText(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  AppendTerminalText(s, &out);
  return out;
}

std::string TerminalTextClipped(std::string_view s, size_t width) {
  std::string shown = TerminalText(s);
  if (shown.size() <= width) return shown;
  size_t cut = width > 3 ? width - 3 : 0;
  while (cut > 0 && (static_cast<uint8_t>(shown[cut]) & 0xc0) == 0x80) --cut;
  shown.resize(cut);
  return shown + "...";
}

}  // namespace nrtprof
