"""nrtsim_torch's ops against CPU PyTorch: every op the backend implements, in float32 and
bfloat16, gives CPU PyTorch's result within the dtype's tolerance (computed on the device: the
backend's counters show the executions); autograd through a linear layer, ReLU and MSE loss
gives CPU's gradients; an op it does not implement raises PyTorch's NotImplementedError naming
the op; the fused nrtsim::rms_norm is one execution and matches the eager formula.

Run by torch_device_test.sh with Debian's /usr/bin/python3 and the module on PYTHONPATH.
"""
import unittest

import torch
import nrtsim_torch

DEV = nrtsim_torch.device
DTYPES = (torch.float32, torch.bfloat16)
# bf16 keeps 8 significant bits and the device rounds each op's result (and, in a chain of ops
# inside one model, each intermediate) to it.
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}


def rand(*shape, dtype=torch.float32, low=-2.0, high=2.0, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape))
    return (torch.rand(*shape, generator=g) * (high - low) + low).to(dtype)


def cpu_reference(fn, *args):
    """fn on CPU: bf16 inputs computed in float32 and rounded back (CPU PyTorch 1.13 lacks some
    bf16 kernels; the device also computes in float32 and rounds)."""
    up = [a.float() if isinstance(a, torch.Tensor) and a.dtype == torch.bfloat16 else a for a in args]
    out = fn(*up)
    dtype = next(a.dtype for a in args if isinstance(a, torch.Tensor))
    return out.to(dtype) if isinstance(out, torch.Tensor) else out


class DeviceTestCase(unittest.TestCase):
    def check(self, fn, *args, executions=None):
        """fn on the device equals fn on the CPU, for the device copies of the tensor args."""
        ref = cpu_reference(fn, *args)
        dev_args = [a.to(DEV) if isinstance(a, torch.Tensor) else a for a in args]
        before = nrtsim_torch.stats()
        got = fn(*dev_args)
        after = nrtsim_torch.stats()
        ran = after["executions"] - before["executions"]
        self.writes = after["writes"] - before["writes"]
        self.reads = after["reads"] - before["reads"]
        self.assertEqual(got.device.type, "privateuseone")
        self.assertEqual(got.dtype, ref.dtype)
        self.assertEqual(got.shape, ref.shape)
        torch.testing.assert_close(got.cpu().float(), ref.float(), **TOL[ref.dtype])
        if executions is not None:
            self.assertEqual(ran, executions, "executions on the device")
        return got


