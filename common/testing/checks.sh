# Sourced by the suite's shell tests: one way to count a failed check, show a file's context,
# need Debian's PyTorch, and end with the tally. A test lists "//common:testing/checks.sh" in its
# data and begins with
#   source "${TEST_SRCDIR}/nrtprof/common/testing/checks.sh"
# Then each check calls `fail "what the user would see wrong"` and goes on; `finish` ends it.

failures=0

# The sourcing script must parse whole. Bash 5.2 ends a script at a syntax error with exit
# status 0 (a malformed [[ ]] included), so a test broken halfway would pass; `bash -n` also
# exits 0 then, but says so on stderr.
_syntax="$(bash -n "$0" 2>&1 >/dev/null)"
if [[ -n "${_syntax}" ]]; then
  echo "FAIL: $0 does not parse: ${_syntax}" >&2
  exit 1
fi
unset _syntax

# One failed check: a line on stderr. The test goes on, and fails at `finish`.
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# Each file's first 6,000 bytes on stderr (show_tail: its last), to say why a check failed.
show() { local f; for f in "$@"; do echo "--- ${f}" >&2; head -c 6000 "${f}" >&2; done; }
show_tail() { local f; for f in "$@"; do echo "--- ${f}" >&2; tail -c 6000 "${f}" >&2; done; }

# Ends the test at once, one line, unless Python $1 imports torch (Debian's: /usr/bin/python3
# with python3-torch; another Python first on PATH may have none).
require_torch() {
  if ! "$1" -c 'import torch' 2>/dev/null; then
    echo "FAIL: $1 cannot import torch (apt-get install python3-torch)" >&2
    exit 1
  fi
}

# Ends the test: exit 1 with how many checks failed (and where the test's files are, when given
# as $1), else prints $2 (default PASS) and exits 0.
finish() {
  if [[ ${failures} -ne 0 ]]; then
    echo "${failures} check(s) failed${1:+; files in $1}" >&2
    exit 1
  fi
  echo "${2:-PASS}"
  exit 0
}
