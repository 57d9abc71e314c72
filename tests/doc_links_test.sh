#!/bin/bash
# Every relative link of README.md, docs/*.md, BENCHMARKS.md and the folders' READMEs names a
# file of the tree, and every #anchor a heading of its page (tests/check_doc_links.py). The
# pages are read where README.md's runfile points, in the checkout itself: the test is tagged
# external, so that a changed page is checked again rather than answered from the cache.
set -eu

readonly RUNFILES="${TEST_SRCDIR}/nrtprof"
root="$(dirname "$(readlink -f "${RUNFILES}/README.md")")"
exec python3 "${RUNFILES}/tests/check_doc_links.py" "${root}"
