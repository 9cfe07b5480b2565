#!/usr/bin/env python3
"""Side-by-side autodiff benchmark (issue 3): rune (eager) vs JAX on this
machine, in one run; writes the "Autodiff" section of BENCHMARKS.md.

Workloads (definitions as in the anchors' README, shared/bench/anchors):
  W4  value_and_grad + SGD step, MLP 784-512-512-10 relu, batch 128, f32   10/200   ms
      ours eager vs JAX op by op (no jit) and jax.jit
  W6  Hessian-vector product (jvp of grad) of sum(tanh(A x)^2), A 200x200  10/1000  ms
      ours eager vs JAX eager and jax.jit
  C1  chain of 100 small elementwise ops on [64] f32: forward vs grad       200/2000 us
      (the tape's overhead: grad time / forward time; JAX eager for context)
  M1  peak bytes of live storage during grad of a 32-layer 256-wide tanh MLP,
      batch 256, without / with remat around each layer (ours only)

Run from the repository root (builds the Rust bench first):
  python3 bench/autodiff.py --python /work/.venv-bench/bin/python
The JAX side needs numpy and jax in --python (see bench/compare.py for setup).
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import compare  # noqa: E402  (machine(), run_step(), fmt())

BEGIN, END = "<!-- autodiff -->", "<!-- /autodiff -->"


def bench(fn, warmup, repeats):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts), statistics.median(ts)


def emit(wid, framework, variant, unit, fn, warmup, repeats):
    mn, md = bench(fn, warmup, repeats)
    scale = 1e6 if unit == "us" else 1e3
    print(json.dumps(dict(id=wid, framework=framework, variant=variant, unit=unit,
                          min=mn * scale, median=md * scale)), flush=True)


def child_jax():
    import numpy as np
    import jax
    import jax.numpy as jnp
    print("INFO " + json.dumps(dict(jax=jax.__version__)), flush=True)

    # W4 (jax_bench.py's make_w4_step, with and without jit)
    rng = np.random.default_rng(0)
    sizes = [784, 512, 512, 10]
    params = [(jnp.asarray((rng.standard_normal((fi, fo), dtype=np.float32) * np.sqrt(2.0 / fi)).astype(np.float32)),
               jnp.zeros((fo,), jnp.float32)) for fi, fo in zip(sizes[:-1], sizes[1:])]
    x = jnp.asarray(rng.standard_normal((128, 784), dtype=np.float32))
    y = jnp.asarray(rng.integers(0, 10, size=(128,)).astype(np.int32))

    def loss_fn(params, x, y):
        h = x
        for w, b in params[:-1]:
            h = jax.nn.relu(h @ w + b)
        w, b = params[-1]
        logp = jax.nn.log_softmax(h @ w + b, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    def step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return loss, jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads)

    bur = jax.block_until_ready
    with jax.disable_jit():
        emit("W4", "jax eager", "value_and_grad + SGD, op by op (disable_jit)", "ms",
             lambda: bur(step(params, x, y)), 10, 200)
    jstep = jax.jit(step)
    emit("W4", "jax.jit", "jit(value_and_grad + SGD)", "ms", lambda: bur(jstep(params, x, y)), 10, 200)

    # W6 hvp
    A = jnp.asarray(rng.standard_normal((200, 200), dtype=np.float32) / np.sqrt(200))
    xv = jnp.asarray(rng.standard_normal(200, dtype=np.float32))
    v = jnp.asarray(rng.standard_normal(200, dtype=np.float32))

    def f6(A, x):
        return jnp.sum(jnp.tanh(A @ x) ** 2)

    def hvp(A, x, v):
        return jax.jvp(lambda x_: jax.grad(f6, argnums=1)(A, x_), (x,), (v,))[1]

    with jax.disable_jit():
        emit("W6", "jax eager", "hvp = jvp of grad (disable_jit)", "ms", lambda: bur(hvp(A, xv, v)), 10, 1000)
    hvpj = jax.jit(hvp)
    emit("W6", "jax.jit", "jit(hvp)", "ms", lambda: bur(hvpj(A, xv, v)), 10, 1000)

    # C1: the same 100-op chain, eager
    xc = jnp.asarray(rng.standard_normal(64, dtype=np.float32))

    def chain(h):
        for i in range(25):
            h = jnp.tanh(jnp.sin(h * 0.9 + 0.01 * i))
        return h

    with jax.disable_jit():
        emit("C1", "jax eager", "forward, 100 ops on [64] (disable_jit)", "us", lambda: bur(chain(xc)), 20, 200)
        g = jax.grad(lambda h: jnp.sum(chain(h)))
        emit("C1", "jax eager", "grad of the same (disable_jit)", "us", lambda: bur(g(xc)), 20, 200)


def build_ours():
    cmd = ["cargo", "build", "--release", "-p", "rune", "--example", "bench_autodiff"]
    print("== build: " + shlex.join(cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)
    tgt = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    return os.path.join(tgt, "release", "examples", "bench_autodiff")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python", default="python3")
    ap.add_argument("--out", default=os.path.join(ROOT, "BENCHMARKS.md"))
    ap.add_argument("--tries", type=int, default=3)
    ap.add_argument("--max-wait", type=float, default=120.0)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child_jax()
    command = "python3 bench/autodiff.py " + shlex.join(sys.argv[1:])
    exe = build_ours()
    ours, _, s_ours = compare.run_step("rune", [exe], dict(os.environ), args)
    jxs, jx_info, s_jx = compare.run_step("jax", [args.python, os.path.abspath(__file__), "--child"],
                                          dict(os.environ), args)

    def get(rows, wid, framework, variant_start=""):
        for r in rows:
            if r.get("id") == wid and r.get("framework") == framework and r.get("variant", "").startswith(variant_start):
                return r
        return None

    def cell(r):
        return "—" if r is None else f"{compare.fmt(r['min'])} / {compare.fmt(r['median'])}"

    lines = [BEGIN, "## Autodiff (issue 3): rune eager vs JAX\n",
             "Generated by `" + command + "`; one run, this machine, one framework after the other. "
             "Cells are **min / median** over individually timed calls (W4 10 warmup / 200 timed, "
             "W6 10/1000, C1 200/2000 ours and 20/200 JAX). JAX eager = the same functions under "
             "`jax.disable_jit()` (op by op).\n",
             "| workload | unit | ours (eager) | jax eager | jax.jit | ratio ours/jax.jit time (min / median) | target |",
             "|---|---|---|---|---|---|---|"]
    o4, e4, j4 = get(ours, "W4", "ours"), get(jxs, "W4", "jax eager"), get(jxs, "W4", "jax.jit")
    r4 = f"**{o4['min'] / j4['min']:.2f}×** / {o4['median'] / j4['median']:.2f}×" if o4 and j4 else "—"
    lines.append(f"| W4 MLP 784-512-512-10 value_and_grad + SGD, batch 128 | ms | {cell(o4)} | {cell(e4)} | {cell(j4)} | {r4} | ≤ 1.2× |")
    o6, e6, j6 = get(ours, "W6", "ours"), get(jxs, "W6", "jax eager"), get(jxs, "W6", "jax.jit")
    r6 = f"{o6['min'] / j6['min']:.2f}× / {o6['median'] / j6['median']:.2f}×" if o6 and j6 else "—"
    lines.append(f"| W6 hvp of sum(tanh(A x)²), A 200×200 | ms | {cell(o6)} | {cell(e6)} | {cell(j6)} | {r6} | (recorded) |")
    cf, cg = get(ours, "C1", "ours", "forward"), get(ours, "C1", "ours", "grad")
    jf, jg = get(jxs, "C1", "jax eager", "forward"), get(jxs, "C1", "jax eager", "grad")
    lines.append("")
    lines.append("| C1: 100 elementwise ops on [64] f32 | forward (us) | grad (us) | grad / forward (min / median) | target |")
    lines.append("|---|---|---|---|---|")
    if cf and cg:
        lines.append(f"| ours (eager) | {cell(cf)} | {cell(cg)} | **{cg['min'] / cf['min']:.2f}×** / {cg['median'] / cf['median']:.2f}× | ≤ 4× |")
    if jf and jg:
        lines.append(f"| jax eager (context) | {cell(jf)} | {cell(jg)} | {jg['min'] / jf['min']:.2f}× / {jg['median'] / jf['median']:.2f}× | |")
    m1 = next((r for r in ours if r.get("id") == "M1"), None)
    if m1:
        lines.append("")
        lines.append("| M1: peak live storage during grad, 32 layers × 256, batch 256, f32 | without remat | with remat around each layer | remat / plain | identical gradients | target |")
        lines.append("|---|---|---|---|---|---|")
        lines.append(f"| MiB above what was live before the call | {m1['plain']:.2f} | {m1['remat']:.2f} | **{m1['ratio']:.3f}** | {m1['identical_gradients']} | ≤ 0.5 |")
    lines.append("")
    lines.append(f"- Machine: {compare.machine()}")
    lines.append(f"- jax {jx_info.get('jax', '?')}; other processes' CPU use: rune {s_ours['others_cpu']:.0%}, jax {s_jx['others_cpu']:.0%}")
    lines.append("\nRaw rows:\n\n```")
    lines += [json.dumps(r) for r in ours + jxs]
    lines.append("```")
    lines.append(END)
    section = "\n".join(lines) + "\n"
    text = open(args.out).read() if os.path.exists(args.out) else ""
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + section + text[text.index(END) + len(END) + 1:]
    else:
        if "<!-- notes -->" not in text:
            text += "\n<!-- notes -->\n"
        text += "\n" + section
    with open(args.out, "w") as f:
        f.write(text)
    print(section)


if __name__ == "__main__":
    main()
