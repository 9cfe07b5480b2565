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
//!
//! This file compiles a plan into a [`ShardedProgram`]; the rules and the
//! stage cut are `rules` (nothing there runs or compiles), the device
//! workers and collectives `run`.

mod rules;
mod run;

use crate::graph::{Eqn, Graph, Var};
use nx::{Aval, Tensor};
use rules::{local_shape, LocalEqns, Planned, Step};
pub use rules::{Convert, Key, Sharding};
pub use run::{all_reduce, Collectives, Input, Output, Transfers};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

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
/// module docs and `rules`): the plan of stages and collectives,
/// uncompiled.
pub fn plan(g: Graph, n: usize, in_axes: &[Option<usize>]) -> Result<ShardPlan, ShardError> {
    // Dead code and duplicates go first: a dead reduction over the split
    // axis would otherwise cost an all-reduce.
    let simplified = crate::pipeline::simplify(g);
    let g = &simplified;
    let Planned {
        inputs,
        steps,
        used_after,
        outputs,
        writebacks,
    } = rules::plan(g, n, in_axes)?;
    let steps = steps
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
        steps,
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

    /// Each input leaf's layout: `Some(axis)` split, `None` replicated.
    pub fn input_layout(&self, leaf: usize) -> Option<usize> {
        match self.inputs[leaf].1 {
            Sharding::Split(a) => Some(a),
            _ => None,
        }
    }

    /// The number of devices the plan runs across.
    pub fn num_devices(&self) -> usize {
        self.n
    }

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
