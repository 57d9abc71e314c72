#!/bin/bash
# Collective wait per rank, always on (issue 40): two standing nrtprofd for two hosts (--fleet_host
# hostA, hostB), each with /metrics and exporting every second to a ClickHouse of the test's own
# (Debian's clickhouse-server on loopback, as fleet_clickhouse_test), and a data-parallel job
# under each, preloaded with the shim by hand (no capture asked for): examples/cc_job, 4 ranks
# with rank 2 late on hostA (each rank's --rank on its command line), 3 ranks with rank 0 late on
# hostB (the rank only in RANK, as torchrun starts workers: `cc_job --rank-via env`).
#
#  1. /metrics (read by a real Prometheus where Debian's prometheus is installed, else by curl):
#     every rank's nrtprof_collectives_total is the job's steps; the late rank's
#     nrtprof_collective_wait_seconds_total is the least of its job, and each other rank's is
#     more than half the stalls it was made to wait.
#  2. `nrtprof fleet top --by rank` names the two late ranks first (each late in every minute of
#     its job, having made the others wait), lists every rank with the collectives and wait
#     its host's /metrics counted, and keeps the two jobs apart (one named by NRTPROF_JOB, one
#     by cc_job's NEURON_RT_ROOT_COMM_ID); --where picks ranks without changing what they are
#     compared with.
#  3. Bad input: one line, exit 2.
# Skipped with a line where clickhouse-server is not installed or cannot start.
set -u

readonly FLEET_TEST=ranks
source "${TEST_SRCDIR}/nrtprof/tests/fleet/fleet_setup.sh"
source "${TEST_SRCDIR}/nrtprof/common/testing/checks.sh"

if ! clickhouse_local_start "${WORK}/ch"; then
  echo "SKIP: clickhouse-server cannot run here: $(tail -3 "${WORK}/ch/server.log")"
  exit 0
fi
readonly CH_URL="${CLICKHOUSE_URL}"

# The jobs: host, ranks, late rank. Steps and the late rank's stall are the same for both.
readonly STEPS=12 SLOW_MS=100
declare -A ranks=([hostA]=4 [hostB]=3) slow=([hostA]=2 [hostB]=0) metrics_url=()

start_daemon() {
  local name=$1 port
  port=$(free_port)
  mkdir -p "${WORK}/${name}"
  "${NRTPROFD}" --socket "${WORK}/${name}/d.sock" --output_root "${WORK}/${name}/caps" \
    --metrics_listen "127.0.0.1:${port}" --clickhouse_url "${CH_URL}" --clickhouse_export_ms 1000 \
    --fleet_host "${name}" 2>"${WORK}/${name}.err" &
  pids+=($!)
  for _ in $(seq 100); do grep -q "fleet store: exporting" "${WORK}/${name}.err" && break; sleep 0.1; done
  grep -q "fleet store: exporting" "${WORK}/${name}.err" ||
    fail "${name}: the daemon did not start: $(cat "${WORK}/${name}.err")"
  metrics_url[${name}]="http://127.0.0.1:${port}/metrics"
}
start_daemon hostA
start_daemon hostB

