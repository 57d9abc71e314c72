#!/bin/bash
# `nrtprof export` read by the real pprof (Debian's golang-go, `go tool pprof`, the reference
# reader of the format): RMSNorm naive (with --stacks and --device-profile) and compiled under
# `nrtprof run` with a private daemon, each exported as FILE.pb.gz, then
#   - `-sample_index=device_time -top -cum` gives the summary table's first row (aten::mul) and
#     every framework row exactly its NEURON total from summary.json, in nanoseconds, and the
#     profile's total is the capture's device time;
#   - `-diff_base` of naive against compiled shows the reduction the two tables show;
#   - a multi-threaded program (examples/mlp --threads 3, thread 0 marking the steps): its
#     ProfilerStep* cumulative time is the table's row, which charges every thread's device work
#     in a step, though the other threads' ranges hold no step;
#   - `-traces` holds the stacks: engine op, model, nrt_execute, aten::mul, rmsnorm,
#     ProfilerStep*, then the program's own functions (main), with the pid, host and
#     NeuronCore of the capture;
#   - --format collapsed: folded stacks, root first, adding up to the same device time;
#   - `-raw` prints the profile's Time: and Duration:, the capture's window as summary.json
#     has it (its start to the nanosecond);
#   - bad input: one line on stderr, a non-zero exit, nothing written.
# CI has `go` (third_party/install_debian_deps.sh installs golang-go); without it the test says
# so and skips.
set -u

readonly RUNFILES="${TEST_SRCDIR}/nrtprof"
readonly NRTPROF="${RUNFILES}/client/nrtprof"
readonly RMSNORM="${RUNFILES}/examples/rmsnorm"
readonly MLP="${RUNFILES}/examples/mlp"
readonly WORK="$(mktemp -d "${TEST_TMPDIR:-/tmp}/pprof_export.XXXXXX")"
readonly ITERS=5

if ! command -v go >/dev/null; then
  echo "SKIP: no 'go' on PATH: this test reads the export with Debian's go tool pprof" \
    "(apt-get install golang-go, or third_party/install_debian_deps.sh as CI does)"
  exit 0
fi
# go tool pprof keeps a cache and settings under HOME and GOCACHE: the test's own.
export HOME="${WORK}/home" GOCACHE="${WORK}/gocache" GOPATH="${WORK}/gopath" GOFLAGS=
mkdir -p "${HOME}"
# The simulated device answers at once; no daemon or preload from the machine interferes.
export NRT_SIM_TIME_SCALE=0 NRTPROF_ADDR= LD_PRELOAD=

source "${TEST_SRCDIR}/nrtprof/common/testing/checks.sh"

# Runs a command, keeping stdout in WORK/out, stderr in WORK/err, the exit code in ${rc}.
run() {
  "$@" >"${WORK}/out" 2>"${WORK}/err"
  rc=$?
}

show_run() {
  echo "--- $*: exit ${rc}, stdout:" >&2
  head -50 "${WORK}/out" >&2
  echo "--- stderr:" >&2
  cat "${WORK}/err" >&2
}

pprof() {
  go tool pprof "$@"
}

# --- the captures, and their export --------------------------------------------------------------
capture() {
  local name="$1"
  shift
  run "${NRTPROF}" run --out "${WORK}/${name}" "$@"
  if [[ ${rc} -ne 0 || ! -s "${WORK}/${name}/summary.json" ]]; then
    show_run nrtprof run "$@"
    fail "${name}: nrtprof run should exit 0 and write summary.json"
    return 1
  fi
  run "${NRTPROF}" export "${WORK}/${name}" --format pprof -o "${WORK}/${name}.pb.gz"
  if [[ ${rc} -ne 0 || ! -s "${WORK}/${name}.pb.gz" ]]; then
    show_run nrtprof export "${name}"
    fail "${name}: nrtprof export should exit 0 and write ${name}.pb.gz"
    return 1
  fi
  if [[ "$(head -c 2 "${WORK}/${name}.pb.gz" | od -An -tx1 | tr -d ' ')" != "1f8b" ]]; then
    fail "${name}: ${name}.pb.gz should be gzip"
  fi
}
capture naive --stacks 8 --device-profile -- "${RMSNORM}" --variant naive --iters "${ITERS}" ||
  exit 1
