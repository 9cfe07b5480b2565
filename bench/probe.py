"""Held-out variants of W12-W15 (crates/rune/examples/bench_probe.rs), ours
beside jax.jit (probe_jax.py) in one run on this machine; prints a markdown
table of min/median times and the ratio ours/JAX (from the min times), and
each side's checksum of the outputs (the same closed-form inputs on both
sides, so they agree to rounding).

Usage: python3 bench/probe.py --python /work/.venv-bench/bin/python
"""
import argparse, json, os, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rows(cmd, **kw):
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, **kw).stdout
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=sys.executable)
    a = ap.parse_args()
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "rune", "--example", "bench_probe"],
                   cwd=ROOT, check=True)
    ours = rows([os.path.join(ROOT, "target/release/examples/bench_probe")], cwd=ROOT)
    jax = rows([a.python, os.path.join(ROOT, "bench/probe_jax.py")], cwd=ROOT)
    def pick(rs, fw):
        t = {r["id"]: r for r in rs if r["framework"] == fw and "min" in r}
        c = {r["id"]: r["checksum"] for r in rs if r["framework"] == fw and "checksum" in r}
        return t, c
    (ot, oc), (jt, jc) = pick(ours, "ours"), pick(jax, "jax")
    print("| probe | unit | ours (min / median) | jax.jit (min / median) | ours / jax.jit | checksums (ours, jax) |")
    print("|---|---|---|---|---|---|")
    for pid, o in ot.items():
        j = jt[pid]
        print(f"| {pid} {o['variant']} | {o['unit']} | {o['min']:.4g} / {o['median']:.4g} | "
              f"{j['min']:.4g} / {j['median']:.4g} | **{o['min'] / j['min']:.2f}x** | "
              f"{oc[pid]:.6g}, {jc[pid]:.6g} |")


if __name__ == "__main__":
    main()