# A real Prometheus scraping hostA's daemon, when there is one.
prom_port=""
if command -v prometheus >/dev/null; then
  prom_port=$(free_port)
  target=${metrics_url[hostA]#http://}
  cat >"${WORK}/prometheus.yml" <<YML
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: nrtprofd
    static_configs:
      - targets: ['${target%/metrics}']
YML
  prometheus --config.file="${WORK}/prometheus.yml" --storage.tsdb.path="${WORK}/tsdb" \
    --web.listen-address="127.0.0.1:${prom_port}" >"${WORK}/prometheus.log" 2>&1 &
  pids+=($!)
fi

# hostA's job is named (NRTPROF_JOB), its ranks on their command lines (--rank R); hostB's job is
# cc_job's NEURON_RT_ROOT_COMM_ID (127.0.0.1:PORT), its ranks started as torchrun starts workers:
# the rank only in RANK (--rank-via env).
declare -A job_env=([hostA]="NRTPROF_JOB=train-A" [hostB]="NRTPROF_UNUSED=1")
declare -A rank_via=([hostA]=argv [hostB]=env)
for h in hostA hostB; do
  env "${job_env[$h]}" LD_PRELOAD="${RUNFILES}/shim/libnrtprof_shim.so" NRTPROF_ADDR="unix:${WORK}/${h}/d.sock" \
    NRT_SIM_TIME_SCALE=0 "${RUNFILES}/examples/cc_job" --ranks "${ranks[$h]}" --steps "${STEPS}" \
    --slow-rank "${slow[$h]}" --slow-ms "${SLOW_MS}" --rank-via "${rank_via[$h]}" \
    >"${WORK}/${h}.job" 2>&1 ||
    fail "cc_job on ${h}: $(tail -3 "${WORK}/${h}.job")"
done
# The daemons fold events a second after they came (kMetricsSettleNs) and export every second.
sleep 2.5

# "rank collectives wait_ns" lines of a host's /metrics, by rank.
own_counts() {
  curl -s "${metrics_url[$1]}" | python3 -c '
import re, sys
n, w = {}, {}
for line in sys.stdin:
    m = re.match(r"nrtprof_(collectives|collective_wait_seconds)_total\{pid=\"\d+\",executable=\"cc_job\",rank=\"(\d+)\"\} (\S+)$", line)
    if m:
        (n if m.group(1) == "collectives" else w)[int(m.group(2))] = m.group(3)
for r in sorted(n):
    print(r, n[r], round(float(w.get(r, -1)) * 1e9))
'
}

# 1. /metrics: the late rank waits least; the others wait for its stalls.
for h in hostA hostB; do
  own=$(own_counts $h)
  [[ $(echo "${own}" | grep -c .) == "${ranks[$h]}" ]] ||
    fail "${h}: /metrics has not every rank's collective wait: ${own}"
  least=$(echo "${own}" | sort -k3,3n | head -1 | cut -d' ' -f1)
  [[ "${least}" == "${slow[$h]}" ]] ||
    fail "${h}: the least collective wait is rank ${least}'s, not the late rank ${slow[$h]}'s: ${own}"
  while read -r rank n wait_ns; do
    [[ "${n}" == "${STEPS}" ]] || fail "${h}: rank ${rank} waited in ${n} collectives, not ${STEPS}"
    [[ "${rank}" == "${slow[$h]}" ]] && continue
    [[ ${wait_ns} -gt $((STEPS * SLOW_MS * 1000000 / 2)) ]] ||
      fail "${h}: rank ${rank} waited ${wait_ns} ns, under half the late rank's stalls"
  done <<<"${own}"
done
echo "/metrics, hostA: $(own_counts hostA | tr '\n' ';')"

if [[ -n "${prom_port}" ]]; then
  # The operator's question in PromQL: which rank of the job waits least (the late one).
  answer=none
  for _ in $(seq 60); do
    answer=$(curl -s --get "http://127.0.0.1:${prom_port}/api/v1/query" --data-urlencode \
      'query=bottomk(1, nrtprof_collective_wait_seconds_total{job="nrtprofd",executable="cc_job"})' |
      python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["metric"]["rank"] if r else "none")' 2>/dev/null)
    [[ "${answer}" == "${slow[hostA]}" ]] && break
    sleep 0.5
  done
  [[ "${answer}" == "${slow[hostA]}" ]] ||
    fail "Prometheus: bottomk(1, nrtprof_collective_wait_seconds_total) is rank ${answer}, not ${slow[hostA]}"
  echo "Prometheus: the rank of least collective wait on hostA is ${answer}"
fi

# 2. The fleet store: every rank once, as its host counted it; the late ranks first.
top=""
for _ in $(seq 40); do
  top=$("${NRTPROF}" fleet top --clickhouse_url "${CH_URL}" --by rank --format csv 2>&1)
  [[ $(echo "${top}" | tail -n +2 | grep -c .) == $((ranks[hostA] + ranks[hostB])) ]] && break
  sleep 0.5
done
echo "${top}"
for h in hostA hostB; do
  while read -r rank n wait_ns; do
    row=$(echo "${top}" | python3 -c '
import csv, sys
h, rank = sys.argv[1], sys.argv[2]
for r in csv.DictReader(sys.stdin):
    if r["host"] == h and r["rank"] == rank:
        print(r["collectives"], r["wait_ns"])
' "$h" "$rank")
    [[ "${row}" == "${n} ${wait_ns}" ]] ||
      fail "fleet top --by rank: ${h} rank ${rank} has '${row}', its host counted '${n} ${wait_ns}'"
  done <<<"$(own_counts $h)"
done
python3 - "${top}" "${slow[hostA]}" "${slow[hostB]}" <<'PY' || fail "fleet top --by rank: see above"
import csv, io, re, sys
rows = list(csv.DictReader(io.StringIO(sys.argv[1])))
late = {("hostA", sys.argv[2]), ("hostB", sys.argv[3])}
ok = True
def bad(line):
    global ok
    print("FAIL: " + line, file=sys.stderr)
    ok = False
first = {(r["host"], r["rank"]) for r in rows[:2]}
if first != late:
    bad(f"the first two ranks are {sorted(first)}, not the late ones {sorted(late)}")
for r in rows:
    key = (r["host"], r["rank"])
    if key in late:
        if int(r["late_minutes"]) != int(r["minutes"]) or int(r["made_wait_ns"]) <= 0:
            bad(f"late rank {key}: late in {r['late_minutes']} of {r['minutes']} minutes, made others wait {r['made_wait_ns']} ns")
        # What the others waited beyond it: their wait less its own, over its job.
        others = [int(o["wait_ns"]) - int(r["wait_ns"]) for o in rows
                  if o["host"] == r["host"] and o["job"] == r["job"] and o is not r]
        if int(r["made_wait_ns"]) != sum(others):
            bad(f"late rank {key} made others wait {r['made_wait_ns']} ns, they waited {sum(others)} ns beyond it")
    elif int(r["late_minutes"]) != 0 or int(r["made_wait_ns"]) != 0:
        bad(f"rank {key} is said to have been late: {r}")
jobs = {r["host"]: r["job"] for r in rows}
if jobs["hostA"] != "train-A" or not re.fullmatch(r"127\.0\.0\.1:\d+", jobs["hostB"]):
    bad(f"the jobs (hostA's NRTPROF_JOB, hostB's NEURON_RT_ROOT_COMM_ID): {jobs}")
sys.exit(0 if ok else 1)
PY
text=$("${NRTPROF}" fleet top --clickhouse_url "${CH_URL}" --by rank --since 10m 2>&1)
echo "${text}"
[[ $(echo "${text}" | sed -n 2p) =~ ^\ *host[AB]\ +[0-9]+\ +(${slow[hostA]}|${slow[hostB]})\  ]] ||
  fail "fleet top --by rank's first rank is not a late one: ${text}"
# --where picks a rank; it is still compared with its whole job (late, having made others wait).
picked=$("${NRTPROF}" fleet top --clickhouse_url "${CH_URL}" --by rank --where host=hostA \
  --where "rank=${slow[hostA]}" --format csv 2>&1)
[[ $(echo "${picked}" | tail -n +2 | grep -c .) == 1 &&
   $(echo "${picked}" | tail -1 | cut -d, -f1,4) == "hostA,${slow[hostA]}" &&
   $(echo "${picked}" | tail -1 | awk -F, '{print $NF}') -gt 0 ]] ||
  fail "fleet top --by rank --where host=hostA --where rank=${slow[hostA]}: ${picked}"

# A straggler's last export can fall a minute after its job's others' (as in CI once: late in 1
# of 2 minutes). That minute compares it with nobody: it is not one of its minutes.
t0=$(( ($(date +%s) / 60 - 3) * 60 ))
rows=""
for r in "0 ${t0} 100000000" "1 ${t0} 0" "1 $((t0 + 60)) 0"; do
  read -r rank t w <<<"$r"
  rows+="{\"daemon\":\"by-hand\",\"seq\":${rank}${t},\"time\":${t},\"host\":\"hostC\",\"pid\":$((900 + rank)),\"executable\":\"cc_job\",\"rank\":${rank},\"job\":\"alone-minute\",\"collectives\":5,\"wait_ns\":${w}}"$'\n'
done
out=$(curl -sS --max-time 20 --data-binary "${rows}" \
  "${CH_URL}/?database=nrtprof&query=INSERT%20INTO%20fleet_ranks%20FORMAT%20JSONEachRow" 2>&1)
[[ -z "${out}" ]] || fail "inserting the hand-made rows: ${out}"
alone=$("${NRTPROF}" fleet top --clickhouse_url "${CH_URL}" --by rank --since 10m \
  --where "job=alone-minute" --format csv 2>&1)
[[ $(echo "${alone}" | grep -c '^hostC,901,cc_job,1,alone-minute,10,0,1,1,100000000$') == 1 &&
   $(echo "${alone}" | grep -c '^hostC,900,cc_job,0,alone-minute,5,100000000,1,0,0$') == 1 ]] ||
  fail "a rank alone in a minute: late in every minute it was compared in, expected: ${alone}"

# 3. Bad input.
out=$("${NRTPROF}" fleet top --clickhouse_url "${CH_URL}" --by rank --where op=x 2>&1); code=$?
[[ ${code} == 2 && $(echo "${out}" | wc -l) == 1 && "${out}" == *"host, pid, executable, rank or job"* ]] ||
  fail "fleet top --by rank --where op=x: exit ${code}, ${out}"
out=$("${NRTPROF}" fleet top --clickhouse_url "${CH_URL}" --by rank --where rank=-1 2>&1); code=$?
[[ ${code} == 2 && $(echo "${out}" | wc -l) == 1 ]] || fail "--where rank=-1: exit ${code}, ${out}"
out=$("${NRTPROF}" fleet top --clickhouse_url "${CH_URL}" --by ranks 2>&1); code=$?
[[ ${code} == 2 && "${out}" == *"op, model, host, process or rank"* ]] ||
  fail "fleet top --by ranks: exit ${code}, ${out}"

finish "" "collective wait per rank: the late ranks named by /metrics and by fleet top --by rank"
