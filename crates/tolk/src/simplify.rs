//! Simplification before scheduling: common subexpressions merged, dead
//! code removed, and equations whose inputs are all captured constants
//! folded into new constants (evaluated once, at compile time, by nx's
//! eager kernels). Chains of movement ops need no pass of their own: the
//! scheduler composes them into one strided view per load.

use crate::graph::{Eqn, Graph, Var};
use nx::Prim;
use std::collections::{HashMap, HashSet};

pub fn simplify(g: &Graph) -> Graph {
    let g = fold_constants(g);
    let g = cse(&g);
    dce(&g)
}

/// Replaces every variable by its representative in `subst`.
fn rename(v: Var, subst: &[Var]) -> Var {
    subst[v]
}

/// The scalar every element of `v` holds, if `v` is a `Full` seen through
/// broadcasts and reshapes.
fn splat(v: Var, def: &HashMap<Var, Eqn>) -> Option<f64> {
    match def.get(&v) {
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
fn identity_of(g: &Graph, e: &Eqn, def: &HashMap<Var, Eqn>) -> Option<Var> {
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
        Prim::Unary(nx::UnaryOp::Neg) => match def.get(&x) {
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

/// Merges equations with the same primitive and the same inputs, and drops
/// algebraic identities (except where the result is an output or a
/// writeback: those stay fresh tensors, as eager's results are).
fn cse(g: &Graph) -> Graph {
    let mut subst: Vec<Var> = (0..g.avals.len()).collect();
    let mut seen: HashMap<String, Var> = HashMap::new();
    let mut def: HashMap<Var, Eqn> = HashMap::new();
    let keep: HashSet<Var> = g
        .outputs
        .iter()
        .chain(g.writebacks.iter().map(|(_, v)| v))
        .copied()
        .collect();
    let mut out = g.clone();
    out.eqns.clear();
    for e in &g.eqns {
        let inputs: Vec<Var> = e.inputs.iter().map(|&v| rename(v, &subst)).collect();
        let renamed = Eqn {
            prim: e.prim.clone(),
            inputs: inputs.clone(),
            out: e.out,
        };
        if !keep.contains(&e.out) {
            if let Some(v) = identity_of(g, &renamed, &def) {
                subst[e.out] = v;
                continue;
            }
        }
        let key = format!("{:?} {:?}", e.prim, inputs);
        if let Some(&v) = seen.get(&key) {
            subst[e.out] = v;
            continue;
        }
        seen.insert(key, e.out);
        def.insert(e.out, renamed.clone());
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
    let mut live: HashSet<Var> = g.outputs.iter().copied().collect();
    live.extend(g.writebacks.iter().map(|&(_, v)| v));
    let mut keep = vec![false; g.eqns.len()];
    for (i, e) in g.eqns.iter().enumerate().rev() {
        if live.contains(&e.out) {
            keep[i] = true;
            live.extend(e.inputs.iter().copied());
        }
    }
    let mut out = g.clone();
    out.eqns = g
        .eqns
        .iter()
        .zip(&keep)
        .filter(|(_, &k)| k)
        .map(|(e, _)| e.clone())
        .collect();
    out.consts.retain(|(v, _)| live.contains(v));
    out
}

/// Evaluates equations whose inputs are all constants (a captured weight
/// transposed, a constant table cast) into new constants.
fn fold_constants(g: &Graph) -> Graph {
    let mut values: HashMap<Var, nx::Tensor> = g.consts.iter().cloned().collect();
    let mut out = g.clone();
    out.eqns.clear();
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
