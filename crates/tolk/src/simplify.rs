//! Simplification before scheduling: common subexpressions merged, dead
//! code removed, and equations whose inputs are all captured constants
//! folded into new constants (evaluated once, at compile time, by nx's
//! eager kernels). Chains of movement ops need no pass of their own: the
//! scheduler composes them into one strided view per load.

use crate::graph::{Eqn, Graph, Op, Var};
use nx::{DType, Prim, PrimClass, Tensor};
use rustc_hash::FxHashMap as HashMap;

/// `g` with constants folded, common subexpressions merged and dead
/// equations removed, in that order. Each pass moves the graph along rather
/// than copying it: a traced 1000-step scan has tens of thousands of
/// equations, and copying them (and their avals) was most of a pass's time.
pub fn simplify(g: Graph) -> Graph {
    let g = fold_constants(g);
    let g = injective_scatters(g);
    let g = rotating_gathers(g);
    let g = windows_as_maps(g);
    let g = outer_products(g);
    let g = cse(g);
    let g = shared_transposes(g);
    dce(g)
}

/// Scatters of at most this many output elements are looked at by
/// [`injective_scatters`] (their inverse map is built at compile time).
const INJECTIVE_SCATTER_MAX: usize = 1 << 22;

/// A `scatter_add` whose indices are a captured constant that sends no two
/// updates to one element (a permutation, a ring's neighbours, a strided
/// selection: what a gather by such indices transposes to) becomes a
/// gather by the inverse map, added where an update lands:
/// `where(hit, x + gather(updates, inverse), x)`, both maps constants. The
/// same bits (one addition per element that receives an update, as the
/// eager kernel's), and elementwise work that fuses with its neighbours,
/// where a scatter is a kernel of its own whose stores follow one another.
/// Indices out of range are left to the scatter (the runtime raises).
fn injective_scatters(mut g: Graph) -> Graph {
    let consts: HashMap<Var, Tensor> = g.consts.iter().cloned().collect();
    if consts.is_empty() {
        return g;
    }
    let def = defining_eqns(&g);
    let mut rewrites: Vec<Option<(Tensor, Option<Tensor>)>> = g
        .eqns
        .iter()
        .map(|e| match e.as_prim() {
            Some(Prim::ScatterAdd { axis }) => {
                let out_shape = &g.aval(e.out()).shape;
                let fits = nx::shape::numel(out_shape) <= INJECTIVE_SCATTER_MAX;
                let idx = if fits {
                    constant_through_views(&g, &def, &consts, e.inputs[1])
                } else {
                    None
                };
                idx.and_then(|idx| inverse_map(&idx, out_shape, *axis))
            }
            _ => None,
        })
        .collect();
    if rewrites.iter().all(Option::is_none) {
        return g;
    }
    let eqns = std::mem::take(&mut g.eqns);
    let mut out = Vec::with_capacity(eqns.len());
    for (e, rewrite) in eqns.into_iter().zip(rewrites.iter_mut()) {
        let Some((inverse, hit)) = rewrite.take() else {
            out.push(e);
            continue;
        };
        let Some(&Prim::ScatterAdd { axis }) = e.as_prim() else {
            unreachable!()
        };
        let (x, updates) = (e.inputs[0], e.inputs[2]);
        let aval = g.aval(e.out()).clone();
        let inv = g.new_var(inverse.aval());
        g.consts.push((inv, inverse));
        let picked = g.new_var(aval.clone());
        out.push(Eqn::prim(Prim::Gather { axis }, vec![updates, inv], picked));
        match hit {
            None => out.push(Eqn::prim(
                Prim::Binary(nx::BinaryOp::Add),
                vec![x, picked],
                e.out(),
            )),
            Some(hit) => {
                let h = g.new_var(hit.aval());
                g.consts.push((h, hit));
                let sum = g.new_var(aval);
                out.push(Eqn::prim(
                    Prim::Binary(nx::BinaryOp::Add),
                    vec![x, picked],
                    sum,
                ));
                out.push(Eqn::prim(Prim::Where, vec![h, sum, x], e.out()));
            }
        }
    }
    g.eqns = out;
    g
}

