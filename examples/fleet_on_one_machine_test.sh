#!/bin/bash
# examples/fleet_on_one_machine.sh as a new user runs it (the binaries of this build, --out in
# the test's folder), checked for what that user would see:
#   - it exits 0 and ends with "done" naming one capture folder, the only thing left in --out;
#   - the capture's merged summary.txt names, overall and in each host's section, that host's
#     RMSNorm process (by the pid the script says it ran as);
#   - `nrtprof fleet top --by host` printed a row for host-a and one for host-b;
#   - afterwards the two daemons and ClickHouse it started (pids from its output) are gone, and so
#     are the temporary folders it named;
#   - interrupted (SIGINT, as Ctrl-C) once its daemons run: it stops them and ClickHouse, removes
#     its folders, and its last line says it was interrupted;
#   - a bad flag: one line, exit 2; binaries that are not there: one line, exit 1, nothing started.
# No figure is checked: only that the parts are there and everything is cleaned up.
# Skipped with a line where clickhouse-server is not installed.
set -u

readonly RUNFILES="${TEST_SRCDIR}/nrtprof"
readonly SCRIPT="${RUNFILES}/examples/fleet_on_one_machine.sh"
source "${TEST_SRCDIR}/nrtprof/common/testing/checks.sh"
if ! command -v clickhouse-server >/dev/null; then
  echo "SKIP: clickhouse-server is not installed (third_party/install_debian_deps.sh installs it)"
  exit 0
fi

# After a run whose output is $1 (a file): every pid it named for a daemon or ClickHouse is gone,
# and every temporary folder it named is removed. $2 names the run in failures.
check_nothing_left() {
  local log=$1 what=$2 pids dirs p d
  pids=$(sed -nE 's/.*(nrtprofd pid|\(pid) ([0-9]+).*/\2/p' "${log}" | sort -u)
  [[ $(echo "${pids}" | grep -c .) -ge 3 ]] || fail "${what}: fewer than 3 pids (2 daemons, ClickHouse) in its output"
  for p in ${pids}; do
    if [[ -e /proc/${p} ]] && grep -qE "nrtprofd|clickhouse" "/proc/${p}/comm" 2>/dev/null; then
      fail "${what}: pid ${p} ($(cat "/proc/${p}/comm")) still runs"
    fi
  done
  dirs=$(grep -oE "/tmp/nrtprof-fleet(-hosts)?\.[A-Za-z0-9]{6}" "${log}" | sort -u)
  [[ -n "${dirs}" ]] || fail "${what}: no temporary folder named in its output"
  for d in ${dirs}; do
    [[ ! -e "${d}" ]] || fail "${what}: ${d} is still there"
  done
}

# 1. A whole run.
out="${TEST_TMPDIR}/out"
log="${TEST_TMPDIR}/run.log"
"${SCRIPT}" --bazel_bin "${RUNFILES}" --out "${out}" --iters 5 >"${log}" 2>&1
code=$?
echo "--- its output ---"
cat "${log}"
echo "---"
[[ ${code} == 0 ]] || fail "exit ${code}: $(tail -1 "${log}")"
grep -q "^fleet_on_one_machine: done. The capture of both hosts is in ${out}/fleet-demo-" "${log}" ||
  fail "no closing line naming the capture's folder"
