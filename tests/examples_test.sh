#!/bin/bash
# The example programs as a user runs them, on the simulated runtime without host waits:
#   - rmsnorm, each variant in bf16 and fp32, matches its float64 reference, and in bf16 4x512
#     reports the calibrated device time per iteration (naive 2.355 ms, fused 0.4033 ms,
#     compiled 0.3755 ms) within 5%;
#   - mlp with 8 threads on 2 NeuronCores completes every execution with no mismatch;
#   - rmsnorm_py, the naive variant from Python through the nrt_framework extension module (the
#     framework shape: libnrt a dependency of an RTLD_LOCAL module), matches its reference and
#     reports the naive variant's 6 executions, 1 transfer and 2.355 ms per iteration;
#   - rmsnorm and rmsnorm_py run in constant memory whatever --iters (they fetch the system
#     trace as they go);
#   - --async DEPTH (the runtime's asynchronous API, up to DEPTH requests in flight): rmsnorm in
#     each variant and dtype, and rmsnorm_py, write the very bytes (values) the synchronous run
#     writes and print its device time line as it is (at scale 0 the cost model's figures
#     exactly), also when the runtime's queues refuse with NRT_QUEUE_FULL
#     (NRT_SIM_ASYNC_QUEUE_DEPTH=1); the synchronous output is unchanged (no wall time unless
#     --wall_time: two runs print the same), the asynchronous header line says the depth, both
#     print their wall time per iteration with --wall_time; and with the device's time passing
#     (scale 1) naive --async 16 takes less wall time per iteration than synchronous;
#   - a bad flag exits 2 with one line on stderr (--async -1 and --async x included); a runtime
#     that fails or a module that is not there exits 1 with one line from the program.
set -u

readonly RUNFILES="${TEST_SRCDIR}/nrtprof"
readonly RMSNORM="${RUNFILES}/examples/rmsnorm"
readonly MLP="${RUNFILES}/examples/mlp"
readonly RMSNORM_PY="${RUNFILES}/examples/rmsnorm_py"
readonly WORK="$(mktemp -d "${TEST_TMPDIR:-/tmp}/examples.XXXXXX")"
export NRT_SIM_TIME_SCALE=0 NRT_SIM_NUM_CORES=2

source "${TEST_SRCDIR}/nrtprof/common/testing/checks.sh"

# Runs a program, keeping its stdout and stderr in ${WORK}/out and ${WORK}/err and its exit
# status in ${rc}.
run() {
  "$@" >"${WORK}/out" 2>"${WORK}/err"
  rc=$?
}

# Prints what the last run() printed, under a heading, for the log of a failure.
show_run() {
  echo "--- $*: exit ${rc}, stdout:" >&2
  cat "${WORK}/out" >&2
  echo "--- stderr:" >&2
  cat "${WORK}/err" >&2
}

# The number after "device time per iteration:" in rmsnorm's output, in ms.
device_ms() {
  awk '/device time per iteration:/ {
         for (i = 1; i < NF; i++) if ($i == "iteration:") { print $(i + 1); exit }
       }' "${WORK}/out"
}

# Succeeds if $1 is within 5% of $2.
within_5_percent() {
  awk -v got="$1" -v want="$2" \
    'BEGIN { d = got - want; if (d < 0) d = -d; exit !(got != "" && d <= 0.05 * want) }'
}

# --- rmsnorm: correct results and calibrated device time --------------------------------------
expected_ms() {
  case "$1" in
    naive) echo 2.355 ;;
    fused) echo 0.4033 ;;
    compiled) echo 0.3755 ;;
  esac
}

for variant in naive fused compiled; do
  for dtype in bf16 fp32; do
    args=(--variant "${variant}" --dtype "${dtype}" --rows 4 --cols 512)
    run "${RMSNORM}" "${args[@]}"
    if [[ ${rc} -ne 0 ]] || ! grep -q -- '-> OK$' "${WORK}/out"; then
      show_run rmsnorm "${args[*]}"
      fail "rmsnorm ${args[*]}: want exit 0 and '-> OK'"
      continue
    fi
    if [[ "${dtype}" == bf16 ]]; then
      got="$(device_ms)"
      want="$(expected_ms "${variant}")"
      if ! within_5_percent "${got}" "${want}"; then
        show_run rmsnorm "${args[*]}"
        fail "rmsnorm ${args[*]}: device time per iteration '${got}' ms, want ${want} ms +-5%"
      fi
    fi
  done