/// A gather whose captured indices pick a run of consecutive elements
/// along its axis, the same run at every position off the axis, possibly
/// wrapping around the axis's end (`take` of `(i + b) % n`: a ring's
/// neighbours, a shifted window, what an injective scatter by a rotation
/// became), is that slice, or the concatenation of the two slices of a
/// rotation: movement ops the kernels read through views and masked loads
/// (a `roll`'s), where a gather is an indexed load per element. The same
/// elements. Indices out of range are left to the gather (the runtime
/// raises).
fn rotating_gathers(mut g: Graph) -> Graph {
    let consts: HashMap<Var, Tensor> = g.consts.iter().cloned().collect();
    if consts.is_empty() {
        return g;
    }
    let def = defining_eqns(&g);
    let runs: Vec<Option<(usize, usize)>> = g
        .eqns
        .iter()
        .map(|e| match e.as_prim() {
            Some(Prim::Gather { axis }) => {
                let idx = constant_through_views(&g, &def, &consts, e.inputs[1])?;
                let n = g.aval(e.inputs[0]).shape[*axis];
                consecutive_run(&idx, *axis, n).map(|b| (*axis, b))
            }
            _ => None,
        })
        .collect();
    if runs.iter().all(Option::is_none) {
        return g;
    }
    let eqns = std::mem::take(&mut g.eqns);
    let mut out = Vec::with_capacity(eqns.len());
    for (e, run) in eqns.into_iter().zip(runs) {
        let Some((axis, b)) = run else {
            out.push(e);
            continue;
        };
        let x = e.inputs[0];
        let shape = g.aval(x).shape.clone();
        let dtype = g.aval(x).dtype;
        let (n, k) = (shape[axis], g.aval(e.out()).shape[axis]);
        let slice =
            |g: &mut Graph, out: &mut Vec<Eqn>, from: usize, to: usize, var: Option<Var>| {
                let (mut start, mut end) = (vec![0; shape.len()], shape.clone());
                start[axis] = from;
                end[axis] = to;
                let mut s = shape.clone();
                s[axis] = to - from;
                let v = var.unwrap_or_else(|| g.new_var(nx::Aval::new(&s, dtype)));
                let step = vec![1; shape.len()];
                out.push(Eqn::prim(Prim::Slice { start, end, step }, vec![x], v));
                v
            };
        if b + k <= n {
            slice(&mut g, &mut out, b, b + k, Some(e.out()));
        } else {
            let head = slice(&mut g, &mut out, b, n, None);
            let tail = slice(&mut g, &mut out, 0, b + k - n, None);
            out.push(Eqn::prim(Prim::Concat { axis }, vec![head, tail], e.out()));
        }
    }
    g.eqns = out;
    g
}

/// Window reductions of at most this many points per window become maps
/// ([`windows_as_maps`]): each point is one load per output.
const WINDOW_MAP_MAX: usize = 32;

