#!/usr/bin/env python3
"""The GPU check's table (issue 45; bench/gpu_check.sh prints it): the JSON
lines of crates/rune/examples/bench_gpu.rs (ours) and bench/gpu_jax.py
(jax.jit) side by side, one row per workload (min and median per call, the
ratio ours / jax.jit: below 1 is faster), then the lines the issue's GPU
targets read off: W1's bandwidth as a share of the device's copy (target 85%
or more), W3's GFLOP/s as a share of cuBLAS's SGEMM peak (target 70% or
more), the bytes a steady call moved between host and device, the checks
against eager, and every error row. Standard library only.

  python3 bench/gpu_table.py OURS.jsonl JAX.jsonl
"""
import json
import sys

ROWS = [("W1", "W1", "exp(x) * y + 1, f32[4M]"),
        ("W3", "W3", "a @ b, f32[1024, 1024]"),
        ("W3", "W3_DEFAULT_PRECISION", "W3, jax at Precision.DEFAULT"),
        ("W4", "W4", "MLP 784-512-512-10 step"),
        ("W15", "W15", "transformer block step"),
        ("W17", "W17", "2-layer GNN step")]


def read(path):
    """The JSON lines of `path` (other lines skipped), or [] if unreadable."""
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError:
                        pass
    except OSError:
        pass
    return rows


def timing(rows, wid):
    """The timing row of `wid` (one with a min), or None."""
    for r in rows:
        if r.get("id") == wid and "min" in r and "error" not in r:
            return r
    return None


def describe(rows):
    d = next((r for r in rows if r.get("id") == "DEVICE"), None)
    if d is None:
        return "(no output)"
    if "error" in d:
        return "unavailable: " + d["error"]
    return f"{d.get('device')} ({d.get('describe')})"


def ms(r):
    return f"{r['min']:.4g} / {r['median']:.4g}" if r else "-"


def pct(part, whole):
    return f"{100 * part / whole:.0f}%"


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-1])
        return 2
    ours, jax = read(sys.argv[1]), read(sys.argv[2])
    out = [f"ours:    {describe(ours)}", f"jax.jit: {describe(jax)}", ""]
    header = ("workload", "", "ours ms min / median", "jax.jit ms min / median",
              "ratio min / median")
    table = [header]
    for our_id, jax_id, what in ROWS:
        o, j = timing(ours, our_id), timing(jax, jax_id)
        if jax_id != our_id and j is None:
            continue  # the extra JAX row, absent
        ratio = f"{o['min'] / j['min']:.2f}x / {o['median'] / j['median']:.2f}x" if o and j else "-"
        label = our_id if jax_id == our_id else f"({our_id})"
        table.append((label, what, ms(o), ms(j), ratio))
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for r in table:
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    out.append("(ratio: ours / jax.jit, below 1 is faster; target on the GPU: every row <= 1.0x)")
    out.append("")

    w1, bw = timing(ours, "W1"), timing(ours, "PEAK_BW")
    jw1 = timing(jax, "W1")
    if w1 and bw:
        line = (f"W1 bandwidth: ours {w1['gb_per_s']:.0f} GB/s = {pct(w1['gb_per_s'], bw['gb_per_s'])} "
                f"of the reference's {bw['gb_per_s']:.0f} GB/s ({bw['variant']}; target >= 85%)")
        if jw1:
            line += f"; jax.jit {jw1['gb_per_s']:.0f} GB/s = {pct(jw1['gb_per_s'], bw['gb_per_s'])}"
        out.append(line)
        if max(w1["gb_per_s"], jw1["gb_per_s"] if jw1 else 0) > bw["gb_per_s"]:
            out.append("  (above the reference: part of W1's 48 MiB stays in a cache between calls)")
    w3, peak, bare = timing(ours, "W3"), timing(ours, "PEAK_GEMM"), timing(ours, "GEMM_W3")
    jw3 = timing(jax, "W3")
    if w3 and peak:
        line = (f"W3 throughput: ours {w3['gflop_per_s']:.0f} GFLOP/s = "
                f"{pct(w3['gflop_per_s'], peak['gflop_per_s'])} of the peak's "
                f"{peak['gflop_per_s']:.0f} GFLOP/s ({peak['variant']}; target >= 70%)")
        if bare:
            line += (f"; {pct(w3['gflop_per_s'], bare['gflop_per_s'])} of the bare call at W3's "
                     f"size, {bare['gflop_per_s']:.0f} GFLOP/s")
        if jw3:
            line += (f"; jax.jit {jw3['gflop_per_s']:.0f} GFLOP/s = "
                     f"{pct(jw3['gflop_per_s'], peak['gflop_per_s'])}")
        out.append(line)
    moved = [f"{wid} {timing(ours, wid)['bytes_host_device_per_call']}"
             for wid in ("W1", "W3", "W4", "W15", "W17") if timing(ours, wid)]
    if moved:
        out.append("ours, bytes between host and device per steady call: " + ", ".join(moved))
    checks = [f"{r['id']} {r['max_rel_err']:.1e} (tolerance {r['tolerance']:.0e})"
              for r in ours if str(r.get("variant", "")).startswith("check:")]
    if checks:
        out.append("ours against eager, max relative error: " + ", ".join(checks))
    for side, rows in (("ours", ours), ("jax.jit", jax)):
        for r in rows:
            if "error" in r:
                msg = str(r["error"]).strip().replace("\n", " ")[:600]
                out.append(f"ERROR {side} {r.get('id')}: {msg}")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
