#!/usr/bin/env python3
"""Side-by-side benchmark: nx (our eager Rust kernels) vs numpy vs JAX, on this
machine, in one go; writes BENCHMARKS.md.

Workloads (issue 2, "Measure"; definitions and timing rules as in the
project's anchors, `shared/bench/anchors/README.md`):
  W1  exp(x) * y + 1 on 4M f32, x, y ~ U[0,1)       warmup/repeats 5/100    ms
  W2  sum of 4M f32 ~ U[0,1)                          5/200                 ms
  W3  1024x1024 f32 matmul, a, b ~ N(0,1)             5/50                  ms, GFLOP/s = 2n^3/t
  S1  add of two 100x100 f32                          1000/10000            us
  S2  sum of 100x100 f32                              1000/10000            us
Every timed call is bracketed individually (perf_counter / Instant) after the
untimed warmup calls; min and median are reported. JAX calls end with
block_until_ready().

Setup (once):
  python3 -m venv /work/.venv-bench
  /work/.venv-bench/bin/pip install jax numpy threadpoolctl     # CPU jaxlib
Run (from the repository root; builds the Rust bench in release mode first):
  python3 bench/compare.py --python /work/.venv-bench/bin/python
Options: --only W1,S1 (subset), --out BENCHMARKS.md, --tries N (re-run a step
when other processes used more than 10% of the CPUs during it, keep the
cleanest), --max-wait S (wait up to S seconds for an idle machine before each
step), --no-build (use the existing binary).

This file runs with any python3 (stdlib only); it re-invokes itself with
--python as `--child numpy` / `--child jax` for the framework measurements.
numpy runs with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (OpenBLAS picks
its kernel itself; the kernel threadpoolctl reports is written to the report).
"""
import argparse
import datetime
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import time

N4M = 4 * 1024 * 1024
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# (id, warmup, repeats, unit) -- the anchors' numbers for W1-W3.
WORKLOADS = {
    "W1": (5, 100, "ms"),
    "W2": (5, 200, "ms"),
    "W3": (5, 50, "ms"),
    "S1": (1000, 10000, "us"),
    "S2": (1000, 10000, "us"),
}


# ----------------------------------------------------------------------------
# child side: runs under --python (needs numpy / jax / threadpoolctl)
# ----------------------------------------------------------------------------
def bench(fn, warmup, repeats):
    for _ in range(warmup):
        fn()
    pc = time.perf_counter
    ts = [0.0] * repeats
    for i in range(repeats):
        t0 = pc()
        fn()
        ts[i] = pc() - t0
    return min(ts), statistics.median(ts)


def emit(framework, wid, variant, fn, only, flops=None):
    if only and wid not in only:
        return
    warmup, repeats, unit = WORKLOADS[wid]
    flt0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    mn, md = bench(fn, warmup, repeats)
    flt = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - flt0) / (warmup + repeats)
    scale = 1e6 if unit == "us" else 1e3
    rec = dict(id=wid, framework=framework, variant=variant, unit=unit, min=mn * scale,
               median=md * scale, warmup=warmup, repeats=repeats, minflt_per_call=round(flt, 1))
    print(json.dumps(rec), flush=True)
    if flops:
        rec = dict(rec, unit="GFLOP/s", min=flops / mn / 1e9, median=flops / md / 1e9)
        print(json.dumps(rec), flush=True)


def blas_info():
    try:
        from threadpoolctl import threadpool_info
        return [{k: d.get(k) for k in ("internal_api", "version", "architecture", "num_threads")}
                for d in threadpool_info()]
    except Exception as e:  # pragma: no cover
        return f"threadpoolctl unavailable: {e!r}"


def child_numpy(only):
    import numpy as np
    info = dict(numpy=np.__version__, python=sys.version.split()[0], blas=blas_info(),
                OPENBLAS_CORETYPE=os.environ.get("OPENBLAS_CORETYPE"),
                OPENBLAS_L2_SIZE=os.environ.get("OPENBLAS_L2_SIZE"))
    print("INFO " + json.dumps(info), flush=True)
    rng = np.random.default_rng(0)
    x = rng.random(N4M, dtype=np.float32)
    y = rng.random(N4M, dtype=np.float32)
    emit("numpy", "W1", "np.exp(x)*y+1", lambda: np.exp(x) * y + 1, only)
    x = rng.random(N4M, dtype=np.float32)
    emit("numpy", "W2", "x.sum()", lambda: x.sum(), only)
    n = 1024
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    emit("numpy", "W3", "a@b", lambda: a @ b, only, flops=2.0 * n ** 3)
    a = rng.random((100, 100), dtype=np.float32)
    b = rng.random((100, 100), dtype=np.float32)
    emit("numpy", "S1", "a+b", lambda: a + b, only)
    emit("numpy", "S2", "x.sum()", lambda: a.sum(), only)


