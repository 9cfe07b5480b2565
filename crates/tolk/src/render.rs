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
use nx::{BinaryOp, DType, ReduceOp};
use std::fmt::Write;

/// A kernel lowered to a loop nest: merged dims and, per load, its offset
/// and strides over them. For a reduction, the first `kept` dims are the
/// output's and the rest are reduced.
pub struct LoopNest {
    /// The loop extents, outermost first (adjacent dims merged where every
    /// load's strides allow).
    pub dims: Vec<usize>,
    /// How many leading dims are the output's (all of them for a kernel
    /// without a reduction).
    pub kept: usize,
    /// For each node index that is a load: (offset, strides over `dims`).
    loads: Vec<Option<(usize, Vec<isize>)>>,
    /// A product's epilogue (`Kernel::block`): `dims` is `[rows, cols]`
    /// and the column range comes from the last argument (two `int64_t`).
    pub block: bool,
}

impl LoopNest {
    /// Extent of the outer loop (what the runtime splits).
    pub fn outer(&self) -> usize {
        self.dims[0]
    }
}

/// Merges the kernel's dims: size-1 dims go, and neighbours merge when the
/// output and every load step through them as one (never across the
/// boundary between kept and reduced dims).
pub fn lower(k: &Kernel) -> LoopNest {
    if let Some(split) = k.block {
        let rows: usize = k.shape[..split].iter().product();
        let cols: usize = k.shape[split..].iter().product();
        let loads = k
            .nodes
            .iter()
            .map(|n| match n {
                Node::Load { layout, .. }
                | Node::Iota { layout, .. }
                | Node::Coord { layout, .. } => {
                    let (sr, sc) = crate::schedule::strides_2d(layout, split)
                        .expect("an epilogue's loads merge into rows and columns");
                    Some((layout.offset, vec![sr, sc]))
                }
                _ => None,
            })
            .collect();
        return LoopNest {
            dims: vec![rows, cols],
            kept: 2,
            loads,
            block: true,
        };
    }
    let nkept = k.reduce.map_or(k.shape.len(), |(_, kept)| kept);
    let groups = [0..nkept, nkept..k.shape.len()];
    let mut dims = Vec::new();
    let mut loads: Vec<Option<(usize, Vec<isize>)>> = k
        .nodes
        .iter()
        .map(|n| match n {
            Node::Load { layout, .. } | Node::Iota { layout, .. } | Node::Coord { layout, .. } => {
                Some((layout.offset, Vec::new()))
            }
            _ => None,
        })
        .collect();
    let mut kept = 0;
    for (gi, range) in groups.into_iter().enumerate() {
        if gi == 1 && k.reduce.is_none() {
            break;
        }
        let mut gdims: Vec<usize> = Vec::new();
        let mut gstrides: Vec<Vec<isize>> = vec![Vec::new(); k.nodes.len()];
        for d in range.filter(|&d| k.shape[d] != 1) {
            gdims.push(k.shape[d]);
            for (i, n) in k.nodes.iter().enumerate() {
                if let Node::Load { layout, .. }
                | Node::Iota { layout, .. }
                | Node::Coord { layout, .. } = n
                {
                    gstrides[i].push(layout.strides[d]);
                }
            }
        }
        if gdims.is_empty() {
            gdims.push(1);
            for st in gstrides.iter_mut() {
                st.push(0);
            }
        }
        // Merge from the inside out: d-1 into d when stride[d-1] ==
        // stride[d] * dims[d] for every load (the output is contiguous).
        let mut d = gdims.len() - 1;
        while d > 0 {
            let ok = loads
                .iter()
                .zip(&gstrides)
                .filter(|(l, _)| l.is_some())
                .all(|(_, s)| s[d - 1] == s[d] * gdims[d] as isize);
            if ok {
                gdims[d - 1] *= gdims[d];
                gdims.remove(d);
                for (l, st) in loads.iter().zip(gstrides.iter_mut()) {
                    if l.is_some() {
                        st.remove(d - 1);
                    }
                }
            }
            d -= 1;
        }
        if gi == 0 {
            kept = gdims.len();
        }
        dims.extend(gdims);
        for (l, st) in loads.iter_mut().zip(gstrides) {
            if let Some((_, s)) = l {
                s.extend(st);
            }
        }
    }
    LoopNest {
        dims,
        kept,
        loads,
        block: false,
    }
}

