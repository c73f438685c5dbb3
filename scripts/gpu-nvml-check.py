#!/usr/bin/env python3
"""gpu-nvml-check.py - what PyTorch, pynvml and nvidia-smi get from the
libnvidia-ml.so.1 this process loads (ours first on LD_LIBRARY_PATH with
VGPU_TRANSPORT set: host mode; NVIDIA's otherwise: native). Prints one JSON
object; scripts/gpu-nvml.sh runs it both ways and compares.

    gpu-nvml-check.py [--hold-mib N] [--smi PATH]

It allocates N MiB with torch (default 1024) and, while holding them, asks
NVML for the process list and memory and runs nvidia-smi, so both must
show this process. Every step is in a try: a failure is reported, not
fatal.
"""
import ctypes
import json
import os
import subprocess
import sys
import time

args = sys.argv[1:]
hold_mib = int(args[args.index("--hold-mib") + 1]) if "--hold-mib" in args else 1024
smi = args[args.index("--smi") + 1] if "--smi" in args else "nvidia-smi"
res = {"pid": os.getpid(), "mode": "host mode" if os.environ.get("VGPU_TRANSPORT") else "native"}


def step(name, fn):
    t0 = time.time()
    try:
        res[name] = fn()
    except Exception as e:  # report, go on
        res[name] = {"error": f"{type(e).__name__}: {e}"}
    res.setdefault("seconds", {})[name] = round(time.time() - t0, 3)


# ---- NVML through ctypes, as torch.cuda does (no pynvml needed) ----
class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class Memory2(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong), ("reserved", ctypes.c_ulonglong),
                ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class Proc(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


class Util(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


nvml = ctypes.CDLL("libnvidia-ml.so.1")


def which_nvml():
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if "libnvidia-ml" in line or "libcuda.so" in line}
    return sorted(libs)


def nvml_static():
    """torch's own sequence (_raw_device_uuid_nvml) plus identity."""
    out = {"nvmlInit": nvml.nvmlInit()}
    n = ctypes.c_uint()
    out["count_rc"] = nvml.nvmlDeviceGetCount_v2(ctypes.byref(n))
    out["count"] = n.value
    buf = ctypes.create_string_buffer(96)
    nvml.nvmlSystemGetDriverVersion(buf, 96)
    out["driver"] = buf.value.decode()
    nvml.nvmlSystemGetNVMLVersion(buf, 96)
    out["nvml_version"] = buf.value.decode()
    v = ctypes.c_int()
    nvml.nvmlSystemGetCudaDriverVersion_v2(ctypes.byref(v))
    out["cuda_driver"] = v.value
    devs = []
    for i in range(n.value):
        h = ctypes.c_void_p()
        d = {"handle_rc": nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h))}
        d["name_rc"] = nvml.nvmlDeviceGetName(h, buf, 96)
        d["name"] = buf.value.decode()
        nvml.nvmlDeviceGetUUID(h, buf, 96)
        d["uuid"] = buf.value.decode()
        pci = ctypes.create_string_buffer(68)
        d["pci_rc"] = nvml.nvmlDeviceGetPciInfo_v3(h, pci)
        d["bus_id"] = pci.raw[36:68].split(b"\0")[0].decode()
        h2 = ctypes.c_void_p()
        d["by_bus_id_rc"] = nvml.nvmlDeviceGetHandleByPciBusId_v2(d["bus_id"].encode(), ctypes.byref(h2))
        d["by_uuid_rc"] = nvml.nvmlDeviceGetHandleByUUID(d["uuid"].encode(), ctypes.byref(h2))
        ma, mi = ctypes.c_int(), ctypes.c_int()
        nvml.nvmlDeviceGetCudaComputeCapability(h, ctypes.byref(ma), ctypes.byref(mi))
        d["cc"] = f"{ma.value}.{mi.value}"
        mode = ctypes.c_int(-1)
        d["compute_mode_rc"] = nvml.nvmlDeviceGetComputeMode(h, ctypes.byref(mode))
        d["compute_mode"] = mode.value
        # P2P status of the device with itself, per capability index (read,
        # write, NVLink, atomics, PCI): [rc, status]; NCCL asks it
        st = ctypes.c_int(-1)
        d["p2p_self"] = [[nvml.nvmlDeviceGetP2PStatus(h, h, k, ctypes.byref(st)), st.value] for k in range(5)]
        devs.append(d)
    out["devices"] = devs
    return out


def handle0():
    h = ctypes.c_void_p()
    nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h))
    return h