capture compiled -- "${RMSNORM}" --variant compiled --iters "${ITERS}" || exit 1

# --- -top -cum: each framework row's NEURON total, to the nanosecond -----------------------------
top() {
  pprof -sample_index=device_time -top -cum -unit=ns -nodefraction=0 -edgefraction=0 \
    -nodecount=100000 "$@"
}
run top "${WORK}/naive.pb.gz"
cp "${WORK}/out" "${WORK}/naive.top"
if [[ ${rc} -ne 0 ]]; then
  show_run go tool pprof -top -cum naive.pb.gz
  fail "go tool pprof should read naive.pb.gz"
fi

# Prints, per check, "ok ..." or "bad ...". Arguments: the summary.json and the -top output.
check_top() {
  python3 - "$@" <<'PY'
import json, re, sys
summary = json.load(open(sys.argv[1]))
rows = summary["rows"]
cum, total = {}, None
for line in open(sys.argv[2]):
    m = re.match(r"Duration: .*Total samples = (-?\d+)ns", line)
    if m:
        total = int(m.group(1))
    m = re.match(r"^\s*(-?\d+)(?:ns)?\s+\S+\s+\S+\s+(-?\d+)(?:ns)?\s+\S+\s+(.*?)\s*$", line)
    if m:
        cum[m.group(3)] = int(m.group(2))
want_total = summary["self_device_total_ns"] + summary.get("uncorrelated_device_ns", 0)
print(("ok" if total == want_total else "bad") +
      f" profile total {total} ns, the capture's device time {want_total} ns")
# The table's first row, as nrtprof prints it: most Self NEURON first, ties by name.
first = sorted(rows, key=lambda r: (-r.get("self_device_ns", 0), r["name"]))[0]
print(("ok" if cum.get(first["name"]) == first["device_total_ns"] else "bad") +
      f" first row {first['name']}: pprof cum {cum.get(first['name'])} ns,"
      f" NEURON total {first['device_total_ns']} ns")
# Every framework row with device time (runtime call rows are calls outside any range, while
# pprof's node of a libnrt function holds them all).
for r in rows:
    if r.get("device_total_ns", 0) and not r["name"].startswith("nrt"):
        print(("ok" if cum.get(r["name"]) == r["device_total_ns"] else "bad") +
              f" row {r['name']}: pprof cum {cum.get(r['name'])} ns,"
              f" NEURON total {r['device_total_ns']} ns")
PY
}
check_top "${WORK}/naive/summary.json" "${WORK}/naive.top" >"${WORK}/checks"
grep -q '^ok first row aten::mul:' "${WORK}/checks" ||
  fail "-top -cum: aten::mul should be the naive table's first row with its NEURON total: $(grep 'first row' "${WORK}/checks")"
if grep -q '^bad' "${WORK}/checks"; then
  fail "-top -cum against summary.json: $(grep '^bad' "${WORK}/checks" | tr '\n' ';')"
  cat "${WORK}/naive.top" >&2
fi
[[ $(grep -c '^ok row ' "${WORK}/checks") -ge 5 ]] ||
  fail "-top -cum: want aten::mul, aten::add, aten::mean, aten::rsqrt, rmsnorm checked, got: $(cat "${WORK}/checks")"

run top "${WORK}/compiled.pb.gz"
check_top "${WORK}/compiled/summary.json" "${WORK}/out" >"${WORK}/checks"
if grep -q '^bad' "${WORK}/checks"; then
  fail "compiled: -top -cum against summary.json: $(grep '^bad' "${WORK}/checks" | tr '\n' ';')"
