#!/usr/bin/env bash
# The daemon under load (issue 4: "at least 5 million events per second sustained on one core,
# from gRPC batches into trace.pftrace, nothing lost; 1, 4, 16 and 64 concurrent processes;
# bounded daemon memory"). For each P in 1 4 16 64: a private nrtprofd pinned to core 0, and
# nrtprof_loadgen on core 1 sending EVENTS synthetic events over P concurrent Collector
# streams as fast as the daemon acknowledges them, then StopCapture. Then the same events
# through the daemon's code without gRPC, phase by phase (nrtprof_pipeline_breakdown), and one
# run with glibc's malloc on transparent huge pages. Prints one table; asserts nothing.
#
#   bench/load/run_load.sh                  # builds with --config=opt, ~2 minutes
#   EVENTS=500000 bench/load/run_load.sh    # smaller and quicker
#   NRTPROF_BIN=DIR bench/load/run_load.sh  # use binaries already built under DIR (bazel-bin)
#
# Figures are explained in bench/README.md ("Daemon load").
set -euo pipefail

cd "$(dirname "$0")/../.."
EVENTS=${EVENTS:-2000000}
STREAMS=${STREAMS:-"1 4 16 64"}
start_s=$SECONDS

if [[ -z "${NRTPROF_BIN:-}" ]]; then
  # --symlink_prefix=/ leaves the bazel-* links alone (they keep pointing at the default build).
  bazel build --config=opt --symlink_prefix=/ //daemon:nrtprofd //bench:nrtprof_loadgen \
    //bench:nrtprof_pipeline_breakdown >&2
  NRTPROF_BIN=$(bazel info --config=opt bazel-bin 2>/dev/null)
fi
daemon_bin=$NRTPROF_BIN/daemon/nrtprofd
loadgen_bin=$NRTPROF_BIN/bench/nrtprof_loadgen
breakdown_bin=$NRTPROF_BIN/bench/nrtprof_pipeline_breakdown

# The daemon on core 0, the load on core 1 (the targets are per core).
daemon_cpu=(taskset -c 0)
load_cpu=(taskset -c 1)
if [[ $(nproc) -lt 2 ]] || ! command -v taskset >/dev/null; then
  echo "run_load: fewer than 2 cores or no taskset: daemon and load share the CPU" >&2
  daemon_cpu=()
  load_cpu=()
fi

work=$(mktemp -d /tmp/nrtprof-load.XXXXXX)
daemon_pid=
cleanup() {
  if [[ -n "$daemon_pid" ]]; then kill "$daemon_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# run_one P LABEL [VAR=value...]: one private daemon and one load, both with those variables
# set; appends the loadgen's RESULT line, labelled, to $work/results.
run_one() {
  local p=$1 label=$2
  shift 2
  local sock=$work/d$p.sock ready=$work/ready$p
  mkfifo "$ready"
  # Every process of the run holds up to EVENTS events: raise the per-process bound (default
  # 2,000,000) so that nothing is dropped for it when P=1.
  env "$@" "${daemon_cpu[@]}" "$daemon_bin" --socket="$sock" --output_root="$work/out" \
    --max_events_per_process=$((EVENTS * 2)) --ready_fd=3 3>"$ready" &
  daemon_pid=$!
  local line=
  read -r -t 30 line <"$ready" || true
  if [[ "$line" != ready ]]; then
    echo "run_load: nrtprofd did not start" >&2
    exit 1
  fi
  env "$@" "${load_cpu[@]}" "$loadgen_bin" --addr="unix:$sock" --streams="$p" --events="$EVENTS" \
    --daemon_pid="$daemon_pid" --output_dir="$work/cap$p" >"$work/load$p.txt"
  cat "$work/load$p.txt" >&2
  grep '^RESULT' "$work/load$p.txt" | sed "s/^RESULT/RESULT env=$label/" >>"$work/results"
  kill -TERM "$daemon_pid"
  wait "$daemon_pid" || true
  daemon_pid=
  rm -rf "$work/cap$p" "$ready"  # trace.json alone is ~200 bytes an event
}

for p in $STREAMS; do run_one "$p" default; done
run_one 4 hugetlb GLIBC_TUNABLES=glibc.malloc.hugetlb=1

echo
echo "nrtprofd under load: $EVENTS events per run, daemon pinned to core 0, nrtprof_loadgen on core 1"
echo "($(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
awk '
function v(k,   i, kv) { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) return kv[2] } return "" }
BEGIN {
  printf "%-8s %9s %9s %9s %7s %12s %11s %8s %12s %9s %8s %9s %8s %8s\n", "streams", "sent",
    "received", "in trace", "dropped", "ingest ev/s", "e2e ev/s", "stop s", "e2e ev/CPU-s",
    "peak RSS", "RSS B/ev", "RSS after", "pftr B/ev", "json B/ev"
}
{
  streams = v("streams"); if (v("env") != "default") streams = streams "*"
  cpu = v("daemon_cpu_ingest_s") + v("daemon_cpu_stop_s")
  printf "%-8s %9d %9d %9d %7d %12.0f %11.0f %8.2f %12.0f %6.0f MiB %8.0f %5.0f MiB %8.2f %8.1f\n",
    streams, v("sent"), v("received"), v("in_trace"), v("dropped"), v("ingest_eps"),
    v("e2e_eps"), v("stop_s"), (cpu > 0 ? v("sent") / cpu : 0), v("daemon_hwm_kb") / 1024,
    v("daemon_hwm_kb") * 1024 / v("sent"), v("daemon_rss_after_kb") / 1024, v("pftrace_bpe"),
    v("json_bpe")
}' "$work/results"
echo "  ingest: first batch sent -> last batch acknowledged; e2e: first batch -> StopCapture"
echo "  returned (correlated, trace.pftrace, trace.json, summaries and artifacts written)."
echo "  e2e ev/CPU-s: events per second of the daemon's own CPU time (user + system, ingest and"
echo "  stop): the one-core rate whatever else the machine runs. RSS after: the daemon's"
echo "  resident memory once StopCapture returned."
echo "  * with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (malloc on transparent huge pages)"
echo
echo "Where the time goes: the same events through the daemon's code on one core, without gRPC"
"${daemon_cpu[@]}" "$breakdown_bin" --events="$EVENTS" --processes=4 \
  --output_dir="$work/breakdown" | grep -v '^BREAKDOWN'
echo
echo "run_load.sh took $((SECONDS - start_s)) s"