done

# --- --async: the same results and device time through the asynchronous API ------------------
# The printed "device time per iteration" line.
device_line() { grep 'device time per iteration:' "${WORK}/out"; }
# Whether the last run() printed a wall time per iteration.
has_wall_time() { grep -qE '^  wall time per iteration: [0-9]+\.[0-9]{3} ms$' "${WORK}/out"; }

# Runs PROGRAM ARGS... synchronously, then with each `--async DEPTH [VAR=VALUE]` of ${depths[@]}
# (a depth, optionally with an environment setting for the runtime), and checks each
# asynchronous run against the synchronous one: exit 0, the same output file, the same device
# time line, the depth in the first line, a wall time.
check_async_matches_sync() {
  local name="$1"
  shift
  run "$@" --wall_time --dump_output "${WORK}/sync.out"
  if [[ ${rc} -ne 0 ]] || ! has_wall_time; then
    show_run "${name}" "$*"
    fail "${name} $*: want exit 0 and a wall time per iteration"
    return
  fi
  local sync_first sync_device
  sync_first="$(head -n 1 "${WORK}/out")"
  sync_device="$(device_line)"
  local depth setting
  for depth_setting in "${depths[@]}"; do
    read -r depth setting <<<"${depth_setting}"
    run env ${setting} "$@" --async "${depth}" --dump_output "${WORK}/async.out"
    local what="${name} $* --async ${depth}${setting:+ (${setting})}"
    if [[ ${rc} -ne 0 ]] || ! grep -q -- '-> OK$' "${WORK}/out" || ! has_wall_time; then
      show_run "${what}"
      fail "${what}: want exit 0, '-> OK' and a wall time per iteration"
    elif ! cmp -s "${WORK}/sync.out" "${WORK}/async.out"; then
      fail "${what}: the output differs from the synchronous run's"
    elif [[ "$(device_line)" != "${sync_device}" ]]; then
      show_run "${what}"
      fail "${what}: device time line '$(device_line)', want the synchronous '${sync_device}'"
    elif [[ "$(head -n 1 "${WORK}/out")" != "${sync_first}, asynchronous: up to ${depth} requests in flight" ]]; then
      show_run "${what}"
      fail "${what}: first line '$(head -n 1 "${WORK}/out")', want the synchronous one and ', asynchronous: up to ${depth} requests in flight'"
    fi
  done
}

depths=("4")
for variant in fused compiled; do
  for dtype in bf16 fp32; do
    check_async_matches_sync rmsnorm "${RMSNORM}" --variant "${variant}" --dtype "${dtype}" --iters 10
  done
done
depths=("1" "4" "8 NRT_SIM_ASYNC_QUEUE_DEPTH=1")
check_async_matches_sync rmsnorm "${RMSNORM}" --variant naive --dtype bf16 --iters 10
check_async_matches_sync rmsnorm "${RMSNORM}" --variant naive --dtype fp32 --iters 3
want_first='rmsnorm naive: 4x512 bf16, 10 iterations on NeuronCore 0 (6 executions and 1 host-to-device copy per iteration)'
for async in "" "--async 0"; do
  run "${RMSNORM}" --variant naive --iters 10 ${async}
  cp "${WORK}/out" "${WORK}/first_run"
  if [[ "$(head -n 1 "${WORK}/out")" != "${want_first}" ]] ||
      [[ "$(device_line)" != '  device time per iteration: 2.355 ms (executions 2.201 ms in 60, transfers 0.154 ms in 10)' ]] ||
      [[ "$(wc -l <"${WORK}/out")" -ne 3 ]]; then
    show_run rmsnorm --variant naive --iters 10 ${async}
    fail "rmsnorm --variant naive --iters 10 ${async}: want the three lines of before --async"
  fi
  run "${RMSNORM}" --variant naive --iters 10 ${async}
  cmp -s "${WORK}/out" "${WORK}/first_run" ||
    fail "rmsnorm --variant naive --iters 10 ${async}: two runs print different output"
