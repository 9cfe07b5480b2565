//! Rendering a lowered kernel as source in a C-like dialect: the function
//! frame, the loops, the statements per node, the accumulators. The
//! structure is shared by every C-like language; what differs (types,
//! per-element expressions, the function's signature, the outer loop) comes
//! from the [`Dialect`]. What the loops do (lanes, blocks, tiles, a grid,
//! streaming stores, a scatter's parts, gather offsets) was decided by the
//! lowering ([`LoopNest::grid`], [`Schedule`], [`LoopNest::narrow`]): this
//! module prints it.
//!
//! Every kernel takes its buffers as an array `b` (`b[0..n]` its `n`
//! outputs, `b[n + k]` argument `k`) and covers outer indices `lo..hi` of its first
//! loop, so the runtime can split it across threads.

use super::Dialect;
use crate::fuse::{Kernel, Node, ScatterInit};
use crate::lower::{self, Block, Identity, LoopNest, Schedule, ACCS};
use nx::{BinaryOp, DType, ReduceOp};
use std::fmt::Write;

/// Source of kernel `k` (lowered to `nest`) as function `name` in dialect
/// `d`; `small`: compiled for size ([`Dialect::kernel_signature`]).
///
/// The function returns 0, or nonzero when its results must be recomputed
/// by [`render_exact`]'s function: a kernel with a node that has a
/// vectorized form ([`Dialect::unary_vectorized`]: f32 sin/cos/exp in C)
/// computes the fast forms for every element and keeps the largest guard
/// key, and returns whether an input was beyond its form's range.
pub fn render(d: &dyn Dialect, name: &str, k: &Kernel, nest: &LoopNest, small: bool) -> String {
    render_fn(d, name, k, nest, small, has_guarded(d, k))
}

/// The exact form of a kernel [`render`] renders with guarded fast forms,
/// as function `name` (the same loops with the exact forms: the same bits
/// wherever the fast forms were in range); `None` for a kernel without
/// them. It always returns 0.
pub fn render_exact(d: &dyn Dialect, name: &str, k: &Kernel, nest: &LoopNest) -> Option<String> {
    has_guarded(d, k).then(|| render_fn(d, name, k, nest, false, false))
}

