//! Sharding propagation: a program over global shapes, its inputs split
//! along an axis across `n` devices or replicated, becomes a plan of
//! per-device programs (the same program on every device, over its shard)
//! and the collective steps between them.
//!
//! Each value is replicated (`Rep`), split along an axis (`Split(a)`: device
//! `d` holds the `d`-th of `n` equal slices), or a partial result
//! (`Partial(op)`: every device holds its shard's reduction; the value is
//! their all-reduce). The rules, one per primitive family: elementwise
//! work on split values stays split (a replicated operand that is a
//! broadcast along the split axis, or a `full`, is re-broadcast locally;
//! any other is sliced per device); a reduction over the split axis, or a
//! product contracting split axes of both operands, is partial; movement
//! ops that keep the split axis whole keep it; everything else gathers its
//! split operands (all-gather) and runs replicated. A partial value is
//! all-reduced before its first use. Collectives end a stage: the plan is
//! stages (tolk programs, compiled once, run per device) and the
//! conversions between them.

use crate::graph::{Eqn, Graph, Op, Var};
use nx::{Aval, Prim, ReduceOp, Tensor};
use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};

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
enum Step<S> {
    Stage(S),
    Convert { from: Key, to: Key, how: Convert },
}

type LocalEqns = Vec<(Vec<Key>, Vec<Key>, Op)>;

/// A compiled stage: its program (one instance per device) and which
/// values it reads and writes.
struct Stage {
    programs: Vec<Mutex<crate::Program>>,
    imports: Vec<Key>,
    exports: Vec<Key>,
}

/// A program sharded across `n` devices (see the module docs).
pub struct ShardedProgram {
    n: usize,
    inputs: Vec<Key>,
    consts: Vec<(Var, Tensor)>,
    steps: Vec<Step<Arc<Stage>>>,
    /// Per global output: the key holding it.
    outputs: Vec<Key>,
    /// `(input leaf, key)`: replicated values written back into leaves.
    writebacks: Vec<(usize, Key)>,
    /// `Disk` when every stage was loaded from the disk cache.
    origin: crate::Origin,
}

/// Why a graph cannot be sharded as asked (a message for the user).
pub type ShardError = String;