class ElementwiseTest(DeviceTestCase):
    def test_binary_ops_same_shape_and_broadcast(self):
        for dtype in DTYPES:
            a = rand(4, 8, dtype=dtype)
            b = rand(4, 8, dtype=dtype, low=0.5, high=2.0, seed=1)
            col = rand(4, 1, dtype=dtype, low=0.5, high=2.0, seed=2)
            row = rand(8, dtype=dtype, low=0.5, high=2.0, seed=3)
            for name, op in [("mul", torch.mul), ("add", torch.add), ("sub", torch.sub),
                             ("div", torch.div)]:
                for other in (b, col, row):
                    with self.subTest(op=name, dtype=dtype, other=tuple(other.shape)):
                        self.check(op, a, other, executions=1)

    def test_python_scalars(self):
        for dtype in DTYPES:
            a = rand(4, 8, dtype=dtype)
            for name, fn in [("x + 1e-6", lambda x: x + 1e-6), ("x * 3", lambda x: x * 3),
                             ("x - 0.5", lambda x: x - 0.5), ("x / 4", lambda x: x / 4),
                             ("2 * x", lambda x: 2 * x)]:
                with self.subTest(fn=name, dtype=dtype):
                    self.check(fn, a, executions=1)
                    # The Python float crosses to the device, as eager PyTorch copies it.
                    self.assertEqual(self.writes, 1)

    def test_scalar_overloads_and_alpha(self):
        for dtype in DTYPES:
            a, b = rand(3, 5, dtype=dtype), rand(3, 5, dtype=dtype, seed=7)
            cases = [
                ("mul.Scalar", lambda x: torch.ops.aten.mul.Scalar(x, 2.5)),
                ("add.Scalar", lambda x: torch.ops.aten.add.Scalar(x, 1.5, 2)),
                ("sub.Scalar", lambda x: torch.ops.aten.sub.Scalar(x, 0.25)),
                ("div.Scalar", lambda x: torch.ops.aten.div.Scalar(x, 4.0)),
            ]
            for name, fn in cases:
                with self.subTest(op=name, dtype=dtype):
                    self.check(fn, a, executions=1)
            with self.subTest(op="add alpha", dtype=dtype):
                self.check(lambda x, y: torch.add(x, y, alpha=-0.1), a, b, executions=1)
            with self.subTest(op="sub alpha", dtype=dtype):
                self.check(lambda x, y: torch.sub(x, y, alpha=3), a, b, executions=1)

    def test_in_place_with_alpha(self):
        for dtype in DTYPES:
            p, g = rand(6, 4, dtype=dtype), rand(6, 4, dtype=dtype, seed=5)
            for name, fn in [("add_", lambda x, y: x.add_(y, alpha=-0.05)),
                             ("sub_", lambda x, y: x.sub_(y, alpha=0.5)),
                             ("mul_", lambda x, y: x.mul_(y)),
                             ("mul_ scalar", lambda x, y: x.mul_(0.5))]:
                with self.subTest(op=name, dtype=dtype):
                    ref = fn(p.clone().float(), g.float()).to(dtype)
                    pd = p.to(DEV)
                    out = fn(pd, g.to(DEV))
                    self.assertIs(out, pd)
                    torch.testing.assert_close(pd.cpu().float(), ref.float(), **TOL[dtype])

    def test_pow_rsqrt_relu(self):
        for dtype in DTYPES:
            a = rand(4, 16, dtype=dtype)
            pos = rand(4, 16, dtype=dtype, low=0.1, high=3.0)
            with self.subTest(op="pow 2", dtype=dtype):
                self.check(lambda x: x.pow(2), a, executions=1)
            with self.subTest(op="pow 3", dtype=dtype):
                self.check(lambda x: x ** 3, a, executions=1)
            with self.subTest(op="rsqrt", dtype=dtype):
                self.check(torch.rsqrt, pos, executions=1)

    def test_relu_abs_threshold_backward_on_the_device(self):
        # One execution each, nothing read back or written: the device computes them. Exact in
        # either dtype (they select or negate), NaN and -0 as CPU PyTorch has them.
        edges = torch.tensor([float("nan"), -0.0, 0.0, -1.5, 2.5, float("-inf"), float("inf"), 1e-3])
        for dtype in DTYPES:
            a = rand(4, 16, dtype=dtype)
            g = rand(4, 16, dtype=dtype, seed=5)
            for name, fn, args in [("relu", torch.relu, (a,)), ("relu_", lambda x: x.relu_(), (a,)),
                                   ("abs", torch.abs, (a,)), ("abs_", lambda x: x.abs_(), (a,)),
                                   ("threshold_backward 0",
                                    lambda g, x: torch.ops.aten.threshold_backward(g, x, 0), (g, a)),
                                   ("threshold_backward 0.5",
                                    lambda g, x: torch.ops.aten.threshold_backward(g, x, 0.5), (g, a)),
                                   ("threshold_backward broadcast",
                                    lambda g, x: torch.ops.aten.threshold_backward(g, x, 0),
                                    (g[:1], a))]:
                with self.subTest(op=name, dtype=dtype):
                    got = self.check(fn, *[t.clone() for t in args], executions=1)
                    self.assertEqual((self.reads, self.writes), (0, 0), "transfers")
                    ref = cpu_reference(fn, *[t.clone() for t in args])
                    self.assertTrue(torch.equal(got.cpu(), ref), f"{name} is not exact")
            with self.subTest(op="relu, abs, threshold_backward at the edges", dtype=dtype):
                e = edges.to(dtype)
                ed = e.to(DEV)
                for got, ref in [(torch.relu(ed), torch.relu(e.float()).to(dtype)),
                                 (torch.abs(ed), torch.abs(e.float()).to(dtype)),
                                 (torch.ops.aten.threshold_backward(ed, ed, 0),
                                  torch.ops.aten.threshold_backward(e.float(), e.float(), 0).to(dtype))]:
                    got = got.cpu()
                    torch.testing.assert_close(got, ref, equal_nan=True, rtol=0, atol=0)
                    signed = lambda t: [bool(v) for v, n in zip(torch.signbit(t), t.isnan()) if not n]
                    self.assertEqual(signed(got), signed(ref))  # -0 kept or not, as CPU's
                self.assertTrue(bool((torch.relu(ed).cpu() == 0).any()), "relu kept no zero")

    def test_dtype_conversion_on_device(self):
        a = rand(4, 8)
        for src, dst in [(torch.float32, torch.bfloat16), (torch.bfloat16, torch.float32)]:
            with self.subTest(src=src, dst=dst):
                d = a.to(src).to(DEV)
                before = nrtsim_torch.stats()["executions"]
                got = d.to(dst)
                self.assertEqual(nrtsim_torch.stats()["executions"] - before, 1)
                self.assertEqual(got.dtype, dst)
                self.assertTrue(torch.equal(got.cpu(), a.to(src).to(dst)))


