#include "tests/fuzz/output_checks.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "trace/perfetto_trace_reader.h"
#include "trace/summary.h"

namespace nrtprof::fuzz {
namespace {

// The length of the well-formed UTF-8 sequence at s[i], or 0. Written apart from
// common/json_text.h on purpose: this is the oracle that checks the writers built on it.
size_t Utf8SequenceLength(absl::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t c = b(i);
  if (c < 0x80) return 1;
  size_t n;
  uint32_t cp;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
    cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3f);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
      (cp >= 0xd800 && cp <= 0xdfff)) {
    return 0;
  }
  return n;
}

// A recursive-descent JSON checker: RFC 8259's grammar, nothing more.
class JsonChecker {
 public:
  explicit JsonChecker(absl::string_view text) : text_(text) {}

  absl::Status Check() {
    Space();
    if (!Value(0)) return Error();
    Space();
    if (pos_ != text_.size()) {
      what_ = "text after the document";
      return Error();
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Error() const {
    return absl::InvalidArgumentError(absl::StrCat("not JSON at byte ", pos_, ": ", what_));
  }
  bool Fail(const char* what) {
    what_ = what;
    return false;
  }
  void Space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Literal(absl::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return Fail("bad literal");
    pos_ += word.size();
    return true;
  }
  bool Digits() {
    const size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    return pos_ > start || Fail("expected a digit");
  }
  bool Number() {
    if (text_[pos_] == '-') ++pos_;
    if (pos_ < text_.size() && text_[pos_] == '0') {
      ++pos_;
    } else if (!Digits()) {
      return false;
    }
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      if (!Digits()) return false;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (!Digits()) return false;
    }
    return true;
  }
  bool String() {
    ++pos_;  // the opening quote
    while (pos_ < text_.size()) {
      const uint8_t c = static_cast<uint8_t>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c < 0x20) return Fail("control character in a string");
      if (c == '\\') {
        if (++pos_ >= text_.size()) break;
        const char e = text_[pos_++];
        if (e == 'u') {
          for (int k = 0; k < 4; ++k, ++pos_) {
            if (pos_ >= text_.size() || !isxdigit(static_cast<unsigned char>(text_[pos_]))) {
              return Fail("bad \\u escape");
            }
          }
        } else if (absl::string_view("\"\\/bfnrt").find(e) == absl::string_view::npos) {
          return Fail("bad escape");
        }
        continue;
      }
      const size_t n = Utf8SequenceLength(text_, pos_);
      if (n == 0) return Fail("invalid UTF-8 in a string");
      pos_ += n;
    }
    return Fail("unterminated string");
  }
  bool Value(int depth) {
    if (depth > 500) return Fail("nested too deeply");
    if (pos_ >= text_.size()) return Fail("expected a value");
    switch (text_[pos_]) {
      case '{': {
        ++pos_;
        Space();
        if (pos_ < text_.size() && text_[pos_] == '}') return ++pos_, true;
        while (true) {
          Space();
          if (pos_ >= text_.size() || text_[pos_] != '"') return Fail("expected a member name");
          if (!String()) return false;
          Space();
          if (pos_ >= text_.size() || text_[pos_] != ':') return Fail("expected ':'");
          ++pos_;
          Space();
          if (!Value(depth + 1)) return false;
          Space();
          if (pos_ < text_.size() && text_[pos_] == ',') {
            ++pos_;
            continue;
          }
          if (pos_ < text_.size() && text_[pos_] == '}') return ++pos_, true;
          return Fail("expected ',' or '}'");
        }
      }
      case '[': {
        ++pos_;
        Space();
        if (pos_ < text_.size() && text_[pos_] == ']') return ++pos_, true;
        while (true) {
          Space();
          if (!Value(depth + 1)) return false;
          Space();
          if (pos_ < text_.size() && text_[pos_] == ',') {
            ++pos_;
            continue;
          }
          if (pos_ < text_.size() && text_[pos_] == ']') return ++pos_, true;
          return Fail("expected ',' or ']'");
        }
      }
      case '"':
        return String();
      case 't':
        return Literal("true");
      case 'f':
        return Literal("false");
      case 'n':
        return Literal("null");
      default:
        return Number();
    }
  }

  absl::string_view text_;
  size_t pos_ = 0;
  const char* what_ = "";
};

absl::Status ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream s;
  s << in.rdbuf();
  *out = s.str();
  return absl::OkStatus();
}

absl::Status In(const std::string& file, absl::Status s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(file, ": ", s.message()));
}

// RFC 4180 records, each of `fields` fields.
absl::Status CheckCsv(absl::string_view text, size_t records, size_t fields) {
  size_t pos = 0, seen = 0;
  while (pos < text.size()) {
    size_t n = 1;
    while (true) {
      if (pos < text.size() && text[pos] == '"') {
        ++pos;
        while (true) {
          if (pos >= text.size()) return absl::InvalidArgumentError("unterminated quoted field");
          if (text[pos] == '"') {
            if (pos + 1 < text.size() && text[pos + 1] == '"') {
              pos += 2;
              continue;
            }
            ++pos;
            break;
          }
          ++pos;
        }
      } else {
        while (pos < text.size() && text[pos] != ',' && text[pos] != '\n') {
          if (text[pos] == '"' || text[pos] == '\r') {
            return absl::InvalidArgumentError(
                absl::StrCat("record ", seen + 1, ": a quote or CR in an unquoted field"));
          }
          ++pos;
        }
      }
      if (pos < text.size() && text[pos] == ',') {
        ++pos;
        ++n;
        continue;
      }
      if (pos < text.size() && text[pos] == '\n') {
        ++pos;
        break;
      }
      if (pos >= text.size()) return absl::InvalidArgumentError("last record without a newline");
      return absl::InvalidArgumentError(
          absl::StrCat("record ", seen + 1, ": text after a quoted field"));
    }
    ++seen;
    if (n != fields) {
      return absl::InvalidArgumentError(
          absl::StrCat("record ", seen, " has ", n, " fields, not ", fields));
    }
  }
  if (seen != records) {
    return absl::InvalidArgumentError(
        absl::StrCat(seen, " records, not a header and ", records - 1, " rows"));
  }
  return absl::OkStatus();
}