fi

# --- other threads' work in a step: under ProfilerStep*, as the table's row has it ----------------
capture threads -- "${MLP}" --threads 3 --iters 5 || exit 1
run top "${WORK}/threads.pb.gz"
cp "${WORK}/out" "${WORK}/threads.top"
check_top "${WORK}/threads/summary.json" "${WORK}/threads.top" >"${WORK}/checks"
grep -q '^ok row ProfilerStep\*:' "${WORK}/checks" ||
  fail "threads: ProfilerStep* should be checked and equal the table's row: $(cat "${WORK}/checks")"
if grep -q '^bad' "${WORK}/checks"; then
  fail "threads: -top -cum against summary.json: $(grep '^bad' "${WORK}/checks" | tr '\n' ';')"
  cat "${WORK}/threads.top" >&2
fi
# Which threads' work it holds (the machine's scheduling decides; said, not checked).
run pprof -sample_index=device_time -tags -focus='^ProfilerStep\*$' "${WORK}/threads.pb.gz"
echo "threads: ProfilerStep*'s device time by thread: $(grep -A5 ' tid:' "${WORK}/out" | tr -s ' \n' ' ')"

# --- -diff_base: naive less compiled, as the tables say ------------------------------------------
run top -diff_base "${WORK}/compiled.pb.gz" "${WORK}/naive.pb.gz"
cp "${WORK}/out" "${WORK}/diff.top"
if ! python3 - "${WORK}/naive/summary.json" "${WORK}/compiled/summary.json" "${WORK}/diff.top" \
    >"${WORK}/diff_check" 2>&1 <<'PY'
import json, re, sys
def device(path):
    s = json.load(open(path))
    rows = {r["name"]: r.get("device_total_ns", 0) for r in s["rows"]}
    return s["self_device_total_ns"] + s.get("uncorrelated_device_ns", 0), rows
naive, naive_rows = device(sys.argv[1])
compiled, compiled_rows = device(sys.argv[2])
shown, cum = None, {}
for line in open(sys.argv[3]):
    m = re.match(r"Showing nodes accounting for (-?\d+)ns", line)
    if m:
        shown = int(m.group(1))
    m = re.match(r"^\s*(-?\d+)(?:ns)?\s+\S+\s+\S+\s+(-?\d+)(?:ns)?\s+\S+\s+(.*?)\s*$", line)
    if m:
        cum[m.group(3)] = int(m.group(2))
bad = []
if not naive > compiled:
    bad.append(f"the tables show no reduction ({naive} ns against {compiled} ns)")
if shown != naive - compiled:
    bad.append(f"diff accounts for {shown} ns, the tables' reduction is {naive - compiled} ns")
step = naive_rows.get("ProfilerStep*", 0) - compiled_rows.get("ProfilerStep*", 0)
if cum.get("ProfilerStep*") != step:
    bad.append(f"ProfilerStep*: diff {cum.get('ProfilerStep*')} ns, the tables' {step} ns")
if cum.get("aten::mul") != naive_rows["aten::mul"] - compiled_rows.get("aten::mul", 0):
    bad.append(f"aten::mul: diff {cum.get('aten::mul')} ns")
if bad:
    sys.exit("; ".join(bad))
PY
then
  fail "-diff_base compiled naive: $(cat "${WORK}/diff_check")"
  cat "${WORK}/diff.top" >&2
fi

# --- -traces: the stacks, leaf first, and their labels -------------------------------------------
run pprof -sample_index=device_time -traces "${WORK}/naive.pb.gz"
cp "${WORK}/out" "${WORK}/naive.traces"
if ! python3 - "${WORK}/naive/summary.json" "${WORK}/naive.traces" "${WORK}/naive/trace.json" \
    >"${WORK}/traces_check" 2>&1 <<'PY'
