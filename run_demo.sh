#!/usr/bin/env bash
# The main job: the RMSNorm demo on the simulated Neuron runtime, all three variants (naive
# eager ops, one fused kernel, the ops compiled into one model), each run under the profiler
# (`nrtprof run`), printing its device time and the profiler's table of where that time went;
# then the naive variant through the runtime's asynchronous API (`--async 4`: the same device
# work, scheduled without waiting on each call, as PyTorch-native Neuron does), and the naive
# variant again from Python, in the shape real frameworks have (a C extension module that links
# libnrt, imported by Python with RTLD_LOCAL). Last, the seed's RMSNorm in real PyTorch on the
# simulated device (sim/torch_device/), eager and fused, when Debian's /usr/bin/python3 has torch.
# Installs what is missing first; safe to run twice (each run replaces the demo's captures).
set -euo pipefail
cd "$(dirname "$0")"

./third_party/install_debian_deps.sh
echo "nrtprof: building the profiler, the examples and the simulated runtime"
bazel build --noshow_progress //client:nrtprof //daemon:nrtprofd //shim:libnrtprof_shim.so \
  //examples/... 2>&1 | grep -vE '^(INFO|Loading|Analyzing|Target|  bazel-bin)' || true
for f in bazel-bin/client/nrtprof bazel-bin/examples/rmsnorm bazel-bin/examples/rmsnorm_py; do
  test -x "$f" || { echo "nrtprof: build failed ($f missing)" >&2; exit 1; }
done

iters="${NRTPROF_DEMO_ITERS:-20}"
captures="$PWD/nrtprof-captures"
declare -A ms wall
# Runs `rmsnorm ARGS...` under the profiler into nrtprof-captures/NAME and keeps its device and
# wall time per iteration in ms[KEY] and wall[KEY].
profile_rmsnorm() {
  local key="$1" name="$2"
  shift 2
  local out="$captures/$name" log
  rm -rf "$out"
  echo
  echo "\$ bazel-bin/client/nrtprof run --out nrtprof-captures/$name -- bazel-bin/examples/rmsnorm $*"
  log="$(mktemp)"
  bazel-bin/client/nrtprof run --out "$out" -- bazel-bin/examples/rmsnorm "$@" 2>&1 | tee "$log"
  ms[$key]="$(awk '/device time per iteration/ {print $5}' "$log")"
  wall[$key]="$(awk '/wall time per iteration/ {print $5}' "$log")"
  rm -f "$log"
}
for variant in naive fused compiled; do
  profile_rmsnorm "$variant" "rmsnorm-$variant" --variant "$variant" --iters "$iters" --wall_time
done
# The naive variant through the asynchronous API (nrt/nrt_async.h): each op's execution
# scheduled on the compute queue and each epsilon copy on the tensor-op queue, up to 4 requests
# in flight. The same device work; the host no longer waits on every call.
profile_rmsnorm naive_async rmsnorm-naive-async --variant naive --iters "$iters" --async 4

# The framework shape: the same naive ops from a Python program, through examples/
# nrt_framework.cc, an extension module that has libnrt.so.1 as its own dependency, the way
# torch-neuronx's does; Python's import loads it (and so libnrt) RTLD_LOCAL.
out="$captures/rmsnorm-naive-python"
rm -rf "$out"
echo
echo "\$ bazel-bin/client/nrtprof run --out nrtprof-captures/rmsnorm-naive-python -- bazel-bin/examples/rmsnorm_py --iters $iters"
log="$(mktemp)"
if bazel-bin/client/nrtprof run --out "$out" -- \
    bazel-bin/examples/rmsnorm_py --iters "$iters" 2>&1 | tee "$log"; then
  ms[python]="$(awk '/device time per iteration/ {print $5}' "$log")"
else
  # The rest of the demo stands without it; the line above the table says what failed.
  echo "nrtprof: the naive variant from Python failed under the profiler (see above)"
  ms[python]=""
fi
rm -f "$log"

