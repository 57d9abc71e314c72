#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for a bounded time from its seed
# corpus (tests/fuzz/corpus/NAME). The inputs that once crashed a target (tests/fuzz/crashes/
# NAME) are replayed by //tests/fuzz:NAME_replay_test in the ordinary suite, not fuzzed again:
# some are slow by nature (a 1 GB constant), and mutating them would only slow the fuzzer.
#
#   tests/fuzz/run_fuzzers.sh [--seconds N] [NAME...]     (default: 60 s each, every target)
#
# The build has its own Bazel output base (NRTPROF_FUZZ_OUTPUT_BASE, default under ~/.cache)
# and makes no bazel-* links in the checkout, so the default gcc build's outputs and links are
# left as they are. Each target prints one line: how many inputs it ran in how long, or the
# crash and the path of the input that caused it (kept in NRTPROF_FUZZ_OUT, default
# /tmp/nrtprof-fuzz-out). Ends with "N passed, N failed", one case per target. The corpus in
# the checkout is only read: new inputs go to the output folder.
set -uo pipefail
cd "$(dirname "$0")/../.."

ALL=(collector model_file model_text sys_trace device_profile)
seconds=60
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="${2:-}"; shift 2 ;;
    --seconds=*) seconds="${1#*=}"; shift ;;
    -h|--help) sed -n '2,/^[^#]/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "run_fuzzers: unknown flag $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ "${#targets[@]}" -eq 0 ] && targets=("${ALL[@]}")
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "run_fuzzers: --seconds needs a whole number of seconds, not '$seconds'" >&2
  exit 2
fi
for t in "${targets[@]}"; do
  if [[ ! " ${ALL[*]} " =~ " $t " ]]; then
    echo "run_fuzzers: no fuzz target '$t' (one of: ${ALL[*]})" >&2
    exit 2
  fi
done

checkout_hash="$(pwd | md5sum | cut -c1-12)"
output_base="${NRTPROF_FUZZ_OUTPUT_BASE:-${XDG_CACHE_HOME:-$HOME/.cache}/nrtprof-fuzz/$checkout_hash}"
out="${NRTPROF_FUZZ_OUT:-/tmp/nrtprof-fuzz-out}"
bazel=(bazel "--output_base=$output_base")

passed=0
failed=0
labels=()
for t in "${targets[@]}"; do labels+=("//tests/fuzz:${t}_fuzzer"); done
echo "fuzz: building ${targets[*]} with clang (ASan, UBSan, libFuzzer) in $output_base"
log="$(mktemp)"
if ! "${bazel[@]}" build --repo_env=CC=clang --config=fuzz --symlink_prefix=/ --noshow_progress \
    "${labels[@]}" >"$log" 2>&1; then
  grep -vE '^(INFO|Loading|Analyzing)' "$log" | tail -40
  echo "fuzz: the build failed; every target counts as failed"
  rm -f "$log"
  "${bazel[@]}" shutdown >/dev/null 2>&1
  echo
  echo "0 passed, ${#targets[@]} failed"
  exit 1
fi
rm -f "$log"
bin="$("${bazel[@]}" info --repo_env=CC=clang --config=fuzz bazel-bin 2>/dev/null)"
# A second Bazel server would hold its memory for hours: this one is only for the build.
"${bazel[@]}" shutdown >/dev/null 2>&1

for t in "${targets[@]}"; do
  work="$out/$t"
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/artifacts"
  seeds=("tests/fuzz/corpus/$t")
  flags=()
  [ -f "tests/fuzz/$t.dict" ] && flags+=("-dict=tests/fuzz/$t.dict")
  # The collector runs tens of inputs a second, not thousands, each of some 13,000 coverage
  # features. libFuzzer's entropic scheduling updates its counts for every feature of every
  # input and keeps a list of rare features that it trims only once features pass 255 hits
  # (the default threshold), which such a run hardly reaches. At 16 the scheduling stays and its
  # upkeep goes: 60 s runs took 11-12 ms of CPU an input (as with -entropic=0) against 18-19 ms
  # at 255, and reached as much coverage as at 255 (13,184 and 13,287 edges; 13,039 to 13,374).
  [ "$t" = "collector" ] && flags+=("-entropic_feature_frequency_threshold=16")
  log="$work/fuzz.log"
  start=$(date +%s)
  "$bin/tests/fuzz/${t}_fuzzer" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=3072 \
    -print_final_stats=1 -artifact_prefix="$work/artifacts/" "${flags[@]}" "$work/corpus" \
    "${seeds[@]}" >"$log" 2>&1
  code=$?
  elapsed=$(( $(date +%s) - start ))
  runs="$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')"
  corpus="$(ls "$work/corpus" | wc -l)"
  # slow-unit-* files are inputs over 10 s, reported but not failures; the rest are findings.
  artifact="$(ls "$work/artifacts" 2>/dev/null | grep -v '^slow-unit-' | head -1)"
  if [ "$code" -eq 0 ] && [ -z "$artifact" ]; then
    echo "fuzz: $t: PASSED: ${runs:-?} inputs in ${elapsed} s, no crash (${corpus} new corpus inputs in $work/corpus)"
    passed=$(( passed + 1 ))
  else
    # The sanitizer's or the target's own report, then where the input is.
    grep -m1 -E 'ERROR: |runtime error:|_fuzzer: |deadly signal|out-of-memory|timeout' "$log" \
      | sed "s/^/fuzz: $t: /"
    echo "fuzz: $t: FAILED after ${elapsed} s (${runs:-?} inputs); reproducer: $work/artifacts/${artifact:-?}"
    echo "fuzz: $t: replay it with $bin/tests/fuzz/${t}_fuzzer $work/artifacts/${artifact:-?}; log: $log"
    failed=$(( failed + 1 ))
  fi
done

echo
echo "${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