def child_jax(only):
    import numpy as np
    import jax
    import jax.numpy as jnp
    import jaxlib
    info = dict(jax=jax.__version__, jaxlib=jaxlib.__version__, devices=str(jax.devices()),
                XLA_FLAGS=os.environ.get("XLA_FLAGS"))
    print("INFO " + json.dumps(info), flush=True)
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.random(N4M, dtype=np.float32))
    y = jnp.asarray(rng.random(N4M, dtype=np.float32))
    emit("jax eager", "W1", "jnp.exp(x)*y+1", lambda: (jnp.exp(x) * y + 1).block_until_ready(), only)
    f = jax.jit(lambda x, y: jnp.exp(x) * y + 1)
    emit("jax.jit", "W1", "jit(exp(x)*y+1)", lambda: f(x, y).block_until_ready(), only)
    x = jnp.asarray(rng.random(N4M, dtype=np.float32))
    emit("jax eager", "W2", "jnp.sum(x)", lambda: jnp.sum(x).block_until_ready(), only)
    f = jax.jit(jnp.sum)
    emit("jax.jit", "W2", "jit(jnp.sum)", lambda: f(x).block_until_ready(), only)
    n = 1024
    a = jnp.asarray(rng.standard_normal((n, n), dtype=np.float32))
    b = jnp.asarray(rng.standard_normal((n, n), dtype=np.float32))
    emit("jax eager", "W3", "a@b", lambda: (a @ b).block_until_ready(), only, flops=2.0 * n ** 3)
    f = jax.jit(jnp.matmul)
    emit("jax.jit", "W3", "jit(jnp.matmul)", lambda: f(a, b).block_until_ready(), only, flops=2.0 * n ** 3)
    a = jnp.asarray(rng.random((100, 100), dtype=np.float32))
    b = jnp.asarray(rng.random((100, 100), dtype=np.float32))
    emit("jax eager", "S1", "a+b", lambda: (a + b).block_until_ready(), only)
    f = jax.jit(jnp.add)
    emit("jax.jit", "S1", "jit(jnp.add)", lambda: f(a, b).block_until_ready(), only)
    emit("jax eager", "S2", "jnp.sum(x)", lambda: jnp.sum(a).block_until_ready(), only)
    f = jax.jit(jnp.sum)
    emit("jax.jit", "S2", "jit(jnp.sum)", lambda: f(a).block_until_ready(), only)


# ----------------------------------------------------------------------------
# parent side: stdlib only
# ----------------------------------------------------------------------------
HZ = os.sysconf("SC_CLK_TCK")
NCPU = os.cpu_count()


def busy_jiffies():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v[:8]) - (v[3] + v[4])


def others_load(seconds=1.5):
    b0 = busy_jiffies()
    time.sleep(seconds)
    return (busy_jiffies() - b0) / HZ / (seconds * NCPU)


