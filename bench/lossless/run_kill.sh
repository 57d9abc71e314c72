#!/usr/bin/env bash
# Lossless mode against a daemon killed with SIGKILL mid-capture and started again: does any
# call of the program wait for the profiler (issue 5: at most 1 ms), and is every call in the
# trace? exec_rate calls nrt_execute 10,000 times a second for 4 s, spinning between calls, at
# NRT_SIM_TIME_SCALE=0 (the simulated device does not sleep), so that a call in which the
# thread switched away voluntarily is a call that waited; it times each call alone. Per
# round: without the profiler, under `nrtprof run --mode lossless` against a standing nrtprofd,
# and the same with the daemon killed after 1 s and restarted 0.5 s later. Prints figures;
# asserts nothing about time.
#   bench/lossless/run_kill.sh [--no-build] [--rounds=N]   (3 rounds: about 1 min)
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT" || exit 2
ROUNDS=3
build=1
for arg in "$@"; do
  case "$arg" in
    --no-build) build=0 ;;
    --rounds=*) ROUNDS="${arg#--rounds=}" ;;
    *) echo "usage: bench/lossless/run_kill.sh [--no-build] [--rounds=N]" >&2; exit 2 ;;
  esac
done
if [ "$build" = 1 ]; then
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

echo "machine: $(nproc) cores, $(date -u +%Y-%m-%dT%H:%M:%SZ); exec_rate prints, per run, the"
echo "calls, the longest call, the 99.9th percentile (to 50 us), the calls over 1 ms, the"
echo "calling thread's context switches (involuntary: the machine preempted it) and the calls"
echo "in which it switched away voluntarily (it waited)"
for round in $(seq "$ROUNDS"); do
  echo "round $round"
  echo "  without a profiler:"
  NRT_SIM_TIME_SCALE=0 "$BIN/bench/exec_rate" 4 --paced 10000 | sed 's/^/    /'
  start_daemon "steady$round"
  NRT_SIM_TIME_SCALE=0 "$BIN/client/nrtprof" run --addr "unix:$work/nrtprofd.sock" --mode lossless \
    --out "$work/steady$round" -- "$BIN/bench/exec_rate" 4 --paced 10000 >"$work/steady.out" 2>"$work/steady.err"
  echo "  lossless, daemon left alone:"
  sed 's/^/    /' "$work/steady.out"
  NRT_SIM_TIME_SCALE=0 "$BIN/client/nrtprof" run --addr "unix:$work/nrtprofd.sock" --mode lossless \
    --out "$work/capture$round" -- "$BIN/bench/exec_rate" 4 --paced 10000 >"$work/profiled.out" 2>"$work/profiled.err" &
  run_pid=$!
  sleep 1
  kill -9 "$daemon_pid"; wait "$daemon_pid" 2>/dev/null
  sleep 0.5
  start_daemon "$round"
  wait "$run_pid"
  echo "  lossless, daemon SIGKILLed at 1 s, back at 1.5 s:"
  sed 's/^/    /' "$work/profiled.out"
  kill "$daemon_pid"; wait "$daemon_pid" 2>/dev/null; daemon_pid=""
  recorded="$(awk -F, '$1 == "nrt_execute" {print $NF}' "$work/capture$round/summary.csv" 2>/dev/null)"
  dropped="$(awk '/Events dropped/ {print $3}' "$work/capture$round/summary.txt" 2>/dev/null)"
  calls="$(awk 'NR == 1 {print $2}' "$work/profiled.out")"
  echo "  nrt_execute calls made (with the warm-up): $((calls + 1)), in the trace: ${recorded:-none}, events dropped: ${dropped:-?}"
done
