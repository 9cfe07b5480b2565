//! Lowering and rendering: a `Kernel` becomes a loop nest over its shape
//! (dims merged where every access allows) and then C source. The
//! per-element operations come from `c_ops`, so the dialect-specific part of
//! rendering is the function frame and the loop (CUDA C later adds its own).
//!
//! Every kernel has the signature
//! `void name(void *const *b, int64_t lo, int64_t hi)`: `b[0]` is the output
//! buffer, `b[1 + k]` argument `k`; the kernel covers outer indices
//! `lo..hi` of its first loop, so the runtime can split it across threads.

use crate::c_ops;
use crate::schedule::{Kernel, Node};
use nx::DType;
use std::fmt::Write;

/// A kernel lowered to a loop nest: merged dims and, per load, its offset
/// and strides over them.
pub struct LoopNest {
    pub dims: Vec<usize>,
    /// For each node index that is a load: (offset, strides over `dims`).
    loads: Vec<Option<(usize, Vec<isize>)>>,
}

impl LoopNest {
    /// Extent of the outer loop (what the runtime splits).
    pub fn outer(&self) -> usize {
        self.dims[0]
    }
}

/// Merges the kernel's dims: size-1 dims go, and neighbours merge when the
/// output and every load step through them as one.
pub fn lower(k: &Kernel) -> LoopNest {
    let keep: Vec<usize> = (0..k.shape.len()).filter(|&d| k.shape[d] != 1).collect();
    let mut dims: Vec<usize> = keep.iter().map(|&d| k.shape[d]).collect();
    let mut loads: Vec<Option<(usize, Vec<isize>)>> = k
        .nodes
        .iter()
        .map(|n| match n {
            Node::Load { layout, .. } => Some((
                layout.offset,
                keep.iter().map(|&d| layout.strides[d]).collect(),
            )),
            _ => None,
        })
        .collect();
    if dims.is_empty() {
        dims.push(1);
        for (_, s) in loads.iter_mut().flatten() {
            s.push(0);
        }
    }
    // Merge from the inside out: d-1 into d when stride[d-1] == stride[d] * dims[d]
    // for every load (the output is contiguous, so it always merges).
    let mut d = dims.len() - 1;
    while d > 0 {
        let ok = loads
            .iter()
            .flatten()
            .all(|(_, s)| s[d - 1] == s[d] * dims[d] as isize);
        if ok {
            dims[d - 1] *= dims[d];
            dims.remove(d);
            for (_, s) in loads.iter_mut().flatten() {
                s.remove(d - 1);
            }
        }
        d -= 1;
    }
    LoopNest { dims, loads }
}

fn node_dtype(k: &Kernel, i: usize) -> DType {
    match &k.nodes[i] {
        Node::Load { arg, .. } => k.arg_dtypes[*arg],
        Node::Lit { dtype, .. } => *dtype,
        Node::Unary { dtype, .. } | Node::Binary { dtype, .. } | Node::Where { dtype, .. } => {
            *dtype
        }
        Node::Compare { .. } => DType::Bool,
        Node::Cast { to, .. } => *to,
    }
}

/// C source of kernel `k` as function `name`.
pub fn render(name: &str, k: &Kernel, nest: &LoopNest) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "void {name}(void *const *b, int64_t lo, int64_t hi) {{");
    let _ = writeln!(
        s,
        "  {} *restrict out = ({} *)b[0];",
        c_ops::c_type(k.out_dtype),
        c_ops::c_type(k.out_dtype)
    );
    for (a, &dt) in k.arg_dtypes.iter().enumerate() {
        let t = c_ops::c_type(dt);
        let _ = writeln!(s, "  const {t} *a{a} = (const {t} *)b[{}];", a + 1);
    }
    let nd = nest.dims.len();
    let mut indent = String::from("  ");
    for (d, &n) in nest.dims.iter().enumerate() {
        let (from, to) = if d == 0 {
            ("lo".to_string(), "hi".to_string())
        } else {
            ("0".to_string(), format!("{n}"))
        };
        let _ = writeln!(
            s,
            "{indent}for (int64_t i{d} = {from}; i{d} < {to}; i{d}++) {{"
        );
        indent.push_str("  ");
    }
    // Output index: row-major over the merged dims.
    let mut oidx = String::from("i0");
    for d in 1..nd {
        oidx = format!("({oidx}) * {} + i{d}", nest.dims[d]);
    }
    for (i, n) in k.nodes.iter().enumerate() {
        let t = c_ops::c_type(node_dtype(k, i));
        let v = |j: &usize| format!("v{j}");
        let e = match n {
            Node::Load { arg, .. } => {
                let (off, strides) = nest.loads[i].as_ref().unwrap();
                let mut idx = format!("{off}");
                for (d, &st) in strides.iter().enumerate() {
                    if st != 0 {
                        let _ = write!(idx, " + i{d} * ({st})");
                    }
                }
                format!("a{arg}[{idx}]")
            }
            Node::Lit { dtype, value } => c_ops::literal(*dtype, *value),
            Node::Unary { op, dtype, x } => c_ops::unary(*op, *dtype, &v(x)),
            Node::Binary { op, dtype, a, b } => c_ops::binary(*op, *dtype, &v(a), &v(b)),
            Node::Compare { op, dtype, a, b } => c_ops::compare(*op, *dtype, &v(a), &v(b)),
            Node::Where { dtype, c, a, b } => c_ops::select(*dtype, &v(c), &v(a), &v(b)),
            Node::Cast { from, to, x } => c_ops::cast(*from, *to, &v(x)),
        };
        let _ = writeln!(s, "{indent}{t} v{i} = {e};");
    }
    let _ = writeln!(s, "{indent}out[{oidx}] = v{};", k.root);
    for _ in 0..nd {
        indent.truncate(indent.len() - 2);
        let _ = writeln!(s, "{indent}}}");
    }
    s.push_str("}\n");
    s
}