/// A window reduction (`reduce_window`: max and sum pools, the transpose
/// of a strided sum pool) over small windows becomes elementwise work: per window position, in row-major
/// window order, the strided slice of the (padded) input holding that
/// position of every window, folded into an accumulator as nx's eager
/// kernel folds it (a sum from `0 +`, f16/bf16 summed in f32; a max as
/// `where(v > acc | v != v, v, acc)`, its NaN and signed-zero choices).
/// The same bits, and a map that fuses with what produces its input (a
/// bias and relu before a pool) and what consumes it, on every dialect,
/// where `reduce_window` is a library step (on CUDA a kernel of its own,
/// `codegen::cuda_library`, which does not fuse). Padding
/// holds the value the eager kernel skips it as: 0 for a sum (adding +0
/// changes no sum that started from +0). Maxes with padding, or whose
/// windows overlap along the last axis at a stride above 1, stay library
/// steps: a padded value is a masked load, which reads a buffer (the
/// producer would not fuse), and gcc 12 vectorizes neither masked loads
/// nor overlapping ones at a stride, leaving a scalar loop whose selects
/// are branches that random data mispredicts (a 3x3/2 max pool over
/// [32, 64, 32, 32]: 5.7 ms as a map with SAME padding, 11 ms VALID,
/// 1.5 ms as nx's kernel, which reduces one axis at a time; 2-vCPU AMD
/// EPYC). Bool and complex windows stay library steps too.
fn windows_as_maps(mut g: Graph) -> Graph {
    use nx::{BinaryOp, CmpOp, ReduceOp};
    let eligible = |g: &Graph, e: &Eqn| match e.as_prim() {
        Some(Prim::ReduceWindow {
            op,
            window,
            strides,
            padding,
        }) => {
            let dt = g.aval(e.inputs[0]).dtype;
            let padded = padding.iter().any(|&p| p != (0, 0));
            window.iter().product::<usize>() <= WINDOW_MAP_MAX
                && g.aval(e.out()).numel() > 0
                && match op {
                    ReduceOp::Sum => dt.is_float() || dt.is_int(),
                    ReduceOp::Max => {
                        let (w, s) = (window[window.len() - 1], strides[strides.len() - 1]);
                        let interleaved = 1 < s && s < w;
                        !padded && !interleaved && (dt.is_float() || dt.is_int())
                    }
                    _ => false,
                }
        }
        _ => false,
    };
    if !g.eqns.iter().any(|e| eligible(&g, e)) {
        return g;
    }
    let eqns = std::mem::take(&mut g.eqns);
    let mut out = Vec::with_capacity(eqns.len());
    for e in eqns {
        if !eligible(&g, &e) {
            out.push(e);
            continue;
        }
        let Some(Prim::ReduceWindow {
            op,
            window,
            strides,
            padding,
        }) = e.as_prim().cloned()
        else {
            unreachable!()
        };
        let x = g.aval(e.inputs[0]).clone();
        let o = g.aval(e.out()).shape.clone();
        let nd = o.len();
        let mut push = |g: &mut Graph, prim: Prim, inputs: Vec<Var>, shape: &[usize], dtype| {
            let v = g.new_var(nx::Aval::new(shape, dtype));
            out.push(Eqn::prim(prim, inputs, v));
            v
        };
        let mut xp = e.inputs[0];
        if padding.iter().any(|&p| p != (0, 0)) {
            let shape: Vec<usize> = (0..nd)
                .map(|d| x.shape[d] + padding[d].0 + padding[d].1)
                .collect();
            let value = if op == ReduceOp::Sum {
                0.0
            } else {
                f64::NEG_INFINITY
            };
            let prim = Prim::Pad {
                lo: padding.iter().map(|p| p.0).collect(),
                hi: padding.iter().map(|p| p.1).collect(),
                value: value.into(),
            };
            xp = push(&mut g, prim, vec![xp], &shape, x.dtype);
        }
        // f16/bf16 sums accumulate in f32, as the eager kernel does.
        let half = op == ReduceOp::Sum && matches!(x.dtype, DType::F16 | DType::BF16);
        let acc_dt = if half { DType::F32 } else { x.dtype };
        let mut positions: Vec<Vec<usize>> = vec![vec![]];
        for &w in &window {
            positions = positions
                .into_iter()
                .flat_map(|p| {
                    (0..w).map(move |k| {
                        let mut q = p.clone();
                        q.push(k);
                        q
                    })
                })
                .collect();
        }
        let mut acc: Option<Var> = None;
        for p in positions {
            let prim = Prim::Slice {
                start: p.clone(),
                end: (0..nd)
                    .map(|d| p[d] + (o[d] - 1) * strides[d] + 1)
                    .collect(),
                step: strides.clone(),
            };
            let mut v = push(&mut g, prim, vec![xp], &o, x.dtype);
            if half {
                v = push(&mut g, Prim::Cast(DType::F32), vec![v], &o, DType::F32);
            }
            acc = Some(match (op, acc) {
                (ReduceOp::Sum, None) if acc_dt.is_float() => {
                    let zero = Prim::Full {
                        shape: o.clone(),
                        dtype: acc_dt,
                        value: 0.0.into(),
                    };
                    let z = push(&mut g, zero, vec![], &o, acc_dt);
                    push(&mut g, Prim::Binary(BinaryOp::Add), vec![z, v], &o, acc_dt)
                }
                (_, None) => v,
                (ReduceOp::Sum, Some(a)) => {
                    push(&mut g, Prim::Binary(BinaryOp::Add), vec![a, v], &o, acc_dt)
                }
                (_, Some(a)) => {
                    let bigger = push(
                        &mut g,
                        Prim::Compare(CmpOp::Gt),
                        vec![v, a],
                        &o,
                        DType::Bool,
                    );
                    let nan = push(
                        &mut g,
                        Prim::Compare(CmpOp::Ne),
                        vec![v, v],
                        &o,
                        DType::Bool,
                    );
                    let take = push(
                        &mut g,
                        Prim::Binary(BinaryOp::Or),
                        vec![bigger, nan],
                        &o,
                        DType::Bool,
                    );
                    push(&mut g, Prim::Where, vec![take, v, a], &o, acc_dt)
                }
            });
        }
        let acc = acc.expect("a window has a point");
        if half {
            out.push(Eqn::prim(Prim::Cast(x.dtype), vec![acc], e.out()));
        } else {
            // The last equation computes the window's value: it is the output.
            let last = out.last_mut().expect("pushed");
            debug_assert_eq!(last.outs, [acc]);
            last.outs = vec![e.out()];
        }
    }
    g.eqns = out;
    g
}

/// Per variable, the equation that defines it (`None`: an input or a
/// constant).
fn defining_eqns(g: &Graph) -> Vec<Option<usize>> {
    let mut def = vec![None; g.avals.len()];
    for (i, e) in g.eqns.iter().enumerate() {
        for &o in &e.outs {
            def[o] = Some(i);
        }
    }
    def
}

