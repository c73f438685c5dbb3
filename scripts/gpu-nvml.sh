#!/usr/bin/env bash
# gpu-nvml.sh CARRY - NVML on the GPU machine, natively and through vgpu in
# host mode, in one command (about 2 minutes):
#
#   1. the backend's TestGPUMonitor (host NVML read through purego), if
#      CARRY has cuda-gpu.test
#   2. natively: nvidia-smi, nvidia-smi -q, and scripts/gpu-nvml-check.py
#      (torch's NVML calls through ctypes, torch.cuda's NVML helpers,
#      pynvml if installed, nvidia-smi while the script holds 1 GiB)
#   3. the same against `vgpu serve --device cuda --mem-limit 8G` in host
#      mode, our libcuda.so.1 and libnvidia-ml.so.1 first on the library
#      path (nvml-smi*.log: every NVML call nvidia-smi makes, VGPU_LOG=debug;
#      nvml-check.log: each call vgpu does not serve, once)
#   4. a summary table last; everything under $OUT
#
# CARRY is scripts/gpu-carry.sh's folder (vgpu, lib/, cuda-gpu.test).
# DEVICE=sim runs the vgpu half against the sim device (a dry run on a
# machine without a GPU).
set -uo pipefail
carry=$(realpath "${1:-.gpu}")
out=${OUT:-/tmp/vgpu-out}
mkdir -p "$out"
repo=$PWD
vgpu=$carry/vgpu
sock=/tmp/vgpu-nvml.sock
limit=8G
dev=${DEVICE:-cuda}
smi=$(command -v nvidia-smi || echo /usr/bin/nvidia-smi)

step() { echo "== $(date -u +%H:%M:%S) $*"; }

if [[ -x $carry/cuda-gpu.test ]]; then
	step "backend: host NVML through purego (TestGPUMonitor)"
	(cd backend/device/cuda && timeout 120 "$carry/cuda-gpu.test" -test.v -test.run 'TestGPUMonitor|TestGPUProperties') \
		>"$out/gotest-monitor.log" 2>&1
	grep -E '^(--- |ok|FAIL|PASS)|driver "' "$out/gotest-monitor.log"
fi

step "native: nvidia-smi, nvidia-smi -q, torch/pynvml check"
"$smi" >"$out/smi-native.txt" 2>&1; echo "nvidia-smi rc=$?"
"$smi" -q >"$out/smi-q-native.txt" 2>&1; echo "nvidia-smi -q rc=$?"
timeout 240 python3 scripts/gpu-nvml-check.py --smi "$smi" >"$out/check-native.json" 2>"$out/check-native.err"
echo "check rc=$?"

step "host mode: vgpu serve --device $dev --mem-limit $limit"
rm -f "$sock"
"$vgpu" serve --device "$dev" --mem-limit "$limit" --unix "$sock" --log-level info >"$out/serve.log" 2>&1 &
srv=$!
for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.1; done
export VGPU_TRANSPORT=unix:$sock
LD_LIBRARY_PATH=$carry/lib VGPU_LOG=debug VGPU_LOG_FILE=$out/nvml-smi.log "$smi" >"$out/smi-vgpu.txt" 2>&1
echo "nvidia-smi rc=$?"
LD_LIBRARY_PATH=$carry/lib VGPU_LOG=debug VGPU_LOG_FILE=$out/nvml-smi-q.log "$smi" -q >"$out/smi-q-vgpu.txt" 2>&1
echo "nvidia-smi -q rc=$?"
LD_LIBRARY_PATH=$carry/lib VGPU_LOG=info VGPU_LOG_FILE=$out/nvml-check.log \
	timeout 300 python3 scripts/gpu-nvml-check.py --smi "$smi" >"$out/check-vgpu.json" 2>"$out/check-vgpu.err"
echo "check rc=$?"
unset VGPU_TRANSPORT
kill $srv; wait $srv 2>/dev/null

step "summary"
python3 - "$out/check-native.json" "$out/check-vgpu.json" <<'EOF'
import json, sys
def load(p):
    try:
        return json.load(open(p))
    except Exception as e:
        return {"error": str(e)}
n, v = load(sys.argv[1]), load(sys.argv[2])
def get(d, *path):
    for k in path:
        if isinstance(d, dict):
            d = d.get(k, "-")
        elif isinstance(d, list) and isinstance(k, int) and len(d) > k:
            d = d[k]
        else:
            return "-"
    return d
rows = [
    ("NVML libraries", ("libraries",)),
    ("device count (NVML)", ("nvml", "count")),
    ("name", ("nvml", "devices", 0, "name")),
    ("uuid", ("nvml", "devices", 0, "uuid")),
    ("bus id", ("nvml", "devices", 0, "bus_id")),
    ("driver version", ("nvml", "driver")),
    ("P2P status with itself [rc,status]x5", ("nvml", "devices", 0, "p2p_self")),
    ("CUDA driver", ("nvml", "cuda_driver")),
    ("torch.cuda.device_count via NVML", ("torch_count",)),
    ("torch mem_get_info MiB (free,total)", ("torch", "mem_get_info_mib")),
    ("NVML memory MiB (holding 1 GiB)", ("nvml_live", "mem_mib")),
    ("NVML utilization (gpu, mem) %", ("nvml_live", "util")),
    ("temperature C", ("nvml_live", "temp_c")),
    ("power mW", ("nvml_live", "power_mw")),
    ("SM clock MHz", ("nvml_live", "sm_clock_mhz")),
    ("processes", ("nvml_live", "procs")),
    ("this process listed (NVML)", ("nvml_live", "this_process_listed")),
    ("torch.cuda NVML helpers", ("torch_nvml_helpers",)),
    ("pynvml", ("pynvml",)),
    ("nvidia-smi rc default/-q/apps", ("nvidia_smi",)),
    ("nvidia-smi lists this process", ("nvidia_smi", "lists_this_process")),
]
for label, path in rows:
    a, b = get(n, *path), get(v, *path)
    if path == ("nvidia_smi",):
        a, b = [[x.get("rc") for x in (d.get("default", {}), d.get("q", {}), d.get("apps", {}))] if isinstance(d, dict) else d for d in (a, b)]
    print(f"{label:38} native: {str(a)[:70]:70} | vgpu: {str(b)[:90]}")
EOF
echo "-- vgpu nvidia-smi (default view):"
cat "$out/smi-vgpu.txt"
echo "-- NVML calls vgpu does not serve, and nvidia-smi's private slots (first 40):"
grep -ho '[A-Za-z_0-9 ]*is not supported by vgpu\|internal NVML slot [0-9]*' "$out"/nvml-*.log 2>/dev/null | sort | uniq -c | sort -rn | head -40