/// One kernel function; `fast`: the vectorized forms, returning whether a
/// guard failed.
fn render_fn(
    d: &dyn Dialect,
    name: &str,
    k: &Kernel,
    nest: &LoopNest,
    small: bool,
    fast: bool,
) -> String {
    let mut s = String::new();
    let n_out = k.out_dtypes.len();
    let buffers = n_out + k.arg_dtypes.len();
    let _ = writeln!(s, "{} {{", d.kernel_signature(name, small, buffers));
    for (j, &dt) in k.out_dtypes.iter().enumerate() {
        let t = d.ty(dt);
        let _ = writeln!(s, "  {t} *restrict out{j} = ({t} *){};", d.buffer(j));
    }
    for (a, &dt) in k.arg_dtypes.iter().enumerate() {
        let t = d.ty(dt);
        let _ = writeln!(
            s,
            "  const {t} *a{a} = (const {t} *){};",
            d.buffer(n_out + a)
        );
    }
    if fast {
        let _ = writeln!(s, "  uint32_t big = 0;");
    }
    if let (
        Some(Node::Scatter {
            out_shape,
            init,
            init_layout,
            ..
        }),
        Schedule::Scatter {
            parted,
            distinct_inner,
        },
    ) = (k.scatter(), &nest.schedule)
    {
        let init_layout = init_layout.as_ref().filter(|_| *parted);
        render_scatter(
            d,
            &mut s,
            k,
            nest,
            out_shape,
            init,
            init_layout,
            *distinct_inner,
            fast,
        );
        s.push_str(&finish(d, fast));
        return s;
    }
    // The invariant nodes, once (with the exact forms where the loops use
    // them: a tiled reduction's). Loads among them read element 0 of their
    // buffer, which an empty range may not have: nothing runs then.
    let tiled = match (&nest.schedule, k.reduce) {
        (Schedule::Tiled { tile }, Some((op, _))) => Some((op, *tile)),
        _ => None,
    };
    let inv = &nest.invariant;
    if inv
        .iter()
        .zip(&k.nodes)
        .any(|(&i, n)| i && !matches!(n, Node::Lit { .. }))
    {
        let _ = writeln!(s, "  if (lo >= hi) {}", d.ret("0"));
    }
    s.push_str(&body(d, k, nest, "  ", fast && tiled.is_none(), &|i| {
        inv[i]
    }));
    let looped = |i: usize| !inv[i];
    let nd = nest.dims.len();
    let nkept = nest.kept;
    let mut indent = String::from("  ");
    let open = |s: &mut String, indent: &mut String, l: usize| {
        let (from, to) = if l == 0 {
            ("lo".to_string(), "hi".to_string())
        } else {
            ("0".to_string(), format!("{}", nest.dims[l]))
        };
        let _ = writeln!(
            s,
            "{indent}{}",
            d.loop_header(&format!("i{l}"), &from, &to, l == 0)
        );
        indent.push_str("  ");
    };
    let close = |s: &mut String, indent: &mut String| {
        indent.truncate(indent.len() - 2);
        let _ = writeln!(s, "{indent}}}");
    };
    // Output index: row-major over the kept (for a map: all) dims, the
    // innermost kept index of lane `x` (see `body_lanes`).
    let oidx_of = |x: &str| {
        let sfx = |l: usize| if l + 1 == nkept { x } else { "" };
        let mut oidx = format!("i0{}", sfx(0));
        for l in 1..nkept {
            oidx = format!("({oidx}) * {} + i{l}{}", nest.dims[l], sfx(l));
        }
        oidx
    };
    let oidx = oidx_of("");
    if let Some((op, tile)) = tiled {
        // Tiled reductions use the exact forms (no guard to check).
        render_tiled(d, &mut s, k, nest, op, tile, &looped);
        s.push_str(&finish(d, false));
        return s;
    }
    if let Schedule::Map { stream: true, .. } = nest.schedule {
        render_streamed(d, &mut s, k, nest, fast, &looped);
        s.push_str(&finish(d, fast));
        return s;
    }
    // The kept loops: nested, or (on a grid) one loop over the output's
    // points, each point's indices recovered.
    let flat = nest.grid;
    if flat {
        let _ = writeln!(s, "{indent}{}", d.loop_header("p", "lo", "hi", true));
        indent.push_str("  ");
        let mut inner = 1usize;
        for l in (0..nkept).rev() {
            let ix = match (l, inner) {
                (0, 1) => "p".to_string(),
                (0, _) => format!("p / {inner}"),
                (_, 1) => format!("p % {}", nest.dims[l]),
                _ => format!("(p / {inner}) % {}", nest.dims[l]),
            };
            let _ = writeln!(s, "{indent}const int64_t i{l} = {ix};");
            inner *= nest.dims[l];
        }
    }
    // A map whose chains are long runs its innermost loop two elements at
    // a time (`lanes_loop`).
    let lanes = matches!(nest.schedule, Schedule::Map { lanes: true, .. });
    let (small, block) = match nest.schedule {
        Schedule::Reduce { unrolled, block } => (unrolled, block),
        _ => (false, None),
    };
    if !flat {
        for l in 0..nkept - usize::from(lanes) {
            if l + 1 == nkept && (k.reduce.is_none() || small) {
                if let Some(line) = d.independent_loop() {
                    let _ = writeln!(s, "{indent}{line}");
                }
            }
            open(&mut s, &mut indent, l);
        }
    }
    match k.reduce {
        None if lanes => {
            let l = nkept - 1;
            let n = nest.dims[l].to_string();
            let range = if l == 0 {
                ("lo", "hi")
            } else {
                ("0", n.as_str())
            };
            let emit = |s: &mut String, indent: &str, lanes: &[&str]| {
                s.push_str(&map_body(
                    d, k, nest, indent, fast, &looped, lanes, &oidx_of,
                ));
            };
            lanes_loop(d, &mut s, &indent, l, range, &emit);
        }
        None => {
            s.push_str(&map_body(
                d,
                k,
                nest,
                &indent,
                fast,
                &looped,
                &[""],
                &oidx_of,
            ));
        }
        Some((op, _)) if small => {
            // Every reduced point written out, in row-major order, into one
            // accumulator: the order the loops below take when the
            // innermost reduced loop is shorter than ACCS (the same bits),
            // without their loop overhead, and the output loop vectorizes.
            let acc = accumulate(d, op, k.out_dtypes[0], &format!("v{}", k.roots[0]));
            let at = d.ty(acc.dtype);
            let _ = writeln!(s, "{indent}{at} accum = {};", acc.init);
            let reduced = &nest.dims[nkept..];
            let points: usize = reduced.iter().product();
            for point in 0..points {
                let _ = writeln!(s, "{indent}{{");
                let inner = format!("{indent}  ");
                let mut rest = point;
                for (j, &n) in reduced.iter().enumerate().rev() {
                    let _ = writeln!(s, "{inner}const int64_t i{} = {};", nkept + j, rest % n);
                    rest /= n;
                }
                s.push_str(&body(d, k, nest, &inner, fast, &looped));
                let _ = writeln!(s, "{inner}{at} acc = accum;");
                let _ = writeln!(s, "{inner}accum = {};", acc.fold);
                let _ = writeln!(s, "{indent}}}");
            }
            let _ = writeln!(
                s,
                "{indent}{{ {at} acc = accum; out0[{oidx}] = {}; }}",
                acc.finish
            );
        }
        Some((op, _)) => {
            let acc = accumulate(d, op, k.out_dtypes[0], &format!("v{}", k.roots[0]));
            let at = d.ty(acc.dtype);
            let _ = writeln!(s, "{indent}{at} accs[{ACCS}];");
            let _ = writeln!(
                s,
                "{indent}for (int u = 0; u < {ACCS}; u++) accs[u] = {};",
                acc.init
            );
            for l in nkept..nd - 1 {
                open(&mut s, &mut indent, l);
            }
            // The innermost reduced loop, ACCS at a time, then the rest.
            let last = nd - 1;
            let n = nest.dims[last];
            let _ = writeln!(s, "{indent}int64_t r = 0;");
            if let Some(Block { len: block, lanes }) = block {
                // Blocks of `block` elements: the values in one loop that
                // vectorizes as a map's does, then folded into the
                // accumulators in the same order as below.
                let t = d.ty(lower::node_dtype(k, k.roots[0]));
                let _ = writeln!(s, "{indent}for (; r + {block} <= {n}; r += {block}) {{");
                let _ = writeln!(s, "{indent}  {t} vals[{block}];");
                let root = k.roots[0];
                let store = |s: &mut String, indent: &str, lanes: &[&str]| {
                    s.push_str(&body_lanes(
                        d,
                        k,
                        nest,
                        indent,
                        fast,
                        &looped,
                        lanes,
                        &|_, _| String::new(),
                    ));
                    for lane in lanes {
                        let _ = writeln!(s, "{indent}vals[i{last}{lane} - r] = v{root}{lane};");
                    }
                };
                let end = format!("r + {block}");
                if lanes {
                    lanes_loop(d, &mut s, &format!("{indent}  "), last, ("r", &end), &store);
                } else {
                    if let Some(line) = d.independent_loop() {
                        let _ = writeln!(s, "{indent}  {line}");
                    }
                    let _ = writeln!(
                        s,
                        "{indent}  {}",
                        d.loop_header(&format!("i{last}"), "r", &end, false)
                    );
                    store(&mut s, &format!("{indent}    "), &[""]);
                    let _ = writeln!(s, "{indent}  }}");
                }
                let fold = accumulate(d, op, k.out_dtypes[0], "vals[j + u]").fold;
                let _ = writeln!(
                    s,
                    "{indent}  for (int64_t j = 0; j < {block}; j += {ACCS}) for (int u = 0; u < {ACCS}; u++) {{ {at} acc = accs[u]; accs[u] = {fold}; }}"
                );
                let _ = writeln!(s, "{indent}}}");
            }
            let _ = writeln!(s, "{indent}for (; r + {ACCS} <= {n}; r += {ACCS}) {{");
            let _ = writeln!(s, "{indent}  for (int u = 0; u < {ACCS}; u++) {{");
            let inner = format!("{indent}    ");
            let _ = writeln!(s, "{inner}int64_t i{last} = r + u;");
            s.push_str(&body(d, k, nest, &inner, fast, &looped));
            let _ = writeln!(s, "{inner}{at} acc = accs[u];");
            let _ = writeln!(s, "{inner}accs[u] = {};", acc.fold);
            let _ = writeln!(s, "{indent}  }}");
            let _ = writeln!(s, "{indent}}}");
            let _ = writeln!(s, "{indent}for (; r < {n}; r++) {{");
            let inner = format!("{indent}  ");
            let _ = writeln!(s, "{inner}int64_t i{last} = r;");
            s.push_str(&body(d, k, nest, &inner, fast, &looped));
            let _ = writeln!(s, "{inner}{at} acc = accs[0];");
            let _ = writeln!(s, "{inner}accs[0] = {};", acc.fold);
            let _ = writeln!(s, "{indent}}}");
            for _ in nkept..nd - 1 {
                close(&mut s, &mut indent);
            }
            let merged = merge_accs(d, acc.fold_op, acc.dtype, &|u| format!("accs[{u}]"));
            let _ = writeln!(
                s,
                "{indent}{{ {at} acc = {merged}; out0[{oidx}] = {}; }}",
                acc.finish
            );
        }
    }
    for _ in 0..if flat { 1 } else { nkept - usize::from(lanes) } {
        close(&mut s, &mut indent);
    }
    s.push_str(&finish(d, fast));
    s
}