/// The value of `v` when it is a captured constant seen through views,
/// evaluated.
fn constant_through_views(
    g: &Graph,
    def: &[Option<usize>],
    consts: &HashMap<Var, Tensor>,
    v: Var,
) -> Option<Tensor> {
    let mut chain = Vec::new();
    let mut v = v;
    while let Some(d) = def[v] {
        let p = g.eqns[d]
            .as_prim()
            .filter(|p| p.class() == PrimClass::View)?;
        chain.push(p.clone());
        v = g.eqns[d].inputs[0];
    }
    let mut t = consts.get(&v)?.clone();
    for p in chain.into_iter().rev() {
        t = nx::raw::eval(p, &[&t]);
    }
    Some(t)
}

/// `Some(b)` when the indices `idx` (I32 or I64), gathering along `axis`
/// of size `n`, are `(b + j) mod n` at position `j` along the axis, the
/// same at every position off it, with at most `n` of them.
fn consecutive_run(idx: &Tensor, axis: usize, n: usize) -> Option<usize> {
    let shape = idx.shape().to_vec();
    let k = shape[axis];
    let total = nx::shape::numel(&shape);
    if k == 0 || k > n || total == 0 || total > INJECTIVE_SCATTER_MAX {
        return None;
    }
    let values = idx.cast(nx::DType::I64).to_vec::<i64>();
    let n = n as i64;
    let inner: usize = shape[axis + 1..].iter().product();
    let b = values[0];
    if b < -n || b >= n {
        return None;
    }
    let b = b.rem_euclid(n);
    for (l, &i) in values.iter().enumerate() {
        let j = ((l / inner) % k) as i64;
        if i < -n || i >= n || i.rem_euclid(n) != (b + j) % n {
            return None;
        }
    }
    Some(b as usize)
}

/// For indices `idx` (I32 or I64) scattering along `axis` into `out_shape`:
/// per output element, the position along `axis` of the one update that
/// lands there (I32), and which elements one lands on (`None` when all
/// do); `None` when two land on one element, an index is out of range or
/// there is no index.
fn inverse_map(idx: &Tensor, out_shape: &[usize], axis: usize) -> Option<(Tensor, Option<Tensor>)> {
    let shape = idx.shape().to_vec();
    let n = out_shape[axis] as i64;
    if n > i32::MAX as i64 {
        return None;
    }
    let values = idx.cast(nx::DType::I64).to_vec::<i64>();
    // No updates: the gather would read an empty axis (at the index 0 of
    // every element no update lands on); the scatter copies `x`.
    if values.is_empty() {
        return None;
    }
    let out_strides = nx::shape::contiguous_strides(out_shape);
    let total = nx::shape::numel(out_shape);
    let mut inverse = vec![0i32; total];
    let mut hit = vec![false; total];
    let mut at = vec![0usize; shape.len()];
    for &i in &values {
        if i < -n || i >= n {
            return None;
        }
        let i = if i < 0 { i + n } else { i };
        let q: isize = at
            .iter()
            .enumerate()
            .map(|(d, &c)| if d == axis { i as isize } else { c as isize } * out_strides[d])
            .sum();
        let q = q as usize;
        if std::mem::replace(&mut hit[q], true) {
            return None;
        }
        inverse[q] = at[axis] as i32;
        // Row-major odometer over the indices' shape.
        for d in (0..shape.len()).rev() {
            at[d] += 1;
            if at[d] < shape[d] {
                break;
            }
            at[d] = 0;
        }
    }
    let inverse = Tensor::from_vec(inverse, out_shape);
    let hit = (!hit.iter().all(|&h| h)).then(|| Tensor::from_vec(hit, out_shape));
    Some((inverse, hit))
}

/// Matrix products that read one operand transposed, at least this many
/// times, read a contiguous transposed copy made once instead.
const SHARED_TRANSPOSE_MIN: usize = 4;

