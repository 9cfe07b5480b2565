"""JAX's side of `bench_probe` (crates/rune/examples/bench_probe.rs): held-out
variants of W12-W15's classes, the same programs and closed-form inputs,
timed as the anchors do (warmup untimed calls, individually timed calls
ending in block_until_ready; min and median). Prints JSON lines.

Usage: python probe_jax.py [--only P1,P4]
"""
import argparse, json, statistics, sys, time
import numpy as np
import jax, jax.numpy as jnp


def inp(shape, seed, scale):
    n = int(np.prod(shape))
    return jnp.asarray((scale * np.sin(0.7 * np.arange(n, dtype=np.float64) + seed))
                       .astype(np.float32).reshape(shape))


def p1():
    T, B, I, H = 100, 16, 8, 64
    xs = inp((T, B, I), 1.0, 1.0)
    p = (inp((H, H), 2.0, 1 / 8), inp((I, H), 3.0, 1 / np.sqrt(8)), inp((H,), 4.0, 0.1))
    def loss(p):
        wh, wx, b = p
        def body(h, x):
            h = jnp.tanh(h @ wh + x @ wx + b)
            return h, h
        _, hs = jax.lax.scan(body, jnp.zeros((B, H), jnp.float32), xs)
        return jnp.mean(hs ** 2)
    return jax.jit(jax.value_and_grad(loss)), p


P2_OPS = [jnp.cos, lambda x: x * 1.1 - 0.1, jax.nn.softplus, lambda x: x * jax.nn.sigmoid(x),
          jax.lax.erf, lambda x: jnp.sqrt(x * x + 1.0), jnp.tanh, jnp.arctan,
          lambda x: jnp.exp(-x * x)]


def p2():
    x = inp((4096,), 5.0, 1.0)
    def loss(x):
        for i in range(90):
            x = P2_OPS[i % 9](x)
        return jnp.sum(x)
    return jax.jit(jax.grad(loss)), x


def p3():
    a = inp((32, 16), 6.0, 0.25)
    xs = inp((128, 16), 7.0, 1.0)
    f = lambda x: jnp.sum(jax.nn.softplus(a @ x))
    return jax.jit(jax.vmap(jax.hessian(f))), xs


def transformer(B, T, D, H, F):
    w = lambda i, o, s: inp((i, o), s, 1 / np.sqrt(i))
    p = dict(wq=w(D, D, 1.0), wk=w(D, D, 2.0), wv=w(D, D, 3.0), wo=w(D, D, 4.0),
             w1=w(D, F, 5.0), w2=w(F, D, 6.0), b1=inp((F,), 7.0, 0.1), b2=inp((D,), 8.0, 0.1),
             g1=inp((D,), 9.0, 0.1) + 1.0, g2=inp((D,), 10.0, 0.1) + 1.0)
    x = inp((B, T, D), 11.0, 1.0)
    tgt = inp((B, T, D), 12.0, 1.0)
    hd = D // H
    def ln(z, g):
        m = z.mean(-1, keepdims=True); v = ((z - m) ** 2).mean(-1, keepdims=True)
        return (z - m) / jnp.sqrt(v + 1e-5) * g
    def block(p, x):
        h = ln(x, p["g1"])
        def split(t): return t.reshape(B, T, H, hd).transpose(0, 2, 1, 3)
        q, k, v = split(h @ p["wq"]), split(h @ p["wk"]), split(h @ p["wv"])
        s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hd)
        s = jnp.where(jnp.tril(jnp.ones((T, T), bool)), s, -1e9)
        a = jax.nn.softmax(s, axis=-1) @ v
        x = x + a.transpose(0, 2, 1, 3).reshape(B, T, D) @ p["wo"]
        h = ln(x, p["g2"])
        return x + jax.nn.gelu(h @ p["w1"] + p["b1"], approximate=True) @ p["w2"] + p["b2"]
    def loss(p):
        return jnp.mean((block(p, x) - tgt) ** 2)
    @jax.jit
    def step(p):
        l, g = jax.value_and_grad(loss)(p)
        return l, jax.tree.map(lambda a, b: a - 0.01 * b, p, g)
    return step, p


def p6():
    s0 = (inp((32,), 11.0, 1.0) + 1.0, inp((32,), 12.0, 1.0), inp((32,), 13.0, 1.0) + 20.0)
    params = (jnp.float32(10.0), jnp.float32(28.0), jnp.float32(8.0 / 3.0))
    def loss(p):
        sigma, rho, beta = p
        dt = 0.002
        def body(c, _):
            x, y, z = c
            dx = sigma * (y - x); dy = x * (rho - z) - y; dz = x * y - beta * z
            return (x + dt * dx, y + dt * dy, z + dt * dz), None
        (x, y, z), _ = jax.lax.scan(body, s0, None, length=500)
        return jnp.mean(x ** 2 + y ** 2 + z ** 2)
    return jax.jit(jax.grad(loss)), params


PROBES = {
    "P1": (p1, "us", 20, 300),
    "P2": (p2, "us", 50, 1000),
    "P3": (p3, "us", 20, 500),
    "P4": (lambda: transformer(4, 64, 128, 4, 512), "ms", 5, 50),
    "P5": (lambda: transformer(2, 256, 384, 6, 1536), "ms", 5, 50),
    "P6": (p6, "us", 20, 300),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=",".join(PROBES))
    a = ap.parse_args()
    for name in a.only.split(","):
        make, unit, warm, reps = PROBES[name]
        f, arg = make()
        out = jax.block_until_ready(f(arg))
        cs = float(sum(np.asarray(l, np.float64).sum() for l in jax.tree.leaves(out)))
        print(json.dumps({"id": name, "framework": "jax", "checksum": cs}))
        for _ in range(warm):
            jax.block_until_ready(f(arg))
        ts = []
        for _ in range(reps):
            t = time.perf_counter(); jax.block_until_ready(f(arg)); ts.append(time.perf_counter() - t)
        k = 1e3 if unit == "ms" else 1e6
        print(json.dumps({"id": name, "framework": "jax", "unit": unit,
                          "min": min(ts) * k, "median": statistics.median(ts) * k}), flush=True)


if __name__ == "__main__":
    main()