/// A scatter kernel's statements ([`Node::Scatter`]): the loops over the
/// updates in row-major order, each point adding its value at the element
/// its index picks (so repeated indices add in eager's order), after the
/// output is set to `init`. No lanes: two points may add into one
/// element. Split (`init_layout` `Some`, [`crate::fuse`]'s
/// `split_scatter`), the points of one index of the outer loop add into
/// elements no other index reaches: each sets its own elements first and
/// adds into them, so the outer loop runs in parts (the CPU's threads, a
/// GPU's grid-stride loop). Unsplit, one thread sets the whole output and
/// runs the whole range.
#[allow(clippy::too_many_arguments)]
fn render_scatter(
    d: &dyn Dialect,
    s: &mut String,
    k: &Kernel,
    nest: &LoopNest,
    out_shape: &[usize],
    init: &ScatterInit,
    init_layout: Option<&nx::Layout>,
    distinct: bool,
    fast: bool,
) {
    let value = |at: &str| match init {
        ScatterInit::Arg(a) => format!("a{a}[{at}]"),
        ScatterInit::Lit(bits) => d.literal(k.out_dtypes[0], f64::from_bits(*bits)),
    };
    if init_layout.is_none() {
        if let Some(line) = d.single_thread() {
            let _ = writeln!(s, "  {line}");
        }
        let n: usize = out_shape.iter().product();
        let _ = writeln!(
            s,
            "  for (int64_t j = 0; j < {n}; j++) out0[j] = {};",
            value("j")
        );
    }
    let _ = writeln!(s, "  if (lo >= hi) {}", d.ret("0"));
    let inv = &nest.invariant;
    s.push_str(&body(d, k, nest, "  ", fast, &|i| inv[i]));
    // The innermost loop's points add into distinct elements when it
    // moves the destination (it is not the scattered axis): independent.
    let last = nest.dims.len() - 1;
    let mut indent = String::from("  ");
    for (l, &n) in nest.dims.iter().enumerate() {
        if l == last && distinct {
            if let Some(line) = d.independent_loop() {
                let _ = writeln!(s, "{indent}{line}");
            }
        }
        let (from, to) = if l == 0 {
            ("lo".to_string(), "hi".to_string())
        } else {
            ("0".to_string(), n.to_string())
        };
        let parts = l == 0 && init_layout.is_some();
        let _ = writeln!(
            s,
            "{indent}{}",
            d.loop_header(&format!("i{l}"), &from, &to, parts)
        );
        indent.push_str("  ");
        if let (0, Some(layout)) = (l, init_layout) {
            // The elements this index of the outer loop adds into.
            let mut at = format!("i0 * ({})", layout.strides[0]);
            for (e, (&size, &stride)) in
                layout.shape.iter().zip(&layout.strides).enumerate().skip(1)
            {
                let _ = writeln!(s, "{indent}for (int64_t j{e} = 0; j{e} < {size}; j{e}++)");
                let _ = write!(at, " + j{e} * ({stride})");
            }
            let _ = writeln!(
                s,
                "{indent}{{ const int64_t j = {at}; out0[j] = {}; }}",
                value("j")
            );
        }
    }
    s.push_str(&body(d, k, nest, &indent, fast, &|i| !inv[i]));
    for _ in &nest.dims {
        indent.truncate(indent.len() - 2);
        let _ = writeln!(s, "{indent}}}");
    }
}

