#!/bin/bash
# `nrtprof fleet export` (issue 42): a private ClickHouse and an nrtprofd exporting to it
# (--fleet_host hostA), RMSNorm naive run under the daemon, then the fleet store's last hour as a
# pprof profile read by Debian's go tool pprof: each op's cumulative device time is what
# `nrtprof fleet top --by op` says for it, to the nanosecond, under the host's label; the folded
# stacks add up to fleet top's total; the profile's Time: and Duration: (go tool pprof -raw) are
# the window it covers, from the minute an hour ago to now; a bad --format is one line and
# exit 2, nothing written.
# Skips, saying why, without clickhouse-server or go (CI installs both through
# third_party/install_debian_deps.sh).
set -u

readonly RUNFILES="${TEST_SRCDIR}/nrtprof"
readonly NRTPROF="${RUNFILES}/client/nrtprof"
readonly NRTPROFD="${RUNFILES}/daemon/nrtprofd"
# Under /tmp: the daemon's socket path must fit in a sockaddr_un.
readonly WORK="$(mktemp -d /tmp/nrtprof-fleet-export.XXXXXX)"
export PORTS_FILE="${WORK}/ports"
export NRTPROF_ADDR= LD_PRELOAD=

if ! command -v go >/dev/null; then
  echo "SKIP: no 'go' on PATH for go tool pprof (third_party/install_debian_deps.sh installs golang-go)"
  exit 0
fi
export HOME="${WORK}/home" GOCACHE="${WORK}/gocache" GOPATH="${WORK}/gopath" GOFLAGS=
mkdir -p "${HOME}"

source "${TEST_SRCDIR}/nrtprof/common/testing/checks.sh"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "${p}" 2>/dev/null; done
  [[ -n "${clickhouse_pid:-}" ]] && kill "${clickhouse_pid}" 2>/dev/null
  wait 2>/dev/null
  rm -rf "${WORK}"
}
trap cleanup EXIT

# shellcheck source=tests/fleet/clickhouse_local.sh
source "${RUNFILES}/tests/fleet/clickhouse_local.sh"
if ! command -v clickhouse-server >/dev/null; then
  echo "SKIP: clickhouse-server is not installed (third_party/install_debian_deps.sh installs it)"
  exit 0
fi
if ! clickhouse_local_start "${WORK}/ch"; then
  echo "SKIP: clickhouse-server cannot run here: $(tail -3 "${WORK}/ch/server.log")"
  exit 0
fi

"${NRTPROFD}" --socket "${WORK}/d.sock" --output_root "${WORK}/caps" \
  --clickhouse_url "${CLICKHOUSE_URL}" --clickhouse_export_ms 1000 --fleet_host hostA \
  2>"${WORK}/d.err" &
pids+=($!)
for _ in $(seq 100); do grep -q "fleet store: exporting" "${WORK}/d.err" && break; sleep 0.1; done
grep -q "fleet store: exporting" "${WORK}/d.err" || fail "nrtprofd does not export: $(cat "${WORK}/d.err")"
LD_PRELOAD="${RUNFILES}/shim/libnrtprof_shim.so" NRTPROF_ADDR="unix:${WORK}/d.sock" \
  NRT_SIM_TIME_SCALE=0 "${RUNFILES}/examples/rmsnorm" --variant naive --iters 5 >/dev/null ||
  fail "rmsnorm under the daemon failed"

# fleet top's rows by op, once the daemon's export has them (it sends every second).
top_csv() { "${NRTPROF}" fleet top --clickhouse_url "${CLICKHOUSE_URL}" --by op --format csv; }
for _ in $(seq 100); do
  top_csv >"${WORK}/top.csv" 2>/dev/null
  grep -q '^aten::mul,' "${WORK}/top.csv" && break
  sleep 0.2
done
grep -q '^aten::mul,' "${WORK}/top.csv" || fail "fleet top never showed aten::mul: $(cat "${WORK}/top.csv")"
sleep 2  # one more export: every op of the run is in

top_csv >"${WORK}/top.csv"
before_s=$(date +%s)
"${NRTPROF}" fleet export --clickhouse_url "${CLICKHOUSE_URL}" --since 1h --format pprof \
  -o "${WORK}/fleet.pb.gz" 2>"${WORK}/export.err" || fail "fleet export: $(cat "${WORK}/export.err")"