captures=("${out}"/*)
[[ ${#captures[@]} == 1 && -d "${captures[0]}" ]] || fail "--out holds ${captures[*]}, not one folder"
capture=${captures[0]}
port_a=$(sed -nE 's/^fleet_on_one_machine: host-a: nrtprofd pid [0-9]+, at 127\.0\.0\.1:([0-9]+)$/\1/p' "${log}")
port_b=$(sed -nE 's/^fleet_on_one_machine: host-b: nrtprofd pid [0-9]+, at 127\.0\.0\.1:([0-9]+)$/\1/p' "${log}")
[[ -n "${port_a}" && -n "${port_b}" ]] || fail "the output does not say where host-a and host-b listen"
for f in summary.txt trace.pftrace "127.0.0.1:${port_a}" "127.0.0.1:${port_b}"; do
  [[ -e "${capture}/${f}" ]] || fail "the capture has no ${f}: $(ls "${capture}")"
done
summary="${capture}/summary.txt"
# summary.txt: "Overall (2 hosts)", then a section per host, each opening "Host HOST:PORT".
overall=$(sed '/^Host /,$d' "${summary}")
section() { sed -n "/^Host 127.0.0.1:$1\$/,/^Host /p" "${summary}"; }
[[ "${overall}" == "Overall (2 hosts)"* ]] || fail "summary.txt does not open with 'Overall (2 hosts)': $(head -1 "${summary}")"
# The programs' pids, as the script says them: each process is named by its pid in the summary
# (its command line may be cut short there).
pid_a=$(sed -nE 's/^fleet_on_one_machine: host-a: rmsnorm --variant naive ran as pid ([0-9]+)$/\1/p' "${log}")
pid_b=$(sed -nE 's/^fleet_on_one_machine: host-b: rmsnorm --variant fused ran as pid ([0-9]+)$/\1/p' "${log}")
[[ -n "${pid_a}" && -n "${pid_b}" ]] || fail "the output does not say the programs' pids"
for p in "${pid_a}" "${pid_b}"; do
  [[ "${overall}" =~ pid\ ${p}[^0-9] ]] || fail "the overall summary does not name process ${p}"
done
[[ "$(section "${port_a}")" =~ pid\ ${pid_a}[^0-9] ]] ||
  fail "host-a's section (Host 127.0.0.1:${port_a}) does not name its RMSNorm process ${pid_a}"
[[ "$(section "${port_b}")" =~ pid\ ${pid_b}[^0-9] ]] ||
  fail "host-b's section (Host 127.0.0.1:${port_b}) does not name its RMSNorm process ${pid_b}"
by_host=$(sed -n '/^\$ nrtprof fleet top .* --by host$/,/^NEURON time total/p' "${log}")
for h in host-a host-b; do
  echo "${by_host}" | grep -q "^${h} " || fail "fleet top --by host has no row for ${h}: ${by_host}"
done
check_nothing_left "${log}" "the whole run"

# 2. Interrupted once both daemons run: SIGINT to the script alone, as Ctrl-C would send it (from
# Python, since a shell would start it with SIGINT ignored: it runs in the background here).
log="${TEST_TMPDIR}/interrupted.log"
python3 - "${SCRIPT}" "${RUNFILES}" "${TEST_TMPDIR}/out-interrupted" "${log}" <<'PY'
import signal, subprocess, sys, time
script, runfiles, out, log = sys.argv[1:]
with open(log, "w") as f:
    p = subprocess.Popen([script, "--bazel_bin", runfiles, "--out", out],
                         stdout=f, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and p.poll() is None:
        if "host-b: nrtprofd pid" in open(log).read():
            p.send_signal(signal.SIGINT)
            break
        time.sleep(0.1)
    try:
        code = p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        code = "none: still running 60 s after SIGINT"
with open(log, "a") as f:
    f.write(f"exit code {code}\n")
PY
echo "--- the interrupted run ---"
cat "${log}"
echo "---"
tail -2 "${log}" | head -1 | grep -q "^fleet_on_one_machine: interrupted (SIGINT); stopped what it had started$" ||
  fail "interrupted: its last line is not the interruption: $(tail -2 "${log}" | head -1)"
tail -1 "${log}" | grep -q "^exit code 130$" || fail "interrupted: $(tail -1 "${log}"), not 130"
check_nothing_left "${log}" "the interrupted run"
[[ ! -e "${TEST_TMPDIR}/out-interrupted" ]] || fail "interrupted: it made its --out folder before any capture"

# 3. Usage: one line, exit 2. Binaries not there: one line, exit 1, before anything starts.
err=$("${SCRIPT}" --iters many 2>&1 >/dev/null); code=$?
[[ ${code} == 2 && $(echo "${err}" | wc -l) == 1 && "${err}" == "fleet_on_one_machine: --iters 'many' is not a number"* ]] ||
  fail "--iters many: exit ${code}, ${err}"
output=$("${SCRIPT}" --bazel_bin "${TEST_TMPDIR}/no-such-build" --out "${TEST_TMPDIR}/out-none" 2>&1); code=$?
[[ ${code} == 1 && "${output}" == "fleet_on_one_machine: ${TEST_TMPDIR}/no-such-build/daemon/nrtprofd is missing"* &&
   $(echo "${output}" | wc -l) == 1 ]] || fail "no binaries: exit ${code}, ${output}"

finish "" "fleet_on_one_machine.sh: both hosts in the merged summary and in fleet top; nothing left running or on disk"