/// A kernel function's last statement and closing brace: whether a guard
/// failed (`fast`), else 0.
fn finish(d: &dyn Dialect, fast: bool) -> String {
    let value = if fast { "TK_GUARD_FAILED(big)" } else { "0" };
    format!("  {}\n}}\n", d.ret(value))
}

/// Whether the kernel has a node with a vectorized form whose rare inputs
/// need the exact, scalar one (`c_ops::unary_vectorized`).
fn has_guarded(d: &dyn Dialect, k: &Kernel) -> bool {
    k.nodes.iter().any(|n| {
        matches!(n, Node::Unary { op, dtype, .. }
            if d.unary_vectorized(*op, *dtype, "x").is_some())
    })
}

/// The statements computing the nodes `pick` selects, in order, at the
/// loop indices `i0, i1, ...`. With `fast`, nodes that have a vectorized
/// form use it and fold their guard key into `big` (the largest so far).
fn body(
    d: &dyn Dialect,
    k: &Kernel,
    nest: &LoopNest,
    indent: &str,
    fast: bool,
    pick: &dyn Fn(usize) -> bool,
) -> String {
    body_lanes(d, k, nest, indent, fast, pick, &[""], &|_, _| String::new())
}

/// A map's body for `lanes` with each output stored as soon as its value
/// is computed (a value kept to the end of a long body is spilled around
/// every out-of-line vector call), outputs of invariant values after it.
#[allow(clippy::too_many_arguments)]
fn map_body(
    d: &dyn Dialect,
    k: &Kernel,
    nest: &LoopNest,
    indent: &str,
    fast: bool,
    looped: &dyn Fn(usize) -> bool,
    lanes: &[&str],
    oidx_of: &dyn Fn(&str) -> String,
) -> String {
    let store = |i: usize, lane: &str| {
        let mut s = String::new();
        for (j, _) in k.roots.iter().enumerate().filter(|&(_, &r)| r == i) {
            let _ = writeln!(s, "{indent}out{j}[{}] = v{i}{lane};", oidx_of(lane));
        }
        s
    };
    let mut s = body_lanes(d, k, nest, indent, fast, looped, lanes, &store);
    for lane in lanes {
        for (j, &r) in k.roots.iter().enumerate().filter(|&(_, &r)| !looped(r)) {
            let _ = writeln!(s, "{indent}out{j}[{}] = v{r};", oidx_of(lane));
        }
    }
    s
}

