#!/bin/bash
# The framework lane from PyTorch itself (shim/torch/, docs/pytorch.md): an unchanged PyTorch
# program (tests/programs/torch_rmsnorm.py: RMSNorm under record_function("rmsnorm"), a linear
# layer, an MSE loss and its backward, on the CPU) run with Debian's PyTorch 1.13 under
# `nrtprof run`.
#  1. The peer check: the capture's summary has every op, record_function() scope and autograd
#     node by the name torch.profiler gives it, and as many calls as torch.profiler recorded
#     for the same program run bare (its events; its key_averages() has the same names).
#  2. The ranges nest on each thread: every aten::rsqrt/pow/mean inside an "rmsnorm", each
#     backward node inside autograd's evaluate_function range, with an aten op inside, no two
#     ranges of a thread overlapping partly; iterations on a second thread land on that
#     thread's track, with the main thread's counts unchanged.
#  3. torch.profiler and nrtprof at once, with a schedule and prof.step(): the ProfilerStep#N
#     ranges too, and both count the same.
#  4. The same program without PyTorch: no libtorch and no libnrtprof_torch.so mapped, no
#     notice, only the runtime calls in the capture. And a shim folder without the lane: one
#     notice line, the program's output unchanged.
set -u

readonly RUNFILES="${TEST_SRCDIR}/nrtprof"
readonly NRTPROF="${RUNFILES}/client/nrtprof"
readonly LIBNRT="${RUNFILES}/sim/libnrt.so.1"
readonly PROGRAM="${RUNFILES}/tests/programs/torch_rmsnorm.py"
readonly PY=/usr/bin/python3  # Debian's, with python3-torch (python3 on PATH may be another)
readonly WORK="$(mktemp -d "${TEST_TMPDIR:-/tmp}/torch_lane.XXXXXX")"
export NRT_SIM_TIME_SCALE=0 NRTPROF_ADDR= LD_PRELOAD=

source "${TEST_SRCDIR}/nrtprof/common/testing/checks.sh"

require_torch "${PY}"

# --- 1 and 2: bare under torch.profiler, then under nrtprof run with a second thread -----------
"${PY}" "${PROGRAM}" "${LIBNRT}" --iters 5 --peer "${WORK}/peer.json" >"${WORK}/peer.out" 2>&1 ||
  { fail "the program under torch.profiler failed"; show "${WORK}/peer.out"; }
"${NRTPROF}" run --quiet --out "${WORK}/lane" -- \
  "${PY}" "${PROGRAM}" "${LIBNRT}" --iters 5 --thread-iters 2 --maps "${WORK}/lane.maps" \
  >"${WORK}/lane.out" 2>"${WORK}/lane.err" ||
  { fail "the program under nrtprof run failed"; show "${WORK}/lane.out" "${WORK}/lane.err"; }
grep -q '^rmsnorm+linear: 5 iterations, last loss 0.312978$' "${WORK}/lane.out" ||
  { fail "the program's output under nrtprof run"; show "${WORK}/lane.out"; }
grep -q 'nrtprof:' "${WORK}/lane.err" && { fail "nrtprof said something"; show "${WORK}/lane.err"; }
grep -q '/libnrtprof_torch.so$' "${WORK}/lane.maps" ||
  { fail "libnrtprof_torch.so not mapped in the PyTorch program"; show "${WORK}/lane.maps"; }

if ! "${PY}" - "${WORK}/lane" "${WORK}/peer.json" >"${WORK}/check1" 2>&1 <<'PY'
import csv, json, sys
capture, peer = sys.argv[1], json.load(open(sys.argv[2]))
bad = []
def want(ok, what):
    if not ok:
        bad.append(what)
summary = {r[0]: int(r[-1]) for r in csv.reader(open(capture + "/summary.csv"))
           if len(r) > 2 and r[-1].isdigit()}
for name in ("aten::mul", "aten::rsqrt", "aten::pow", "aten::mean", "rmsnorm",
             "autograd::engine::evaluate_function: MulBackward0", "MulBackward0"):
    want(name in summary, f"no row for {name} in summary.csv")
trace = json.load(open(capture + "/trace.json"))
events = trace["traceEvents"] if isinstance(trace, dict) else trace
tracks = {e["tid"]: e["args"]["name"] for e in events
          if e.get("ph") == "M" and e.get("name") == "thread_name"}
