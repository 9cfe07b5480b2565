//! The sharding rules: how each primitive's output is laid out across the
//! devices given its inputs' layouts (`Builder::eqn`, one arm per
//! primitive family; products in `Builder::dot`), the conversions a value
//! needs to reach a layout (`rep`, `split`, `any`), and the cut of the
//! program into stages between collectives (`plan`). Nothing here runs or
//! compiles anything.

use super::ShardError;
use crate::graph::{Eqn, Graph, Op, Var};
use nx::{Prim, ReduceOp};
use std::collections::{HashMap, HashSet};

/// How a value is laid out across the devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sharding {
    /// Every device holds the whole value.
    Rep,
    /// Split along this axis: device `d` holds the `d`-th of `n` equal slices.
    Split(usize),
    /// Every device holds its shard's reduction with this op; the value is
    /// their all-reduce.
    Partial(ReduceOp),
}

/// A value in a given layout.
pub type Key = (Var, Sharding);

/// A collective step between stages.
#[derive(Clone, Debug)]
pub enum Convert {
    /// Partial -> replicated: combine every device's value.
    AllReduce(ReduceOp),
    /// Split -> replicated: concatenate the shards along the axis.
    AllGather(usize),
    /// Replicated -> split: each device keeps its slice along the axis.
    Scatter(usize),
}

/// A step of the plan: a stage (while planning, its local equations: the
/// keys of the inputs, the key of the output, the local primitive; once
/// compiled, a [`Stage`]) or a collective between stages.
pub(super) enum Step<S> {
    Stage(S),
    Convert { from: Key, to: Key, how: Convert },
}

pub(super) type LocalEqns = Vec<(Vec<Key>, Vec<Key>, Op)>;

/// The local shape of a value of global `shape` in layout `sh`.
pub(super) fn local_shape(shape: &[usize], sh: Sharding, n: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    if let Sharding::Split(a) = sh {
        s[a] /= n;
    }
    s
}

/// A program's plan before its stages are compiled (see [`plan`]).
pub(super) struct Planned {
    /// Per input leaf: its key.
    pub inputs: Vec<Key>,
    pub steps: Vec<Step<LocalEqns>>,
    /// Per step: the keys read after it (a stage exports only those).
    pub used_after: Vec<HashSet<Key>>,
    /// Per global output: the key holding it.
    pub outputs: Vec<Key>,
    /// `(input leaf, key)`: replicated values written back into leaves.
    pub writebacks: Vec<(usize, Key)>,
}

struct Builder<'g> {
    g: &'g Graph,
    n: usize,
    /// The layouts each global value is available in.
    have: HashMap<Var, Vec<Sharding>>,
    /// Where each equation's output was defined (for local re-broadcasts).
    def: HashMap<Var, usize>,
    steps: Vec<Step<LocalEqns>>,
    current: LocalEqns,
}

