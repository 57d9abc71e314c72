#!/bin/bash
# The public C API as a customer's program uses it, built outside Bazel:
#   (a) guide_example.c compiles as C99 with the system compiler against the public headers
#       and links with -lnrt;
#   (b) nrt_model_compile turns add_model.txt into a model file;
#   (c) the program loads it, executes it and prints exactly the expected outputs;
#   (d) on corrupt model files it fails cleanly: non-zero exit (not a signal) and a one-line
#       "nrt: nrt_load: model file: ..." reason on stderr;
#   (e) async_docs_example.c, the explicit asynchronous API (nrt/nrt_async.h) as its public
#       documentation shows it, builds the same way and prints exactly the expected outputs,
#       with the device's time passing (and a queue of depth 1) and without.
set -u

readonly RUNFILES="${TEST_SRCDIR}/nrtprof"
readonly WORK="$(mktemp -d "${TEST_TMPDIR:-/tmp}/c_api.XXXXXX")"
export NRT_SIM_TIME_SCALE=0

source "${TEST_SRCDIR}/nrtprof/common/testing/checks.sh"

# --- (a) Build the program as a user would: cc, the public headers, -lnrt. ------------------
# libnrt.so is the link name; the library's SONAME is libnrt.so.1, which is what the program
# looks for at run time, through its rpath to the same folder.
mkdir -p "${WORK}/lib"
cp "${RUNFILES}/sim/libnrt.so" "${WORK}/lib/libnrt.so"
ln -s libnrt.so "${WORK}/lib/libnrt.so.1"
if ! cc -std=c99 -Wall -Werror -I"${RUNFILES}/sim/include" \
    "${RUNFILES}/tests/c_api/guide_example.c" -o "${WORK}/guide_example" \
    -L"${WORK}/lib" -lnrt -Wl,-rpath,"${WORK}/lib" 2>"${WORK}/cc.err"; then
  show "${WORK}/cc.err"
  fail "guide_example.c does not compile as C99 against the public headers"
  finish "${WORK}"
fi

# The profiling header and nrt_get_status_as_str compile as C99 with the public signatures.
if ! cc -std=c99 -Wall -Werror -fsyntax-only -I"${RUNFILES}/sim/include" \
    "${RUNFILES}/tests/c_api/profile_header_check.c" 2>"${WORK}/cc_profile.err"; then
  show "${WORK}/cc_profile.err"
  fail "profile_header_check.c does not compile as C99 against the public headers"
fi

# --- (b) Compile the model text. --------------------------------------------------------------
readonly MODEL="${WORK}/add_model.neff"
if ! "${RUNFILES}/sim/nrt_model_compile" "${RUNFILES}/tests/c_api/add_model.txt" "${MODEL}" \
    >"${WORK}/compile.out" 2>&1; then
  show "${WORK}/compile.out"
  fail "nrt_model_compile rejected tests/c_api/add_model.txt"
  finish "${WORK}"
fi

# --- (c) Run it: out = (a + b) * 0.5 with a = 1 2 3 4, b = 2 4 6 8. ---------------------------
"${WORK}/guide_example" "${MODEL}" >"${WORK}/run.out" 2>"${WORK}/run.err"
rc=$?
cat >"${WORK}/expected.out" <<'EOF'
input a: 1 2 3 4
input b: 2 4 6 8
output out: 1.5 3 4.5 6
EOF
if [[ ${rc} -ne 0 ]]; then
  show "${WORK}/run.err"
  fail "guide_example exited with ${rc} on a good model"
fi
if ! cmp -s "${WORK}/expected.out" "${WORK}/run.out"; then
  show "${WORK}/expected.out"
  show "${WORK}/run.out"
  fail "guide_example printed the wrong outputs"
fi
if [[ -s "${WORK}/run.err" ]]; then
  show "${WORK}/run.err"
  fail "guide_example wrote to stderr on a good model"
fi

# --- (d) Corrupt model files: each must fail with a one-line reason, never crash. ------------
# A truncated copy, one flipped payload byte (caught by the checksum), and an empty file.
head -c 40 "${MODEL}" >"${WORK}/truncated.neff"
cp "${MODEL}" "${WORK}/flipped.neff"
printf '\377' | dd of="${WORK}/flipped.neff" bs=1 seek=40 conv=notrunc status=none
: >"${WORK}/empty.neff"

for bad in truncated flipped empty; do
  "${WORK}/guide_example" "${WORK}/${bad}.neff" >"${WORK}/${bad}.out" 2>"${WORK}/${bad}.err"
  rc=$?
  if [[ ${rc} -eq 0 || ${rc} -ge 128 ]]; then
    show "${WORK}/${bad}.err"
    fail "guide_example on a ${bad} model file exited with ${rc}, want a failure status < 128"
  fi
  reasons="$(grep -c '^nrt: nrt_load: model file: ' "${WORK}/${bad}.err")"
  if [[ "${reasons}" != 1 ]]; then
    show "${WORK}/${bad}.err"
    fail "a ${bad} model file gave ${reasons} 'nrt: nrt_load: model file:' lines, want 1"
  fi
  if [[ -s "${WORK}/${bad}.out" ]]; then
    show "${WORK}/${bad}.out"
    fail "guide_example printed results for a ${bad} model file"
  fi
done

# --- (e) The asynchronous API: six executions, up to four in flight. ---------------------------
if ! cc -std=c99 -Wall -Werror -I"${RUNFILES}/sim/include" \
    "${RUNFILES}/tests/c_api/async_docs_example.c" -o "${WORK}/async_docs_example" \
    -L"${WORK}/lib" -lnrt -Wl,-rpath,"${WORK}/lib" 2>"${WORK}/async_cc.err"; then
  show "${WORK}/async_cc.err"
  fail "async_docs_example.c does not compile as C99 against the public headers"
  finish "${WORK}"
fi
# Execution k: in0[i] = k + i, in1[i] = 2 (k + i) + 1, out = (in0 + in1) * 0.5.
cat >"${WORK}/async_expected.out" <<'EOF'
execution 0: 0.5 2 3.5 5
execution 1: 2 3.5 5 6.5
execution 5: signalled through an eventfd
execution 2: 3.5 5 6.5 8
execution 3: 5 6.5 8 9.5
execution 4: 6.5 8 9.5 11
execution 5: 8 9.5 11 12.5
all 6 executions completed
EOF
# Time scale 10, depth 1: an execution (3.7 ms) outlasts the next one's two input writes
# (3.1 ms), so its schedule usually meets NRT_QUEUE_FULL and waits for room.
for setting in "0 64" "10 1"; do
  read -r scale depth <<<"${setting}"
  NRT_SIM_TIME_SCALE="${scale}" NRT_SIM_ASYNC_QUEUE_DEPTH="${depth}" \
    "${WORK}/async_docs_example" "${MODEL}" 6 >"${WORK}/async.out" 2>"${WORK}/async.err"
  rc=$?
  if [[ ${rc} -ne 0 ]]; then
    show "${WORK}/async.err"
    fail "async_docs_example exited with ${rc} (time scale ${scale}, queue depth ${depth})"
  fi
  if ! cmp -s "${WORK}/async_expected.out" "${WORK}/async.out"; then
    show "${WORK}/async_expected.out"
    show "${WORK}/async.out"
    fail "async_docs_example printed the wrong outputs (time scale ${scale}, depth ${depth})"
  fi
  if [[ -s "${WORK}/async.err" ]]; then
    show "${WORK}/async.err"
    fail "async_docs_example wrote to stderr (time scale ${scale}, queue depth ${depth})"
  fi
done

finish "${WORK}"
