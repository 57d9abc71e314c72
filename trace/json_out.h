// The text of a large JSON file (trace.json, a model's .ntff.json) put together in one buffer by
// pointer, piece by fixed-format piece, and handed to its AtomicFile in large blocks. Appending
// each piece to a std::string (a capacity check and a call per piece, a fresh escape scan per
// name) was most of those writers' own time; the text is the same, byte for byte.
//
// Not thread-safe: one writer per buffer.
#ifndef NRTPROF_TRACE_JSON_OUT_H_
#define NRTPROF_TRACE_JSON_OUT_H_

#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
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

// A buffer of text for one file at a time: Room(n) gives at least n bytes to write at, Done(end)
// keeps what was written up to `end`; MaybeFlush hands the text to the file once it holds
// `flush_bytes`, in whole 4 KiB blocks from a buffer aligned to them (AtomicFile copies them
// into the blocks its writer thread takes to the disk). A write error is kept and returned by
// every later MaybeFlush and Flush.
class JsonOut {
 public:
  explicit JsonOut(size_t flush_bytes = 256 << 10)
      : flush_bytes_(flush_bytes), capacity_(flush_bytes + (64 << 10)), data_(Allocate(capacity_)) {}

  // The file the text goes to from now on (the text held must have been flushed).
  void set_file(AtomicFile* file) { file_ = file; }

  char* Room(size_t n) {
    if (capacity_ - used_ < n) Grow(n);
    return data_.get() + used_;
  }
  void Done(char* end) { used_ = static_cast<size_t>(end - data_.get()); }
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
    if (used_ < flush_bytes_) return status_;
    HandWholeBlocks();
    return status_;
  }
  // Hands all the text held to the file.
  absl::Status Flush() {
    if (status_.ok() && used_ > 0) status_ = file_->Append(absl::string_view(data_.get(), used_));
    used_ = 0;
    return status_;
  }
  // Flush, and forgets its error: the buffer is then ready for another file.
  absl::Status FlushAndReset() {
    absl::Status s = Flush();
    status_ = absl::OkStatus();
    return s;
  }

 private:
  static constexpr size_t kBlock = 4096;
  struct Free {
    void operator()(char* p) const { free(p); }
  };
  static char* Allocate(size_t n) {
    void* p = nullptr;
    if (posix_memalign(&p, kBlock, n) != 0) throw std::bad_alloc();
    return static_cast<char*>(p);
  }

  // The whole blocks held go to the file; the rest moves to the buffer's start.
  void HandWholeBlocks() {
    const size_t whole = used_ - used_ % kBlock;
    if (status_.ok() && whole > 0) {
      status_ = file_->Append(absl::string_view(data_.get(), whole));
    }
    memmove(data_.get(), data_.get() + whole, used_ - whole);
    used_ -= whole;
  }

  // Room for n bytes: the text held goes to the file first; a buffer too small for one piece
  // (a very long name) grows.
  void Grow(size_t n) {
    HandWholeBlocks();
    if (capacity_ - used_ < n) {
      const size_t capacity = used_ + n;
      std::unique_ptr<char, Free> bigger(Allocate(capacity));
      memcpy(bigger.get(), data_.get(), used_);
      data_ = std::move(bigger);
      capacity_ = capacity;
    }
  }

  AtomicFile* file_ = nullptr;
  const size_t flush_bytes_;
  size_t capacity_;
  std::unique_ptr<char, Free> data_;
  size_t used_ = 0;
  absl::Status status_;
};

}  // namespace nrtprof::daemon

#endif  // NRTPROF_TRACE_JSON_OUT_H_
