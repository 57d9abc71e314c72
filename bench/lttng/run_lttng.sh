#!/usr/bin/env bash
# nrtprof side by side with its best-known peer: the same interposition done with an LTTng-UST
# tracepoint (libnrtprof_peer.so, bench/lttng/nrtprof_peer.c), recorded by a real `lttng`
# session, on the same microbenchmark binary (bench/micro/micro_bench.cc).
#
#   bench/lttng/run_lttng.sh [run_micro.sh options]
#       Runs, in the same run and interleaved, the benchmark plain, under nrtprof and under the
#       peer (one event per call, and with NRTPROF_PEER_ENTRY=1 an entry event as well), and
#       prints ns/call, events recorded and lost per tool, and the nrtprof-vs-LTTng ratio.
#       It is `bench/micro/run_micro.sh --configs plain,nrtprof,lttng,lttng_entry_exit`;
#       `--pattern bursty` compares them in the bursty and continuous patterns
#       (bench/micro/burst_bench.cc) instead of Google Benchmark's repetitions.
#
#   bench/lttng/run_lttng.sh --record DIR [--entry-exit] -- CMD ARGS...
#       Runs CMD once with the peer preloaded under a fresh LTTng session (what run_micro.sh
#       does for its lttng configurations). CMD's stdout and stderr go to DIR/stdout and
#       DIR/stderr; DIR/lttng_counts.txt gets, as `key value` lines, the events babeltrace2
#       reads back (by event and function), the discarded events as `lttng list` and
#       babeltrace2 report them, and the trace's bytes. Exits with CMD's exit code.
#
# Needs Debian's lttng-tools, liblttng-ust-dev and babeltrace2 (not in the test suite's
# packages): apt-get install -y lttng-tools liblttng-ust-dev babeltrace2
# If no lttng-sessiond answers, one is started (`lttng-sessiond --daemonize --no-kernel`) and
# its pid written to $NRTPROF_LTTNG_SESSIOND_STATE (when set), so that the caller can stop it.
#
# Channel: per-user buffers, discard mode, NRTPROF_LTTNG_SUBBUF_SIZE (default 256K) x
# NRTPROF_LTTNG_NUM_SUBBUF (default 4) per CPU, vtid context, and a read timer of
# NRTPROF_LTTNG_READ_TIMER_US (default 100000; 0: none). The benchmark's repetitions (10000
# calls, 250-500 KB) fit, and the consumer drains during each repetition's pause. The read
# timer is LTTng's low-overhead setting: the consumer polls, so the traced thread never makes
# the system call that wakes it at each full sub-buffer (measured without it: wall time per
# call 30-90 ns above the thread's CPU time, the consumer preempting the benchmark). It also
# matches the shim, whose flusher wakes every 100 ms.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PEER="${NRTPROF_LTTNG_PEER:-$ROOT/bazel-out/k8-opt/bin/bench/libnrtprof_peer.so}"
SUBBUF_SIZE="${NRTPROF_LTTNG_SUBBUF_SIZE:-256K}"
NUM_SUBBUF="${NRTPROF_LTTNG_NUM_SUBBUF:-4}"
READ_TIMER_US="${NRTPROF_LTTNG_READ_TIMER_US:-100000}"
INSTALL_HINT="apt-get install -y lttng-tools liblttng-ust-dev babeltrace2"

die() {
  echo "run_lttng.sh: $*" >&2
  exit 2
}

need_tools() {
  local tool
  for tool in lttng lttng-sessiond babeltrace2; do
    command -v "$tool" >/dev/null || {
      echo "run_lttng.sh: $tool not found; install with: $INSTALL_HINT" >&2
      exit 3
    }
  done
}

# A session daemon to talk to: the running one, else one started here.
ensure_sessiond() {
  lttng list >/dev/null 2>&1 && return 0
  lttng-sessiond --daemonize --no-kernel >/dev/null 2>&1 || die "cannot start lttng-sessiond"
  local pidfile=/var/run/lttng/lttng-sessiond.pid
  [ "$(id -u)" -eq 0 ] || pidfile="$HOME/.lttng/lttng-sessiond.pid"
  if [ -n "${NRTPROF_LTTNG_SESSIOND_STATE:-}" ] && [ -s "$pidfile" ]; then
    cat "$pidfile" >"$NRTPROF_LTTNG_SESSIOND_STATE"
  fi
  echo "run_lttng.sh: started lttng-sessiond (pid $(cat "$pidfile" 2>/dev/null || echo '?'))" >&2
}

