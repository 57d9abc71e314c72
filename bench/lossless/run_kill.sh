#!/usr/bin/env bash
# Lossless mode against a daemon killed with SIGKILL mid-capture and started again: does any
# call of the program wait for the profiler (issue 5: at most 1 ms), and is every call in the
# trace? exec_rate calls nrt_execute back to back for 4 s at NRT_SIM_TIME_SCALE=0.01 under
# `nrtprof run --mode lossless` against a standing nrtprofd, which is killed after 1 s and
# restarted 0.5 s later. The same program without the profiler gives the longest call this
# machine produces on its own. Prints figures; asserts nothing about time.
#   bench/lossless/run_kill.sh [--no-build]
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT" || exit 2
if [ "${1:-}" != "--no-build" ]; then
  bazel build --config=opt --noshow_progress //bench:exec_rate //client:nrtprof //daemon:nrtprofd \
    //shim:shim 2>&1 | grep -E '^ERROR' && exit 1
fi
BIN="$ROOT/bazel-out/k8-opt/bin"
work="$(mktemp -d /tmp/nrtprof-kill.XXXXXX)"
daemon_pid=""
cleanup() {
  if [ -n "$daemon_pid" ]; then kill -9 "$daemon_pid" 2>/dev/null; wait "$daemon_pid" 2>/dev/null; fi
  rm -rf "$work"
}
trap cleanup EXIT

start_daemon() {
  mkfifo "$work/ready.$1"
  "$BIN/daemon/nrtprofd" --socket="$work/nrtprofd.sock" --output_root="$work/captures" \
    --ready_fd=3 3>"$work/ready.$1" 2>>"$work/nrtprofd.log" &
  daemon_pid=$!
  read -r _ <"$work/ready.$1"
}

plain="$(NRT_SIM_TIME_SCALE=0.01 "$BIN/bench/exec_rate" 4)"
start_daemon 1
NRT_SIM_TIME_SCALE=0.01 "$BIN/client/nrtprof" run --addr "unix:$work/nrtprofd.sock" --mode lossless \
  --out "$work/capture" -- "$BIN/bench/exec_rate" 4 >"$work/profiled.out" 2>"$work/profiled.err" &
run_pid=$!
sleep 1
kill -9 "$daemon_pid"; wait "$daemon_pid" 2>/dev/null
sleep 0.5
start_daemon 2
wait "$run_pid"
profiled="$(cat "$work/profiled.out")"
recorded="$(awk -F, '$1 == "nrt_execute" {print $NF}' "$work/capture/summary.csv" 2>/dev/null)"
dropped="$(awk '/Events dropped/ {print $3}' "$work/capture/summary.txt" 2>/dev/null)"
echo "machine: $(nproc) cores, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "without a profiler:                      $plain"
echo "lossless, daemon SIGKILLed at 1 s, back at 1.5 s: $profiled"
calls="$(echo "$profiled" | awk '{print $2}')"
echo "nrt_execute calls made (with the warm-up): $((calls + 1)), in the trace: ${recorded:-none}, events dropped: ${dropped:-?}"
grep -q "was in progress when the daemon stopped" "$work/nrtprofd.log" && echo "the restarted daemon took the capture up again"