fn node_dtype(k: &Kernel, i: usize) -> DType {
    match &k.nodes[i] {
        Node::Load { arg, .. } => k.arg_dtypes[*arg],
        Node::Lit { dtype, .. } | Node::Iota { dtype, .. } | Node::Coord { dtype, .. } => *dtype,
        Node::Unary { dtype, .. } | Node::Binary { dtype, .. } | Node::Where { dtype, .. } => {
            *dtype
        }
        Node::Compare { .. } => DType::Bool,
        Node::Cast { to, .. } => *to,
    }
}

/// Whether the kernel has a node with a vectorized form whose rare inputs
/// need the exact, scalar one (`c_ops::unary_vectorized`).
fn has_guarded(k: &Kernel) -> bool {
    k.nodes.iter().any(|n| {
        matches!(n, Node::Unary { op, dtype, .. }
            if c_ops::unary_vectorized(*op, *dtype, "x").is_some())
    })
}

/// Which nodes are the same at every point of the loop nest: literals,
/// loads (and iotas) that step through no loop, and operations on those
/// only. They are computed once, before the loops. Besides the work saved,
/// a chain of them inside a loop (a broadcast scalar squared twice, then a
/// bf16 sigmoid) kept clang's loop vectorizer busy for over 20 minutes: its
/// analysis walks each use of a value, exponential in a chain of squares.
///
/// A load is hoisted only when the loops run at least once (the kernel
/// returns first on an empty range, and no loop of the nest is empty), so
/// that it reads an element the loops would have read.
fn invariant(k: &Kernel, nest: &LoopNest) -> Vec<bool> {
    let mut inv = vec![false; k.nodes.len()];
    let nonempty = nest.dims.iter().all(|&d| d > 0);
    for (i, n) in k.nodes.iter().enumerate() {
        inv[i] = match n {
            Node::Lit { .. } => true,
            Node::Load { .. } | Node::Iota { .. } | Node::Coord { .. } => {
                let masked_by_variant = match n {
                    Node::Load { mask: Some(m), .. } => !inv[m.when],
                    _ => false,
                };
                nonempty
                    && !masked_by_variant
                    && nest.loads[i]
                        .as_ref()
                        .is_some_and(|(_, strides)| strides.iter().all(|&st| st == 0))
            }
            Node::Unary { x, .. } | Node::Cast { x, .. } => inv[*x],
            Node::Binary { a, b, .. } | Node::Compare { a, b, .. } => inv[*a] && inv[*b],
            Node::Where { c, a, b, .. } => inv[*c] && inv[*a] && inv[*b],
        };
    }
    inv
}