/// Products `a @ w^T` (a `dot_general` contracting both operands' last
/// axis, as reverse mode writes them, or one reading a transposed view of
/// `w`) that share their `w`, at least [`SHARED_TRANSPOSE_MIN`] of them,
/// read one contiguous copy of `w^T` made before the first: the GEMM crate
/// packs a transposed right operand at about half the speed of a
/// contiguous one (a 32x128 @ 128x128 product 21.6 us against 12.4 here),
/// and a scan's backward pass multiplies by the same weight's transpose at
/// every step. The copy costs one pass over `w`; a weight read transposed
/// once or twice (an MLP's layers) keeps its strided read.
fn shared_transposes(mut g: Graph) -> Graph {
    let def = defining_eqns(&g);
    // The matrix a product reads transposed as its right operand, if any.
    let transposed = |g: &Graph, e: &Eqn| -> Option<Var> {
        let Some(Prim::DotGeneral {
            lhs_batch,
            rhs_batch,
            lhs_contract,
            rhs_contract,
        }) = e.as_prim()
        else {
            return None;
        };
        let matrix = |v: Var| g.aval(v).shape.len() == 2;
        if !lhs_batch.is_empty()
            || !rhs_batch.is_empty()
            || !matrix(e.inputs[0])
            || !matrix(e.inputs[1])
            || lhs_contract != &[1]
        {
            return None;
        }
        match rhs_contract.as_slice() {
            [1] => Some(e.inputs[1]),
            [0] => match def[e.inputs[1]].map(|d| &g.eqns[d]) {
                Some(d) => match d.as_prim() {
                    Some(Prim::Permute { perm }) if perm == &[1, 0] => Some(d.inputs[0]),
                    _ => None,
                },
                None => None,
            },
            _ => None,
        }
    };
    let reads: Vec<Option<Var>> = g.eqns.iter().map(|e| transposed(&g, e)).collect();
    let mut uses: HashMap<Var, usize> = HashMap::default();
    for &w in reads.iter().flatten() {
        *uses.entry(w).or_default() += 1;
    }
    if uses.values().all(|&n| n < SHARED_TRANSPOSE_MIN) {
        return g;
    }
    let mut copy_of: HashMap<Var, Var> = HashMap::default();
    let eqns = std::mem::take(&mut g.eqns);
    let mut out = Vec::with_capacity(eqns.len() + 2 * uses.len());
    for (mut e, w) in eqns.into_iter().zip(reads) {
        if let Some(w) = w.filter(|w| uses[w] >= SHARED_TRANSPOSE_MIN) {
            let wt = match copy_of.get(&w) {
                Some(&wt) => wt,
                None => {
                    let a = g.aval(w).clone();
                    let shape = vec![a.shape[1], a.shape[0]];
                    let view = g.new_var(nx::Aval::new(&shape, a.dtype));
                    let wt = g.new_var(nx::Aval::new(&shape, a.dtype));
                    out.push(Eqn::prim(Prim::Permute { perm: vec![1, 0] }, vec![w], view));
                    out.push(Eqn::prim(Prim::Copy, vec![view], wt));
                    copy_of.insert(w, wt);
                    wt
                }
            };
            e.inputs[1] = wt;
            e.op = Op::Prim(Prim::DotGeneral {
                lhs_batch: vec![],
                rhs_batch: vec![],
                lhs_contract: vec![1],
                rhs_contract: vec![0],
            });
        }
        out.push(e);
    }
    g.eqns = out;
    g
}

/// A float product whose contracted axes all have size 1 (an outer
/// product, batched or not: vmap of a dense layer's gradient makes them by
/// the hundred) becomes an elementwise multiply of its operands broadcast
/// to the output: a fused kernel's work, where nx runs a small product per
/// batch element (256 outer products of 32 x 64 were 95 us of a 280 us
/// step). The same bits as nx's product of one term (its sums start from
/// -0, so the term is the result, zeros' signs included) where nx runs it
/// through its tiny loops or the GEMM: products of fewer than 2^20
/// multiply-adds per matrix (larger ones go to faer, left alone) whose
/// operands are no views (a strided operand can send nx to faer too) other
/// than reshapes of a computed value.
fn outer_products(mut g: Graph) -> Graph {
    let def = defining_eqns(&g);
    // Inputs reach products contiguous (`Program::run` copies views);
    // captured constants may be views, so they are left alone.
    let consts: Vec<Var> = g.consts.iter().map(|(v, _)| *v).collect();
    let plain = |g: &Graph, mut v: Var| loop {
        match def[v].and_then(|i| g.eqns[i].as_prim()) {
            Some(Prim::Reshape { .. }) => v = g.eqns[def[v].unwrap()].inputs[0],
            Some(p) => return p.class() != PrimClass::View,
            None => return !consts.contains(&v),
        }
    };
    let is_outer = |g: &Graph, e: &Eqn| match e.as_prim() {
        Some(Prim::DotGeneral {
            lhs_batch,
            lhs_contract,
            ..
        }) => {
            let lhs = &g.aval(e.inputs[0]).shape;
            let out = g.aval(e.out());
            let per_matrix: usize = out.shape[lhs_batch.len()..].iter().product();
            matches!(out.dtype, DType::F32 | DType::F64)
                && lhs_contract.iter().all(|&a| lhs[a] == 1)
                && per_matrix < 1 << 20
                && plain(g, e.inputs[0])
                && plain(g, e.inputs[1])
        }
        _ => false,
    };
    let outer: Vec<bool> = g.eqns.iter().map(|e| is_outer(&g, e)).collect();
    if !outer.contains(&true) {
        return g;
    }
    let eqns = std::mem::take(&mut g.eqns);
    for (e, outer) in eqns.into_iter().zip(outer) {
        if !outer {
            g.eqns.push(e);
            continue;
        }
        let Some(Prim::DotGeneral {
            lhs_batch,
            rhs_batch,
            lhs_contract,
            rhs_contract,
        }) = e.as_prim().cloned()
        else {
            unreachable!("an outer product is a dot_general")
        };
        let out = g.aval(e.out()).clone();
        let nb = lhs_batch.len();
        // Each operand's axes in the output's order (its batch axes, then
        // its free ones), the contracted ones last; then reshaped with the
        // contracted (size 1) axes dropped and a 1 for each of the other
        // operand's free axes, which the broadcast fills.
        let mut operand = |v: Var, batch: &[usize], contract: &[usize], left: bool| -> Var {
            let shape_in = g.aval(v).shape.clone();
            let free: Vec<usize> = (0..shape_in.len())
                .filter(|a| !batch.contains(a) && !contract.contains(a))
                .collect();
            let perm: Vec<usize> = batch.iter().chain(&free).chain(contract).copied().collect();
            let permuted: Vec<usize> = perm.iter().map(|&a| shape_in[a]).collect();
            let t = g.new_var(nx::Aval::new(&permuted, out.dtype));
            g.eqns.push(Eqn::prim(Prim::Permute { perm }, vec![v], t));
            let ones = std::iter::repeat_n(1, out.shape.len() - nb - free.len());
            let free_sizes = free.iter().map(|&a| shape_in[a]);
            let mut shape: Vec<usize> = batch.iter().map(|&a| shape_in[a]).collect();
            if left {
                shape.extend(free_sizes.chain(ones));
            } else {
                shape.extend(ones.chain(free_sizes));
            }
            let r = g.new_var(nx::Aval::new(&shape, out.dtype));
            g.eqns.push(Eqn::prim(Prim::Reshape { shape }, vec![t], r));
            let b = g.new_var(out.clone());
            let to = Prim::Broadcast {
                shape: out.shape.clone(),
            };
            g.eqns.push(Eqn::prim(to, vec![r], b));
            b
        };
        let l = operand(e.inputs[0], &lhs_batch, &lhs_contract, true);
        let r = operand(e.inputs[1], &rhs_batch, &rhs_contract, false);
        g.eqns.push(Eqn::prim(
            Prim::Binary(nx::BinaryOp::Mul),
            vec![l, r],
            e.out(),
        ));
    }
    g
}

