#!/usr/bin/env bash
# Runs examples/cc_rank_py.py (a rank of cc_job's job) with python3 and the nrt_framework
# extension module on PYTHONPATH, which is what `pip install` arranges for a real framework.
# Arguments go to the
# script. Works as bazel-bin/examples/cc_rank_py, under `bazel run`, and from a test's runfiles.
set -euo pipefail

self="${BASH_SOURCE[0]}"
if [[ -d "${self}.runfiles" ]]; then
  runfiles="${self}.runfiles"
elif [[ -n "${RUNFILES_DIR:-}" ]]; then
  runfiles="${RUNFILES_DIR}"
elif [[ -n "${TEST_SRCDIR:-}" ]]; then
  runfiles="${TEST_SRCDIR}"
else
  echo "cc_rank_py: cannot find the runfiles of ${self} (build it with bazel)" >&2
  exit 1
fi
examples="${runfiles}/nrtprof/examples"
export PYTHONPATH="${examples}${PYTHONPATH:+:${PYTHONPATH}}"
exec python3 "${examples}/cc_rank_py.py" "$@"
