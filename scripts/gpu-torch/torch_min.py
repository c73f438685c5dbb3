#!/usr/bin/env python3
"""torch_min.py: the shortest PyTorch path through the CUDA stack, one step per line,
on whatever libcuda.so.1 the process loads (the driver's, or vgpu's through
LD_LIBRARY_PATH; torch's own libcudart.so.13 comes by RPATH).

  python3 torch_min.py [--extra]

Steps: import, torch.cuda.is_available() (cudaGetDeviceCount: the export tables and
cuGetProcAddress), device name, a tensor to the GPU and back, an add (a kernel), an
fp32 matmul (cuBLAS/cuBLASLt), a sync; --extra adds a bf16 matmul, a reduction and a
cuDNN convolution. Prints "PASS step" or "FAIL step: error" for each, which
libcuda.so.1 was loaded, and last "PASS torch_min" or "FAIL torch_min: first failure".
A failed step ends the run (later steps would only repeat the error).
"""
import sys
import time
import traceback

failed = []


def step(name, fn):
    t0 = time.time()
    try:
        note = fn()
        print(f"PASS {name} ({time.time() - t0:.2f}s){': ' + str(note) if note is not None else ''}", flush=True)
        return True
    except Exception as e:  # noqa: BLE001 - every failure is a result
        print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
        traceback.print_exc()
        failed.append(f"{name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        return False


def loaded(lib):
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if lib in line}
    return " ".join(sorted(paths)) or "(not loaded)"


def main():
    extra = "--extra" in sys.argv
    ns = {}

    def imp():
        import torch
        ns["torch"] = torch
        return torch.__version__

    steps = [("import", imp)]

    def avail():
        t = ns["torch"]
        if not t.cuda.is_available():
            raise AssertionError("torch.cuda.is_available() is False")
        return f"{t.cuda.device_count()} device(s)"

    def name():
        return ns["torch"].cuda.get_device_name(0)

    def to_gpu():
        t = ns["torch"]
        a = t.arange(1 << 20, dtype=t.float32)
        g = a.to("cuda")
        if not t.equal(g.cpu(), a):
            raise AssertionError("the tensor came back different")
        ns["a"], ns["g"] = a, g

    def add():
        t = ns["torch"]
        r = (ns["g"] + ns["g"]).cpu()
        if not t.equal(r, ns["a"] * 2):
            raise AssertionError("a + a != 2a")

    def matmul():
        t = ns["torch"]
        t.backends.cuda.matmul.allow_tf32 = False
        x, y = t.randn(256, 192), t.randn(192, 128)
        err = ((x.cuda() @ y.cuda()).cpu().double() - x.double() @ y.double()).abs().max().item()
        if err > 1e-3:
            raise AssertionError(f"fp32 matmul max error {err:g}")
        return f"max error {err:.2e}"

    def sync():
        ns["torch"].cuda.synchronize()

    steps += [("cuda.is_available", avail), ("device_name", name), ("tensor_to_gpu", to_gpu),
              ("add", add), ("matmul_fp32", matmul), ("synchronize", sync)]

    if extra:
        def bf16():
            t = ns["torch"]
            x, y = t.randn(256, 192), t.randn(192, 128)
            c = (x.cuda().bfloat16() @ y.cuda().bfloat16()).float().cpu()
            err = (c.double() - x.bfloat16().double() @ y.bfloat16().double()).abs().max().item()
            if err > 0.5:
                raise AssertionError(f"bf16 matmul max error {err:g}")

        def reduce():
            t = ns["torch"]
            s = ns["g"].sum().item()
            want = float(ns["a"].double().sum())
            if abs(s - want) > 1e-4 * want:
                raise AssertionError(f"sum {s} != {want}")

        def conv():
            t = ns["torch"]
            x, w = t.randn(2, 3, 16, 16), t.randn(8, 3, 3, 3)
            t.backends.cudnn.allow_tf32 = False
            yg = t.nn.functional.conv2d(x.cuda(), w.cuda(), padding=1).cpu()
            err = (yg.double() - t.nn.functional.conv2d(x.double(), w.double(), padding=1)).abs().max().item()
            if err > 1e-3:
                raise AssertionError(f"conv2d max error {err:g}")

        steps += [("matmul_bf16", bf16), ("reduction", reduce), ("conv2d_cudnn", conv), ("synchronize_end", sync)]

    for n, fn in steps:
        if not step(n, fn):
            break
    print(f"libcuda.so.1 loaded: {loaded('libcuda.so')}", flush=True)
    print(f"libcudart loaded: {loaded('libcudart.so')}", flush=True)
    if failed:
        print(f"FAIL torch_min: {failed[0]}", flush=True)
        return 1
    print("PASS torch_min", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
