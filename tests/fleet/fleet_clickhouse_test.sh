#!/bin/bash
# The fleet store end to end, with real parts: Debian's clickhouse-server started here as a plain
# process on loopback (its own config, a temporary data folder, ports in 22000-22999), two
# nrtprofd standing for two hosts (--fleet_host hostA, hostB), each exporting every second
# (--clickhouse_export_ms 1000), and example programs preloaded with the shim by hand under each.
#
#  1. `nrtprof fleet top --by op` gives, op by op, the sum of the two daemons' own counts
#     (nrtprof_op_calls_total and nrtprof_op_device_seconds_total of their /metrics).
#  2. hostB reaches ClickHouse through a proxy that loses the answers of its first two inserts
#     after ClickHouse ran them: its daemon finds those batches in when it retries (status:
#     retries_found_in), and no row is in twice (no (daemon, seq, ..., op) twice).
#  3. ClickHouse killed (SIGKILL) while programs run under both daemons, started again from the
#     same folder: the rows buffered meanwhile arrive, and (1) holds again: nothing lost,
#     nothing counted twice.
#  4. A capture written by hostA's daemon is one row of fleet_captures.
# Skipped with a line where clickhouse-server is not installed or cannot start.
set -u

readonly FLEET_TEST=fleet
source "${TEST_SRCDIR}/nrtprof/tests/fleet/fleet_setup.sh"
source "${TEST_SRCDIR}/nrtprof/common/testing/checks.sh"
readonly PROXY_PORT=$(free_port)

sql() { curl -sS --max-time 20 --data-binary "$1" "${CLICKHOUSE_URL}/?database=nrtprof"; }
start_clickhouse() { clickhouse_local_start "${WORK}/ch"; }
if ! start_clickhouse; then
  echo "SKIP: clickhouse-server cannot run here: $(tail -3 "${WORK}/ch/server.log")"
  exit 0
fi
readonly CH_URL="${CLICKHOUSE_URL}"

python3 "${RUNFILES}/tests/fleet/answer_losing_proxy.py" "${PROXY_PORT}" "${CH_URL##*:}" 2 \
  >"${WORK}/proxy.log" 2>&1 &
pids+=($!)

# start_daemon NAME CLICKHOUSE_URL: a daemon standing for host NAME, its /metrics on a port of
# ours.
declare -A metrics_url
start_daemon() {
  local name=$1 url=$2 port
  port=$(free_port)
  "${NRTPROFD}" --socket "${WORK}/${name}/d.sock" --output_root "${WORK}/${name}/caps" \
    --metrics_listen "127.0.0.1:${port}" --clickhouse_url "${url}" --clickhouse_export_ms 1000 \
    --fleet_host "${name}" 2>"${WORK}/${name}.err" &
  pids+=($!)
  for _ in $(seq 100); do grep -q "fleet store: exporting" "${WORK}/${name}.err" && break; sleep 0.1; done
  grep -q "fleet store: exporting every 1000 ms to ${url}" "${WORK}/${name}.err" ||
    fail "${name}: no line saying where it exports: $(cat "${WORK}/${name}.err")"
  metrics_url[${name}]="http://127.0.0.1:${port}/metrics"
}
mkdir -p "${WORK}/hostA" "${WORK}/hostB"
start_daemon hostA "${CH_URL}"
start_daemon hostB "http://127.0.0.1:${PROXY_PORT}"

# run_on HOST ARGS...: an example program preloaded with the shim by hand, under HOST's daemon.
run_on() {
  local host=$1 program=$2
  shift 2
  LD_PRELOAD="${RUNFILES}/shim/libnrtprof_shim.so" NRTPROF_ADDR="unix:${WORK}/${host}/d.sock" \
    NRT_SIM_TIME_SCALE=0 "${RUNFILES}/examples/${program}" "$@" >>"${WORK}/${host}.programs" 2>&1 ||
    fail "${program} $* on ${host}: $(tail -3 "${WORK}/${host}.programs")"
}

