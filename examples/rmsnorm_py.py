#!/usr/bin/env python3
"""RMSNorm's naive variant from Python, reaching libnrt the way PyTorch on Neuron does.

A plain `import nrt_framework` loads the C extension module (Python dlopens it RTLD_LOCAL), and
the module brings libnrt.so.1 in as its own dependency. The program then runs
examples/rmsnorm.cc's naive variant through the module's eager ops: six ops per iteration, each
a model of its own, with epsilon, a Python float, copied host-to-device inside aten::add. Each
iteration is an "rmsnorm" range, as torch.profiler.record_function would mark it.

Prints what `rmsnorm --variant naive` prints: the output checked against a float64 reference
and the device time per iteration from the runtime's system trace. Exit status 0 when the
output matches, 1 when it does not or the runtime fails (one line on stderr), 2 for a bad flag.
"""
import argparse
import contextlib
import math
import random
import sys

PROG = "rmsnorm_py"
EPSILON = 1e-6

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
    nf.init(core=args.core)
    rng = random.Random(42)
    x_values = nf.round_to_dtype([rng.uniform(-2.0, 2.0) for _ in range(rows * cols)], dtype)
    w_values = nf.round_to_dtype([rng.uniform(0.5, 1.5) for _ in range(cols)], dtype)
    x = nf.tensor(x_values, (rows, cols), dtype)
    weight = nf.tensor(w_values, (cols,), dtype)

    rms_norm(x, weight, EPSILON)  # warm-up: compiles and loads each op's model, not measured
    # A small ring, fetched as it goes: memory stays the same whatever --iters.
    nf.start_device_timer(16384)
    for i in range(args.iters):
        nf.step()  # one training step each, as prof.step() in PyTorch
        with record_function("rmsnorm"):
            y = rms_norm(x, weight, EPSILON)
        if (i + 1) % 8 == 0:
            nf.poll_device_timer()
    time = nf.stop_device_timer()
    y_values = y.read()

    ref = reference(x_values, w_values, rows, cols)
    # bf16 keeps 8 significant bits and each of the six ops rounds once.
    rtol, atol = (3e-2, 1e-2) if dtype == "bf16" else (1e-5, 1e-6)
    errors = [abs(got - want) for got, want in zip(y_values, ref)]
    bad = sum(1 for err, want in zip(errors, ref) if not err <= atol + rtol * abs(want))
    iters = args.iters
    print(f"rmsnorm naive, from Python: {rows}x{cols} {dtype}, {iters} iterations on NeuronCore "
          f"{args.core} (6 executions and 1 host-to-device copy per iteration)")
    print(f"  output vs float64 reference: max |error| {max(errors):.3g}, {bad} of {len(y_values)}"
          f" elements out of tolerance -> {'OK' if bad == 0 else 'WRONG'}")
    print(f"  device time per iteration: {(time['execution_ns'] + time['transfer_ns']) / 1e6 / iters:.3f}"
          f" ms (executions {time['execution_ns'] / 1e6 / iters:.3f} ms in {time['executions']},"
          f" transfers {time['transfer_ns'] / 1e6 / iters:.3f} ms in {time['transfers']})")
    if time["overwritten"]:
        print(f"  warning: the system trace lost {time['overwritten']} events;"
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
    args = parser.parse_args()
    if not (1 <= args.rows <= 65536 and 1 <= args.cols <= 65536 and 1 <= args.iters <= 1000000
            and args.core >= 0):
        parser.error("--rows and --cols must be 1..65536, --iters 1..1000000, --core >= 0")
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
