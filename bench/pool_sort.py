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
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare  # noqa: E402  (bench(): the shared timing; ours_and_theirs(), print_comparison())


def timeit(fn, warmup, repeats):
    """compare.bench in milliseconds."""
    lo, med = compare.bench(fn, warmup, repeats)
    return lo * 1e3, med * 1e3


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
    ours, theirs, info = compare.ours_and_theirs(__file__, "nx", "bench_pool_sort", args.python)
    names = {
        "P1": "P1 max_pool 2x2/2 f32 [32,64,32,32] fwd",
        "P2": "P2 max_pool fwd+bwd",
        "P3": "P3 avg_pool 2x2/2 fwd (context)",
        "S1": "S1 sort 10^6 f32",
        "S2": "S2 argsort 10^6 f32 (stable)",
        "S3": "S3 top_k(10) of 10^6 f32",
    }
    compare.print_comparison(names, ours, theirs, throughput=False,
                             footer=f"jax {info.get('jax', '?')}, numpy {info.get('numpy', '?')}")


if __name__ == "__main__":
    sys.exit(main())
