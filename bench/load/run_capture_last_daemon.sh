#!/usr/bin/env bash
# `nrtprof capture --last` as a user runs it, against a standing nrtprofd (issue 14: a
# capture of 3 M recorded events at >= 2 M events/s on one core). Per round: a fresh nrtprofd
# pinned to core 0 with a flight recorder big enough for the events (and a per-process bound,
# --max_events_per_process, above them: one process may send them all); nrtprof_loadgen on core 1
# feeding it EVENTS synthetic events over P streams with no capture running (the recorder
# only); a pause (the machine settles); then, PAUSE (12) s apart, two captures of the last 60 s
# (so that the second still holds every event; the recorder keeps 120 s) by the real CLI: `--files pftrace,summary`, then every file -- in the other order every other round.
# Figures: events per second of the daemon's CPU time during each capture (/proc/PID/stat,
# every thread; the daemon does nothing else meanwhile), the capture's wall time, and the
# daemon's peak RSS. The first capture of a round pays for fresh memory; the second, PAUSE s
# later, reuses the first one's (the daemon keeps what a capture freed until no capture has
# been written for 20 s, CollectorCore::ReleaseIdleMemory).
#
#   bench/load/run_capture_last_daemon.sh                      # 3 rounds, P=4, 3 M events
#   ROUNDS=5 STREAMS=1 EVENTS=3000000 bench/load/run_capture_last_daemon.sh
#   NRTPROF_BIN=DIR bench/load/run_capture_last_daemon.sh      # binaries already built in DIR
#
# Prints figures; asserts nothing. Explained in BENCHMARKS.md ("The flight recorder").
set -euo pipefail

cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-3}
EVENTS=${EVENTS:-3000000}
STREAMS=${STREAMS:-4}
PAUSE=${PAUSE:-12}

if [[ -z "${NRTPROF_BIN:-}" ]]; then
  bazel build --config=opt --symlink_prefix=/ \
    --disk_cache="${NRTPROF_DISK_CACHE:-$HOME/.cache/nrtprof-disk-cache}" \
    //daemon:nrtprofd //bench:nrtprof_loadgen //client:nrtprof >&2
  NRTPROF_BIN=$(bazel info --config=opt bazel-bin 2>/dev/null)
fi
for b in daemon/nrtprofd bench/nrtprof_loadgen client/nrtprof; do
  [[ -x "$NRTPROF_BIN/$b" ]] || { echo "$0: $NRTPROF_BIN/$b is missing" >&2; exit 2; }
done

work=$(mktemp -d /tmp/nrtprof-capture-last-XXXXXX)
daemon_pid=""
trap '[[ -z "$daemon_pid" ]] || kill "$daemon_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT

ticks_per_s=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hwm_kib() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }

# One capture: prints "files events daemon_cpu_s wall_s".
capture() {  # $1: round folder, $2: label, then capture's own flags
  local dir="$1" label="$2"; shift 2
  local before after t0 t1 events
  before=$(cpu_ticks "$daemon_pid")
  t0=$(date +%s.%N)
  taskset -c 1 "$NRTPROF_BIN/client/nrtprof" capture --addr "unix:$dir/d.sock" --last 60s \
    --out "$dir/$label" "$@" 2> "$dir/$label.err" > /dev/null
  t1=$(date +%s.%N)
  after=$(cpu_ticks "$daemon_pid")
  events=$(sed -n 's/^nrtprof: \([0-9]*\) events from .*/\1/p' "$dir/$label.err")
  [[ -n "$events" ]] || { echo "$0: capture $label said:" >&2; cat "$dir/$label.err" >&2; exit 1; }
  awk -v l="$label" -v e="$events" -v c="$((after - before))" -v hz="$ticks_per_s" \
    -v t0="$t0" -v t1="$t1" 'BEGIN {printf "%s %d %.2f %.2f\n", l, e, c / hz, t1 - t0}'
  rm -rf "${dir:?}/$label"
}

printf '%s\n' "nrtprof capture --last 60s of $EVENTS events from $STREAMS streams, a standing" \
  "nrtprofd on core 0 (CPU: $(lscpu | sed -n 's/^Model name: *//p'))"
printf '%-6s %-22s %10s %12s %10s %12s %10s\n' round files events "daemon CPU" wall \
  "M events/s" "peak RSS"
for round in $(seq "$ROUNDS"); do
  dir="$work/r$round"
  mkdir -p "$dir"
  taskset -c 0 "$NRTPROF_BIN/daemon/nrtprofd" --socket "$dir/d.sock" --output_root "$dir/caps" \
    --flight_recorder_seconds 120 --flight_recorder_bytes $((1 << 30)) \
    --max_events_per_process $((EVENTS * 2)) --quiet &
  daemon_pid=$!
  # Up to 30 s: on a busy shared machine a daemon once took more than 5 s to listen.
  for _ in $(seq 300); do [[ -S "$dir/d.sock" ]] && break; sleep 0.1; done
  taskset -c 1 "$NRTPROF_BIN/bench/nrtprof_loadgen" --addr "unix:$dir/d.sock" --capture=false \
    --events "$EVENTS" --streams "$STREAMS" > "$dir/loadgen.out"
  orders=("pftrace,summary every" "every pftrace,summary")
  for files in ${orders[$((round % 2))]}; do
    sleep "$PAUSE"
    if [[ "$files" == every ]]; then
      line=$(capture "$dir" every)
    else
      line=$(capture "$dir" pftrace-summary --files "$files")
    fi
    read -r label events cpu wall <<< "$line"
    awk -v r="$round" -v l="$label" -v e="$events" -v c="$cpu" -v w="$wall" \
      -v h="$(hwm_kib "$daemon_pid")" \
      'BEGIN {printf "%-6s %-22s %10d %10.2f s %8.2f s %12.2f %7.0f MiB\n",
              r, l, e, c, w, (c > 0 ? e / c / 1e6 : 0), h / 1024}'
  done
  kill "$daemon_pid"
  wait "$daemon_pid" 2>/dev/null || true
  daemon_pid=""
done
