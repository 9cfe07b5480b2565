#!/usr/bin/env python3
"""Batches of small products: rune::jit(vmap(tanh(a @ w + 1))) against
jax.jit(jax.vmap(...)) over B pairs of M x M f32 matrices, one run, one
machine; prints a markdown table (min and median, ours / jax.jit).

Run from the repository root:
  /work/.venv-bench/bin/python bench/small_products.py
"""
import json
import os
import statistics
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def jax_rows():
    import jax
    import jax.numpy as jnp
    rows = {}
    for b, m in [(2048, 4), (1024, 8), (256, 16), (64, 32)]:
        k1, k2 = jax.random.split(jax.random.key(0))
        x = jax.random.normal(k1, (b, m, m), jnp.float32)
        w = jax.random.normal(k2, (b, m, m), jnp.float32)
        f = jax.jit(jax.vmap(lambda a, w: jnp.tanh(a @ w + 1.0)))
        for _ in range(5):
            f(x, w).block_until_ready()
        ts = []
        for _ in range(50):
            t0 = time.perf_counter()
            f(x, w).block_until_ready()
            ts.append(time.perf_counter() - t0)
        rows[f"SP{b}x{m}"] = (min(ts) * 1e6, statistics.median(ts) * 1e6)
    return rows


def main():
    subprocess.run(["cargo", "build", "--release", "-p", "rune", "--example",
                    "bench_small_products"], cwd=ROOT, check=True)
    out = subprocess.run([os.path.join(ROOT, "target/release/examples/bench_small_products")],
                         cwd=ROOT, check=True, capture_output=True, text=True).stdout
    ours = {r["id"]: r for r in map(json.loads, filter(lambda l: l.startswith("{"), out.splitlines()))}
    jax = jax_rows()
    print("| id | ours jit min/median (us) | eager min (us) | jax.jit min/median (us) | ours / jax.jit (min) |")
    print("|---|---|---|---|---|")
    for k, (jmin, jmed) in jax.items():
        o, e = ours[k], ours[k + "e"]
        print(f"| {k} | {o['min']:.1f} / {o['median']:.1f} | {e['min']:.1f} | {jmin:.1f} / {jmed:.1f} | {o['min'] / jmin:.2f}x |")


if __name__ == "__main__":
    main()
