"""A PyTorch program that knows nothing of nrtprof: RMSNorm under record_function("rmsnorm"),
a linear layer, an MSE loss and its backward, on the CPU; one libnrt call first (nrt_init
through ctypes), as a program driving the Neuron device makes at import, which starts the
profiler. Run by tests/torch_lane_test.sh, bare and under `nrtprof run`, with Debian's
/usr/bin/python3 (its PyTorch 1.13).

  torch_rmsnorm.py LIBNRT [--iters N] [--thread-iters N] [--peer OUT.json] [--steps]
                          [--no-torch] [--maps OUT.txt]

--peer: the loop runs under torch.profiler.profile(activities=[CPU]); what it recorded and its
key_averages() (name -> count each) are written to OUT.json. --steps: the profiler has a schedule and the loop
calls its step(), so that each iteration is a ProfilerStep#N range. --thread-iters: iterations
run on a second thread too (after the main thread's, joined: the counts stay exact).
--no-torch: no import of torch at all, only the libnrt calls. --maps: the lines of
/proc/self/maps naming libtorch or nrtprof, at the end.
"""
import argparse
import contextlib
import ctypes
import json
import sys
import threading

parser = argparse.ArgumentParser()
parser.add_argument("libnrt")
parser.add_argument("--iters", type=int, default=5)
parser.add_argument("--thread-iters", type=int, default=0)
parser.add_argument("--peer")
parser.add_argument("--steps", action="store_true")
parser.add_argument("--no-torch", action="store_true")
parser.add_argument("--maps")
args = parser.parse_args()

if not args.no_torch:
    import torch
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dim, eps = 64, 1e-6
    weight = torch.nn.Parameter(torch.ones(dim))
    linear = torch.nn.Linear(dim, 8)
    inputs = torch.randn(16, dim)
    target = torch.zeros(16, 8)

    def iteration():
        with torch.autograd.profiler.record_function("rmsnorm"):
            y = inputs * torch.rsqrt(inputs.pow(2).mean(-1, keepdim=True) + eps) * weight
        loss = torch.nn.functional.mse_loss(linear(y), target)
        loss.backward()
        return loss.item()

# The process's first libnrt call: the profiler starts here (and finds libtorch mapped).
nrt = ctypes.CDLL(args.libnrt)
status = nrt.nrt_init(1, b"", b"")
if status != 0:
    sys.exit(f"nrt_init failed: {status}")

if not args.no_torch:
    if args.peer is None:
        profiler = contextlib.nullcontext()
    else:
        from torch.profiler import ProfilerActivity, profile, schedule
        profiler = profile(
            activities=[ProfilerActivity.CPU],
            schedule=schedule(wait=0, warmup=0, active=args.iters + 1) if args.steps else None)
    with profiler as prof:
        for _ in range(args.iters):
            loss = iteration()
            if args.steps:
                prof.step()
        if args.thread_iters:
            worker = threading.Thread(target=lambda: [iteration() for _ in range(args.thread_iters)])
            worker.start()
            worker.join()
    print(f"rmsnorm+linear: {args.iters} iterations, last loss {loss:.6f}")
    if args.peer is not None:
        # What the profiler recorded (one event per RecordFunction), and its key_averages(),
        # which merges an op into a same-named op it calls alone (aten::div_ with a Scalar
        # calls aten::div_ with a Tensor), so it counts fewer.
        recorded = {}
        for e in prof.profiler.kineto_results.events():
            if e.device_type() == torch.autograd.DeviceType.CPU:
                recorded[e.name()] = recorded.get(e.name(), 0) + 1
        averages = {e.key: e.count for e in prof.key_averages()}
        with open(args.peer, "w") as f:
            json.dump({"recorded": recorded, "key_averages": averages}, f, indent=1,
                      sort_keys=True)

nrt.nrt_close()
if args.maps:
    with open("/proc/self/maps") as maps, open(args.maps, "w") as out:
        out.writelines(l for l in maps if "libtorch" in l or "libc10" in l or "nrtprof" in l)
