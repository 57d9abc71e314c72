#!/usr/bin/env bash
# nrtprof export of a large capture (issue 42: "export of a 3 M-event capture <= 2 s on one
# core"). Makes the capture as bench/load/run_load.sh does — a private nrtprofd and
# nrtprof_loadgen sending EVENTS synthetic events (ranges, runtime calls, executions with their
# device work) over STREAMS processes — then times `nrtprof export` of it to pprof (.pb.gz) and
# to folded stacks, pinned to one core, with GNU time. Prints the figures; asserts nothing.
#
#   bench/export/run_export.sh                       # 3,000,000 events, 4 processes
#   EVENTS=500000 RUNS=1 bench/export/run_export.sh  # smaller and quicker (RUNS: timed runs, 2)
#   NRTPROF_BIN=DIR bench/export/run_export.sh       # binaries built under DIR
#   USER_BUILD=1 bench/export/run_export.sh          # nrtprof as a user installs it (--config=opt)
#   OPTIMIZED=1 bench/export/run_export.sh           # also the phases built with g++ -O2
#   CAPTURE=DIR bench/export/run_export.sh           # the capture in DIR, made there if missing
#   OPTIMIZED=1 SOURCES=DIR bench/export/run_export.sh  # the -O2 phases of another checkout's
#                                                      # sources (git archive REV | tar -x -C DIR)
#
# By default it uses the default (fastbuild, unoptimized) build: bazel-out/k8-fastbuild/bin.
# USER_BUILD=1 builds nrtprof as packaging/install.sh says a user does (bazel build
# --config=opt) and times that one (bazel-out/k8-opt/bin; the daemon and load generator stay
# fastbuild). Then nrtprof_export_phases says where the time went: reading trace.pftrace and its
# packets, the Trace rebuilt, the stacks, the files. With OPTIMIZED=1 the same program is
# compiled by g++ -O2 straight from the sources (outside Bazel, into a temporary folder), for
# the phases of an optimized nrtprof.
set -euo pipefail

cd "$(dirname "$0")/../.."
EVENTS=${EVENTS:-3000000}
STREAMS=${STREAMS:-4}
SOURCES=${SOURCES:-.}
if [[ -z "${NRTPROF_BIN:-}" ]]; then
  bazel build //daemon:nrtprofd //bench:nrtprof_loadgen //bench:nrtprof_export_phases \
    //client:nrtprof >&2
  NRTPROF_BIN=bazel-out/k8-fastbuild/bin
fi
NRTPROF=$NRTPROF_BIN/client/nrtprof
if [[ -n "${USER_BUILD:-}" ]]; then
  bazel build --config=opt //client:nrtprof >&2
  NRTPROF=bazel-out/k8-opt/bin/client/nrtprof
fi
cpu=(taskset -c 0)
if ! command -v taskset >/dev/null; then cpu=(); fi
gnu_time=/usr/bin/time
[[ -x $gnu_time ]] || { echo "run_export: needs GNU time (apt-get install time)" >&2; exit 1; }

work=$(mktemp -d /tmp/nrtprof-export.XXXXXX)
daemon_pid=
cleanup() {
  if [[ -n "$daemon_pid" ]]; then kill "$daemon_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# The capture: pftrace and summary only (trace.json is ~200 bytes an event and export reads the
# pftrace).
cap=${CAPTURE:-$work/cap}
if [[ ! -f "$cap/trace.pftrace" ]]; then
  mkfifo "$work/ready"
  "$NRTPROF_BIN/daemon/nrtprofd" --socket="$work/d.sock" --output_root="$work/out" \
    --max_events_per_process=$((EVENTS * 2)) --ready_fd=3 3>"$work/ready" &
  daemon_pid=$!
  read -r -t 30 line <"$work/ready" || true
  [[ "${line:-}" == ready ]] || { echo "run_export: nrtprofd did not start" >&2; exit 1; }
  "$NRTPROF_BIN/bench/nrtprof_loadgen" --addr="unix:$work/d.sock" --streams="$STREAMS" \
    --events="$EVENTS" --output_dir="$cap" >"$work/load.txt"
  kill -TERM "$daemon_pid"
  wait "$daemon_pid" || true
  daemon_pid=
fi
events=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['events'])" \
  "$cap/summary.json")
pftrace_mb=$(($(stat -c %s "$cap/trace.pftrace") / 1048576))

echo "nrtprof export of a capture of $events events ($STREAMS processes, trace.pftrace $pftrace_mb MiB),"
echo "one core ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), nrtprof: $NRTPROF"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for format in pprof collapsed; do
  out=$work/profile.$([[ $format == pprof ]] && echo pb.gz || echo folded)
  for run in $(seq "${RUNS:-2}"); do
    "$gnu_time" -f "%e %U %S %M" -o "$work/time" "${cpu[@]}" "$NRTPROF" export \
      "$cap" --format "$format" -o "$out" 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
    read -r wall user sys rss <"$work/time"
    printf '  %-9s run %d: %6.2f s wall, %6.2f s CPU (user %.2f, sys %.2f), peak RSS %d MiB, %s\n' \
      "$format" "$run" "$wall" "$(echo "$user + $sys" | bc)" "$user" "$sys" $((rss / 1024)) \
      "$(du -h "$out" | cut -f1)"
  done
done
tail -1 "$work/err" | sed 's/^/  /'
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "Phases, one core, $NRTPROF_BIN/bench/nrtprof_export_phases:"
"${cpu[@]}" "$NRTPROF_BIN/bench/nrtprof_export_phases" "$cap"

if [[ -n "${OPTIMIZED:-}" ]]; then
  gen=bazel-out/k8-fastbuild/bin  # the generated protobuf code (the same at any -O)
  system=$(bazel info output_base 2>/dev/null)/external/system/BUILD
  libs() { grep -A1 "name = \"$1\"," "$system" | tail -1 | grep -o '"-l[^"]*"' | tr -d '"'; }
  # shellcheck disable=SC2046
  (cd "$SOURCES" && g++ -O2 -DNDEBUG -std=c++17 -I. -I"$OLDPWD/$gen" -o "$work/export_phases_O2" \
    bench/export/export_phases.cc trace/perfetto_trace_reader.cc trace/trace_from_pftrace.cc \
    trace/call_ranges.cc trace/api_function.cc trace/trace_lanes.cc trace/async_requests.cc \
    trace/huge_page_allocator.cc trace/trace_name.cc trace/summary.cc trace/summary_json.cc \
    trace/atomic_file.cc trace/pprof_export.cc common/json_text.cc \
    "$OLDPWD/$gen/proto/perfetto_trace.pb.cc" "$OLDPWD/$gen/proto/summary_file.pb.cc" \
    "$OLDPWD/$gen/proto/nrtprof.pb.cc" "$OLDPWD/$gen/proto/pprof/profile.pb.cc" \
    -lprotobuf $(libs absl) $(libs absl_hash) -ldeflate -lz -lpthread)
  echo
  echo "Phases, one core, g++ -O2 ($SOURCES):"
  "${cpu[@]}" "$work/export_phases_O2" "$cap"
fi