/// The local shape of a value of global `shape` in layout `sh`.
fn local_shape(shape: &[usize], sh: Sharding, n: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    if let Sharding::Split(a) = sh {
        s[a] /= n;
    }
    s
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

/// Shards `g` across `n` devices, input leaf `i` split along `in_axes[i]`
/// (or replicated). Every output is gathered to the host; a writeback must
/// be replicated (a split value written into a leaf is an error: it would
/// gather on every call). `persist`: the stages go through the disk cache
/// (jit on a device does; pmap compilations are never persisted).
pub fn shard(
    g: Graph,
    n: usize,
    in_axes: &[Option<usize>],
    persist: bool,
) -> Result<ShardedProgram, ShardError> {
    let p = plan(g, n, in_axes)?;
    let mut steps = Vec::with_capacity(p.steps.len());
    let mut all_from_disk = true;
    for step in p.steps {
        match step {
            PlanStep::Convert { from, to, how } => steps.push(Step::Convert { from, to, how }),
            PlanStep::Stage {
                graph,
                imports,
                exports,
            } => {
                let compiled = crate::compile(graph, persist)?;
                if compiled.origin == crate::Origin::Compiled {
                    all_from_disk = false;
                }
                let program = compiled.program;
                let mut programs: Vec<Mutex<crate::Program>> =
                    (1..n).map(|_| Mutex::new(program.instance())).collect();
                programs.insert(0, Mutex::new(program));
                steps.push(Step::Stage(Arc::new(Stage {
                    programs,
                    imports,
                    exports,
                })));
            }
        }
    }
    Ok(ShardedProgram {
        n,
        inputs: p.inputs,
        consts: p.consts,
        steps,
        outputs: p.outputs,
        writebacks: p.writebacks,
        origin: if all_from_disk {
            crate::Origin::Disk
        } else {
            crate::Origin::Compiled
        },
    })
}

/// A program sharded across `n` devices before its stages are compiled
/// (what [`shard`] compiles for the host's devices, and the CUDA runtime,
/// `device::sharded`, renders for its own).
pub struct ShardPlan {
    /// The number of devices.
    pub n: usize,
    /// Per input leaf: its variable and layout.
    pub inputs: Vec<Key>,
    /// The captured constants (replicated).
    pub consts: Vec<(Var, Tensor)>,
    /// The stages and the collectives between them, in order.
    pub steps: Vec<PlanStep>,
    /// Per global output: the key holding it (never partial).
    pub outputs: Vec<Key>,
    /// `(input leaf, key)`: replicated values written back into leaves.
    pub writebacks: Vec<(usize, Key)>,
    /// The global program's avals (a key's local one: [`ShardPlan::aval`]).
    pub avals: Vec<Aval>,
}

impl ShardPlan {
    /// The aval one device holds of `k`.
    pub fn aval(&self, k: Key) -> Aval {
        let a = &self.avals[k.0];
        Aval::new(&local_shape(&a.shape, k.1, self.n), a.dtype)
    }
}

/// A step of a [`ShardPlan`].
pub enum PlanStep {
    /// A local program, the same on every device over its values: its
    /// inputs are the values `imports` (in order), its outputs `exports`.
    Stage {
        /// The local program (local shapes).
        graph: Graph,
        /// The values it reads, one per input.
        imports: Vec<Key>,
        /// The values it defines that later steps read, one per output.
        exports: Vec<Key>,
    },
    /// A collective from one layout of a value to another.
    Convert {
        /// The value as the devices hold it.
        from: Key,
        /// The value in its new layout.
        to: Key,
        /// How.
        how: Convert,
    },
}

/// Shards `g` across `n` devices, inputs split along `in_axes` (see the
/// module docs): the plan of stages and collectives, uncompiled.
pub fn plan(g: Graph, n: usize, in_axes: &[Option<usize>]) -> Result<ShardPlan, ShardError> {
    // Dead code and duplicates go first: a dead reduction over the split
    // axis would otherwise cost an all-reduce.
    let simplified = crate::simplify::simplify(g);
    let g = &simplified;
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
    let plan = steps
        .into_iter()
        .enumerate()
        .map(|(s, step)| match step {
            Step::Convert { from, to, how } => PlanStep::Convert { from, to, how },
            Step::Stage(eqns) => {
                let (graph, imports, exports) = stage(g, n, eqns, &used_after[s]);
                PlanStep::Stage {
                    graph,
                    imports,
                    exports,
                }
            }
        })
        .collect();
    Ok(ShardPlan {
        n,
        inputs,
        consts: g.consts.clone(),
        steps: plan,
        outputs,
        writebacks,
        avals: g.avals.clone(),
    })
}

/// One stage's local program: its imports (values defined before it) as
/// inputs, the values read after it as outputs.
fn stage(
    g: &Graph,
    n: usize,
    eqns: LocalEqns,
    used_after: &std::collections::HashSet<Key>,
) -> (Graph, Vec<Key>, Vec<Key>) {
    let mut local = Graph::default();
    let mut var: HashMap<Key, Var> = HashMap::new();
    let mut imports = Vec::new();
    let aval = |k: Key| {
        let a = g.aval(k.0);
        Aval::new(&local_shape(&a.shape, k.1, n), a.dtype)
    };
    for (ins, outs, op) in eqns {
        let mut inputs = Vec::with_capacity(ins.len());
        for k in ins {
            let v = match var.get(&k) {
                Some(&v) => v,
                None => {
                    let v = local.new_var(aval(k));
                    local.inputs.push(v);
                    imports.push(k);
                    var.insert(k, v);
                    v
                }
            };
            inputs.push(v);
        }
        let mut local_outs = Vec::with_capacity(outs.len());
        for out in outs {
            let o = local.new_var(aval(out));
            var.insert(out, o);
            local_outs.push(o);
        }
        local.eqns.push(Eqn {
            op,
            inputs,
            outs: local_outs,
        });
    }
    let mut exports: Vec<Key> = var
        .keys()
        .filter(|k| used_after.contains(k) && !imports.contains(k))
        .copied()
        .collect();
    exports.sort_by_key(|k| var[k]);
    local.outputs = exports.iter().map(|k| var[k]).collect();
    (local, imports, exports)
}

impl ShardedProgram {
    /// Where the stages' programs came from: `Disk` if every one was loaded
    /// from the disk cache.
    pub fn origin(&self) -> crate::Origin {
        self.origin
    }

    /// Runs the plan on `leaves` (global tensors): splits the sharded ones,
    /// runs each stage once per device, performs the collectives, and
    /// returns the outputs gathered (split outputs concatenated along their
    /// axis, replicated ones from device 0); replicated writebacks are
    /// assigned into their leaves.
    pub fn run(&self, leaves: &[Tensor]) -> Vec<Tensor> {
        let inputs: Vec<Input> = leaves.iter().cloned().map(Input::Global).collect();
        let (outs, _) = self.run_on(&inputs, leaves, &vec![None; self.n]);
        outs.iter().map(|o| o.gather()).collect()
    }

    /// Each input leaf's layout: `Some(axis)` split, `None` replicated.
    pub fn input_layout(&self, leaf: usize) -> Option<usize> {
        match self.inputs[leaf].1 {
            Sharding::Split(a) => Some(a),
            _ => None,
        }
    }

    /// Runs the plan where device `d` is the host (`devices[d]` `None`: it
    /// runs on the calling thread, in host memory) or a named host device
    /// (`Some("CPU:1")`): it runs on that device's own worker thread, side
    /// by side with the others, and has memory of its own, so a global
    /// input's shard or replica is copied to it (counted in the returned
    /// transfers); an input already on the devices in the right layout
    /// ([`Input::OnDevices`]) is used as it is. Replicated writebacks are
    /// read back and assigned into `leaves`; the outputs stay per device.
    pub fn run_on(
        &self,
        inputs: &[Input],
        leaves: &[Tensor],
        devices: &[Option<&str>],
    ) -> (Vec<Output>, Transfers) {
        let n = self.n;
        let host: Vec<bool> = devices.iter().map(|d| d.is_none()).collect();
        let mut moved = Transfers::default();
        let mut vals: HashMap<Key, Vec<Tensor>> = HashMap::new();
        for (&k, input) in self.inputs.iter().zip(inputs) {
            let ts = match input {
                Input::OnDevices(ts) => ts.clone(),
                Input::Global(t) => {
                    let mut ts = per_device(t, k.1, n);
                    for (d, t) in ts.iter_mut().enumerate() {
                        if !host[d] {
                            *t = t.copy();
                            moved.to_device += bytes(t);
                        }
                    }
                    ts
                }
            };
            vals.insert(k, ts);
        }
        for (v, t) in &self.consts {
            vals.insert((*v, Sharding::Rep), vec![t.clone(); n]);
        }
        for step in &self.steps {
            match step {
                Step::Stage(s) => {
                    let mut outs: Vec<Vec<Tensor>> = vec![Vec::with_capacity(n); s.exports.len()];
                    // Every worker device starts its part, then the host
                    // devices run theirs here, then the workers' results
                    // are collected in device order.
                    // Several devices share the machine's cores: each runs
                    // its kernels on its own thread alone, and nx's pool
                    // workers sleep rather than spin beside them.
                    let alone = n > 1;
                    let _rest = alone.then(nx::raw::pool_rest);
                    let mut pending = Vec::with_capacity(n);
                    for (d, dev) in devices.iter().enumerate() {
                        let ins: Vec<Tensor> =
                            s.imports.iter().map(|k| vals[k][d].clone()).collect();
                        pending.push(match dev {
                            Some(name) => Err(run_on_worker(name, s.clone(), d, ins, alone)),
                            None => Ok(ins),
                        });
                    }
                    let results: Vec<Vec<Tensor>> = pending
                        .into_iter()
                        .enumerate()
                        .map(|(d, p)| match p {
                            Ok(ins) => run_device(&s, d, &ins, alone),
                            Err(rx) => match rx.recv().expect("a device worker died") {
                                Ok(outs) => outs,
                                Err(panic) => std::panic::resume_unwind(panic),
                            },
                        })
                        .collect();
                    for r in results {
                        for (o, t) in outs.iter_mut().zip(r) {
                            o.push(t);
                        }
                    }
                    for (k, ts) in s.exports.iter().zip(outs) {
                        vals.insert(*k, ts);
                    }
                }
                Step::Convert { from, to, how } => {
                    let ts = &vals[from];
                    let out = match how {
                        Convert::AllReduce(op) => vec![all_reduce(ts, *op); n],
                        Convert::AllGather(a) => {
                            vec![Tensor::concatenate(ts, *a as isize); n]
                        }
                        Convert::Scatter(a) => per_device(&ts[0], Sharding::Split(*a), n),
                    };
                    vals.insert(*to, out);
                }
            }
        }
        for (leaf, k) in &self.writebacks {
            let out = Output::of(*k, &vals[k]);
            moved.from_device += out.read_bytes(&host);
            leaves[*leaf].assign(&out.gather());
        }
        let outs = self
            .outputs
            .iter()
            .map(|k| Output::of(*k, &vals[k]))
            .collect();
        (outs, moved)
    }
}

/// The collectives of a plan run by one device per process
/// ([`ShardedProgram::run_one`]): each call is made by every process at the
/// same step, with its own value, and returns the combined value.
pub trait Collectives {
    /// Every process's `values[i]` combined with `op`, for each `i` (the
    /// values of consecutive all-reduce steps, to send in one buffer).
    fn all_reduce(&self, values: &[Tensor], op: ReduceOp) -> Vec<Tensor>;
    /// Every process's `value` concatenated along `axis` in process order.
    fn all_gather(&self, value: &Tensor, axis: usize) -> Tensor;
}

impl ShardedProgram {
    /// The number of devices the plan runs across.
    pub fn num_devices(&self) -> usize {
        self.n
    }

    /// Runs device `d`'s part of the plan only, in this process: the other
    /// devices are other processes running theirs, and the collective
    /// steps go through `coll`. `inputs[i]` is input leaf `i` as device `d`
    /// holds it (its shard of a split leaf, the whole of a replicated one);
    /// replicated writebacks are assigned into `leaves`. Returns each
    /// output as device `d` holds it: its split axis (`None`: replicated)
    /// and its value.
    pub fn run_one(
        &self,
        d: usize,
        inputs: &[Tensor],
        leaves: &[Tensor],
        coll: &dyn Collectives,
    ) -> Vec<(Option<usize>, Tensor)> {
        let n = self.n;
        let mut vals: HashMap<Key, Tensor> = HashMap::new();
        for (&k, t) in self.inputs.iter().zip(inputs) {
            vals.insert(k, t.clone());
        }
        for (v, t) in &self.consts {
            vals.insert((*v, Sharding::Rep), t.clone());
        }
        let mut i = 0;
        while i < self.steps.len() {
            match &self.steps[i] {
                Step::Stage(s) => {
                    let ins: Vec<Tensor> = s.imports.iter().map(|k| vals[k].clone()).collect();
                    let outs = s.programs[d].lock().unwrap().run(&ins);
                    for (k, t) in s.exports.iter().zip(outs) {
                        vals.insert(*k, t);
                    }
                    i += 1;
                }
                Step::Convert {
                    how: Convert::AllReduce(op),
                    ..
                } => {
                    // Consecutive all-reduces with one op go together.
                    let mut j = i;
                    let mut keys = Vec::new();
                    while let Some(Step::Convert {
                        from,
                        to,
                        how: Convert::AllReduce(o),
                    }) = self.steps.get(j)
                    {
                        if o != op {
                            break;
                        }
                        keys.push((*from, *to));
                        j += 1;
                    }
                    let ins: Vec<Tensor> = keys.iter().map(|(f, _)| vals[f].clone()).collect();
                    let outs = coll.all_reduce(&ins, *op);
                    for ((_, to), t) in keys.iter().zip(outs) {
                        vals.insert(*to, t);
                    }
                    i = j;
                }
                Step::Convert { from, to, how } => {
                    let t = &vals[from];
                    let out = match how {
                        Convert::AllGather(a) => coll.all_gather(t, *a),
                        Convert::Scatter(a) => {
                            let len = t.shape()[*a] / n;
                            t.narrow(*a as isize, d * len, len)
                        }
                        Convert::AllReduce(_) => unreachable!(),
                    };
                    vals.insert(*to, out);
                    i += 1;
                }
            }
        }
        for (leaf, k) in &self.writebacks {
            leaves[*leaf].assign(&vals[k]);
        }
        self.outputs
            .iter()
            .map(|k| {
                let split = match k.1 {
                    Sharding::Split(a) => Some(a),
                    Sharding::Rep => None,
                    Sharding::Partial(_) => unreachable!("outputs are all-reduced"),
                };
                (split, vals[k].clone())
            })
            .collect()
    }
}

/// A pmap input leaf: a host tensor, or values already on the devices in
/// the layout the program expects (an unread output of an earlier call).
pub enum Input {
    /// A host tensor, sharded by the program's input layout.
    Global(Tensor),
    /// One value per device, already in the layout the program expects.
    OnDevices(Vec<Tensor>),
}

/// An output as the devices hold it: one value per device, split along
/// `split` (`Some(axis)`) or replicated.
pub struct Output {
    /// The axis the values split the output along (`None`: replicated).
    pub split: Option<usize>,
    /// One value per device.
    pub values: Vec<Tensor>,
}

impl Output {
    fn of(k: Key, ts: &[Tensor]) -> Output {
        let split = match k.1 {
            Sharding::Split(a) => Some(a),
            Sharding::Rep => None,
            Sharding::Partial(_) => unreachable!("outputs are all-reduced"),
        };
        Output {
            split,
            values: ts.to_vec(),
        }
    }

    /// The global value: the shards concatenated, or one replica.
    pub fn gather(&self) -> Tensor {
        match self.split {
            Some(a) => Tensor::concatenate(&self.values, a as isize),
            None => self.values[0].clone(),
        }
    }

    /// Bytes reading it moves from devices with memory of their own
    /// (`host[d]`: device `d` is the host): every shard, or one replica.
    pub fn read_bytes(&self, host: &[bool]) -> u64 {
        match self.split {
            Some(_) => (0..self.values.len())
                .filter(|&d| !host[d])
                .map(|d| bytes(&self.values[d]))
                .sum(),
            None if !host[0] => bytes(&self.values[0]),
            None => 0,
        }
    }

    /// Bytes the devices hold for it (every shard or replica, host ones aside).
    pub fn device_bytes(&self, host: &[bool]) -> u64 {
        (0..self.values.len())
            .filter(|&d| !host[d])
            .map(|d| bytes(&self.values[d]))
            .sum()
    }
}

/// Device `d`'s instance of `stage` on `ins`; `alone`: its kernels on this
/// thread only.
fn run_device(stage: &Stage, d: usize, ins: &[Tensor], alone: bool) -> Vec<Tensor> {
    let program = stage.programs[d].lock().unwrap();
    if alone {
        nx::raw::on_this_thread(|| program.run(ins))
    } else {
        program.run(ins)
    }
}

type Job = Box<dyn FnOnce() + Send>;
type Outcome = Result<Vec<Tensor>, Box<dyn std::any::Any + Send>>;

/// Runs device `d`'s instance of `stage` on `ins` on the worker thread of
/// host device `name` (started on first use, kept for the process); the
/// receiver gets the outputs or the panic that stopped them.
fn run_on_worker(
    name: &str,
    stage: Arc<Stage>,
    d: usize,
    ins: Vec<Tensor>,
    alone: bool,
) -> mpsc::Receiver<Outcome> {
    static WORKERS: OnceLock<Mutex<HashMap<String, mpsc::Sender<Job>>>> = OnceLock::new();
    let (tx, rx) = mpsc::channel();
    let job: Job = Box::new(move || {
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_device(&stage, d, &ins, alone)
        }));
        let _ = tx.send(out);
    });
    let mut workers = WORKERS.get_or_init(Default::default).lock().unwrap();
    let worker = workers.entry(name.to_string()).or_insert_with(|| {
        let (jtx, jrx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name(format!("tolk-{name}"))
            .spawn(move || {
                for job in jrx {
                    job();
                }
            })
            .expect("cannot start a device thread");
        jtx
    });
    worker.send(job).expect("a device worker died");
    rx
}