class ReductionTest(DeviceTestCase):
    def test_mean_and_sum_over_dims(self):
        for dtype in DTYPES:
            a = rand(4, 6, 8, dtype=dtype)
            cases = [
                ("mean -1 keepdim", lambda x: x.mean(-1, keepdim=True)),
                ("mean 1", lambda x: x.mean(1)),
                ("mean (0, 2)", lambda x: x.mean((0, 2))),
                ("mean all", lambda x: x.mean()),
                ("sum 0", lambda x: x.sum(0)),
                ("sum -1 keepdim", lambda x: x.sum(-1, keepdim=True)),
                ("sum all", lambda x: x.sum()),
            ]
            for name, fn in cases:
                with self.subTest(op=name, dtype=dtype):
                    self.check(fn, a, executions=1)


class MatmulTest(DeviceTestCase):
    def test_mm_addmm_and_transposed_operands(self):
        for dtype in DTYPES:
            a, b = rand(5, 7, dtype=dtype), rand(7, 3, dtype=dtype, seed=1)
            bias, wt = rand(3, dtype=dtype, seed=2), rand(3, 7, dtype=dtype, seed=3)
            with self.subTest(op="mm", dtype=dtype):
                self.check(torch.mm, a, b, executions=1)
            with self.subTest(op="addmm", dtype=dtype):
                self.check(torch.addmm, bias, a, b, executions=1)
            with self.subTest(op="addmm beta alpha", dtype=dtype):
                self.check(lambda s, x, y: torch.addmm(s, x, y, beta=0.5, alpha=2), bias, a, b,
                           executions=1)
            # The transposed operand is a transpose model on the device: two executions,
            # nothing read back or written.
            with self.subTest(op="x @ w.t()", dtype=dtype):
                self.check(lambda x, w: x @ w.t(), a, wt, executions=2)
                self.assertEqual((self.reads, self.writes), (0, 0), "transfers")
            with self.subTest(op="linear", dtype=dtype):
                self.check(torch.nn.functional.linear, a, wt, bias, executions=2)
                self.assertEqual((self.reads, self.writes), (0, 0), "transfers")
            with self.subTest(op="a.t() @ b", dtype=dtype):
                self.check(lambda x, y: x.t() @ y, a, rand(5, 3, dtype=dtype, seed=4), executions=2)

    def test_transpose_made_contiguous_on_the_device(self):
        for src, dst in [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
                         (torch.float32, torch.bfloat16)]:
            with self.subTest(src=src, dst=dst):
                a = rand(5, 7, dtype=src)
                d = a.to(DEV)
                got = torch.empty(7, 5, dtype=dst, device=DEV)
                before = nrtsim_torch.stats()
                got.copy_(d.t())
                after = nrtsim_torch.stats()
                self.assertEqual(after["executions"] - before["executions"], 1)
                self.assertEqual(after["reads"] - before["reads"], 0)
                self.assertTrue(torch.equal(got.cpu(), a.t().to(dst)))
                # .to(dtype) keeps the transposed layout: a copy of the matrix it views.
                before = nrtsim_torch.stats()
                kept = d.t().to(dst)
                after = nrtsim_torch.stats()
                self.assertEqual(after["reads"] - before["reads"], 0)
                self.assertTrue(torch.equal(kept.cpu(), a.t().to(dst)))
                # A view at an offset (a column block of a wider matrix's transpose).
                wide = rand(6, 5, dtype=src, seed=7)
                self.assertTrue(torch.equal(wide.to(DEV)[2:].t().contiguous().cpu(),
                                            wide[2:].t().contiguous()))

    def test_views_read_back(self):
        a = rand(3, 4)
        d = a.to(DEV)
        torch.testing.assert_close(d.t().cpu(), a.t())
        torch.testing.assert_close(d.view(4, 3).cpu(), a.view(4, 3))
        torch.testing.assert_close(d.reshape(12).cpu(), a.reshape(12))
        torch.testing.assert_close(d[1].cpu(), a[1])
        torch.testing.assert_close(d.t().contiguous().cpu(), a.t().contiguous())


    def test_ops_on_views(self):
        x = rand(3, 4)
        xd = x.to(DEV)
        x[0].add_(1)
        xd[0].add_(1)  # a contiguous view at an offset, written in place
        x[:, 1].mul_(2)
        xd[:, 1].mul_(2)  # a strided view, written in place
        torch.testing.assert_close(xd.cpu(), x)
        torch.testing.assert_close((xd[1] * xd[2]).cpu(), x[1] * x[2])
        torch.testing.assert_close((xd.t() + 1).cpu(), x.t() + 1)
        w = rand(4, seed=3)
        torch.testing.assert_close((w.to(DEV).expand(3, 4) * xd).cpu(), w.expand(3, 4) * x)


