//! Library steps as CUDA kernels: the primitives the CPU runs as nx's
//! eager kernels and fusion leaves as library steps (windows `simplify`
//! does not turn into maps, first maxima of windows, gathers and
//! scatter-adds by indices the program computes, arg-reductions, running
//! sums and products), each rendered by a rule
//! of its own as one self-contained `extern "C" __global__` function with
//! its shapes baked in. The device runs them as steps of the plan
//! ([`crate::device::exec`]) over contiguous operands: `b0` the output,
//! `b1..` the inputs, then `lo`/`hi` (the dialect's kernel frame), one
//! thread per output point in a grid-stride loop.
//!
//! Each rule computes what nx's eager kernel computes, in the same order:
//! a window visits its elements in row-major window order, skipping those
//! in the padding (`crates/nx/src/cpu/window.rs`); a scatter-add adds each
//! destination's updates in order along its axis
//! (`crates/nx/src/cpu/index.rs`); arg-reductions and running ops walk
//! each line along their axis in order (`crates/nx/src/cpu/reduce.rs`).
//! So the bits are eager's.
//!
//! Indices a program computes cannot be checked before the program runs:
//! a gather or scatter-add by such indices comes with a check kernel
//! ([`index_check`]) that sets a device flag when an index is out of range;
//! the runtime reads the flag back before the step and raises eager's
//! message (reading the indices only then).

use super::{cuda::Cuda, Dialect};
use nx::{Aval, BinaryOp, CmpOp, DType, Prim, ReduceOp};
use std::fmt::Write;

/// Whether a primitive of a library step has a rule here (the device runs
/// it as a kernel). Its dtypes are checked by [`render`].
pub fn renders(p: &Prim) -> bool {
    matches!(
        p,
        Prim::ReduceWindow {
            op: ReduceOp::Max | ReduceOp::Sum,
            ..
        } | Prim::WindowArgmax { .. }
            | Prim::Gather { .. }
            | Prim::ScatterAdd { .. }
            | Prim::ArgReduce { .. }
            | Prim::Cumulative { .. }
    )
}

/// The name of the kernel clearing the index-check flag (one per
/// translation unit that holds a check: [`flag_clear`]).
pub const FLAG_CLEAR: &str = "tk_kflag_clear";

/// A kernel setting the `int32` flag `b0` to 0 (one thread).
pub fn flag_clear(d: &Cuda) -> String {
    format!(
        "{} {{\n  if (blockIdx.x == 0 && threadIdx.x == 0) *(int32_t *)b0 = 0;\n}}\n",
        d.kernel_signature(FLAG_CLEAR, false, 1)
    )
}

/// A check of the indices `b1` (`idx`, contiguous) against an axis of
/// `axis_len` elements: one thread per index, each setting the flag `b0`
/// to 1 when its index lies outside `-axis_len..axis_len` (every writer
/// writes the same value; the first bad index is found on the host, from
/// the indices, only when the flag is set).
pub fn index_check(d: &Cuda, name: &str, idx: &Aval, axis_len: usize) -> String {
    let it = d.ty(idx.dtype);
    let n = axis_len as i64;
    format!(
        "{} {{\n  {}\n    const int64_t i = (int64_t)(({it} *)b1)[p];\n    \
         if (i < -{n}ll || i >= {n}ll) *(int32_t *)b0 = 1;\n  }}\n}}\n",
        d.kernel_signature(name, false, 2),
        d.loop_header("p", "lo", "hi", true)
    )
}