done
depths=("4" "8 NRT_SIM_ASYNC_QUEUE_DEPTH=1")
check_async_matches_sync rmsnorm_py "${RMSNORM_PY}" --iters 10

# With the device's time passing, the asynchronous naive variant keeps the compute queue fed
# (the epsilon copies run beside the executions, the host no longer waits on each call): less
# wall time per iteration than the synchronous calls, which wait out every 2.355 ms. Three
# tries, for a busy machine.
wall_ms() { awk '/wall time per iteration:/ { print $5; exit }' "${WORK}/out"; }
faster=0
for try in 1 2 3; do
  NRT_SIM_TIME_SCALE=1 run "${RMSNORM}" --variant naive --iters 40 --wall_time
  sync_wall="$(wall_ms)"
  NRT_SIM_TIME_SCALE=1 run "${RMSNORM}" --variant naive --iters 40 --async 16
  async_wall="$(wall_ms)"
  if awk -v s="${sync_wall}" -v a="${async_wall}" 'BEGIN { exit !(s != "" && a != "" && a < s) }'; then
    faster=1
    break
  fi
done
[[ ${faster} -eq 1 ]] ||
  fail "rmsnorm naive at NRT_SIM_TIME_SCALE=1: --async 16 took ${async_wall} ms per iteration, synchronous ${sync_wall} ms: want less"

# --- mlp: many threads on several NeuronCores -------------------------------------------------
run "${MLP}" --threads 8 --cores 2 --iters 20
if [[ ${rc} -ne 0 ]] ||
    ! grep -q 'executions done: 480 ' "${WORK}/out" ||
    ! grep -q ' 0 of [0-9]* elements out of tolerance -> OK$' "${WORK}/out"; then
  show_run mlp --threads 8 --cores 2 --iters 20
  fail "mlp --threads 8 --cores 2 --iters 20: want exit 0, 480 executions and no mismatch"
fi

# --- rmsnorm_py: the same naive variant from Python, through an extension module ------------
run "${RMSNORM_PY}" --iters 20
want_first='rmsnorm naive, from Python: 4x512 bf16, 20 iterations on NeuronCore 0 (6 executions and 1 host-to-device copy per iteration)'
if [[ ${rc} -ne 0 ]] || [[ "$(head -n 1 "${WORK}/out")" != "${want_first}" ]] ||
    ! grep -q ' 0 of 2048 elements out of tolerance -> OK$' "${WORK}/out" ||
    ! grep -q 'device time per iteration: .* in 120, transfers .* in 20)$' "${WORK}/out"; then
  show_run rmsnorm_py --iters 20
  fail "rmsnorm_py --iters 20: want exit 0, '${want_first}', no mismatch, 120 executions and 20 transfers"
else
  got="$(device_ms)"
  if ! within_5_percent "${got}" 2.355; then
    show_run rmsnorm_py --iters 20
    fail "rmsnorm_py --iters 20: device time per iteration '${got}' ms, want 2.355 ms +-5% (the C++ naive variant's)"
  fi
fi
run "${RMSNORM_PY}" --dtype fp32 --iters 3
if [[ ${rc} -ne 0 ]] || ! grep -q ' 0 of 2048 elements out of tolerance -> OK$' "${WORK}/out"; then
  show_run rmsnorm_py --dtype fp32 --iters 3
  fail "rmsnorm_py --dtype fp32 --iters 3: want exit 0 and '-> OK'"
fi

