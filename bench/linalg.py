#!/usr/bin/env python3
"""Linear algebra (issue 13): nx eager vs numpy and jax.jit, one run.

Workloads (min and median of many calls after warmup):
  L1  cholesky 512x512 f64 SPD        vs np.linalg.cholesky, jit(jnp.linalg.cholesky)
  L2  solve 512x512 f64, b 512x512    vs np.linalg.solve, jit(jnp.linalg.solve)
  L3  qr 512x512 f64 reduced (q, r)   vs np.linalg.qr(mode='reduced'), jit(jnp.linalg.qr)
  L4  svd 512x512 f64 (u, s, vt)      vs np.linalg.svd(full_matrices=False), jit(jnp.linalg.svd)
  L5  solve 1024 x 4x4 f32, b [1024,4,1] vs np.linalg.solve, jit(jnp.linalg.solve)

Prints a markdown table; "numpy / ours" is our throughput relative to
numpy's (>= 0.8 is issue 13's target), "ours / theirs" our time over theirs.

  python3 bench/linalg.py --python /work/.venv-bench/bin/python
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare  # noqa: E402  (bench(): the shared timing, blas_info())

timeit = compare.bench


def child():
    import numpy as np
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    rows = []

    def emit(wid, fw, variant, unit, mm):
        s = 1e3 if unit == "ms" else 1e6
        rows.append(dict(id=wid, framework=fw, variant=variant, unit=unit, min=mm[0] * s, median=mm[1] * s))
        print(json.dumps(rows[-1]), flush=True)

    rng = np.random.default_rng(0)
    n = 512
    a = rng.standard_normal((n, n))
    spd = a @ a.T + n * np.eye(n)
    b = rng.standard_normal((n, n))
    ja, jspd, jb = jnp.asarray(a), jnp.asarray(spd), jnp.asarray(b)

    def both(wid, variant, unit, np_fn, jax_fn, args, jargs, w, r):
        emit(wid, "numpy", "np." + variant, unit, timeit(lambda: np_fn(*args), w, r))
        jf = jax.jit(jax_fn)
        run = lambda: jax.block_until_ready(jf(*jargs))
        emit(wid, "jax.jit", "jit(jnp." + variant + ")", unit, timeit(run, w, r))

    both("L1", "linalg.cholesky", "ms", np.linalg.cholesky, jnp.linalg.cholesky, (spd,), (jspd,), 3, 20)
    both("L2", "linalg.solve", "ms", np.linalg.solve, jnp.linalg.solve, (a, b), (ja, jb), 3, 20)
    both("L3", "linalg.qr", "ms", np.linalg.qr, jnp.linalg.qr, (a,), (ja,), 3, 20)
    both("L4", "linalg.svd(full_matrices=False)", "ms", lambda x: np.linalg.svd(x, full_matrices=False),
         lambda x: jnp.linalg.svd(x, full_matrices=False), (a,), (ja,), 2, 10)
    a4 = (rng.standard_normal((1024, 4, 4)) + 4 * np.eye(4)).astype(np.float32)
    b4 = rng.standard_normal((1024, 4, 1)).astype(np.float32)
    both("L5", "linalg.solve", "us", np.linalg.solve, jnp.linalg.solve, (a4, b4),
         (jnp.asarray(a4), jnp.asarray(b4)), 20, 200)
    print("INFO " + json.dumps(dict(jax=jax.__version__, numpy=np.__version__, blas=compare.blas_info())), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python", default="python3")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child()
    ours, theirs, info = compare.ours_and_theirs(__file__, "nx", "bench_linalg", args.python)
    names = {
        "L1": "L1 cholesky 512 f64",
        "L2": "L2 solve 512 f64, b 512x512",
        "L3": "L3 qr 512 f64 reduced",
        "L4": "L4 svd 512 f64 reduced",
        "L5": "L5 solve 1024 x 4x4 f32",
    }
    compare.print_comparison(names, ours, theirs, throughput=True,
                             footer=f"jax {info.get('jax', '?')}, numpy {info.get('numpy', '?')} (BLAS: {info.get('blas')})")


if __name__ == "__main__":
    sys.exit(main())
