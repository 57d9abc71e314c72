// Text that goes into JSON files: the one UTF-8 check and the one string-literal writer that
// every part of nrtprof uses (the daemon's trace.json, summary.json, artifacts and fleet rows,
// the CLI's report page and diff, the shim's names and command lines sent as proto3 strings).
// The simulator keeps a copy of its own, as it depends on nothing of ours.
//
// What a writer gets: a JSON string literal that is valid whatever bytes the name held, since
// names come from programs (tensor and range names, command lines, paths) and may be any
// bytes. Quote and backslash are escaped; control characters become \b \f \n \r \t or \u00XX;
// everything else printable, DEL and '/' included, is kept; well-formed UTF-8 is kept as is;
// each byte that is not part of well-formed UTF-8 becomes \ufffd (U+FFFD, the replacement
// character), so one bad byte costs one character, not the name.
//
// Pure functions, thread-safe, no dependency beyond the C++ library: the shim, an LD_PRELOAD
// library, links it.
#ifndef NRTPROF_COMMON_JSON_TEXT_H_
#define NRTPROF_COMMON_JSON_TEXT_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace nrtprof {

// Length (1-4) of the well-formed UTF-8 sequence at the start of `s`, or 0 if `s` is empty or
// starts with a byte that begins none: a stray continuation byte, a truncated sequence, an
// overlong form, a UTF-16 surrogate (U+D800-U+DFFF) or a code point beyond U+10FFFF.
size_t Utf8SequenceLength(std::string_view s);

// Whether all of `s` is well-formed UTF-8.
bool IsValidUtf8(std::string_view s);

// Appends `s` as a JSON string literal, quotes included (see the top of this file).
void AppendJsonString(std::string_view s, std::string* out);

// The same, returned.
std::string JsonString(std::string_view s);

}  // namespace nrtprof

#endif  // NRTPROF_COMMON_JSON_TEXT_H_
