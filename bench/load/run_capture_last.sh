#!/usr/bin/env bash
# `capture --last` of 3 M recorded events, before and after (issue 14: >= 2 M events/s end to
# end on one core): nrtprof_recorder_bench built from this tree and from the daemon code of
# BEFORE (a git revision; this tree's benchmark source in both, so the two measure the same
# thing), run in alternating rounds pinned to core 0, one table side by side. Each round
# records the same synthetic batches and writes the capture twice: every file nrtprofd writes,
# then trace.pftrace + summary alone. Figures: events per second of the thread's CPU time
# (median of the rounds, and the range), and the capture's peak RSS above the RSS before it.
#
#   bench/load/run_capture_last.sh                   # BEFORE=main, 3 rounds, ~5 minutes
#   BEFORE=abc123 ROUNDS=5 EVENTS=3000000 bench/load/run_capture_last.sh
#
# Prints figures; asserts nothing. Explained in BENCHMARKS.md ("The flight recorder").
set -euo pipefail

cd "$(dirname "$0")/../.."
BEFORE=${BEFORE:-main}
ROUNDS=${ROUNDS:-3}
EVENTS=${EVENTS:-3000000}
disk_cache=(--disk_cache="${NRTPROF_DISK_CACHE:-$HOME/.cache/nrtprof-disk-cache}")

before_rev=$(git rev-parse --short "$BEFORE")  # once: the branch may move during the run
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# This tree's benchmark, and the same benchmark over BEFORE's daemon (its own Bazel server and
# output base, removed once built; the disk cache keeps what it compiled).
bazel build "${disk_cache[@]}" --config=opt --symlink_prefix=/ //bench:nrtprof_recorder_bench >&2
cp "$(bazel info --config=opt bazel-bin 2>/dev/null)/bench/nrtprof_recorder_bench" "$work/after"
mkdir "$work/tree"
git archive "$before_rev" | tar -x -C "$work/tree"
# The benchmark and the synthetic processes it records are this tree's in both builds.
cp bench/load/recorder_bench.cc bench/load/synthetic_process.h bench/load/synthetic_process.cc \
  "$work/tree/bench/load/"
# A tree from before the capture format had its own folder (trace/) kept it in daemon/: the
# benchmark's includes say where.
if [ ! -d "$work/tree/trace" ]; then
  sed -i 's|"trace/|"daemon/|' "$work/tree/bench/load/recorder_bench.cc" \
    "$work/tree/bench/load/synthetic_process.h" "$work/tree/bench/load/synthetic_process.cc"
fi
# A daemon that writes captures only whole has no TraceStream for the benchmark to pass on.
if ! grep -qs "class TraceStream" "$work/tree/trace/trace_sink.h" "$work/tree/daemon/trace_sink.h"; then
  sed -i '/streams:begin/,/streams:end/d' "$work/tree/bench/load/recorder_bench.cc"
fi
(
  cd "$work/tree"
  bazel build "${disk_cache[@]}" --config=opt //bench:nrtprof_recorder_bench >&2
  cp "$(bazel info --config=opt bazel-bin 2>/dev/null)/bench/nrtprof_recorder_bench" "$work/before"
  bazel clean --expunge >&2
)

pin=()
command -v taskset >/dev/null && pin=(taskset -c 0)
for round in $(seq "$ROUNDS"); do
  for which in before after; do
    out=$(mktemp -d)
    TMPDIR=$out "${pin[@]}" "$work/$which" --events "$EVENTS" --processes 4 --keep_files=false |
      sed -n "s/^last, \(.*\): .* events: \([0-9.]*\) M events\/s; peak RSS [0-9]* MiB, \([0-9]*\) MiB over.*/$which|\1|\2|\3/p" \
        >>"$work/rows"
    rm -rf "$out"
  done
  echo "round $round of $ROUNDS done" >&2
done

echo "capture --last of $EVENTS events, 4 processes, $ROUNDS rounds; before = $BEFORE ($before_rev), after = $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' + changes')"
echo
echo "| files written | before, M events/s | after, M events/s | before, peak MiB | after, peak MiB |"
echo "| --- | --- | --- | --- | --- |"
for files in "every file" "trace.pftrace + summary"; do
  stats() {  # median and range of column $2 for $1
    awk -F'|' -v w="$1" -v f="$files" -v c="$2" '$1 == w && $2 == f { print $c }' "$work/rows" |
      sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print "-"; exit }
        printf "%s (%s-%s)", v[int((NR + 1) / 2)], v[1], v[NR] }'
  }
  echo "| $files | $(stats before 3) | $(stats after 3) | $(stats before 4) | $(stats after 4) |"
done