# What the daemons counted themselves, summed over both, op by op: "op calls device_ns" lines.
hosts_own_counts() {
  for h in hostA hostB; do curl -s "${metrics_url[$h]}"; done | python3 -c '
import re, sys
calls, device = {}, {}
for line in sys.stdin:
    m = re.match(r"nrtprof_op_(calls|device_seconds)_total\{op=\"(.*)\"\} (\S+)$", line)
    if not m:
        continue
    if m.group(1) == "calls":
        calls[m.group(2)] = calls.get(m.group(2), 0) + int(m.group(3))
    else:
        device[m.group(2)] = device.get(m.group(2), 0) + round(float(m.group(3)) * 1e9)
for op in sorted(calls):
    print(op, calls[op], device.get(op, 0))
'
}
# The same from the fleet store, ops with calls only (device time nobody called for is its own
# row, "(uncorrelated)").
fleet_counts() {
  "${NRTPROF}" fleet top --clickhouse_url "${CH_URL}" --by op --format csv 2>&1 | python3 -c '
import csv, sys
rows = [r for r in csv.DictReader(sys.stdin) if int(r["calls"]) > 0]
for r in sorted(rows, key=lambda r: r["op"]):
    print(r["op"], r["calls"], r["device_ns"])
'
}
status_field() {  # status_field HOST FIELD: the daemon's fleet_export.FIELD
  "${NRTPROF}" status --json --addr "unix:${WORK}/$1/d.sock" |
    python3 -c "import json,sys; print(json.load(sys.stdin).get('fleet_export', {}).get('$2', 0))"
}
# Waits until the fleet store answers what the hosts counted (they export every second, a
# second after the events came), or 30 s.
fleet_matches_hosts() {
  for _ in $(seq 60); do
    own=$(hosts_own_counts)
    [[ -n "${own}" && "${own}" == "$(fleet_counts)" ]] && return 0
    sleep 0.5
  done
  return 1
}
# A daemon folds into /metrics (and into its fleet rows) only events received more than a second
# ago (CollectorCore::kMetricsSettleNs), so that an execution's device events have come in with
# it. The programs have exited, so the daemons hold all their events: past that second, the
# hosts' own counts are whole. Without this wait, the last program's host could still count
# nothing, and the store, having nothing of it either, would "equal" it.
compare() {
  local when=$1
  sleep 1.5
  if fleet_matches_hosts; then
    echo "${when}: fleet top --by op equals the two hosts' own counts ($(echo "${own}" | wc -l) ops)"
  else
    fail "${when}: the fleet store says (op calls device_ns)"$'\n'"$(fleet_counts)"$'\n'"the hosts counted"$'\n'"$(hosts_own_counts)"
  fi
}
# Every row once: no (daemon, seq, host, pid, executable, model, op) twice.
no_duplicates() {
  local all distinct
  all=$(sql "SELECT count() FROM fleet_ops")
  distinct=$(sql "SELECT count() FROM (SELECT DISTINCT daemon, seq, host, pid, executable, model, op FROM fleet_ops)")
  [[ "${all}" -gt 0 && "${all}" == "${distinct}" ]] || fail "$1: ${all} rows, ${distinct} distinct"
}

# 1 and 2: programs under both daemons.
run_on hostA rmsnorm --variant naive --iters 5
run_on hostB rmsnorm --variant naive --iters 3
run_on hostB rmsnorm --variant compiled --iters 4
compare "after the programs"
[[ "$(sql "SELECT groupUniqArray(host) FROM fleet_ops FORMAT TSV")" =~ hostA && \
   "$(sql "SELECT groupUniqArray(host) FROM fleet_ops FORMAT TSV")" =~ hostB ]] ||
  fail "hosts in the store: $(sql "SELECT groupUniqArray(host) FROM fleet_ops")"
no_duplicates "after lost answers"
by_host=$("${NRTPROF}" fleet top --clickhouse_url "${CH_URL}" --by host --format csv)
[[ $(echo "${by_host}" | grep -c '^host[AB],') == 2 ]] || fail "fleet top --by host: ${by_host}"
text=$("${NRTPROF}" fleet top --clickhouse_url "${CH_URL}" --where host=hostB --limit 3)
[[ $(echo "${text}" | sed -n 2p) == *aten::mul* && $(echo "${text}" | wc -l) == 5 ]] ||
  fail "fleet top --where host=hostB --limit 3: ${text}"

# 3: ClickHouse killed, programs run meanwhile, ClickHouse back.
kill -KILL "${clickhouse_pid}"
wait "${clickhouse_pid}" 2>/dev/null
run_on hostA rmsnorm --variant naive --iters 7
run_on hostB rmsnorm --variant fused --iters 6
for _ in $(seq 60); do
  [[ $(status_field hostA rows_buffered) -gt 0 && $(status_field hostB rows_buffered) -gt 0 ]] && break
  sleep 0.5
