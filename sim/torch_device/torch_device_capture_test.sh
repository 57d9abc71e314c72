#!/bin/bash
# Whole training steps of a real PyTorch program, taken by `nrtprof capture --iterations` from a
# standing daemon, as a user takes them from a job already running:
#   nrtprofd (private) <- examples/mlp_train_torch.py, the shim preloaded, NRTPROF_ADDR at it
#   nrtprof capture --iterations 3
# The program's steps are torch.profiler's (prof.step(): ranges ProfilerStep#N, recorded by the
# shim's PyTorch lane). The capture must hold exactly 3 whole steps, consecutive numbers, each
# with the step's aten ops (forward, the loss, the backward's ops, which PyTorch's autograd
# engine runs on its device thread, and the SGD update) and its device executions inside it;
# every range and execution of the capture in the steps' span; the three steps the same device
# work; and the table's ProfilerStep* row charged all of it (the backward's device time too,
# though its ranges are on another thread), as the program itself measures a step's.
# And "0 dropped": the capture counts only what was dropped within it. The program's start (its
# CPU reference loop, ~100,000 ops a second into the thread's ring, which the daemon's flight
# recorder has recorded) may overflow the ring on a loaded machine (measured: up to 22,954 of
# its 32,768 slots waiting, load 10-16 on 2 vCPUs; the steps' rate at most 1,236); those drops
# are seconds before the steps, often within the 2 s of context the capture replays from
# before its start, and are not the capture's (daemon/ingest.h, ForReplay). The unit tests
# ACaptureOfThePastCountsOnlyTheDropsOfItsWindow (daemon/ingest_test.cc) make such a flood.
set -u

readonly RUNFILES="${TEST_SRCDIR}/nrtprof"
readonly NRTPROF="${RUNFILES}/client/nrtprof" NRTPROFD="${RUNFILES}/daemon/nrtprofd"
readonly PY=/usr/bin/python3  # Debian's, with python3-torch
readonly WORK="$(mktemp -d "${TEST_TMPDIR:-/tmp}/torch_device_capture.XXXXXX")"
# A unix socket's path has at most 107 bytes: the test's temporary folder may be longer.
readonly SOCK_DIR="$(mktemp -d /tmp/nrtprof-tdc.XXXXXX)"
readonly SOCK="${SOCK_DIR}/nrtprofd.sock" STEPS=150 ITERATIONS=3
export PYTHONPATH="${RUNFILES}/sim/torch_device"

source "${TEST_SRCDIR}/nrtprof/common/testing/checks.sh"
cli() { NRTPROF_ADDR= LD_PRELOAD= "${NRTPROF}" "$@"; }

require_torch "${PY}"

daemon_pid="" program_pid=""
cleanup() {
  [[ -n "${program_pid}" ]] && kill "${program_pid}" 2>/dev/null
  [[ -n "${daemon_pid}" ]] && kill "${daemon_pid}" 2>/dev/null
  wait 2>/dev/null
  rm -rf "${SOCK_DIR}"
}
trap cleanup EXIT

NRTPROF_ADDR= LD_PRELOAD= "${NRTPROFD}" --socket="${SOCK}" --output_root="${WORK}/captures" \
  >"${WORK}/daemon.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do cli status --addr "unix:${SOCK}" >/dev/null 2>&1 && break; sleep 0.1; done
cli status --addr "unix:${SOCK}" >"${WORK}/status" 2>&1 ||
  { fail "the daemon did not start"; show_tail "${WORK}/daemon.log" "${WORK}/status"; exit 1; }

# The device's time passes (scale 1): a step takes its ~8 ms of device time and more of Python's.
LD_PRELOAD="${RUNFILES}/shim/libnrtprof_shim.so" NRTPROF_ADDR="unix:${SOCK}" NRT_SIM_TIME_SCALE=1 \
  "${PY}" "${RUNFILES}/examples/mlp_train_torch.py" --steps "${STEPS}" \
  >"${WORK}/mlp.out" 2>"${WORK}/mlp.err" &
program_pid=$!

# Until the daemon says the program marks steps (nrtprof status: "step N").
stepping=""
for _ in $(seq 300); do
  cli status --addr "unix:${SOCK}" >"${WORK}/status" 2>&1
  stepping="$(grep -E "^  pid ${program_pid} .* step [0-9]+ " "${WORK}/status")" && break
  kill -0 "${program_pid}" 2>/dev/null || break
  sleep 0.1
done
[[ -n "${stepping}" ]] ||
  { fail "the program never showed a step in nrtprof status"; show_tail "${WORK}/status" "${WORK}/mlp.err"; exit 1; }

timeout 120 env NRTPROF_ADDR= LD_PRELOAD= "${NRTPROF}" capture --addr "unix:${SOCK}" \
  --iterations "${ITERATIONS}" --out "${WORK}/cap" >"${WORK}/capture.out" 2>"${WORK}/capture.err"
rc=$?
[[ ${rc} -eq 0 ]] || { fail "nrtprof capture --iterations ${ITERATIONS} exited ${rc}"; show_tail "${WORK}/capture.err"; }
wait "${program_pid}"
rc=$?
program_pid=""
[[ ${rc} -eq 0 ]] || { fail "mlp_train_torch.py exited ${rc}"; show_tail "${WORK}/mlp.out" "${WORK}/mlp.err"; }
grep -q "losses and weights vs CPU PyTorch: OK" "${WORK}/mlp.out" ||
  { fail "the program's training does not match CPU PyTorch"; show_tail "${WORK}/mlp.out"; }

if ! "${PY}" - "${WORK}" "${ITERATIONS}" >"${WORK}/check" 2>&1 <<'PY'
import csv, json, re, sys
work, n = sys.argv[1], int(sys.argv[2])
bad = []
def want(ok, what):
    if not ok:
        bad.append(what)

