//! Scheduling: decides which values become buffers and groups the rest into
//! fused kernels.
//!
//! Elementwise primitives and movement primitives fuse into the kernel of
//! the buffer that consumes them. Movement ops are pushed down to the
//! buffers they read (they commute with elementwise ops), so each load of
//! a kernel reads a buffer through one strided `Layout`: index arithmetic,
//! never a copy. Everything else is a library step run by nx's eager
//! kernel (`dot_general` is the GEMM crate split across threads, as in
//! eager mode); a movement op feeding a library step is an eager view step.
//!
//! A value becomes a buffer when it is an output or a writeback, feeds a
//! library step, is used by more than one kernel (computed once, not per
//! consumer), or sits under a reshape that no strided layout expresses.

use crate::graph::{Graph, Var};
use nx::{BinaryOp, CmpOp, DType, Layout, Prim, UnaryOp};
use std::collections::{BTreeSet, HashMap};

/// One node of a kernel's body, in topological order; operands are indices
/// of earlier nodes. Equality compares literals by their bits (`0.0` and
/// `-0.0` are different literals: deduplicating one into the other, within a
/// kernel or across kernels, changed the sign of zero results).
#[derive(Clone, Debug)]
pub enum Node {
    /// Element of kernel argument `arg` (a buffer) at `layout` (whose shape is
    /// the kernel's shape).
    Load {
        arg: usize,
        layout: Layout,
    },
    Lit {
        dtype: DType,
        value: f64,
    },
    Unary {
        op: UnaryOp,
        dtype: DType,
        x: usize,
    },
    Binary {
        op: BinaryOp,
        dtype: DType,
        a: usize,
        b: usize,
    },
    Compare {
        op: CmpOp,
        dtype: DType,
        a: usize,
        b: usize,
    },
    Where {
        dtype: DType,
        c: usize,
        a: usize,
        b: usize,
    },
    Cast {
        from: DType,
        to: DType,
        x: usize,
    },
}

impl PartialEq for Node {
    fn eq(&self, other: &Node) -> bool {
        use Node::*;
        match (self, other) {
            (Load { arg: a, layout: l }, Load { arg: b, layout: m }) => a == b && l == m,
            (Lit { dtype: a, value: x }, Lit { dtype: b, value: y }) => {
                a == b && x.to_bits() == y.to_bits()
            }
            (
                Unary { op: o, dtype: d, x },
                Unary {
                    op: p,
                    dtype: e,
                    x: y,
                },
            ) => o == p && d == e && x == y,
            (
                Binary {
                    op: o,
                    dtype: d,
                    a,
                    b,
                },
                Binary {
                    op: p,
                    dtype: e,
                    a: c,
                    b: f,
                },
            ) => o == p && d == e && a == c && b == f,
            (
                Compare {
                    op: o,
                    dtype: d,
                    a,
                    b,
                },
                Compare {
                    op: p,
                    dtype: e,
                    a: c,
                    b: f,
                },
            ) => o == p && d == e && a == c && b == f,
            (
                Where { dtype: d, c, a, b },
                Where {
                    dtype: e,
                    c: c2,
                    a: a2,
                    b: b2,
                },
            ) => d == e && c == c2 && a == a2 && b == b2,
            (
                Cast { from: f, to: t, x },
                Cast {
                    from: g,
                    to: u,
                    x: y,
                },
            ) => f == g && t == u && x == y,
            _ => false,
        }
    }
}

/// A fused loop nest over `shape`, writing one contiguous buffer.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    pub shape: Vec<usize>,
    pub out_dtype: DType,
    /// Argument buffers: dtype of each.
    pub arg_dtypes: Vec<DType>,
    pub nodes: Vec<Node>,
    /// The node whose value is stored.
    pub root: usize,
    /// The graph primitives fused into it (for debug output).
    pub fused: Vec<String>,
}

/// One step of a program's plan.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Runs kernel `kernel` writing buffer `out` from `args`.
    Kernel {
        kernel: usize,
        out: Var,
        args: Vec<Var>,
    },
    /// Runs graph equation `eqn` with nx's eager kernel.
    Library { eqn: usize },
}

/// The scheduled program: steps in order, the kernels they run, and when
/// each buffer dies.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    pub kernels: Vec<Kernel>,
    pub steps: Vec<Step>,
    /// `frees[i]`: buffers whose last use is step `i` (never inputs,
    /// constants or outputs).
    pub frees: Vec<Vec<Var>>,
}

/// How a primitive is scheduled.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Elementwise,
    Movement,
    Fill,
    Library,
}

fn kind(prim: &Prim) -> Kind {
    match prim {
        Prim::Unary(_)
        | Prim::Binary(_)
        | Prim::Compare(_)
        | Prim::Where
        | Prim::Cast(_)
        | Prim::Copy
        | Prim::StopGradient => Kind::Elementwise,
        Prim::Reshape { .. }
        | Prim::Broadcast { .. }
        | Prim::Permute { .. }
        | Prim::Slice { .. }
        | Prim::Flip { .. } => Kind::Movement,
        Prim::Full { .. } => Kind::Fill,
        Prim::Iota { .. }
        | Prim::Reduce { .. }
        | Prim::ArgReduce { .. }
        | Prim::Cumulative { .. }
        | Prim::Pad { .. }
        | Prim::Concat { .. }
        | Prim::Gather { .. }
        | Prim::ScatterAdd { .. }
        | Prim::DotGeneral { .. }
        | Prim::Threefry2x32 => Kind::Library,
        Prim::Assign => unreachable!("assign is staged as a writeback, never an equation"),
    }
}

