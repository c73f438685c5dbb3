#!/usr/bin/env python3
"""torch_check.py: PyTorch, CuPy and Triton on whatever libcuda.so.1 the process
loads (the real driver's, or vgpu's), checked against the CPU, plus a small model
trained for --steps steps whose losses are written out for comparison with a
native run of the same script (compare.py).

  python3 torch_check.py --out RESULT.json [--steps 300] [--quick]

Every check prints one line "PASS name" or "FAIL name: reason" and goes into the
JSON file; the exit status is 1 if any check failed. With vgpu's libcuda.so.1 and
VGPU_STATS=1, the synchronous round trips of each training step are counted
(vgpuRoundTrips). --quick skips CuPy and Triton and trains fewer steps (the TCG
guest, where every call costs about a millisecond of emulation).
"""
import argparse
import ctypes
import json
import os
import sys
import time
import traceback

results = {"checks": {}, "env": {}}


def check(name):
    def wrap(fn):
        t0 = time.time()
        try:
            extra = fn()
            results["checks"][name] = {"ok": True, "seconds": round(time.time() - t0, 3)}
            if extra:
                results["checks"][name].update(extra)
            print(f"PASS {name}", flush=True)
        except Exception as e:  # noqa: BLE001 - every failure is a result
            results["checks"][name] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            results["checks"][name].update(getattr(e, "extra", {}))  # e.g. the losses of a failed training
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
            traceback.print_exc()
        return fn
    return wrap


def close(a, b, tol, what):
    import torch
    err = (a.float().cpu() - b.float().cpu()).abs().max().item()
    scale = max(1.0, b.float().abs().max().item())
    if not err <= tol * scale:
        raise AssertionError(f"{what}: max error {err:g} > {tol:g} x {scale:g}")
    return err


