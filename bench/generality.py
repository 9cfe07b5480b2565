#!/usr/bin/env python3
"""Generality benchmark: rune::jit vs jax.jit on W12-W18 (programs of other
shapes than the W1-W10 the compiler was tuned on; defined in
shared/bench/generality/README.md), on W12take (W12 with its neighbours
taken by index) and on the flagship training step (train_mlp's), on this
machine, in one run; prints a markdown table.

  W12  jit(grad) of a 1000-step RK4 scan, ring of 64 pendulums     5/100    ms
       + first call (trace + compile + run) at T = 100 and T = 10,000
  W13  jit(grad) of a 120-op transcendental chain on f32[256]      200/5000 us  + first call
  W14  jit(vmap(jvp(grad))) of a 32-64-1 MLP, 256 examples         20/500   us  + first call
  W15  jit(value_and_grad + SGD) of a pre-LN transformer block     5/50     ms  + first call
       B 8, T 128, D 256; its floor: 5.6 GFLOP over the peak f32 FMA rate
       measured here (shared/bench/anchors/machine_limits.c's `fma`)
  FLAGSHIP  train_mlp's jitted Adam step, MLP 2-64-64-3, batch 128  100/1000 us
  W12take  W12 with x.take(&prev, 0) / x.take(&next, 0) for roll      5/100    ms
  W16  jit(grad) of a 500-step RK4 scan, 256 oscillators coupled   5/100    ms  + first call
       by a gather x[nbr] ([256, 4])
  W17  jit(value_and_grad + SGD) of a 2-layer GNN, 1024 nodes,     10/200   ms  + first call
       8192 edges (gathers, segment_sum)
  W18  jit(value_and_grad + SGD) of a LeNet-style CNN, batch 64    5/100    ms  + first call

Ours: crates/rune/examples/bench_generality.rs (built here). JAX's side:
shared/bench/generality/jax_generality.py (its own file, unchanged),
bench/generality_jax_extra.py (W12take, with jax_generality's timing) and
bench/flagship_jax.py.

Run from the repository root:
  python3 bench/generality.py --python /work/.venv-bench/bin/python

Steady-state workloads run in --rounds rounds (default 3), ours alternating
with JAX's, and each side's best min (and its median) is kept: this VM's
noise comes in phases longer than one run of a workload. First calls run in
fresh processes (ours with JITCACHE=0, JAX with its persistent cache off),
--processes per measurement (default 3) after one discarded process per
side, ours and JAX's alternating case by case. Ratios are ours / jax.jit from
the mins (< 1: ours is faster); the medians' ratio follows. Every jitted
result of ours is checked against eager (the example exits non-zero on a
mismatch; such a row is reported as failed and this script exits 1).
"""
import argparse
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import compare  # noqa: E402  (build_example, run_step, wait_idle, pair, machine)

SHARED = os.path.join(ROOT, "..", "shared", "bench")
JAX_SCRIPT = os.path.join(SHARED, "generality", "jax_generality.py")
FLAGSHIP_JAX = os.path.join(HERE, "flagship_jax.py")
EXTRA_JAX = os.path.join(HERE, "generality_jax_extra.py")
EXTRA_IDS = {"W12take"}  # JAX's side in EXTRA_JAX, not in the README's script
MACHINE_LIMITS = os.path.join(SHARED, "anchors", "machine_limits.c")

STEADY = ["W12", "W12take", "W13", "W14", "W15", "W16", "W17", "W18", "FLAGSHIP"]
# (id, T): the first calls the README asks for.
FIRST_CALLS = [("W12", 100), ("W12", 10000), ("W13", None), ("W14", None), ("W15", None),
               ("W16", None), ("W17", None), ("W18", None)]
W15_FLOP = 5.6e9  # the README's count per step: forward 1.9 GFLOP, backward twice that

