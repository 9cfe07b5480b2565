#!/usr/bin/env python3
"""FFT (issue 13): nx eager vs numpy and jax.jit, one run.

Workloads (min and median of many calls after warmup):
  F1  fft of 2^20 complex64   vs np.fft.fft, jit(jnp.fft.fft)
  F2  rfft of 2^20 float32    vs np.fft.rfft, jit(jnp.fft.rfft)

numpy >= 2 computes complex64/float32 in single precision (pocketfft C++);
older numpy promotes to complex128, the row's dtype says which.

Prints a markdown table; "theirs / ours" is our throughput relative to
theirs (>= 0.8 against numpy is issue 13's target).

  python3 bench/fft.py --python /work/.venv-bench/bin/python
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare  # noqa: E402  (bench(): the shared timing)

timeit = compare.bench


def child():
    import numpy as np
    import jax
    import jax.numpy as jnp

    rows = []

    def emit(wid, fw, variant, unit, mm):
        rows.append(dict(id=wid, framework=fw, variant=variant, unit=unit, min=mm[0] * 1e3, median=mm[1] * 1e3))
        print(json.dumps(rows[-1]), flush=True)

    rng = np.random.default_rng(0)
    n = 1 << 20
    re = rng.standard_normal(n).astype(np.float32)
    z = (re + 1j * rng.standard_normal(n).astype(np.float32)).astype(np.complex64)
    dt = lambda y: str(y.dtype)
    emit("F1", "numpy", f"np.fft.fft -> {dt(np.fft.fft(z))}", "ms", timeit(lambda: np.fft.fft(z), 3, 30))
    emit("F2", "numpy", f"np.fft.rfft -> {dt(np.fft.rfft(re))}", "ms", timeit(lambda: np.fft.rfft(re), 3, 30))
    jz, jre = jnp.asarray(z), jnp.asarray(re)
    f, r = jax.jit(jnp.fft.fft), jax.jit(jnp.fft.rfft)
    emit("F1", "jax.jit", "jit(jnp.fft.fft)", "ms", timeit(lambda: jax.block_until_ready(f(jz)), 3, 30))
    emit("F2", "jax.jit", "jit(jnp.fft.rfft)", "ms", timeit(lambda: jax.block_until_ready(r(jre)), 3, 30))
    print("INFO " + json.dumps(dict(jax=jax.__version__, numpy=np.__version__)), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python", default="python3")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child()
    ours, theirs, info = compare.ours_and_theirs(__file__, "nx", "bench_fft", args.python)
    names = {"F1": "F1 fft 2^20 complex64", "F2": "F2 rfft 2^20 f32"}
    compare.print_comparison(names, ours, theirs, throughput=True,
                             footer=f"jax {info.get('jax', '?')}, numpy {info.get('numpy', '?')}")


if __name__ == "__main__":
    sys.exit(main())