/// The kernel of library step `prim` over inputs `ins` into `out`, named
/// `name`; `Err` says what it does not render (its dtype).
pub fn render(
    d: &Cuda,
    name: &str,
    prim: &Prim,
    ins: &[&Aval],
    out: &Aval,
) -> Result<String, String> {
    let dtype = ins[0].dtype;
    // Bools are gathered (moved), searched and scanned (or, and); the
    // windows and scatter-adds compare or add numbers only.
    let bools = matches!(
        prim,
        Prim::Gather { .. } | Prim::ArgReduce { .. } | Prim::Cumulative { .. }
    );
    if !(dtype.is_float() || dtype.is_int() || (bools && dtype == DType::Bool)) {
        return Err(format!("{} of {dtype}", prim.name()));
    }
    let body = match prim {
        Prim::ReduceWindow {
            op,
            window,
            strides,
            padding,
        } => {
            let w = Window::new(&ins[0].shape, &out.shape, window, strides, padding);
            match op {
                ReduceOp::Max => window_max(d, &w, dtype),
                ReduceOp::Sum => window_sum(d, &w, dtype),
                _ => unreachable!("renders() admits max and sum windows"),
            }
        }
        Prim::WindowArgmax {
            window,
            strides,
            padding,
            flat_from,
        } => {
            let w = Window::new(&ins[0].shape, &out.shape, window, strides, padding);
            let span: usize = ins[0].shape[*flat_from..].iter().product();
            window_argmax(d, &w, dtype, span)
        }
        Prim::Gather { axis } => gather(d, ins[0], ins[1], *axis),
        Prim::ScatterAdd { axis } => scatter_add(d, ins[0], ins[1], *axis),
        Prim::ArgReduce { op, axis } => arg_reduce(d, ins[0], *op == nx::ArgOp::Argmax, *axis),
        Prim::Cumulative { op, axis } => cumulative(d, ins[0], *op, *axis),
        p => unreachable!("tolk: no CUDA library kernel for {}", p.name()),
    };
    let buffers = 1 + ins.len();
    Ok(format!(
        "{} {{\n  {}\n{body}  }}\n}}\n",
        d.kernel_signature(name, false, buffers),
        d.loop_header("p", "lo", "hi", true)
    ))
}

/// `out`'s point `p` unravelled into `o0, o1, ..` (C statements).
fn unravel(shape: &[usize], var: &str, s: &mut String) {
    let _ = writeln!(s, "    int64_t rest = {var};");
    for d in (0..shape.len()).rev() {
        let _ = writeln!(
            s,
            "    const int64_t o{d} = rest % {n}; rest /= {n};",
            n = shape[d].max(1)
        );
    }
}

/// `terms` joined by `op`, or `empty` when there are none.
fn joined(terms: Vec<String>, op: &str, empty: &str) -> String {
    if terms.is_empty() {
        empty.to_string()
    } else {
        terms.join(op)
    }
}

/// Row-major strides of a contiguous `shape`.
fn strides_of(shape: &[usize]) -> Vec<usize> {
    nx::shape::contiguous_strides(shape)
        .into_iter()
        .map(|s| s as usize)
        .collect()
}

/// A window reduction's geometry over a contiguous input.
struct Window {
    ins: Vec<usize>,
    outs: Vec<usize>,
    window: Vec<usize>,
    strides: Vec<usize>,
    padding: Vec<(usize, usize)>,
}

impl Window {
    fn new(
        ins: &[usize],
        outs: &[usize],
        window: &[usize],
        strides: &[usize],
        padding: &[(usize, usize)],
    ) -> Window {
        Window {
            ins: ins.to_vec(),
            outs: outs.to_vec(),
            window: window.to_vec(),
            strides: strides.to_vec(),
            padding: padding.to_vec(),
        }
    }

    /// The loops over every window position in row-major window order
    /// (axis 0 outermost, as eager visits them), each position's input
    /// coordinate `i{d}` and whether it lies in the padding (`pad`); the
    /// input element's flat offset `at`. `visit` is the statements run
    /// at each position. Axes a window leaves alone (window 1, stride 1,
    /// no padding) take the output's coordinate; a bounds check only
    /// where an axis is padded (unpadded windows lie inside the input).
    fn loops(&self, visit: &str) -> String {
        let mut s = String::new();
        unravel(&self.outs, "p", &mut s);
        let nd = self.ins.len();
        let xs = strides_of(&self.ins);
        let mut depth = 1;
        let ind = |k: usize| "  ".repeat(k + 1);
        for d in 0..nd {
            let (w, st, lo) = (self.window[d], self.strides[d], self.padding[d].0);
            // The input coordinate `o * stride + w - lo`, terms that are 0
            // or factors that are 1 left out.
            let mut at = if st == 1 {
                format!("o{d}")
            } else {
                format!("o{d} * {st}")
            };
            if w != 1 {
                let _ = writeln!(
                    s,
                    "{}for (int64_t w{d} = 0; w{d} < {w}; w{d}++) {{",
                    ind(depth)
                );
                depth += 1;
                at += &format!(" + w{d}");
            }
            if lo != 0 {
                at += &format!(" - {lo}");
            }
            let _ = writeln!(s, "{}const int64_t i{d} = {at};", ind(depth));
        }
        let padded: Vec<String> = (0..nd)
            .filter(|&d| self.padding[d] != (0, 0))
            .map(|d| format!("(uint64_t)i{d} >= {}ull", self.ins[d]))
            .collect();
        let pad = if padded.is_empty() {
            "0".to_string()
        } else {
            padded.join(" || ")
        };
        let at: Vec<String> = (0..nd).map(|d| format!("i{d} * {}", xs[d])).collect();
        let _ = writeln!(s, "{}const int pad = {pad};", ind(depth));
        let _ = writeln!(
            s,
            "{}const int64_t at = pad ? 0 : {};",
            ind(depth),
            at.join(" + ")
        );
        for line in visit.lines() {
            let _ = writeln!(s, "{}{line}", ind(depth));
        }
        for d in (0..nd).rev() {
            if self.window[d] != 1 {
                depth -= 1;
                let _ = writeln!(s, "{}}}", ind(depth));
            }
        }
        s
    }
}