done
for h in hostA hostB; do
  [[ $(status_field $h rows_buffered) -gt 0 ]] || fail "$h buffered nothing while ClickHouse was away"
  "${NRTPROF}" status --addr "unix:${WORK}/$h/d.sock" | grep -q "^  failing: .*ClickHouse at" ||
    fail "$h: status does not say the export is failing: $("${NRTPROF}" status --addr "unix:${WORK}/$h/d.sock" | tail -2)"
done
curl -s "${metrics_url[hostA]}" | grep -q '^nrtprof_fleet_rows_buffered [1-9]' ||
  fail "/metrics shows no rows buffered"
start_clickhouse || fail "ClickHouse did not start again: $(tail -3 "${WORK}/ch/server.log")"
# The exporters retry with backoff (up to 30 s apart): wait until both have sent everything.
for _ in $(seq 120); do
  [[ $(status_field hostA rows_buffered) == 0 && $(status_field hostB rows_buffered) == 0 ]] && break
  sleep 0.5
done
compare "after ClickHouse was killed and started again"
no_duplicates "after the restart"
for h in hostA hostB; do
  [[ $(status_field $h rows_dropped) == 0 ]] || fail "$h dropped rows within the bound"
done
# Every insert whose answer the proxy lost was found in ClickHouse when retried.
lost=$(grep -c "lost the answer" "${WORK}/proxy.log")
found=$(status_field hostB retries_found_in)
[[ ${lost} -ge 1 && "${found}" == "${lost}" ]] ||
  fail "hostB's daemon found ${found} of the ${lost} inserts whose answers were lost"
grep -q "fleet store: ClickHouse at .* takes rows again" "${WORK}/hostA.err" ||
  fail "hostA's log does not say ClickHouse is back: $(cat "${WORK}/hostA.err")"

# 4: a capture's row (of a program just run: the flight recorder keeps 30 s).
run_on hostA rmsnorm --variant naive --iters 2
capture=$("${NRTPROF}" capture --last 30s --addr "unix:${WORK}/hostA/d.sock" --out "${WORK}/cap" 2>&1)
id=""
for _ in $(seq 40); do
  id=$(sql "SELECT capture_id FROM fleet_captures WHERE host = 'hostA' AND output_dir = '${WORK}/cap' AND has(files, 'trace.pftrace') FORMAT TSV")
  [[ -n "${id}" ]] && break
  sleep 0.25
done
[[ -n "${id}" ]] || fail "no fleet_captures row for the capture: ${capture}; $(sql "SELECT * FROM fleet_captures")"
[[ $(sql "SELECT top_ops[1] FROM fleet_captures WHERE capture_id = '${id}' FORMAT TSV") == aten::mul ]] ||
  fail "the capture's top op: $(sql "SELECT top_ops FROM fleet_captures")"
# Its processes' host is the name the fleet store knows this host by (it said the machine's
# hostname while `host` said hostA: issue 36).
[[ $(sql "SELECT hosts FROM fleet_captures WHERE capture_id = '${id}' FORMAT TSV") == "['hostA']" ]] ||
  fail "the capture's hosts: $(sql "SELECT host, hosts FROM fleet_captures WHERE capture_id = '${id}' FORMAT TSV")"

# By model: each model's executions and time per execution; ops without device time under a
# name that says so, not a blank one (issue 36).
by_model=$("${NRTPROF}" fleet top --clickhouse_url "${CH_URL}" --by model 2>&1)
echo "${by_model}" | head -1 | grep -q "Executions *per exec" ||
  fail "fleet top --by model's header: ${by_model}"
echo "${by_model}" | grep -q "^ *(no device time) " ||
  fail "fleet top --by model has no '(no device time)' row: ${by_model}"
echo "${by_model}" | tail -n +2 | grep -qE "^ *[0-9.]+(ns|us|ms|s) " &&
  fail "fleet top --by model has a blank name: ${by_model}"

# Bad input: one line, exit 2, nothing started.
out=$("${NRTPROFD}" --socket "${WORK}/bad.sock" --clickhouse_url ftp://x 2>&1); code=$?
[[ ${code} == 2 && $(echo "${out}" | wc -l) == 1 && "${out}" == *"not an http:// or https:// URL"* ]] ||
  fail "nrtprofd --clickhouse_url ftp://x: exit ${code}, ${out}"
out=$("${NRTPROF}" fleet top 2>&1 </dev/null); code=$?
[[ ${code} == 2 && "${out}" == "nrtprof fleet: no fleet store: give --clickhouse_url"* ]] ||
  fail "fleet top without a server: exit ${code}, ${out}"

finish "" "fleet store: fleet top equals the hosts' own counts, across lost answers and a ClickHouse restart"
