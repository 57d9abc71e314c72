"""Per-op cost of observing PyTorch's ops: a loop of one small in-place op (a.add_(b) on
16-element float tensors: one aten::add_ RecordFunction per call), timed bare, with
torch.profiler.profile(activities=[CPU]) around it, and (run by run_torch_bench.sh under
`nrtprof run`) with nrtprof's PyTorch lane recording. Prints one line: MODE NS_PER_OP.

  torch_op_bench.py LIBNRT MODE [--ops N] [--rounds R]     MODE: bare | torch_profiler | nrtprof

The libnrt call (nrt_init through ctypes) comes first in every mode, as in a Neuron program:
under nrtprof run it starts the profiler and its PyTorch lane. The figure is the best of R
rounds of N ops (perf_counter_ns around the loop), so a busy moment of a shared machine
counts less.
"""
import argparse
import contextlib
import ctypes
import sys
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("libnrt")
parser.add_argument("mode", choices=["bare", "torch_profiler", "nrtprof"])
parser.add_argument("--ops", type=int, default=200000)
parser.add_argument("--rounds", type=int, default=5)
args = parser.parse_args()

torch.set_num_threads(1)
nrt = ctypes.CDLL(args.libnrt)
if nrt.nrt_init(1, b"", b"") != 0:
    sys.exit("nrt_init failed")

a, b = torch.zeros(16), torch.ones(16)
add_ = a.add_
for _ in range(10000):  # warm-up
    add_(b)

if args.mode == "torch_profiler":
    from torch.profiler import ProfilerActivity, profile
    profiler = profile(activities=[ProfilerActivity.CPU])
else:
    profiler = contextlib.nullcontext()

best = None
for _ in range(args.rounds):
    # One profiler session per round, as a program profiles a window of its run.
    with profiler if args.mode != "torch_profiler" else profile(activities=[ProfilerActivity.CPU]):
        t0 = time.perf_counter_ns()
        for _ in range(args.ops):
            add_(b)
        t1 = time.perf_counter_ns()
    ns = (t1 - t0) / args.ops
    best = ns if best is None else min(best, ns)
print(f"{args.mode} {best:.1f}")
nrt.nrt_close()
