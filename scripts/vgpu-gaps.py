#!/usr/bin/env python3
"""vgpu-gaps.py: what vgpu's libcuda.so.1 did not serve, from its logs (VGPU_LOG=info).

  vgpu-gaps.py LABEL=PATH [LABEL=PATH ...]

PATH is a folder of per-program logs (run.sh --vgpu-log: <program>.log) or one log
file (a single program, named LABEL). Prints, each with the programs that met it:
  - driver calls answered "not supported" (generated stubs and hand-written refusals);
  - cuGetProcAddress requests that resolved nothing (name, version, flags, why);
  - every cuGetExportTable id asked for and the answer, unknown ids included;
  - export-table slots of unknown meaning that were called;
  - every other warning or error line (pid removed), so nothing is lost.
Exit status 0; the lists are the result.
"""
import collections
import os
import re
import sys

LINE = re.compile(r"^vgpu\[\d+\] (error|warn|info|debug): (.*)$")
UNSUPPORTED = re.compile(r"^(\S+(?: [^;]*?)?) is not supported by vgpu")
PROCADDR = re.compile(r"^cuGetProcAddress\(([^)]*)\): (.*)$")
TABLE = re.compile(r"^cuGetExportTable\(([^)]*)\): (.*)$")
SLOT = re.compile(r"^export table (\S+): slot (\d+) called")
QUIET = ("connected:",)  # ordinary info lines


def sources(args):
    for a in args:
        label, _, path = a.partition("=")
        if not path:
            label, path = os.path.basename(a), a
        if os.path.isdir(path):
            for f in sorted(os.listdir(path)):
                if f.endswith(".log"):
                    yield f"{label}:{f[:-4]}", os.path.join(path, f)
        elif os.path.isfile(path):
            yield label, path


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    groups = {k: collections.defaultdict(set) for k in ("unsupported", "procaddr", "tables", "slots", "other")}
    programs = 0
    for prog, path in sources(sys.argv[1:]):
        programs += 1
        with open(path, errors="replace") as f:
            for raw in f:
                m = LINE.match(raw.rstrip("\n"))
                if not m:
                    continue
                level, msg = m.groups()
                if level == "debug":
                    continue
                if u := UNSUPPORTED.match(msg):
                    groups["unsupported"][u.group(1)].add(prog)
                elif p := PROCADDR.match(msg):
                    groups["procaddr"][f"{p.group(1)}: {p.group(2)}"].add(prog)
                elif t := TABLE.match(msg):
                    groups["tables"][f"{t.group(1)}: {t.group(2)}"].add(prog)
                elif s := SLOT.match(msg):
                    groups["slots"][f"{s.group(1)} slot {s.group(2)}"].add(prog)
                elif not msg.startswith(QUIET):
                    groups["other"][f"{level}: {msg}"].add(prog)

    def show(title, key, limit=None):
        g = groups[key]
        print(f"{title}: {len(g) if g else 'none'}")
        items = sorted(g.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        for i, (what, progs) in enumerate(items):
            if limit and i == limit:
                print(f"  ... and {len(items) - limit} more")
                break
            names = sorted(progs)
            shown = " ".join(names[:4]) + (f" (+{len(names) - 4})" if len(names) > 4 else "")
            print(f"  {what}\n      {len(names)} program(s): {shown}")

    print(f"== vgpu gaps: VGPU_LOG=info logs of {programs} program(s)")
    show("unsupported calls (answered CUDA_ERROR_NOT_SUPPORTED or NVML's NOT_SUPPORTED)", "unsupported")
    show("cuGetProcAddress requests that resolved nothing", "procaddr")
    show("export tables asked for (NAME UUID: answer)", "tables")
    show("export-table slots of unknown meaning called", "slots")
    show("other warnings and errors", "other", limit=40)
    return 0


if __name__ == "__main__":
    sys.exit(main())
