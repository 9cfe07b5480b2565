"""What bench/w19.py and bench/w20.py share: the paths, building our
example, and one round of runs of ours and JAX's side, each printing
`key value` lines that `parse` reads."""
import os
import re
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
JAX_DIR = os.path.join(ROOT, "..", "shared", "bench", "generality")


def parse(out):
    return {k: float(v) for k, v in re.findall(r"^(\w+) ([-\d.]+)$", out, re.M)}


def build_example(name):
    """Builds rune's example `name` (release) and returns its binary's path."""
    subprocess.run(["cargo", "build", "--release", "-p", "rune", "--example", name],
                   cwd=ROOT, check=True)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    return os.path.join(target, "release", "examples", name)


def run(cmd, env=None):
    """One side's run: its parsed `key value` lines."""
    return parse(subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True,
                                env=env).stdout)
