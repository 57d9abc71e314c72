#!/usr/bin/env bash
# The cost of the shim's scan of loaded objects (docs/interposition.md) where it is paid: a
# process that opens many libraries and looks symbols up through their handles, as Python does
# when it imports extension modules. open_libraries.py runs bare and with the shim preloaded
# (no daemon needed: nothing calls libnrt), interleaved, and the medians are printed.
#
#   bench/load_shapes/run_open_libraries.sh [--rounds N] [--libraries N]
#
# Prints figures; asserts nothing about time.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT" || exit 2
rounds=9
libraries=150
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --libraries) libraries="$2"; shift 2 ;;
    *) echo "run_open_libraries.sh: unknown flag $1" >&2; exit 2 ;;
  esac
done
bazel build --config=opt //shim:shim >/dev/null 2>&1 || { echo "run_open_libraries.sh: build failed" >&2; exit 1; }
shim="$ROOT/bazel-bin/shim/libnrtprof_shim.so"
script="bench/load_shapes/open_libraries.py"
python3 "$script" "$libraries" >/dev/null  # warm the page cache
declare -a bare=() preloaded=()
for _ in $(seq "$rounds"); do
  bare+=("$(python3 "$script" "$libraries" | awk '{print $(NF-6)}')")
  preloaded+=("$(LD_PRELOAD="$shim" NRTPROF_ADDR=unix:/nonexistent python3 "$script" "$libraries" | awk '{print $(NF-6)}')")
done
median() { printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
echo "$libraries libraries opened with ctypes, each then looked up once, $rounds rounds:"
echo "  bare:          median $(median "${bare[@]}") ms  (${bare[*]})"
echo "  shim preloaded: median $(median "${preloaded[@]}") ms  (${preloaded[*]})"