ranges = [e for e in events if e.get("ph") == "X" and e.get("cat") == "framework"]
by_tid = {}
for e in ranges:
    by_tid.setdefault(e["tid"], []).append(e)
want(len(by_tid) == 2, f"framework ranges on 2 threads, got {len(by_tid)}: {sorted(tracks.values())}")
# The main thread: the first framework track with the most ranges; the other, the worker's.
tids = sorted(by_tid, key=lambda t: -len(by_tid[t]))
counts = lambda tid: {n: sum(1 for e in by_tid[tid] if e["name"] == n) for n in {e["name"] for e in by_tid[tid]}}
main = counts(tids[0])
recorded, averages = peer["recorded"], peer["key_averages"]
want(set(recorded) == set(averages), "torch.profiler: events and key_averages name the same")
for name in sorted(set(main) | set(recorded)):
    want(main.get(name) == recorded.get(name),
         f"{name}: {main.get(name)} calls on the main thread, torch.profiler recorded {recorded.get(name)}")
want(set(summary) - {"nrt_init", "nrt_close"} == set(averages),
     f"summary names vs torch.profiler's key_averages: {sorted(set(summary) ^ set(averages))}")
print(f"peer check: {len(recorded)} names, {sum(recorded.values())} calls, equal")
if len(tids) > 1:
    worker = counts(tids[1])
    want(worker.get("rmsnorm") == 2 and worker.get("aten::rsqrt") == 2 and
         worker.get("MulBackward0") == 2, f"the second thread's 2 iterations: {worker}")
    for name, n in main.items():
        want(summary.get(name) == n + worker.get(name, 0), f"{name}: summary = both threads")
# Nesting, per thread: proper nesting (no partial overlap), ops inside their scopes.
eps = 0.002  # trace.json's microseconds have 3 decimals
for tid, evs in by_tid.items():
    evs.sort(key=lambda e: (e["ts"], -e["dur"]))
    stack, parent = [], {}
    for e in evs:
        while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - eps and \
                not e["ts"] + e["dur"] <= stack[-1]["ts"] + stack[-1]["dur"] + eps:
            stack.pop()
        while stack and e["ts"] > stack[-1]["ts"] + stack[-1]["dur"] - eps and e["dur"] > 0:
            stack.pop()
        if stack:
            top = stack[-1]
            want(e["ts"] + e["dur"] <= top["ts"] + top["dur"] + eps,
                 f"{e['name']} at {e['ts']} overlaps {top['name']} partly")
            parent[id(e)] = [s["name"] for s in stack]
        else:
            parent[id(e)] = []
        stack.append(e)
    for e in evs:
        outer = parent[id(e)]
        if e["name"] in ("aten::rsqrt", "aten::pow") or (e["name"] == "aten::mean" and "rmsnorm" in outer):
            want("rmsnorm" in outer, f"{e['name']} outside rmsnorm: {outer}")
        if e["name"] == "MulBackward0":
            want(outer[-1:] == ["autograd::engine::evaluate_function: MulBackward0"],
                 f"MulBackward0 inside {outer}")
        if e["name"] == "aten::mul" and "MulBackward0" in outer:
            parent["backward_mul"] = True
        want(e["name"] != "rmsnorm" or not outer, f"rmsnorm nested in {outer}")
want(parent.get("backward_mul"), "no aten::mul inside a MulBackward0")
if bad:
    sys.exit("\n".join(bad))
PY
then
  fail "the PyTorch capture"; cat "${WORK}/check1" >&2
fi

# --- 3: torch.profiler with steps and nrtprof at once ----------------------------------------
"${NRTPROF}" run --quiet --out "${WORK}/both" -- \
  "${PY}" "${PROGRAM}" "${LIBNRT}" --iters 5 --steps --peer "${WORK}/both.json" \
  >"${WORK}/both.out" 2>"${WORK}/both.err" ||
  { fail "the program with torch.profiler under nrtprof run failed"; show "${WORK}/both.err"; }
