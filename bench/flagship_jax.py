#!/usr/bin/env python3
"""JAX's side of the flagship step: the training step that
crates/rune/examples/train_mlp.rs runs under rune::jit, under jax.jit.

Same model and step: a 2-64-64-3 tanh MLP (Glorot-style weights
N(0, 1/fan_in), zero biases) on three interleaved spirals (1500 points per
class, radius U[0.1, 1], 2 turns, jitter 0.03), batch 128, mean
cross-entropy of log_softmax, value_and_grad, then Adam (beta1 0.9, beta2
0.999, eps 1e-8) with the bias-corrected step size passed as a 0-d f32
argument (train_mlp's first step: 1e-2 * sqrt(1 - beta2) / (1 - beta1)).

Timed as the anchors prescribe (warmup untimed calls, then individually
timed calls ending in block_until_ready; min and median): 100 / 1000.
Prints one JSON row (bench/generality.py reads it).

Usage: python flagship_jax.py [--warmup 100] [--repeats 1000]
"""
import argparse
import json
import os
import statistics
import time

os.environ.setdefault("JAX_ENABLE_COMPILATION_CACHE", "false")
import numpy as np  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

BATCH, HIDDEN, CLASSES, PER_CLASS, TURNS, NOISE = 128, 64, 3, 1500, 2.0, 0.03
BETA1, BETA2, EPS, LR = 0.9, 0.999, 1e-8, 1e-2


def spirals(rng):
    xs, ys = [], []
    for c in range(CLASSES):
        r = rng.random(PER_CLASS, dtype=np.float32) * 0.9 + 0.1
        theta = r * (2 * np.pi * TURNS) + 2 * np.pi * c / CLASSES
        px = r * np.cos(theta) + rng.standard_normal(PER_CLASS, dtype=np.float32) * NOISE
        py = r * np.sin(theta) + rng.standard_normal(PER_CLASS, dtype=np.float32) * NOISE
        xs.append(np.stack([px, py], 1).astype(np.float32))
        ys.append(np.full(PER_CLASS, c, np.int32))
    perm = rng.permutation(CLASSES * PER_CLASS)
    return np.concatenate(xs)[perm], np.concatenate(ys)[perm]


def init(rng, sizes=(2, HIDDEN, HIDDEN, CLASSES)):
    p = {}
    for i, (fi, fo) in enumerate(zip(sizes[:-1], sizes[1:]), 1):
        p[f"w{i}"] = jnp.asarray(rng.standard_normal((fi, fo), dtype=np.float32) * np.float32(np.sqrt(1.0 / fi)))
        p[f"b{i}"] = jnp.zeros((fo,), jnp.float32)
    return p


def forward(p, x):
    h = jnp.tanh(x @ p["w1"] + p["b1"])
    h = jnp.tanh(h @ p["w2"] + p["b2"])
    return h @ p["w3"] + p["b3"]


def loss(p, x, y):
    logp = jax.nn.log_softmax(forward(p, x), axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))


@jax.jit
def train_step(state, xb, yb, lr):
    params, m, v = state
    l, g = jax.value_and_grad(loss)(params, xb, yb)
    m = jax.tree.map(lambda m, g: m * BETA1 + g * (1 - BETA1), m, g)
    v = jax.tree.map(lambda v, g: v * BETA2 + jnp.square(g) * (1 - BETA2), v, g)
    steps = jax.tree.map(lambda m, v: m * lr / (jnp.sqrt(v) + EPS), m, v)
    params = jax.tree.map(lambda p, s: p - s, params, steps)
    return l, (params, m, v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=1000)
    a = ap.parse_args()
    rng = np.random.default_rng(42)
    x, y = spirals(rng)
    params = init(rng)
    zeros = lambda: jax.tree.map(jnp.zeros_like, params)  # noqa: E731
    state = (params, zeros(), zeros())
    xb, yb = jnp.asarray(x[:BATCH]), jnp.asarray(y[:BATCH])
    lr = jnp.float32(LR * np.sqrt(1 - BETA2) / (1 - BETA1))
    args = jax.block_until_ready((state, xb, yb, lr))
    for _ in range(a.warmup):
        jax.block_until_ready(train_step(*args))
    ts = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(train_step(*args))
        ts.append(time.perf_counter() - t0)
    print(json.dumps({"workload": "FLAGSHIP", "framework": "jax",
                      "variant": "jit(value_and_grad + Adam) train_mlp step, MLP 2-64-64-3 tanh, batch 128",
                      "unit": "us", "min": min(ts) * 1e6, "median": statistics.median(ts) * 1e6,
                      "n": a.repeats}), flush=True)


if __name__ == "__main__":
    main()
