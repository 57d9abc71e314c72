#!/bin/bash
# nrtsim_torch (sim/torch_device/) with Debian's PyTorch 1.13 in Debian's /usr/bin/python3:
#  1. ops_test.py: every implemented op equals CPU PyTorch in float32 and bfloat16, autograd
#     through Linear/ReLU/MSE gives CPU's gradients, unimplemented ops raise NotImplementedError
#     naming the op, the fused nrtsim::rms_norm is one execution.
#  2. examples/rmsnorm_torch.py, eager and fused: the device time per iteration equals, within
#     5%, what the seed's own program (examples/rmsnorm, naive and fused) measures in the same
#     way, and the public reference it is calibrated on (sim/README.md, "Calibration").
#  3. examples/mlp_train_torch.py, float32 and bfloat16: the loss falls and matches CPU PyTorch.
# 1, 2 and 3 also with asynchronous executions (NRTSIM_TORCH_ASYNC_DEPTH=4): the same results
# and the same device time. A malformed NRTSIM_TORCH_ASYNC_DEPTH: one line, exit 1.
set -u

readonly RUNFILES="${TEST_SRCDIR}/nrtprof"
readonly PY=/usr/bin/python3  # Debian's, with python3-torch (python3 on PATH may be another)
readonly WORK="$(mktemp -d "${TEST_TMPDIR:-/tmp}/torch_device.XXXXXX")"
export PYTHONPATH="${RUNFILES}/sim/torch_device" NRT_SIM_TIME_SCALE=0 NRTPROF_ADDR= LD_PRELOAD=
# The public reference (sim/README.md, "Calibration"), per iteration, in ms.
readonly SEED_EAGER_MS=2.355 SEED_FUSED_MS=0.4033

source "${TEST_SRCDIR}/nrtprof/common/testing/checks.sh"

require_torch "${PY}"

# --- 1 ---------------------------------------------------------------------------------------
for depth in 0 4; do
  NRTSIM_TORCH_ASYNC_DEPTH="${depth}" "${PY}" "${RUNFILES}/sim/torch_device/ops_test.py" -v \
    >"${WORK}/ops_${depth}.out" 2>&1 ||
    { fail "ops_test.py with NRTSIM_TORCH_ASYNC_DEPTH=${depth}"; show "${WORK}/ops_${depth}.out"; }
done

# --- 2 ---------------------------------------------------------------------------------------
device_ms() { sed -n 's/^  device time per iteration: \([0-9.]*\) ms.*/\1/p' "$1"; }
for pair in eager:naive fused:fused; do
  variant="${pair%%:*}" seed_variant="${pair##*:}"
  "${PY}" "${RUNFILES}/examples/rmsnorm_torch.py" --variant "${variant}" --iterations 10 \
    >"${WORK}/${variant}.out" 2>&1 || { fail "rmsnorm_torch.py --variant ${variant}"; show "${WORK}/${variant}.out"; }
  "${RUNFILES}/examples/rmsnorm" --variant "${seed_variant}" --iters 10 \
    >"${WORK}/seed_${seed_variant}.out" 2>&1 || { fail "examples/rmsnorm --variant ${seed_variant}"; show "${WORK}/seed_${seed_variant}.out"; }
  grep -q 'output vs CPU PyTorch: .* -> OK$' "${WORK}/${variant}.out" ||
    { fail "rmsnorm_torch ${variant}: output"; show "${WORK}/${variant}.out"; }
  ours="$(device_ms "${WORK}/${variant}.out")" seed="$(device_ms "${WORK}/seed_${seed_variant}.out")"
  reference="${SEED_EAGER_MS}"
  [[ "${variant}" == fused ]] && reference="${SEED_FUSED_MS}"
  if ! "${PY}" -c "import sys; a, b, r = map(float, sys.argv[1:]); sys.exit(not (abs(a - b) <= 0.05 * b and abs(a - r) <= 0.05 * r))" \
      "${ours:-0}" "${seed:-0}" "${reference}"; then
    fail "rmsnorm ${variant}: ${ours:-?} ms per iteration through torch, ${seed:-?} ms by examples/rmsnorm --variant ${seed_variant}, ${reference} ms the reference"
  fi
  echo "rmsnorm ${variant}: ${ours} ms per iteration through torch, ${seed} ms the seed's program, ${reference} ms the reference"
done

# Asynchronous executions: the same device time, the same result.
NRTSIM_TORCH_ASYNC_DEPTH=4 "${PY}" "${RUNFILES}/examples/rmsnorm_torch.py" --variant eager \
  --iterations 10 >"${WORK}/eager_async.out" 2>&1 || { fail "rmsnorm_torch.py asynchronous"; show "${WORK}/eager_async.out"; }
grep -q 'output vs CPU PyTorch: .* -> OK$' "${WORK}/eager_async.out" || fail "rmsnorm_torch asynchronous: output"
grep -q 'wall time per iteration: .* (asynchronous, up to 4 executions in flight)$' "${WORK}/eager_async.out" ||
  { fail "rmsnorm_torch asynchronous: not asynchronous"; show "${WORK}/eager_async.out"; }
[[ "$(device_ms "${WORK}/eager_async.out")" == "$(device_ms "${WORK}/eager.out")" ]] ||
  fail "rmsnorm eager: $(device_ms "${WORK}/eager_async.out") ms asynchronously, $(device_ms "${WORK}/eager.out") ms synchronously"

# --- 3 ---------------------------------------------------------------------------------------
for dtype in fp32 bf16; do
  depth=0
  [[ "${dtype}" == bf16 ]] && depth=4  # one of them asynchronously
  NRTSIM_TORCH_ASYNC_DEPTH="${depth}" "${PY}" "${RUNFILES}/examples/mlp_train_torch.py" --steps 15 --dtype "${dtype}" \
    >"${WORK}/mlp_${dtype}.out" 2>&1 || { fail "mlp_train_torch.py --dtype ${dtype}"; show "${WORK}/mlp_${dtype}.out"; }
  grep -q '^  loss: .* -> falls$' "${WORK}/mlp_${dtype}.out" || fail "mlp ${dtype}: the loss does not fall"
  grep -q '^  losses and weights vs CPU PyTorch: OK$' "${WORK}/mlp_${dtype}.out" || fail "mlp ${dtype}: differs from CPU"
  grep '^  loss:' "${WORK}/mlp_${dtype}.out"
done

# --- bad input: one line ---------------------------------------------------------------------
NRTSIM_TORCH_ASYNC_DEPTH=deep "${PY}" "${RUNFILES}/examples/rmsnorm_torch.py" >"${WORK}/bad.out" 2>"${WORK}/bad.err"
status=$?
if [[ ${status} -ne 1 || "$(wc -l <"${WORK}/bad.err")" -ne 1 ]] ||
   ! grep -q "NRTSIM_TORCH_ASYNC_DEPTH must be a whole number .* not 'deep'" "${WORK}/bad.err"; then
  fail "a bad NRTSIM_TORCH_ASYNC_DEPTH: want exit 1 and one line, got ${status}"; show "${WORK}/bad.err"
fi

finish "${WORK}"
