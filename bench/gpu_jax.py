#!/usr/bin/env python3
"""JAX's side of the GPU check's benchmark half (issue 45; bench/gpu_check.sh
runs it beside crates/rune/examples/bench_gpu.rs and prints both as one table
with bench/gpu_table.py): W1, W3, W4, W15 and W17 under jax.jit on JAX's
default backend (the GPU on the device machine; the CPU here), as JSON lines
in bench_gpu's format.

The workloads are the shared definitions themselves, imported, not copied:
W4 from the anchors' jax_bench.py (make_w4_step, w4_inputs), W15 and W17 from
the generality workloads' jax_generality.py (WORKLOADS: w15, w17 and their
warmup and repeats; each a step over its parameters, the rest captured). W1 and W3 are written inline in jax_bench.py's main(), so
they are restated here as it states them: jax.jit(lambda x, y: jnp.exp(x) * y
+ 1) over f32[4M] drawn by numpy's default_rng(0).random, jax.jit(jnp.matmul)
over f32[1024, 1024] standard normal. Inputs are device arrays (jnp.asarray),
each call ends in block_until_ready; warmup and repeats as the anchors' and
the generality README's (W1 5/100, W3 5/50, W4 10/200, W15 5/50, W17 10/200).

Matmul precision: f32 products run with jax_default_matmul_precision
"highest" (true f32, the arithmetic ours does: cuBLAS SGEMM without TF32) unless
--matmul-precision default; JAX's default on recent GPUs is TF32, which one
extra row times for W3 ("W3_DEFAULT_PRECISION", precision=Precision.DEFAULT).
On the CPU the two are the same arithmetic.

The shared definitions are looked up in --defs (default: jax_defs/ beside
this file, where gpu_check.sh copies them into the folder that travels to the
GPU machine, then ../shared/bench/{anchors,generality} from the repository).

  python3 bench/gpu_jax.py [--only W1,W3] [--defs DIR] [--matmul-precision highest|default]
                           [--expect-backend gpu|cpu]
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(HERE, "..", "..", "shared", "bench")
DEF_DIRS = [os.path.join(HERE, "jax_defs"), os.path.join(SHARED, "anchors"),
            os.path.join(SHARED, "generality")]
WORKLOADS = ["W1", "W3", "W3_DEFAULT_PRECISION", "W4", "W15", "W17"]
N_ELEM = 4 * 1024 * 1024  # jax_bench.N_ELEM
W3_N = 1024


def row(device, wid, variant, ts, **extra):
    r = {"id": wid, "framework": "jax", "device": device, "variant": variant, "unit": "ms",
         "min": min(ts) * 1e3, "median": statistics.median(ts) * 1e3, "n": len(ts)}
    r.update(extra)
    print(json.dumps(r), flush=True)
    return r


def timed(f, args, warmup, repeats):
    """Per-call seconds of f(*args) after warmup untimed calls, each call
    ending in block_until_ready (the anchors' rule)."""
    import jax
    for _ in range(warmup):
        jax.block_until_ready(f(*args))
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        ts.append(time.perf_counter() - t0)
    return ts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=",".join(WORKLOADS))
    ap.add_argument("--defs", action="append", default=None,
                    help="a folder holding jax_bench.py, benchutil.py, jax_generality.py (repeatable)")
    ap.add_argument("--matmul-precision", default="highest", choices=["highest", "default"])
    ap.add_argument("--expect-backend", default=None,
                    help="fail unless JAX's default backend is this one (gpu, cpu)")
    a = ap.parse_args()
    only = a.only.split(",")
    for d in reversed(a.defs or DEF_DIRS):
        sys.path.insert(0, d)
    try:
        import jax
        import jax.numpy as jnp
        import numpy as np
        import jax_bench
        import jax_generality
    except ImportError as e:
        print(json.dumps({"id": "DEVICE", "framework": "jax", "error": f"cannot import: {e}"}))
        return 1
    if a.expect_backend and jax.default_backend() != a.expect_backend:
        print(json.dumps({"id": "DEVICE", "framework": "jax",
                          "error": f"JAX's default backend is {jax.default_backend()} "
                                   f"({jax.devices()}), not {a.expect_backend}"}))
        return 1
    if a.matmul_precision == "highest":
        jax.config.update("jax_default_matmul_precision", "highest")
    device = str(jax.devices()[0])
    print(json.dumps({"id": "DEVICE", "framework": "jax", "device": device,
                      "describe": f"jax {jax.__version__}, backend {jax.default_backend()}, "
                                  f"matmul precision {a.matmul_precision}"}), flush=True)
    failed = False

    def guarded(wid, run):
        nonlocal failed
        if wid not in only:
            return
        try:
            run()
        except Exception as e:  # a failing workload is a row; the others still run
            failed = True
            print(json.dumps({"id": wid, "framework": "jax", "variant": "workload failed",
                              "error": f"{type(e).__name__}: {e}"}), flush=True)

    rng = np.random.default_rng(0)

    def w1():
        x = jnp.asarray(rng.random(N_ELEM, dtype=np.float32))
        y = jnp.asarray(rng.random(N_ELEM, dtype=np.float32))
        f = jax.jit(lambda x, y: jnp.exp(x) * y + 1)
        ts = timed(f, (x, y), 5, 100)
        moved = 3 * 4 * N_ELEM
        row(device, "W1", "jit exp(x) * y + 1, f32[4M]", ts, bytes=moved,
            gb_per_s=moved / min(ts) / 1e9)

    w3_in = []

    def w3_inputs():
        if not w3_in:
            w3_in.extend(jnp.asarray(rng.standard_normal((W3_N, W3_N), dtype=np.float32))
                         for _ in range(2))
        return tuple(w3_in)

    def w3():
        ts = timed(jax.jit(jnp.matmul), w3_inputs(), 5, 50)
        flops = 2.0 * W3_N ** 3
        row(device, "W3", f"jit a @ b, f32[1024, 1024] (precision {a.matmul_precision})", ts,
            flops=flops, gflop_per_s=flops / min(ts) / 1e9)

    def w3_default():
        f = jax.jit(lambda p, q: jnp.matmul(p, q, precision=jax.lax.Precision.DEFAULT))
        ts = timed(f, w3_inputs(), 5, 50)
        flops = 2.0 * W3_N ** 3
        row(device, "W3_DEFAULT_PRECISION",
            "jit a @ b, f32[1024, 1024], Precision.DEFAULT (TF32 on recent GPUs)", ts,
            flops=flops, gflop_per_s=flops / min(ts) / 1e9)

    def w4():
        step = jax_bench.make_w4_step()
        ts = timed(step, jax_bench.w4_inputs(), 10, 200)
        row(device, "W4", "jit(value_and_grad + SGD) MLP 784-512-512-10, batch 128", ts)

    def generality(wid):
        def run():
            make, what, warmup, repeats, _unit = jax_generality.WORKLOADS[wid]
            f, args = make()
            row(device, wid, what, timed(f, args, warmup, repeats))
        return run

    guarded("W1", w1)
    guarded("W3", w3)
    guarded("W3_DEFAULT_PRECISION", w3_default)
    guarded("W4", w4)
    guarded("W15", generality("W15"))
    guarded("W17", generality("W17"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
