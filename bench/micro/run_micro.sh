#!/usr/bin/env bash
# The per-call cost of nrtprof, measured with Google Benchmark (bench/micro/micro_bench.cc): the
# same binary run once per configuration, configurations interleaved in rounds so that a slow
# minute of this shared VM hits them all alike, and the medians printed side by side:
#
#   plain              no tracer
#   plain_threaded     no tracer, the process made multi-threaded first (micro_bench
#                      --start_thread=1), as it is under any tracer; the bursty pattern's
#                      processes always are
#   nrtprof            under the shim, via `nrtprof run` against a private nrtprofd, stacks off
#   nrtprof_stacks16   the same with NRTPROF_STACKS=16 (`nrtprof run --stacks 16`)
#   lttng              under the LTTng-UST peer (bench/lttng/run_lttng.sh --record): one event
#                      per call
#   lttng_entry_exit   the peer with an entry event as well, as LTTng gets durations
#   nrtprof_alt        like nrtprof, with the shim in the folder NRTPROF_BENCH_ALT_SHIM_DIR
#                      (another build's bazel-out/k8-opt/bin/shim): before and after in one run
#
# Every run's loss is checked: the calls the benchmark made against what each tool recorded,
# and the tool's own count of what it dropped or discarded.
#
#   bench/micro/run_micro.sh [--pattern repetitions|bursty] [--rounds N] [--repetitions N]
#                            [--calls N] [--settle_ms MS] [--configs LIST|all] [--no-build]
#                            [--out DIR] [--call tensor_write|execute_schedule|is_completed]
#                            [--live_thread] [--time_scale S] [--paired | --interleaved]
#
# --pattern repetitions (the default): Google Benchmark's repetitions of --calls calls, each
# followed by a --settle_ms pause, and the clock reads for reference.
# --pattern bursty (bench/micro/burst_bench.cc): the pattern of a training program, in one
# process per configuration and round: bursts of --calls nrt_tensor_write calls after a
# --settle_ms pause and after a 20 ms one, the same calls in one continuous run (a burst right
# after another), and a new thread's first --calls calls; --repetitions bursts of each.
# --evict_mib N (bursty only): the benchmark writes N MiB at the end of each long pause, as a
# program's other work would, so that the burst after it finds the caches cold.
# --call (bursty only; issue 38): what a burst calls (burst_bench --call). tensor_write (the
# default); execute_schedule: nrta_execute_schedule of a tiny model, NRT_SIM_TIME_SCALE=0 (or
# --time_scale) and NRT_SIM_ASYNC_QUEUE_DEPTH=4096, --calls default 1000; is_completed:
# nrta_is_completed polls of a request held in flight, NRT_SIM_TIME_SCALE=1000 (one execution of
# the tiny model, ~370 us of device time, then lasts ~0.37 s, through a round's pauses), --calls
# default 10000.
# --live_thread (bursty only): every process keeps a second thread alive, blocked, as a
# framework process does (burst_bench --live_thread=1).
# --paired (bursty only): each round twice, calling the tracer's wrappers and libnrt's own
# functions (burst_bench --paired=1); the report adds what the wrapper adds, paired in-process.
# --interleaved (bursty only): the same pairing call by call within each burst, each call timed
# alone (burst_bench --paired=2): for nrta_execute_schedule, whose own cost varies by hundreds
# of ns from burst to burst.
# --drop_ring_mappings (bursty only): the benchmark drops its mappings of the shim's rings
# file at the start of each long pause, as a host reclaiming a sleeping guest's mappings would.
#
# Defaults: plain,nrtprof,nrtprof_stacks16 (bench/lttng/run_lttng.sh runs the LTTng side by
# side; `--configs all` puts all five in one table); 3 rounds x 5 repetitions x 10000 calls,
# 150 ms settle: about 15 s per configuration. Raw results (Google Benchmark JSON,
# summary.json, LTTng counts) stay in --out (default: a new /tmp/nrtprof-micro.XXXXXX); the
# traces themselves are deleted once counted (NRTPROF_BENCH_KEEP_TRACES=1 keeps them).
# NRTPROF_RING_EVENTS, if set, reaches the shim. NRTPROF_BENCH_CPU=N runs each benchmark process
# (all its threads: the shim's and LTTng-UST's in it too, not the daemons) on CPU N only
# (taskset): on the project's 2-vCPU VM the wrapper's cost differs from one vCPU to the other
# (BENCHMARKS.md, issue 38). Prints figures; asserts nothing about time.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT" || exit 2