# Real PyTorch: examples/rmsnorm_torch.py, RMSNorm as a PyTorch user writes it, on the simulated
# device through nrtsim_torch (PyTorch 1.13's 'privateuseone' backend); the table's rows are
# PyTorch's own aten ops (the shim's PyTorch lane). Debian's torch imports only in Debian's Python.
torch_py=/usr/bin/python3
torch_module=bazel-out/k8-fastbuild/bin/sim/torch_device/nrtsim_torch.abi3.so
ms[torch_eager]="" ms[torch_fused]=""
build_torch_module() {  # bazel's status, its output without the progress lines
  local log rc=0
  log="$(mktemp)"
  bazel build --noshow_progress //sim/torch_device:nrtsim_torch.abi3.so >"$log" 2>&1 || rc=$?
  grep -vE '^(INFO|Loading|Analyzing|Target|  bazel-)' "$log" || true
  rm -f "$log"
  [[ $rc -eq 0 && -f "$torch_module" ]]
}
echo
if ! "$torch_py" -c 'import torch' 2>/dev/null; then
  echo "nrtprof: skipping the PyTorch RMSNorm: $torch_py cannot import torch (apt-get install python3-torch)"
elif ! build_torch_module; then
  echo "nrtprof: skipping the PyTorch RMSNorm: //sim/torch_device:nrtsim_torch.abi3.so did not build (see above; it needs libtorch-dev)"
else
  for variant in eager fused; do
    out="$captures/rmsnorm-torch-$variant"
    rm -rf "$out"
    echo
    echo "\$ bazel-bin/client/nrtprof run --quiet --out nrtprof-captures/rmsnorm-torch-$variant -- $torch_py examples/rmsnorm_torch.py --variant $variant --iterations $iters"
    log="$(mktemp)"
    if PYTHONPATH="$(dirname "$torch_module")" bazel-bin/client/nrtprof run --quiet --out "$out" -- \
        "$torch_py" examples/rmsnorm_torch.py --variant "$variant" --iterations "$iters" 2>&1 | tee "$log"; then
      ms[torch_$variant]="$(awk '/device time per iteration/ {print $5}' "$log")"
      echo "\$ bazel-bin/client/nrtprof summary nrtprof-captures/rmsnorm-torch-$variant --limit 6"
      bazel-bin/client/nrtprof summary "$out" --limit 6 || true
    else
      echo "nrtprof: the PyTorch RMSNorm ($variant) failed under the profiler (see above)"
    fi
    rm -f "$log"
  done
fi

echo
awk -v n="${ms[naive]}" -v p="${ms[python]}" -v f="${ms[fused]}" -v c="${ms[compiled]}" \
    -v na="${ms[naive_async]}" -v wn="${wall[naive]}" -v wa="${wall[naive_async]}" \
    -v te="${ms[torch_eager]}" -v tf="${ms[torch_fused]}" 'BEGIN {
  printf "RMSNorm 4x512 bf16, device time per iteration: naive %.3f ms (from Python: %s), fused %.3f ms, compiled %.3f ms\n", n, p == "" ? "failed" : sprintf("%.3f ms", p), f, c
  printf "(public reference: 2.355 ms, 0.403 ms, 0.376 ms). Compiled runs in 1/%.1f of the naive time.\n", n / c
  printf "Naive, synchronous against --async 4: device time per iteration %.3f ms against %.3f ms, wall time per iteration %.3f ms against %.3f ms.\n", n, na, wn, wa
  if (te != "" || tf != "")
    printf "PyTorch on the simulated device, device time per iteration: eager %s, fused %s.\n", te == "" ? "failed" : sprintf("%.3f ms", te), tf == "" ? "failed" : sprintf("%.3f ms", tf)
}'
echo "\$ bazel-bin/client/nrtprof report nrtprof-captures/rmsnorm-naive"
bazel-bin/client/nrtprof report "$captures/rmsnorm-naive" || exit 1
echo "Open nrtprof-captures/rmsnorm-naive/report.html in a browser (offline: it fetches nothing), or"
echo "nrtprof-captures/rmsnorm-naive/trace.pftrace in https://ui.perfetto.dev (\"Open trace file\"),"
echo "to see the three lanes: framework ops, runtime calls, and the NeuronCore's executions."
