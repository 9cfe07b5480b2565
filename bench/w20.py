#!/usr/bin/env python3
"""W20 and W20-single (shared/bench/generality/README.md): a tensor-parallel
MLP training step with shard_map over 2 devices, and the same step on one
device, under one jit each: ours (crates/rune/examples/bench_w20.rs:
rune::sharding::shard_map) against JAX (jax_generality.py's w20 and
w20_single, imported unchanged, in a process with two host devices:
XLA_FLAGS=--xla_force_host_platform_device_count=2), alternating in
--rounds rounds, each side's min kept. Both start from the same hashed
inputs; their first losses are printed.

Run from the repository root (JAX in --python's environment):
  python3 bench/w20.py --python /work/venv-jax/bin/python [--rounds 3] [--reps 100]
"""
import argparse
import os
import sys

from side_by_side import JAX_DIR, build_example, run

JAX_SIDE = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
import jax
import jax_generality as g
for name, make in (("", g.w20), ("single_", g.w20_single)):
    step, args, advance = make()
    out = step(*args); loss0 = float(out[0]); args = advance(args, out)
    for _ in range(5):
        out = step(*args); jax.block_until_ready(out); args = advance(args, out)
    ts = []
    for _ in range(int(sys.argv[2])):
        t0 = time.perf_counter(); out = step(*args); jax.block_until_ready(out)
        ts.append(time.perf_counter() - t0); args = advance(args, out)
    print(f"{name}loss0 {loss0:.6f}\n{name}min_ms {min(ts) * 1e3:.3f}")
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=100)
    a = ap.parse_args()
    ours_cmd = [build_example("bench_w20"), str(a.reps)]
    jax_cmd = [a.python, "-c", JAX_SIDE, JAX_DIR, str(a.reps)]
    jax_env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    best = {}
    for r in range(a.rounds):
        for side, cmd, env in (("ours", ours_cmd, None), ("jax", jax_cmd, jax_env)):
            res = run(cmd, env)
            print(f"round {r + 1} {side:4}: sharded {res['min_ms']:.2f} ms, single "
                  f"{res['single_min_ms']:.2f} ms  loss0 {res['loss0']:.6f} / "
                  f"{res['single_loss0']:.6f}", flush=True)
            for k in ("min_ms", "single_min_ms"):
                key = (side, k)
                best[key] = min(best.get(key, float("inf")), res[k])
    o, j = best[("ours", "min_ms")], best[("jax", "min_ms")]
    os_, js = best[("ours", "single_min_ms")], best[("jax", "single_min_ms")]
    print(f"W20 sharded step: ours {o:.2f} ms, jax {j:.2f} ms, ours/JAX {o / j:.2f}")
    print(f"W20-single step: ours {os_:.2f} ms, jax {js:.2f} ms, ours/JAX {os_ / js:.2f}")
    print(f"sharded/single: ours {o / os_:.2f}, jax {j / js:.2f}")


if __name__ == "__main__":
    main()
