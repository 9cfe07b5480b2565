#!/usr/bin/env python3
"""Import cycles among the top-level modules of each crate (ARCHITECTURE.md
lists them and says why nx's core knot is natural).

A module's imports are the `crate::NAME` paths in its files (a folder module
counts its files' `super::NAME` too), comments and `#[cfg(test)] mod tests`
left out; a NAME the crate root re-exports (`pub use tensor::Tensor;` in
lib.rs) counts as an import of the module it comes from. Prints each crate's strongly connected components of more than
one module.

    python3 tools/import_cycles.py            # list
    python3 tools/import_cycles.py --check    # exit 1 on a cycle other than nx's core
"""
import os
import re
import sys

ALLOWED = {"nx": [["cpu", "raw", "storage", "tensor", "trace"]]}


def reexports(src):
    """Names lib.rs re-exports from its modules: {name: module}."""
    lib = os.path.join(src, "lib.rs")
    if not os.path.exists(lib):
        return {}
    text = open(lib).read()
    out = {}
    for mod, rest in re.findall(r"pub use (\w+)::([^;]*);", text):
        if "{" in rest:
            inner = rest[rest.index("{"):]
            names = re.findall(r"(?:^|[{,])\s*(?:\w+::)*(\w+)(?:\s+as\s+(\w+))?", inner)
            for name, alias in names:
                out[alias or name] = mod
        else:
            m = re.match(r"(?:\w+::)*(\w+)(?:\s+as\s+(\w+))?", rest)
            if m:
                out[m.group(2) or m.group(1)] = mod
    return out


def imports(src):
    mods = {}
    roots = reexports(src)
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, src)[:-3]
            top = rel.split(os.sep)[0]
            if top in ("lib", "main"):
                continue
            text = open(path).read()
            text = "\n".join(l for l in text.split("\n") if not l.strip().startswith("//"))
            text = re.sub(r"#\[cfg\(test\)\]\s*mod tests\s*\{.*", "", text, flags=re.S)
            deps = set(re.findall(r"crate::(\w+)", text))
            for group in re.findall(r"use crate::\{([^}]*)\}", text):
                deps |= set(re.findall(r"(?:^|,)\s*(\w+)", group))
            if os.sep in rel:
                deps |= set(re.findall(r"super::(\w+)", text))
            deps = {roots.get(d, d) for d in deps}
            mods.setdefault(top, set()).update(d for d in deps if d != top)
    return {m: {d for d in deps if d in mods} for m, deps in mods.items()}


def cycles(graph):
    """Tarjan's strongly connected components of more than one node."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates")
    bad = False
    for crate in ("nx", "tolk", "rune"):
        found = cycles(imports(os.path.join(root, crate, "src")))
        print(f"{crate}: {found if found else 'no cycle'}")
        bad |= any(c not in ALLOWED.get(crate, []) for c in found)
    if "--check" in sys.argv and bad:
        print("an import cycle other than nx's core (see ARCHITECTURE.md)")
        sys.exit(1)


if __name__ == "__main__":
    main()
