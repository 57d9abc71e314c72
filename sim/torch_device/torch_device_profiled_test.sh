#!/bin/bash
# nrtsim_torch's programs under the profiler, as a user runs them:
#   nrtprof run -- /usr/bin/python3 examples/rmsnorm_torch.py
# with a private daemon. The framework lane comes from PyTorch itself (shim/torch/), the device
# time from the runtime's system trace, both through the module's dynamic libnrt.so.1:
#  1. eager RMSNorm: the table's first row (by self device time) is aten::mul, and aten::pow,
#     aten::mean, aten::add, aten::rsqrt have device time; the program's own device time per
#     iteration is the same as bare; the capture's device time per rmsnorm range equals it.
#  2. fused: a nrtsim::rms_norm row with device time, one call per iteration and the warm-up.
#  3. the MLP training loop: a ProfilerStep* row for the steps and aten::addmm, aten::mm with device
#     time.
set -u

readonly RUNFILES="${TEST_SRCDIR}/nrtprof"
readonly NRTPROF="${RUNFILES}/client/nrtprof"
readonly PY=/usr/bin/python3  # Debian's, with python3-torch
readonly WORK="$(mktemp -d "${TEST_TMPDIR:-/tmp}/torch_device_profiled.XXXXXX")"
export PYTHONPATH="${RUNFILES}/sim/torch_device" NRT_SIM_TIME_SCALE=0 NRTPROF_ADDR= LD_PRELOAD=
readonly ITERS=10 STEPS=6

source "${TEST_SRCDIR}/nrtprof/common/testing/checks.sh"

require_torch "${PY}"

profile() {  # NAME ARGS...: nrtprof run of a program, into ${WORK}/NAME
  local name="$1"
  shift
  "${NRTPROF}" run --out "${WORK}/${name}" -- "${PY}" "$@" \
    >"${WORK}/${name}.out" 2>"${WORK}/${name}.err" ||
    { fail "${name} under nrtprof run failed"; show "${WORK}/${name}.out" "${WORK}/${name}.err"; }
}

profile eager "${RUNFILES}/examples/rmsnorm_torch.py" --variant eager --iterations "${ITERS}"
"${PY}" "${RUNFILES}/examples/rmsnorm_torch.py" --variant eager --iterations "${ITERS}" \
  >"${WORK}/eager_bare.out" 2>&1 || fail "rmsnorm_torch.py bare"
profile fused "${RUNFILES}/examples/rmsnorm_torch.py" --variant fused --iterations "${ITERS}"
profile mlp "${RUNFILES}/examples/mlp_train_torch.py" --steps "${STEPS}"

if ! "${PY}" - "${WORK}" "${ITERS}" "${STEPS}" >"${WORK}/check" 2>&1 <<'PY'
import csv, re, sys
work, iters, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
bad = []
def want(ok, what):
    if not ok:
        bad.append(what)
def rows(name):
    return [r for r in csv.DictReader(open(f"{work}/{name}/summary.csv"))]
def device_ms(path):
    m = re.search(r"device time per iteration: ([0-9.]+) ms", open(path).read())
    return float(m.group(1)) if m else None

eager = rows("eager")
by_name = {r["Name"] if "Name" in r else r["name"]: r for r in eager}
top = max(eager, key=lambda r: int(r["self_device_ns"]))
want(top["name"] == "aten::mul", f"eager: the top row by self device time is {top['name']}, not aten::mul")
for op in ("aten::mul", "aten::pow", "aten::mean", "aten::add", "aten::rsqrt"):
    want(op in by_name and int(by_name[op]["self_device_ns"]) > 0, f"eager: no device time for {op}")
ours, bare = device_ms(f"{work}/eager.out"), device_ms(f"{work}/eager_bare.out")
want(ours is not None and ours == bare, f"eager: {ours} ms per iteration profiled, {bare} bare")
# The ranges the program opened: their device total is the iterations' device time.
rms = by_name.get("rmsnorm")
want(rms is not None and int(rms["calls"]) == iters, f"eager: rmsnorm ranges {rms and rms['calls']}")
if rms is not None and ours:
    per = int(rms["device_total_ns"]) / iters / 1e6
    want(abs(per - ours) <= 0.01 * ours, f"eager: {per:.3f} ms of device time per rmsnorm range, the program says {ours}")

fused = {r["name"]: r for r in rows("fused")}
f = fused.get("nrtsim::rms_norm")
want(f is not None and int(f["self_device_ns"]) > 0 and int(f["calls"]) == iters + 1,
     f"fused: nrtsim::rms_norm row {f}")

mlp = {r["name"]: r for r in rows("mlp")}
step = mlp.get("ProfilerStep*")
# prof.step() after the last step opens one more ProfilerStep#N, closed when the profiler
# exits (torch.profiler records it too).
want(step is not None and int(step["calls"]) in (steps, steps + 1), f"mlp: ProfilerStep* row {step}")
for op in ("aten::addmm", "aten::mm", "aten::mse_loss", "aten::relu", "aten::threshold_backward"):
    want(op in mlp and int(mlp[op]["self_device_ns"]) > 0, f"mlp: no device time for {op}")
if bad:
    sys.exit("\n".join(bad))
print(f"eager: aten::mul first, {ours} ms per iteration profiled and bare; fused: "
      f"nrtsim::rms_norm {int(f['device_avg_ns']) / 1e3:.1f} us a call; mlp: {steps} ProfilerStep ranges")
PY
then
  fail "the captures"; cat "${WORK}/check" >&2
fi
grep -q '^ *aten::mul ' "${WORK}/eager.err" || { fail "the table on stderr names no aten::mul"; show "${WORK}/eager.err"; }

cat "${WORK}/check"
finish "${WORK}"