/// Applies a movement primitive to a layout; `None` when a reshape needs a copy.
fn apply_movement(prim: &Prim, l: &Layout) -> Option<Layout> {
    match prim {
        Prim::Reshape { shape } => l.reshape(shape),
        Prim::Broadcast { shape } => Some(l.broadcast(shape)),
        Prim::Permute { perm } => Some(l.permute(perm)),
        Prim::Slice { start, end, step } => Some(l.slice(start, end, step)),
        Prim::Flip { axes } => Some(l.flip(axes)),
        _ => unreachable!("not a movement primitive"),
    }
}

/// Why building a kernel failed: this value must become a buffer first.
struct NeedBuffer(Var);

struct Builder<'g> {
    g: &'g Graph,
    /// Defining equation of each variable (None: input or constant).
    def: &'g [Option<usize>],
    buffers: &'g BTreeSet<Var>,
    /// The buffer this kernel computes.
    root: Var,
    nodes: Vec<Node>,
    args: Vec<Var>,
    memo: HashMap<(Var, Vec<usize>), usize>,
    /// Non-movement variables computed inside this kernel.
    inlined: BTreeSet<Var>,
    fused: Vec<String>,
}

impl Builder<'_> {
    fn push(&mut self, n: Node) -> usize {
        if let Some(i) = self.nodes.iter().position(|m| *m == n) {
            return i;
        }
        self.nodes.push(n);
        self.nodes.len() - 1
    }

    /// The node computing `var` seen through `chain` (movement equations
    /// applied after `var`, innermost first).
    fn expr(&mut self, var: Var, chain: &[usize]) -> Result<usize, NeedBuffer> {
        let key = (var, chain.to_vec());
        if let Some(&n) = self.memo.get(&key) {
            return Ok(n);
        }
        let eqn = self.def[var].map(|e| &self.g.eqns[e]);
        let is_root_call = var == self.root && chain.is_empty();
        let node = match eqn {
            Some(e)
                if !self.buffers.contains(&var)
                    || (is_root_call && kind(&e.prim) != Kind::Library) =>
            {
                self.fused.push(e.prim.name());
                match &e.prim {
                    Prim::Full { dtype, value, .. } => self.push(Node::Lit {
                        dtype: *dtype,
                        value: *value,
                    }),
                    p if kind(p) == Kind::Movement => {
                        let mut c = vec![self.def[var].unwrap()];
                        c.extend_from_slice(chain);
                        self.expr(e.inputs[0], &c)?
                    }
                    p => {
                        self.inlined.insert(var);
                        let ins: Vec<usize> = e
                            .inputs
                            .iter()
                            .map(|&i| self.expr(i, chain))
                            .collect::<Result<_, _>>()?;
                        let dt = self.g.aval(e.inputs[0]).dtype;
                        let n = match p {
                            Prim::Unary(op) => Node::Unary {
                                op: *op,
                                dtype: dt,
                                x: ins[0],
                            },
                            Prim::Binary(op) => Node::Binary {
                                op: *op,
                                dtype: dt,
                                a: ins[0],
                                b: ins[1],
                            },
                            Prim::Compare(op) => Node::Compare {
                                op: *op,
                                dtype: dt,
                                a: ins[0],
                                b: ins[1],
                            },
                            Prim::Where => Node::Where {
                                dtype: self.g.aval(e.inputs[1]).dtype,
                                c: ins[0],
                                a: ins[1],
                                b: ins[2],
                            },
                            Prim::Cast(to) => Node::Cast {
                                from: dt,
                                to: *to,
                                x: ins[0],
                            },
                            Prim::Copy | Prim::StopGradient => return Ok(ins[0]),
                            _ => unreachable!(),
                        };
                        self.push(n)
                    }
                }
            }
            _ => {
                // A buffer: compose the chain onto its contiguous layout.
                let mut layout = Layout::contiguous(&self.g.aval(var).shape);
                let mut below = var;
                for &m in chain {
                    let e = &self.g.eqns[m];
                    layout = apply_movement(&e.prim, &layout).ok_or(NeedBuffer(below))?;
                    below = e.out;
                }
                let arg = match self.args.iter().position(|&a| a == var) {
                    Some(a) => a,
                    None => {
                        self.args.push(var);
                        self.args.len() - 1
                    }
                };
                self.push(Node::Load { arg, layout })
            }
        };
        self.memo.insert(key, node);
        Ok(node)
    }
}