/// [`body`] for several elements at once, one per lane: lane `x` names
/// its values `v{i}{x}` and its innermost loop index `i{last}{x}`, and the
/// statements alternate between lanes node by node, so that the lanes'
/// dependency chains interleave (a long chain of transcendentals is bound
/// by its latency; two independent chains run in about the time of one).
/// Values `pick` leaves out (hoisted invariants) are shared.
fn body_lanes(
    d: &dyn Dialect,
    k: &Kernel,
    nest: &LoopNest,
    indent: &str,
    fast: bool,
    pick: &dyn Fn(usize) -> bool,
    lanes: &[&str],
    stores: &dyn Fn(usize, &str) -> String,
) -> String {
    let mut s = String::new();
    let last = nest.dims.len().saturating_sub(1);
    for (i, n) in k.nodes.iter().enumerate().filter(|(i, _)| pick(*i)) {
        for lane in lanes {
            let t = d.ty(lower::node_dtype(k, i));
            let v = |j: &usize| {
                if pick(*j) {
                    format!("v{j}{lane}")
                } else {
                    format!("v{j}")
                }
            };
            let index = || {
                let ix = nest.loads[i].as_ref().unwrap();
                let mut idx = format!("{}", ix.offset);
                for (l, &st) in ix.strides.iter().enumerate() {
                    if st != 0 {
                        let x = if l == last { *lane } else { "" };
                        let _ = write!(idx, " + i{l}{x} * ({st})");
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
                } => format!("({} ? a{arg}[{} - ({})] : 0)", v(&m.when), index(), m.bias),
                // The index was checked in range before any kernel ran
                // (`runtime::IndexCheck`); a negative one counts from the end.
                Node::Gather {
                    arg,
                    index: ix,
                    axis_len,
                    axis_stride,
                    ..
                } => {
                    // The offsets' width, as lowering chose
                    // (`lower::GATHER_I32_MAX`).
                    let it = if nest.narrow[i] { "int32_t" } else { "int64_t" };
                    let i = v(ix);
                    format!(
                        "a{arg}[({it})({}) + ({it})({i} + ({i} < 0 ? {axis_len} : 0)) * ({axis_stride})]",
                        index()
                    )
                }
                // Adds into the output in place (a scatter kernel's root,
                // `render_scatter`); the index was checked like a gather's.
                Node::Scatter {
                    index: ix,
                    value,
                    axis_len,
                    axis_stride,
                    ..
                } => {
                    let x = v(ix);
                    let _ = writeln!(
                        s,
                        "{indent}const int64_t at{i}{lane} = {} + ((int64_t){x} + ({x} < 0 ? {axis_len} : 0)) * ({axis_stride});",
                        index()
                    );
                    let at = format!("out0[at{i}{lane}]");
                    let sum = d.binary(BinaryOp::Add, lower::node_dtype(k, *value), &at, &v(value));
                    let _ = writeln!(s, "{indent}{t} v{i}{lane} = {sum};");
                    let _ = writeln!(s, "{indent}{at} = v{i}{lane};");
                    continue;
                }
                Node::Iota {
                    stride, len, dtype, ..
                } => {
                    let coord = format!("((int64_t)({}) / {stride}) % {len}", index());
                    d.cast(DType::I64, *dtype, &coord)
                }
                Node::Coord { dtype, .. } => {
                    d.cast(DType::I64, *dtype, &format!("(int64_t)({})", index()))
                }
                Node::Lit { dtype, bits } => d.literal(*dtype, f64::from_bits(*bits)),
                Node::Unary { op, dtype, x } => {
                    match d.unary_vectorized(*op, *dtype, &v(x)).filter(|_| fast) {
                        Some((e, key)) => {
                            let _ = writeln!(
                                s,
                                "{indent}{{ uint32_t key = {key}; big = key > big ? key : big; }}"
                            );
                            e
                        }
                        None => d.unary(*op, *dtype, &v(x)),
                    }
                }
                Node::Binary { op, dtype, a, b } => d.binary(*op, *dtype, &v(a), &v(b)),
                Node::Compare { op, dtype, a, b } => d.compare(*op, *dtype, &v(a), &v(b)),
                Node::Where { dtype, c, a, b } => d.select(*dtype, &v(c), &v(a), &v(b)),
                Node::Cast { from, to, x } => d.cast(*from, *to, &v(x)),
            };
            let _ = writeln!(s, "{indent}{t} v{i}{lane} = {e};");
            s.push_str(&stores(i, lane));
        }
    }
    s
}

/// The innermost loop of a map rendered two elements at a time: `i{l}a`
/// in the first half of `from..to`, `i{l}b` in the second (so both lanes
/// stay contiguous and vectorize), the odd element last, alone.
fn lanes_loop(
    d: &dyn Dialect,
    s: &mut String,
    indent: &str,
    l: usize,
    (from, to): (&str, &str),
    emit: &dyn Fn(&mut String, &str, &[&str]),
) {
    let _ = writeln!(s, "{indent}{{");
    let _ = writeln!(
        s,
        "{indent}  const int64_t from = {from}, half = ({to} - from) / 2;"
    );
    if let Some(line) = d.independent_loop() {
        let _ = writeln!(s, "{indent}  {line}");
    }
    let _ = writeln!(s, "{indent}  for (int64_t j = 0; j < half; j++) {{");
    let _ = writeln!(
        s,
        "{indent}    const int64_t i{l}a = from + j, i{l}b = from + half + j;"
    );
    emit(s, &format!("{indent}    "), &["a", "b"]);
    let _ = writeln!(s, "{indent}  }}");
    let _ = writeln!(s, "{indent}  if (({to} - from) & 1) {{");
    let _ = writeln!(s, "{indent}    const int64_t i{l} = {to} - 1;");
    emit(s, &format!("{indent}    "), &[""]);
    let _ = writeln!(s, "{indent}  }}");
    let _ = writeln!(s, "{indent}}}");
}

/// A reduction's accumulation as source: the accumulator's dtype, its
/// initial value, the statement folding `v` into `acc`, and the final
/// conversion (from [`lower::accumulator`]).
struct Accumulate {
    dtype: DType,
    init: String,
    fold: String,
    finish: String,
    /// How two accumulators merge.
    fold_op: BinaryOp,
}

fn accumulate(d: &dyn Dialect, op: ReduceOp, dtype: DType, v: &str) -> Accumulate {
    let a = lower::accumulator(op, dtype);
    let widen = |x: &str| {
        if a.dtype == dtype {
            x.to_string()
        } else {
            d.cast(dtype, a.dtype, x)
        }
    };
    Accumulate {
        dtype: a.dtype,
        init: match a.init {
            Identity::Value(x) => d.literal(a.dtype, x),
            Identity::Lowest => int_bound(d, a.dtype, true),
            Identity::Highest => int_bound(d, a.dtype, false),
        },
        fold: d.binary(a.fold, a.dtype, "acc", &widen(v)),
        finish: if a.dtype == dtype {
            "acc".into()
        } else {
            d.cast(a.dtype, dtype, "acc")
        },
        fold_op: a.fold,
    }
}

/// The identity of integer max (the type's minimum) or min (its maximum).
fn int_bound(d: &dyn Dialect, dtype: DType, lowest: bool) -> String {
    let t = d.ty(dtype);
    if dtype == DType::Bool {
        // max is `|`, min is `&`: their identities are false and true.
        return format!("(({t}){})", u8::from(!lowest));
    }
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

/// The loop of a streaming map ([`Kernel::stream`]):
/// each tile of `TK_STREAM_TILE` elements (aligned to the tile in index
/// space, so that after a part's first tile the stores start on whole
/// lines) is computed into an L1 buffer, the same body and the same bits,
/// then stored past the cache by `tk_stream`.
fn render_streamed(
    d: &dyn Dialect,
    s: &mut String,
    k: &Kernel,
    nest: &LoopNest,
    fast: bool,
    looped: &dyn Fn(usize) -> bool,
) {
    let t = d.ty(k.out_dtypes[0]);
    s.push_str("  for (int64_t t0 = lo; t0 < hi;) {\n");
    s.push_str("    int64_t t1 = (t0 / TK_STREAM_TILE + 1) * TK_STREAM_TILE;\n");
    s.push_str("    if (t1 > hi) t1 = hi;\n");
    let _ = writeln!(
        s,
        "    {t} tile[TK_STREAM_TILE] __attribute__((aligned(64)));"
    );
    s.push_str("    for (int64_t i0 = t0; i0 < t1; i0++) {\n");
    s.push_str(&body(d, k, nest, "      ", fast, looped));
    let _ = writeln!(s, "      tile[i0 - t0] = v{};", k.roots[0]);
    s.push_str("    }\n");
    let _ = writeln!(
        s,
        "    tk_stream(out0 + t0, tile, (t1 - t0) * (int64_t)sizeof({t}));"
    );
    s.push_str("    t0 = t1;\n  }\n  tk_stream_fence();\n");
}

/// A reduction rendered with the innermost kept dim in tiles of `tile`:
/// each output of the tile has its own `ACCS` accumulators, folded in the
/// same order as the one-output-at-a-time loop (element `r` of the
/// innermost reduced dim into accumulator `r % ACCS` while a full group of
/// `ACCS` remains, the rest into accumulator 0, then the pairwise merge), so
/// the result is the same bit for bit; only the loops are interchanged.
fn render_tiled(
    d: &dyn Dialect,
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
    let acc = accumulate(d, op, k.out_dtypes[0], &format!("v{}", k.roots[0]));
    let at = d.ty(acc.dtype);
    let mut indent = String::from("  ");
    let bound = |l: usize| {
        if l == 0 {
            ("lo".to_string(), "hi".to_string())
        } else {
            ("0".to_string(), format!("{}", nest.dims[l]))
        }
    };
    let mut closes = 0;
    for l in 0..kd {
        let (from, to) = bound(l);
        let _ = writeln!(
            s,
            "{indent}{}",
            d.loop_header(&format!("i{l}"), &from, &to, l == 0)
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
    for l in nkept..nd - 1 {
        let _ = writeln!(
            s,
            "{indent}for (int64_t i{l} = 0; i{l} < {}; i{l}++) {{",
            nest.dims[l]
        );
        indent.push_str("  ");
    }
    let last = nd - 1;
    let n = nest.dims[last];
    let fold_tile = |s: &mut String, indent: &str, u: &str| {
        let _ = writeln!(s, "{indent}for (int64_t t = 0; t < tn; t++) {{");
        let inner = format!("{indent}  ");
        let _ = writeln!(s, "{inner}int64_t i{kd} = t0 + t;");
        s.push_str(&body(d, k, nest, &inner, false, looped));
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
    for l in 1..nkept {
        let id = if l == kd {
            "t0 + t".to_string()
        } else {
            format!("i{l}")
        };
        oidx = format!("({oidx}) * {} + {id}", nest.dims[l]);
    }
    // The accumulators merged pairwise and stored, in one loop (one loop per
    // merge level cost gcc a third of this function's compile time).
    let merged = merge_accs(d, acc.fold_op, acc.dtype, &|u| format!("accs[{u}][t]"));
    let _ = writeln!(s, "{indent}for (int64_t t = 0; t < tn; t++) {{");
    let _ = writeln!(
        s,
        "{indent}  {at} acc = {merged}; out0[{oidx}] = {};",
        acc.finish
    );
    let _ = writeln!(s, "{indent}}}");
    for _ in 0..closes {
        indent.truncate(indent.len() - 2);
        let _ = writeln!(s, "{indent}}}");
    }
}

/// The [`ACCS`] accumulators `acc(0)..acc(ACCS - 1)` merged pairwise by
/// `fold`, as one expression: `acc(u)` with `acc(u + ACCS/2)`, then the
/// halves again, down to one: ((a0+a4)+(a2+a6))+((a1+a5)+(a3+a7)).
fn merge_accs(
    d: &dyn Dialect,
    fold: BinaryOp,
    acc_dtype: DType,
    acc: &dyn Fn(usize) -> String,
) -> String {
    // The value at index `u` after merging down to `w` accumulators.
    let level = |u: usize, w: usize| -> String {
        fn go(
            d: &dyn Dialect,
            fold: BinaryOp,
            dt: DType,
            acc: &dyn Fn(usize) -> String,
            u: usize,
            w: usize,
        ) -> String {
            if w == ACCS {
                acc(u)
            } else {
                let (a, b) = (
                    go(d, fold, dt, acc, u, 2 * w),
                    go(d, fold, dt, acc, u + w, 2 * w),
                );
                d.binary(fold, dt, &a, &b)
            }
        }
        go(d, fold, acc_dtype, acc, u, w)
    };
    level(0, 1)
}
