#!/usr/bin/env bash
# Makes the fuzzers' seed corpora from real runs: the example programs run under the shim
# against record_streams, a stand-in Collector that writes what each process's stream sent
# (corpus/collector) and the model files the programs loaded (corpus/model_file); the model
# texts in corpus/model_text are compiled with nrt_model_compile into corpus/model_file too.
# Replaces corpus/collector and corpus/model_file; run it when the wire format or the model
# file format changes, and commit the result. The programs run with device profiles on, so
# that the inputs hold the engines' ops and DMA too; record_streams answers as nrtprofd does,
# so that their batches carry events_encoded.
set -euo pipefail
cd "$(dirname "$0")/../.."

bazel build --noshow_progress //tests/fuzz:record_streams //shim:libnrtprof_shim.so \
  //examples:rmsnorm //examples:mlp //sim:nrt_model_compile
bin="$(bazel info bazel-bin 2>/dev/null)"
corpus=tests/fuzz/corpus
tmp="$(mktemp -d /tmp/nrtprof-seeds-XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
rm -rf "$corpus/collector" "$corpus/model_file"
mkdir -p "$corpus/collector" "$corpus/model_file"

# record NAME STREAMS STACKS -- COMMAND... [--and COMMAND...]: the programs run at once.
record() {
  local name="$1" streams="$2" stacks="$3"
  shift 4
  local sock="$tmp/$name.sock"
  "$bin/tests/fuzz/record_streams" --socket "$sock" --out "$corpus/collector/$name" \
    --streams "$streams" --stack_depth "$stacks" --models_out "$corpus/model_file" \
    >"$tmp/ready" &
  local recorder=$!
  for _ in $(seq 100); do grep -q ready "$tmp/ready" 2>/dev/null && break; sleep 0.1; done
  local pids=() cmd=()
  for arg in "$@" --and; do
    if [ "$arg" = "--and" ]; then
      env LD_PRELOAD="$bin/shim/libnrtprof_shim.so" NRTPROF_ADDR="unix:$sock" \
        NRTPROF_CAPTURE=seed NRTPROF_STACKS="$stacks" NRTPROF_DEVICE_PROFILE=1 \
        NRT_SIM_TIME_SCALE=0 "${cmd[@]}" >/dev/null &
      pids+=($!)
      cmd=()
    else
      cmd+=("$arg")
    fi
  done
  for p in "${pids[@]}"; do wait "$p"; done
  wait "$recorder"
}

rms="$bin/examples/rmsnorm"
record rmsnorm_naive 1 0 -- "$rms" --variant naive --rows 4 --cols 64 --dtype bf16 --iters 2
record rmsnorm_fused 1 0 -- "$rms" --variant fused --rows 2 --cols 32 --dtype fp32 --iters 2
record rmsnorm_compiled_stacks 1 4 -- "$rms" --variant compiled --rows 4 --cols 64 --dtype bf16 --iters 1
record mlp_threads 1 0 -- "$bin/examples/mlp" --threads 2 --cores 2 --iters 2
record two_processes 2 0 -- "$rms" --variant naive --rows 2 --cols 16 --dtype fp32 --iters 1 \
  --and "$bin/examples/mlp" --threads 1 --cores 1 --iters 1

for text in "$corpus"/model_text/*.txt; do
  "$bin/sim/nrt_model_compile" "$text" "$corpus/model_file/$(basename "$text" .txt).neff" >/dev/null
done
echo "seed corpora: $(ls "$corpus/collector" | wc -l) collector inputs ($(du -sh "$corpus/collector" | cut -f1)), $(ls "$corpus/model_file" | wc -l) model files, $(ls "$corpus/model_text" | wc -l) model texts"