/// The statements computing the nodes `pick` selects, in order, at the
/// loop indices `i0, i1, ...`. With `fast`, nodes that have a vectorized
/// form use it and fold their guard key into `big` (the largest so far).
fn body(
    k: &Kernel,
    nest: &LoopNest,
    indent: &str,
    fast: bool,
    pick: &dyn Fn(usize) -> bool,
) -> String {
    let mut s = String::new();
    for (i, n) in k.nodes.iter().enumerate().filter(|(i, _)| pick(*i)) {
        let t = c_ops::c_type(node_dtype(k, i));
        let v = |j: &usize| format!("v{j}");
        let index = || {
            let (off, strides) = nest.loads[i].as_ref().unwrap();
            let mut idx = format!("{off}");
            for (d, &st) in strides.iter().enumerate() {
                if st != 0 {
                    let _ = write!(idx, " + i{d} * ({st})");
                }
            }
            idx
        };
        let e = match n {
            Node::Load {
                arg, mask: None, ..
            } => format!("a{arg}[{}]", index()),
            // The element is read only where the mask holds: elsewhere its
            // address may lie outside the buffer.
            Node::Load {
                arg, mask: Some(m), ..
            } => format!("(v{} ? a{arg}[{} - ({})] : 0)", m.when, index(), m.bias),
            Node::Iota {
                stride, len, dtype, ..
            } => {
                let coord = format!("((int64_t)({}) / {stride}) % {len}", index());
                c_ops::cast(DType::I64, *dtype, &coord)
            }
            Node::Coord { dtype, .. } => {
                c_ops::cast(DType::I64, *dtype, &format!("(int64_t)({})", index()))
            }
            Node::Lit { dtype, bits } => c_ops::literal(*dtype, f64::from_bits(*bits)),
            Node::Unary { op, dtype, x } => {
                match c_ops::unary_vectorized(*op, *dtype, &v(x)).filter(|_| fast) {
                    Some((e, key)) => {
                        let _ = writeln!(
                            s,
                            "{indent}{{ uint32_t key = {key}; big = key > big ? key : big; }}"
                        );
                        e
                    }
                    None => c_ops::unary(*op, *dtype, &v(x)),
                }
            }
            Node::Binary { op, dtype, a, b } => c_ops::binary(*op, *dtype, &v(a), &v(b)),
            Node::Compare { op, dtype, a, b } => c_ops::compare(*op, *dtype, &v(a), &v(b)),
            Node::Where { dtype, c, a, b } => c_ops::select(*dtype, &v(c), &v(a), &v(b)),
            Node::Cast { from, to, x } => c_ops::cast(*from, *to, &v(x)),
        };
        let _ = writeln!(s, "{indent}{t} v{i} = {e};");
    }
    s
}

/// How a reduction accumulates: the accumulator's dtype, its initial value,
/// the C statement folding `v` into `acc`, and the final conversion.
struct Accumulate {
    dtype: DType,
    init: String,
    fold: String,
    finish: String,
}

fn accumulate(op: ReduceOp, dtype: DType, v: &str) -> Accumulate {
    use ReduceOp::*;
    let float = dtype.is_float();
    // Float sums and products accumulate in f64; integer ones wrap in u64
    // (the same residue modulo 2^bits as wrapping in the element type).
    let wide = if float { DType::F64 } else { DType::U64 };
    match op {
        Sum | Prod => {
            let x = c_ops::cast(dtype, wide, v);
            let (init, fold) = if op == Sum {
                (
                    c_ops::literal(wide, 0.0),
                    c_ops::binary(BinaryOp::Add, wide, "acc", &x),
                )
            } else {
                (
                    c_ops::literal(wide, 1.0),
                    c_ops::binary(BinaryOp::Mul, wide, "acc", &x),
                )
            };
            Accumulate {
                dtype: wide,
                init,
                fold,
                finish: c_ops::cast(wide, dtype, "acc"),
            }
        }
        Max | Min => {
            let init = if float {
                c_ops::literal(
                    dtype,
                    if op == Max {
                        f64::NEG_INFINITY
                    } else {
                        f64::INFINITY
                    },
                )
            } else {
                int_bound(dtype, op == Max)
            };
            let bop = if op == Max {
                BinaryOp::Max
            } else {
                BinaryOp::Min
            };
            Accumulate {
                dtype,
                init,
                fold: c_ops::binary(bop, dtype, "acc", v),
                finish: "acc".into(),
            }
        }
    }
}

/// The identity of integer max (the type's minimum) or min (its maximum).
fn int_bound(dtype: DType, lowest: bool) -> String {
    let t = c_ops::c_type(dtype);
    let bits = 8 * dtype.size_in_bytes();
    let v = match (dtype.is_signed_int(), lowest) {
        (true, true) => format!("(-{}LL - 1)", (1u64 << (bits - 1)) - 1),
        (true, false) => format!("{}LL", (1u64 << (bits - 1)) - 1),
        (false, true) => "0".to_string(),
        (false, false) => format!(
            "{}ULL",
            if bits == 64 {
                u64::MAX
            } else {
                (1u64 << bits) - 1
            }
        ),
    };
    format!("(({t}){v})")
}

