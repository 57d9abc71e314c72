#!/bin/bash
# A triggered capture's reason in the fleet store (issue 41), with real parts: Debian's
# clickhouse-server started here on loopback (as fleet_clickhouse_test), holding a store an
# older daemon made: a fleet_captures table without the trigger_ columns, and a row of its own.
#
#  1. nrtprofd with two trigger rules (a failed call; a step over 100 ms) and --clickhouse_url
#     brings the table up to date (it adds the columns the table lacks, and says so in its
#     log): the older row reads empty trigger columns, and no fleet_triggers table is made.
#  2. A training loop whose step 30 fails and whose step 45 is 200 ms: each rule's capture is a
#     fleet_captures row with the rule, the rule as written, the reason, the measured value and
#     the threshold; its trace.pftrace says it too (`nrtprof summary --from-trace`, read from the
#     "nrtprof triggers" track), with the instant where the slow step began.
#  3. A second daemon on the store now up to date (it adds nothing) and a capture someone asked
#     for: its row's trigger columns are empty.
#  4. A table made by hand that is no MergeTree (a cluster's Distributed table) and lacks the
#     columns is not altered: the daemon says what to add, in its log and status, and sends
#     nothing until it is added.
# Skipped with a line where clickhouse-server is not installed or cannot start.
set -u

readonly FLEET_TEST=fleet-triggers
source "${TEST_SRCDIR}/nrtprof/tests/fleet/fleet_setup.sh"
export NRTPROF_ADDR= LD_PRELOAD=
source "${TEST_SRCDIR}/nrtprof/common/testing/checks.sh"
if ! clickhouse_local_start "${WORK}/ch"; then
  echo "SKIP: clickhouse-server cannot run here: $(tail -3 "${WORK}/ch/server.log")"
  exit 0
fi
readonly CH_URL="${CLICKHOUSE_URL}"
server_sql() { curl -sS --max-time 20 --data-binary "$1" "${CH_URL}/"; }
sql() { curl -sS --max-time 20 --data-binary "$1" "${CH_URL}/?database=nrtprof"; }

# The store as a daemon of session 27 made it: fleet_captures without the trigger_ columns.
server_sql "CREATE DATABASE nrtprof"
sql "CREATE TABLE fleet_captures (time DateTime, host String, capture_id String,
  hosts Array(String), start_ms UInt64, end_ms UInt64, output_dir String, files Array(String),
  processes UInt32, events UInt64, events_dropped UInt64, top_ops Array(String),
  top_ops_device_ns Array(UInt64), daemon String, seq UInt64) ENGINE = ReplacingMergeTree
  PARTITION BY toYYYYMM(time) ORDER BY (time, host, capture_id, daemon, seq)"
sql "INSERT INTO fleet_captures (time, host, capture_id, daemon, seq)
  VALUES (now(), 'hostOld', 'old-capture', 'hostOld-1', 1)"
[[ $(sql "SELECT count() FROM fleet_captures") == 1 ]] ||
  fail "the older store was not made: $(sql "SELECT * FROM fleet_captures")"

# start_daemon NAME FLAGS...: a daemon standing for host NAME, exporting every second.
start_daemon() {
  local name=$1
  shift
  mkdir -p "${WORK}/${name}"
  "${NRTPROFD}" --socket "${WORK}/${name}/d.sock" --output_root "${WORK}/${name}/caps" \
    --clickhouse_url "${CH_URL}" --clickhouse_export_ms 1000 --fleet_host "${name}" "$@" \
    2>"${WORK}/${name}.err" &
  pids+=($!)
  for _ in $(seq 100); do grep -q "fleet store: exporting" "${WORK}/${name}.err" && break; sleep 0.1; done
  grep -q "fleet store: exporting" "${WORK}/${name}.err" ||
    fail "${name}: the daemon does not export: $(cat "${WORK}/${name}.err")"
}
# run_on HOST ARGS...: trigger_steps preloaded with the shim by hand, under HOST's daemon.
run_on() {
  local host=$1
  shift
  LD_PRELOAD="${RUNFILES}/shim/libnrtprof_shim.so" NRTPROF_ADDR="unix:${WORK}/${host}/d.sock" \
    NRT_SIM_TIME_SCALE=0 "${RUNFILES}/tests/trigger_steps" "$@" >>"${WORK}/${host}.programs" 2>&1 ||
    fail "trigger_steps $* on ${host}: $(tail -3 "${WORK}/${host}.programs")"
}

# 1 and 2: the rules' captures.
readonly ERRORS_RULE="errors: status != ok before 2s after 1s every 10m"
readonly SLOW_RULE="slow: step > 100 ms before 1s after 1s every 10m files pftrace,summary"
start_daemon hostT --trigger "${ERRORS_RULE}" --trigger "${SLOW_RULE}" --trigger_check_ms 500
run_on hostT 60 5 --fail 30 --slow 45 --factor 40
status=$(sed -n 's/^step 30: nrt_execute returned \([0-9]*\).*/\1/p' "${WORK}/hostT.programs")
[[ -n "${status}" && "${status}" != 0 ]] ||
  fail "step 30 did not fail: $(cat "${WORK}/hostT.programs")"
