#!/usr/bin/env python3
"""Convolution (issue 12): rune's conv (eager and rune::jit) vs jax.jit of
lax.conv_general_dilated (and its jax.grad) on this machine, in one run;
prints a markdown table with min/median and ratios (ours / jax.jit).

Workload: conv 3x3, 64 -> 64 channels, batch 32, 32x32, f32, SAME.
  CV1  forward
  CV2  forward + backward: grad of sum(conv(x, w)) w.r.t. x and w
  PL1  relu(x + b) then a 3x3 stride-2 SAME max pool (overlapping, padded windows)
  PL2  grad of sum(avg_pool(x, 3x3, stride 2, SAME)^2) (JAX: reduce_window add / counts)
Each: 3 warmup calls, 20 timed calls; min and median.

Run from the repository root (builds the Rust bench first):
  /work/.venv-bench/bin/python bench/conv.py
"""
import json
import os
import statistics
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def jax_rows():
    import jax
    import jax.numpy as jnp
    from jax import lax

    key = jax.random.key(0)
    kx, kw = jax.random.split(key)
    x = jax.random.normal(kx, (32, 64, 32, 32), jnp.float32)
    w = jax.random.normal(kw, (64, 64, 3, 3), jnp.float32) / (64 * 9) ** 0.5

    def conv(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                        dimension_numbers=("NCHW", "OIHW", "NCHW"))

    b = jax.random.normal(kw, (1, 64, 1, 1), jnp.float32)
    dims, strides = (1, 1, 3, 3), (1, 1, 2, 2)

    def max_pool(x, b):
        return lax.reduce_window(jax.nn.relu(x + b), -jnp.inf, lax.max, dims, strides, "SAME")

    def avg_pool(x):
        s = lax.reduce_window(x, 0.0, lax.add, dims, strides, "SAME")
        n = lax.reduce_window(jnp.ones((1, 1) + x.shape[2:], x.dtype), 0.0, lax.add, dims, strides, "SAME")
        return s / n

    mp = jax.jit(max_pool)
    ag = jax.jit(jax.grad(lambda x: (avg_pool(x) ** 2).sum()))
    fwd = jax.jit(conv)
    grad = jax.jit(jax.grad(lambda x, w: conv(x, w).sum(), argnums=(0, 1)))
    rows = []
    for wid, variant, f in [("CV1", "jax.jit(lax.conv_general_dilated)", fwd),
                            ("CV2", "jax.jit(jax.grad(sum(conv)), argnums=(0, 1))", grad),
                            ("PL1", "jax.jit(reduce_window max of relu(x + b))",
                             lambda x, w: mp(x, b)),
                            ("PL2", "jax.jit(jax.grad(sum(avg_pool^2)))",
                             lambda x, w: ag(x))]:
        for _ in range(3):
            jax.block_until_ready(f(x, w))
        ts = []
        for _ in range(20):
            t0 = time.perf_counter()
            jax.block_until_ready(f(x, w))
            ts.append(time.perf_counter() - t0)
        rows.append(dict(id=wid, framework="jax.jit", variant=variant, unit="ms",
                         min=min(ts) * 1e3, median=statistics.median(ts) * 1e3))
    return rows, jax.__version__


def ours_rows():
    subprocess.run(["cargo", "build", "--release", "-p", "rune", "--example", "bench_conv"],
                   cwd=ROOT, check=True)
    out = subprocess.run([os.path.join(ROOT, "target/release/examples/bench_conv")],
                         cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


def main():
    ours = ours_rows()
    jax, version = jax_rows()
    print(f"jax {version}, {os.cpu_count()} cpus\n")
    print("| id | variant | min ms | median ms | ours/jax.jit (min) | ours/jax.jit (median) |")
    print("|---|---|---|---|---|---|")
    for wid in ["CV1", "CV2", "PL1", "PL2"]:
        ref = next(r for r in jax if r["id"] == wid)
        print(f"| {wid} | {ref['variant']} | {ref['min']:.1f} | {ref['median']:.1f} | | |")
        for r in ours:
            if r["id"] == wid:
                print(f"| {wid} | {r['variant']} | {r['min']:.1f} | {r['median']:.1f} "
                      f"| {r['min'] / ref['min']:.2f}x | {r['median'] / ref['median']:.2f}x |")


if __name__ == "__main__":
    main()