/// Independent accumulators of a reduction's innermost loop (so the fold
/// is not one serial dependency chain).
const ACCS: usize = 8;

/// C source of kernel `k` as function `name`.
///
/// A kernel with f32 sin/cos/exp (`c_ops::unary_vectorized`) is two
/// functions: `name` computes the fast forms for every element and keeps
/// the largest guard key; when an input was beyond its form's range it
/// calls `name_exact`, the same loops with the exact forms, which rewrites
/// `out` for `lo..hi` (the same bits wherever the fast forms were in range).
pub fn render(name: &str, k: &Kernel, nest: &LoopNest) -> String {
    if !has_guarded(k) {
        return render_fn(name, k, nest, false);
    }
    let exact = format!("{name}_exact");
    format!(
        "static __attribute__((cold, noinline)) {}{}",
        render_fn(&exact, k, nest, false),
        render_fn(name, k, nest, true)
    )
}

/// One kernel function; `fast`: the vectorized forms, then `name_exact`
/// over the whole range when a guard held.
fn render_fn(name: &str, k: &Kernel, nest: &LoopNest, fast: bool) -> String {
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
    if fast {
        let _ = writeln!(s, "  uint32_t big = 0;");
    }
    if nest.block {
        let _ = writeln!(
            s,
            "  const int64_t c0 = ((const int64_t *)b[{0}])[0], c1 = ((const int64_t *)b[{0}])[1];",
            k.arg_dtypes.len() + 1
        );
    }
    // The invariant nodes, once (with the exact forms where the loops use
    // them: a tiled reduction's). Loads among them read element 0 of their
    // buffer, which an empty range may not have: nothing runs then.
    let tiled = k.reduce.zip(column_tile(k, nest));
    let inv = invariant(k, nest);
    if inv
        .iter()
        .zip(&k.nodes)
        .any(|(&i, n)| i && !matches!(n, Node::Lit { .. }))
    {
        s.push_str("  if (lo >= hi) return;\n");
    }
    s.push_str(&body(k, nest, "  ", fast && tiled.is_none(), &|i| inv[i]));
    let looped = |i: usize| !inv[i];
    let nd = nest.dims.len();
    let nkept = nest.kept;
    let mut indent = String::from("  ");
    let open = |s: &mut String, indent: &mut String, d: usize| {
        let (from, to) = if d == 0 {
            ("lo".to_string(), "hi".to_string())
        } else if d == 1 && nest.block {
            // Read once, before the loops: a store through a `uint8_t`
            // output may alias anything, and a bound reloaded per iteration
            // keeps the loop from vectorizing.
            ("c0".to_string(), "c1".to_string())
        } else {
            ("0".to_string(), format!("{}", nest.dims[d]))
        };
        let _ = writeln!(
            s,
            "{indent}for (int64_t i{d} = {from}; i{d} < {to}; i{d}++) {{"
        );
        indent.push_str("  ");
    };
    let close = |s: &mut String, indent: &mut String| {
        indent.truncate(indent.len() - 2);
        let _ = writeln!(s, "{indent}}}");
    };
    // Output index: row-major over the kept (for a map: all) dims.
    let mut oidx = String::from("i0");
    for d in 1..nkept {
        oidx = format!("({oidx}) * {} + i{d}", nest.dims[d]);
    }
    if let Some(((op, _), tile)) = tiled {
        // Tiled reductions use the exact forms (no guard to check).
        render_tiled(&mut s, k, nest, op, tile, &looped);
        return s;
    }
    // `stream` is only set on maps that are not epilogues.
    if k.stream && nd == 1 {
        render_streamed(&mut s, k, nest, fast, &looped);
        if fast {
            let _ = writeln!(s, "  if (TK_GUARD_FAILED(big)) {name}_exact(b, lo, hi);");
        }
        s.push_str("}\n");
        return s;
    }
    for d in 0..nkept {
        open(&mut s, &mut indent, d);
    }
    match k.reduce {
        None => {
            s.push_str(&body(k, nest, &indent, fast, &looped));
            let _ = writeln!(s, "{indent}out[{oidx}] = v{};", k.root);
        }
        Some((op, _)) => {
            let acc = accumulate(op, k.out_dtype, &format!("v{}", k.root));
            let at = c_ops::c_type(acc.dtype);
            let _ = writeln!(s, "{indent}{at} accs[{ACCS}];");
            let _ = writeln!(
                s,
                "{indent}for (int u = 0; u < {ACCS}; u++) accs[u] = {};",
                acc.init
            );
            for d in nkept..nd - 1 {
                open(&mut s, &mut indent, d);
            }
            // The innermost reduced loop, ACCS at a time, then the rest.
            let last = nd - 1;
            let n = nest.dims[last];
            let _ = writeln!(s, "{indent}int64_t r = 0;");
            let _ = writeln!(s, "{indent}for (; r + {ACCS} <= {n}; r += {ACCS}) {{");
            let _ = writeln!(s, "{indent}  for (int u = 0; u < {ACCS}; u++) {{");
            let inner = format!("{indent}    ");
            let _ = writeln!(s, "{inner}int64_t i{last} = r + u;");
            s.push_str(&body(k, nest, &inner, fast, &looped));
            let _ = writeln!(s, "{inner}{at} acc = accs[u];");
            let _ = writeln!(s, "{inner}accs[u] = {};", acc.fold);
            let _ = writeln!(s, "{indent}  }}");
            let _ = writeln!(s, "{indent}}}");
            let _ = writeln!(s, "{indent}for (; r < {n}; r++) {{");
            let inner = format!("{indent}  ");
            let _ = writeln!(s, "{inner}int64_t i{last} = r;");
            s.push_str(&body(k, nest, &inner, fast, &looped));
            let _ = writeln!(s, "{inner}{at} acc = accs[0];");
            let _ = writeln!(s, "{inner}accs[0] = {};", acc.fold);
            let _ = writeln!(s, "{indent}}}");
            for _ in nkept..nd - 1 {
                close(&mut s, &mut indent);
            }
            let merged = merge_accs(op, acc.dtype, &|u| format!("accs[{u}]"));
            let _ = writeln!(
                s,
                "{indent}{{ {at} acc = {merged}; out[{oidx}] = {}; }}",
                acc.finish
            );
        }
    }
    for _ in 0..nkept {
        close(&mut s, &mut indent);
    }
    if fast {
        let _ = writeln!(s, "  if (TK_GUARD_FAILED(big)) {name}_exact(b, lo, hi);");
    }
    s.push_str("}\n");
    s
}