# --- runtime and import failures: exit 1 and one line from the program -----------------------
# Prints whether the last run() exited 1 with nothing on stdout and one line on stderr from the
# program (the runtime may add its own "nrt: ..." lines) that contains $1.
failed_with_one_line() {
  [[ ${rc} -eq 1 && ! -s "${WORK}/out" ]] &&
    [[ "$(grep -c '^rmsnorm_py: ' "${WORK}/err")" -eq 1 ]] &&
    grep -q "^rmsnorm_py: .*$1" "${WORK}/err"
}
NRT_SIM_NUM_CORES=0 run "${RMSNORM_PY}"
if ! failed_with_one_line 'failed with status'; then
  show_run NRT_SIM_NUM_CORES=0 rmsnorm_py
  fail "rmsnorm_py on a runtime that fails: want exit 1 and one 'rmsnorm_py: ... failed with status N' line"
fi
# The script without the module on its path, as with a framework that is not installed.
run env -u PYTHONPATH python3 "${RUNFILES}/examples/rmsnorm_py.py"
if ! failed_with_one_line 'cannot import the nrt_framework module'; then
  show_run python3 rmsnorm_py.py
  fail "rmsnorm_py.py without its module: want exit 1 and one 'cannot import' line"
fi

# --- flag errors: exit 2 and one line on stderr -----------------------------------------------
check_flag_error() {
  run "$@"
  if [[ ${rc} -ne 2 || "$(wc -l <"${WORK}/err")" -ne 1 || -s "${WORK}/out" ]]; then
    show_run "$@"
    fail "$(basename "$1") ${*:2}: want exit 2, one line on stderr and nothing on stdout"
  fi
}
check_flag_error "${RMSNORM}" --variant bogus
for program in "${RMSNORM}" "${RMSNORM_PY}"; do
  for depth in -1 x; do
    check_flag_error "${program}" --async "${depth}"
    grep -q -- "--async must be a whole number from 0 (synchronous) to 4096, not '${depth}'" \
        "${WORK}/err" || fail "$(basename "${program}") --async ${depth}: want the line to say what --async takes"
  done
done
check_flag_error "${MLP}" --cores 0
check_flag_error "${MLP}" --cores 3  # the simulated runtime shows 2 NeuronCores by default
check_flag_error "${MLP}" --threads 0
check_flag_error "${MLP}" --iters 0
check_flag_error "${RMSNORM_PY}" --iters 0
check_flag_error "${RMSNORM_PY}" --dtype fp16
check_flag_error "${RMSNORM_PY}" --core 2

# --- constant memory: programs people copy must not grow with --iters --------------------------
# The peak RSS (GNU time's %M, KiB) of a short and an eight-times longer run. Before the examples
# fetched the system trace as they go, the ring was sized for every iteration: rmsnorm
# --variant compiled --iters 20000 peaked at 1.5 GB.
# (In a command substitution: the exit status goes through a file.)
peak_kib() {
  /usr/bin/time -f "%M" -o "${WORK}/rss" "$@" >"${WORK}/out" 2>"${WORK}/err"
  echo $? >"${WORK}/rc"
  cat "${WORK}/rss"
}
if [[ ! -x /usr/bin/time ]]; then
  fail "GNU time (/usr/bin/time) is not installed: third_party/install_debian_deps.sh installs it"
else
  short=$(peak_kib "${RMSNORM}" --variant compiled --iters 1000)
  long=$(peak_kib "${RMSNORM}" --variant compiled --iters 8000)
  rc=$(cat "${WORK}/rc")
  [[ ${rc} -eq 0 ]] || { show_run "rmsnorm compiled 8000"; fail "rmsnorm --iters 8000 failed"; }
  # 8,000 more executions with a per-iteration ring would add megabytes; allow 4 MiB of noise.
  (( long - short < 4096 )) ||
    fail "rmsnorm grows with --iters: ${short} KiB at 1,000, ${long} KiB at 8,000"
  short=$(peak_kib "${RMSNORM_PY}" --iters 100)
  long=$(peak_kib "${RMSNORM_PY}" --iters 1200)
  rc=$(cat "${WORK}/rc")
  [[ ${rc} -eq 0 ]] || { show_run "rmsnorm_py 1200"; fail "rmsnorm_py --iters 1200 failed"; }
  (( long - short < 4096 )) ||
    fail "rmsnorm_py grows with --iters: ${short} KiB at 100, ${long} KiB at 1,200"
fi

finish