/// The scalar every element of `v` holds, if `v` is a `Full` seen through
/// broadcasts and reshapes.
fn splat<'a>(v: Var, def: &impl Fn(Var) -> Option<&'a Eqn>) -> Option<f64> {
    let e = def(v)?;
    match e.as_prim()? {
        Prim::Full { value, .. } => Some(value.get()),
        Prim::Broadcast { .. } | Prim::Reshape { .. } => splat(e.inputs[0], def),
        _ => None,
    }
}

/// The input `e` computes unchanged, bit for bit, if it does: `x * 1`,
/// `x / 1`, `x - 0`, `-(-x)`, casts and movements that change nothing. (`x + 0`
/// is not one for floats: `-0 + 0` is `+0`.)
///
/// (Dropping `x * 1` can hand a later library reduction a view of `x`
/// where eager reduces its contiguous product; the sum's order, and so its
/// last bits, may then differ, within the bound stated for reductions.)
fn identity_of<'a>(g: &Graph, e: &Eqn, def: &impl Fn(Var) -> Option<&'a Eqn>) -> Option<Var> {
    let prim = e.as_prim()?;
    let same = |v: Var| g.aval(v) == g.aval(e.out());
    let one = |v: Var| splat(v, def) == Some(1.0);
    let zero = |v: Var| splat(v, def).is_some_and(|z| z == 0.0 && z.is_sign_positive());
    let int = !g.aval(e.out()).dtype.is_float();
    let x = *e.inputs.first()?;
    let found = match prim {
        Prim::Binary(nx::BinaryOp::Mul) if one(e.inputs[1]) => Some(x),
        Prim::Binary(nx::BinaryOp::Mul) if one(x) => Some(e.inputs[1]),
        Prim::Binary(nx::BinaryOp::Div) if one(e.inputs[1]) => Some(x),
        Prim::Binary(nx::BinaryOp::Sub) if zero(e.inputs[1]) => Some(x),
        Prim::Binary(nx::BinaryOp::Add) if int && zero(e.inputs[1]) => Some(x),
        Prim::Binary(nx::BinaryOp::Add) if int && zero(x) => Some(e.inputs[1]),
        Prim::Unary(nx::UnaryOp::Neg) => match def(x) {
            Some(d) if d.as_prim() == Some(&Prim::Unary(nx::UnaryOp::Neg)) => Some(d.inputs[0]),
            _ => None,
        },
        Prim::Cast(_) | Prim::Reshape { .. } | Prim::Broadcast { .. } => Some(x),
        Prim::Permute { perm } if perm.iter().enumerate().all(|(i, &p)| i == p) => Some(x),
        _ => None,
    };
    found.filter(|&v| same(v))
}

