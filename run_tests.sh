#!/usr/bin/env bash
# The whole test suite: every Bazel test, then the runtime's concurrency tests again under
# ThreadSanitizer, then each fuzz target for a bounded time (NRTPROF_FUZZ_SECONDS, default
# 60). The Bazel runs must leave no folder of theirs in the system's temporary folder (one case
# that fails if they do). Installs what is missing first; safe to run twice. Ends with one line,
# "N passed, N failed", counting test cases (GoogleTest cases, one per script test, one per
# fuzz target).
set -uo pipefail
cd "$(dirname "$0")"

./third_party/install_debian_deps.sh || exit 1

passed=0
failed=0

# Adds the cases of every test target named in a `bazel test` run's summary.
tally() {
  local config_dir="$1" summary="$2"
  while read -r target status; do
    local path="${target#//}"
    path="${path/://}"
    local xml="bazel-testlogs/${path}/test.xml"
    if [ "$config_dir" != "" ]; then xml="${config_dir}/testlogs/${path}/test.xml"; fi
    local tests=1 failures=0
    if [ -f "$xml" ] && [ "$status" != "FAILED_TO_BUILD" ] && [ "$status" != "NO_STATUS" ]; then
      tests=$(grep -o 'tests="[0-9]*"' "$xml" | head -1 | tr -dc 0-9)
      failures=$(grep -o 'failures="[0-9]*"' "$xml" | head -1 | tr -dc 0-9)
      errors=$(grep -o 'errors="[0-9]*"' "$xml" | head -1 | tr -dc 0-9)
      skipped=$(grep -o 'skipped="[0-9]*"' "$xml" | head -1 | tr -dc 0-9)
      failures=$(( ${failures:-0} + ${errors:-0} ))
      # A skipped case (GTEST_SKIP) ran no check: it is neither passed nor failed.
      tests=$(( ${tests:-1} - ${skipped:-0} ))
      # Nor is a script test that said it skipped ("SKIP: why", exit 0: a part it needs missing).
      if [ "$status" = "PASSED" ] && grep -q '^SKIP: ' "${xml%test.xml}test.log" 2>/dev/null; then
        echo "nrtprof: ${target} skipped: $(grep -m1 '^SKIP: ' "${xml%test.xml}test.log")"
        tests=0
      fi
    fi
    if [ "$status" = "PASSED" ]; then
      passed=$(( passed + tests - failures ))
      failed=$(( failed + failures ))
    else
      # A target that failed without saying how many cases failed counts at least once.
      [ "$failures" -eq 0 ] && failures=1
      passed=$(( passed + (tests > failures ? tests - failures : 0) ))
      failed=$(( failed + failures ))
    fi
  done < <(grep -E '^//[^ ]+ +(\(cached\) )?(PASSED|FAILED|FAILED TO BUILD|TIMEOUT|NO STATUS)' "$summary" \
           | sed -E 's/\(cached\) //; s/FAILED TO BUILD/FAILED_TO_BUILD/; s/NO STATUS/NO_STATUS/' \
           | awk '{print $1, $2}')
}

run() {
  local name="$1" config_dir="$2"; shift 2
  echo "nrtprof: $name: bazel test $*"
  local log
  log="$(mktemp)"
  bazel test --test_summary=short --noshow_progress "$@" >"$log" 2>&1
  local code=$?
  grep -vE '^(INFO: (Analyzed|Found|Elapsed|[0-9]+ process)|Loading|Analyzing|Target )' "$log"
  local failed_before=$failed
  tally "$config_dir" "$log"
  # Bazel failed (a build or analysis error, an interrupted run) without a failed target to
  # show for it: that is a failure too, never a silent pass.
  if [ "$code" -ne 0 ] && [ "$failed" -eq "$failed_before" ]; then
    echo "nrtprof: $name: bazel exited with $code" >&2
    failed=$(( failed + 1 ))
  fi
  rm -f "$log"
}

# What the tests leave in the system's temporary folder: they write under TEST_TMPDIR, and the
# short folders some make in /tmp for unix sockets (paths of 107 bytes at most) go when they
# end. Any such folder the Bazel runs below leave behind is one failed case, named on one line.
leftovers() {
  find /tmp "${TMPDIR:-/tmp}" -mindepth 1 -maxdepth 1 \( -name 'nrtprof-*' -o -name 'nrtprofd-*' \
    -o -name 'trace-merge-test-*' -o -name 'shipping_core_test.*' \) 2>/dev/null | sort -u
}
leftovers_before="$(leftovers)"

run "all tests" "" //...
# The concurrent parts again under ThreadSanitizer: any data race fails the test. (The shim's
# integration test preloads the shim into uninstrumented programs, which tsan cannot do.)
tsan_dir="$(bazel info --config=tsan bazel-testlogs 2>/dev/null | sed 's|/testlogs$||')"
run "ThreadSanitizer" "$tsan_dir" --config=tsan \
  //sim:concurrency_test //sim:runtime_api_test //sim:sys_trace_test \
  //daemon:all //trace:all //shim/preload:event_ring_test //shim/backend:sys_trace_arbiter_test //shim/backend:device_profile_test

left="$(comm -13 <(echo "$leftovers_before") <(leftovers) | tr '\n' ' ' | sed 's/ $//')"
if [ -n "$left" ]; then
  echo "nrtprof: temporary folder: FAILED: the tests left ${left}"
  failed=$(( failed + 1 ))
fi

# The libFuzzer targets (clang, ASan, UBSan), each from its seed corpus for a bounded time: a
# crash fails its case, and the script prints the path of the input that caused it.
echo "nrtprof: fuzzing: tests/fuzz/run_fuzzers.sh --seconds ${NRTPROF_FUZZ_SECONDS:-60}"
fuzz_log="$(mktemp)"
./tests/fuzz/run_fuzzers.sh --seconds "${NRTPROF_FUZZ_SECONDS:-60}" 2>&1 | tee "$fuzz_log" \
  | grep -v -E '^([0-9]+ passed, [0-9]+ failed)?$'
fuzz_tally="$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$fuzz_log" | tail -1)"
if [ -n "$fuzz_tally" ]; then
  passed=$(( passed + $(echo "$fuzz_tally" | cut -d' ' -f1) ))
  failed=$(( failed + $(echo "$fuzz_tally" | cut -d' ' -f3) ))
else
  echo "nrtprof: fuzzing: the fuzz script ended without its tally" >&2
  failed=$(( failed + 1 ))
fi
rm -f "$fuzz_log"

echo
echo "${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