def wait_idle(max_wait, thresh=0.10):
    t0 = time.time()
    load = others_load()
    while load > thresh and time.time() - t0 < max_wait:
        print(f"  [wait] others use {load:.0%} of the {NCPU} CPUs; waiting", flush=True)
        time.sleep(5)
        load = others_load()
    return load


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_step(name, cmd, env, args):
    """Run cmd (JSON lines on stdout); re-run while others disturbed it, keep the cleanest."""
    attempts = []
    for t in range(args.tries):
        before = wait_idle(args.max_wait)
        print(f"== {name} (try {t + 1}; others' load before {before:.0%}): {shlex.join(cmd)}", flush=True)
        b0, c0, t0 = busy_jiffies(), children_cpu(), time.perf_counter()
        p = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        other = max(0.0, (busy_jiffies() - b0) / HZ - (children_cpu() - c0)) / (wall * NCPU)
        if p.returncode != 0:
            sys.exit(f"{name} failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
        print(p.stdout, end="")
        print(f"   {name}: {wall:.1f} s, other processes used {other:.0%} of the CPUs meanwhile", flush=True)
        attempts.append((other, p.stdout))
        if other <= 0.10:
            break
    other, out = min(attempts, key=lambda a: a[0])
    rows, info = [], {}
    for ln in out.splitlines():
        if ln.startswith("INFO "):
            info.update(json.loads(ln[5:]))
        elif ln.startswith("{"):
            rows.append(json.loads(ln))
    return rows, info, dict(step=name, others_cpu=other, tries=len(attempts),
                            all_tries=[round(a[0], 3) for a in attempts])


def build_ours(args):
    cmd = ["cargo", "build", "--release", "-p", "nx", "--example", "bench_eager",
           "--message-format=json-render-diagnostics"]
    print("== build: " + shlex.join(cmd), flush=True)
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(p.stderr[-3000:])
    exe = None
    for ln in p.stdout.splitlines():
        try:
            m = json.loads(ln)
        except ValueError:
            continue
        if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "bench_eager":
            exe = m.get("executable") or exe
    if not exe:
        sys.exit("could not find the bench_eager executable in cargo's output")
    return exe


def find_ours():
    tgt = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    return os.path.join(tgt, "release", "examples", "bench_eager")


def sh(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, shell=True).stdout.strip()
    except Exception:
        return ""


def machine():
    lscpu = {}
    for ln in sh("lscpu").splitlines():
        k, _, v = ln.partition(":")
        lscpu[k.strip()] = v.strip()
    flags = lscpu.get("Flags", "").split()
    simd = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16") if f in flags]
    return (f"{lscpu.get('Model name', '?')} (family {lscpu.get('CPU family', '?')} model "
            f"{lscpu.get('Model', '?')}), {NCPU} vCPUs, {lscpu.get('Thread(s) per core', '?')} thread/core, "
            f"L1d {lscpu.get('L1d cache', '?')}, L2 {lscpu.get('L2 cache', '?')}, L3 {lscpu.get('L3 cache', '?')}, "
            f"hypervisor {lscpu.get('Hypervisor vendor', '?')}; {', '.join(simd)}; "
            f"{platform.platform()}")


def fmt(v):
    if v is None:
        return "—"
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def pair(r):
    return "—" if r is None else f"{fmt(r['min'])} / {fmt(r['median'])}"


def ratio(num, den, bold=False):
    """num / den of two rows, "min / median", the min in bold if asked."""
    if not (num and den):
        return "—"
    a = f"{num['min'] / den['min']:.2f}×"
    return (f"**{a}**" if bold else a) + f" / {num['median'] / den['median']:.2f}×"


def build_example(package, example):
    """Builds a Rust example in release mode; returns the path of its binary."""
    cmd = ["cargo", "build", "--release", "-p", package, "--example", example]
    print("== build: " + shlex.join(cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)
    tgt = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    return os.path.join(tgt, "release", "examples", example)


def ours_and_theirs(script, package, example, python):
    """Builds and runs our `example` and `script --child` under `python`;
    returns (our rows, their rows, their INFO dict): the JSON lines each
    prints, and the child's `INFO {...}` line."""
    exe = build_example(package, example)
    ours = [json.loads(l) for l in subprocess.run([exe], capture_output=True, text=True, check=True)
            .stdout.splitlines() if l.startswith("{")]
    out = subprocess.run([python, os.path.abspath(script), "--child"], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    theirs = [json.loads(l) for l in out if l.startswith("{")]
    info = next((json.loads(l[5:]) for l in out if l.startswith("INFO ")), {})
    return ours, theirs, info


def print_comparison(names, ours, theirs, throughput, footer):
    """Prints the markdown table of `ours` against each of `theirs` per
    workload id in `names` (id -> row label), then `footer` and the raw
    rows. `throughput`: the ratio column is theirs / ours (our throughput
    relative to theirs), else ours / theirs (time)."""
    if throughput:
        print("| workload | unit | ours (min / median) | reference | theirs (min / median) "
              "| theirs / ours: throughput ratio (min / median) |")
    else:
        print("| workload | unit | ours (min / median) | reference | theirs (min / median) "
              "| ours / theirs (min / median) |")
    print("|---|---|---|---|---|---|")
    cell = lambda r: f"{r['min']:.2f} / {r['median']:.2f}"
    for wid, name in names.items():
        o = next((r for r in ours if r["id"] == wid), None)
        for t in (r for r in theirs if r["id"] == wid):
            num, den = (t, o) if throughput else (o, t)
            r = f"{num['min'] / den['min']:.2f}× / {num['median'] / den['median']:.2f}×" if o else "—"
            print(f"| {name} | {t['unit']} | {cell(o) if o else '—'} | {t['variant']} | {cell(t)} | {r} |")
    print(f"\n{footer}; ours {ours[0]['threads'] if ours else '?'} threads")
    print("\nRaw rows:\n")
    for r in ours + theirs:
        print(json.dumps(r))


def write_section(path, begin, end, section):
    """Replaces the text between the `begin` and `end` markers of `path` with
    `section` (which carries both markers), or appends it after the notes
    marker that `main` keeps when it regenerates the file."""
    text = open(path).read() if os.path.exists(path) else ""
    if begin in text and end in text:
        text = text[:text.index(begin)] + section + text[text.index(end) + len(end) + 1:]
    else:
        if "<!-- notes -->" not in text:
            text += "\n<!-- notes -->\n"
        text += "\n" + section
    with open(path, "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python", default="python3", help="interpreter with numpy, jax, threadpoolctl")
    ap.add_argument("--out", default=os.path.join(ROOT, "BENCHMARKS.md"))
    ap.add_argument("--only", default=None, help="comma list of W1,W2,W3,S1,S2")
    ap.add_argument("--tries", type=int, default=3)
    ap.add_argument("--max-wait", type=float, default=120.0)
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    if args.child:
        return {"numpy": child_numpy, "jax": child_jax}[args.child](only)

    argv = [a for a in sys.argv[1:]]
    command = "python3 bench/compare.py " + shlex.join(argv) if argv else "python3 bench/compare.py"
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    exe = find_ours() if args.no_build else build_ours(args)
    sub = ["--only", args.only] if args.only else []
    env = dict(os.environ)
    ours, _, s_ours = run_step("nx", [exe] + sub, env, args)
    np_env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    me = os.path.abspath(__file__)
    nps, np_info, s_np = run_step("numpy", [args.python, me, "--child", "numpy"] + sub, np_env, args)
    jxs, jx_info, s_jx = run_step("jax", [args.python, me, "--child", "jax"] + sub, env, args)

    def get(rows, wid, unit, framework=None):
        for r in rows:
            if r.get("id") == wid and r.get("unit") == unit and "error" not in r \
                    and (framework is None or r.get("framework") == framework):
                return r
        return None

    def err(wid):
        for r in ours:
            if r.get("id") == wid and "error" in r:
                return r["error"]
        return None

    lines = []
    ids = [w for w in WORKLOADS if not only or w in only]
    lines.append("| workload | unit | ours (nx eager) | numpy | jax eager | jax.jit | ratio (from min / from median) | target | verdict |")
    lines.append("|---|---|---|---|---|---|---|---|---|")
    targets = {
        "W1": ("ms", "numpy", "throughput vs numpy", "≥ 1.5×", lambda o, r: r / o, lambda x: x >= 1.5),
        "W2": ("ms", "jax.jit", "throughput vs jax.jit", "≥ 1.0×", lambda o, r: r / o, lambda x: x >= 1.0),
        "W3": ("GFLOP/s", "numpy", "GFLOP/s vs numpy", "≥ 0.95×", lambda o, r: o / r, lambda x: x >= 0.95),
        "S1": ("us", "numpy", "time vs numpy", "≤ 1.0×", lambda o, r: o / r, lambda x: x <= 1.0),
        "S2": ("us", "numpy", "time vs numpy", "≤ 1.0×", lambda o, r: o / r, lambda x: x <= 1.0),
    }
    verdicts = []
    names = {"W1": "W1 exp(x)*y+1, 4M f32", "W2": "W2 sum, 4M f32", "W3": "W3 matmul 1024² f32",
             "S1": "S1 add 100×100 f32", "S2": "S2 sum 100×100 f32"}
    for w in ids:
        unit, ref_name, what, tgt, ratio, ok = targets[w]
        units = [WORKLOADS[w][2]] + (["GFLOP/s"] if w == "W3" else [])
        for u in units:
            o = get(ours, w, u)
            npr = get(nps, w, u)
            je = get(jxs, w, u, "jax eager")
            jj = get(jxs, w, u, "jax.jit")
            ref = npr if ref_name == "numpy" else jj
            cell_r, cell_t, cell_v = "", "", ""
            if u == unit:
                cell_t = f"{what} {tgt}"
                if o and ref:
                    rmin = ratio(o["min"], ref["min"])
                    rmed = ratio(o["median"], ref["median"])
                    cell_r = f"{what}: **{rmin:.2f}×** / {rmed:.2f}×"
                    v = "met" if ok(rmin) else "missed"
                    cell_v = f"**{v}**" + ("" if ok(rmed) == ok(rmin) else " (median: " + ("met" if ok(rmed) else "missed") + ")")
                    verdicts.append((w, v, rmin, rmed))
                else:
                    e = err(w)
                    cell_r = "—"
                    cell_v = "not measured" + (f" (ours: `{e}`)" if e else "")
                    verdicts.append((w, "not measured", None, None))
            ours_cell = pair(o) if o else ("not implemented yet" if err(w) else "—")
            lines.append(f"| {names[w]} | {u} | {ours_cell} | {pair(npr)} | {pair(je)} | {pair(jj)} | "
                         f"{cell_r} | {cell_t} | {cell_v} |")

    threads = next((r.get("threads") for r in ours if "threads" in r), "?")
    rustc = sh("rustc --version")
    extra = [r for r in ours if r.get("id") not in WORKLOADS and "min" in r]
    out = []
    out.append("# Benchmarks: nx eager kernels vs numpy and JAX\n")
    out.append(f"Generated by `bench/compare.py` on {started}; every number below was measured in that one run, "
               "on this machine, one framework after the other. Each cell is **min / median** over the "
               "individually timed repeats (for GFLOP/s: from the min time / from the median time). "
               "Timing rules and workload definitions: the anchors' `README.md` "
               "(warmup untimed calls, then individually timed repeats; W1 5/100, W2 5/200, W3 5/50, "
               "S1/S2 1000/10000). Ratios are computed so that > 1 means ours is faster for throughput "
               "targets, and < 1 means ours is faster for the time targets (S1, S2); the verdict uses the "
               "ratio from the min times (the medians are more sensitive to other processes on this shared "
               "machine) and notes where the median disagrees.\n")
    out.append("## Results\n")
    out += lines
    out.append("")
    out.append("## Machine, versions, command\n")
    out.append(f"- Machine: {machine()}")
    out.append(f"- Ours: nx `bench_eager` (release, `-C target-cpu=native` from `.cargo/config.toml`), "
               f"threads: {threads}; {rustc}")
    out.append(f"- numpy {np_info.get('numpy', '?')}, python {np_info.get('python', '?')}; "
               f"OPENBLAS_CORETYPE={np_info.get('OPENBLAS_CORETYPE')}, OPENBLAS_L2_SIZE={np_info.get('OPENBLAS_L2_SIZE')} "
               f"(both unset for the numpy run); BLAS per threadpoolctl: `{json.dumps(np_info.get('blas'))}`")
    out.append(f"- jax {jx_info.get('jax', '?')}, jaxlib {jx_info.get('jaxlib', '?')}, devices {jx_info.get('devices', '?')}, "
               f"XLA_FLAGS={jx_info.get('XLA_FLAGS')}")
    out.append(f"- Command (from the repository root): `{command}`")
    out.append(f"- Other processes' CPU use during each step (a step is re-run up to --tries={args.tries} "
               "times while others used > 10%, keeping the cleanest try): "
               + ", ".join(f"{s['step']} {s['others_cpu']:.0%} (tries: {s['all_tries']})" for s in (s_ours, s_np, s_jx)))
    if extra:
        out.append("\n## Extra rows from bench_eager\n")
        out.append("| id | variant | unit | min | median |")
        out.append("|---|---|---|---|---|")
        for r in extra:
            out.append(f"| {r['id']} | {r['variant']} | {r['unit']} | {fmt(r['min'])} | {fmt(r['median'])} |")
    out.append("\n## Raw rows\n")
    out.append("```")
    for r in ours + nps + jxs:
        out.append(json.dumps(r))
    out.append("```")
    text = "\n".join(out) + "\n"
    notes_marker = "<!-- notes -->"
    if os.path.exists(args.out):
        old = open(args.out).read()
        if notes_marker in old:  # keep hand-written notes below the marker
            text += "\n" + old[old.index(notes_marker):]
    with open(args.out, "w") as f:
        f.write(text)
    print(f"wrote {args.out}")
    for w, v, rmin, rmed in verdicts:
        print(f"  {w}: {v}" + (f" ({rmin:.2f}x from min, {rmed:.2f}x from median)" if rmin is not None else ""))


if __name__ == "__main__":
    main()