/// The loop of a streaming map ([`Kernel::stream`](crate::schedule::Kernel)):
/// each tile of `TK_STREAM_TILE` elements (aligned to the tile in index
/// space, so that after a part's first tile the stores start on whole
/// lines) is computed into an L1 buffer, the same body and the same bits,
/// then stored past the cache by `tk_stream`.
fn render_streamed(
    s: &mut String,
    k: &Kernel,
    nest: &LoopNest,
    fast: bool,
    looped: &dyn Fn(usize) -> bool,
) {
    let t = c_ops::c_type(k.out_dtype);
    s.push_str("  for (int64_t t0 = lo; t0 < hi;) {\n");
    s.push_str("    int64_t t1 = (t0 / TK_STREAM_TILE + 1) * TK_STREAM_TILE;\n");
    s.push_str("    if (t1 > hi) t1 = hi;\n");
    let _ = writeln!(
        s,
        "    {t} tile[TK_STREAM_TILE] __attribute__((aligned(64)));"
    );
    s.push_str("    for (int64_t i0 = t0; i0 < t1; i0++) {\n");
    s.push_str(&body(k, nest, "      ", fast, looped));
    let _ = writeln!(s, "      tile[i0 - t0] = v{};", k.root);
    s.push_str("    }\n");
    let _ = writeln!(
        s,
        "    tk_stream(out + t0, tile, (t1 - t0) * (int64_t)sizeof({t}));"
    );
    s.push_str("    t0 = t1;\n  }\n  tk_stream_fence();\n");
}