def vgpu_counter():
    """vgpuRoundTrips from vgpu's libcuda.so.1, or None natively."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        f = lib.vgpuRoundTrips
        f.restype = ctypes.c_uint64
        return f
    except (OSError, AttributeError):
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.steps = min(args.steps, 50)

    t0 = time.time()
    import torch
    results["env"]["import_seconds"] = round(time.time() - t0, 2)
    results["env"]["torch"] = torch.__version__
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    dev = "cuda"

    @check("device_queries")
    def _():
        if not torch.cuda.is_available():
            raise AssertionError("torch.cuda.is_available() is False")
        p = torch.cuda.get_device_properties(0)
        free, total = torch.cuda.mem_get_info()
        return {"count": torch.cuda.device_count(), "name": torch.cuda.get_device_name(0),
                "capability": list(torch.cuda.get_device_capability(0)), "sms": p.multi_processor_count,
                "total_memory": p.total_memory, "mem_get_info": [free, total]}

    if not results["checks"]["device_queries"]["ok"]:
        finish(args)
        return

    @check("elementwise")
    def _():
        a = torch.randn(1 << 20)
        b = (a.to(dev) * 2 + 1).sin()
        close(b, (a * 2 + 1).sin(), 1e-5, "sin(2a+1)")

    @check("matmul_fp32")
    def _():
        a, b = torch.randn(512, 384), torch.randn(384, 256)
        close(a.to(dev) @ b.to(dev), a.double() @ b.double(), 1e-4, "fp32 matmul")

    @check("matmul_bf16")
    def _():
        a, b = torch.randn(512, 384), torch.randn(384, 256)
        c = a.to(dev, torch.bfloat16) @ b.to(dev, torch.bfloat16)
        close(c, a.bfloat16().double() @ b.bfloat16().double(), 2e-2, "bf16 matmul")

    @check("conv2d_cudnn")
    def _():
        x, w = torch.randn(4, 3, 32, 32), torch.randn(16, 3, 3, 3)
        y = torch.nn.functional.conv2d(x.to(dev), w.to(dev), padding=1)
        close(y, torch.nn.functional.conv2d(x.double(), w.double(), padding=1), 1e-4, "conv2d")

    @check("fft_cufft")
    def _():
        x = torch.randn(4096, dtype=torch.complex64)
        close(torch.view_as_real(torch.fft.fft(x.to(dev))), torch.view_as_real(torch.fft.fft(x.to(torch.complex128))), 1e-4, "fft")

    @check("linalg_cusolver")
    def _():
        a = torch.randn(64, 64, dtype=torch.float64) + 64 * torch.eye(64, dtype=torch.float64)
        close(torch.linalg.inv(a.to(dev)), torch.linalg.inv(a), 1e-9, "inv")

    @check("sparse_cusparse")
    def _():
        i = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
        s = torch.sparse_coo_tensor(i, torch.tensor([1.0, 2.0, 3.0, 4.0]), (4, 4))
        d = torch.randn(4, 8)
        close(torch.sparse.mm(s.to(dev), d.to(dev)), torch.sparse.mm(s.double(), d.double()), 1e-5, "sparse mm")

    @check("train")
    def _():
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Flatten(), torch.nn.Linear(8 * 14 * 14, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
        g = torch.Generator().manual_seed(1)
        # 64 batches of 64 noisy images around one fixed pattern per class, so
        # the loss falls within the 50 steps of --quick too (random labels
        # only fall once memorised, after hundreds of steps)
        ys = torch.randint(0, 10, (64, 64), generator=g)
        patterns = torch.randn(10, 1, 28, 28, generator=g)
        xs = torch.randn(64, 64, 1, 28, 28, generator=g) + 0.5 * patterns[ys]
        model = model.to(dev)
        xs, ys = xs.to(dev), ys.to(dev)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        rt = vgpu_counter()
        losses, times, trips = [], [], []
        for step in range(args.steps):
            r0 = rt() if rt else 0
            t = time.perf_counter()
            x, y = xs[step % 64], ys[step % 64]
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())  # one synchronisation per step, as logging does
            times.append(time.perf_counter() - t)
            if rt:
                trips.append(rt() - r0)
        warm = times[10:] or times
        out = {"losses": losses, "first_loss": losses[0], "last_loss": losses[-1],
               "step_ms_mean": 1e3 * sum(warm) / len(warm), "step_ms_min": 1e3 * min(warm)}
        if trips:
            w = trips[10:] or trips
            out["round_trips_per_step"] = sum(w) / len(w)
        head, tail = losses[:5], losses[-5:]
        if not sum(tail) / len(tail) < 0.9 * sum(head) / len(head):
            e = AssertionError(f"loss did not fall by 10%: first 5 steps {sum(head) / len(head):.4f}, "
                               f"last 5 {sum(tail) / len(tail):.4f}")
            e.extra = out
            raise e
        return out

    if not args.quick:
        @check("cupy_kernel")
        def _():
            import cupy as cp
            x = cp.arange(1 << 16, dtype=cp.float32)
            k = cp.RawKernel(r'''
            extern "C" __global__ void twice(const float *x, float *y, int n) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) y[i] = 2 * x[i] + 1;
            }''', "twice")
            y = cp.empty_like(x)
            k(((1 << 16) // 256,), (256,), (x, y, cp.int32(1 << 16)))
            ew = cp.ElementwiseKernel("float32 a", "float32 b", "b = a * a", "square")(x)
            if not bool(cp.allclose(y, 2 * x + 1)) or not bool(cp.allclose(ew, x * x)):
                raise AssertionError("cupy results differ")

        @check("triton_kernel")
        def _():
            import triton
            import triton.language as tl

            @triton.jit
            def add(x, y, out, n, BLOCK: tl.constexpr):
                i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
                m = i < n
                tl.store(out + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)
            n = 100_000
            a, b = torch.randn(n, device=dev), torch.randn(n, device=dev)
            o = torch.empty_like(a)
            add[(triton.cdiv(n, 1024),)](a, b, o, n, BLOCK=1024)
            close(o, a + b, 1e-6, "triton add")

    finish(args)


def finish(args):
    ok = all(c["ok"] for c in results["checks"].values())
    results["ok"] = ok
    with open(args.out, "w") as f:
        json.dump(results, f)
    print(("PASS" if ok else "FAIL") + f" torch_check ({sum(c['ok'] for c in results['checks'].values())}/{len(results['checks'])} checks)", flush=True)
    sys.stdout.flush()
    os._exit(0 if ok else 1)


if __name__ == "__main__":
    main()