def nvml_live():
    """memory, utilization, temperature, power, clocks, processes of device 0."""
    h = handle0()
    out = {}
    m = Memory()
    out["mem_rc"] = nvml.nvmlDeviceGetMemoryInfo(h, ctypes.byref(m))
    out["mem_mib"] = {"total": m.total >> 20, "free": m.free >> 20, "used": m.used >> 20}
    m2 = Memory2(version=ctypes.sizeof(Memory2) | 2 << 24)
    out["mem_v2_rc"] = nvml.nvmlDeviceGetMemoryInfo_v2(h, ctypes.byref(m2))
    out["mem_v2_mib"] = {"total": m2.total >> 20, "reserved": m2.reserved >> 20, "used": m2.used >> 20}
    u = Util()
    out["util_rc"] = nvml.nvmlDeviceGetUtilizationRates(h, ctypes.byref(u))
    out["util"] = [u.gpu, u.memory]
    v = ctypes.c_uint()
    for name, call in [("temp_c", lambda: nvml.nvmlDeviceGetTemperature(h, 0, ctypes.byref(v))),
                       ("power_mw", lambda: nvml.nvmlDeviceGetPowerUsage(h, ctypes.byref(v))),
                       ("power_limit_mw", lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(h, ctypes.byref(v))),
                       ("sm_clock_mhz", lambda: nvml.nvmlDeviceGetClockInfo(h, 1, ctypes.byref(v))),
                       ("max_sm_clock_mhz", lambda: nvml.nvmlDeviceGetMaxClockInfo(h, 1, ctypes.byref(v))),
                       ("pstate", lambda: nvml.nvmlDeviceGetPerformanceState(h, ctypes.byref(v)))]:
        v.value = 0
        rc = call()
        out[name] = v.value if rc == 0 else f"rc {rc}"
    n = ctypes.c_uint(0)
    out["procs_count_rc"] = nvml.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(n), None)
    procs = (Proc * 64)()
    n.value = 64
    out["procs_rc"] = nvml.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(n), procs)
    out["procs"] = [{"pid": procs[i].pid, "mib": procs[i].usedGpuMemory >> 20} for i in range(n.value)] if out["procs_rc"] == 0 else []
    out["this_process_listed"] = any(p["pid"] == os.getpid() for p in out["procs"])
    return out


# ---- torch ----
def torch_count_nvml():
    """torch.cuda.device_count() goes through NVML when CUDA_VISIBLE_DEVICES is set."""
    code = "import torch; print(torch.cuda.device_count(), torch.cuda._device_count_nvml())"
    out = {}
    uuid = res.get("nvml", {}).get("devices", [{}])[0].get("uuid", "")
    for vis in ["0", uuid[:12]]:
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=vis)
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        out[f"CUDA_VISIBLE_DEVICES={vis}"] = p.stdout.strip() or p.stderr.strip()[-300:]
    return out


tensor = None


def torch_use():
    global tensor
    import torch
    out = {"version": torch.__version__, "available": torch.cuda.is_available()}
    out["name"] = torch.cuda.get_device_name(0)
    free, total = torch.cuda.mem_get_info()
    out["mem_get_info_mib"] = [free >> 20, total >> 20]
    tensor = torch.empty(hold_mib << 20, dtype=torch.uint8, device="cuda")
    a = torch.randn(4096, 4096, device="cuda")
    t0 = time.time()
    while time.time() - t0 < 2:  # keep the GPU busy for utilization
        a = a @ a
        a = a / a.norm()
    torch.cuda.synchronize()
    free2, _ = torch.cuda.mem_get_info()
    out["mem_get_info_after_mib"] = [free2 >> 20, total >> 20]
    return out


def torch_nvml_helpers():
    """torch.cuda's NVML helpers (they need pynvml, which may be absent)."""
    import torch
    out = {}
    for name in ["utilization", "memory_usage", "temperature", "power_draw", "clock_rate", "device_memory_used"]:
        try:
            out[name] = getattr(torch.cuda, name)()
        except Exception as e:
            out[name] = f"{type(e).__name__}: {e}"[:200]
    try:
        out["list_gpu_processes"] = torch.cuda.list_gpu_processes()
    except Exception as e:
        out["list_gpu_processes"] = f"{type(e).__name__}: {e}"[:200]
    return out


def pynvml_seq():
    import pynvml
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    m = pynvml.nvmlDeviceGetMemoryInfo(h)
    u = pynvml.nvmlDeviceGetUtilizationRates(h)
    out = {"name": pynvml.nvmlDeviceGetName(h), "uuid": pynvml.nvmlDeviceGetUUID(h),
           "mem_mib": [m.total >> 20, m.used >> 20], "util": [u.gpu, u.memory],
           "procs": [(p.pid, p.usedGpuMemory) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]}
    pynvml.nvmlShutdown()
    return out


def run_smi(*a):
    p = subprocess.run([smi, *a], capture_output=True, text=True, timeout=60)
    return {"rc": p.returncode, "stdout": p.stdout[-6000:], "stderr": p.stderr[-2000:]}


def smi_views():
    out = {"default": run_smi(), "q": run_smi("-q"),
           "apps": run_smi("--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"),
           "gpu": run_smi("--query-gpu=name,uuid,pci.bus_id,driver_version,memory.total,memory.used,utilization.gpu,"
                          "temperature.gpu,power.draw,clocks.sm,pstate,persistence_mode,compute_mode", "--format=csv")}
    out["lists_this_process"] = f" {os.getpid()} " in out["default"]["stdout"]
    out["apps_lists_this_process"] = str(os.getpid()) in out["apps"]["stdout"]
    return out


step("libraries", which_nvml)
step("nvml", nvml_static)
step("torch_count", torch_count_nvml)
step("torch", torch_use)
step("nvml_live", nvml_live)
step("torch_nvml_helpers", torch_nvml_helpers)
step("pynvml", pynvml_seq)
step("nvidia_smi", smi_views)
step("libraries_after", which_nvml)
print(json.dumps(res, indent=1, default=str))
