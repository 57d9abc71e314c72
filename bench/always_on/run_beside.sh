#!/bin/bash
# What an always-on profiler takes beside a busy program (issue 14): `exec_rate` at
# NRT_SIM_TIME_SCALE=0.01 (~10,000 nrt_execute/s) in interleaved rounds of
#   plain       without a profiler
#   sys_trace   the program runs the runtime's system trace itself (no nrtprof)
#   standing    preloaded with the shim against a standing nrtprofd (flight recorder on, no
#               capture asked for), once per build given (BUILD=DIR: DIR holds
#               libnrtprof_shim.so, libnrtprof_shim_backend.so and nrtprofd)
# and, in each run, the CPU time over 2 s from 0.5 s on (--start; /proc/PID/task/TID/schedstat) of:
# the program's nrtprof-flush thread, its other non-main threads (gRPC's; with --sys_trace
# the program's own fetching thread: the simulated runtime writing its trace document), and
# every thread of the daemon; per call, medians over the rounds.
#
#   bench/always_on/run_beside.sh [--rounds N] [--seconds S] [--start S] NAME=DIR [NAME=DIR ...]
#   e.g. bench/always_on/run_beside.sh --rounds 7 main=/tmp/main-bin this=/tmp/this-bin
#        bench/always_on/run_beside.sh --seconds 7 --start 4.2 ...   (once the rings' pages are in)
#
# The benchmark binaries come from bazel-out/k8-opt/bin (bazel build --config=opt //bench:all).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=bazel-out/k8-opt/bin
rounds=5
seconds=3
start=0.5
builds=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --start) start="$2"; shift 2 ;;
    *=*) builds+=("$1"); shift ;;
    *) echo "usage: $0 [--rounds N] [--seconds S] [--start S] NAME=DIR [NAME=DIR ...]" >&2; exit 2 ;;
  esac
done
[ ${#builds[@]} -gt 0 ] || { echo "$0: give at least one NAME=DIR" >&2; exit 2; }
awk -v s="$seconds" -v t="$start" 'BEGIN { exit !(s >= t + 2.3) }' ||
  { echo "$0: --seconds must leave the 2 s window from --start inside the run" >&2; exit 2; }
for b in "${builds[@]}"; do
  for f in libnrtprof_shim.so libnrtprof_shim_backend.so nrtprofd; do
    [ -e "${b#*=}/$f" ] || { echo "$0: ${b#*=}/$f is missing" >&2; exit 2; }
  done
done
[ -x $bin/bench/exec_rate ] || { echo "$0: build --config=opt //bench:all first" >&2; exit 2; }

# A Bazel server left running beside the program takes CPU of its own (its JVM: 1.9% of a CPU in
# the 20 s after a build, 0.55% a minute later, measured 2026-12-05): as much as what is measured.
if pgrep -f '^bazel[(]' > /dev/null; then
  echo "$0: warning: a Bazel server is running beside the benchmark (bazel shutdown first)" >&2
fi
work="$(mktemp -d /tmp/nrtprof-beside-XXXXXX)"
daemons=()  # the daemons this script started, stopped (by pid) at its end
trap '[ ${#daemons[@]} -eq 0 ] || kill "${daemons[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT

declare -A sock dpid
for b in "${builds[@]}"; do
  name="${b%%=*}"; dir="${b#*=}"
  "$dir/nrtprofd" --socket "$work/$name.sock" --output_root "$work/$name-caps" --quiet &
  dpid[$name]=$!; daemons+=($!); sock[$name]="$work/$name.sock"
done
for name in "${!sock[@]}"; do
  for _ in $(seq 50); do [ -S "${sock[$name]}" ] && break; sleep 0.1; done
done

# Per-thread CPU (ns) of process $1, one "tid comm ns" line each.
threads() {
  local t c ns rest
  for t in /proc/"$1"/task/*; do
    { read -r c < "$t/comm" && read -r ns rest < "$t/schedstat"; } 2>/dev/null || continue
    echo "${t##*/} ${c// /_} $ns"
  done
}

# One run: prints "rate flusher_us others_us daemon_us" per call.
run() {  # $1: label, $2: daemon pid or "", then the command's environment and arguments
  local label="$1" daemon="$2"; shift 2
  local out="$work/out"
  env "$@" > "$out" 2>/dev/null &
  local pid=$!
  sleep "$start"
  threads $pid > "$work/p0"; [ -n "$daemon" ] && threads "$daemon" > "$work/d0"
  sleep 2
  threads $pid > "$work/p1"; [ -n "$daemon" ] && threads "$daemon" > "$work/d1"
  wait $pid
  local rate; rate="$(awk 'NR == 1 {print $6}' "$out")"
  local dns=0
  [ -n "$daemon" ] && dns="$(join "$work/d0" "$work/d1" | awk '{s += $5 - $3} END {printf "%d", s}')"
  join "$work/p0" "$work/p1" | awk -v pid=$pid -v r="$rate" -v d="$dns" -v l="$label" '
    $1 == pid {next}
    $2 == "nrtprof-flush" {f += $5 - $3; next}
    {o += $5 - $3}
    END {calls = r * 2; printf "%s %.1f %.3f %.3f %.3f\n", l, r, f / 1000 / calls, o / 1000 / calls, d / 1000 / calls}'
}

results="$work/results"
: > "$results"
exec_rate=(NRT_SIM_TIME_SCALE=0.01 $bin/bench/exec_rate "$seconds")
for i in $(seq "$rounds"); do
  run plain "" "${exec_rate[@]}" >> "$results"
  run sys_trace "" "${exec_rate[@]}" --sys_trace >> "$results"
  for b in "${builds[@]}"; do
    name="${b%%=*}"; dir="${b#*=}"
    run "standing:$name" "${dpid[$name]}" LD_PRELOAD="$dir/libnrtprof_shim.so" \
      NRTPROF_ADDR="unix:${sock[$name]}" "${exec_rate[@]}" >> "$results"
  done
done

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $rounds rounds of exec_rate $seconds; CPU over 2 s from $start s of each run"
printf '%-22s %10s %8s %12s %12s %12s   %s\n' "" "calls/s" "lost" "flusher" "other thr." "daemon" "(rates; CPU in us per call, medians)"
plain_median="$(awk '$1 == "plain" {print $2}' "$results" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')"
for label in plain sys_trace $(for b in "${builds[@]}"; do echo "standing:${b%%=*}"; done); do
  awk -v l="$label" -v p="$plain_median" '
    function median(v, n,   i, j, t) {
      for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j-1] > v[j]; j--) { t = v[j]; v[j] = v[j-1]; v[j-1] = t }
      return v[int((n + 1) / 2)]
    }
    $1 == l {n++; r[n] = $2; f[n] = $3; o[n] = $4; d[n] = $5; rates = rates " " int($2)}
    END {
      m = median(r, n)
      printf "%-22s %10.0f %7.2f%% %12.3f %12.3f %12.3f   (%s)\n", l, m, (p - m) / p * 100, median(f, n), median(o, n), median(d, n), substr(rates, 2)
    }' "$results"
done
