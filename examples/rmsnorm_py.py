#!/usr/bin/env python3
"""RMSNorm's naive variant from Python, reaching libnrt the way PyTorch on Neuron does.

A plain `import nrt_framework` loads the C extension module (Python dlopens it RTLD_LOCAL), and
the module brings libnrt.so.1 in as its own dependency. The program then runs
examples/rmsnorm.cc's naive variant through the module's eager ops: six ops per iteration, each
a model of its own, with epsilon, a Python float, copied host-to-device inside aten::add. Each
iteration is an "rmsnorm" range, as torch.profiler.record_function would mark it.

With --async DEPTH the module schedules each op on the runtime's asynchronous API instead
(nrt/nrt_async.h: nrta_execute_schedule, nrta_tensor_write/read, up to DEPTH requests in
flight), as PyTorch-native Neuron does: the same ops, the same results, the host no longer
waiting on each one. nf.synchronize() waits for what is in flight, as torch's does.

Prints what `rmsnorm --variant naive` prints: the output checked against a float64 reference,
the device time per iteration from the runtime's system trace and, with --wall_time or --async,
the wall time per iteration.
Exit status 0 when the output matches, 1 when it does not or the runtime fails (one line on
stderr), 2 for a bad flag.
"""
import argparse
import contextlib
import math
import random
import sys
import time

PROG = "rmsnorm_py"
EPSILON = 1e-6
MAX_ASYNC_DEPTH = 4096  # examples::kMaxAsyncDepth

try:
    import nrt_framework as nf
except ImportError as e:
    sys.exit(f"{PROG}: cannot import the nrt_framework module: {e}")


class ArgumentParser(argparse.ArgumentParser):
    def error(self, message):
        # One line, like the C++ examples, not argparse's usage block.
        sys.stderr.write(f"{PROG}: {message}\n")
        sys.exit(2)


@contextlib.contextmanager
def record_function(name):
    """An annotation range around the block, as torch.profiler.record_function makes one."""
    nf.range_push(name)
    try:
        yield
    finally:
        nf.range_pop()


def rms_norm(x, weight, eps):
    """x * rsqrt(mean(x * x) + eps) * weight, as eager PyTorch code computes it, op by op."""
    variance = nf.mean(nf.mul(x, x))
    return nf.mul(nf.mul(x, nf.rsqrt(nf.add(variance, eps))), weight)


def reference(x, w, rows, cols):
    """float64 RMSNorm of the values the device received (rounded to the dtype)."""
    y = []
    for r in range(rows):
        row = x[r * cols:(r + 1) * cols]
        inv = 1.0 / math.sqrt(sum(v * v for v in row) / cols + EPSILON)
        y.extend(v * inv * w[c] for c, v in enumerate(row))
    return y


def run(args):
    rows, cols, dtype = args.rows, args.cols, args.dtype
    nf.init(core=args.core, async_depth=args.async_depth)
    rng = random.Random(42)
    x_values = nf.round_to_dtype([rng.uniform(-2.0, 2.0) for _ in range(rows * cols)], dtype)
    w_values = nf.round_to_dtype([rng.uniform(0.5, 1.5) for _ in range(cols)], dtype)
    x = nf.tensor(x_values, (rows, cols), dtype)
    weight = nf.tensor(w_values, (cols,), dtype)

    rms_norm(x, weight, EPSILON)  # warm-up: compiles and loads each op's model, not measured
    nf.synchronize()
    # A small ring, fetched as it goes: memory stays the same whatever --iters.
    nf.start_device_timer(16384)
    start = time.perf_counter()
    for i in range(args.iters):
        nf.step()  # one training step each, as prof.step() in PyTorch
        with record_function("rmsnorm"):
            y = rms_norm(x, weight, EPSILON)
        nf.poll_device_timer()  # each fetch short: the device need not wait on it
    nf.synchronize()  # wall time runs to the last iteration's completion
    wall_ms = (time.perf_counter() - start) * 1e3
    device = nf.stop_device_timer()
    y_values = y.read()
    if args.dump_output:
        with open(args.dump_output, "w") as f:
            f.write("".join(f"{v!r}\n" for v in y_values))

    ref = reference(x_values, w_values, rows, cols)
    # bf16 keeps 8 significant bits and each of the six ops rounds once.
    rtol, atol = (3e-2, 1e-2) if dtype == "bf16" else (1e-5, 1e-6)
    errors = [abs(got - want) for got, want in zip(y_values, ref)]
    bad = sum(1 for err, want in zip(errors, ref) if not err <= atol + rtol * abs(want))
    iters = args.iters
    mode = (f", asynchronous: up to {args.async_depth} requests in flight"
            if args.async_depth else "")
    print(f"rmsnorm naive, from Python: {rows}x{cols} {dtype}, {iters} iterations on NeuronCore "
          f"{args.core} (6 executions and 1 host-to-device copy per iteration){mode}")
    print(f"  output vs float64 reference: max |error| {max(errors):.3g}, {bad} of {len(y_values)}"
          f" elements out of tolerance -> {'OK' if bad == 0 else 'WRONG'}")
    print(f"  device time per iteration: {(device['execution_ns'] + device['transfer_ns']) / 1e6 / iters:.3f}"
          f" ms (executions {device['execution_ns'] / 1e6 / iters:.3f} ms in {device['executions']},"
          f" transfers {device['transfer_ns'] / 1e6 / iters:.3f} ms in {device['transfers']})")
    if args.wall_time or args.async_depth:
        print(f"  wall time per iteration: {wall_ms / iters:.3f} ms")
    if device["overwritten"]:
        print(f"  warning: the system trace lost {device['overwritten']} events;"
              " device time is understated")
    nf.close()
    return 0 if bad == 0 else 1


def main():
    parser = ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4, help="rows of the input")
    parser.add_argument("--cols", type=int, default=512,
                        help="columns of the input (the normalized axis)")
    parser.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    parser.add_argument("--iters", type=int, default=10, help="timed iterations")
    parser.add_argument("--core", type=int, default=0, help="NeuronCore to run on")
    parser.add_argument("--async", dest="async_depth", metavar="DEPTH", default="0",
                        help="requests in flight through the runtime's asynchronous API; 0:"
                        " synchronous calls")
    parser.add_argument("--wall_time", action="store_true",
                        help="also prints the wall time per iteration (always with --async)")
    parser.add_argument("--dump_output", metavar="FILE", default="",
                        help="also writes the output's values to FILE (to compare two runs)")
    args = parser.parse_args()
    if not (1 <= args.rows <= 65536 and 1 <= args.cols <= 65536 and 1 <= args.iters <= 1000000
            and args.core >= 0):
        parser.error("--rows and --cols must be 1..65536, --iters 1..1000000, --core >= 0")
    depth = args.async_depth
    if not (depth.isascii() and depth.isdigit() and int(depth) <= MAX_ASYNC_DEPTH):
        parser.error(f"--async must be a whole number from 0 (synchronous) to {MAX_ASYNC_DEPTH},"
                     f" not '{depth}'")
    args.async_depth = int(depth)
    try:
        visible = nf.visible_cores()
        if args.core >= visible:
            parser.error(f"--core {args.core} does not exist: {visible} NeuronCores are visible")
        return run(args)
    except (nf.Error, ValueError) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
