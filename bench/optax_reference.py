#!/usr/bin/env python3
"""Writes crates/rune/tests/fixtures/optax_reference.rs: Optax's numbers that
crates/rune/tests/optim.rs checks `rune::optim` against, so the tests never
need JAX.

Every optimizer runs STEPS updates, in f32, on a two-leaf parameter tree
{w: [2, 3], b: [3]} from fixed values, with fixed gradients per step (both
small multiples of powers of two, so the Rust test builds the same f32
inputs exactly); the file holds the parameters after each step, w's six
values then b's three. Each schedule is evaluated at steps 0..=SCHEDULE_STEPS.

Run from the repository root (Optax 0.2, JAX on the CPU):
  python3 -m venv .venv-optax && .venv-optax/bin/pip install jax optax
  .venv-optax/bin/python bench/optax_reference.py
"""
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "crates", "rune", "tests", "fixtures", "optax_reference.rs")

STEPS = 6
SCHEDULE_STEPS = 12


# The inputs: element i of the flat [w (6), b (3)] list. Keep in step with
# `initial_params` and `grads_at` in crates/rune/tests/optim.rs.
def initial_params():
    flat = np.array([((i * 5) % 9 - 4) / 8.0 for i in range(9)], np.float32)
    return {"w": jnp.asarray(flat[:6].reshape(2, 3)), "b": jnp.asarray(flat[6:])}


def grads_at(step):
    flat = np.array([((i * 7 + step * 3) % 11 - 5) / 4.0 for i in range(9)], np.float32)
    return {"w": jnp.asarray(flat[:6].reshape(2, 3)), "b": jnp.asarray(flat[6:])}


def flat(params):
    return [float(x) for x in np.asarray(params["w"]).ravel()] + [
        float(x) for x in np.asarray(params["b"]).ravel()
    ]


only_w = lambda p: {"w": True, "b": False}

# (name in the Rust test, the Optax optimizer): keep the names in step with
# `rust_optimizer` in crates/rune/tests/optim.rs.
OPTIMIZERS = [
    ("sgd", optax.sgd(0.1)),
    ("sgd_momentum", optax.sgd(0.1, momentum=0.9)),
    ("sgd_nesterov", optax.sgd(0.1, momentum=0.9, nesterov=True)),
    ("adam", optax.adam(0.1)),
    ("adam_b1_b2_eps", optax.adam(0.05, b1=0.8, b2=0.95, eps=1e-3)),
    ("adamw", optax.adamw(0.1, weight_decay=0.1)),
    ("adamw_masked", optax.adamw(0.1, weight_decay=0.5, mask=only_w)),
    ("lion", optax.lion(0.1)),
    ("lion_wd_masked", optax.lion(0.05, b1=0.8, b2=0.9, weight_decay=0.5, mask=only_w)),
    ("rmsprop", optax.rmsprop(0.1)),
    ("rmsprop_centered", optax.rmsprop(0.1, centered=True)),
    ("rmsprop_momentum", optax.rmsprop(0.1, momentum=0.9)),
    ("adagrad", optax.adagrad(0.1)),
    ("adagrad_initial", optax.adagrad(0.2, initial_accumulator_value=0.0, eps=1e-3)),
    ("clip_by_global_norm_adam", optax.chain(optax.clip_by_global_norm(1.0), optax.adam(0.1))),
    ("clip_sgd", optax.chain(optax.clip(0.5), optax.sgd(0.1))),
    ("adam_warmup_cosine", optax.adam(optax.warmup_cosine_decay_schedule(0.0, 0.1, 2, 6, 0.01))),
    ("sgd_exponential", optax.sgd(optax.exponential_decay(0.1, 2, 0.5, staircase=True))),
    ("sgd_piecewise", optax.sgd(optax.piecewise_constant_schedule(0.1, {2: 0.5, 4: 0.1}))),
    ("masked_adam", optax.masked(optax.adam(0.1), only_w)),
    # Adam accumulates over 2 calls: some means of 3 of these gradients are
    # exactly 0, where Adam's normalization blows XLA's inexact division by 3
    # (a product by the reciprocal: 1e-8, not 0) up to a full step.
    ("multi_steps_adam", optax.MultiSteps(optax.adam(0.1), every_k_schedule=2).gradient_transformation()),
    ("multi_steps_sgd_momentum", optax.MultiSteps(optax.sgd(0.1, momentum=0.9), every_k_schedule=3).gradient_transformation()),
    ("gpt_like", optax.chain(
        optax.clip_by_global_norm(2.0),
        optax.adamw(optax.warmup_cosine_decay_schedule(0.0, 0.05, 2, 8, 0.001),
                    weight_decay=0.1, mask=only_w),
    )),
]

# (name, schedule): keep in step with `rust_schedule` in the test.
SCHEDULES = [
    ("constant", optax.constant_schedule(0.3)),
    ("linear", optax.linear_schedule(1.0, 0.1, 5)),
    ("cosine", optax.cosine_decay_schedule(1.0, 8, 0.1)),
    ("cosine_no_alpha", optax.cosine_decay_schedule(0.5, 10)),
    ("warmup_cosine", optax.warmup_cosine_decay_schedule(0.0, 1.0, 3, 10, 0.05)),
    ("warmup_cosine_from", optax.warmup_cosine_decay_schedule(0.2, 1.0, 4, 9)),
    ("exponential", optax.exponential_decay(1.0, 3, 0.5)),
    ("exponential_staircase", optax.exponential_decay(2.0, 4, 0.1, staircase=True)),
    ("piecewise", optax.piecewise_constant_schedule(1.0, {3: 0.5, 6: 0.1, 9: 2.0})),
]


def run(opt):
    params = initial_params()
    state = opt.init(params)
    trajectory = []
    for step in range(STEPS):
        updates, state = opt.update(grads_at(step), state, params)
        params = optax.apply_updates(params, updates)
        trajectory.append(flat(params))
    return trajectory


def rust_f32(x):
    return repr(float(np.float32(x))) if np.isfinite(x) else "f32::NAN"


def main():
    lines = [
        "// Written by bench/optax_reference.py (Optax %s, JAX %s): do not edit." % (optax.__version__, jax.__version__),
        "// The parameters [w (6), b (3)] after each of OPTAX_STEPS updates, per",
        "// optimizer; each schedule at steps 0..=SCHEDULE_STEPS. f32 values.",
        "",
        "pub const OPTAX_STEPS: usize = %d;" % STEPS,
        "pub const SCHEDULE_STEPS: usize = %d;" % SCHEDULE_STEPS,
        "",
        "pub const OPTIMIZERS: &[(&str, [[f32; 9]; %d])] = &[" % STEPS,
    ]
    for name, opt in OPTIMIZERS:
        lines.append("    (\"%s\", [" % name)
        for row in run(opt):
            lines.append("        [%s]," % ", ".join(rust_f32(x) for x in row))
        lines.append("    ]),")
    lines.append("];")
    lines.append("")
    lines.append("pub const SCHEDULES: &[(&str, [f32; %d])] = &[" % (SCHEDULE_STEPS + 1))
    for name, schedule in SCHEDULES:
        values = [schedule(jnp.asarray(step, jnp.int32)) for step in range(SCHEDULE_STEPS + 1)]
        lines.append("    (\"%s\", [%s])," % (name, ", ".join(rust_f32(np.float32(v)) for v in values)))
    lines.append("];")
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
