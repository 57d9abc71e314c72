#!/bin/bash
# The framework shape under the profiler: `nrtprof run -- rmsnorm_py`, a Python program whose
# extension module (examples/nrt_framework.cc) brings libnrt.so.1 in as its own dependency, in
# the RTLD_LOCAL scope Python's import gives it. Checks what the user sees: the program's own
# output intact, and the table of the C++ naive variant: aten::mul first with 3 calls per
# iteration (and the warm-up's), aten::add carrying the epsilon copy, the "rmsnorm" range with
# 2.355 ms of device time per iteration, nothing dropped.
#
# Then the same through the runtime's asynchronous API (`--async 4`: executions scheduled with
# nrta_execute_schedule, the epsilon copies with nrta_tensor_write, the output read back with
# nrta_tensor_read), from Python and from C++ (`rmsnorm --variant naive --async 4`): the same
# table, every execution and copy correlated with the op that scheduled it (no uncorrelated
# device time), and from Python each op charged the same device time as in the synchronous run.
set -u

readonly RUNFILES="${TEST_SRCDIR}/nrtprof"
readonly NRTPROF="${RUNFILES}/client/nrtprof"
readonly WORK="$(mktemp -d "${TEST_TMPDIR:-/tmp}/examples_py_profiled.XXXXXX")"
readonly ITERS=10
# The simulated device answers at once; no daemon or preload from the machine interferes.
export NRT_SIM_TIME_SCALE=0 NRTPROF_ADDR= LD_PRELOAD=

source "${TEST_SRCDIR}/nrtprof/common/testing/checks.sh"

# Runs `nrtprof run --out WORK/NAME -- PROGRAM...` and checks the program's output, the printed
# table and summary.json; prints the run on a failure.
check_profiled() {
  local name="$1"
  shift
  local out="${WORK}/${name}.out" err="${WORK}/${name}.err" failures_before=${failures}
  "${NRTPROF}" run --out "${WORK}/${name}" -- "$@" >"${out}" 2>"${err}"
  local rc=$?

  # --- the program's own output, as without the profiler --------------------------------------
  if [[ ${rc} -ne 0 ]] || ! grep -q ' 0 of 2048 elements out of tolerance -> OK$' "${out}" ||
      ! grep -q "in $((6 * ITERS)), transfers .* in ${ITERS})$" "${out}"; then
    fail "${name}: want exit 0, '-> OK' and $((6 * ITERS)) executions and ${ITERS} transfers in the program's output"
  fi

  # --- the printed table -------------------------------------------------------------------------
  local first_row
  first_row="$(awk '/Self CPU/ && /# of Calls/ { getline; getline; print $1; exit }' "${err}")"
  if [[ "${first_row}" != "aten::mul" ]]; then
    fail "${name}: want aten::mul as the table's first row, got '${first_row}'"
  fi
  for row in aten::add aten::mean aten::rsqrt rmsnorm; do
    grep -qE "^ *${row} " "${err}" || fail "${name}: want a row for ${row} in the table"
  done
  grep -q 'Events dropped: 0' "${err}" || fail "${name}: want 'Events dropped: 0' under the table"

  # --- summary.json: calls and device time per op ---------------------------------------------
  if ! python3 - "${WORK}/${name}/summary.json" "${ITERS}" >"${WORK}/summary_check" 2>&1 <<'PY'
import json, sys
summary = json.load(open(sys.argv[1]))
rows = {r["name"]: r for r in summary["rows"]}
iters = int(sys.argv[2])
bad = []
def want(ok, what):
    if not ok:
        bad.append(what)
names = ("aten::mul", "aten::add", "aten::mean", "aten::rsqrt", "rmsnorm")
missing = [n for n in names if n not in rows]
if missing:
    sys.exit(f"no row for {', '.join(missing)}; rows: {', '.join(rows)}")
want(rows["aten::mul"]["calls"] == 3 * (iters + 1), "aten::mul: 3 calls per iteration and the warm-up's")
for op in ("aten::add", "aten::mean", "aten::rsqrt"):
    want(rows[op]["calls"] == iters + 1, f"{op}: 1 call per iteration and the warm-up's")
want(rows["rmsnorm"]["calls"] == iters, "rmsnorm: 1 call per iteration")
per_iteration_ms = rows["rmsnorm"]["device_total_ns"] / iters / 1e6
want(abs(per_iteration_ms - 2.355) <= 0.05 * 2.355,
     f"rmsnorm: 2.355 ms of device time per iteration +-5%, got {per_iteration_ms:.3f}")
want(rows["rmsnorm"]["self_device_ns"] == 0, "rmsnorm: all its device time under its ops")
per_call = lambda op: rows[op]["self_device_ns"] / (iters + 1)
want(per_call("aten::add") > per_call("aten::rsqrt") + 100000,
     "aten::add: the epsilon's host-to-device copy on top of its execution")
want(summary["uncorrelated_device_ns"] == 0 and summary["uncorrelated_device_events"] == 0,
     f"no uncorrelated device time, got {summary['uncorrelated_device_ns']} ns in"
     f" {summary['uncorrelated_device_events']} events")
if bad:
    sys.exit("; ".join(bad))
PY
  then
    fail "${name}: summary.json: $(cat "${WORK}/summary_check")"
  fi

  if [[ ${failures} -ne ${failures_before} ]]; then
    echo "--- nrtprof run -- $*: exit ${rc}, stdout:" >&2
    cat "${out}" >&2
    echo "--- stderr:" >&2
    cat "${err}" >&2
  fi
}

check_profiled python "${RUNFILES}/examples/rmsnorm_py" --iters "${ITERS}"
check_profiled python_async "${RUNFILES}/examples/rmsnorm_py" --iters "${ITERS}" --async 4
check_profiled cpp_async "${RUNFILES}/examples/rmsnorm" --variant naive --iters "${ITERS}" --async 4

# --- asynchronous from Python: each op charged what the synchronous run charged it -------------
if ! python3 - "${WORK}/python/summary.json" "${WORK}/python_async/summary.json" \
    >"${WORK}/same_check" 2>&1 <<'PY'
import json, sys
sync, async_ = ({r["name"]: r for r in json.load(open(p))["rows"]} for p in sys.argv[1:3])
bad = [f"{op}: {async_.get(op, {}).get('self_device_ns')} ns, synchronous {sync[op]['self_device_ns']} ns"
       for op in ("aten::mul", "aten::add", "aten::mean", "aten::rsqrt", "aten::copy_")
       if op not in async_ or async_[op]["self_device_ns"] != sync[op]["self_device_ns"]]
if bad:
    sys.exit("; ".join(bad))
PY
then
  fail "rmsnorm_py --async 4 under nrtprof: the ops' device time differs from the synchronous run's: $(cat "${WORK}/same_check")"
fi

finish
