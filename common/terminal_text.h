// Text that goes onto a terminal: the one writer of every string the CLI prints that a profiled
// process or a capture file gave it (executables, command lines, jobs, model, tensor and op
// names, trigger reasons). Those are any bytes a program chose, and the daemon's socket takes
// them from any client: printed as they are, an ESC sequence in a job or model name would drive
// the terminal of whoever runs `nrtprof top` or `nrtprof status` (retitle it, clear it, move
// the cursor), and a newline would forge a line of the table.
//
// What a printer gets: one line of visible text. Control characters become escapes a reader
// recognises: \n \r \t \0, and \xNN for the rest of C0 and for DEL (ESC: \x1b); the C1 controls
// U+0080-U+009F, which some terminals obey as ESC sequences, become \u0080-\u009f. Each byte
// that is not part of well-formed UTF-8 becomes U+FFFD, as in every JSON file nrtprof writes
// (json_text.h), so that a table printed from such a file reads as the one printed before it.
// Everything else, well-formed UTF-8 included, is kept as it is.
//
// Pure functions, thread-safe.
#ifndef NRTPROF_COMMON_TERMINAL_TEXT_H_
#define NRTPROF_COMMON_TERMINAL_TEXT_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace nrtprof {

// Appends `s` made safe for a terminal line (see the top of this file).
void AppendTerminalText(std::string_view s, std::string* out);

// The same, returned.
std::string TerminalText(std::string_view s);

// TerminalText(s) cut to at most `width` bytes (at least 4), ending in "..." when cut; the cut
// falls on a character boundary, so that what is left is still well-formed UTF-8.
std::string TerminalTextClipped(std::string_view s, size_t width);

}  // namespace nrtprof

#endif  // NRTPROF_COMMON_TERMINAL_TEXT_H_
