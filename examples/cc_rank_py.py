#!/usr/bin/env python3
"""A rank of examples/cc_job's data-parallel job, in Python through the framework shape.

`cc_job --rank-program bazel-bin/examples/cc_rank_py --ranks N ...` starts N of these instead of
copies of itself, each with its rank's environment (NEURON_RT_ROOT_COMM_ID,
NEURON_RT_VISIBLE_CORES) and `--rank R` on its command line, as torch.distributed.launch
started a training script; with `cc_job --rank-via env`, no `--rank`: the rank is RANK in the
environment, as torchrun starts one. A plain `import nrt_framework` loads the C extension module (Python dlopens it
RTLD_LOCAL) that brings libnrt.so.1 in as its own dependency, the way PyTorch on Neuron reaches
the runtime; comm_init() joins the group as torch.distributed.init_process_group does.

Each step, as cc_job's rank (nrt_framework.step() at the top):
  forward_backward  a device op on the activations (aten::mul)
  grad_to_device    the gradient, rank- and step-dependent values, written to the device
  [the slow rank]   host: "data_loader_stall", MS asleep; device: "extra_forward", device ops
                    (aten::add) for MS
  all_reduce        nrt_framework.all_reduce(grad): AllReduce ADD, fp32, in place
  check             the result must be the sum of every rank's gradient, exactly
Exit status 0 when every sum was right, 1 when one was not or the runtime failed (one line on
stderr), 2 for a bad flag.
"""
import argparse
import os
import signal
import sys
import time

PROG = "cc_rank_py"

try:
    import nrt_framework as nf
except ImportError as e:
    sys.exit(f"{PROG}: cannot import the nrt_framework module: {e}")


class ArgumentParser(argparse.ArgumentParser):
    def error(self, message):
        # One line, like the C++ examples, not argparse's usage block.
        print(f"{PROG}: {message}", file=sys.stderr)
        sys.exit(2)


def gradient(rank, step, i):
    """Rank `rank`'s gradient in step `step`: small integers, so every sum is exact in fp32."""
    return float((rank + 1) * (i % 7 + 1) + step)


def main():
    parser = ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--rank", type=int, default=None,
                        help="this rank (default: RANK in the environment, as torchrun sets it)")
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slow-ms", type=int, default=0)
    parser.add_argument("--slow-cause", choices=["host", "device"], default="host")
    parser.add_argument("--kill-rank", type=int, default=-1)
    parser.add_argument("--kill-step", type=int, default=-1)
    parser.add_argument("--elems", type=int, default=1024)
    args = parser.parse_args()
    if args.rank is None:
        if not os.environ.get("RANK", "").isdigit():
            parser.error("no --rank and no RANK in the environment")
        args.rank = int(os.environ["RANK"])
    if not 0 <= args.rank < args.ranks or args.steps < 1 or args.elems < 1:
        parser.error("--rank must be below --ranks, --steps and --elems at least 1")
    r, n = args.rank, args.ranks

    try:
        nf.init()
        nf.comm_init(r, n)
        act = nf.tensor([0.5] * (64 * 128), [64, 128], "fp32")
        grad = nf.empty([args.elems], "fp32")
        for step in range(args.steps):
            nf.step()
            nf.range_push("forward_backward")
            nf.mul(act, act)
            nf.range_pop()
            nf.range_push("grad_to_device")
            grad.write([gradient(r, step, i) for i in range(args.elems)])
            nf.range_pop()
            if r == args.slow_rank and args.slow_ms > 0:
                until = time.monotonic() + args.slow_ms / 1000
                if args.slow_cause == "host":
                    nf.range_push("data_loader_stall")
                    time.sleep(args.slow_ms / 1000)
                else:
                    nf.range_push("extra_forward")
                    while time.monotonic() < until:
                        nf.add(act, act)
                nf.range_pop()
            if r == args.kill_rank and step == args.kill_step:
                print(f"rank {r}: killing itself before the all-reduce of step {step}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            nf.all_reduce(grad)
            got = grad.read()
            for i, value in enumerate(got):
                want = sum(gradient(k, step, i) for k in range(n))
                if value != want:
                    print(f"{PROG}: rank {r}: step {step}: element {i} is {value:g}, the ranks' "
                          f"sum is {want:g}", file=sys.stderr)
                    return 1
        nf.step()  # the last step ends (its range "ProfilerStep#N" is drawn)
        nf.close()
    except nf.Error as e:
        print(f"{PROG}: rank {r}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
