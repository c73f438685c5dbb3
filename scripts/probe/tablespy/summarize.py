#!/usr/bin/env python3
"""summarize.py [LABEL=]LOG... - what tablespy's logs say, per export-table UUID.

For each UUID asked: the driver's answers (rc, size, whether the spy wrapped it), which
programs (LABEL, default the log's file name) and libraries asked; for each slot called:
how often (the exit or signal counts, else the logged calls), its function in the driver
(library+offset) and up to EXAMPLES (default 4) example calls with their arguments, return
value and, for pointer arguments, the 32 bytes before (and after, where they changed: ">").
Fatal signals are listed with the slots in flight. Usage: summarize.py a=spy-a.log b=spy-b.log
"""
import collections
import os
import re
import sys

EXAMPLES = int(os.environ.get("EXAMPLES", "4"))
TOKEN = re.compile(r"(\*{0,2}\w+)=(\S*)")


def parse(line):
    if not line.startswith("tablespy "):
        return None, {}
    words = line.split()
    kind = next((w for w in words[2:] if "=" not in w), None)
    return kind, dict(TOKEN.findall(line))


def main(args):
    if not args:
        print(__doc__)
        return 2
    tables = collections.OrderedDict()
    slots = collections.defaultdict(lambda: {"counts": {}, "logged": 0, "fn": "", "examples": [], "labels": set()})
    other = []
    for arg in args:
        label, _, path = arg.rpartition("=")
        label = label or os.path.basename(path)
        try:
            lines = open(path, errors="replace").read().splitlines()
        except OSError as e:
            other.append(f"{label}: cannot read {path}: {e}")
            continue
        for line in lines:
            kind, kv = parse(line)
            pid = kv.get("pid", "?")
            if kind == "table":
                t = tables.setdefault(kv.get("uuid"), {"name": kv.get("name"), "answers": collections.Counter(),
                                                        "labels": set(), "callers": set()})
                t["answers"][f"rc={kv.get('rc')} word0={kv.get('word0')} words={kv.get('words')} "
                             f"wrapped={kv.get('wrapped')}" + (f" functions={kv['functions']} null={kv.get('null')}"
                                                               f" data={kv.get('data')}" if "functions" in kv else "")] += 1
                t["labels"].add(label)
                t["callers"].add(re.sub(r"\+0x[0-9a-f]+$", "", kv.get("caller", "?")))
            elif kind == "call":
                s = slots[(kv.get("uuid"), int(kv.get("slot", -1)))]
                s["logged"] += 1
                s["fn"] = kv.get("fn", "")
                s["labels"].add(label)
                if len(s["examples"]) < EXAMPLES:
                    ptr = " ".join(f"{k}={v}" for k, v in kv.items() if k.startswith("*"))
                    s["examples"].append(f"[{label}] args={kv.get('args')} ret={kv.get('ret')}" + (f" {ptr}" if ptr else ""))
            elif kind == "count":
                s = slots[(kv.get("uuid"), int(kv.get("slot", -1)))]
                s["counts"][(label, pid)] = max(s["counts"].get((label, pid), 0), int(kv.get("calls", 0)))
            elif kind in ("init", "note") and ("error" in kv or kind == "init"):
                if kind == "init":
                    other.append(f"{label}: init real={kv.get('real')} second_object={kv.get('second_object')} "
                                 f"missing={kv.get('missing')}" + (f" error={kv['error']}" if "error" in kv else ""))
            elif "signal" in kv:
                other.append(f"{label}: pid {pid} signal {kv['signal']} addr={kv.get('addr')} pc={kv.get('pc')} "
                             f"in flight: {kv.get('inflight')}")
            elif "error" in kv or kind == "fatal:":
                other.append(f"{label}: {line}")
    print(f"== export tables asked ({len(tables)} UUIDs)")
    for uuid, t in tables.items():
        print(f"{uuid} {t['name']}")
        for ans, n in t["answers"].most_common():
            print(f"    answer x{n}: {ans}")
        print(f"    asked by: {', '.join(sorted(t['callers']))}")
        print(f"    programs: {', '.join(sorted(t['labels']))}")
        called = sorted((k[1], v) for k, v in slots.items() if k[0] == uuid)
        if not called:
            print("    slots called: none")
        for slot, s in called:
            total = sum(s["counts"].values()) or s["logged"]
            print(f"    slot {slot}: {total} call(s), fn={s['fn']}, programs: {', '.join(sorted(s['labels']))}")
            for e in s["examples"]:
                print(f"        {e}")
    # de-duplicated init lines, then the rest
    seen = []
    for o in other:
        if o not in seen:
            seen.append(o)
    print(f"== other events ({len(seen)})")
    for o in seen:
        print(f"  {o}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
