#!/usr/bin/env python3
"""Pooling and sorting (issue 12): nx eager vs jax.jit and numpy, one run.

Workloads (min and median of many calls after warmup):
  P1  max_pool 2x2 stride 2, f32 [32, 64, 32, 32], forward
      vs jax.jit(lax.reduce_window(x, -inf, lax.max, (1,1,2,2), (1,1,2,2), 'VALID'))
  P2  the same forward + backward (cotangent of ones)
      vs jax.jit(jax.value_and_grad(lambda x: reduce_window(x).sum()))
  P3  avg_pool 2x2 stride 2 forward (context) vs jax.jit(reduce_window add / 4)
  S1  sort 10^6 f32 (standard normal)    vs np.sort, jax.jit(jnp.sort)
  S2  argsort (stable)                   vs np.argsort(kind='stable'), jax.jit(jnp.argsort)
  S3  top_k(10)                          vs np.argpartition + sort of the 10, jax.jit(lax.top_k)

Prints a markdown table; ratios are our time / theirs (below 1: we are faster).

  python3 bench/pool_sort.py --python /work/.venv-bench/bin/python
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def timeit(fn, warmup, repeats):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts) * 1e3, statistics.median(ts) * 1e3


def child():
    import numpy as np
    import jax
    import jax.numpy as jnp
    from jax import lax

    rows = []

    def emit(wid, fw, variant, mm):
        rows.append(dict(id=wid, framework=fw, variant=variant, unit="ms", min=mm[0], median=mm[1]))
        print(json.dumps(rows[-1]), flush=True)

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((32, 64, 32, 32), dtype=np.float32))
    w, s = (1, 1, 2, 2), (1, 1, 2, 2)
    mp = jax.jit(lambda x: lax.reduce_window(x, -jnp.inf, lax.max, w, s, "VALID"))
    emit("P1", "jax.jit", "jit(reduce_window max)", timeit(lambda: mp(x).block_until_ready(), 5, 50))
    vg = jax.jit(jax.value_and_grad(lambda x: lax.reduce_window(x, -jnp.inf, lax.max, w, s, "VALID").sum()))

    def run_vg():
        v, g = vg(x)
        g.block_until_ready()

    emit("P2", "jax.jit", "jit(value_and_grad(sum(reduce_window max)))", timeit(run_vg, 3, 30))
    ap = jax.jit(lambda x: lax.reduce_window(x, 0.0, lax.add, w, s, "VALID") / 4.0)
    emit("P3", "jax.jit", "jit(reduce_window add / 4)", timeit(lambda: ap(x).block_until_ready(), 5, 50))

    v = rng.standard_normal(1_000_000, dtype=np.float32)
    jv = jnp.asarray(v)
    emit("S1", "numpy", "np.sort", timeit(lambda: np.sort(v), 3, 30))
    js = jax.jit(jnp.sort)
    emit("S1", "jax.jit", "jit(jnp.sort)", timeit(lambda: js(jv).block_until_ready(), 3, 30))
    emit("S2", "numpy", "np.argsort(kind='stable')", timeit(lambda: np.argsort(v, kind="stable"), 3, 30))
    ja = jax.jit(jnp.argsort)
    emit("S2", "jax.jit", "jit(jnp.argsort)", timeit(lambda: ja(jv).block_until_ready(), 3, 30))

    def np_topk():
        i = np.argpartition(-v, 10)[:10]
        return i[np.argsort(-v[i], kind="stable")]

    emit("S3", "numpy", "np.argpartition + sort", timeit(np_topk, 3, 30))
    jt = jax.jit(lambda x: lax.top_k(x, 10))
    emit("S3", "jax.jit", "jit(lax.top_k)", timeit(lambda: jt(jv)[0].block_until_ready(), 3, 30))
    print("INFO " + json.dumps(dict(jax=jax.__version__, numpy=np.__version__)), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python", default="python3")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child()
    subprocess.run(["cargo", "build", "--release", "-p", "nx", "--example", "bench_pool_sort"],
                   cwd=ROOT, check=True)
    tgt = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    exe = os.path.join(tgt, "release", "examples", "bench_pool_sort")
    ours = [json.loads(l) for l in subprocess.run([exe], capture_output=True, text=True, check=True)
            .stdout.splitlines() if l.startswith("{")]
    out = subprocess.run([args.python, os.path.abspath(__file__), "--child"], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    theirs = [json.loads(l) for l in out if l.startswith("{")]
    info = next((json.loads(l[5:]) for l in out if l.startswith("INFO ")), {})
    names = {
        "P1": "P1 max_pool 2x2/2 f32 [32,64,32,32] fwd",
        "P2": "P2 max_pool fwd+bwd",
        "P3": "P3 avg_pool 2x2/2 fwd (context)",
        "S1": "S1 sort 10^6 f32",
        "S2": "S2 argsort 10^6 f32 (stable)",
        "S3": "S3 top_k(10) of 10^6 f32",
    }
    print("| workload | ours ms (min / median) | reference | theirs ms (min / median) | ours / theirs (min / median) |")
    print("|---|---|---|---|---|")
    for wid, name in names.items():
        o = next((r for r in ours if r["id"] == wid), None)
        for t in (r for r in theirs if r["id"] == wid):
            cell = lambda r: f"{r['min']:.2f} / {r['median']:.2f}"
            ratio = f"{o['min'] / t['min']:.2f}× / {o['median'] / t['median']:.2f}×" if o else "—"
            print(f"| {name} | {cell(o) if o else '—'} | {t['variant']} | {cell(t)} | {ratio} |")
    print(f"\njax {info.get('jax', '?')}, numpy {info.get('numpy', '?')}; ours {ours[0]['threads'] if ours else '?'} threads")
    print("\nRaw rows:\n")
    for r in ours + theirs:
        print(json.dumps(r))


if __name__ == "__main__":
    sys.exit(main())