impl Builder<'_> {
    /// Whether `v` exists only as a partial value (needs an all-reduce).
    fn only_partial(&self, v: Var) -> bool {
        self.have
            .get(&v)
            .is_some_and(|l| l.iter().all(|s| matches!(s, Sharding::Partial(_))))
    }

    fn available(&self, v: Var, sh: Sharding) -> bool {
        self.have.get(&v).is_some_and(|l| l.contains(&sh))
    }

    fn add(&mut self, v: Var, sh: Sharding) {
        let l = self.have.entry(v).or_default();
        if !l.contains(&sh) {
            l.push(sh);
        }
    }

    fn flush(&mut self) {
        if !self.current.is_empty() {
            self.steps
                .push(Step::Stage(std::mem::take(&mut self.current)));
        }
    }

    fn convert(&mut self, from: Key, to: Sharding, how: Convert) -> Key {
        self.flush();
        self.steps.push(Step::Convert {
            from,
            to: (from.0, to),
            how,
        });
        self.add(from.0, to);
        (from.0, to)
    }

    /// `v` as a replicated value (all-reducing or all-gathering it).
    fn rep(&mut self, v: Var) -> Key {
        if self.available(v, Sharding::Rep) {
            return (v, Sharding::Rep);
        }
        let sh = self.have[&v][0];
        match sh {
            Sharding::Partial(op) => self.convert((v, sh), Sharding::Rep, Convert::AllReduce(op)),
            Sharding::Split(a) => self.convert((v, sh), Sharding::Rep, Convert::AllGather(a)),
            Sharding::Rep => unreachable!(),
        }
    }

    /// `v` split along `a`: as it is, re-broadcast locally when it is a
    /// broadcast along `a` or a `full`, else sliced from its replicated value.
    fn split(&mut self, v: Var, a: usize) -> Key {
        let want = Sharding::Split(a);
        if self.available(v, want) {
            return (v, want);
        }
        if let Some(&e) = self.def.get(&v) {
            let eqn = &self.g.eqns[e];
            let shape = &self.g.aval(v).shape;
            let local = local_shape(shape, want, self.n);
            match eqn.as_prim() {
                Some(Prim::Full { dtype, value, .. }) => {
                    let prim = Prim::Full {
                        shape: local,
                        dtype: *dtype,
                        value: *value,
                    };
                    self.current
                        .push((Vec::new(), vec![(v, want)], Op::Prim(prim)));
                    self.add(v, want);
                    return (v, want);
                }
                Some(Prim::Broadcast { .. }) => {
                    let u = eqn.inputs[0];
                    let in_shape = &self.g.aval(u).shape;
                    let lead = shape.len() - in_shape.len();
                    let expanded = a < lead || in_shape[a - lead] == 1;
                    if expanded {
                        let k = self.rep(u);
                        self.current.push((
                            vec![k],
                            vec![(v, want)],
                            Op::Prim(Prim::Broadcast { shape: local }),
                        ));
                        self.add(v, want);
                        return (v, want);
                    }
                }
                _ => {}
            }
        }
        let r = self.rep(v);
        self.convert(r, want, Convert::Scatter(a))
    }

    /// `v` in whatever layout it has, all-reducing a partial value first.
    fn any(&mut self, v: Var) -> Key {
        let l = &self.have[&v];
        if let Some(&sh) = l.iter().find(|s| !matches!(s, Sharding::Partial(_))) {
            return (v, sh);
        }
        self.rep(v)
    }

    fn emit(&mut self, inputs: Vec<Key>, out: Var, sh: Sharding, prim: Prim) {
        self.current.push((inputs, vec![(out, sh)], Op::Prim(prim)));
        self.add(out, sh);
    }

    /// Every input replicated; the equation runs as it is.
    fn replicated(&mut self, e: &Eqn) {
        let ins: Vec<Key> = e.inputs.iter().map(|&v| self.rep(v)).collect();
        let outs: Vec<Key> = e.outs.iter().map(|&o| (o, Sharding::Rep)).collect();
        self.current.push((ins, outs, e.op.clone()));
        for &o in &e.outs {
            self.add(o, Sharding::Rep);
        }
    }

    fn eqn(&mut self, i: usize) {
        let g = self.g;
        let e = &g.eqns[i];
        for &o in &e.outs {
            self.def.insert(o, i);
        }
        let Op::Prim(prim) = &e.op else {
            // A loop runs whole on every device, on replicated values.
            return self.replicated(e);
        };
        let ins: Vec<Key> = e.inputs.iter().map(|&v| self.any(v)).collect();
        let split_axis = ins.iter().find_map(|(_, s)| match s {
            Sharding::Split(a) => Some(*a),
            _ => None,
        });
        let Some(a) = split_axis else {
            return self.emit(ins, e.out(), Sharding::Rep, prim.clone());
        };
        let out_shape = &g.aval(e.out()).shape;
        let n = self.n;
        match prim {
            p if p.class() == nx::PrimClass::Elementwise => {
                let ins = e.inputs.iter().map(|&v| self.split(v, a)).collect();
                self.emit(ins, e.out(), Sharding::Split(a), prim.clone());
            }
            Prim::Threefry2x32 if a + 1 < out_shape.len() => {
                let ins = e.inputs.iter().map(|&v| self.split(v, a)).collect();
                self.emit(ins, e.out(), Sharding::Split(a), prim.clone());
            }
            Prim::Reduce { op, axes } => {
                let sh = if axes.contains(&a) {
                    Sharding::Partial(*op)
                } else {
                    Sharding::Split(a - axes.iter().filter(|&&x| x < a).count())
                };
                self.emit(ins, e.out(), sh, prim.clone());
            }
            Prim::ArgReduce { axis, .. } if *axis != a => {
                let b = if *axis < a { a - 1 } else { a };
                self.emit(ins, e.out(), Sharding::Split(b), prim.clone());
            }
            Prim::Cumulative { axis, .. } if *axis != a => {
                self.emit(ins, e.out(), Sharding::Split(a), prim.clone());
            }
            Prim::Broadcast { shape } => {
                let b = a + shape.len() - g.aval(e.inputs[0]).shape.len();
                let local = local_shape(shape, Sharding::Split(b), n);
                self.emit(
                    ins,
                    e.out(),
                    Sharding::Split(b),
                    Prim::Broadcast { shape: local },
                );
            }
            Prim::Permute { perm } => {
                let b = perm.iter().position(|&p| p == a).unwrap();
                self.emit(ins, e.out(), Sharding::Split(b), prim.clone());
            }
            Prim::Reshape { shape } => {
                let in_shape = &g.aval(e.inputs[0]).shape;
                let before: usize = in_shape[..a].iter().product();
                let kept = (0..shape.len()).find(|&b| {
                    shape[..b].iter().product::<usize>() == before && shape[b] == in_shape[a]
                });
                match kept {
                    Some(b) => {
                        let local = local_shape(shape, Sharding::Split(b), n);
                        self.emit(
                            ins,
                            e.out(),
                            Sharding::Split(b),
                            Prim::Reshape { shape: local },
                        );
                    }
                    None => self.replicated(e),
                }
            }
            Prim::Slice { start, end, step }
                if start[a] == 0 && step[a] == 1 && end[a] == g.aval(e.inputs[0]).shape[a] =>
            {
                let mut end = end.clone();
                end[a] /= n;
                let prim = Prim::Slice {
                    start: start.clone(),
                    end,
                    step: step.clone(),
                };
                self.emit(ins, e.out(), Sharding::Split(a), prim);
            }
            Prim::Flip { axes } if !axes.contains(&a) => {
                self.emit(ins, e.out(), Sharding::Split(a), prim.clone());
            }
            Prim::Pad { lo, hi, .. } if lo[a] == 0 && hi[a] == 0 => {
                self.emit(ins, e.out(), Sharding::Split(a), prim.clone());
            }
            Prim::Concat { axis } if *axis != a => {
                let ins = e.inputs.iter().map(|&v| self.split(v, a)).collect();
                self.emit(ins, e.out(), Sharding::Split(a), prim.clone());
            }
            Prim::Gather { axis } | Prim::ScatterAdd { axis } if *axis != a => {
                let ins = e.inputs.iter().map(|&v| self.split(v, a)).collect();
                self.emit(ins, e.out(), Sharding::Split(a), prim.clone());
            }
            Prim::DotGeneral {
                lhs_batch,
                rhs_batch,
                lhs_contract,
                rhs_contract,
            } => self.dot(e, &ins, lhs_batch, rhs_batch, lhs_contract, rhs_contract),
            _ => self.replicated(e),
        }
    }

    fn dot(
        &mut self,
        e: &Eqn,
        ins: &[Key],
        lhs_batch: &[usize],
        rhs_batch: &[usize],
        lhs_contract: &[usize],
        rhs_contract: &[usize],
    ) {
        let g = self.g;
        let (l, r) = (ins[0], ins[1]);
        let free = |rank: usize, batch: &[usize], contract: &[usize]| -> Vec<usize> {
            (0..rank)
                .filter(|x| !batch.contains(x) && !contract.contains(x))
                .collect()
        };
        let lfree = free(g.aval(e.inputs[0]).shape.len(), lhs_batch, lhs_contract);
        let rfree = free(g.aval(e.inputs[1]).shape.len(), rhs_batch, rhs_contract);
        let split = |k: Key| match k.1 {
            Sharding::Split(a) => Some(a),
            _ => None,
        };
        let prim = e.as_prim().expect("a product").clone();
        match (split(l), split(r)) {
            (Some(a), None) if lfree.contains(&a) => {
                let b = lhs_batch.len() + lfree.iter().position(|&x| x == a).unwrap();
                let r = self.rep(e.inputs[1]);
                self.emit(vec![l, r], e.out(), Sharding::Split(b), prim);
            }
            (None, Some(a)) if rfree.contains(&a) => {
                let b = lhs_batch.len() + lfree.len() + rfree.iter().position(|&x| x == a).unwrap();
                let l = self.rep(e.inputs[0]);
                self.emit(vec![l, r], e.out(), Sharding::Split(b), prim);
            }
            (Some(a), _) if lhs_contract.contains(&a) => {
                let i = lhs_contract.iter().position(|&x| x == a).unwrap();
                let r = self.split(e.inputs[1], rhs_contract[i]);
                self.emit(vec![l, r], e.out(), Sharding::Partial(ReduceOp::Sum), prim);
            }
            (None, Some(a)) if rhs_contract.contains(&a) => {
                let i = rhs_contract.iter().position(|&x| x == a).unwrap();
                let l = self.split(e.inputs[0], lhs_contract[i]);
                self.emit(vec![l, r], e.out(), Sharding::Partial(ReduceOp::Sum), prim);
            }
            (Some(a), _) if lhs_batch.contains(&a) => {
                let i = lhs_batch.iter().position(|&x| x == a).unwrap();
                let r = self.split(e.inputs[1], rhs_batch[i]);
                self.emit(vec![l, r], e.out(), Sharding::Split(i), prim);
            }
            _ => self.replicated(e),
        }
    }
}