/// Whether common-subexpression elimination may merge `a` and `b`: the
/// same primitive (fill values compared by bits, as `Prim`'s `Eq`) on the
/// same inputs. Loops are never merged.
fn same_expression(a: &Eqn, b: &Eqn) -> bool {
    match (a.as_prim(), b.as_prim()) {
        (Some(p), Some(q)) => p == q && a.inputs == b.inputs,
        _ => false,
    }
}

/// A hash of what [`same_expression`] compares.
fn expression_hash(e: &Eqn) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = rustc_hash::FxHasher::default();
    e.inputs.hash(&mut h);
    if let Some(p) = e.as_prim() {
        p.hash(&mut h);
    }
    h.finish()
}

/// Merges equations with the same primitive and the same inputs, and drops
/// algebraic identities (except where the result is an output or a
/// writeback: those stay fresh tensors, as eager's results are).
fn cse(mut g: Graph) -> Graph {
    let mut subst: Vec<Var> = (0..g.avals.len()).collect();
    // Kept equations by expression hash: the latest kept index with that
    // hash, and for each kept index the previous one with the same hash.
    let mut latest: HashMap<u64, usize> = HashMap::default();
    let mut previous: Vec<Option<usize>> = Vec::with_capacity(g.eqns.len());
    // Defining equation of each kept variable, as an index into `kept`.
    let mut def: Vec<Option<usize>> = vec![None; g.avals.len()];
    let mut keep = vec![false; g.avals.len()];
    for &v in g.outputs.iter().chain(g.writebacks.iter().map(|(_, v)| v)) {
        keep[v] = true;
    }
    let eqns = std::mem::take(&mut g.eqns);
    let mut kept: Vec<Eqn> = Vec::with_capacity(eqns.len());
    for mut e in eqns {
        for v in e.inputs.iter_mut() {
            *v = subst[*v];
        }
        if let Op::Loop(_) = e.op {
            for &o in &e.outs {
                def[o] = Some(kept.len());
            }
            previous.push(None);
            kept.push(e);
            continue;
        }
        if !keep[e.out()] {
            let lookup = |v: Var| def[v].map(|i| &kept[i]);
            if let Some(v) = identity_of(&g, &e, &lookup) {
                subst[e.out()] = v;
                continue;
            }
        }
        let h = expression_hash(&e);
        let mut candidate = latest.get(&h).copied();
        while let Some(i) = candidate {
            if same_expression(&kept[i], &e) {
                break;
            }
            candidate = previous[i];
        }
        if let Some(i) = candidate {
            subst[e.out()] = kept[i].out();
            continue;
        }
        previous.push(latest.insert(h, kept.len()));
        def[e.out()] = Some(kept.len());
        kept.push(e);
    }
    g.eqns = kept;
    for v in g.outputs.iter_mut() {
        *v = subst[*v];
    }
    for (_, v) in g.writebacks.iter_mut() {
        *v = subst[*v];
    }
    g
}

/// Drops equations whose results nothing uses, and constants likewise.
fn dce(mut g: Graph) -> Graph {
    let mut live = vec![false; g.avals.len()];
    for &v in g.outputs.iter().chain(g.writebacks.iter().map(|(_, v)| v)) {
        live[v] = true;
    }
    for e in g.eqns.iter().rev() {
        if e.outs.iter().any(|&o| live[o]) {
            for &v in &e.inputs {
                live[v] = true;
            }
        }
    }
    g.eqns.retain(|e| e.outs.iter().any(|&o| live[o]));
    g.consts.retain(|(v, _)| live[*v]);
    g
}

/// Evaluates equations whose inputs are all constants (a captured weight
/// transposed, a constant table cast) into new constants.
fn fold_constants(mut g: Graph) -> Graph {
    if g.consts.is_empty() {
        return g; // nothing to fold: every equation reads an input or a fill
    }
    let mut is_const = vec![false; g.avals.len()];
    let mut values: HashMap<Var, nx::Tensor> = HashMap::default();
    for (v, t) in &g.consts {
        is_const[*v] = true;
        values.insert(*v, t.clone());
    }
    let mut folded = Vec::new();
    g.eqns.retain(|e| {
        let Some(prim) = e.as_prim() else {
            return true; // loops run when the program does
        };
        let foldable = !e.inputs.is_empty()
            && e.inputs.iter().all(|&v| is_const[v])
            // Views stay views of the capture (folding a broadcast would
            // materialize it).
            && !matches!(prim.class(), PrimClass::View | PrimClass::InPlace);
        if foldable {
            let ins: Vec<&nx::Tensor> = e.inputs.iter().map(|v| &values[v]).collect();
            let t = nx::raw::eval(prim.clone(), &ins);
            folded.push((e.out(), t.clone()));
            values.insert(e.out(), t);
            is_const[e.out()] = true;
        }
        !foldable
    });
    g.consts.extend(folded);
    g
}

