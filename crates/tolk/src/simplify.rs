//! Simplification before scheduling: common subexpressions merged, dead
//! code removed, and equations whose inputs are all captured constants
//! folded into new constants (evaluated once, at compile time, by nx's
//! eager kernels). Chains of movement ops need no pass of their own: the
//! scheduler composes them into one strided view per load.

use crate::graph::{Eqn, Graph, Var};
use nx::Prim;
use rustc_hash::FxHashMap as HashMap;

/// `g` with constants folded, common subexpressions merged and dead
/// equations removed, in that order.
pub fn simplify(g: &Graph) -> Graph {
    let g = fold_constants(g);
    let g = cse(&g);
    dce(&g)
}

/// `g` without its equations (cloning only the rest).
fn without_eqns(g: &Graph, capacity: usize) -> Graph {
    Graph {
        avals: g.avals.clone(),
        inputs: g.inputs.clone(),
        consts: g.consts.clone(),
        eqns: Vec::with_capacity(capacity),
        outputs: g.outputs.clone(),
        writebacks: g.writebacks.clone(),
    }
}

/// Replaces every variable by its representative in `subst`.
fn rename(v: Var, subst: &[Var]) -> Var {
    subst[v]
}

/// The scalar every element of `v` holds, if `v` is a `Full` seen through
/// broadcasts and reshapes.
fn splat<'a>(v: Var, def: &impl Fn(Var) -> Option<&'a Eqn>) -> Option<f64> {
    match def(v) {
        Some(Eqn {
            prim: Prim::Full { value, .. },
            ..
        }) => Some(*value),
        Some(Eqn {
            prim: Prim::Broadcast { .. } | Prim::Reshape { .. },
            inputs,
            ..
        }) => splat(inputs[0], def),
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
    let same = |v: Var| g.aval(v) == g.aval(e.out);
    let one = |v: Var| splat(v, def) == Some(1.0);
    let zero = |v: Var| splat(v, def).is_some_and(|z| z == 0.0 && z.is_sign_positive());
    let int = !g.aval(e.out).dtype.is_float();
    let x = *e.inputs.first()?;
    let found = match &e.prim {
        Prim::Binary(nx::BinaryOp::Mul) if one(e.inputs[1]) => Some(x),
        Prim::Binary(nx::BinaryOp::Mul) if one(x) => Some(e.inputs[1]),
        Prim::Binary(nx::BinaryOp::Div) if one(e.inputs[1]) => Some(x),
        Prim::Binary(nx::BinaryOp::Sub) if zero(e.inputs[1]) => Some(x),
        Prim::Binary(nx::BinaryOp::Add) if int && zero(e.inputs[1]) => Some(x),
        Prim::Binary(nx::BinaryOp::Add) if int && zero(x) => Some(e.inputs[1]),
        Prim::Unary(nx::UnaryOp::Neg) => match def(x) {
            Some(Eqn {
                prim: Prim::Unary(nx::UnaryOp::Neg),
                inputs,
                ..
            }) => Some(inputs[0]),
            _ => None,
        },
        Prim::Cast(_) | Prim::Reshape { .. } | Prim::Broadcast { .. } => Some(x),
        Prim::Permute { perm } if perm.iter().enumerate().all(|(i, &p)| i == p) => Some(x),
        _ => None,
    };
    found.filter(|&v| same(v))
}

/// An equation as common-subexpression elimination compares it: the same
/// primitive with the same parameters (constants compared by their bits,
/// so `0.0` and `-0.0` stay apart) on the same inputs.
struct CseKey(Prim, Vec<Var>);

impl PartialEq for CseKey {
    fn eq(&self, other: &CseKey) -> bool {
        let same_prim = match (&self.0, &other.0) {
            (
                Prim::Full {
                    shape,
                    dtype,
                    value,
                },
                Prim::Full {
                    shape: s2,
                    dtype: d2,
                    value: v2,
                },
            ) => shape == s2 && dtype == d2 && value.to_bits() == v2.to_bits(),
            (
                Prim::Pad { lo, hi, value },
                Prim::Pad {
                    lo: l2,
                    hi: h2,
                    value: v2,
                },
            ) => lo == l2 && hi == h2 && value.to_bits() == v2.to_bits(),
            (a, b) => a == b,
        };
        same_prim && self.1 == other.1
    }
}

impl Eq for CseKey {}

impl std::hash::Hash for CseKey {
    /// The primitive's kind, the inputs, and the parameters that tell
    /// input-less equations apart (every `Full` would land in one bucket
    /// otherwise): cheap, and equal keys hash alike.
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        std::mem::discriminant(&self.0).hash(h);
        self.1.hash(h);
        match &self.0 {
            Prim::Full { shape, value, .. } => {
                shape.hash(h);
                value.to_bits().hash(h);
            }
            Prim::Iota { shape, axis, .. } => {
                shape.hash(h);
                axis.hash(h);
            }
            Prim::Reshape { shape } | Prim::Broadcast { shape } => shape.hash(h),
            Prim::Permute { perm: v } | Prim::Flip { axes: v } | Prim::Reduce { axes: v, .. } => {
                v.hash(h)
            }
            // A scan slices the same input once per step.
            Prim::Slice { start, end, step } => {
                start.hash(h);
                end.hash(h);
                step.hash(h);
            }
            Prim::Pad { lo, hi, .. } => {
                lo.hash(h);
                hi.hash(h);
            }
            Prim::ArgReduce { axis, .. }
            | Prim::Cumulative { axis, .. }
            | Prim::Concat { axis }
            | Prim::Gather { axis }
            | Prim::ScatterAdd { axis } => axis.hash(h),
            Prim::Conv {
                strides, padding, ..
            } => {
                strides.hash(h);
                padding.hash(h);
            }
            Prim::ReduceWindow {
                window,
                strides,
                padding,
                ..
            }
            | Prim::WindowArgmax {
                window,
                strides,
                padding,
                ..
            } => {
                window.hash(h);
                strides.hash(h);
                padding.hash(h);
            }
            Prim::Argsort { axis, descending } => {
                axis.hash(h);
                descending.hash(h);
            }
            Prim::TopK { k } => k.hash(h),
            _ => {}
        }
    }
}

