// The text of a large JSON file (trace.json, a model's .ntff.json) put together by pointer, piece
// by fixed-format piece, in the blocks its AtomicFile writes to the disk. Appending each piece to
// a std::string (a capacity check and a call per piece, a fresh escape scan per name) was most
// of those writers' own time, and copying the finished text into the file's blocks was a cost of
// its own; the text is the same, byte for byte.
//
// Not thread-safe: one writer per JsonOut.
#ifndef NRTPROF_TRACE_JSON_OUT_H_
#define NRTPROF_TRACE_JSON_OUT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/json_text.h"
#include "trace/atomic_file.h"

namespace nrtprof::daemon {
namespace json_out {

inline constexpr uint64_t kMaxExactJsonInteger = uint64_t{1} << 53;

// Copies n bytes where n is small and known only at run time, as a few fixed-size moves (a call
// of memcpy cost more than the copy for the few bytes of a name or a number).
inline void CopySmall(char* dst, const char* src, size_t n) {
  if (n >= 16) {
    if (n > 32) {
      memcpy(dst, src, n);
      return;
    }
    memcpy(dst, src, 16);
    memcpy(dst + n - 16, src + n - 16, 16);
  } else if (n >= 8) {
    memcpy(dst, src, 8);
    memcpy(dst + n - 8, src + n - 8, 8);
  } else if (n >= 4) {
    memcpy(dst, src, 4);
    memcpy(dst + n - 4, src + n - 4, 4);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = src[i];
  }
}

// "00" to "99".
inline constexpr char kDigitPairs[] =
    "000102030405060708091011121314151617181920212223242526272829"
    "303132333435363738394041424344454647484950515253545556575859"
    "606162636465666768697071727374757677787980818283848586878889"
    "90919293949596979899";

// v in decimal, as absl::StrAppend writes it (at most 20 bytes): its digits counted first, then
// written from the last, two a division.
inline char* PutDecimal(uint64_t v, char* p) {
  const char* const kPairs = kDigitPairs;
  size_t digits = 1;
  for (uint64_t rest = v;;) {
    if (rest < 10) break;
    if (rest < 100) {
      digits += 1;
      break;
    }
    if (rest < 1000) {
      digits += 2;
      break;
    }
    if (rest < 10000) {
      digits += 3;
      break;
    }
    rest /= 10000;
    digits += 4;
  }
  char* q = p + digits;
  while (v >= 100) {
    q -= 2;
    memcpy(q, kPairs + 2 * (v % 100), 2);
    v /= 100;
  }
  if (v >= 10) {
    memcpy(q - 2, kPairs + 2 * v, 2);
  } else {
    q[-1] = static_cast<char>('0' + v);
  }
  return p + digits;
}

// A string literal, without its terminating NUL.
template <size_t N>
inline char* PutLiteral(const char (&text)[N], char* p) {
  memcpy(p, text, N - 1);
  return p + N - 1;
}

// An unsigned integer as a JSON number, or as a decimal string beyond 2^53 (where JavaScript
// readers would silently round it; at most 22 bytes).
inline char* PutJsonUint(uint64_t v, char* p) {
  if (v <= kMaxExactJsonInteger) return PutDecimal(v, p);
  *p++ = '"';
  p = PutDecimal(v, p);
  *p++ = '"';
  return p;
}

// A signed integer likewise (at most 23 bytes).
inline char* PutJsonInt(int64_t v, char* p) {
  if (v >= 0) return PutJsonUint(static_cast<uint64_t>(v), p);
  const uint64_t magnitude = 0 - static_cast<uint64_t>(v);
  const bool quoted = magnitude > kMaxExactJsonInteger;
  if (quoted) *p++ = '"';
  *p++ = '-';
  p = PutDecimal(magnitude, p);
  if (quoted) *p++ = '"';
  return p;
}

// The most bytes PutJsonString may write for `s`: 6 a byte ("\u00XX", "\ufffd") and quotes.
inline size_t JsonStringRoom(std::string_view s) { return 6 * s.size() + 2; }

// `s` as AppendJsonString writes it (common/json_text.h), quotes included.
inline char* PutJsonString(std::string_view s, char* p) {
  const char* text = s.data();
  const size_t n = s.size();
  size_t i = 0;
  for (; i < n; ++i) {
    const uint8_t c = static_cast<uint8_t>(text[i]);
    if (c < 0x20 || c >= 0x80 || c == '"' || c == '\\') break;
  }
  if (i == n) {  // printable ASCII, nearly every name: as it is
    *p++ = '"';
    CopySmall(p, text, n);
    p += n;
    *p++ = '"';
    return p;
  }
  std::string escaped;
  AppendJsonString(s, &escaped);
  memcpy(p, escaped.data(), escaped.size());
  return p + escaped.size();
}

}  // namespace json_out

// The text of one file at a time, put together straight in the blocks its AtomicFile takes to
// the disk (AtomicFile::BeginWrite): Room(n) gives at least n bytes to write at, Done(end) keeps
// what was written up to `end`; MaybeFlush, between pieces, hands the text to the file once the
// file's block is full. A write error is kept and returned by every later MaybeFlush and Flush.
class JsonOut {
 public:
  // The file the text goes to from now on (the text held must have been flushed).
  void set_file(AtomicFile* file) { file_ = file; }

  char* Room(size_t n) {
    if (static_cast<size_t>(end_ - at_) <= n) Lend(n);
    return at_;
  }
  void Done(char* end) { at_ = end; }
  void Append(std::string_view s) {
    char* p = Room(s.size());
    memcpy(p, s.data(), s.size());
    Done(p + s.size());
  }
  void AppendJson(std::string_view s) {
    char* p = Room(json_out::JsonStringRoom(s));
    Done(json_out::PutJsonString(s, p));
  }

  absl::Status MaybeFlush() {
    if (at_ >= full_) Flush().IgnoreError();  // kept in status_
    return status_;
  }
  // Hands all the text held to the file.
  absl::Status Flush() {
    if (at_ != nullptr) {
      absl::Status s = file_->EndWrite(at_);
      if (status_.ok()) status_ = s;
      at_ = full_ = end_ = nullptr;
    }
    return status_;
  }
  // Flush, and forgets its error: ready for another file.
  absl::Status FlushAndReset() {
    absl::Status s = Flush();
    status_ = absl::OkStatus();
    return s;
  }

 private:
  // The text held goes to the file, which lends room for n bytes more.
  void Lend(size_t n) {
    Flush().IgnoreError();  // kept in status_
    const AtomicFile::Space space = file_->BeginWrite(n);
    at_ = space.begin;
    full_ = space.full;
    end_ = space.end;
  }

  AtomicFile* file_ = nullptr;
  // The space the file lent, from where the text goes on (null: none lent); past `full_` the
  // file's block is full.
  char* at_ = nullptr;
  char* full_ = nullptr;
  char* end_ = nullptr;
  absl::Status status_;
};

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_JSON_OUT_H_
