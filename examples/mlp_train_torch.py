"""A small MLP trained in real PyTorch on the simulated Neuron device (nrtsim_torch,
sim/torch_device/): Linear -> ReLU -> Linear, MSE loss, backward, SGD step, each step a
torch.profiler step (a `torch.profiler.profile(schedule=...)` loop with `prof.step()`, so the
ranges are named ProfilerStep#N, and `nrtprof capture --iterations` can take whole steps).

The same model, from the same initial weights and data, is trained on the CPU beside it: the
program checks that the device's losses and final weights match CPU PyTorch's within the
dtype's tolerance and that the loss falls, prints both, and exits 1 otherwise.

  /usr/bin/python3 examples/mlp_train_torch.py [--steps 20] [--batch 16] [--hidden 32]
      [--dtype fp32|bf16] [--lr 0.05]

nrtsim_torch.abi3.so must be importable: on PYTHONPATH, or where a default `bazel build` of
this checkout puts it (bazel-out/k8-fastbuild/bin/sim/torch_device). Debian's PyTorch imports
only in Debian's /usr/bin/python3.
"""
import argparse
import os
import sys


def import_backend():
    here = os.path.dirname(os.path.abspath(__file__))
    # A default build's output (bazel-bin may point at another configuration's).
    sys.path.append(os.path.join(here, "..", "bazel-out", "k8-fastbuild", "bin", "sim", "torch_device"))
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit(f"mlp_train_torch: this Python ({sys.executable}) has no torch; "
                 "run it with Debian's /usr/bin/python3 (python3-torch)")
    try:
        import nrtsim_torch
    except ImportError as e:
        sys.exit(f"mlp_train_torch: cannot import nrtsim_torch ({e}); "
                 "bazel build //sim/torch_device:nrtsim_torch.abi3.so, or put its folder on PYTHONPATH")
    except RuntimeError as e:  # the runtime would not open: one line, the module's
        sys.exit(f"mlp_train_torch: {e}")
    return nrtsim_torch


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=positive, default=20)
    parser.add_argument("--batch", type=positive, default=16)
    parser.add_argument("--features", type=positive, default=8)
    parser.add_argument("--hidden", type=positive, default=32)
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    nrtsim = import_backend()
    import torch
    from torch import nn

    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    torch.manual_seed(0)
    cpu_model = nn.Sequential(nn.Linear(args.features, args.hidden), nn.ReLU(),
                              nn.Linear(args.hidden, 1)).to(dtype)
    dev_model = nn.Sequential(nn.Linear(args.features, args.hidden), nn.ReLU(),
                              nn.Linear(args.hidden, 1)).to(dtype)
    dev_model.load_state_dict(cpu_model.state_dict())
    dev_model.to(nrtsim.device)
    # A target the network can learn: a fixed random linear map of the inputs, plus a ReLU.
    x = torch.randn(args.batch, args.features).to(dtype)
    y = torch.relu(x @ torch.randn(args.features, 1).to(dtype)) + 0.1
    xd, yd = x.to(nrtsim.device), y.to(nrtsim.device)
    cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=args.lr)
    dev_opt = torch.optim.SGD(dev_model.parameters(), lr=args.lr)
    # CPU PyTorch 1.13 has no bfloat16 mse_loss kernel: its bf16 reference spells the loss out.
    cpu_loss_fn = nn.MSELoss() if dtype == torch.float32 else lambda p, t: ((p - t) ** 2).mean()

    def step(model, opt, inputs, targets, loss_fn=nn.MSELoss()):
        opt.zero_grad()
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        opt.step()
        return loss

    cpu_losses, dev_losses = [], []
    for _ in range(args.steps):
        cpu_losses.append(step(cpu_model, cpu_opt, x, y, cpu_loss_fn).item())

    # torch.profiler's own step loop, CPU activities only (the device's work is nrtprof's).
    schedule = torch.profiler.schedule(wait=0, warmup=1, active=args.steps)
    nrtsim.start_device_timer()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                schedule=schedule) as prof:
        for _ in range(args.steps):
            dev_losses.append(step(dev_model, dev_opt, xd, yd).item())
            nrtsim.poll_device_timer()
            prof.step()
    t = nrtsim.stop_device_timer()

    rtol, atol = (5e-2, 2e-2) if dtype == torch.bfloat16 else (1e-4, 1e-5)
    losses_match = all(abs(a - b) <= atol + rtol * abs(a) for a, b in zip(cpu_losses, dev_losses))
    weights_match = all(
        torch.allclose(p_cpu.float(), p_dev.cpu().float(), rtol=rtol, atol=atol)
        for p_cpu, p_dev in zip(cpu_model.parameters(), dev_model.parameters()))
    falls = dev_losses[-1] < dev_losses[0]
    n = args.steps
    print(f"mlp_train_torch: Linear({args.features},{args.hidden}) ReLU Linear({args.hidden},1), "
          f"MSE, SGD lr {args.lr}, batch {args.batch}, {args.dtype}, {n} steps on the simulated "
          f"Neuron device")
    print(f"  loss: first {dev_losses[0]:.6f}, last {dev_losses[-1]:.6f} "
          f"(CPU PyTorch: {cpu_losses[0]:.6f}, {cpu_losses[-1]:.6f}) -> "
          f"{'falls' if falls else 'DOES NOT FALL'}")
    print(f"  losses and weights vs CPU PyTorch: "
          f"{'OK' if losses_match and weights_match else 'WRONG'}")
    print(f"  device time per step: {(t['execution_ns'] + t['transfer_ns']) / 1e6 / n:.3f} ms "
          f"(executions {t['execution_ns'] / 1e6 / n:.3f} ms in {t['executions']}, "
          f"transfers {t['transfer_ns'] / 1e6 / n:.3f} ms in {t['transfers']})")
    if not (losses_match and weights_match):
        for i, (a, b) in enumerate(zip(cpu_losses, dev_losses)):
            print(f"  step {i}: CPU {a:.6f}, device {b:.6f}")
    return 0 if losses_match and weights_match and falls else 1


if __name__ == "__main__":
    sys.exit(main())
