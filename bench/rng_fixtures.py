#!/usr/bin/env python3
"""Writes crates/rune/tests/fixtures/rng_jax.json: draws of JAX's default
threefry PRNG (partitionable mode, JAX's default since 0.5) that
crates/rune/tests/rng.rs compares `rune::rng` against, so the tests never
need JAX.

Every float is stored as its bit pattern (an integer), every key as its two
u32 words; large draws are summarized (sum and xor of the words plus a few
samples) to keep the file small.

Run from the repository root:
  /work/.venv-bench/bin/python bench/rng_fixtures.py
Seeds of 2^32 and more need jax_enable_x64 (JAX's 32-bit mode truncates the
seed first): those keys, and the f64 draws, are made at the end with x64 on.
"""
import json
import os

import numpy as np
import jax
import jax.numpy as jnp
from jax.extend.random import threefry2x32_p

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "crates", "rune", "tests", "fixtures", "rng_jax.json")

assert jax.config.jax_threefry_partitionable, "fixtures are for partitionable threefry"


def words(a):
    return [int(v) for v in np.asarray(a).reshape(-1)]


def fbits(a):
    a = np.asarray(a)
    view = {2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    return [int(v) for v in a.reshape(-1).view(view)]


def kd(k):
    return words(jax.random.key_data(k))


def summary(u):
    u = np.asarray(u).reshape(-1).astype(np.uint64)
    idx = [0, 1, 2, len(u) // 3, len(u) // 2, len(u) - 2, len(u) - 1]
    return dict(sum=int(u.sum(dtype=np.uint64)), xor=int(np.bitwise_xor.reduce(u)),
                samples=[[i, int(u[i])] for i in idx])


def main():
    fx = dict(jax=jax.__version__, partitionable=True)
    rng = np.random.default_rng(2024)

    # The raw hash: threefry2x32_p on counter pairs under one key.
    fx["threefry"] = []
    for key in [(0, 0), (0xFFFFFFFF, 0xFFFFFFFF), (0x13198A2E, 0x03707344), (1, 2),
                tuple(int(v) for v in rng.integers(0, 2**32, 2, dtype=np.uint64))]:
        ctr = rng.integers(0, 2**32, (6, 2), dtype=np.uint64).astype(np.uint32)
        ctr[0] = (0, 0)
        k1, k2 = (jnp.full((6,), key[0], jnp.uint32), jnp.full((6,), key[1], jnp.uint32))
        o1, o2 = threefry2x32_p.bind(k1, k2, jnp.asarray(ctr[:, 0]), jnp.asarray(ctr[:, 1]))
        fx["threefry"].append(dict(key=list(key), counter=words(ctr),
                                   out=words(np.stack([o1, o2], -1))))

    seeds = [0, 1, 42, 12345, 2**31 - 1]
    fx["keys"] = [dict(seed=s, key=kd(jax.random.key(s))) for s in seeds]
    fx["split"] = [dict(key=kd(jax.random.key(s)), n=n,
                        keys=words(jax.random.key_data(jax.random.split(jax.random.key(s), n))))
                   for s in [0, 42, 7] for n in [1, 2, 3, 5]]
    fx["fold_in"] = [dict(key=kd(jax.random.key(s)), data=d,
                          key_out=kd(jax.random.fold_in(jax.random.key(s), d)))
                     for s in [0, 42] for d in [0, 1, 7, 123456, 2**32 - 1]]

    # Draws from a few keys: seeds, and split/fold_in-derived keys.
    draw_keys = [jax.random.key(0), jax.random.key(42),
                 jax.random.split(jax.random.key(7), 3)[2],
                 jax.random.fold_in(jax.random.key(1), 99)]
    shapes = [[], [1], [7], [4, 5], [2, 3, 4]]
    fx["bits"] = [dict(key=kd(k), shape=sh, bits=words(jax.random.bits(k, tuple(sh), jnp.uint32)))
                  for k in draw_keys for sh in shapes]
    fx["uniform_f32"] = [dict(key=kd(k), shape=sh, bits=fbits(jax.random.uniform(k, tuple(sh), jnp.float32)))
                         for k in draw_keys for sh in shapes]
    fx["normal_f32"] = [dict(key=kd(k), shape=sh, bits=fbits(jax.random.normal(k, tuple(sh), jnp.float32)))
                        for k in draw_keys for sh in shapes]
    # Many normals from one key (tails), all kept: the ulp comparison.
    fx["normal_f32_many"] = dict(key=kd(jax.random.key(3)), shape=[20000],
                                 bits=fbits(jax.random.normal(jax.random.key(3), (20000,), jnp.float32)))
    # Large draws (the kernel's parallel path), summarized.
    fx["bits_large"] = [dict(key=kd(k), shape=sh, **summary(jax.random.bits(k, tuple(sh), jnp.uint32)))
                        for k, sh in [(jax.random.key(5), [300000]), (jax.random.key(6), [3, 1000, 70])]]
    fx["uniform_f32_large"] = [dict(key=kd(jax.random.key(8)), shape=[250000],
                                    **summary(np.asarray(jax.random.uniform(jax.random.key(8), (250000,))).view(np.uint32)))]
    fx["uniform_half"] = [dict(key=kd(k), shape=[9], dtype=name,
                               bits=fbits(jax.random.uniform(k, (9,), dt)))
                          for k in draw_keys[:2] for name, dt in [("f16", jnp.float16), ("bf16", jnp.bfloat16)]]

    # Samplers built on the bits, by JAX's algorithms.
    fx["randint"] = [dict(key=kd(k), low=lo, high=hi, shape=[12],
                          values=words(jax.random.randint(k, (12,), lo, hi, jnp.int32)))
                     for k in draw_keys[:2]
                     for lo, hi in [(0, 10), (-3, 2), (-1000, 70000), (0, 2**31 - 1), (-2**31, 2**31 - 1)]]
    fx["permutation"] = [dict(key=kd(k), n=n, values=words(jax.random.permutation(k, n)))
                         for k in draw_keys[:2] for n in [1, 2, 10, 100, 2000]]
    fx["bernoulli"] = [dict(key=kd(k), p=p, shape=[16],
                            values=[int(v) for v in np.asarray(jax.random.bernoulli(k, p, (16,)))])
                       for k in draw_keys[:2] for p in [0.1, 0.5, 0.9]]
    fx["gumbel_f32"] = [dict(key=kd(k), shape=[10], bits=fbits(jax.random.gumbel(k, (10,), jnp.float32)))
                        for k in draw_keys[:2]]
    logits = rng.standard_normal((6, 5)).astype(np.float32)
    fx["categorical"] = [dict(key=kd(k), logits=fbits(logits), shape=[6, 5], axis=ax,
                              values=words(jax.random.categorical(k, jnp.asarray(logits), axis=ax)))
                         for k in draw_keys[:2] for ax in [-1, 0]]
    fx["truncated_normal_f32"] = [dict(key=kd(k), lo=lo, hi=hi, shape=[10],
                                       bits=fbits(jax.random.truncated_normal(k, lo, hi, (10,), jnp.float32)))
                                  for k in draw_keys[:2] for lo, hi in [(-2.0, 2.0), (0.5, 3.0)]]

    # 64-bit mode: large seeds, f64 draws.
    jax.config.update("jax_enable_x64", True)
    big = [2**32 - 1, 2**32, 2**32 + 7, 2**40 + 12345, 2**62 + 99, 2**63 - 1]
    fx["keys_x64"] = [dict(seed=s, key=kd(jax.random.key(s))) for s in big]
    fx["uniform_f64"] = [dict(key=kd(k), shape=[9], bits=fbits(jax.random.uniform(k, (9,), jnp.float64)))
                         for k in [jax.random.key(0), jax.random.key(42)]]
    fx["normal_f64"] = [dict(key=kd(k), shape=[9], bits=fbits(jax.random.normal(k, (9,), jnp.float64)))
                        for k in [jax.random.key(0), jax.random.key(42)]]

    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(fx, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes)")


if __name__ == "__main__":
    main()
