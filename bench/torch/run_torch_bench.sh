#!/bin/bash
# Per-op cost of observing PyTorch's ops: nrtprof's PyTorch lane (shim/torch/) beside
# torch.profiler's own, on the same op (torch_op_bench.py), with Debian's PyTorch 1.13.
# Builds -c opt, then runs the three modes interleaved, REPEATS times each, and prints each
# mode's best and median ns per op and the cost over bare. Records the CPU and load average.
#
#   bench/torch/run_torch_bench.sh [REPEATS] [OPS]      (defaults 5, 200000)
set -euo pipefail
cd "$(dirname "$0")/../.."
repeats="${1:-5}"
ops="${2:-200000}"
bazel build -c opt //client:nrtprof //daemon:nrtprofd //shim:shim //sim:libnrt.so.1 >&2
bin="$(bazel info -c opt bazel-bin 2>/dev/null)"
py=/usr/bin/python3
prog=bench/torch/torch_op_bench.py
out="$(mktemp -d /tmp/torch_bench.XXXXXX)"
export NRT_SIM_TIME_SCALE=0 NRTPROF_ADDR= LD_PRELOAD=

echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "${repeats}"); do
  "${py}" "${prog}" "${bin}/sim/libnrt.so.1" bare --ops "${ops}" >>"${out}/runs"
  "${py}" "${prog}" "${bin}/sim/libnrt.so.1" torch_profiler --ops "${ops}" >>"${out}/runs"
  "${bin}/client/nrtprof" run --quiet --files summary --out "${out}/capture$i" -- \
    "${py}" "${prog}" "${bin}/sim/libnrt.so.1" nrtprof --ops "${ops}" >>"${out}/runs"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
# The lane recorded every op: the capture's aten::add_ count.
calls="$(grep '^aten::add_,' "${out}/capture1/summary.csv" | awk -F, '{print $NF}')"
echo "nrtprof capture 1: ${calls} aten::add_ ranges recorded (5 rounds x ${ops} + 10000 warm-up expected)"
"${py}" - "${out}/runs" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    mode, ns = line.split()
    runs.setdefault(mode, []).append(float(ns))
bare = min(runs["bare"])
print(f"{'mode':<16}{'best ns/op':>12}{'median':>10}{'over bare (best)':>18}")
for mode in ("bare", "nrtprof", "torch_profiler"):
    v = runs[mode]
    print(f"{mode:<16}{min(v):>12.1f}{statistics.median(v):>10.1f}{min(v) - bare:>18.1f}")
PY
