"""RMSNorm in real PyTorch on the simulated Neuron device: the seed's case as a PyTorch user
writes it, run through nrtsim_torch's 'privateuseone' backend (sim/torch_device/).

  eager  x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w: six aten ops, each one
         execution of its own model, the Python float eps copied host-to-device by aten::add
  fused  torch.ops.nrtsim.rms_norm(x, w, eps): one execution of the rms_norm library kernel

With NRTSIM_TORCH_ASYNC_DEPTH=N the backend schedules executions asynchronously, up to N in
flight (sim/torch_device/README.md): same device time, less wall time.

Prints the device time per iteration, summed from the runtime's system trace (executions and
host-initiated transfers; the warm-up iteration, which compiles the models, is not counted),
and checks the result against the same computation by CPU PyTorch. Exits 1 when it differs.

  /usr/bin/python3 examples/rmsnorm_torch.py [--variant eager|fused] [--iterations N]
      [--rows 4] [--cols 512] [--dtype bf16|fp32] [--wall-time]

nrtsim_torch.abi3.so must be importable: on PYTHONPATH, or where a default `bazel build` of
this checkout puts it (bazel-out/k8-fastbuild/bin/sim/torch_device). Debian's PyTorch imports
only in Debian's /usr/bin/python3.
"""
import argparse
import os
import sys
import time

EPS = 1e-6


def import_backend():
    here = os.path.dirname(os.path.abspath(__file__))
    # A default build's output (bazel-bin may point at another configuration's).
    sys.path.append(os.path.join(here, "..", "bazel-out", "k8-fastbuild", "bin", "sim", "torch_device"))
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit(f"rmsnorm_torch: this Python ({sys.executable}) has no torch; "
                 "run it with Debian's /usr/bin/python3 (python3-torch)")
    try:
        import nrtsim_torch
    except ImportError as e:
        sys.exit(f"rmsnorm_torch: cannot import nrtsim_torch ({e}); "
                 "bazel build //sim/torch_device:nrtsim_torch.abi3.so, or put its folder on PYTHONPATH")
    except RuntimeError as e:  # the runtime would not open: one line, the module's
        sys.exit(f"rmsnorm_torch: {e}")
    return nrtsim_torch


def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", choices=["eager", "fused"], default="eager")
    parser.add_argument("--iterations", type=positive, default=20)
    parser.add_argument("--rows", type=positive, default=4)
    parser.add_argument("--cols", type=positive, default=512)
    parser.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    parser.add_argument("--wall-time", action="store_true",
                        help="also print the wall time per iteration (always when "
                        "NRTSIM_TORCH_ASYNC_DEPTH makes executions asynchronous)")
    args = parser.parse_args()

    global torch
    nrtsim = import_backend()
    import torch

    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    gen = torch.Generator().manual_seed(42)
    x_cpu = (torch.rand(args.rows, args.cols, generator=gen) * 4 - 2).to(dtype)
    w_cpu = (torch.rand(args.cols, generator=gen) + 0.5).to(dtype)
    x, w = x_cpu.to(nrtsim.device), w_cpu.to(nrtsim.device)

    if args.variant == "eager":
        forward = lambda: rmsnorm(x, w)
    else:
        forward = lambda: torch.ops.nrtsim.rms_norm(x, w, EPS)

    forward()  # warm-up: compiles and loads the models, outside the measurement
    nrtsim.synchronize()
    nrtsim.start_device_timer()
    start = time.perf_counter()
    for i in range(args.iterations):
        with torch.profiler.record_function("rmsnorm"):
            y = forward()
        nrtsim.poll_device_timer()
    nrtsim.synchronize()  # wall time runs to the last iteration's completion
    wall = time.perf_counter() - start
    t = nrtsim.stop_device_timer()

    ref = rmsnorm(x_cpu, w_cpu)
    got = y.cpu()
    # bf16 keeps 8 significant bits; each eager op rounds once, the fused kernel once in all.
    rtol, atol = (3e-2, 1e-2) if dtype == torch.bfloat16 else (1e-5, 1e-6)
    ok = torch.allclose(got.float(), ref.float(), rtol=rtol, atol=atol)
    worst = (got.float() - ref.float()).abs().max().item()
    n = args.iterations
    per_execs, per_copies = t["executions"] // n, t["transfers"] // n
    print(f"rmsnorm_torch {args.variant}: {args.rows}x{args.cols} {args.dtype}, {n} iterations on "
          f"the simulated Neuron device ({per_execs} execution{'s' * (per_execs != 1)} and "
          f"{per_copies} host-to-device cop{'y' if per_copies == 1 else 'ies'} per iteration)")
    print(f"  output vs CPU PyTorch: max |error| {worst:.3g} -> {'OK' if ok else 'WRONG'}")
    print(f"  device time per iteration: {(t['execution_ns'] + t['transfer_ns']) / 1e6 / n:.3f} ms "
          f"(executions {t['execution_ns'] / 1e6 / n:.3f} ms in {t['executions']}, "
          f"transfers {t['transfer_ns'] / 1e6 / n:.3f} ms in {t['transfers']})")
    depth = nrtsim.stats()["async_depth"]
    if args.wall_time or depth:
        how = f"asynchronous, up to {depth} executions in flight" if depth else "synchronous"
        print(f"  wall time per iteration: {wall * 1e3 / n:.3f} ms ({how})")
    if t["overwritten"]:
        print(f"  warning: the system trace lost {t['overwritten']} events; device time is understated")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