class LossAndAutogradTest(DeviceTestCase):
    def test_mse_loss_reductions(self):
        for dtype in DTYPES:
            p, t = rand(8, 3, dtype=dtype), rand(8, 3, dtype=dtype, seed=9)
            for reduction in ("mean", "sum", "none"):
                with self.subTest(reduction=reduction, dtype=dtype):
                    self.check(lambda x, y: torch.nn.functional.mse_loss(x, y, reduction=reduction),
                               p, t, executions=1)

    def test_linear_relu_mse_backward(self):
        # The reference is the float32 model on the CPU (CPU 1.13 has no bf16 mse_loss); the
        # device runs the same weights in each dtype.
        torch.manual_seed(1)
        make = lambda: torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.ReLU(),
                                           torch.nn.Linear(10, 2))
        model = make()
        x, y = rand(5, 6), rand(5, 2, seed=4)
        ref_loss = torch.nn.functional.mse_loss(model(x), y)
        ref_loss.backward()
        ref_grads = [p.grad for p in model.parameters()]
        for dtype in DTYPES:
            dev_model = make()
            dev_model.load_state_dict(model.state_dict())
            dev_model.to(dtype).to(DEV)
            loss = torch.nn.functional.mse_loss(dev_model(x.to(dtype).to(DEV)),
                                                y.to(dtype).to(DEV))
            loss.backward()
            with self.subTest(dtype=dtype):
                torch.testing.assert_close(loss.detach().cpu().float(), ref_loss.detach(),
                                           **TOL[dtype])
                for got, ref in zip(dev_model.parameters(), ref_grads):
                    self.assertEqual(got.grad.device.type, "privateuseone")
                    torch.testing.assert_close(got.grad.cpu().float(), ref, **TOL[dtype])

    def test_sgd_step(self):
        p_cpu = torch.nn.Parameter(rand(4, 3))
        p_dev = torch.nn.Parameter(p_cpu.detach().to(DEV))
        for p in (p_cpu, p_dev):
            opt = torch.optim.SGD([p], lr=0.1)
            opt.zero_grad()
            (p * p).sum().backward()
            opt.step()
        torch.testing.assert_close(p_dev.detach().cpu(), p_cpu.detach())


class FusedRmsNormTest(DeviceTestCase):
    def test_one_execution_matching_the_eager_formula(self):
        for dtype in DTYPES:
            x, w = rand(4, 512, dtype=dtype), rand(512, dtype=dtype, low=0.5, high=1.5)
            eager = lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
            with self.subTest(dtype=dtype):
                got = self.check(lambda x, w: torch.ops.nrtsim.rms_norm(x, w, 1e-6), x, w,
                                 executions=1)
                torch.testing.assert_close(got.cpu().float(), cpu_reference(eager, x, w).float(),
                                           **TOL[dtype])

    def test_refuses_inputs_that_need_a_backward(self):
        x = rand(2, 8).to(DEV).requires_grad_()
        w = rand(8).to(DEV)
        with self.assertRaisesRegex(NotImplementedError, "nrtsim::rms_norm has no backward"):
            torch.ops.nrtsim.rms_norm(x, w, 1e-6)
        with torch.no_grad():
            torch.ops.nrtsim.rms_norm(x, w, 1e-6)


class NotImplementedTest(unittest.TestCase):
    def test_unimplemented_ops_raise_naming_the_op(self):
        x = rand(4, 4).to(DEV)
        for name, fn in [("aten::sin", torch.sin), ("aten::exp", torch.exp),
                         ("aten::pow.Tensor_Scalar", lambda t: t.pow(0.5)),
                         ("aten::max", lambda t: t.max())]:
            with self.subTest(op=name):
                with self.assertRaises(NotImplementedError) as caught:
                    fn(x)
                self.assertIn(name, str(caught.exception))

    def test_other_dtypes_are_refused(self):
        with self.assertRaisesRegex(NotImplementedError, "dtype Long is not supported"):
            torch.arange(4).to(DEV)


if __name__ == "__main__":
    unittest.main()