/// Kept elements a column-wise reduction accumulates side by side.
const TILE: usize = 64;

/// The tile width for a reduction whose loads step by one along the
/// innermost kept dim but not along the innermost reduced one (a sum over
/// the rows of a row-major matrix): accumulating a tile of neighbouring
/// outputs at once reads contiguous memory and vectorizes, where one
/// output at a time walks a column. `None` for other reductions.
fn column_tile(k: &Kernel, nest: &LoopNest) -> Option<usize> {
    let (nkept, nd) = (nest.kept, nest.dims.len());
    if nkept == 0 || nd == nkept || nest.dims[nkept - 1] < ACCS {
        return None;
    }
    let strides: Vec<&Vec<isize>> = k
        .nodes
        .iter()
        .zip(&nest.loads)
        .filter(|(n, _)| matches!(n, Node::Load { .. }))
        .filter_map(|(_, l)| l.as_ref().map(|(_, s)| s))
        .collect();
    let kept_unit = strides.iter().any(|s| s[nkept - 1].abs() == 1)
        && strides.iter().all(|s| s[nkept - 1].abs() <= 1);
    let reduced_unit = strides.iter().any(|s| s[nd - 1].abs() == 1);
    (kept_unit && !reduced_unit).then_some(TILE.min(nest.dims[nkept - 1]))
}