after_s=$(date +%s)
go tool pprof -raw "${WORK}/fleet.pb.gz" >"${WORK}/fleet.raw" 2>&1 || fail "go tool pprof -raw: $(cat "${WORK}/fleet.raw")"
go tool pprof -sample_index=device_time -top -cum -unit=ns -nodefraction=0 -nodecount=100000 \
  -tagfocus host=hostA "${WORK}/fleet.pb.gz" >"${WORK}/fleet.top" 2>&1 ||
  fail "go tool pprof: $(cat "${WORK}/fleet.top")"
"${NRTPROF}" fleet export --clickhouse_url "${CLICKHOUSE_URL}" --format collapsed \
  -o "${WORK}/fleet.folded" 2>"${WORK}/export.err" || fail "fleet export --format collapsed: $(cat "${WORK}/export.err")"

if ! python3 - "${WORK}/top.csv" "${WORK}/fleet.top" "${WORK}/fleet.folded" >"${WORK}/check" 2>&1 <<'PY'
import csv, re, sys
rows = list(csv.reader(open(sys.argv[1])))
header, rows = rows[0], rows[1:]
device = {r[0]: int(r[header.index("device_ns")]) for r in rows if r and r[0]}
cum = {}
for line in open(sys.argv[2]):
    m = re.match(r"^\s*(-?\d+)(?:ns)?\s+\S+\s+\S+\s+(-?\d+)(?:ns)?\s+\S+\s+(.*?)\s*$", line)
    if m:
        cum[m.group(3)] = int(m.group(2))
bad = [f"{op}: pprof {cum.get(op)} ns, fleet top {ns} ns"
       for op, ns in device.items() if ns and cum.get(op) != ns]
if "aten::mul" not in device:
    bad.append("no aten::mul in fleet top")
folded = sum(int(l.rsplit(" ", 1)[1]) for l in open(sys.argv[3]) if l.strip())
if folded != sum(device.values()):
    bad.append(f"folded stacks {folded} ns, fleet top {sum(device.values())} ns")
if bad:
    sys.exit("; ".join(bad))
PY
then
  fail "fleet export against fleet top: $(cat "${WORK}/check")"
  cat "${WORK}/top.csv" "${WORK}/fleet.top" >&2
fi

# The window: from the start of the minute an hour before the export (ClickHouse's clock is this
# machine's) to the export, so 1h0m or 1h1m long as pprof prints it (%.4v).
if ! python3 - "${WORK}/fleet.raw" "${before_s}" "${after_s}" >"${WORK}/time_check" 2>&1 <<'PY'
import datetime, re, sys
raw = open(sys.argv[1]).read()
before, after = int(sys.argv[2]), int(sys.argv[3])
bad = []
m = re.search(r"^Time: (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)? ([+-]\d{4}) ", raw, re.M)
if not m:
    bad.append("no Time: line")
else:
    start = int(datetime.datetime.strptime(m.group(1) + " " + m.group(2),
                                           "%Y-%m-%d %H:%M:%S %z").timestamp())
    if start % 60 != 0 or not before - 3600 - 60 < start <= after - 3600:
        bad.append(f"Time: {m.group(1)} {m.group(2)} ({start}) is not the minute an hour before"
                   f" the export ({before}..{after})")
m = re.search(r"^Duration: (.*)$", raw, re.M)
if not m or m.group(1) not in ("1h0m", "1h1m"):
    bad.append(f"Duration: {m.group(1) if m else '(none)'}, want the hour and the minutes since")
if bad:
    sys.exit("; ".join(bad))
PY
then
  fail "fleet export's window: $(cat "${WORK}/time_check")"
  head -6 "${WORK}/fleet.raw" >&2
fi

out=$("${NRTPROF}" fleet export --clickhouse_url "${CLICKHOUSE_URL}" --format svg -o "${WORK}/x.svg" 2>&1)
code=$?
[[ ${code} == 2 && $(echo "${out}" | wc -l) == 1 && ! -e "${WORK}/x.svg" ]] ||
  fail "fleet export --format svg: want exit 2, one line, nothing written; got ${code}: ${out}"

finish "" "PASS: fleet export read by go tool pprof with fleet top's device time"
