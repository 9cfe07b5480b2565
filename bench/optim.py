#!/usr/bin/env python3
"""The optimizer update alone (issue 56): rune::optim vs JAX + Optax on this
machine, in one run, printing the times and the ratios ours / jax.jit.

Workload: a GPT-like tree of 96 F32 leaves (6 blocks of 16, d = 192: 2.67M
parameters); one step is `clip_by_global_norm(1.0)`, then AdamW (warmup +
cosine decay, weight decay 0.1 on the `.w` leaves), then `apply_updates`.
  O1  ours, jit          vs jax.jit(step)   (target: ours / JAX <= 0.5)
  O2  ours, eager        vs jax.jit(step)   (context)
  O3  ours optim::adam eager vs O4 the examples' hand-written Adam, eager
  O5  W19u's shape (../shared/bench/generality): 96 leaves, 532,480 parameters,
      W19's optimizer (decay on every leaf), parameters and state fed back, jit
Both sides: untimed warmup calls, then individually timed calls; min and
median. The inputs are the same each call (nothing donated on either side).
`--one-core` runs both on one thread pinned to CPU 1 (NX_NUM_THREADS=1;
XLA without its Eigen pool): on a machine other processes keep busy, a
thread waiting for a descheduled partner at every kernel distorts the
two-thread times more than it slows one thread.

Run from the repository root (builds the Rust bench first):
  python3 -m venv .venv-optax && .venv-optax/bin/pip install jax optax
  python3 bench/optim.py --python .venv-optax/bin/python [--one-core]
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import compare  # noqa: E402  (machine(), run_step(), build_example(), pair(), ratio())

BLOCKS, D = 6, 192


def leaf_shapes():
    """As `leaf_shapes` in crates/rune/examples/bench_optim.rs."""
    out = []
    for i in range(BLOCKS):
        add = lambda name, shape: out.append((f"h{i}.{name}", shape))
        add("ln1.scale", (D,))
        add("ln1.bias", (D,))
        for proj in "qkvo":
            add(f"attn.{proj}.w", (D, D))
            add(f"attn.{proj}.b", (D,))
        add("ln2.scale", (D,))
        add("ln2.bias", (D,))
        add("mlp.fc.w", (D, 4 * D))
        add("mlp.fc.b", (4 * D,))
        add("mlp.proj.w", (4 * D, D))
        add("mlp.proj.b", (D,))
    return out


def w19u_shapes():
    """As `w19u_tree` in crates/rune/examples/bench_optim.rs (a list of dicts)."""
    return [{"l1": {"w": (128, 128), "b": (128,)}, "l2": {"w": (128, 128), "b": (128,)},
             "norm": {"scale": (128,), "bias": (128,)}} for _ in range(16)]


def timed(f, warmup, repeats):
    for _ in range(warmup):
        f()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return min(ts) * 1e3, statistics.median(ts) * 1e3


def child_jax():
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    print("INFO " + json.dumps(dict(jax=jax.__version__, optax=optax.__version__)), flush=True)
    shapes = leaf_shapes()

    def tree(seed, std):
        keys = jax.random.split(jax.random.key(seed), len(shapes))
        return {name: jax.random.normal(k, shape, jnp.float32) * std for k, (name, shape) in zip(keys, shapes)}

    params, grads = tree(0, 0.02), tree(1, 0.01)
    assert len(params) == 96
    opt = optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.adamw(optax.warmup_cosine_decay_schedule(0.0, 1e-3, 100, 10_000, 1e-5), weight_decay=0.1,
                    mask=lambda p: {k: k.endswith(".w") for k in p}),
    )
    state = opt.init(params)

    @jax.jit
    def step(p, s, g):
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s

    for _ in range(3):
        jax.block_until_ready(step(params, state, grads))
    ts = []
    for _ in range(30):
        t0 = time.perf_counter()
        jax.block_until_ready(step(params, state, grads))
        ts.append(time.perf_counter() - t0)
    print(json.dumps(dict(id="O1", framework="jax.jit", variant="optax clip_by_global_norm + adamw, jit",
                          unit="ms", min=min(ts) * 1e3, median=statistics.median(ts) * 1e3)), flush=True)

    # O5: W19u's shape and optimizer, parameters and state fed back.
    w19 = optax.chain(optax.clip_by_global_norm(1.0),
                      optax.adamw(optax.warmup_cosine_decay_schedule(0.0, 1e-3, 100, 10_000, 1e-5), weight_decay=0.1))
    leaves, treedef = jax.tree.flatten(w19u_shapes(), is_leaf=lambda x: isinstance(x, tuple))
    keys = jax.random.split(jax.random.key(2), 2 * len(leaves))
    p = treedef.unflatten([jax.random.normal(k, s, jnp.float32) / np.sqrt(128) for k, s in zip(keys, leaves)])
    g = treedef.unflatten([jax.random.normal(k, s, jnp.float32) for k, s in zip(keys[len(leaves):], leaves)])

    @jax.jit
    def update(p, s, g):
        u, s = w19.update(g, s, p)
        return optax.apply_updates(p, u), s

    carry = [p, w19.init(p)]

    def call():
        carry[0], carry[1] = update(carry[0], carry[1], g)
        jax.block_until_ready(carry)

    lo, med = timed(call, 20, 500)
    print(json.dumps(dict(id="O5", framework="jax.jit", variant="W19u optax clip + adamw, fed back, jit",
                          unit="ms", min=lo, median=med)), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python", default="python3")
    ap.add_argument("--tries", type=int, default=3)
    ap.add_argument("--max-wait", type=float, default=120.0)
    ap.add_argument("--one-core", action="store_true", help="one thread each, pinned to CPU 1")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child_jax()
    exe = compare.build_example("rune", "bench_optim")
    env = dict(os.environ)
    pin = []
    if args.one_core:
        env.update(NX_NUM_THREADS="1",
                   XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
        pin = ["taskset", "-c", "1"]
    ours, _, s_ours = compare.run_step("rune", pin + [exe], env, args)
    theirs, info, s_jax = compare.run_step("jax", pin + [args.python, os.path.abspath(__file__), "--child"],
                                          env, args)
    row = lambda rows, wid: next((r for r in rows if r.get("id") == wid), None)
    jax_jit = row(theirs, "O1")
    print()
    print(f"Machine: {compare.machine()}" + ("; one thread each, pinned to CPU 1" if args.one_core else ""))
    print(f"JAX {info.get('jax')}, Optax {info.get('optax')}; other processes' CPU use: "
          f"rune {s_ours['others_cpu']:.0%}, jax {s_jax['others_cpu']:.0%}")
    print("| row | ours ms (min / median) | jax.jit ms (min / median) | ours / jax.jit (min / median) |")
    print("|---|---|---|---|")
    for wid in ("O1", "O2"):
        r = row(ours, wid)
        print(f"| {wid} {r['variant']} | {compare.pair(r)} | {compare.pair(jax_jit)} | "
              f"{compare.ratio(r, jax_jit, bold=wid == 'O1')} |")
    o5, j5 = row(ours, "O5"), row(theirs, "O5")
    print(f"| O5 {o5['variant']} | {compare.pair(o5)} | {compare.pair(j5)} | {compare.ratio(o5, j5, bold=True)} |")
    o3, o4 = row(ours, "O3"), row(ours, "O4")
    print(f"| O3 / O4 optim::adam vs hand-written Adam, eager | {compare.pair(o3)} vs {compare.pair(o4)} | | "
          f"{compare.ratio(o3, o4)} (O3 / O4) |")


if __name__ == "__main__":
    main()