#[cfg(test)]
mod tests {
    use super::*;
    use nx::{Aval, DType};

    /// CSE merges equal equations only: `0.0` and `-0.0` fills stay apart,
    /// as do slices of one input at different offsets (which hash alike
    /// but for their parameters); repeated ones merge.
    #[test]
    fn cse_merges_equal_equations_and_keeps_different_parameters_apart() {
        let mut g = Graph::default();
        let x = g.new_var(Aval::new(&[4], DType::F32));
        g.inputs = vec![x];
        let eqn = |g: &mut Graph, prim: Prim, inputs: Vec<Var>, shape: &[usize]| {
            let out = g.new_var(Aval::new(shape, DType::F32));
            g.eqns.push(Eqn::prim(prim, inputs, out));
            out
        };
        let full = |value: f64| Prim::Full {
            shape: vec![],
            dtype: DType::F32,
            value: value.into(),
        };
        let slice = |i: usize| Prim::Slice {
            start: vec![i],
            end: vec![i + 1],
            step: vec![1],
        };
        let zero = eqn(&mut g, full(0.0), vec![], &[]);
        let neg_zero = eqn(&mut g, full(-0.0), vec![], &[]);
        let zero_again = eqn(&mut g, full(0.0), vec![], &[]);
        let s0 = eqn(&mut g, slice(0), vec![x], &[1]);
        let s1 = eqn(&mut g, slice(1), vec![x], &[1]);
        let s0_again = eqn(&mut g, slice(0), vec![x], &[1]);
        // Outputs stay fresh results, never merged: consume the candidates
        // through negations, so CSE may merge them.
        let mut outs = Vec::new();
        for v in [zero, neg_zero, zero_again, s0, s1, s0_again] {
            let shape = g.aval(v).shape.clone();
            outs.push(eqn(&mut g, Prim::Unary(nx::UnaryOp::Neg), vec![v], &shape));
        }
        g.outputs = outs.clone();
        let s = cse(g);
        // Output `i`, after renaming: merged equations share a variable.
        let o = |i: usize| s.outputs[i];
        assert_eq!(o(0), o(2), "equal fills merge");
        assert_ne!(o(0), o(1), "0.0 and -0.0 stay apart");
        assert_eq!(o(3), o(5), "equal slices merge");
        assert_ne!(o(3), o(4), "different slices stay apart");
        assert_eq!(s.eqns.len(), 8, "two fills, two slices, four negations");
    }

    /// Equations over captured constants only become constants (evaluated
    /// by nx, so the same bits), in place; views of a capture stay views;
    /// anything reading an input stays an equation. Without captures the
    /// graph is returned as it came.
    #[test]
    fn fold_constants_evaluates_equations_over_captures_only() {
        let mut g = Graph::default();
        let x = g.new_var(Aval::new(&[3], DType::F32));
        let c = g.new_var(Aval::new(&[3], DType::F32));
        let c_val = nx::Tensor::from_slice(&[0.5f32, -1.0, 2.0], &[3]);
        g.inputs = vec![x];
        g.consts = vec![(c, c_val.clone())];
        let eqn = |g: &mut Graph, prim: Prim, inputs: Vec<Var>, shape: &[usize]| {
            let out = g.new_var(Aval::new(shape, DType::F32));
            g.eqns.push(Eqn::prim(prim, inputs, out));
            out
        };
        let e = eqn(&mut g, Prim::Unary(nx::UnaryOp::Exp), vec![c], &[3]);
        let view = eqn(
            &mut g,
            Prim::Reshape { shape: vec![3, 1] },
            vec![e],
            &[3, 1],
        );
        let y = eqn(&mut g, Prim::Binary(nx::BinaryOp::Add), vec![x, e], &[3]);
        g.outputs = vec![y, view];
        let f = fold_constants(g.clone());
        assert_eq!(f.consts.len(), 2, "the capture, then exp of it");
        assert_eq!(f.consts[1].0, e);
        assert_eq!(
            f.consts[1].1.to_vec::<f32>(),
            c_val.exp().to_vec::<f32>(),
            "folded by nx: eager's bits"
        );
        let kept: Vec<Var> = f.eqns.iter().map(|q| q.out()).collect();
        assert_eq!(
            kept,
            vec![view, y],
            "the view and the input's sum stay, in order"
        );
        g.consts.clear();
        let unchanged = fold_constants(g);
        assert_eq!(unchanged.eqns.len(), 3);
        assert!(unchanged.consts.is_empty());
    }
}