import json, re, sys
summary = json.load(open(sys.argv[1]))
process = summary["processes"][0]
trace = json.load(open(sys.argv[3]))
events = trace["traceEvents"] if isinstance(trace, dict) else trace
models = {e["args"]["model"] for e in events
          if e.get("name") == "nc_exec_running" and "model" in (e.get("args") or {})}
blocks, block = [], None
for line in open(sys.argv[2]):
    line = line.rstrip("\n")
    if line.startswith("-----------+"):
        block = {"labels": {}, "frames": []}
        blocks.append(block)
        continue
    if block is None:
        continue
    m = re.match(r"^\s*(\w+):\s+(.*?)\s*$", line)
    if m and not block["frames"]:
        block["labels"][m.group(1)] = m.group(2)
        continue
    m = re.match(r"^\s+(\S+)\s{3}(.*?)\s*$", line)   # value, then the leaf
    if m and not block["frames"]:
        block["value"] = m.group(1)
        block["frames"].append(m.group(2))
    elif line.strip():
        block["frames"].append(line.strip())
bad = []
ops = [b for b in blocks
       if len(b["frames"]) > 6 and re.search(r" \[\w+\]$", b["frames"][0])
       and b["frames"][1] in models and b["frames"][2:6] == ["nrt_execute", "aten::mul", "rmsnorm", "ProfilerStep*"]]
if not ops:
    bad.append("no stack engine op > model > nrt_execute > aten::mul > rmsnorm > ProfilerStep*")
elif "main" not in ops[0]["frames"][6:]:
    bad.append(f"no host frame 'main' under the ranges (--stacks 8): {ops[0]['frames'][6:]}")
models_leaf = [b for b in blocks if b["frames"] and b["frames"][0] in models
               and b["frames"][1:3] == ["nrt_execute", "aten::mul"]]
if not models_leaf:
    bad.append(f"no stack model ({', '.join(sorted(models))}) > nrt_execute > aten::mul")
for b in ops[:1] + models_leaf[:1]:
    labels = b["labels"]
    if labels.get("pid") != str(process["pid"]):
        bad.append(f"pid label {labels.get('pid')}, the capture's {process['pid']}")
    if process.get("host") and labels.get("host") != process["host"]:
        bad.append(f"host label {labels.get('host')}, the capture's {process['host']}")
    if labels.get("neuron_core") != "0":
        bad.append(f"neuron_core label {labels.get('neuron_core')}, want 0")
if bad:
    sys.exit("; ".join(bad))
print(f"{len(blocks)} traces")
PY
then
  fail "-traces: $(cat "${WORK}/traces_check")"
  head -80 "${WORK}/naive.traces" >&2
fi

# --- Time: and Duration: the capture's window -----------------------------------------------------
run pprof -raw "${WORK}/naive.pb.gz"
cp "${WORK}/out" "${WORK}/naive.raw"
if ! python3 - "${WORK}/naive/summary.json" "${WORK}/naive.raw" >"${WORK}/time_check" 2>&1 <<'PY'
import datetime, json, re, sys
summary = json.load(open(sys.argv[1]))
raw = open(sys.argv[2]).read()
def go_duration(ns):
    """time.Duration's String(), as pprof prints it (then cut to 4 characters: %.4v)."""
    def frac(v, digits):
        whole, part = divmod(v, 10 ** digits)
        part = f"{part:0{digits}d}".rstrip("0")
        return f"{whole}.{part}" if part else f"{whole}"
    if ns < 1000:
        return f"{ns}ns"
    if ns < 1_000_000:
        return frac(ns, 3) + "\u00b5s"
    if ns < 1_000_000_000:
        return frac(ns, 6) + "ms"
    h, rest = divmod(ns, 3600 * 10**9)
    m, rest = divmod(rest, 60 * 10**9)
    s = frac(rest, 9) + "s"
    return (f"{h}h{m}m" if h else f"{m}m" if m else "") + s
