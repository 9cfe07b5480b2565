"""JAX's side of the generality rows that are not in
shared/bench/generality/README.md, with its timing and first-call rules
(this imports jax_generality.py from there, unchanged, and adds workloads):

  W12take  W12 with the ring's neighbours taken by index, x[prev] and
           x[next] (int32 index arrays), instead of jnp.roll.

Usage: python generality_jax_extra.py [--only W12take] [--no-compile]
(the same flags as jax_generality.py; --child runs one first call).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "shared", "bench", "generality"))
import jax_generality as jg  # noqa: E402
from jax_generality import jax, jnp, np  # noqa: E402


def w12take(T=1000):
    """W12 (same inputs, seed 12) with lap = x[prev] - 2x + x[next]."""
    rng = np.random.default_rng(12)
    x0 = jnp.asarray(rng.standard_normal(64, dtype=np.float32))
    v0 = jnp.asarray(0.1 * rng.standard_normal(64, dtype=np.float32))
    prev = jnp.asarray(((np.arange(64) + 63) % 64).astype(np.int32))
    nxt = jnp.asarray(((np.arange(64) + 1) % 64).astype(np.int32))
    dt = 0.01

    def f(x, v):
        lap = x[prev] - 2.0 * x + x[nxt]
        return v, -jnp.sin(x) - 0.1 * v + 0.5 * lap

    def step(c, _):
        x, v = c
        k1x, k1v = f(x, v)
        k2x, k2v = f(x + dt / 2 * k1x, v + dt / 2 * k1v)
        k3x, k3v = f(x + dt / 2 * k2x, v + dt / 2 * k2v)
        k4x, k4v = f(x + dt * k3x, v + dt * k3v)
        x = x + dt / 6 * (k1x + 2 * k2x + 2 * k3x + k4x)
        v = v + dt / 6 * (k1v + 2 * k2v + 2 * k3v + k4v)
        return (x, v), None

    def loss(s):
        (x, v), _ = jax.lax.scan(step, s, None, length=T)
        return jnp.sum(x * x) + 0.1 * jnp.sum(v * v)

    return jax.jit(jax.grad(loss)), ((x0, v0),)


jg.WORKLOADS["W12take"] = (w12take, "jit(grad) 1000-step RK4 scan, 64 pendulums, neighbours by index", 5, 100, "ms")
# First calls in child processes re-run this file, which knows W12take.
jg.__file__ = os.path.abspath(__file__)

if __name__ == "__main__":
    if "--only" not in sys.argv:
        sys.argv += ["--only", "W12take"]
    jg.main()