// The header (the capture's line first, its totals last), then the table: a rule, the column
// names, a rule, one line per row, a rule, then the totals.
absl::Status CheckSummaryText(absl::string_view text, size_t rows) {
  if (absl::Status s = CheckUtf8(text); !s.ok()) return s;
  for (size_t i = 0; i < text.size(); ++i) {
    const uint8_t c = static_cast<uint8_t>(text[i]);
    if ((c < 0x20 && c != '\n') || c == 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat("control byte 0x", absl::Hex(c), " at byte ", i));
    }
  }
  if (text.empty() || text.back() != '\n') {
    return absl::InvalidArgumentError("does not end with a newline");
  }
  std::vector<absl::string_view> lines = absl::StrSplit(text.substr(0, text.size() - 1), '\n');
  size_t first_rule = 0;
  while (first_rule < lines.size() &&
         (lines[first_rule].empty() || lines[first_rule].find_first_not_of("- ") !=
                                           absl::string_view::npos)) {
    ++first_rule;
  }
  if (first_rule != 0 && (!absl::StartsWith(lines[0], "Capture") ||
                          !absl::StartsWith(lines[first_rule - 1], "Totals: "))) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", first_rule, " lines above the table are not its header"));
  }
  lines.erase(lines.begin(), lines.begin() + std::min(first_rule, lines.size()));
  if (lines.empty()) return absl::InvalidArgumentError("no table below the header");
  std::vector<size_t> rules;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i] == lines[0]) rules.push_back(i);
  }
  if (rules.size() != 3 || rules[1] != 2 || rules[2] != 3 + rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("the table's rules are at lines ", rules.size() > 0 ? rules[0] + 1 : 0,
                     ", ", rules.size() > 1 ? rules[1] + 1 : 0, ", ",
                     rules.size() > 2 ? rules[2] + 1 : 0, " (", rules.size(),
                     " of them): not one line per each of the ", rows, " rows"));
  }
  return absl::OkStatus();
}

bool IsWriterFileName(absl::string_view name) {
  if (name == "trace.json" || name == "trace.pftrace" || name == "summary.txt" ||
      name == "summary.csv" || name == "summary.json") {
    return true;
  }
  if (!absl::StartsWith(name, "model_")) return false;
  absl::string_view rest = name.substr(6);
  if (rest.size() < 16) return false;
  for (char c : rest.substr(0, 16)) {
    if (!isxdigit(static_cast<unsigned char>(c)) || isupper(static_cast<unsigned char>(c))) {
      return false;
    }
  }
  rest = rest.substr(16);
  if (rest == ".neff") return true;
  if (!absl::ConsumePrefix(&rest, "_nc") || !absl::ConsumeSuffix(&rest, ".ntff.json")) {
    return false;
  }
  if (rest.empty()) return false;
  for (char c : rest) {
    if (!isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace

absl::Status CheckUtf8(absl::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8SequenceLength(text, i);
    if (n == 0) {
      return absl::InvalidArgumentError(absl::StrCat("invalid UTF-8 at byte ", i));
    }
    i += n;
  }
  return absl::OkStatus();
}

absl::Status CheckJson(absl::string_view text) { return JsonChecker(text).Check(); }

absl::Status CheckCaptureFolder(const std::string& dir, size_t rows) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return absl::NotFoundError(absl::StrCat("cannot list ", dir));
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(d);
  for (const std::string& name : names) {
    const std::string path = absl::StrCat(dir, "/", name);
    struct stat st;
    if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(path, " is not a plain file"));
    }
    if (!IsWriterFileName(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir, " holds a file no writer names so: '", name, "'"));
    }
    if (absl::EndsWith(name, ".neff")) continue;
    std::string bytes;
    if (absl::Status s = ReadFile(path, &bytes); !s.ok()) return s;
    absl::Status s;
    if (name == "trace.pftrace") {
      s = daemon::ReadPerfettoTrace(bytes).status();
    } else if (absl::EndsWith(name, ".json")) {
      s = CheckJson(bytes);
      if (s.ok() && name == "summary.json") {
        absl::StatusOr<daemon::Summary> summary = daemon::ParseSummaryJson(bytes);
        s = summary.status();
        if (s.ok() && summary->rows.size() != rows) {
          s = absl::InvalidArgumentError(
              absl::StrCat(summary->rows.size(), " rows, not ", rows));
        }
      }
    } else if (name == "summary.csv") {
      s = CheckUtf8(bytes);
      // 8 columns when the capture has async work: queue_wait_avg_ns before calls.
      const size_t fields =
          absl::StrContains(bytes.substr(0, bytes.find('\n')), "queue_wait_avg_ns") ? 8 : 7;
      if (s.ok()) s = CheckCsv(bytes, rows + 1, fields);
    } else if (name == "summary.txt") {
      s = CheckSummaryText(bytes, rows);
    }
    if (!s.ok()) return In(path, s);
  }
  return absl::OkStatus();
}

}  // namespace nrtprof::fuzz
