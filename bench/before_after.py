#!/usr/bin/env python3
"""The same benchmark rows from two builds of the project, side by side, in
alternating rounds (each row's best min and median kept): for a change
that must not slow anything (issue 33's build-time work measured W1 eager,
W4 eager and jit, W7 and the user crate's W1 this way).

    python3 bench/before_after.py --before-target T1 --after-target T2 \
        --before-user U1 --after-user U2 [--rounds 5]

T1 and T2 are cargo target folders with bench_eager, bench_autodiff and
bench_jit built under release/examples; U1 and U2 are the rune-user
crate's bench_user binaries.
"""
import argparse
import json
import os
import subprocess

# (row label, binary under the examples folder or "user", args, id, variant filter)
ROWS = [
    ("W1 eager exp(x)*y+1, 4M f32", "bench_eager", ["--only", "W1"], "W1", None),
    ("W4 eager MLP step", "bench_autodiff", ["--only", "W4"], "W4", None),
    ("W4 jit MLP step", "bench_jit", ["--only", "W4,W7"], "W4", "jit"),
    ("W7 jit warm call", "bench_jit", ["--only", "W4,W7"], "W7", "jit"),
    ("user crate W1 eager", "user", [], "W1", None),
]


def run(exe, args):
    out = subprocess.run([exe] + args, check=True, capture_output=True, text=True).stdout
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


def pick(rows, rid, variant):
    for r in rows:
        if r.get("id") != rid or "min" not in r:
            continue
        v = r.get("variant", "")
        if variant is None and "jit" in v and "eager" not in v:
            continue
        if variant is not None and variant not in v:
            continue
        return r["min"], r["median"], r.get("unit", "")
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before-target", required=True)
    ap.add_argument("--after-target", required=True)
    ap.add_argument("--before-user", required=True)
    ap.add_argument("--after-user", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    sides = {
        "before": (os.path.join(a.before_target, "release/examples"), a.before_user),
        "after": (os.path.join(a.after_target, "release/examples"), a.after_user),
    }
    best = {s: {} for s in sides}
    for _ in range(a.rounds):
        for side, (ex, user) in sides.items():
            cache = {}
            for label, binary, args, rid, variant in ROWS:
                key = (binary, tuple(args))
                if key not in cache:
                    exe = user if binary == "user" else os.path.join(ex, binary)
                    cache[key] = run(exe, args)
                got = pick(cache[key], rid, variant)
                if got is None:
                    continue
                old = best[side].get(label)
                best[side][label] = got if old is None else (
                    min(old[0], got[0]), min(old[1], got[1]), got[2])
    print("| workload | unit | before (min / median) | after (min / median) | after / before (min) |")
    print("|---|---|---|---|---|")
    for label, *_ in ROWS:
        b, f = best["before"].get(label), best["after"].get(label)
        if not b or not f:
            print(f"| {label} | | {b} | {f} | |")
            continue
        print(f"| {label} | {b[2]} | {b[0]:.3g} / {b[1]:.3g} | {f[0]:.3g} / {f[1]:.3g} | {f[0] / b[0]:.2f} |")


if __name__ == "__main__":
    main()
