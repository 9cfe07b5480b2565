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

/// Merges equations with the same primitive and the same inputs.
fn cse(g: &Graph) -> Graph {
    let mut subst: Vec<Var> = (0..g.avals.len()).collect();
    let mut seen: HashMap<String, Var> = HashMap::new();
    let mut out = g.clone();
    out.eqns.clear();
    for e in &g.eqns {
        let inputs: Vec<Var> = e.inputs.iter().map(|&v| rename(v, &subst)).collect();
        let key = format!("{:?} {:?}", e.prim, inputs);
        if let Some(&v) = seen.get(&key) {
            subst[e.out] = v;
            continue;
        }
        seen.insert(key, e.out);
        out.eqns.push(Eqn {
            prim: e.prim.clone(),
            inputs,
            out: e.out,
        });
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
