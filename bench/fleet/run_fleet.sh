#!/bin/bash
# The fleet store's benchmark (BENCHMARKS.md, "The fleet store"). Prints figures, asserts nothing.
#
#  1. Query: one hour of 16 hosts x 64 processes x 50 ops at 10 s resolution, 18,432,000 rows of
#     fleet_ops (docs/fleet_schema.sql), generated inside a private ClickHouse (Debian's
#     clickhouse-server on loopback, a temporary folder) with INSERT ... SELECT FROM numbers();
#     then each `nrtprof fleet top` below is run --rounds times, wall time per run (the CLI's
#     whole run: start, HTTP, ClickHouse's query, printing).
#  2. Export cost: an nrtprofd with --clickhouse_url (the default 10 s period) and --processes
#     copies of the RMSNorm example looping under it for --seconds; the CPU time of its threads
#     fleet-export (the fold of the flight recorder's batches, the rows, their JSON) and
#     fleet-send (HTTP to ClickHouse), from /proc/PID/task/TID/schedstat, per export and per row.
#
# usage: bench/fleet/run_fleet.sh [--rounds N] [--processes P] [--seconds S] [--no-build]
#                                [--only query|export]
set -euo pipefail

rounds=7
processes=8
seconds=65
build=1
only=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --processes) processes=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    --only) only=$2; shift 2 ;;
    *) echo "usage: $0 [--rounds N] [--processes P] [--seconds S] [--no-build] [--only query|export]" >&2
       exit 2 ;;
  esac
done
cd "$(dirname "$0")/../.."
if [[ ${build} == 1 ]]; then
  bazel build --config=opt --disk_cache=/root/.cache/nrtprof-disk-cache //daemon:nrtprofd \
    //client:nrtprof //shim:libnrtprof_shim.so //examples:rmsnorm
fi
readonly BIN=bazel-out/k8-opt/bin
readonly WORK="$(mktemp -d /tmp/nrtprof-fleet-bench.XXXXXX)"
readonly PORTS_FILE="${WORK}/ports"
pids=()
clickhouse_pid=""
trap 'for p in "${pids[@]}" ${clickhouse_pid}; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null || true; done; rm -rf "${WORK}"' EXIT
source tests/fleet/clickhouse_local.sh
clickhouse_local_start "${WORK}/ch" || { echo "clickhouse-server did not start" >&2; exit 1; }
sql() { curl -sS --max-time 600 --data-binary "$1" "${CLICKHOUSE_URL}/?database=nrtprof"; }

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) vCPUs;" \
  "ClickHouse $(curl -s "${CLICKHOUSE_URL}/?query=SELECT%20version()")"

# The schema as the daemon runs it: docs/fleet_schema.sql, statement by statement.
curl -sS --data-binary "CREATE DATABASE IF NOT EXISTS nrtprof" "${CLICKHOUSE_URL}/"
python3 - docs/fleet_schema.sql <<'PY' | while IFS= read -r -d $'\0' statement; do sql "${statement}"; done
import sys
text = "\n".join(l.split("--")[0] for l in open(sys.argv[1]))
for s in text.split(";"):
    if s.strip():
        sys.stdout.write(s.strip() + "\0")
PY