/// The lowest value of `dtype`: a max window's padding and starting point
/// (`Element::from_f64(-inf)`: -inf, an integer's minimum).
fn lowest(d: &Cuda, dtype: DType) -> String {
    match dtype {
        // `-9223372036854775808` is not a literal C++ accepts as is.
        DType::I64 => "((int64_t)0x8000000000000000ull)".into(),
        _ => d.literal(dtype, f64::NEG_INFINITY),
    }
}

/// A max window: from the lowest value, each element in row-major window
/// order taken when it is greater or NaN (nx's `max_nan`: the first of
/// equal values stays, -0.0 before +0.0 included; the last NaN wins);
/// padding skipped (it is the lowest value, which never wins), so a window
/// of padding only is the lowest value.
fn window_max(d: &Cuda, w: &Window, dtype: DType) -> String {
    let t = d.ty(dtype);
    let take = format!(
        "({} | {})",
        d.compare(CmpOp::Gt, dtype, "v", "acc"),
        d.compare(CmpOp::Ne, dtype, "v", "v")
    );
    let visit = format!(
        "if (!pad) {{\n  const {t} v = (({t} *)b1)[at];\n  acc = {};\n}}",
        d.select(dtype, &take, "v", "acc")
    );
    format!(
        "    {t} acc = {};\n{}    (({t} *)b0)[p] = acc;\n",
        lowest(d, dtype),
        w.loops(&visit)
    )
}

/// A sum window, as nx's: from 0, in row-major window order, padding
/// skipped (adding +0 to a sum started from +0 changes nothing, and eager
/// skips it); f16, bf16 and f32 accumulate in f32, f64 in f64, integers
/// wrap (eager's i128 sum truncated to the type: the same low bits as a
/// wrapping u64 sum).
fn window_sum(d: &Cuda, w: &Window, dtype: DType) -> String {
    let t = d.ty(dtype);
    let (acc_t, load, store) = match dtype {
        DType::F64 => ("double", "v".to_string(), "acc".to_string()),
        DType::F32 => ("float", "v".to_string(), "acc".to_string()),
        DType::F16 | DType::BF16 => (
            "float",
            d.cast(dtype, DType::F32, "v"),
            d.cast(DType::F32, dtype, "acc"),
        ),
        _ => (
            "uint64_t",
            "(uint64_t)(int64_t)v".to_string(),
            format!("({t})acc"),
        ),
    };
    let visit = format!("if (!pad) {{\n  const {t} v = (({t} *)b1)[at];\n  acc += {load};\n}}");
    format!(
        "    {acc_t} acc = 0;\n{}    (({t} *)b0)[p] = {store};\n",
        w.loops(&visit)
    )
}

/// The first maximum of each window (`WindowArgmax`), as nx's: in
/// row-major window order, a padding element (the lowest value) is the
/// candidate only when nothing came before it (its index `span`, one past
/// the end); an element replaces the best when nothing came before, when
/// it is greater, or when it is the first NaN. The index is the element's
/// row-major offset in the input modulo `span` (the axes from `flat_from`).
fn window_argmax(d: &Cuda, w: &Window, dtype: DType, span: usize) -> String {
    let t = d.ty(dtype);
    let better = format!(
        "(bi < 0) | {} | ({} & {})",
        d.compare(CmpOp::Gt, dtype, "v", "bv"),
        d.compare(CmpOp::Ne, dtype, "v", "v"),
        d.compare(CmpOp::Eq, dtype, "bv", "bv")
    );
    let visit = format!(
        "if (pad) {{\n  if (bi < 0) {{ bv = {low}; bi = {span}; }}\n}} else {{\n  \
         const {t} v = (({t} *)b1)[at];\n  if ({better}) {{ bv = v; bi = at % {span}; }}\n}}",
        low = lowest(d, dtype),
    );
    format!(
        "    {t} bv = {};\n    int64_t bi = -1;\n{}    ((int32_t *)b0)[p] = (int32_t)bi;\n",
        lowest(d, dtype),
        w.loops(&visit)
    )
}