if ! "${PY}" - "${WORK}/both" "${WORK}/both.json" >"${WORK}/check3" 2>&1 <<'PY'
import csv, json, re, sys
summary = {r[0]: int(r[-1]) for r in csv.reader(open(sys.argv[1] + "/summary.csv"))
           if len(r) > 2 and r[-1].isdigit()}
recorded = {}
for name, n in json.load(open(sys.argv[2]))["recorded"].items():
    name = re.sub(r"^ProfilerStep#\d+$", "ProfilerStep*", name)  # as both tables group them
    recorded[name] = recorded.get(name, 0) + n
ours = {k: v for k, v in summary.items() if k not in ("nrt_init", "nrt_close")}
bad = [f"{k}: nrtprof {ours.get(k)}, torch.profiler {recorded.get(k)}"
       for k in sorted(set(ours) | set(recorded)) if ours.get(k) != recorded.get(k)]
if recorded.get("ProfilerStep*", 0) < 5:
    bad.append(f"ProfilerStep ranges: {recorded.get('ProfilerStep*')}")
trace = json.load(open(sys.argv[1] + "/trace.json"))
events = trace["traceEvents"] if isinstance(trace, dict) else trace
steps = {e["name"] for e in events if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#")}
if not {f"ProfilerStep#{i}" for i in range(5)} <= steps:
    bad.append(f"ProfilerStep#0..4 in the trace: {sorted(steps)}")
if bad:
    sys.exit("\n".join(bad))
print(f"with torch.profiler: {len(recorded)} names, {sum(recorded.values())} calls, equal")
PY
then
  fail "nrtprof and torch.profiler at once"; cat "${WORK}/check3" >&2
fi

# --- 4: without PyTorch, and without the lane ------------------------------------------------
"${NRTPROF}" run --quiet --out "${WORK}/notorch" -- \
  "${PY}" "${PROGRAM}" "${LIBNRT}" --no-torch --maps "${WORK}/notorch.maps" \
  >"${WORK}/notorch.out" 2>"${WORK}/notorch.err" ||
  { fail "the program without torch under nrtprof run failed"; show "${WORK}/notorch.err"; }
grep -q 'libnrtprof_shim_backend.so$' "${WORK}/notorch.maps" ||
  fail "the backend should be mapped in the program without torch (it called libnrt)"
if grep -qE 'libtorch|libc10|libnrtprof_torch' "${WORK}/notorch.maps"; then
  fail "a torch library is mapped in the program without torch"; show "${WORK}/notorch.maps"
fi
grep -q 'nrtprof:' "${WORK}/notorch.err" && { fail "nrtprof said something"; show "${WORK}/notorch.err"; }
rows="$(cut -d, -f1 "${WORK}/notorch/summary.csv" | tail -n +2 | sort | tr '\n' ' ')"
[[ "${rows}" == "nrt_close nrt_init " ]] || fail "without torch, want nrt_close and nrt_init only, got: ${rows}"

# A shim folder without libnrtprof_torch.so (nrtprof built without a libtorch): one line
# about PyTorch (and, at exit, the one about the address named where no daemon listens).
mkdir -p "${WORK}/nolane"
cp "${RUNFILES}/shim/libnrtprof_shim.so" "${RUNFILES}/shim/libnrtprof_shim_backend.so" "${WORK}/nolane/"
NRTPROF_ADDR="unix:/tmp/nrtprof-nolane-$$.sock" LD_PRELOAD="${WORK}/nolane/libnrtprof_shim.so" \
  "${PY}" "${PROGRAM}" "${LIBNRT}" --iters 2 >"${WORK}/nolane.out" 2>"${WORK}/nolane.err" ||
  { fail "the program with a shim without its lane failed"; show "${WORK}/nolane.err"; }
grep -q '^rmsnorm+linear: 2 iterations' "${WORK}/nolane.out" || fail "the program's output without the lane"
if [[ "$(grep -c '^nrtprof: PyTorch is loaded .* but this nrtprof has no PyTorch lane' "${WORK}/nolane.err")" != 1 ||
      "$(grep -ci 'torch' "${WORK}/nolane.err")" != 1 ]]; then
  fail "without the lane, want one notice line on stderr"; show "${WORK}/nolane.err"
fi

cat "${WORK}/check1" "${WORK}/check3" 2>/dev/null
finish "${WORK}"