/// The plan of `g` (simplified) across `n` devices, input leaf `i` split
/// along `in_axes[i]` (or replicated): the stages' local equations and
/// the collectives between them, by the rules above. A split writeback is
/// an error (see [`super::shard`]).
pub(super) fn plan(g: &Graph, n: usize, in_axes: &[Option<usize>]) -> Result<Planned, ShardError> {
    let mut b = Builder {
        g,
        n,
        have: HashMap::new(),
        def: HashMap::new(),
        steps: Vec::new(),
        current: Vec::new(),
    };
    let inputs: Vec<Key> = g
        .inputs
        .iter()
        .zip(in_axes)
        .map(|(&v, a)| (v, a.map_or(Sharding::Rep, Sharding::Split)))
        .collect();
    for &(v, sh) in &inputs {
        b.add(v, sh);
    }
    for (v, _) in &g.consts {
        b.add(*v, Sharding::Rep);
    }
    // Equations run in rounds: an equation reading a partial value (or the
    // result of one deferred) waits, so that everything that needs no
    // collective runs first, in one stage; then every partial value the
    // waiting equations read is all-reduced at once, and the next round
    // runs them. (In order, a data-parallel step's SGD update of each layer
    // would cut the backward pass into a stage per layer.)
    let mut todo: Vec<usize> = (0..g.eqns.len()).collect();
    while !todo.is_empty() {
        let mut waiting = Vec::new();
        let mut later: std::collections::HashSet<Var> = Default::default();
        for &i in &todo {
            let e = &g.eqns[i];
            if e.inputs
                .iter()
                .any(|v| later.contains(v) || b.only_partial(*v))
            {
                waiting.push(i);
                later.extend(e.outs.iter().copied());
            } else {
                b.eqn(i);
            }
        }
        if waiting.len() == todo.len() {
            for &i in &waiting {
                for &v in &g.eqns[i].inputs {
                    if !later.contains(&v) && b.only_partial(v) {
                        b.rep(v);
                    }
                }
            }
        }
        todo = waiting;
    }
    let outputs: Vec<Key> = g.outputs.iter().map(|&v| b.any(v)).collect();
    let mut writebacks = Vec::new();
    for &(leaf, v) in &g.writebacks {
        let k = b.any(v);
        if let Sharding::Split(_) = k.1 {
            return Err(format!(
                "pmap: the function assigns to input leaf {leaf} a value split across the \
                 devices: writing it back would gather it on every call. Return it instead, \
                 or reduce it (a sum or mean over the split axis) before assigning"
            ));
        }
        writebacks.push((leaf, k));
    }
    b.flush();
    let steps = std::mem::take(&mut b.steps);
    // What each step reads, to export from a stage only what is read later.
    let mut used_after: Vec<std::collections::HashSet<Key>> = vec![Default::default(); steps.len()];
    let mut later: std::collections::HashSet<Key> = outputs.iter().copied().collect();
    later.extend(writebacks.iter().map(|(_, k)| *k));
    for (s, step) in steps.iter().enumerate().rev() {
        used_after[s] = later.clone();
        match step {
            Step::Stage(eqns) => {
                for (ins, _, _) in eqns {
                    later.extend(ins.iter().copied());
                }
            }
            Step::Convert { from, .. } => {
                later.insert(*from);
            }
        }
    }
    Ok(Planned {
        inputs,
        steps,
        used_after,
        outputs,
        writebacks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nx::{Aval, DType, UnaryOp};

    /// A graph under construction: inputs first, then equations.
    struct G(Graph);

    impl G {
        fn new() -> G {
            G(Graph::default())
        }
        fn input(&mut self, shape: &[usize]) -> Var {
            let v = self.0.new_var(Aval::new(shape, DType::F32));
            self.0.inputs.push(v);
            v
        }
        fn eqn(&mut self, prim: Prim, ins: &[Var], shape: &[usize]) -> Var {
            let v = self.0.new_var(Aval::new(shape, DType::F32));
            self.0.eqns.push(Eqn::prim(prim, ins.to_vec(), v));
            v
        }
        fn sum(&mut self, x: Var, axes: &[usize], shape: &[usize]) -> Var {
            let axes = axes.to_vec();
            self.eqn(
                Prim::Reduce {
                    op: ReduceOp::Sum,
                    axes,
                },
                &[x],
                shape,
            )
        }
        fn neg(&mut self, x: Var, shape: &[usize]) -> Var {
            self.eqn(Prim::Unary(UnaryOp::Neg), &[x], shape)
        }
        /// The plan over 2 devices, outputs `outs`.
        fn plan(mut self, outs: &[Var], in_axes: &[Option<usize>]) -> Planned {
            self.0.outputs = outs.to_vec();
            plan(&self.0, 2, in_axes).expect("shardable")
        }
    }

    fn key((v, sh): Key) -> String {
        format!("%{v} {sh:?}")
    }

    /// The plan's steps, one line each: a stage's outputs (with the local
    /// primitive), or a collective.
    fn steps(p: &Planned) -> Vec<String> {
        p.steps
            .iter()
            .map(|s| match s {
                Step::Stage(eqns) => {
                    let outs: Vec<String> = eqns
                        .iter()
                        .map(|(_, outs, op)| match op {
                            Op::Prim(prim) => format!("{} = {prim:?}", key(outs[0])),
                            Op::Loop(_) => format!("{} = loop", key(outs[0])),
                        })
                        .collect();
                    format!("stage [{}]", outs.join("; "))
                }
                Step::Convert { from, to, how } => {
                    format!("{} -> {:?} by {how:?}", key(*from), to.1)
                }
            })
            .collect()
    }

    /// Elementwise work on a split value stays split: one stage, no
    /// collective, the output left split.
    #[test]
    fn elementwise_on_a_split_value_stays_split() {
        let mut g = G::new();
        let x = g.input(&[8, 4]);
        let y = g.neg(x, &[8, 4]);
        let p = g.plan(&[y], &[Some(0)]);
        assert_eq!(steps(&p), ["stage [%1 Split(0) = Unary(Neg)]"]);
        assert_eq!(p.inputs, [(x, Sharding::Split(0))]);
        assert_eq!(p.outputs, [(y, Sharding::Split(0))]);
    }

    /// A sum over the split axis is partial, all-reduced for the output; a
    /// sum over another axis keeps the split, renumbered past the reduced
    /// axes.
    #[test]
    fn a_sum_over_the_split_axis_is_partial_and_all_reduced() {
        let mut g = G::new();
        let x = g.input(&[2, 8, 4]);
        let over = g.sum(x, &[1], &[2, 4]);
        let other = g.sum(x, &[0], &[8, 4]);
        let p = g.plan(&[over, other], &[Some(1)]);
        assert_eq!(
            steps(&p),
            [
                "stage [%1 Partial(Sum) = Reduce { op: Sum, axes: [1] }; \
                 %2 Split(0) = Reduce { op: Sum, axes: [0] }]",
                "%1 Partial(Sum) -> Rep by AllReduce(Sum)",
            ]
        );
        assert_eq!(
            p.outputs,
            [(over, Sharding::Rep), (other, Sharding::Split(0))]
        );
    }

    /// Products: a split free dim of the lhs stays split in the output (the
    /// rhs replicated); contracting a split axis slices the other operand
    /// along its contracted axis (a replicated input: a slice) and is
    /// partial.
    #[test]
    fn products_split_along_free_dims_and_are_partial_over_contracted_ones() {
        let dot = || Prim::DotGeneral {
            lhs_batch: vec![],
            rhs_batch: vec![],
            lhs_contract: vec![1],
            rhs_contract: vec![0],
        };
        let mut g = G::new();
        let x = g.input(&[8, 4]);
        let w = g.input(&[4, 3]);
        let xt = g.input(&[4, 8]);
        let w2 = g.input(&[8, 3]);
        let rows = g.eqn(dot(), &[x, w], &[8, 3]);
        let contracted = g.eqn(dot(), &[xt, w2], &[4, 3]);
        let p = g.plan(&[rows, contracted], &[Some(0), None, Some(1), None]);
        let d = "DotGeneral { lhs_batch: [], rhs_batch: [], lhs_contract: [1], rhs_contract: [0] }";
        assert_eq!(
            steps(&p),
            [
                format!("stage [%4 Split(0) = {d}]"),
                "%3 Rep -> Split(0) by Scatter(0)".to_string(),
                format!("stage [%5 Partial(Sum) = {d}]"),
                "%5 Partial(Sum) -> Rep by AllReduce(Sum)".to_string(),
            ]
        );
        assert_eq!(
            p.outputs,
            [(rows, Sharding::Split(0)), (contracted, Sharding::Rep)]
        );
    }

    /// A replicated operand that is a broadcast along the split axis, or a
    /// `full`, is made again locally at the shard's shape: no slice.
    #[test]
    fn broadcasts_and_fills_are_rebuilt_locally() {
        let mut g = G::new();
        let x = g.input(&[8, 4]);
        let b = g.input(&[4]);
        let bb = g.eqn(Prim::Broadcast { shape: vec![8, 4] }, &[b], &[8, 4]);
        let y = g.eqn(Prim::Binary(nx::BinaryOp::Add), &[x, bb], &[8, 4]);
        let f = g.eqn(
            Prim::Full {
                shape: vec![8, 4],
                dtype: DType::F32,
                value: nx::F64Bits(2.0),
            },
            &[],
            &[8, 4],
        );
        let z = g.eqn(Prim::Binary(nx::BinaryOp::Mul), &[y, f], &[8, 4]);
        let p = g.plan(&[z], &[Some(0), None]);
        assert_eq!(
            steps(&p),
            ["stage [%2 Rep = Broadcast { shape: [8, 4] }; \
                 %2 Split(0) = Broadcast { shape: [4, 4] }; \
                 %3 Split(0) = Binary(Add); \
                 %4 Rep = Full { shape: [8, 4], dtype: F32, value: 2.0 }; \
                 %4 Split(0) = Full { shape: [4, 4], dtype: F32, value: 2.0 }; \
                 %5 Split(0) = Binary(Mul)]"]
        );
    }

    /// Movement: a permute moves the split axis, a reshape that keeps it
    /// whole keeps it (local shape), one that merges it gathers.
    #[test]
    fn movement_keeps_or_gathers_the_split_axis() {
        let mut g = G::new();
        let x = g.input(&[8, 4]);
        let t = g.eqn(Prim::Permute { perm: vec![1, 0] }, &[x], &[4, 8]);
        let r = g.eqn(
            Prim::Reshape {
                shape: vec![8, 2, 2],
            },
            &[x],
            &[8, 2, 2],
        );
        let flat = g.eqn(Prim::Reshape { shape: vec![32] }, &[x], &[32]);
        let p = g.plan(&[t, r, flat], &[Some(0)]);
        assert_eq!(
            steps(&p),
            [
                "stage [%1 Split(1) = Permute { perm: [1, 0] }; \
                 %2 Split(0) = Reshape { shape: [4, 2, 2] }]",
                "%0 Split(0) -> Rep by AllGather(0)",
                "stage [%3 Rep = Reshape { shape: [32] }]",
            ]
        );
        assert_eq!(
            p.outputs,
            [
                (t, Sharding::Split(1)),
                (r, Sharding::Split(0)),
                (flat, Sharding::Rep)
            ]
        );
        assert_eq!(local_shape(&[8, 2, 2], Sharding::Split(0), 2), [4, 2, 2]);
        assert_eq!(local_shape(&[4, 8], Sharding::Rep, 2), [4, 8]);
    }

    /// Equations reading a partial value wait for a round: everything that
    /// needs no collective runs first, in one stage, then every partial
    /// value they read is all-reduced together.
    #[test]
    fn partial_values_are_all_reduced_together_after_the_rest() {
        let mut g = G::new();
        let x = g.input(&[8, 4]);
        let s1 = g.sum(x, &[0], &[4]);
        let u1 = g.neg(s1, &[4]);
        let e = g.neg(x, &[8, 4]);
        let s2 = g.sum(e, &[0], &[4]);
        let u2 = g.neg(s2, &[4]);
        let p = g.plan(&[u1, u2], &[Some(0)]);
        assert_eq!(
            steps(&p),
            [
                "stage [%1 Partial(Sum) = Reduce { op: Sum, axes: [0] }; \
                 %3 Split(0) = Unary(Neg); \
                 %4 Partial(Sum) = Reduce { op: Sum, axes: [0] }]",
                "%1 Partial(Sum) -> Rep by AllReduce(Sum)",
                "%4 Partial(Sum) -> Rep by AllReduce(Sum)",
                "stage [%2 Rep = Unary(Neg); %5 Rep = Unary(Neg)]",
            ]
        );
        // The first stage exports only what later steps read.
        let first: HashSet<Key> = [(s1, Sharding::Partial(ReduceOp::Sum))].into();
        assert!(first.is_subset(&p.used_after[0]));
        assert!(!p.used_after[0].contains(&(e, Sharding::Split(0))));
    }

    /// A value split across the devices written back into a leaf is
    /// refused (it would gather on every call); a replicated one is not.
    #[test]
    fn a_split_writeback_is_refused() {
        let mut g = G::new();
        let x = g.input(&[8, 4]);
        let y = g.neg(x, &[8, 4]);
        g.0.writebacks = vec![(0, y)];
        g.0.outputs = vec![y];
        let err = plan(&g.0, 2, &[Some(0)]).err().expect("refused");
        assert!(
            err.contains("assigns to input leaf 0 a value split across the devices"),
            "{err}"
        );
        let p = plan(&g.0, 2, &[None]).expect("replicated");
        assert_eq!(p.writebacks, [(0, (y, Sharding::Rep))]);
    }
}