/// Merges equations with the same primitive and the same inputs, and drops
/// algebraic identities (except where the result is an output or a
/// writeback: those stay fresh tensors, as eager's results are).
fn cse(g: &Graph) -> Graph {
    let mut subst: Vec<Var> = (0..g.avals.len()).collect();
    let mut seen: HashMap<CseKey, Var> = HashMap::default();
    // Defining equation of each kept variable, as an index into `out.eqns`.
    let mut def: Vec<Option<usize>> = vec![None; g.avals.len()];
    let mut keep = vec![false; g.avals.len()];
    for &v in g.outputs.iter().chain(g.writebacks.iter().map(|(_, v)| v)) {
        keep[v] = true;
    }
    let mut out = without_eqns(g, g.eqns.len());
    for e in &g.eqns {
        let renamed = Eqn {
            prim: e.prim.clone(),
            inputs: e.inputs.iter().map(|&v| rename(v, &subst)).collect(),
            out: e.out,
        };
        if !keep[e.out] {
            let lookup = |v: Var| def[v].map(|i| &out.eqns[i]);
            if let Some(v) = identity_of(g, &renamed, &lookup) {
                subst[e.out] = v;
                continue;
            }
        }
        let key = CseKey(renamed.prim.clone(), renamed.inputs.clone());
        if let Some(&v) = seen.get(&key) {
            subst[e.out] = v;
            continue;
        }
        seen.insert(key, e.out);
        def[e.out] = Some(out.eqns.len());
        out.eqns.push(renamed);
    }
    out.outputs = g.outputs.iter().map(|&v| rename(v, &subst)).collect();
    out.writebacks = g
        .writebacks
        .iter()
        .map(|&(i, v)| (i, rename(v, &subst)))
        .collect();
    out
}

/// Drops equations whose results nothing uses, and constants likewise.
fn dce(g: &Graph) -> Graph {
    let mut live = vec![false; g.avals.len()];
    for &v in g.outputs.iter().chain(g.writebacks.iter().map(|(_, v)| v)) {
        live[v] = true;
    }
    let mut keep = vec![false; g.eqns.len()];
    for (i, e) in g.eqns.iter().enumerate().rev() {
        if live[e.out] {
            keep[i] = true;
            for &v in &e.inputs {
                live[v] = true;
            }
        }
    }
    let mut out = without_eqns(g, 0);
    out.eqns = g
        .eqns
        .iter()
        .zip(&keep)
        .filter(|(_, &k)| k)
        .map(|(e, _)| e.clone())
        .collect();
    out.consts.retain(|(v, _)| live[*v]);
    out
}

/// Evaluates equations whose inputs are all constants (a captured weight
/// transposed, a constant table cast) into new constants.
fn fold_constants(g: &Graph) -> Graph {
    let mut values: HashMap<Var, nx::Tensor> = g.consts.iter().cloned().collect();
    let mut out = without_eqns(g, g.eqns.len());
    for e in &g.eqns {
        let foldable = !e.inputs.is_empty()
            && e.inputs.iter().all(|v| values.contains_key(v))
            && !matches!(
                e.prim,
                // Views stay views of the capture (folding a broadcast would
                // materialize it).
                Prim::Assign
                    | Prim::Reshape { .. }
                    | Prim::Broadcast { .. }
                    | Prim::Permute { .. }
                    | Prim::Slice { .. }
                    | Prim::Flip { .. }
            );
        if foldable {
            let ins: Vec<&nx::Tensor> = e.inputs.iter().map(|v| &values[v]).collect();
            let t = nx::raw::eval(e.prim.clone(), &ins);
            out.consts.push((e.out, t.clone()));
            values.insert(e.out, t);
        } else {
            out.eqns.push(e.clone());
        }
    }
    out
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
            g.eqns.push(Eqn { prim, inputs, out });
            out
        };
        let full = |value: f64| Prim::Full {
            shape: vec![],
            dtype: DType::F32,
            value,
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
        let s = cse(&g);
        // Output `i`, after renaming: merged equations share a variable.
        let o = |i: usize| s.outputs[i];
        assert_eq!(o(0), o(2), "equal fills merge");
        assert_ne!(o(0), o(1), "0.0 and -0.0 stay apart");
        assert_eq!(o(3), o(5), "equal slices merge");
        assert_ne!(o(3), o(4), "different slices stay apart");
        assert_eq!(s.eqns.len(), 8, "two fills, two slices, four negations");
    }
}