pattern=repetitions
evict_mib=0
drop_ring_mappings=0
call=tensor_write
live_thread=0
paired=0
time_scale=""
rounds=3
repetitions=""
calls=""
settle_ms=150
configs=""
build=1
out=""

usage() {
  sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 2
}

while [ $# -gt 0 ]; do
  case "$1" in
    --pattern) pattern="${2:-}"; shift $(($# > 1 ? 2 : 1)) ;;
    --evict_mib) evict_mib="${2:-}"; shift $(($# > 1 ? 2 : 1)) ;;
    --drop_ring_mappings) drop_ring_mappings=1; shift ;;
    --call) call="${2:-}"; shift $(($# > 1 ? 2 : 1)) ;;
    --live_thread) live_thread=1; shift ;;
    --paired) paired=1; shift ;;
    --interleaved) paired=2; shift ;;
    --time_scale) time_scale="${2:-}"; shift $(($# > 1 ? 2 : 1)) ;;
    --rounds) rounds="${2:-}"; shift $(($# > 1 ? 2 : 1)) ;;
    --repetitions) repetitions="${2:-}"; shift $(($# > 1 ? 2 : 1)) ;;
    --calls) calls="${2:-}"; shift $(($# > 1 ? 2 : 1)) ;;
    --settle_ms) settle_ms="${2:-}"; shift $(($# > 1 ? 2 : 1)) ;;
    --configs) configs="${2:-}"; shift $(($# > 1 ? 2 : 1)) ;;
    --no-build) build=0; shift ;;
    --out) out="${2:-}"; shift $(($# > 1 ? 2 : 1)) ;;
    -h | --help) usage ;;
    *) echo "run_micro.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
case "$pattern" in
  repetitions) [ -z "$repetitions" ] && repetitions=5 ;;
  bursty) [ -z "$repetitions" ] && repetitions=10 ;;
  *) echo "run_micro.sh: unknown pattern '$pattern'" >&2; exit 2 ;;
esac
case "$call" in
  tensor_write) [ -z "$calls" ] && calls=10000; scale_default=0 ;;
  execute_schedule) [ -z "$calls" ] && calls=1000; scale_default=0 ;;
  is_completed) [ -z "$calls" ] && calls=10000; scale_default=1000 ;;
  *) echo "run_micro.sh: unknown call '$call'" >&2; exit 2 ;;
esac
[ -z "$time_scale" ] && time_scale="$scale_default"
if [ "$pattern" != bursty ] &&
  { [ "$call" != tensor_write ] || [ "$live_thread" = 1 ] || [ "$paired" != 0 ]; }; then
  echo "run_micro.sh: --call, --live_thread and --paired are for --pattern bursty" >&2
  exit 2
fi
for n in "$rounds" "$repetitions" "$calls"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "run_micro.sh: '$n' is not a positive number" >&2; exit 2; }
done
[[ "$evict_mib" =~ ^[0-9]+$ ]] || { echo "run_micro.sh: '$evict_mib' is not a number" >&2; exit 2; }
[[ "$settle_ms" =~ ^[0-9]+$ ]] || { echo "run_micro.sh: '$settle_ms' is not a number" >&2; exit 2; }

have_lttng=0
if command -v lttng >/dev/null && command -v lttng-sessiond >/dev/null &&
  command -v babeltrace2 >/dev/null && { [ -f /usr/include/x86_64-linux-gnu/lttng/tracepoint.h ] ||
  [ -f /usr/include/lttng/tracepoint.h ]; }; then
  have_lttng=1
fi
[ -z "$configs" ] && configs="plain,nrtprof,nrtprof_stacks16"
[ "$configs" = all ] && configs="plain,plain_threaded,nrtprof,nrtprof_stacks16,lttng,lttng_entry_exit"
# The bursty pattern's plain run is multi-threaded already.
[ "$pattern" = bursty ] && configs="$(echo "$configs" | sed 's/,plain_threaded//; s/^plain_threaded,//')"
IFS=, read -r -a config_list <<<"$configs"
needs_lttng=0
needs_nrtprof=0
for c in "${config_list[@]}"; do
  case "$c" in
    plain | plain_threaded) ;;
    nrtprof | nrtprof_stacks16) needs_nrtprof=1 ;;
    nrtprof_alt)
      needs_nrtprof=1
      [ -f "${NRTPROF_BENCH_ALT_SHIM_DIR:-}/libnrtprof_shim.so" ] || {
        echo "run_micro.sh: nrtprof_alt needs NRTPROF_BENCH_ALT_SHIM_DIR (a folder with" \
          "libnrtprof_shim.so and its backend)" >&2
        exit 2
      } ;;
    lttng | lttng_entry_exit) needs_lttng=1 ;;
    *) echo "run_micro.sh: unknown configuration '$c'" >&2; exit 2 ;;
  esac
