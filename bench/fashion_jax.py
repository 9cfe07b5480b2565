#!/usr/bin/env python3
"""Fashion-MNIST under jax.jit: the model and training of
`crates/rune/examples/train_fashion.rs`, for its epoch time beside ours.

The same network (conv 3x3 SAME 1->16, relu, 2x2 max-pool, conv 3x3 SAME
16->32, relu, 2x2 max-pool, dense 1568->128 relu, dense 128->10; NCHW/OIHW),
the same He initialization (normal, variance 2 / fan-in; zero biases; other
draws than ours), the same mean cross-entropy of log_softmax, the same Adam
(lr 1e-3, betas 0.9/0.999, eps 1e-8 added to sqrt(v), bias correction from
the step count inside the step), batch 64, a fresh permutation each epoch,
the last partial batch dropped. As in ours, each step's minibatch is gathered
on the host side of the step (numpy indexing here, an eager `take` there) and
its loss is read back every step (the progress bar's), so steps do not
overlap. Each epoch's wall time is printed; the first includes jax.jit's
tracing and compiling (its first step's time is printed too), so the steady
epoch time is the mean over the later epochs. The test accuracy is printed
after each epoch (not timed).

    /work/.venv-bench/bin/python bench/fashion_jax.py [--epochs N] [--steps N] [--data DIR]
"""
import argparse
import gzip
import json
import os
import time

import numpy as np


def read_idx(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    assert raw[0] == 0 and raw[1] == 0 and raw[2] == 8, f"{path}: not an IDX file of bytes"
    rank = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(rank)]
    data = np.frombuffer(raw, np.uint8, offset=4 + 4 * rank)
    assert data.size == int(np.prod(dims)), f"{path}: {data.size} bytes for {dims}"
    return data.reshape(dims)


def find(dir, stem):
    for name in (stem + ".gz", stem):
        if os.path.isfile(os.path.join(dir, name)):
            return os.path.join(dir, name)
    raise SystemExit(f"{dir}: no {stem}.gz or {stem} (apt-get install dataset-fashion-mnist, or --data DIR)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=None, help="stop each epoch after N minibatches")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp
    from jax import lax

    xs = {k: read_idx(find(args.data, f"{k}-images-idx3-ubyte")) for k in ("train", "t10k")}
    ys = {k: read_idx(find(args.data, f"{k}-labels-idx1-ubyte")) for k in ("train", "t10k")}
    x_train = (xs["train"].astype(np.float32) / 255.0)[:, None]
    y_train = ys["train"].astype(np.int32)
    x_test = jnp.asarray((xs["t10k"].astype(np.float32) / 255.0)[:, None])
    y_test = np.asarray(ys["t10k"], np.int32)
    n_train, side = x_train.shape[0], x_train.shape[2]
    C1, C2, HIDDEN, BATCH, LR = 16, 32, 128, 64, 1e-3
    B1, B2, EPS = 0.9, 0.999, 1e-8
    flat = C2 * (side // 4) ** 2

    rng = np.random.default_rng(11)

    def he(shape, fan_in):
        return jnp.asarray(rng.standard_normal(shape, np.float32) * np.sqrt(2.0 / fan_in, dtype=np.float32))

    params = dict(
        k1=he((C1, 1, 3, 3), 9), b1=jnp.zeros(C1), k2=he((C2, C1, 3, 3), C1 * 9), b2=jnp.zeros(C2),
        w3=he((flat, HIDDEN), flat), b3=jnp.zeros(HIDDEN), w4=he((HIDDEN, 10), HIDDEN), b4=jnp.zeros(10),
    )

    def block(x, k, b):
        y = lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NCHW", "OIHW", "NCHW"))
        y = jax.nn.relu(y + b[None, :, None, None])
        return lax.reduce_window(y, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

    def forward(p, x):
        h = block(x, p["k1"], p["b1"])
        h = block(h, p["k2"], p["b2"])
        h = jax.nn.relu(h.reshape(x.shape[0], flat) @ p["w3"] + p["b3"])
        return h @ p["w4"] + p["b4"]

    def loss(p, x, y):
        lp = jax.nn.log_softmax(forward(p, x), -1)
        return -jnp.take_along_axis(lp, y[:, None], 1).mean()

    @jax.jit
    def step(state, x, y):
        p, m, v, t = state
        l, g = jax.value_and_grad(loss)(p, x, y)
        t = t + 1.0
        lr = jnp.sqrt(1.0 - B2 ** t) / (1.0 - B1 ** t) * LR
        m = jax.tree.map(lambda m, g: m * B1 + g * (1 - B1), m, g)
        v = jax.tree.map(lambda v, g: v * B2 + g * g * (1 - B2), v, g)
        p = jax.tree.map(lambda p, m, v: p - m * lr / (jnp.sqrt(v) + EPS), p, m, v)
        return l, (p, m, v, t)

    predict = jax.jit(lambda p, x: jnp.argmax(forward(p, x), -1))

    def accuracy(p):
        guesses = np.concatenate([np.asarray(predict(p, x_test[c:c + 500])) for c in range(0, len(y_test), 500)])
        return float((guesses == y_test).mean())

    zeros = jax.tree.map(jnp.zeros_like, params)
    state = (params, zeros, jax.tree.map(jnp.zeros_like, params), jnp.float32(0.0))
    batches = n_train // BATCH if args.steps is None else min(args.steps, n_train // BATCH)
    print(f"jax {jax.__version__} on {jax.devices()}: Fashion-MNIST {n_train} train, {len(y_test)} test; "
          f"{args.epochs} epochs of {batches} steps of {BATCH}")
    epoch_times, first_step, acc = [], None, None
    for epoch in range(args.epochs):
        order = rng.permutation(n_train)
        t0 = time.perf_counter()
        for b in range(batches):
            ts = time.perf_counter()
            idx = order[b * BATCH:(b + 1) * BATCH]
            l, state = step(state, x_train[idx], y_train[idx])
            l = float(l)
            if first_step is None:
                first_step = time.perf_counter() - ts
            assert np.isfinite(l), f"loss diverged: {l}"
        t = time.perf_counter() - t0
        epoch_times.append(t)
        acc = accuracy(state[0])
        extra = f", the first step {first_step:.2f} s of it: tracing and compiling" if epoch == 0 else ""
        print(f"epoch {epoch + 1}/{args.epochs}: {t:.1f} s ({1e3 * t / batches:.2f} ms/step{extra}), "
              f"loss {l:.4f}, test accuracy {100 * acc:.2f}%", flush=True)
    if args.epochs > 1:
        steady = float(np.mean(epoch_times[1:]))
    else:
        steady = (epoch_times[0] - first_step) * batches / max(batches - 1, 1)
    full = steady * (n_train // BATCH) / batches
    print(f"epoch time (after compiling, {batches} steps of {BATCH}): {steady:.1f} s"
          + (f"; a full epoch of {n_train // BATCH} steps at this rate: {full:.1f} s" if batches < n_train // BATCH else ""))
    print(json.dumps(dict(framework="jax.jit", jax=jax.__version__, epochs=args.epochs, steps_per_epoch=batches,
                          epoch_times_s=[round(t, 3) for t in epoch_times], first_step_s=round(first_step, 3),
                          steady_epoch_s=round(steady, 3), full_epoch_s=round(full, 3), test_accuracy=acc)))


if __name__ == "__main__":
    main()
