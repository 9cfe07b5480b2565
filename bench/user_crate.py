#!/usr/bin/env python3
"""Eager speed in a user's crate against the workspace build (issue 14,
"Measure"): W1 exp(x)*y+1 on 4M f32, W2 sum of 4M f32, W4 (value_and_grad +
SGD, MLP 784-512-512-10, batch 128) and C1 (grad of the 100-op chain on [64]).

Builds `bench_user` twice from the one source (crates/rune/examples/bench_user.rs):
as an example of `rune` in the workspace, and as an example of
crates/rune-user, a crate outside the workspace built with no RUSTFLAGS and its
own target dir (what a dependent crate gets). Optionally also runs the old
`-C target-cpu=native` build's binaries (main's bench_eager for W1/W2 and
bench_jit for W4/C1, `--native DIR`). The binaries run alternately, `--rounds`
times; each row keeps the best per-run min and the best per-run median.

    python3 bench/user_crate.py [--rounds 5] [--native /work/main/target/release/examples] [--levels] [--no-build]

`--levels` adds the user binary at each lower kernel level (NX_CPU_LEVEL).
Prints a markdown table.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IDS = ["W1", "W2", "W4", "C1"]


def build():
    env = dict(os.environ)
    env.pop("RUSTFLAGS", None)
    subprocess.run(["cargo", "build", "--release", "-p", "rune", "--example", "bench_user"],
                   cwd=ROOT, check=True)
    subprocess.run(["cargo", "build", "--release", "--manifest-path", "crates/rune-user/Cargo.toml",
                    "--target-dir", "target/rune-user", "--example", "bench_user"],
                   cwd=ROOT, check=True, env=env)
    return (os.path.join(ROOT, "target/release/examples/bench_user"),
            os.path.join(ROOT, "target/rune-user/release/examples/bench_user"))


def rows(cmd, env=None):
    """{id: (min, median)} of the eager rows a benchmark prints."""
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True,
                         env=env).stdout
    got = {}
    for line in out.splitlines():
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if r.get("id") in IDS and "min" in r and "(jit)" not in r.get("variant", ""):
            got.setdefault(r["id"], (r["min"], r["median"]))
    return got


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--native", default=None,
                    help="folder of the target-cpu=native build's bench_eager and bench_jit")
    ap.add_argument("--levels", action="store_true")
    ap.add_argument("--no-build", action="store_true", help="run the binaries already built")
    args = ap.parse_args()
    workspace, user = (
        (os.path.join(ROOT, "target/release/examples/bench_user"),
         os.path.join(ROOT, "target/rune-user/release/examples/bench_user"))
        if args.no_build else build())
    runs = {"workspace": [workspace], "user crate": [user]}
    envs = {}
    if args.levels:
        for lvl in ["x86-64", "x86-64-v3"]:
            runs[f"user crate, {lvl}"] = [user]
            envs[f"user crate, {lvl}"] = dict(os.environ, NX_CPU_LEVEL=lvl)
    if args.native:
        runs["native (main)"] = None
    best = {k: {} for k in runs}
    for _ in range(args.rounds):
        for name, cmd in runs.items():
            if cmd is None:
                got = rows([os.path.join(args.native, "bench_eager"), "--only", "W1,W2"])
                got.update(rows([os.path.join(args.native, "bench_jit"), "--only", "W4,C1"]))
            else:
                got = rows(cmd, envs.get(name))
            for i, (mn, md) in got.items():
                old = best[name].get(i, (float("inf"), float("inf")))
                best[name][i] = (min(old[0], mn), min(old[1], md))
    level = subprocess.run([user], capture_output=True, text=True).stdout.splitlines()[0]
    print(f"{level}; {args.rounds} alternating rounds; best per-run min / median\n")
    names = list(runs)
    head = "| workload | unit | " + " | ".join(names) + " | user / workspace"
    if args.native:
        head += " | workspace / native"
    print(head + " |")
    print("|" + "---|" * (head.count("|")))
    units = {"W1": "ms", "W2": "ms", "W4": "ms", "C1": "us"}
    for i in IDS:
        cells = []
        for n in names:
            v = best[n].get(i)
            cells.append("-" if v is None else f"{v[0]:.3f} / {v[1]:.3f}")
        w, u = best["workspace"].get(i), best["user crate"].get(i)
        ratio = f"{u[0] / w[0]:.3f} / {u[1] / w[1]:.3f}" if w and u else "-"
        line = f"| {i} | {units[i]} | " + " | ".join(cells) + f" | {ratio}"
        if args.native:
            nv = best["native (main)"].get(i)
            line += f" | {w[0] / nv[0]:.3f} / {w[1] / nv[1]:.3f}" if w and nv else " | -"
        print(line + " |")


if __name__ == "__main__":
    sys.exit(main())
