#!/usr/bin/env python3
"""Compile time, end to end (HLO text to something that runs), of Tessera's tiers against
XLA:CPU, each in a fresh process, with run times beside them.

usage: python3 benches/compile_times.py [--rounds R] [--runs N] [--backends cranelift,llvm]
                                        FOLDER...
Each FOLDER holds module.hlo and args/ (a corpus case, or what benches/models/programs.py
writes); a folder of such folders is expanded. Every round compiles every module on XLA:CPU and
on each Tessera backend, alternately, each in its own process; a cell is the median over
rounds. Tessera's time is `compile_us` of `tessera run --time` (parse, verify, passes, lowering,
code generation, assembly) with the compile cache off; its "cached" column is the same module
compiled again in a fresh process with the cache holding it (read, check, link). XLA's is the
construction of xla_run.py's `Module` (parse, the StableHLO round trip jax makes, compile). The
run columns are the medians of N executions (`--time N` on both sides).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("TESSERA_SHARED", os.path.join(ROOT, "..", "shared"))
TESSERA = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "tessera")

XLA_TIMER = r"""
import json, os, sys, time
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, sys.argv[1])
import numpy as np
import xla_run
text = open(sys.argv[2]).read()
xla_run._backend()  # client start-up is not compilation
start = time.perf_counter()
m = xla_run.Module(text)
compile_us = (time.perf_counter() - start) * 1e6
print(json.dumps({"compile_us": compile_us}))
"""


def modules(folders):
    for folder in folders:
        if os.path.isfile(os.path.join(folder, "module.hlo")):
            yield folder
        else:
            for sub in sorted(os.listdir(folder)):
                path = os.path.join(folder, sub)
                if os.path.isfile(os.path.join(path, "module.hlo")):
                    yield path


def args_dir(folder):
    return os.path.join(folder, "args")


def tessera(folder, backend, runs, cache_dir=None):
    """compile_us, median_us, error, cache outcome; the compile cache in cache_dir, or off."""
    env = dict(os.environ)
    env.pop("TESSERA_CACHE", None)
    if cache_dir is None:
        env["TESSERA_CACHE"] = "off"
    else:
        env["TESSERA_CACHE_DIR"] = cache_dir
    out = subprocess.run(
        [TESSERA, "run", os.path.join(folder, "module.hlo"), "--args", args_dir(folder),
         "--backend", backend, "--time", str(runs)],
        capture_output=True, text=True, env=env)
    if out.returncode != 0:
        return None, None, out.stderr.strip().splitlines()[-1:] or ["failed"], None
    line = json.loads(out.stdout.strip().splitlines()[-1])
    return line["compile_us"], line["median_us"], None, line.get("cache")


def cached(folder, backend):
    """compile_us of a fresh process finding the module in the cache (filled by another)."""
    cache_dir = tempfile.mkdtemp(prefix="tessera-bench-cache-")
    try:
        tessera(folder, backend, 1, cache_dir)
        c, _, err, outcome = tessera(folder, backend, 1, cache_dir)
        if err is None and outcome != "hit":
            return None, [f"{backend}: the second compile was a cache {outcome}"]
        return c, err
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)


def xla(folder, runs):
    tools = os.path.join(SHARED, "tools")
    out = subprocess.run([sys.executable, "-c", XLA_TIMER, tools, os.path.join(folder, "module.hlo")],
                         capture_output=True, text=True)
    if out.returncode != 0:
        return None, None, out.stderr.strip().splitlines()[-1:] or ["failed"]
    compile_us = json.loads(out.stdout.strip().splitlines()[-1])["compile_us"]
    run = subprocess.run([sys.executable, os.path.join(tools, "xla_run.py"), os.path.join(folder, "module.hlo"),
                          "--args", args_dir(folder), "--time", str(runs)], capture_output=True, text=True)
    median = json.loads(run.stdout.strip().splitlines()[-1])["median_us"] if run.returncode == 0 else None
    return compile_us, median, None


def fmt_ms(us):
    return "-" if us is None else f"{us / 1000:.1f}"


def ratio(a, b):
    return "-" if a is None or b is None or b == 0 else f"{a / b:.1f}x"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folders", nargs="+")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--backends", default="cranelift,llvm")
    a = p.parse_args()
    if not os.access(TESSERA, os.X_OK):
        sys.exit(f"{TESSERA} is missing: cargo build --release --bin tessera")
    backends = a.backends.split(",")
    rows = []
    for folder in modules(a.folders):
        name = os.path.basename(folder.rstrip("/"))
        cells = {b: ([], []) for b in ["xla"] + backends}
        hits = {b: [] for b in backends}
        errors = []
        for r in range(a.rounds):
            print(f"  {name}: round {r + 1}/{a.rounds}", file=sys.stderr, flush=True)
            c, m, err = xla(folder, a.runs)
            errors += err or []
            if c is not None:
                cells["xla"][0].append(c)
            if m is not None:
                cells["xla"][1].append(m)
            for b in backends:
                c, m, err, _ = tessera(folder, b, a.runs)
                errors += err or []
                if c is not None:
                    cells[b][0].append(c)
                    cells[b][1].append(m)
                c, err = cached(folder, b)
                errors += err or []
                if c is not None:
                    hits[b].append(c)
        med = {k: (statistics.median(v[0]) if v[0] else None, statistics.median(v[1]) if v[1] else None)
               for k, v in cells.items()}
        med_hits = {b: statistics.median(v) if v else None for b, v in hits.items()}
        rows.append((name, med, med_hits, sorted(set(errors))))

    header = ["module", "XLA compile ms"]
    for b in backends:
        header += [f"{b} ms", f"XLA/{b}", f"{b} cached ms"]
    header += ["XLA run ms"] + [f"{b} run ms" for b in backends]
    table = [header]
    for name, med, med_hits, _ in rows:
        line = [name, fmt_ms(med["xla"][0])]
        for b in backends:
            line += [fmt_ms(med[b][0]), ratio(med["xla"][0], med[b][0]), fmt_ms(med_hits[b])]
        line += [fmt_ms(med["xla"][1])] + [fmt_ms(med[b][1]) for b in backends]
        table.append(line)
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for r in table:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    for name, _, _, errors in rows:
        for e in errors:
            print(f"{name}: {e}", file=sys.stderr)


if __name__ == "__main__":
    main()