/// Schedules `g` (already simplified).
pub fn schedule(g: &Graph) -> Schedule {
    let mut def = vec![None; g.avals.len()];
    for (i, e) in g.eqns.iter().enumerate() {
        def[e.out] = Some(i);
    }
    let kind_of = |v: Var| def[v].map(|e: usize| kind(&g.eqns[e].prim));

    // Buffers to start from; movement results feeding library steps are
    // eager views (steps of their own), not buffers.
    let mut buffers: BTreeSet<Var> = BTreeSet::new();
    let mut views: BTreeSet<Var> = BTreeSet::new();
    buffers.extend(g.inputs.iter().copied());
    buffers.extend(g.consts.iter().map(|(v, _)| *v));
    buffers.extend(g.outputs.iter().copied());
    buffers.extend(g.writebacks.iter().map(|(_, v)| *v));
    fn library_input(
        v: Var,
        g: &Graph,
        def: &[Option<usize>],
        buffers: &mut BTreeSet<Var>,
        views: &mut BTreeSet<Var>,
    ) {
        match def[v].map(|e| (e, kind(&g.eqns[e].prim))) {
            Some((e, Kind::Movement)) => {
                if views.insert(v) {
                    library_input(g.eqns[e].inputs[0], g, def, buffers, views);
                }
            }
            _ => {
                buffers.insert(v);
            }
        }
    }
    for e in &g.eqns {
        if kind(&e.prim) == Kind::Library {
            buffers.insert(e.out);
            for &i in &e.inputs {
                library_input(i, g, &def, &mut buffers, &mut views);
            }
        }
    }

    // Build kernels until no value is needed as a buffer by another.
    loop {
        let mut users: HashMap<Var, usize> = HashMap::new();
        let mut kernels: Vec<(Var, Kernel, Vec<Var>)> = Vec::new();
        let mut need = None;
        for &root in buffers.iter() {
            match kind_of(root) {
                None | Some(Kind::Library) => continue,
                _ => {}
            }
            let mut b = Builder {
                g,
                def: &def,
                buffers: &buffers,
                root,
                nodes: Vec::new(),
                args: Vec::new(),
                memo: HashMap::new(),
                inlined: BTreeSet::new(),
                fused: Vec::new(),
            };
            match b.expr(root, &[]) {
                Ok(r) => {
                    for &v in &b.inlined {
                        if v != root {
                            *users.entry(v).or_default() += 1;
                        }
                    }
                    let arg_dtypes = b.args.iter().map(|&a| g.aval(a).dtype).collect();
                    kernels.push((
                        root,
                        Kernel {
                            shape: g.aval(root).shape.clone(),
                            out_dtype: g.aval(root).dtype,
                            arg_dtypes,
                            nodes: b.nodes,
                            root: r,
                            fused: b.fused,
                        },
                        b.args,
                    ));
                }
                Err(NeedBuffer(v)) => {
                    need = Some(v);
                    break;
                }
            }
        }
        // A value inlined into several kernels is computed once instead.
        let shared = users.iter().filter(|(_, &n)| n > 1).map(|(&v, _)| v).max();
        if let Some(v) = need.or(shared) {
            buffers.insert(v);
            continue;
        }
        return plan(g, &def, kernels, &views);
    }
}

/// Orders the steps (graph order), deduplicates kernels by structure and
/// computes when each buffer dies.
fn plan(
    g: &Graph,
    def: &[Option<usize>],
    kernels: Vec<(Var, Kernel, Vec<Var>)>,
    views: &BTreeSet<Var>,
) -> Schedule {
    let mut by_root: HashMap<Var, (Kernel, Vec<Var>)> =
        kernels.into_iter().map(|(v, k, a)| (v, (k, a))).collect();
    let mut distinct: Vec<Kernel> = Vec::new();
    let mut steps = Vec::new();
    for (i, e) in g.eqns.iter().enumerate() {
        if let Some((k, args)) = by_root.remove(&e.out) {
            let kernel = match distinct.iter().position(|d| *d == k) {
                Some(d) => d,
                None => {
                    distinct.push(k);
                    distinct.len() - 1
                }
            };
            steps.push(Step::Kernel {
                kernel,
                out: e.out,
                args,
            });
        } else if kind(&e.prim) == Kind::Library || views.contains(&e.out) {
            steps.push(Step::Library { eqn: i });
        }
    }
    let _ = def;
    // Last use of every buffer.
    let mut last: HashMap<Var, usize> = HashMap::new();
    for (s, step) in steps.iter().enumerate() {
        let reads: Vec<Var> = match step {
            Step::Kernel { args, .. } => args.clone(),
            Step::Library { eqn } => g.eqns[*eqn].inputs.clone(),
        };
        for v in reads {
            last.insert(v, s);
        }
    }
    let keep: BTreeSet<Var> = g
        .inputs
        .iter()
        .chain(g.consts.iter().map(|(v, _)| v))
        .chain(g.outputs.iter())
        .chain(g.writebacks.iter().map(|(_, v)| v))
        .copied()
        .collect();
    let mut frees = vec![Vec::new(); steps.len()];
    for (v, s) in last {
        if !keep.contains(&v) {
            frees[s].push(v);
        }
    }
    for f in &mut frees {
        f.sort_unstable();
    }
    Schedule {
        kernels: distinct,
        steps,
        frees,
    }
}
