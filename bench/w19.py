#!/usr/bin/env python3
"""W19 (shared/bench/generality/README.md): a character-level GPT training
step with clip_by_global_norm + adamw(warmup_cosine_decay), the whole step
under one jit: ours (crates/rune/examples/bench_w19.rs: rune::nn +
rune::optim under rune::jit) against JAX + Optax (jax_generality.py's w19,
imported unchanged), alternating in --rounds rounds, each side's min kept.
Both start from the same hashed inputs; their first losses are printed.

Run from the repository root (JAX and optax in --python's environment):
  python3 bench/w19.py --python /work/venv-jax/bin/python [--rounds 3] [--reps 50]
"""
import argparse
import sys

from side_by_side import JAX_DIR, build_example, run

JAX_SIDE = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
import jax
import jax_generality as g
step, args, advance = g.w19()
out = step(*args); loss0 = float(out[0]); args = advance(args, out)
for _ in range(5):
    out = step(*args); jax.block_until_ready(out); args = advance(args, out)
ts = []
for _ in range(int(sys.argv[2])):
    t0 = time.perf_counter(); out = step(*args); jax.block_until_ready(out)
    ts.append(time.perf_counter() - t0); args = advance(args, out)
print(f"loss0 {loss0:.6f}\nmin_ms {min(ts) * 1e3:.3f}")
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=50)
    a = ap.parse_args()
    ours_cmd = [build_example("bench_w19"), str(a.reps)]
    jax_cmd = [a.python, "-c", JAX_SIDE, JAX_DIR, str(a.reps)]
    best = {"ours": None, "jax": None}
    for r in range(a.rounds):
        for side, cmd in (("ours", ours_cmd), ("jax", jax_cmd)):
            res = run(cmd)
            print(f"round {r + 1} {side:4}: min {res['min_ms']:.2f} ms  loss0 {res['loss0']:.6f}", flush=True)
            if best[side] is None or res["min_ms"] < best[side]["min_ms"]:
                best[side] = res
    o, j = best["ours"]["min_ms"], best["jax"]["min_ms"]
    print(f"W19 GPT train step (jit), min over {a.rounds} rounds of {a.reps}: "
          f"ours {o:.2f} ms, jax.jit+optax {j:.2f} ms, ours/JAX {o / j:.2f}")


if __name__ == "__main__":
    main()