err = open(f"{work}/capture.err").read()
m = re.search(r"\): steps (\d+) to (\d+) of each process", err)
want(m is not None, "capture: no 'steps K to L of each process' line")
first = int(m.group(1)) if m else None
if m:
    want(int(m.group(2)) == first + n - 1, f"capture: steps {m.group(1)} to {m.group(2)}, not {n}")
want(re.search(r"from 1 process, 0 dropped", err) is not None, "capture: not 1 process, 0 dropped")

events = json.load(open(f"{work}/cap/trace.json"))
events = events["traceEvents"] if isinstance(events, dict) else events
spans = [e for e in events if e.get("ph") == "X"]
framework = [e for e in spans if e.get("cat") == "framework"]
steps = sorted((e for e in framework if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
names = [s["name"] for s in steps]
want(first is not None and names == [f"ProfilerStep#{first + i}" for i in range(n)],
     f"the capture's steps are {names}, not {n} from ProfilerStep#{first}")
for a, b in zip(steps, steps[1:]):
    want(a["ts"] + a["dur"] <= b["ts"] + 1e-3, f"{a['name']} overlaps {b['name']}")

def end(e):
    return e["ts"] + e["dur"]
calls = {e["args"]["correlation_id"]: e for e in spans if e.get("cat") == "runtime"}
device = [e for e in spans if e.get("cat") in ("executions", "DMA") and "correlation_id" in e.get("args", {})]
def inside(e, s):
    return s["ts"] <= e["ts"] and end(e) <= end(s) + 1e-3

# Each step: its forward, loss, backward and update ops; its executions.
expected = {"aten::addmm": 2, "aten::relu": 1, "aten::mse_loss": 1, "aten::mse_loss_backward": 1,
            "aten::threshold_backward": 1, "aten::mm": 3}
per_step_device = []
for s in steps:
    ops = {}
    for e in framework:
        if inside(e, s):
            ops[e["name"]] = ops.get(e["name"], 0) + 1
    for op, k in expected.items():
        want(ops.get(op, 0) == k, f"{s['name']}: {ops.get(op, 0)} {op}, not {k}")
    want(ops.get("aten::add_", 0) >= 4, f"{s['name']}: {ops.get('aten::add_', 0)} aten::add_ (SGD's updates)")
    mine = [d for d in device if d["args"]["correlation_id"] in calls and inside(calls[d["args"]["correlation_id"]], s)]
    execs = [d for d in mine if d.get("cat") == "executions"]
    want(len(execs) >= sum(expected.values()), f"{s['name']}: {len(execs)} executions")
    models = {d["args"].get("model") for d in execs}
    for model in ("aten_addmm", "aten_relu", "aten_threshold_backward", "aten_transpose"):
        want(model in models, f"{s['name']}: no execution of {model} (models {sorted(models)})")
    per_step_device.append(sum(d["dur"] for d in mine))
# Nothing of the capture outside the steps' span: whole steps, nothing more.
if steps:
    lo, hi = steps[0]["ts"], end(steps[-1])
    outside = [e["name"] for e in framework if not (lo <= e["ts"] and end(e) <= hi + 1e-3)]
    want(not outside, f"ranges outside the steps: {outside[:5]}")
    outside = [c["name"] for c in calls.values() if not (lo <= c["ts"] and end(c) <= hi + 1e-3)]
    want(not outside, f"runtime calls outside the steps: {outside[:5]}")
    strays = [d for d in device if d["args"]["correlation_id"] not in calls or
              not any(inside(calls[d["args"]["correlation_id"]], s) for s in steps)]
    want(not strays, f"{len(strays)} device events of no step")
# The same work each step: the same device time (the cost model's, to the microsecond).
if per_step_device:
    want(max(per_step_device) - min(per_step_device) < 1.0,
         f"device time per step differs: {[round(x) for x in per_step_device]} us")

# The table: one ProfilerStep* row of n calls, charged all of the steps' device time.
rows = {r["name"]: r for r in csv.DictReader(open(f"{work}/cap/summary.csv"))}
step_row = rows.get("ProfilerStep*")
want(step_row is not None and int(step_row["calls"]) == n, f"summary: ProfilerStep* row {step_row}")
if step_row is not None and per_step_device:
    table_us = int(step_row["device_total_ns"]) / 1e3
    want(abs(table_us - sum(per_step_device)) < 1.0,
         f"summary: ProfilerStep* NEURON total {table_us:.1f} us, the steps' device events {sum(per_step_device):.1f} us")
# And the program's own measure of a step (its runtime's system trace, over all its steps).
prog = re.search(r"device time per step: ([0-9.]+) ms", open(f"{work}/mlp.out").read())
want(prog is not None, "the program printed no device time per step")
if prog and per_step_device:
    ours = sum(per_step_device) / n / 1e3
    want(abs(ours - float(prog.group(1))) <= 0.02 * float(prog.group(1)),
         f"a captured step's device time {ours:.3f} ms, the program's {prog.group(1)} ms per step")
if bad:
    sys.exit("\n".join(bad))
before = re.search(r"^events dropped: +(\d+)", open(f"{work}/status").read(), re.M)
if before and int(before.group(1)):
    print(f"(the program had dropped {before.group(1)} events before the capture began; not counted)")
print(f"{n} whole steps from ProfilerStep#{first}, each with its aten ops and "
      f"{round(per_step_device[0])} us of device time; the table's ProfilerStep* charged "
      f"{int(step_row['device_total_ns']) / 1e6:.3f} ms; the program's {prog.group(1)} ms per step")
PY
then
  fail "the capture"; cat "${WORK}/check" >&2
  show_tail "${WORK}/capture.err"
fi

cat "${WORK}/check"
finish "${WORK}"