/// `take_along_axis` by indices `b2` (checked first: [`index_check`]):
/// out point `p` (the indices' shape) reads `x` at `p` with its `axis`
/// coordinate replaced by the index (negative ones counted from the end),
/// `x`'s strides over the indices' coordinates, as eager walks them.
fn gather(d: &Cuda, x: &Aval, idx: &Aval, axis: usize) -> String {
    let (t, it) = (d.ty(x.dtype), d.ty(idx.dtype));
    let xs = strides_of(&x.shape);
    let n = x.shape[axis];
    let mut s = String::new();
    unravel(&idx.shape, "p", &mut s);
    let off: Vec<String> = (0..idx.shape.len())
        .filter(|&k| k != axis)
        .map(|k| format!("o{k} * {}", xs[k]))
        .chain(["i * ".to_string() + &xs[axis].to_string()])
        .collect();
    let _ = writeln!(s, "    int64_t i = (int64_t)(({it} *)b2)[p];");
    let _ = writeln!(s, "    if (i < 0) i += {n};");
    let _ = writeln!(s, "    (({t} *)b0)[p] = (({t} *)b1)[{}];", off.join(" + "));
    s
}

/// `scatter_add(x, idx, updates)` by indices `b2` (checked first:
/// [`index_check`]), updates `b3`: one thread per position of `x` off
/// `axis`, which copies its line of `x` along the axis into the output,
/// then adds the updates of that position in order along the axis (each
/// destination's updates in eager's order, with the dtype's own addition).
/// Positions off the axis that the indices do not reach keep `x`.
fn scatter_add(d: &Cuda, x: &Aval, idx: &Aval, axis: usize) -> String {
    let dtype = x.dtype;
    let (t, it) = (d.ty(dtype), d.ty(idx.dtype));
    let xs = strides_of(&x.shape);
    let is = strides_of(&idx.shape);
    let (n, m) = (x.shape[axis], idx.shape[axis]);
    let mut s = String::new();
    // The thread's position: `x`'s shape with the axis taken out.
    let mut off_shape = x.shape.clone();
    off_shape[axis] = 1;
    unravel(&off_shape, "p", &mut s);
    let base: Vec<String> = (0..x.shape.len())
        .filter(|&k| k != axis)
        .map(|k| format!("o{k} * {}", xs[k]))
        .collect();
    let _ = writeln!(s, "    const int64_t base = {};", joined(base, " + ", "0"));
    let _ = writeln!(
        s,
        "    for (int64_t k = 0; k < {n}; k++) (({t} *)b0)[base + k * {xa}] = (({t} *)b1)[base + k * {xa}];",
        xa = xs[axis]
    );
    // The positions the indices reach (their shape may be smaller off the
    // axis).
    let inside: Vec<String> = (0..x.shape.len())
        .filter(|&k| k != axis && idx.shape[k] < x.shape[k])
        .map(|k| format!("o{k} < {}", idx.shape[k]))
        .collect();
    let ibase: Vec<String> = (0..idx.shape.len())
        .filter(|&k| k != axis)
        .map(|k| format!("o{k} * {}", is[k]))
        .collect();
    let dst = format!("(({t} *)b0)[base + i * {}]", xs[axis]);
    let _ = writeln!(s, "    if ({}) {{", joined(inside, " && ", "1"));
    let _ = writeln!(s, "      const int64_t ib = {};", joined(ibase, " + ", "0"));
    let _ = writeln!(s, "      for (int64_t j = 0; j < {m}; j++) {{");
    let _ = writeln!(
        s,
        "        int64_t i = (int64_t)(({it} *)b2)[ib + j * {ia}];",
        ia = is[axis]
    );
    let _ = writeln!(s, "        if (i < 0) i += {n};");
    let _ = writeln!(
        s,
        "        const {t} u = (({t} *)b3)[ib + j * {ia}];",
        ia = is[axis]
    );
    let _ = writeln!(
        s,
        "        {dst} = {};",
        d.binary(BinaryOp::Add, dtype, &dst, "u")
    );
    let _ = writeln!(s, "      }}\n    }}");
    s
}

