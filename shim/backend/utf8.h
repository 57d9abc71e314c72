// Proto3 `string` fields must hold valid UTF-8, or the daemon's parser rejects the whole
// message; names from programs (tensor and range names, command lines, paths) may be any
// bytes. SanitizeUtf8 keeps valid UTF-8 as is and replaces each invalid byte with U+FFFD, by
// the rule of common/json_text.h (which says what is valid), so a name reads the same in the
// daemon's JSON files.
#ifndef NRTPROF_SHIM_BACKEND_UTF8_H_
#define NRTPROF_SHIM_BACKEND_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace nrtprof::shim {

std::string SanitizeUtf8(std::string_view s);

// For names cut at a byte bound: drops a multi-byte sequence left incomplete at the end.
std::string_view TrimIncompleteUtf8Tail(std::string_view s);

// Appends code point `cp` (<= U+10FFFF, not a surrogate) as UTF-8.
void AppendUtf8(uint32_t cp, std::string* out);

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_BACKEND_UTF8_H_