done
if [ "$needs_lttng" = 1 ] && [ "$have_lttng" = 0 ]; then
  echo "run_micro.sh: LTTng configurations need: apt-get install -y lttng-tools" \
    "liblttng-ust-dev babeltrace2" >&2
  exit 3
fi

started=$(date +%s)
if [ "$build" = 1 ]; then
  targets=(//bench:micro_bench //bench:burst_bench)
  [ "$needs_nrtprof" = 1 ] && targets+=(//shim:shim //daemon:nrtprofd //client:nrtprof)
  [ "$needs_lttng" = 1 ] && targets+=(//bench:libnrtprof_peer.so)
  echo "run_micro.sh: bazel build --config=opt ${targets[*]}" >&2
  bazel build --config=opt --noshow_progress "${targets[@]}" 2>&1 | grep -E '^(ERROR|WARNING)' >&2
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "run_micro.sh: build failed" >&2; exit 1; }
fi
# The opt configuration's own output folder: bazel-bin follows whichever configuration the last
# build in this tree used, and others build here too.
BIN="$ROOT/bazel-out/k8-opt/bin"
BENCH="$BIN/bench/micro_bench"
[ "$pattern" = bursty ] && BENCH="$BIN/bench/burst_bench"
[ -x "$BENCH" ] || { echo "run_micro.sh: $BENCH not built" >&2; exit 1; }

if [ -z "$out" ]; then
  out="$(mktemp -d /tmp/nrtprof-micro.XXXXXX)"
else
  mkdir -p "$out" || exit 2
  out="$(cd "$out" && pwd)"
fi

daemon_pid=""
sessiond_state="$out/lttng-sessiond.started"
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  if [ -n "$daemon_pid" ]; then
    kill "$daemon_pid" 2>/dev/null
    wait "$daemon_pid" 2>/dev/null
  fi
  # Only a session daemon this run started is stopped, by its pid.
  if [ -s "$sessiond_state" ]; then
    local pid
    pid="$(cat "$sessiond_state")"
    rm -f "$sessiond_state"
    if kill "$pid" 2>/dev/null; then
      for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
    fi
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A private nrtprofd on a socket of this run, so that no other daemon's load or captures mix in.
# Its per-process event limit is raised above what one benchmark process makes (~300k).
if [ "$needs_nrtprof" = 1 ]; then
  socket="$out/nrtprofd.sock"
  ready="$out/nrtprofd.ready"
  rm -f "$socket" "$ready"
  mkfifo "$ready" || exit 2
  "$BIN/daemon/nrtprofd" --socket="$socket" --output_root="$out/captures" \
    --max_events_per_process=100000000 --ready_fd=3 3>"$ready" 2>"$out/nrtprofd.log" &
  daemon_pid=$!
  line=""
  read -r -t 30 line <"$ready"
  rm -f "$ready"
  if [ "$line" != "ready" ]; then
    echo "run_micro.sh: nrtprofd did not start:" >&2
    cat "$out/nrtprofd.log" >&2
    exit 1
  fi
fi

export NRT_SIM_TIME_SCALE="$time_scale"
what="HOST tensor of 64 bytes"
if [ "$call" != tensor_write ]; then
  export NRT_SIM_ASYNC_QUEUE_DEPTH="${NRT_SIM_ASYNC_QUEUE_DEPTH:-4096}"
  what="call $call of a tiny model (16-float add), NRT_SIM_ASYNC_QUEUE_DEPTH=$NRT_SIM_ASYNC_QUEUE_DEPTH"
fi
[ "$live_thread" = 1 ] && what="$what; a second thread alive in every process"
{
  echo "nrtprof: ring ${NRTPROF_RING_EVENTS:-32768 (default)} 64-byte slots per thread, flusher every" \
    "25 ms, private nrtprofd; NRT_SIM_TIME_SCALE=$NRT_SIM_TIME_SCALE; $what${NRTPROF_BENCH_CPU:+; benchmark processes on CPU $NRTPROF_BENCH_CPU only}"
  echo "clock source: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource \
    2>/dev/null || echo '?'); TSC flags: $(grep -m1 -owE 'constant_tsc|nonstop_tsc|tsc_reliable' \
    /proc/cpuinfo | sort -u | tr '\n' ' ')"
} >"$out/settings.txt"
# The bursty pattern has 30,000 calls between two long pauses: LTTng's sub-buffers are made
# 1 MiB (4 MiB per CPU, the shim's ring is 2 MiB per thread) so that it need not discard.
[ "$pattern" = bursty ] && export NRTPROF_LTTNG_SUBBUF_SIZE="${NRTPROF_LTTNG_SUBBUF_SIZE:-1M}"
export NRTPROF_LTTNG_SESSIOND_STATE="$sessiond_state"
export NRTPROF_LTTNG_PEER="$BIN/bench/libnrtprof_peer.so"
if [ "$pattern" = bursty ]; then
  # A new thread every other round: repetitions/2 new-thread samples per process.
  bench_args=(--calls="$calls" --long_pause_ms="$settle_ms" --short_pause_ms=20
    --rounds="$repetitions" --new_thread_every=2 --evict_mib="$evict_mib"
    --drop_ring_mappings="$drop_ring_mappings" --call="$call" --live_thread="$live_thread"
    --paired="$paired")
  traced_only=()
else
  bench_args=(--calls="$calls" --settle_ms="$settle_ms" --benchmark_repetitions="$repetitions"
    --benchmark_format=json)
  traced_only=(--benchmark_filter='^(nrt_|range_)')
fi

pin=()
[ -n "${NRTPROF_BENCH_CPU:-}" ] && pin=(taskset -c "$NRTPROF_BENCH_CPU")
BENCH_CMD=(${pin[@]+"${pin[@]}"} "$BENCH")

run_one() {
  local config="$1" dir="$2"
  mkdir -p "$dir"
  case "$config" in
    plain)
      "${BENCH_CMD[@]}" "${bench_args[@]}" >"$dir/bench.json" 2>"$dir/stderr"
      ;;
    plain_threaded)
      "${BENCH_CMD[@]}" "${bench_args[@]}" --start_thread=1 >"$dir/bench.json" 2>"$dir/stderr"
      ;;
    nrtprof | nrtprof_stacks16 | nrtprof_alt)
      local stacks=0 shim="$BIN/shim/libnrtprof_shim.so"
      [ "$config" = nrtprof_stacks16 ] && stacks=16
      [ "$config" = nrtprof_alt ] && shim="$NRTPROF_BENCH_ALT_SHIM_DIR/libnrtprof_shim.so"
      NRTPROF_ADDR="unix:$socket" NRTPROF_SHIM="$shim" \
        "$BIN/client/nrtprof" run --out "$dir/capture" \
        --stacks "$stacks" -- "${BENCH_CMD[@]}" "${bench_args[@]}" ${traced_only[@]+"${traced_only[@]}"} \
        >"$dir/bench.json" 2>"$dir/stderr"
      local code=$?
      stat -c %s "$dir/capture/trace.pftrace" >"$dir/trace_bytes" 2>/dev/null
      [ "${NRTPROF_BENCH_KEEP_TRACES:-0}" = 1 ] ||
        rm -f "$dir/capture/trace.pftrace" "$dir/capture/trace.json"
      return "$code"
      ;;
    lttng | lttng_entry_exit)
      local flag=()
      [ "$config" = lttng_entry_exit ] && flag=(--entry-exit)
      "$ROOT/bench/lttng/run_lttng.sh" --record "$dir" "${flag[@]}" -- \
        "${BENCH_CMD[@]}" "${bench_args[@]}" ${traced_only[@]+"${traced_only[@]}"}
      local code=$?
      mv "$dir/stdout" "$dir/bench.json" 2>/dev/null
      return "$code"
      ;;
  esac
}

echo "run_micro.sh: $rounds rounds of ${config_list[*]}; $repetitions repetitions x $calls" \
  "calls each; results in $out" >&2
for ((round = 1; round <= rounds; round++)); do
  for config in "${config_list[@]}"; do
    t0=$(date +%s%N)
    if ! run_one "$config" "$out/round$round/$config"; then
      echo "run_micro.sh: round $round, $config failed; see $out/round$round/$config/stderr" >&2
    fi
    t1=$(date +%s%N)
    printf 'run_micro.sh: round %d %-17s %5.1f s\n' "$round" "$config" \
      "$(((t1 - t0) / 1000000000)).$((((t1 - t0) / 100000000) % 10))" >&2
  done
done

report="$ROOT/bench/micro/micro_report.py"
[ "$pattern" = bursty ] && report="$ROOT/bench/micro/bursty_report.py"
python3 "$report" --rounds "$rounds" --configs "$configs" "$out"
code=$?
echo "run_micro.sh: done in $(($(date +%s) - started)) s; raw results in $out" >&2
exit "$code"