for _ in $(seq 120); do
  [[ $(sql "SELECT count() FROM fleet_captures WHERE trigger_rule != ''" 2>/dev/null) == 2 ]] && break
  sleep 0.25
done
rows=$(sql "SELECT trigger_rule, trigger_condition, trigger_reason, trigger_value_ns,
  trigger_threshold_ns, output_dir FROM fleet_captures WHERE host = 'hostT' ORDER BY trigger_rule
  FORMAT TSV")
[[ $(echo "${rows}" | wc -l) == 2 ]] ||
  fail "want the two rules' rows of hostT; fleet_captures has: $(sql "SELECT * FROM fleet_captures FORMAT TSV"); $(cat "${WORK}/hostT.err")"
IFS=$'\t' read -r rule condition reason value threshold errors_dir <<<"$(echo "${rows}" | sed -n 1p)"
[[ "${rule}" == errors && "${condition}" == "${ERRORS_RULE}" ]] ||
  fail "the errors rule's row: ${rows}"
[[ "${reason}" == *"(trigger_steps): nrt_execute returned status ${status} (NRT_"* ]] ||
  fail "the errors rule's reason: ${reason}"
[[ "${value}" == 0 && "${threshold}" == 0 ]] ||
  fail "a status rule measures nothing: value ${value}, threshold ${threshold}"
IFS=$'\t' read -r rule condition reason value threshold slow_dir <<<"$(echo "${rows}" | sed -n 2p)"
[[ "${rule}" == slow && "${condition}" == "${SLOW_RULE}" ]] || fail "the slow rule's row: ${rows}"
# Step 45 (200 ms), unless the machine stalled another step past 100 ms first: what was measured
# is over the threshold either way, and the reason says it.
[[ "${threshold}" == 100000000 && "${value}" -gt 100000000 ]] ||
  fail "the slow rule's value and threshold: ${value}, ${threshold}"
[[ "${reason}" =~ \(trigger_steps\):\ step\ [0-9]+\ took\ .*,\ over\ 100\ ms$ ]] ||
  fail "the slow rule's reason: ${reason}"
# The slow step's capture: trace.pftrace's "nrtprof triggers" instant where step 45 began (the
# anomaly's time goes from daemon to daemon in ms, so up to 1 ms before it).
if [[ "${reason}" == *"step 45 took"* ]]; then
  read_back=$("${RUNFILES}/tests/pftrace_trigger" "${slow_dir}/trace.pftrace" ProfilerStep#45 2>&1)
  at=$(echo "${read_back}" | sed -n 's/^trigger slow at \([0-9]*\)$/\1/p')
  step=$(echo "${read_back}" | sed -n 's/^range ProfilerStep#45 at \([0-9]*\) for .*/\1/p')
  [[ -n "${at}" && -n "${step}" && "${at}" -le "${step}" && $((step - at)) -le 1000000 ]] ||
    fail "the trigger's instant is not at step 45's start: ${read_back}"
  echo "step 45 began at ${step} ns, the trigger's instant is at ${at} ns"
else
  echo "the slow rule fired for another step (a stall of the machine's): ${reason}"
fi
# Each capture's trace.pftrace says why, read back by nrtprof itself.
for dir in "${errors_dir}" "${slow_dir}"; do
  out=$("${NRTPROF}" summary "${dir}" --from-trace 2>&1)
  [[ "${out}" == *"Triggered by rule "* ]] || fail "summary --from-trace of ${dir}: ${out}"
done
out=$("${NRTPROF}" summary "${errors_dir}" --from-trace 2>&1)
[[ "${out}" == *"Triggered by rule errors (${ERRORS_RULE}): pid "*"nrt_execute returned status ${status}"* ]] ||
  fail "summary --from-trace of the errors capture: ${out}"
# The older row: empty trigger columns; fleet_triggers, the table of before, not made.
[[ $(sql "SELECT trigger_rule, trigger_reason, trigger_value_ns FROM fleet_captures
    WHERE capture_id = 'old-capture' FORMAT TSV") == $'\t\t0' ]] ||
  fail "the older row: $(sql "SELECT * FROM fleet_captures WHERE capture_id = 'old-capture' FORMAT TSV")"
[[ $(sql "EXISTS TABLE fleet_triggers") == 0 ]] || fail "a fleet_triggers table was made"
# docs/triggers.md's query of the day's triggered captures.
listed=$(sql "SELECT time, host, trigger_rule, trigger_reason, output_dir FROM nrtprof.fleet_captures
  WHERE trigger_rule != '' AND time > now() - INTERVAL 1 DAY ORDER BY time FORMAT TSV")
[[ $(echo "${listed}" | cut -f3 | sort | tr '\n' ' ') == "errors slow " ]] ||
  fail "docs/triggers.md's query: ${listed}"
grep -q "fleet store: added the column(s) trigger_rule, trigger_condition, trigger_reason, trigger_value_ns, trigger_threshold_ns to fleet_captures (made by an older nrtprofd)" \
  "${WORK}/hostT.err" || fail "hostT's log does not say it added the columns: $(cat "${WORK}/hostT.err")"

# 3: a capture someone asked for, under a daemon whose schema found the table up to date.
start_daemon hostU
run_on hostU 20 1
"${NRTPROF}" capture --last 30s --addr "unix:${WORK}/hostU/d.sock" --out "${WORK}/mine" \
  >"${WORK}/capture.out" 2>&1 || fail "capture --last: $(cat "${WORK}/capture.out")"
row=""
for _ in $(seq 80); do
  row=$(sql "SELECT trigger_rule, trigger_condition, trigger_reason, trigger_value_ns,
    trigger_threshold_ns FROM fleet_captures WHERE host = 'hostU' FORMAT TSV" 2>/dev/null)
  [[ -n "${row}" ]] && break
  sleep 0.25
done
[[ "${row}" == $'\t\t\t0\t0' ]] ||
  fail "the asked-for capture's row: '${row}'; $(cat "${WORK}/hostU.err")"
for h in hostT hostU; do
  grep -q "fleet store: .*retrying" "${WORK}/${h}.err" &&
    fail "${h}'s export failed: $(cat "${WORK}/${h}.err")"
done
grep -q "added the column" "${WORK}/hostU.err" && fail "hostU added columns: $(cat "${WORK}/hostU.err")"

# 4: a database whose fleet_captures is a Merge table over a local one, both without the
# trigger columns (standing for a cluster's Distributed table, which needs a cluster): not
# altered, said, nothing sent; sent once the columns are added by hand as docs/fleet.md says.
hand_sql() { curl -sS --max-time 20 --data-binary "$1" "${CH_URL}/?database=handmade"; }
server_sql "CREATE DATABASE handmade"
hand_sql "CREATE TABLE fleet_captures_local AS nrtprof.fleet_captures"
hand_sql "ALTER TABLE fleet_captures_local DROP COLUMN trigger_rule, DROP COLUMN trigger_condition,
  DROP COLUMN trigger_reason, DROP COLUMN trigger_value_ns, DROP COLUMN trigger_threshold_ns"
hand_sql "CREATE TABLE fleet_captures AS fleet_captures_local
  ENGINE = Merge(handmade, '^fleet_captures_local\$')"
mkdir -p "${WORK}/hostV"
"${NRTPROFD}" --socket "${WORK}/hostV/d.sock" --output_root "${WORK}/hostV/caps" \
  --clickhouse_url "${CH_URL}" --clickhouse_database handmade --clickhouse_export_ms 1000 \
  --fleet_host hostV 2>"${WORK}/hostV.err" &
pids+=($!)
for _ in $(seq 100); do grep -q "listening on" "${WORK}/hostV.err" && break; sleep 0.1; done
run_on hostV 20 1
want="table fleet_captures (Merge, made by hand) lacks the column(s) trigger_rule, trigger_condition, trigger_reason, trigger_value_ns, trigger_threshold_ns: add them to it and to the tables under it"
for _ in $(seq 80); do grep -q "${want}" "${WORK}/hostV.err" && break; sleep 0.25; done
grep -q "fleet store: ${want}" "${WORK}/hostV.err" || fail "hostV's log: $(cat "${WORK}/hostV.err")"
"${NRTPROF}" status --addr "unix:${WORK}/hostV/d.sock" | grep -q "failing: .*lacks the column(s) trigger_rule, " ||
  fail "hostV's status: $("${NRTPROF}" status --addr "unix:${WORK}/hostV/d.sock")"
[[ $(server_sql "SELECT count() FROM system.columns WHERE database = 'handmade' AND name LIKE 'trigger%'") == 0 ]] ||
  fail "a hand-made table was altered"
[[ $(hand_sql "SELECT count() FROM fleet_ops") == 0 ]] || fail "hostV sent rows with its schema refused"
# The columns added by hand (docs/fleet.md's statement, without ON CLUSTER): the rows go in.
for t in fleet_captures_local fleet_captures; do
  hand_sql "ALTER TABLE ${t}
    ADD COLUMN trigger_rule String, ADD COLUMN trigger_condition String,
    ADD COLUMN trigger_reason String, ADD COLUMN trigger_value_ns UInt64,
    ADD COLUMN trigger_threshold_ns UInt64"
done
for _ in $(seq 120); do grep -q "takes rows again" "${WORK}/hostV.err" && break; sleep 0.25; done
grep -q "fleet store: ClickHouse at .* takes rows again" "${WORK}/hostV.err" ||
  fail "hostV does not send once the columns are there: $(cat "${WORK}/hostV.err")"
[[ $(hand_sql "SELECT count() FROM fleet_ops") -gt 0 ]] || fail "hostV's rows did not go in"

finish "" "fleet store: a triggered capture's fleet_captures row carries its rule, reason, value and threshold; an asked-for capture's, none"