/// The index (`int32`) of the first extreme along `axis` (`ArgReduce`),
/// as nx's: the first element is the best so far; a later one replaces it
/// when strictly greater (smaller for `argmin`) or the first NaN. One
/// thread per output: its line along the axis, `inner` elements apart.
fn arg_reduce(d: &Cuda, x: &Aval, max: bool, axis: usize) -> String {
    let dtype = x.dtype;
    let t = d.ty(dtype);
    let (len, inner) = line(x, axis);
    let cmp = if max { CmpOp::Gt } else { CmpOp::Lt };
    let better = format!(
        "{} | ({} & !{})",
        d.compare(cmp, dtype, "v", "best"),
        d.compare(CmpOp::Ne, dtype, "v", "v"),
        d.compare(CmpOp::Ne, dtype, "best", "best")
    );
    let mut s = String::new();
    let _ = writeln!(
        s,
        "    const int64_t base = (p / {inner}) * {} + p % {inner};",
        len * inner
    );
    if len == 0 {
        // nx refuses an empty axis; nothing to search.
        let _ = writeln!(s, "    ((int32_t *)b0)[p] = 0;");
        return s;
    }
    let _ = writeln!(
        s,
        "    {t} best = (({t} *)b1)[base];
    int32_t bi = 0;"
    );
    let _ = writeln!(s, "    for (int64_t a = 1; a < {len}; a++) {{");
    let _ = writeln!(s, "      const {t} v = (({t} *)b1)[base + a * {inner}];");
    let _ = writeln!(s, "      if ({better}) {{ best = v; bi = (int32_t)a; }}");
    let _ = writeln!(
        s,
        "    }}
    ((int32_t *)b0)[p] = bi;"
    );
    s
}

/// The inclusive running sum or product along `axis` (`Cumulative`), as
/// nx's: floats run in f64 (each element widened exactly, each running
/// value rounded to the type), integers wrap in their type, bools run an
/// `or` (sum) or an `and` (product) as nx's kernel would (its op refuses
/// them today). One thread per line along the axis.
fn cumulative(d: &Cuda, x: &Aval, op: nx::CumOp, axis: usize) -> String {
    let dtype = x.dtype;
    let t = d.ty(dtype);
    let (len, inner) = line(x, axis);
    let sum = op == nx::CumOp::Sum;
    let (acc_t, init, step, store) = if dtype.is_float() {
        let v = d.cast(dtype, DType::F64, "v");
        let step = if sum {
            format!("acc + {v}")
        } else {
            format!("acc * {v}")
        };
        let init = if sum { "0.0" } else { "1.0" };
        (
            "double",
            init.to_string(),
            step,
            d.cast(DType::F64, dtype, "acc"),
        )
    } else {
        let bop = match (dtype == DType::Bool, sum) {
            (true, true) => BinaryOp::Or,
            (true, false) => BinaryOp::And,
            (false, true) => BinaryOp::Add,
            (false, false) => BinaryOp::Mul,
        };
        let init = d.literal(dtype, if sum { 0.0 } else { 1.0 });
        (t, init, d.binary(bop, dtype, "acc", "v"), "acc".to_string())
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "    const int64_t base = (p / {inner}) * {} + p % {inner};",
        len * inner
    );
    let _ = writeln!(s, "    {acc_t} acc = {init};");
    let _ = writeln!(s, "    for (int64_t a = 0; a < {len}; a++) {{");
    let _ = writeln!(s, "      const {t} v = (({t} *)b1)[base + a * {inner}];");
    let _ = writeln!(s, "      acc = {step};");
    let _ = writeln!(s, "      (({t} *)b0)[base + a * {inner}] = {store};");
    let _ = writeln!(s, "    }}");
    s
}

/// A contiguous `x`'s line along `axis`: its length and the distance
/// between its elements (the elements after the axis).
fn line(x: &Aval, axis: usize) -> (usize, usize) {
    (x.shape[axis], x.shape[axis + 1..].iter().product())
}

/// How many threads a library kernel's grid-stride loop covers: the
/// output's points, or for a scatter-add and a running op the positions
/// off its axis (one line each).
pub fn points(prim: &Prim, out: &Aval) -> usize {
    match prim {
        Prim::ScatterAdd { axis } | Prim::Cumulative { axis, .. } => {
            out.numel() / out.shape[*axis].max(1)
        }
        _ => out.numel(),
    }
}