bad = []
m = re.search(r"^Time: (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.(\d+))? ([+-]\d{4}) ", raw, re.M)
if not m:
    bad.append("no Time: line")
else:
    seconds = datetime.datetime.strptime(m.group(1) + " " + m.group(3), "%Y-%m-%d %H:%M:%S %z")
    ns = int(seconds.timestamp()) * 10**9 + int((m.group(2) or "0").ljust(9, "0"))
    if ns != summary["window_start_unix_ns"]:
        bad.append(f"Time: {m.group(0)} is {ns} ns, summary.json's window starts at "
                   f"{summary['window_start_unix_ns']} ns")
m = re.search(r"^Duration: (.*)$", raw, re.M)
want = go_duration(summary["window_ns"])[:4]
if not m:
    bad.append("no Duration: line")
elif m.group(1) != want:
    bad.append(f"Duration: {m.group(1)}, summary.json's window {summary['window_ns']} ns ({want})")
if bad:
    sys.exit("; ".join(bad))
PY
then
  fail "-raw: $(cat "${WORK}/time_check")"
  head -8 "${WORK}/naive.raw" >&2
fi

# --- folded stacks -------------------------------------------------------------------------------
run "${NRTPROF}" export "${WORK}/naive" --format collapsed -o "${WORK}/naive.folded"
if [[ ${rc} -ne 0 ]]; then
  show_run nrtprof export --format collapsed
  fail "--format collapsed should exit 0"
fi
if ! python3 - "${WORK}/naive/summary.json" "${WORK}/naive.folded" >"${WORK}/folded_check" 2>&1 <<'PY'
import json, sys
summary = json.load(open(sys.argv[1]))
want = summary["self_device_total_ns"] + summary.get("uncorrelated_device_ns", 0)
total, mul = 0, False
for line in open(sys.argv[2]):
    stack, value = line.rstrip("\n").rsplit(" ", 1)
    total += int(value)
    frames = stack.split(";")
    if "ProfilerStep*;rmsnorm;aten::mul;nrt_execute;" in stack and frames[0] != "ProfilerStep*":
        mul = mul or frames.index("main") < frames.index("ProfilerStep*")
if total != want:
    sys.exit(f"folded stacks add up to {total} ns, the capture's device time is {want} ns")
if not mul:
    sys.exit("no root-first stack main;...;ProfilerStep*;rmsnorm;aten::mul;nrt_execute;...")
PY
then
  fail "--format collapsed: $(cat "${WORK}/folded_check")"
fi

# --- bad input: one line, a non-zero exit, nothing written ----------------------------------------
bad_input() {
  local want_rc="$1" out="$2"
  shift 2
  run "${NRTPROF}" export "$@"
  if [[ ${rc} -ne ${want_rc} || $(wc -l <"${WORK}/err") -ne 1 || -e "${out}" ]]; then
    show_run nrtprof export "$@"
    fail "nrtprof export $*: want exit ${want_rc}, one line on stderr and no ${out}"
  fi
}
mkdir -p "${WORK}/not_a_capture"
bad_input 1 "${WORK}/x.pb.gz" "${WORK}/not_a_capture" -o "${WORK}/x.pb.gz"
bad_input 1 "${WORK}/x.pb.gz" "${WORK}/no_such_folder" -o "${WORK}/x.pb.gz"
mkdir -p "${WORK}/damaged"
echo "not a trace" >"${WORK}/damaged/trace.pftrace"
bad_input 1 "${WORK}/x.pb.gz" "${WORK}/damaged" -o "${WORK}/x.pb.gz"
bad_input 2 "${WORK}/x.svg" "${WORK}/naive" --format svg -o "${WORK}/x.svg"
bad_input 1 "${WORK}/no_such_folder/x.pb.gz" "${WORK}/naive" -o "${WORK}/no_such_folder/x.pb.gz"

finish "${WORK}" "PASS: go tool pprof reads nrtprof export with the summary's device time"
