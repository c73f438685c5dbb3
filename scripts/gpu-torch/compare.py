#!/usr/bin/env python3
"""compare.py NATIVE.json VGPU.json [LABEL]: one summary line per check, and the
training losses of a vgpu run against the native run of the same script: the
largest relative difference over all steps, and step time and round trips per
step against native."""
import json
import sys

nat, vg = (json.load(open(p)) for p in sys.argv[1:3])
label = sys.argv[3] if len(sys.argv) > 3 else "vgpu"
bad = 0
for name, c in vg["checks"].items():
    n = nat["checks"].get(name, {})
    print(f"{label:10s} {name:18s} {'PASS' if c['ok'] else 'FAIL'}" + ("" if c["ok"] else f"  {c.get('error', '')[:120]}"))
    bad += not c["ok"]
t, tn = vg["checks"].get("train", {}), nat["checks"].get("train", {})
if t.get("ok") and tn.get("ok"):
    k = min(len(t["losses"]), len(tn["losses"]))
    d = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(t["losses"][:k], tn["losses"][:k]))
    same = sum(a == b for a, b in zip(t["losses"][:k], tn["losses"][:k]))
    print(f"{label:10s} losses over {k} steps: max relative difference {d:.2e}, bit-identical in {same}/{k}; "
          f"last {t['losses'][k-1]:.6f} vs native {tn['losses'][k-1]:.6f}")
    print(f"{label:10s} step time {t['step_ms_mean']:.2f} ms vs native {tn['step_ms_mean']:.2f} ms "
          f"({t['step_ms_mean'] / tn['step_ms_mean']:.2f}x); round trips per step: {t.get('round_trips_per_step', 'n/a')}")
    if d > 1e-3:
        print(f"{label:10s} FAIL losses differ from native by more than 1e-3")
        bad += 1
sys.exit(1 if bad else 0)