if [[ "${only}" != export ]]; then
# 1. One hour: 360 periods x 16 hosts x 64 processes x 50 ops, ending 20 minutes from now (so
# that --since 1h covers all of it while the rows are made and the queries run; on a busy
# machine the generation alone took 6 minutes).
readonly ROWS=$((360 * 16 * 64 * 50))
start=$(($(date +%s) - 3600 + 1200))
t0=$(date +%s%N)
sql "INSERT INTO fleet_ops SELECT
  toDateTime(${start} + intDiv(number, 51200) * 10),
  concat('trn1-', toString(intDiv(number % 51200, 3200))),
  toUInt32(1000 + intDiv(number % 3200, 50)),
  'train.py',
  concat('model_', toString(number % 50 % 8)),
  concat('aten::op', toString(number % 50)),
  toUInt64(5 + rand() % 20),
  toUInt64(rand() % 2000000),
  toUInt64((number % 50 + 1) * 20000 + rand() % 10000),
  toUInt64(5 + number % 20),
  [0, 0, 0, 0, toUInt64(5 + number % 20), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
  'bench',
  intDiv(number, 51200)
FROM numbers(${ROWS})"
t1=$(date +%s%N)
echo "generated ${ROWS} rows in $(( (t1 - t0) / 1000000 )) ms;" \
  "$(sql "SELECT count() FROM system.parts WHERE database = 'nrtprof' AND table = 'fleet_ops' AND active") active parts," \
  "$(sql "SELECT formatReadableSize(sum(bytes_on_disk)) FROM system.parts WHERE database = 'nrtprof' AND table = 'fleet_ops' AND active") on disk"
in_hour=$(sql "SELECT count() FROM fleet_ops WHERE time > now() - 3600")
echo "rows in the last hour: ${in_hour}"

time_query() {
  local label=$1
  shift
  local times=()
  for _ in $(seq "${rounds}"); do
    local a b
    a=$(date +%s%N)
    "${BIN}/client/nrtprof" fleet top --clickhouse_url "${CLICKHOUSE_URL}" "$@" >"${WORK}/out"
    b=$(date +%s%N)
    times+=($(( (b - a) / 1000000 )))
  done
  local sorted
  sorted=$(printf '%s\n' "${times[@]}" | sort -n)
  printf '  %-58s median %5d ms  min %5d ms  max %5d ms  (%d rows out)\n' "fleet top $label" \
    "$(echo "${sorted}" | sed -n "$(( (rounds + 1) / 2 ))p")" "$(echo "${sorted}" | head -1)" \
    "$(echo "${sorted}" | tail -1)" "$(($(wc -l <"${WORK}/out") - 2))"
}
echo "query times, ${rounds} runs each (fleet top's text table: header and total line not counted):"
time_query "--since 1h --by op" --since 1h --by op
time_query "--since 1h --by model" --since 1h --by model
time_query "--since 1h --by host" --since 1h --by host
time_query "--since 1h --by process --limit 20" --since 1h --by process --limit 20
time_query "--since 1h --by op --where host=trn1-3" --since 1h --by op --where host=trn1-3
head -5 "${WORK}/out" | sed 's/^/    /'
echo "  (the last one's first lines)"
fi
[[ "${only}" == query ]] && exit 0

# 2. The export's cost to the daemon.
mkdir -p "${WORK}/d"
"${BIN}/daemon/nrtprofd" --socket "${WORK}/d/d.sock" --output_root "${WORK}/d/caps" \
  --clickhouse_url "${CLICKHOUSE_URL}" --clickhouse_database nrtprof_export --fleet_host bench \
  2>"${WORK}/d.err" &
daemon=$!
pids+=(${daemon})
for _ in $(seq 100); do grep -q "fleet store: exporting" "${WORK}/d.err" && break; sleep 0.1; done
for _ in $(seq "${processes}"); do
  LD_PRELOAD="${PWD}/${BIN}/shim/libnrtprof_shim.so" NRTPROF_ADDR="unix:${WORK}/d/d.sock" \
    "${BIN}/examples/rmsnorm" --variant naive --iters 1000000 >/dev/null 2>&1 &
  pids+=($!)
done
thread_ns() {  # thread_ns NAME: CPU ns of the daemon's thread NAME so far
  for t in /proc/${daemon}/task/*; do
    if [[ "$(cat "$t/comm")" == "$1" ]]; then cut -d' ' -f1 "$t/schedstat"; fi
  done
}
all_ns() { awk '{printf "%.0f\n", ($14 + $15) * 10000000}' "/proc/${daemon}/stat"; }
# From the first export on (the daemon makes its tables then).
for _ in $(seq 60); do
  [[ "$(sql "EXISTS TABLE nrtprof_export.fleet_ops" 2>/dev/null)" == 1 ]] &&
    [[ "$(sql "SELECT count() FROM nrtprof_export.fleet_ops")" -gt 0 ]] && break
  sleep 1
done
status() { "${BIN}/client/nrtprof" status --json --addr "unix:${WORK}/d/d.sock"; }
e0=$(thread_ns fleet-export); s0=$(thread_ns fleet-send); a0=$(all_ns); status >"${WORK}/s0"
r0=$(sql "SELECT count(), uniqExact(seq) FROM nrtprof_export.fleet_ops")
sleep "${seconds}"
e1=$(thread_ns fleet-export); s1=$(thread_ns fleet-send); a1=$(all_ns); status >"${WORK}/s1"
r1=$(sql "SELECT count(), uniqExact(seq) FROM nrtprof_export.fleet_ops")
rows=$(( $(echo "${r1}" | cut -f1) - $(echo "${r0}" | cut -f1) ))
exports=$(( $(echo "${r1}" | cut -f2) - $(echo "${r0}" | cut -f2) ))
echo "export cost: ${processes} processes (rmsnorm naive, looping) under one daemon for ${seconds} s:" \
  "${exports} batches, ${rows} rows inserted"
if [[ ${exports} -gt 0 && ${rows} -gt 0 ]]; then
  python3 - "${e0}" "${e1}" "${s0}" "${s1}" "${a0}" "${a1}" "${rows}" "${seconds}" \
    "${WORK}/s0" "${WORK}/s1" <<'PY'
import json, sys
e0, e1, s0, s1, a0, a1, rows, seconds = map(int, sys.argv[1:9])
st0, st1 = (json.load(open(f)) for f in sys.argv[9:11])
f0, f1 = st0["fleet_export"], st1["fleet_export"]
d = lambda k: int(f1.get(k, 0)) - int(f0.get(k, 0))
exports = d("exports")
events = int(st1["events_received"]) - int(st0["events_received"])
export, send, whole = e1 - e0, s1 - s0, a1 - a0
print(f"  {exports} exports; {events} events received meanwhile ({events / seconds:.0f}/s)")
print(f"  fleet-export thread (/proc):  {export / 1e6:8.2f} ms CPU, {export / exports / 1e6:7.2f} ms per export")
print(f"    of which the fold (status): {d('fold_cpu_ns') / 1e6:8.2f} ms, {d('fold_cpu_ns') / exports / 1e6:7.2f} ms per export "
      f"({d('fold_cpu_ns') / max(events, 1):.0f} ns per event; /metrics does the same fold)")
print(f"    the rows and their JSON:    {d('rows_cpu_ns') / 1e6:8.2f} ms, {d('rows_cpu_ns') / exports / 1e6:7.2f} ms per export, "
      f"{d('rows_cpu_ns') / rows / 1e3:.2f} us per row")
print(f"  fleet-send thread (/proc):    {send / 1e6:8.2f} ms CPU, {send / exports / 1e6:7.2f} ms per export, "
      f"{send / rows / 1e3:.2f} us per row (status: {d('send_cpu_ns') / 1e6:.2f} ms)")
print(f"  the whole daemon meanwhile:   {whole / 1e6:8.0f} ms CPU ({100 * whole / 1e9 / seconds:.1f}% of a core); "
      f"the export's threads {100 * (export + send) / whole:.1f}% of it")
PY
fi