/// A reduction rendered with the innermost kept dim in tiles of `tile`:
/// each output of the tile has its own `ACCS` accumulators, folded in the
/// same order as the one-output-at-a-time loop (element `r` of the
/// innermost reduced dim into accumulator `r % ACCS` while a full group of
/// `ACCS` remains, the rest into accumulator 0, then the pairwise merge), so
/// the result is the same bit for bit; only the loops are interchanged.
fn render_tiled(
    s: &mut String,
    k: &Kernel,
    nest: &LoopNest,
    op: ReduceOp,
    tile: usize,
    looped: &dyn Fn(usize) -> bool,
) {
    let nd = nest.dims.len();
    let nkept = nest.kept;
    let kd = nkept - 1;
    let acc = accumulate(op, k.out_dtype, &format!("v{}", k.root));
    let at = c_ops::c_type(acc.dtype);
    let mut indent = String::from("  ");
    let bound = |d: usize| {
        if d == 0 {
            ("lo".to_string(), "hi".to_string())
        } else {
            ("0".to_string(), format!("{}", nest.dims[d]))
        }
    };
    let mut closes = 0;
    for d in 0..kd {
        let (from, to) = bound(d);
        let _ = writeln!(
            s,
            "{indent}for (int64_t i{d} = {from}; i{d} < {to}; i{d}++) {{"
        );
        indent.push_str("  ");
        closes += 1;
    }
    let (from, to) = bound(kd);
    let _ = writeln!(
        s,
        "{indent}for (int64_t t0 = {from}; t0 < {to}; t0 += {tile}) {{"
    );
    indent.push_str("  ");
    closes += 1;
    let _ = writeln!(
        s,
        "{indent}const int64_t tn = {to} - t0 < {tile} ? {to} - t0 : {tile};"
    );
    let _ = writeln!(s, "{indent}{at} accs[{ACCS}][{tile}];");
    let _ = writeln!(
        s,
        "{indent}for (int u = 0; u < {ACCS}; u++) for (int64_t t = 0; t < {tile}; t++) accs[u][t] = {};",
        acc.init
    );
    for d in nkept..nd - 1 {
        let _ = writeln!(
            s,
            "{indent}for (int64_t i{d} = 0; i{d} < {}; i{d}++) {{",
            nest.dims[d]
        );
        indent.push_str("  ");
    }
    let last = nd - 1;
    let n = nest.dims[last];
    let fold_tile = |s: &mut String, indent: &str, u: &str| {
        let _ = writeln!(s, "{indent}for (int64_t t = 0; t < tn; t++) {{");
        let inner = format!("{indent}  ");
        let _ = writeln!(s, "{inner}int64_t i{kd} = t0 + t;");
        s.push_str(&body(k, nest, &inner, false, looped));
        let _ = writeln!(s, "{inner}{at} acc = accs[{u}][t];");
        let _ = writeln!(s, "{inner}accs[{u}][t] = {};", acc.fold);
        let _ = writeln!(s, "{indent}}}");
    };
    let _ = writeln!(s, "{indent}int64_t r = 0;");
    let _ = writeln!(s, "{indent}for (; r + {ACCS} <= {n}; r += {ACCS}) {{");
    let _ = writeln!(s, "{indent}  for (int u = 0; u < {ACCS}; u++) {{");
    let _ = writeln!(s, "{indent}    int64_t i{last} = r + u;");
    fold_tile(s, &format!("{indent}    "), "u");
    let _ = writeln!(s, "{indent}  }}");
    let _ = writeln!(s, "{indent}}}");
    let _ = writeln!(s, "{indent}for (; r < {n}; r++) {{");
    let _ = writeln!(s, "{indent}  int64_t i{last} = r;");
    fold_tile(s, &format!("{indent}  "), "0");
    let _ = writeln!(s, "{indent}}}");
    for _ in nkept..nd - 1 {
        indent.truncate(indent.len() - 2);
        let _ = writeln!(s, "{indent}}}");
    }
    let mut oidx = String::from(if kd == 0 { "t0 + t" } else { "i0" });
    for d in 1..nkept {
        let id = if d == kd {
            "t0 + t".to_string()
        } else {
            format!("i{d}")
        };
        oidx = format!("({oidx}) * {} + {id}", nest.dims[d]);
    }
    // The accumulators merged pairwise and stored, in one loop (one loop per
    // merge level cost gcc a third of this function's compile time).
    let merged = merge_accs(op, acc.dtype, &|u| format!("accs[{u}][t]"));
    let _ = writeln!(s, "{indent}for (int64_t t = 0; t < tn; t++) {{");
    let _ = writeln!(
        s,
        "{indent}  {at} acc = {merged}; out[{oidx}] = {};",
        acc.finish
    );
    let _ = writeln!(s, "{indent}}}");
    for _ in 0..closes {
        indent.truncate(indent.len() - 2);
        let _ = writeln!(s, "{indent}}}");
    }
    s.push_str("}\n");
}

/// The [`ACCS`] accumulators `acc(0)..acc(ACCS - 1)` merged pairwise, as
/// one expression: `acc(u)` with `acc(u + ACCS/2)`, then the halves again,
/// down to one: ((a0+a4)+(a2+a6))+((a1+a5)+(a3+a7)).
fn merge_accs(op: ReduceOp, acc_dtype: DType, acc: &dyn Fn(usize) -> String) -> String {
    // The value at index `u` after merging down to `w` accumulators.
    fn level(op: ReduceOp, dt: DType, acc: &dyn Fn(usize) -> String, u: usize, w: usize) -> String {
        if w == ACCS {
            acc(u)
        } else {
            let (a, b) = (
                level(op, dt, acc, u, 2 * w),
                level(op, dt, acc, u + w, 2 * w),
            );
            fold_with(op, dt, &a, &b)
        }
    }
    level(op, acc_dtype, acc, 0, 1)
}

/// Merges two accumulators of `op`.
fn fold_with(op: ReduceOp, acc_dtype: DType, a: &str, b: &str) -> String {
    let bop = match op {
        ReduceOp::Sum => BinaryOp::Add,
        ReduceOp::Prod => BinaryOp::Mul,
        ReduceOp::Max => BinaryOp::Max,
        ReduceOp::Min => BinaryOp::Min,
    };
    c_ops::binary(bop, acc_dtype, a, b)
}