LABELS = {
    "W12": "W12 jit(grad) RK4 scan, 64 pendulums, T = 1000",
    "W13": "W13 jit(grad) 120-op transcendental chain, f32[256]",
    "W14": "W14 jit(vmap(jvp(grad))) 32-64-1 MLP, 256 examples",
    "W15": "W15 jit(value_and_grad + SGD) transformer block B8 T128 D256",
    "FLAGSHIP": "flagship: train_mlp's jitted Adam step, MLP 2-64-64-3 tanh, batch 128",
    "W12take": "W12take: W12 with the ring's neighbours by `take` instead of `roll`",
    "W16": "W16 jit(grad) RK4 scan, 256 oscillators coupled by a gather, T = 500",
    "W17": "W17 jit(value_and_grad + SGD) 2-layer GNN, 1024 nodes, 8192 edges",
    "W18": "W18 jit(value_and_grad + SGD) LeNet-style CNN, batch 64",
}


def normalize(rows, framework):
    """JSON rows of either side as {id, framework, variant, unit, min, median, ...}."""
    out = []
    for r in rows:
        r = dict(r)
        r.setdefault("id", r.pop("workload", None))
        r["framework"] = framework
        out.append(r)
    return out


def best_of(rows):
    """One timing row per (id, framework, variant): the one with the smallest
    min; one check row per id: the worst; errors as they come."""
    best, checks, rest = {}, {}, []
    for r in rows:
        k = (r["id"], r["framework"], r.get("variant"))
        if "min" in r:
            if k not in best or r["min"] < best[k]["min"]:
                best[k] = r
        elif "max_rel_err" in r:
            if k not in checks or r["max_rel_err"] > checks[k]["max_rel_err"]:
                checks[k] = r
        else:
            rest.append(r)
    return list(best.values()) + list(checks.values()) + rest


def get(rows, wid, framework):
    return next((r for r in rows if r["id"] == wid and r["framework"] == framework and "min" in r), None)


# --------------------------------------------------------------------------- peak FMA rate
def build_peak_fma():
    d = tempfile.mkdtemp(prefix="machine_limits_")
    exe = os.path.join(d, "machine_limits")
    subprocess.run(["gcc", "-O3", "-march=native", "-fopenmp", MACHINE_LIMITS, "-o", exe], check=True)
    return exe


def peak_fma(exe, args):
    """machine_limits.c's `fma` on every core: GFLOP/s (12 16-lane FMA chains per thread)."""
    compare.wait_idle(args.max_wait)
    env = dict(os.environ, OMP_NUM_THREADS=str(os.cpu_count()))
    out = subprocess.run([exe, "fma"], env=env, capture_output=True, text=True, check=True).stdout
    print(out, end="", flush=True)
    m = re.search(r"peak_fma_f32 threads=(\d+)\s+best=([\d.]+) GFLOP/s", out)
    return float(m[2]) if m else None


# --------------------------------------------------------------------------- first calls
def child(cmd, env, tag):
    """Runs a first-call child; returns (seconds, None) or (None, why it failed)."""
    try:
        p = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return None, f"{shlex.join(cmd)} ran past 900 s"
    lines = [ln[len(tag):] for ln in p.stdout.splitlines() if ln.startswith(tag)]
    if p.returncode != 0 or not lines:
        return None, f"{shlex.join(cmd)} failed (exit {p.returncode}): {(p.stdout + p.stderr)[-1500:]}"
    return json.loads(lines[-1])["first_call_s"], None


def first_calls(exe, cases, args):
    """Ours and JAX's first calls of each case, in fresh processes,
    alternating; rows in ms."""
    ours_env = dict(os.environ, JITCACHE="0")
    jax_env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    jax_env["JAX_ENABLE_COMPILATION_CACHE"] = "false"

    def ours_cmd(wid, t):
        return [exe, "--first-call", f"{wid}:{t}" if t else wid]

    def jax_cmd(wid, t):
        script = EXTRA_JAX if wid in EXTRA_IDS else JAX_SCRIPT
        return [args.python, script, "--child", wid] + (["--T", str(t)] if t else [])

    # Discarded: warm the OS file cache for the executable, python and jax.
    child(ours_cmd("W13", None), ours_env, "FIRSTCALL ")
    child(jax_cmd("W13", None), jax_env, "")
    times = {(c, fw): [] for c in cases for fw in ("ours", "jax.jit")}
    errors = []
    for i in range(args.processes):
        compare.wait_idle(args.max_wait)
        for wid, t in cases:
            for fw, cmd, env, tag in (("ours", ours_cmd(wid, t), ours_env, "FIRSTCALL "),
                                      ("jax.jit", jax_cmd(wid, t), jax_env, "")):
                s, err = child(cmd, env, tag)
                print(f"   first call {wid}{'' if t is None else f' T={t}'} {fw} (process {i + 1}): "
                      + (f"{s * 1e3:.1f} ms" if err is None else err), flush=True)
                if err is None:
                    times[((wid, t), fw)].append(s * 1e3)
                elif fw == "ours":
                    errors.append(dict(id=wid, framework="ours", error=err))
    rows = []
    for ((wid, t), fw), v in times.items():
        if v:
            rows.append(dict(id=f"{wid} first" + (f" T={t}" if t else ""), framework=fw, unit="ms",
                             variant="first call (trace + compile + run), fresh process",
                             min=min(v), median=statistics.median(v), n=len(v)))
    return rows, errors