/// Bytes a call moved between the host and devices with memory of their own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Transfers {
    /// Bytes copied from the host to the devices.
    pub to_device: u64,
    /// Bytes copied from the devices back to the host.
    pub from_device: u64,
}

fn bytes(t: &Tensor) -> u64 {
    (t.numel() * t.dtype().size_in_bytes()) as u64
}

/// The per-device values of global `t` in layout `sh`.
fn per_device(t: &Tensor, sh: Sharding, n: usize) -> Vec<Tensor> {
    match sh {
        Sharding::Split(a) => {
            let len = t.shape()[a] / n;
            (0..n).map(|d| t.narrow(a as isize, d * len, len)).collect()
        }
        _ => vec![t.clone(); n],
    }
}

/// Every device's partial value combined: a tree over the devices' buffers
/// (pairs combined by nx's elementwise kernel, level by level).
pub fn all_reduce(ts: &[Tensor], op: ReduceOp) -> Tensor {
    let mut level: Vec<Tensor> = ts.to_vec();
    while level.len() > 1 {
        let mut next = Vec::with_capacity(level.len().div_ceil(2));
        for pair in level.chunks(2) {
            next.push(match pair {
                [a, b] => combine(a, b, op),
                [a] => a.clone(),
                _ => unreachable!(),
            });
        }
        level = next;
    }
    level.pop().expect("at least one device")
}

fn combine(a: &Tensor, b: &Tensor, op: ReduceOp) -> Tensor {
    let bin = match op {
        ReduceOp::Sum => nx::BinaryOp::Add,
        ReduceOp::Prod => nx::BinaryOp::Mul,
        ReduceOp::Max => nx::BinaryOp::Max,
        ReduceOp::Min => nx::BinaryOp::Min,
    };
    nx::raw::eval(Prim::Binary(bin), &[a, b])
}

impl ShardedProgram {
    /// One line for logs: stages and collectives.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for s in &self.steps {
            parts.push(match s {
                Step::Stage(st) => format!(
                    "stage of {} kernels",
                    st.programs[0].lock().unwrap().num_kernels()
                ),
                Step::Convert { how, .. } => match how {
                    Convert::AllReduce(op) => format!("all-reduce ({op:?})"),
                    Convert::AllGather(a) => format!("all-gather (axis {a})"),
                    Convert::Scatter(a) => format!("slice (axis {a})"),
                },
            });
        }
        format!("{} devices: {}", self.n, parts.join(", "))
    }
}
