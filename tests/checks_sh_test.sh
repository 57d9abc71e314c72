#!/bin/bash
# common/testing/checks.sh, which every shell test sources, refuses a test that does not parse:
# bash 5.2 ends a script at a syntax error (a malformed [[ ]]) with exit status 0, so a test
# broken halfway would have passed. A script with one fails with the line that says why; the
# same script mended passes; a failed check still fails the test.
source "${TEST_SRCDIR}/nrtprof/common/testing/checks.sh"
readonly CHECKS="${TEST_SRCDIR}/nrtprof/common/testing/checks.sh"
readonly WORK="$(mktemp -d "${TEST_TMPDIR:-/tmp}/checks.XXXXXX")"

printf '#!/bin/bash\nsource %q\nx=1\nif [[ $x == ]]; then fail "never"; fi\nfinish\n' \
  "${CHECKS}" >"${WORK}/broken.sh"
out="$(bash "${WORK}/broken.sh" 2>&1)"
code=$?
[[ ${code} -eq 1 ]] || fail "a test that does not parse exited ${code}, not 1: ${out}"
[[ "${out}" == *"FAIL: ${WORK}/broken.sh does not parse: "*"conditional binary operator"* ]] ||
  fail "a test that does not parse did not say why: ${out}"
[[ "${out}" != *PASS* ]] || fail "a test that does not parse said PASS: ${out}"

printf '#!/bin/bash\nsource %q\nx=1\nif [[ $x != 1 ]]; then fail "x is $x"; fi\nfinish\n' \
  "${CHECKS}" >"${WORK}/mended.sh"
out="$(bash "${WORK}/mended.sh" 2>&1)"
code=$?
[[ ${code} -eq 0 && "${out}" == PASS ]] || fail "the mended test exited ${code}: ${out}"

printf '#!/bin/bash\nsource %q\nfail "the table has no aten::mul"\nfinish\n' \
  "${CHECKS}" >"${WORK}/failing.sh"
out="$(bash "${WORK}/failing.sh" 2>&1)"
code=$?
[[ ${code} -eq 1 && "${out}" == *"FAIL: the table has no aten::mul"* ]] ||
  fail "a failed check exited ${code}: ${out}"

rm -rf "${WORK}"
finish