# --------------------------------------------------------------------------- report
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python", default="python3", help="the interpreter with jax and numpy")
    ap.add_argument("--only", default="", help="comma-separated ids among " + ",".join(STEADY))
    ap.add_argument("--rounds", type=int, default=3, help="steady-state rounds, ours alternating with JAX's")
    ap.add_argument("--processes", type=int, default=3, help="fresh processes per first-call measurement")
    ap.add_argument("--no-first-call", action="store_true")
    ap.add_argument("--tries", type=int, default=1)
    ap.add_argument("--max-wait", type=float, default=20.0, help="seconds to wait for an idle machine per step")
    args = ap.parse_args()
    only = [w for w in args.only.split(",") if w] or STEADY
    command = "python3 bench/generality.py " + shlex.join(sys.argv[1:])

    exe = compare.build_example("rune", "bench_generality")
    fma_exe = build_peak_fma()
    peaks = [peak_fma(fma_exe, args)]

    # Steady state: ours and JAX's alternating, best of each kept.
    jax_ids = [w for w in only if w != "FLAGSHIP" and w not in EXTRA_IDS]
    extra_ids = [w for w in only if w in EXTRA_IDS]
    ours, jxs, loads = [], [], []
    for _ in range(args.rounds):
        rows, _, s = compare.run_step("rune", [exe, "--only", ",".join(only)], dict(os.environ), args)
        ours = best_of(ours + normalize(rows, "ours"))
        loads.append(s["others_cpu"])
        if jax_ids:
            rows, _, s = compare.run_step("jax", [args.python, JAX_SCRIPT, "--only", ",".join(jax_ids),
                                                  "--no-compile"], dict(os.environ), args)
            jxs = best_of(jxs + normalize(rows, "jax.jit"))
            loads.append(s["others_cpu"])
        if extra_ids:
            rows, _, s = compare.run_step("jax extra", [args.python, EXTRA_JAX, "--only", ",".join(extra_ids),
                                                        "--no-compile"], dict(os.environ), args)
            jxs = best_of(jxs + normalize(rows, "jax.jit"))
            loads.append(s["others_cpu"])
        if "FLAGSHIP" in only:
            rows, _, s = compare.run_step("jax flagship", [args.python, FLAGSHIP_JAX], dict(os.environ), args)
            jxs = best_of(jxs + normalize(rows, "jax.jit"))
            loads.append(s["others_cpu"])
    cases = [c for c in FIRST_CALLS if c[0] in only]
    errors = [r for r in ours if "error" in r]
    if cases and not args.no_first_call:
        rows, errs = first_calls(exe, cases, args)
        ours += [r for r in rows if r["framework"] == "ours"]
        jxs += [r for r in rows if r["framework"] == "jax.jit"]
        errors += errs
    peaks.append(peak_fma(fma_exe, args))
    shutil.rmtree(os.path.dirname(fma_exe), ignore_errors=True)
    peak = max((p for p in peaks if p), default=None)
    jax_version = subprocess.run([args.python, "-c", "import jax; print(jax.__version__)"],
                                 capture_output=True, text=True).stdout.strip() or "?"

    lines = ["## generality: rune::jit vs jax.jit on W12-W18 and the flagship step\n",
             f"Generated by `{command}`; one run, this machine. Cells are **min / median**; "
             f"steady state: {args.rounds} rounds, ours alternating with JAX's, the best of each kept "
             "(warmup / repeats as the README prescribes: W12 5/100, W13 200/5000, W14 20/500, "
             "W15 5/50, W16 5/100, W17 10/200, W18 5/100, W12take as W12; flagship 100/1000); first calls: "
             f"{args.processes} fresh processes each (ours `JITCACHE=0`, JAX's compilation cache off), "
             "after one discarded process per side. Ratio: ours / jax.jit (< 1: ours faster).\n",
             "| workload | unit | ours (min / median) | jax.jit (min / median) | ours / jax.jit (min / median) |",
             "|---|---|---|---|---|"]
    for wid in only:
        o, j = get(ours, wid, "ours"), get(jxs, wid, "jax.jit")
        if o is None and j is None:
            continue
        unit = (o or j)["unit"]
        lines.append(f"| {LABELS[wid]} | {unit} | {compare.pair(o) if o else 'failed'} | {compare.pair(j)} "
                     f"| {compare.ratio(o, j, bold=True)} |")
        for c in (c for c in cases if c[0] == wid):
            fid = f"{wid} first" + (f" T={c[1]}" if c[1] else "")
            o, j = get(ours, fid, "ours"), get(jxs, fid, "jax.jit")
            if o or j:
                what = f"{wid} first call" + (f", T = {c[1]:,}" if c[1] else "") + \
                    " (trace + compile + run, fresh process)"
                lines.append(f"| {what} | ms | {compare.pair(o) if o else 'failed'} | {compare.pair(j)} "
                             f"| {compare.ratio(o, j, bold=True)} |")

    lines.append("")
    w15o, w15j = get(ours, "W15", "ours"), get(jxs, "W15", "jax.jit")
    if w15o or w15j:
        gf = lambda r: W15_FLOP / (r["min"] * 1e-3) / 1e9  # noqa: E731
        ach = "; ".join(f"{name} {r['min']:.2f} ms = {gf(r):.0f} GFLOP/s"
                        + (f" ({gf(r) / peak:.2f} of peak)" if peak else "")
                        for name, r in (("ours", w15o), ("jax.jit", w15j)) if r)
        if peak:
            lines.append(f"W15's floor: 5.6 GFLOP per step (README) at this machine's peak f32 FMA rate, "
                         f"{peak:.0f} GFLOP/s on {os.cpu_count()} cores (machine_limits.c `fma`, best of "
                         f"{len([p for p in peaks if p])} runs, before and after), is **{W15_FLOP / peak / 1e6:.1f} ms**; "
                         f"achieved: {ach}.")
        else:
            lines.append(f"W15 achieved (peak FMA rate not measured): {ach}.")
        lines.append("")
    lines.append("W12-W14 are latency-bound (their arrays fit in L1): their floor is the arithmetic alone "
                 "(the README states no number for it).")
    if any(w in only for w in ("W16", "W17", "W18")):
        lines.append("W16-W18 floors (README): W16 is latency-bound like W12 (256 elements, 4 gathers per stage); "
                     "W17 is about 0.05 GFLOP of products per step plus 8192x64 gathered and scattered values "
                     "per layer and direction; W18 is about 0.1 GFLOP per step (conv2 dominates).")

    checks = [r for r in ours if "max_rel_err" in r]
    if checks:
        lines.append("")
        lines.append("Checks (ours, jitted against eager, in every steady-state run; the worst): " + "; ".join(
            f"{r['id']} max rel. error {r['max_rel_err']:.1e} (tolerance {r['tolerance']:.0e})"
            for r in checks) + ".")
    if errors:
        lines.append("")
        lines.append("**Failures (ours):**")
        for r in errors:
            lines.append(f"- {r['id']}: {r['error'].strip().replace(chr(10), ' ')[:800]}")
    load = max(loads, default=0.0)
    lines.append("")
    lines.append(f"- Machine: {compare.machine()}")
    lines.append(f"- jax {jax_version}; ours threads: {next((r['threads'] for r in ours if 'threads' in r), '?')}; "
                 f"other processes' CPU use during the steady runs: up to {load:.0%}"
                 + (" (a loaded machine: ratios are noisy)" if load > 0.10 else ""))
    lines.append("\nRaw rows:\n\n```")
    lines += [json.dumps(r) for r in ours + jxs]
    lines.append("```")
    print("\n".join(lines))
    if errors:
        sys.exit(1)


if __name__ == "__main__":
    main()