# Sums "discarded N events" as babeltrace2 and `lttng stop` word it; 0 if none.
sum_discarded() {
  grep -ioE 'discarded [0-9]+ (events|event records)|[0-9]+ events were discarded' "$@" 2>/dev/null |
    grep -oE '[0-9]+' | awk '{ s += $1 } END { print s + 0 }'
}

record() {
  local dir="$1" entry_exit="$2"
  shift 2
  [ -f "$PEER" ] || die "$PEER not built (bazel build --config=opt //bench:libnrtprof_peer.so)"
  mkdir -p "$dir" || die "cannot create $dir"
  need_tools
  ensure_sessiond
  local session="nrtprof-peer-$$-$RANDOM"
  local channel=nrtprof_peer
  local read_timer=()
  [ "$READ_TIMER_US" != 0 ] && read_timer=(--read-timer="$READ_TIMER_US")
  {
    lttng create "$session" --output="$dir/trace" &&
      lttng enable-channel -u -s "$session" --subbuf-size="$SUBBUF_SIZE" \
        --num-subbuf="$NUM_SUBBUF" "${read_timer[@]}" "$channel" &&
      lttng add-context -u -s "$session" -c "$channel" -t vtid &&
      lttng enable-event -u -s "$session" -c "$channel" 'nrtprof_peer:*' &&
      lttng start "$session"
  } >"$dir/lttng_setup.txt" 2>&1 || {
    cat "$dir/lttng_setup.txt" >&2
    lttng destroy "$session" >/dev/null 2>&1
    die "cannot set up the LTTng session"
  }
  local code=0
  if [ "$entry_exit" = 1 ]; then
    LD_PRELOAD="$PEER${LD_PRELOAD:+:$LD_PRELOAD}" NRTPROF_PEER_ENTRY=1 "$@" \
      >"$dir/stdout" 2>"$dir/stderr" || code=$?
  else
    LD_PRELOAD="$PEER${LD_PRELOAD:+:$LD_PRELOAD}" "$@" >"$dir/stdout" 2>"$dir/stderr" || code=$?
  fi
  lttng stop "$session" >"$dir/lttng_stop.txt" 2>&1
  lttng list "$session" >"$dir/lttng_list.txt" 2>&1
  lttng destroy "$session" >/dev/null 2>&1
  local listed
  listed="$(grep -E 'Discarded events:' "$dir/lttng_list.txt" | grep -oE '[0-9]+' |
    awk '{ s += $1 } END { print s + 0 }')"
  # Counted from the trace itself, by event name (and function for api_call / api_entry);
  # babeltrace2 reports discarded events as warnings on stderr.
  babeltrace2 "$dir/trace" 2>"$dir/babeltrace2.stderr" | awk '
    / nrtprof_peer:/ {
      match($0, /nrtprof_peer:[a-z_]+/); name = substr($0, RSTART + 13, RLENGTH - 13)
      total++
      if (match($0, /function = \( "[a-z_]+"/)) name = name "." substr($0, RSTART + 14, RLENGTH - 15)
      count[name]++
    }
    END { print "events", total + 0; for (n in count) print "events." n, count[n] }
  ' >"$dir/lttng_counts.txt"
  {
    echo "discarded_lttng_list $listed"
    echo "discarded_lttng_stop $(sum_discarded "$dir/lttng_stop.txt")"
    echo "discarded_babeltrace2 $(sum_discarded "$dir/babeltrace2.stderr")"
    echo "trace_bytes $(du -sb "$dir/trace" | cut -f1)"
  } >>"$dir/lttng_counts.txt"
  [ "${NRTPROF_BENCH_KEEP_TRACES:-0}" = 1 ] || rm -rf "$dir/trace"
  return "$code"
}

if [ "${1:-}" = "--record" ]; then
  [ $# -ge 2 ] || die "usage: run_lttng.sh --record DIR [--entry-exit] -- CMD ARGS..."
  dir="$2"
  shift 2
  entry_exit=0
  if [ "${1:-}" = "--entry-exit" ]; then
    entry_exit=1
    shift
  fi
  [ "${1:-}" = "--" ] || die "usage: run_lttng.sh --record DIR [--entry-exit] -- CMD ARGS..."
  shift
  [ $# -ge 1 ] || die "no command to run"
  record "$dir" "$entry_exit" "$@"
  exit $?
fi

need_tools
exec "$ROOT/bench/micro/run_micro.sh" --configs plain,nrtprof,lttng,lttng_entry_exit "$@"
