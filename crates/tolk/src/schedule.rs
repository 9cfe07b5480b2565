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
//!
//! With epilogues on (`tolk::Options::epilogues`, `TOLK_EPILOGUE=1`; off by
//! default, see [`epilogues_enabled`]), a kernel right after a product that
//! reads the product's output at the element it writes (a bias add, an
//! activation, an SGD update) becomes an epilogue of the product
//! (`Step::Epilogue`): it runs on each block of the product's output right
//! after the GEMM call that computed the block, on the same thread, instead
//! of as a pass of its own.

use crate::graph::{Eqn, Graph, Var};
use nx::{BinaryOp, CmpOp, DType, Layout, Prim, ReduceOp, UnaryOp};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// One node of a kernel's body, in topological order; operands are indices
/// of earlier nodes.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    /// Element of kernel argument `arg` (a buffer) at `layout` (whose shape is
    /// the kernel's shape).
    Load {
        /// Index into the kernel's argument buffers.
        arg: usize,
        /// Where each iteration point's element lies in that buffer.
        layout: Layout,
        /// A load of a `pad` or `concat` input: read only where the mask's
        /// condition holds (0 elsewhere), `bias` elements before `layout`'s
        /// address, so that no lane reads outside the buffer.
        mask: Option<Mask>,
    },
    /// A constant; the value's bits, so that `0.0` and `-0.0` differ (two
    /// kernels compare equal only if they compute the same bits).
    Lit {
        /// The literal's dtype.
        dtype: DType,
        /// The value as an `f64`'s bits (`f64::to_bits`), converted to `dtype` when rendered.
        bits: u64,
    },
    /// `Prim::Iota` seen through `layout`: the element at linear index `l`
    /// of the iota's own contiguous layout holds `(l / stride) % len`.
    Iota {
        /// The iota's layout as seen by this kernel.
        layout: Layout,
        /// The iota's row-major stride along its axis.
        stride: usize,
        /// The iota's size along its axis.
        len: usize,
        /// The element dtype.
        dtype: DType,
    },
    /// `Prim::Iota` as an affine function of the loop indices: the element
    /// holds `layout.offset + sum(index * stride)`, where `layout` is the
    /// iota's coordinate along its axis (stride 1 on the axis, 0 elsewhere)
    /// seen through the movement ops. No division, so it vectorizes; used
    /// whenever the movement ops keep the coordinate affine.
    Coord {
        /// The coordinate's layout seen through the movement ops.
        layout: Layout,
        /// The element dtype.
        dtype: DType,
    },
    /// `op(x)` elementwise, as [`Prim::Unary`].
    Unary {
        /// The operation.
        op: UnaryOp,
        /// The operand's dtype.
        dtype: DType,
        /// The operand node.
        x: usize,
    },
    /// `op(a, b)` elementwise, as [`Prim::Binary`].
    Binary {
        /// The operation.
        op: BinaryOp,
        /// The operands' dtype.
        dtype: DType,
        /// The first operand node.
        a: usize,
        /// The second operand node.
        b: usize,
    },
    /// `op(a, b)` elementwise, as [`Prim::Compare`]; a `Bool` result.
    Compare {
        /// The comparison.
        op: CmpOp,
        /// The operands' dtype (the result is `Bool`).
        dtype: DType,
        /// The first operand node.
        a: usize,
        /// The second operand node.
        b: usize,
    },
    /// `c ? a : b`, as [`Prim::Where`].
    Where {
        /// The dtype of `a`, `b` and the result.
        dtype: DType,
        /// The `Bool` condition node.
        c: usize,
        /// The node taken where the condition holds.
        a: usize,
        /// The node taken elsewhere.
        b: usize,
    },
    /// `x` converted from `from` to `to`, as [`Prim::Cast`].
    Cast {
        /// The operand's dtype.
        from: DType,
        /// The result's dtype.
        to: DType,
        /// The operand node.
        x: usize,
    },
}

/// When a masked [`Node::Load`] reads, and where.
#[derive(Clone, Debug, PartialEq)]
pub struct Mask {
    /// The `Bool` node that says whether the element is read.
    pub when: usize,
    /// Elements to subtract from the layout's address: the input sits
    /// `bias` elements after where the layout (over the output's
    /// coordinates) would put it. Negative through a flip.
    pub bias: isize,
}

/// A fused loop nest over `shape`, writing one contiguous buffer.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    /// The iteration space (for a reduction: kept dims, then reduced ones).
    pub shape: Vec<usize>,
    /// The dtype of the buffer it writes.
    pub out_dtype: DType,
    /// Argument buffers: dtype of each.
    pub arg_dtypes: Vec<DType>,
    /// The body, in topological order.
    pub nodes: Vec<Node>,
    /// The node whose value is stored.
    pub root: usize,
    /// The graph primitives fused into it, for debug output: those of the
    /// first of the identical kernels it stands for (empty until
    /// deduplicated, so that identical kernels compare equal).
    pub fused: Vec<String>,
    /// A reduction kernel: the last `shape.len() - kept` dims of `shape`
    /// are reduced with `op`; the output is contiguous over the first `kept`.
    pub reduce: Option<(ReduceOp, usize)>,
    /// An epilogue of a matrix product (see [`Step::Epilogue`]): the kernel
    /// iterates over its shape as a matrix whose rows are its first
    /// `block` dims (the product's output seen as `[batch * M, N]`), and
    /// covers a block of columns given at run time, so it can follow each
    /// block of the product.
    pub block: Option<usize>,
    /// The output goes to memory past the cache (`tk_stream`): a map (not
    /// an epilogue) writing a program output in a pass that moves at least
    /// [`stream_min_bytes`]; rendered so when it lowers to one loop. The
    /// values are the same.
    pub stream: bool,
}

impl Kernel {
    /// Shape of the buffer it writes.
    pub fn out_shape(&self) -> &[usize] {
        match self.reduce {
            Some((_, kept)) => &self.shape[..kept],
            None => &self.shape,
        }
    }
}

/// One step of a program's plan.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Runs kernel `kernel` writing buffer `out` from `args`.
    Kernel {
        /// Index into [`Schedule::kernels`].
        kernel: usize,
        /// The buffer it writes.
        out: Var,
        /// Its argument buffers, in the kernel's argument order.
        args: Vec<Var>,
    },
    /// Runs graph equation `eqn` with nx's eager kernel.
    Library {
        /// Index into the graph's equations.
        eqn: usize,
    },
    /// Runs kernel `kernel` (a `block` kernel) as an epilogue of the
    /// nearest preceding `Library` step, a `dot_general`: on each block of
    /// the product's output right after the block is computed, on the same
    /// thread. Epilogues of one product follow its step in order; each reads
    /// the product's output and earlier epilogues' outputs only at the same
    /// element (every other argument was computed before the product).
    Epilogue {
        /// Index into [`Schedule::kernels`] (a `block` kernel).
        kernel: usize,
        /// The buffer it writes.
        out: Var,
        /// Its argument buffers, in the kernel's argument order.
        args: Vec<Var>,
    },
}

/// The scheduled program: steps in order, the kernels they run, and when
/// each buffer dies.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// The distinct kernels, indexed by the steps.
    pub kernels: Vec<Kernel>,
    /// The steps, in execution order.
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
    /// A reduction compiled as a kernel (its input expression fused in).
    Reduce,
    /// `pad` and `concat`: elementwise over their output, reading their
    /// inputs (buffers, or views of buffers) through masked loads.
    Shifted,
    Library,
}

/// Full reductions at least this large stay with nx's eager kernel, which
/// splits them across threads (a fused kernel splits over kept dims only).
const FUSED_FULL_REDUCE_MAX: usize = 1 << 16;

/// How each equation of `g` is scheduled: `kind`, refined for reductions.
/// A reduction compiles as a kernel when its input is computed by
/// elementwise work (which then fuses into it); a reduction of a buffer
/// (an input, a matrix product's result) stays with nx's eager kernel,
/// which is as fast, exact with eager, and threaded for full reductions.
fn eqn_kinds(g: &Graph, def: &[Option<usize>]) -> Vec<Kind> {
    let mut kinds: Vec<Kind> = Vec::with_capacity(g.eqns.len());
    for e in &g.eqns {
        let Some(prim) = e.as_prim() else {
            kinds.push(Kind::Library); // a loop: a step of its own
            continue;
        };
        let k = match prim {
            Prim::Reduce { axes, .. } => {
                let x = g.aval(e.inputs[0]);
                let full = axes.len() == x.shape.len();
                let mut v = e.inputs[0];
                while let Some(i) = def[v].filter(|&i| kinds[i] == Kind::Movement) {
                    v = g.eqns[i].inputs[0];
                }
                let computed =
                    def[v].is_some_and(|i| matches!(kinds[i], Kind::Elementwise | Kind::Shifted));
                if !computed
                    || x.dtype == DType::Bool
                    || (full && x.numel() >= FUSED_FULL_REDUCE_MAX)
                {
                    Kind::Library
                } else {
                    Kind::Reduce
                }
            }
            p => kind(p),
        };
        kinds.push(k);
    }
    kinds
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
        Prim::Full { .. } | Prim::Iota { .. } => Kind::Fill,
        Prim::Reduce { .. } => Kind::Reduce,
        Prim::Pad { .. } | Prim::Concat { .. } => Kind::Shifted,
        Prim::ArgReduce { .. }
        | Prim::Cumulative { .. }
        | Prim::Gather { .. }
        | Prim::ScatterAdd { .. }
        | Prim::DotGeneral { .. }
        | Prim::Conv { .. }
        | Prim::Threefry2x32
        | Prim::ReduceWindow { .. }
        | Prim::WindowArgmax { .. }
        | Prim::Argsort { .. }
        | Prim::TopK { .. } => Kind::Library,
        Prim::Assign => unreachable!("assign is staged as a writeback, never an equation"),
        // linear algebra: refused by jit's staging (eager only); library
        // steps if a graph ever held one.
        Prim::Cholesky
        | Prim::TriangularSolve { .. }
        | Prim::Solve
        | Prim::Slogdet
        | Prim::Qr { .. }
        | Prim::Eigh
        | Prim::Svd { .. }
        | Prim::Fft { .. } => Kind::Library,
    }
}

/// The primitive of an equation the scheduler fuses (never a loop: loops
/// are library steps).
fn prim_of(e: &Eqn) -> &Prim {
    e.as_prim()
        .expect("tolk: a loop where a fusible primitive was expected")
}

/// Whether `prim` is a movement primitive (a view of its input).
pub(crate) fn is_movement(prim: &Prim) -> bool {
    kind(prim) == Kind::Movement
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

/// Largest kernel: nesting of elementwise operations, and nodes.
const MAX_DEPTH: usize = 24;
const MAX_NODES: usize = 192;

/// Why building a kernel failed: this value must become a buffer first.
struct NeedBuffer(Var);

struct Builder<'g> {
    g: &'g Graph,
    /// Defining equation of each variable (None: input or constant).
    def: &'g [Option<usize>],
    kinds: &'g [Kind],
    buffers: &'g VarSet,
    /// The buffer this kernel computes.
    root: Var,
    nodes: Vec<Node>,
    args: Vec<Var>,
    /// Nodes already built: (value, movement chain) and its node. A kernel
    /// has at most [`MAX_NODES`] nodes, so a list is quicker than a map
    /// (whose lookups would allocate the key).
    memo: Vec<(Var, Vec<usize>, usize)>,
    /// Nesting of elementwise nodes above the current one.
    depth: usize,
    /// Values this kernel loads because it grew too big to compute them.
    spilled: Vec<Var>,
    /// The equations fused in (named only once per distinct kernel).
    fused: Vec<usize>,
}

impl Builder<'_> {
    fn push(&mut self, n: Node) -> usize {
        if let Some(i) = self.nodes.iter().position(|m| *m == n) {
            return i;
        }
        self.nodes.push(n);
        self.nodes.len() - 1
    }

    /// `var`'s contiguous layout with `chain` applied.
    fn through(&self, var: Var, chain: &[usize]) -> Result<Layout, NeedBuffer> {
        let mut layout = Layout::contiguous(&self.g.aval(var).shape);
        let mut below = var;
        for &m in chain {
            let e = &self.g.eqns[m];
            layout = apply_movement(prim_of(e), &layout).ok_or(NeedBuffer(below))?;
            below = e.out();
        }
        Ok(layout)
    }

    /// `start` with `chain` applied; `None` when a reshape cannot express it.
    fn through_from(&self, start: Layout, chain: &[usize]) -> Option<Layout> {
        chain
            .iter()
            .try_fold(start, |l, &m| apply_movement(prim_of(&self.g.eqns[m]), &l))
    }

    /// Whether the element of `var` (the output of a `pad` or `concat`)
    /// seen through `chain` lies in the block of shape `in_shape` placed at
    /// `lo`: a `Bool` node, `None` when it always does.
    fn in_range(
        &mut self,
        var: Var,
        chain: &[usize],
        lo: &[usize],
        in_shape: &[usize],
    ) -> Result<Option<usize>, NeedBuffer> {
        let out_shape = self.g.aval(var).shape.clone();
        let mut cond = None;
        for d in 0..out_shape.len() {
            if lo[d] == 0 && in_shape[d] == out_shape[d] {
                continue;
            }
            let mut coord = Layout::contiguous(&out_shape);
            for (a, s) in coord.strides.iter_mut().enumerate() {
                *s = isize::from(a == d);
            }
            let layout = self.through_from(coord, chain).ok_or(NeedBuffer(var))?;
            let c = self.push(Node::Coord {
                layout,
                dtype: DType::I64,
            });
            let bound = |b: &mut Self, v: usize| {
                b.push(Node::Lit {
                    dtype: DType::I64,
                    bits: (v as f64).to_bits(),
                })
            };
            let (low, high) = (bound(self, lo[d]), bound(self, lo[d] + in_shape[d]));
            let above = self.push(Node::Compare {
                op: CmpOp::Ge,
                dtype: DType::I64,
                a: c,
                b: low,
            });
            let below = self.push(Node::Compare {
                op: CmpOp::Lt,
                dtype: DType::I64,
                a: c,
                b: high,
            });
            let both = self.push(Node::Binary {
                op: BinaryOp::And,
                dtype: DType::Bool,
                a: above,
                b: below,
            });
            cond = Some(match cond {
                None => both,
                Some(prev) => self.push(Node::Binary {
                    op: BinaryOp::And,
                    dtype: DType::Bool,
                    a: prev,
                    b: both,
                }),
            });
        }
        Ok(cond)
    }

    /// A load of `x` (an input of the `pad` or `concat` computing `var`,
    /// placed at `lo` in its output) at the element of `var` seen through
    /// `chain`, read where `when` holds. `x` must be a buffer or a view of
    /// one; otherwise that value becomes a buffer first.
    fn shifted_load(
        &mut self,
        x: Var,
        var: Var,
        chain: &[usize],
        lo: &[usize],
        when: Option<usize>,
    ) -> Result<usize, NeedBuffer> {
        // `x` as a view of a buffer: the movement equations from it.
        let mut views = Vec::new();
        let mut base = x;
        while !self.buffers.contains(&base) {
            match self.def[base] {
                Some(i) if self.kinds[i] == Kind::Movement => {
                    views.push(i);
                    base = self.g.eqns[i].inputs[0];
                }
                Some(_) => return Err(NeedBuffer(base)),
                None => break, // an input or constant: a buffer
            }
        }
        views.reverse();
        let seen = self.through(base, &views)?;
        let bias: isize = lo
            .iter()
            .zip(&seen.strides)
            .map(|(&l, &s)| l as isize * s)
            .sum();
        let shifted = Layout {
            shape: self.g.aval(var).shape.clone(),
            strides: seen.strides,
            offset: seen.offset,
        };
        let layout = self.through_from(shifted, chain).ok_or(NeedBuffer(var))?;
        let arg = match self.args.iter().position(|&a| a == base) {
            Some(a) => a,
            None => {
                self.args.push(base);
                self.args.len() - 1
            }
        };
        debug_assert!(
            when.is_some() || bias == 0,
            "an unmasked load is not shifted"
        );
        Ok(self.push(Node::Load {
            arg,
            layout,
            mask: when.map(|when| Mask { when, bias }),
        }))
    }

    /// The node computing `var` seen through `chain` (movement equations
    /// applied after `var`, innermost first).
    fn expr(&mut self, var: Var, chain: &[usize]) -> Result<usize, NeedBuffer> {
        if let Some(&(_, _, n)) = self.memo.iter().find(|(v, c, _)| *v == var && c == chain) {
            return Ok(n);
        }
        let eqn = self.def[var].map(|e| &self.g.eqns[e]);
        let is_root_call = var == self.root && chain.is_empty();
        // A kernel stops growing past a size (a long sum of terms, such as a
        // gradient accumulated over a scan's steps, would otherwise become
        // one kernel reading every term): the value is computed by a kernel
        // of its own, and identical pieces compile once.
        let too_big = self.depth >= MAX_DEPTH || self.nodes.len() >= MAX_NODES;
        if !is_root_call
            && too_big
            && self.def[var].is_some_and(|i| self.kinds[i] == Kind::Elementwise)
            && !self.buffers.contains(&var)
        {
            self.spilled.push(var);
        }
        let computed = |b: &Self| !b.buffers.contains(&var) && !b.spilled.contains(&var);
        let node = match eqn {
            Some(e)
                if computed(self)
                    || (is_root_call && self.kinds[self.def[var].unwrap()] != Kind::Library) =>
            {
                self.fused.push(self.def[var].unwrap());
                match prim_of(e) {
                    Prim::Reduce { axes, .. } => {
                        // The kernel's root: its body is the input's
                        // expression, over the input's index space with the
                        // reduced axes moved last.
                        let x = e.inputs[0];
                        let n = self.g.aval(x).shape.len();
                        let mut perm: Vec<usize> = (0..n).filter(|a| !axes.contains(a)).collect();
                        perm.extend(axes.iter().copied());
                        self.depth += 1;
                        let r = self.expr(x, &[])?;
                        self.depth -= 1;
                        for node in &mut self.nodes {
                            if let Node::Load { layout, .. }
                            | Node::Iota { layout, .. }
                            | Node::Coord { layout, .. } = node
                            {
                                *layout = layout.permute(&perm);
                            }
                        }
                        r
                    }
                    Prim::Full { dtype, value, .. } => self.push(Node::Lit {
                        dtype: *dtype,
                        bits: value.to_bits(),
                    }),
                    Prim::Iota { shape, axis, dtype } => {
                        let mut coord = Layout::contiguous(shape);
                        for (d, s) in coord.strides.iter_mut().enumerate() {
                            *s = if d == *axis { 1 } else { 0 };
                        }
                        match self.through_from(coord, chain) {
                            Some(layout) => self.push(Node::Coord {
                                layout,
                                dtype: *dtype,
                            }),
                            None => {
                                let layout = self.through(var, chain)?;
                                self.push(Node::Iota {
                                    layout,
                                    stride: shape[axis + 1..].iter().product(),
                                    len: shape[*axis],
                                    dtype: *dtype,
                                })
                            }
                        }
                    }
                    Prim::Pad { lo, value, .. } => {
                        let x = e.inputs[0];
                        let in_shape = self.g.aval(x).shape.clone();
                        let when = self.in_range(var, chain, lo, &in_shape)?;
                        let load = self.shifted_load(x, var, chain, lo, when)?;
                        let dtype = self.g.aval(var).dtype;
                        match when {
                            None => load,
                            Some(c) => {
                                let fill = self.push(Node::Lit {
                                    dtype,
                                    bits: value.to_bits(),
                                });
                                self.push(Node::Where {
                                    dtype,
                                    c,
                                    a: load,
                                    b: fill,
                                })
                            }
                        }
                    }
                    Prim::Concat { axis } => {
                        // Each input is a masked load at its offset along
                        // `axis`; the last one's covers the rest.
                        let dtype = self.g.aval(var).dtype;
                        let rank = self.g.aval(var).shape.len();
                        let mut at = 0;
                        let mut parts = Vec::new();
                        for &x in &e.inputs {
                            let in_shape = self.g.aval(x).shape.clone();
                            let mut lo = vec![0; rank];
                            lo[*axis] = at;
                            at += in_shape[*axis];
                            let when = self.in_range(var, chain, &lo, &in_shape)?;
                            parts.push((when, self.shifted_load(x, var, chain, &lo, when)?));
                        }
                        let (_, mut acc) = parts.pop().expect("concat has inputs");
                        while let Some((when, load)) = parts.pop() {
                            acc = match when {
                                Some(c) => self.push(Node::Where {
                                    dtype,
                                    c,
                                    a: load,
                                    b: acc,
                                }),
                                None => load,
                            };
                        }
                        acc
                    }
                    p if kind(p) == Kind::Movement => {
                        let mut c = vec![self.def[var].unwrap()];
                        c.extend_from_slice(chain);
                        self.expr(e.inputs[0], &c)?
                    }
                    p => {
                        self.depth += 1;
                        let ins: Vec<usize> = e
                            .inputs
                            .iter()
                            .map(|&i| self.expr(i, chain))
                            .collect::<Result<_, _>>()?;
                        self.depth -= 1;
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
                let layout = self.through(var, chain)?;
                let arg = match self.args.iter().position(|&a| a == var) {
                    Some(a) => a,
                    None => {
                        self.args.push(var);
                        self.args.len() - 1
                    }
                };
                self.push(Node::Load {
                    arg,
                    layout,
                    mask: None,
                })
            }
        };
        self.memo.push((var, chain.to_vec(), node));
        Ok(node)
    }
}

/// A set of variables, one flag per variable of the graph: the scheduler
/// asks whether a value is a buffer for every node of every kernel, tens of
/// thousands of times in a traced 1000-step scan.
struct VarSet(Vec<bool>);

impl VarSet {
    fn new(vars: usize) -> VarSet {
        VarSet(vec![false; vars])
    }

    fn contains(&self, v: &Var) -> bool {
        self.0[*v]
    }

    /// Adds `v`; whether it was new.
    fn insert(&mut self, v: Var) -> bool {
        !std::mem::replace(&mut self.0[v], true)
    }

    fn extend(&mut self, vs: impl IntoIterator<Item = Var>) {
        for v in vs {
            self.0[v] = true;
        }
    }

    /// The members in increasing order.
    fn iter(&self) -> impl DoubleEndedIterator<Item = Var> + '_ {
        self.0
            .iter()
            .enumerate()
            .filter(|(_, &m)| m)
            .map(|(v, _)| v)
    }
}

/// Schedules `g` (already simplified), with epilogues unless `TOLK_EPILOGUE=0`.
pub fn schedule(g: &Graph) -> Schedule {
    schedule_with(g, epilogues_enabled(), stream_min_bytes())
}

/// The size of the host's last-level cache, from sysfs (`None` where it
/// cannot be read): a map writing a program output whose pass moves at
/// least this many bytes streams its output ([`Kernel::stream`]). Below it
/// the output may still be in cache for its next reader; above it, storing
/// it the ordinary way first reads every line of it from memory.
pub fn stream_min_bytes() -> Option<usize> {
    static LLC: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *LLC.get_or_init(|| {
        let mut best = None;
        for i in 0..8 {
            let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
            let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).ok();
            let (Some(level), Some(size)) = (read("level"), read("size")) else {
                continue;
            };
            if let (Ok(level), Some(bytes)) = (level.trim().parse::<u32>(), cache_size(&size)) {
                if best.is_none_or(|(l, _)| level > l) {
                    best = Some((level, bytes));
                }
            }
        }
        best.map(|(_, bytes)| bytes)
    })
}

/// A sysfs cache size (`32768K`, `1M`, or plain bytes) in bytes.
fn cache_size(text: &str) -> Option<usize> {
    let text = text.trim();
    let (digits, shift) = match text.as_bytes().last()? {
        b'K' => (&text[..text.len() - 1], 10),
        b'M' => (&text[..text.len() - 1], 20),
        _ => (text, 0),
    };
    digits.parse::<usize>().ok().map(|n| n << shift)
}

/// Schedules `g` (already simplified); `epilogues`: whether kernels may run
/// as epilogues of products; `stream_min_bytes`: see [`stream_min_bytes`]
/// (`None`: no kernel streams).
pub fn schedule_with(g: &Graph, epilogues: bool, stream_min_bytes: Option<usize>) -> Schedule {
    let mut def = vec![None; g.avals.len()];
    for (i, e) in g.eqns.iter().enumerate() {
        for &o in &e.outs {
            def[o] = Some(i);
        }
    }
    let kinds = eqn_kinds(g, &def);
    let kind_of = |v: Var| def[v].map(|e: usize| kinds[e]);

    // Buffers to start from; movement results feeding library steps are
    // eager views (steps of their own), not buffers.
    let mut buffers = VarSet::new(g.avals.len());
    let mut views = VarSet::new(g.avals.len());
    buffers.extend(g.inputs.iter().copied());
    buffers.extend(g.consts.iter().map(|(v, _)| *v));
    buffers.extend(g.outputs.iter().copied());
    buffers.extend(g.writebacks.iter().map(|(_, v)| *v));
    fn library_input(
        v: Var,
        g: &Graph,
        def: &[Option<usize>],
        kinds: &[Kind],
        buffers: &mut VarSet,
        views: &mut VarSet,
    ) {
        match def[v].map(|e| (e, kinds[e])) {
            Some((e, Kind::Movement)) => {
                if views.insert(v) {
                    library_input(g.eqns[e].inputs[0], g, def, kinds, buffers, views);
                }
            }
            _ => {
                buffers.insert(v);
            }
        }
    }
    // A computed value that is broadcast to a larger shape is computed once,
    // at its own size: fused into the larger kernel it would be recomputed
    // for every element it is broadcast to (sin(x) of a [500] vector inside
    // a [500, 500] kernel: 500 times the work).
    for e in &g.eqns {
        if let Some(Prim::Broadcast { shape }) = e.as_prim() {
            let mut v = e.inputs[0];
            while let Some(i) = def[v].filter(|&i| kinds[i] == Kind::Movement) {
                v = g.eqns[i].inputs[0];
            }
            let expands = nx::shape::numel(shape) > g.aval(v).numel();
            if expands && def[v].is_some_and(|i| kinds[i] == Kind::Elementwise) {
                buffers.insert(v);
            }
        }
    }
    for (i, e) in g.eqns.iter().enumerate() {
        if kinds[i] == Kind::Reduce {
            buffers.insert(e.out());
        }
        if kinds[i] == Kind::Shifted {
            // Masked loads read buffers (through views), never expressions.
            for &x in &e.inputs {
                let mut v = x;
                while let Some(d) = def[v].filter(|&d| kinds[d] == Kind::Movement) {
                    v = g.eqns[d].inputs[0];
                }
                if def[v].is_some() {
                    buffers.insert(v);
                }
            }
        }
        if kinds[i] == Kind::Library {
            buffers.extend(e.outs.iter().copied());
            for &i in &e.inputs {
                library_input(i, g, &def, &kinds, &mut buffers, &mut views);
            }
        }
    }

    // Values shared by several kernels become buffers (one reverse pass),
    // then kernels are built; a reshape no layout expresses makes its input
    // a buffer and the two are redone (rare).
    loop {
        buffers.extend(shared_values(g, &buffers, &kinds));
        let mut kernels: Vec<(Var, Kernel, Vec<Var>, Vec<usize>)> = Vec::new();
        let mut need = None;
        let mut work: Vec<Var> = buffers.iter().rev().collect();
        while let Some(root) = work.pop() {
            match kind_of(root) {
                None | Some(Kind::Library) => continue,
                _ => {}
            }
            let mut b = Builder {
                g,
                def: &def,
                kinds: &kinds,
                buffers: &buffers,
                root,
                nodes: Vec::new(),
                args: Vec::new(),
                memo: Vec::new(),
                depth: 0,
                spilled: Vec::new(),
                fused: Vec::new(),
            };
            let result = b.expr(root, &[]);
            let spilled = std::mem::take(&mut b.spilled);
            match result {
                Ok(r) => {
                    let arg_dtypes = b.args.iter().map(|&a| g.aval(a).dtype).collect();
                    kernels.push((
                        root,
                        Kernel {
                            shape: iteration_shape(g, &def, root),
                            out_dtype: g.aval(root).dtype,
                            arg_dtypes,
                            nodes: b.nodes,
                            root: r,
                            fused: Vec::new(),
                            reduce: reduce_of(g, &def, root),
                            block: None,
                            stream: false,
                        },
                        b.args,
                        b.fused,
                    ));
                    for v in spilled {
                        if buffers.insert(v) {
                            work.push(v);
                        }
                    }
                }
                Err(NeedBuffer(v)) => {
                    need = Some(v);
                    break;
                }
            }
        }
        if let Some(v) = need {
            buffers.insert(v);
            continue;
        }
        return plan(g, kernels, &views, &kinds, epilogues, stream_min_bytes);
    }
}

/// The shape a kernel iterates over: its root's, or for a reduction the
/// input's with the reduced axes last.
fn iteration_shape(g: &Graph, def: &[Option<usize>], root: Var) -> Vec<usize> {
    let e = def[root].map(|e| &g.eqns[e]);
    match e.and_then(Eqn::as_prim) {
        Some(Prim::Reduce { axes, .. }) => {
            let x = &g.aval(e.unwrap().inputs[0]).shape;
            let mut s: Vec<usize> = (0..x.len())
                .filter(|a| !axes.contains(a))
                .map(|a| x[a])
                .collect();
            s.extend(axes.iter().map(|&a| x[a]));
            s
        }
        _ => g.aval(root).shape.clone(),
    }
}

fn reduce_of(g: &Graph, def: &[Option<usize>], root: Var) -> Option<(ReduceOp, usize)> {
    let e = def[root].map(|e| &g.eqns[e])?;
    match e.as_prim()? {
        Prim::Reduce { op, axes } => Some((*op, g.aval(e.inputs[0]).shape.len() - axes.len())),
        _ => None,
    }
}

/// Values that would be computed by more than one kernel: each becomes a
/// buffer, computed once. One pass in reverse program order: a value's
/// kernel is its consumers' kernel when they agree. Cheap values are
/// recomputed by each kernel instead: constants and views of constants or
/// buffers (index arithmetic only), and up to [`RECOMPUTE_MAX`] light
/// elementwise operations over those. A relu's pre-activation `x @ w + b`
/// and its mask `(x @ w + b) <= 0`, read by the forward pass and again by
/// the backward pass, are then recomputed from the product's output rather
/// than each written to a buffer by kernels of their own (W4: two passes
/// over `[128, 512]` fewer per layer).
fn shared_values(g: &Graph, buffers: &VarSet, kinds: &[Kind]) -> Vec<Var> {
    const NONE: usize = usize::MAX;
    const MANY: usize = usize::MAX - 1;
    let n = g.avals.len();
    // What recomputing each value costs: light elementwise operations, and
    // buffers as large as the value it loads (`None`: not cheap). A
    // buffer, a constant or a view of them costs no operation.
    let mut cost: Vec<Option<(usize, usize)>> = vec![None; n];
    for (i, e) in g.eqns.iter().enumerate() {
        if kinds[i] == Kind::Library {
            continue; // its outputs are buffers; `cost` stays `None`
        }
        let size = g.aval(e.out()).numel();
        let of = |v: Var| {
            if buffers.contains(&v) {
                Some((0, usize::from(g.aval(v).numel() >= size)))
            } else {
                cost[v]
            }
        };
        cost[e.out()] = match kinds[i] {
            Kind::Fill => Some((0, 0)),
            Kind::Movement => of(e.inputs[0]),
            Kind::Elementwise if light(prim_of(e)) => e
                .inputs
                .iter()
                .try_fold((1, 0), |(ops, big), &v| {
                    let (o, b) = of(v)?;
                    Some((ops + o, big + b))
                })
                // Recomputed from one large buffer at most: from two, each
                // consumer would read more than the one buffer it replaces.
                .filter(|&(ops, big)| ops <= RECOMPUTE_MAX && big <= 1),
            _ => None,
        };
    }
    let cheap: Vec<bool> = cost.iter().map(Option::is_some).collect();
    // `group[v]`: the kernel computing `v`; `consumers[v]`: the kernel its
    // consumers (all seen before `v` in this reverse pass) agree on.
    let mut group = vec![NONE; n];
    let mut consumers = vec![NONE; n];
    let mut shared = Vec::new();
    for (ei, e) in g.eqns.iter().enumerate().rev() {
        if kinds[ei] == Kind::Library {
            for &o in &e.outs {
                group[o] = o;
            }
            continue; // a library input is a buffer or an eager view already
        }
        let v = e.out();
        if buffers.contains(&v) {
            group[v] = v;
        } else if consumers[v] == MANY && !cheap[v] {
            shared.push(v);
            group[v] = v;
        } else {
            group[v] = consumers[v];
        }
        let mine = group[v];
        for &u in &e.inputs {
            consumers[u] = match (consumers[u], mine) {
                (m, NONE) => m,
                (NONE, x) => x,
                (m, x) if m == x => m,
                _ => MANY,
            };
        }
    }
    shared
}

/// Most light elementwise operations a value shared by several kernels may
/// take to be recomputed by each rather than computed once into a buffer.
const RECOMPUTE_MAX: usize = 3;

/// Elementwise primitives cheaper to recompute than to store and load:
/// a single instruction or two per element.
fn light(prim: &Prim) -> bool {
    match prim {
        Prim::Binary(op) => matches!(
            op,
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Max | BinaryOp::Min
        ),
        Prim::Unary(op) => matches!(op, UnaryOp::Neg | UnaryOp::Abs),
        Prim::Compare(_) | Prim::Where | Prim::Copy | Prim::StopGradient => true,
        _ => false,
    }
}

/// Whether [`crate::compile()`] makes kernels epilogues of products: off
/// unless `TOLK_EPILOGUE=1` (part of the cache key). Off by default because
/// on the 2-core machine it measured no faster: W4's step 0.6% and W9's
/// 2% slower, a single 128x784x512 layer with bias and relu 0-1% slower
/// (its column bands' epilogue per band: 2-5% slower), an SGD update after a
/// 784x128x512 product 0-2% faster, at batch 1024-2048 within 2% either way
/// (each alternately in one process, `examples/bench_epilogue.rs`). The
/// elementwise passes it removes read data that is still in the 2 MiB L2
/// either way, so fusing saves little, while it costs per-call bookkeeping.
pub fn epilogues_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("TOLK_EPILOGUE").is_ok_and(|v| v == "1"))
}

/// A step before kernels are deduplicated.
enum Pre {
    Kernel {
        kernel: Kernel,
        out: Var,
        args: Vec<Var>,
        epilogue: bool,
        /// The equations fused in (`Builder::fused`).
        fused: Vec<usize>,
    },
    Library(usize),
}

/// Marks the maps that write a program output in a pass moving at least
/// `min` bytes (the output and every argument) as [`Kernel::stream`].
fn mark_streams(g: &Graph, pre: &mut [Pre], min: usize) {
    let bytes = |v: Var| g.aval(v).numel() * g.aval(v).dtype.size_in_bytes();
    let outputs: HashSet<Var> = g.outputs.iter().copied().collect();
    for step in pre {
        if let Pre::Kernel {
            kernel,
            out,
            args,
            epilogue: false,
            ..
        } = step
        {
            let moved = bytes(*out) + args.iter().map(|&a| bytes(a)).sum::<usize>();
            kernel.stream = kernel.reduce.is_none() && outputs.contains(out) && moved >= min;
        }
    }
}

/// How many leading dims of a `dot_general`'s output form the rows of its
/// `[batch * M, N]` matrix (the batch and lhs free dims).
fn product_split(g: &Graph, e: &Eqn) -> usize {
    let Some(Prim::DotGeneral { lhs_contract, .. }) = e.as_prim() else {
        unreachable!("not a product")
    };
    g.aval(e.inputs[0]).shape.len() - lhs_contract.len()
}

/// `layout`'s strides over `shape` seen as `[rows-dims | cols-dims]` split at
/// `split`, each group merged into one stride (size-1 dims ignored), if both
/// groups merge.
pub(crate) fn strides_2d(layout: &Layout, split: usize) -> Option<(isize, isize)> {
    let merge = |r: std::ops::Range<usize>| -> Option<isize> {
        let mut inner: Option<(usize, isize)> = None;
        for d in r.filter(|&d| layout.shape[d] != 1) {
            let (n, st) = (layout.shape[d], layout.strides[d]);
            if let Some((_, pst)) = inner {
                if pst != st * n as isize {
                    return None;
                }
            }
            inner = Some((n, st));
        }
        Some(inner.map_or(0, |(_, st)| st))
    };
    Some((merge(0..split)?, merge(split..layout.shape.len())?))
}

/// Whether kernel `k` can run as an epilogue of product `dot`, reading the
/// buffers in `members` (the product's output and its earlier epilogues'
/// outputs) only at the element it writes: an elementwise kernel over the
/// product's shape whose every load merges into a `[rows, cols]` matrix.
fn epilogue_fits(g: &Graph, dot: &Eqn, k: &Kernel, args: &[Var], members: &[Var]) -> bool {
    let shape = &g.aval(dot.out()).shape;
    if k.reduce.is_some() || &k.shape != shape {
        return false;
    }
    let split = product_split(g, dot);
    let rows: usize = shape[..split].iter().product();
    let cols: usize = shape[split..].iter().product();
    k.nodes.iter().all(|n| match n {
        Node::Load { mask: Some(_), .. } => false,
        Node::Load { arg, layout, .. } => match strides_2d(layout, split) {
            None => false,
            Some((sr, sc)) => {
                !members.contains(&args[*arg])
                    || (layout.offset == 0
                        && (rows <= 1 || sr == cols as isize)
                        && (cols <= 1 || sc == 1))
            }
        },
        Node::Iota { layout, .. } | Node::Coord { layout, .. } => {
            strides_2d(layout, split).is_some()
        }
        _ => true,
    })
}

/// Turns kernels into epilogues of products (see [`Step::Epilogue`]) and
/// moves them right after their product: a kernel that reads a product's
/// output (or an output of that product's epilogues) at the element it
/// writes runs on each block of the product while the block is in cache,
/// instead of as a pass of its own over the whole output. It attaches to
/// the latest product it reads whose group it fits, when everything else it
/// reads is computed before that product.
fn epilogues(g: &Graph, pre: Vec<Pre>) -> Vec<Pre> {
    // Where each value is computed: its step's position in `pre` (an
    // epilogue's is its product's).
    let mut pos: HashMap<Var, usize> = HashMap::default();
    // Per product step: its equation and the values of its group.
    let mut groups: Vec<(usize, usize, Vec<Var>)> = Vec::new();
    // Per value in a group: that group (a scan over the groups per kernel
    // was quadratic: 20 ms of W9's schedule at T = 1000).
    let mut group_of: HashMap<Var, usize> = HashMap::default();
    // Per step: the product step (and its equation) it runs after.
    let mut attach: Vec<Option<(usize, usize)>> = vec![None; pre.len()];
    for (i, step) in pre.iter().enumerate() {
        match step {
            Pre::Library(eqn) => {
                let e = &g.eqns[*eqn];
                for &o in &e.outs {
                    pos.insert(o, i);
                }
                if matches!(e.as_prim(), Some(Prim::DotGeneral { .. })) {
                    group_of.insert(e.out(), groups.len());
                    groups.push((i, *eqn, vec![e.out()]));
                }
            }
            Pre::Kernel {
                kernel, out, args, ..
            } => {
                pos.insert(*out, i);
                // The latest group it reads.
                let Some(gi) = args.iter().filter_map(|a| group_of.get(a).copied()).max() else {
                    continue;
                };
                let (at, eqn, members) = &groups[gi];
                let ready = args
                    .iter()
                    .all(|a| members.contains(a) || pos.get(a).is_none_or(|&p| p < *at));
                // Only the steps right after the product (or after its
                // epilogues): moving a later kernel up made W4 1-3% slower
                // (an SGD update run early evicts the next product's operands).
                let consecutive = (*at + 1..i).all(|j| attach[j].is_some_and(|(a, _)| a == *at));
                if ready && consecutive && epilogue_fits(g, &g.eqns[*eqn], kernel, args, members) {
                    attach[i] = Some((*at, *eqn));
                    pos.insert(*out, *at);
                    group_of.insert(*out, gi);
                    groups[gi].2.push(*out);
                }
            }
        }
    }
    // Each product's epilogues right after it, in their original order.
    let mut after: HashMap<usize, Vec<Pre>> = HashMap::default();
    let mut rest: Vec<(usize, Pre)> = Vec::new();
    for (i, (step, a)) in pre.into_iter().zip(&attach).enumerate() {
        match (step, a) {
            (
                Pre::Kernel {
                    mut kernel,
                    out,
                    args,
                    fused,
                    ..
                },
                Some((at, eqn)),
            ) => {
                kernel.block = Some(product_split(g, &g.eqns[*eqn]));
                after.entry(*at).or_default().push(Pre::Kernel {
                    kernel,
                    out,
                    args,
                    epilogue: true,
                    fused,
                });
            }
            (step, _) => rest.push((i, step)),
        }
    }
    let mut out = Vec::new();
    for (i, step) in rest {
        out.push(step);
        out.extend(after.remove(&i).unwrap_or_default());
    }
    out
}

/// Orders the steps (graph order, epilogues right after their product),
/// deduplicates kernels by structure and computes when each buffer dies.
fn plan(
    g: &Graph,
    kernels: Vec<(Var, Kernel, Vec<Var>, Vec<usize>)>,
    views: &VarSet,
    kinds: &[Kind],
    with_epilogues: bool,
    stream_min_bytes: Option<usize>,
) -> Schedule {
    let mut by_root: HashMap<Var, (Kernel, Vec<Var>, Vec<usize>)> = kernels
        .into_iter()
        .map(|(v, k, a, f)| (v, (k, a, f)))
        .collect();
    let mut pre = Vec::new();
    for (i, e) in g.eqns.iter().enumerate() {
        if kinds[i] == Kind::Library {
            pre.push(Pre::Library(i));
        } else if let Some((kernel, args, fused)) = by_root.remove(&e.out()) {
            pre.push(Pre::Kernel {
                kernel,
                out: e.out(),
                args,
                epilogue: false,
                fused,
            });
        } else if views.contains(&e.out()) {
            pre.push(Pre::Library(i));
        }
    }
    let mut pre = if with_epilogues {
        epilogues(g, pre)
    } else {
        pre
    };
    if let Some(min) = stream_min_bytes {
        mark_streams(g, &mut pre, min);
    }
    let mut distinct: Vec<Kernel> = Vec::new();
    // Per distinct kernel, the equations its first instance fused.
    let mut first_fused: Vec<Vec<usize>> = Vec::new();
    let mut steps = Vec::new();
    for step in pre {
        match step {
            Pre::Kernel {
                kernel: k,
                out,
                args,
                epilogue,
                fused,
            } => {
                let kernel = match distinct.iter().position(|d| *d == k) {
                    Some(d) => d,
                    None => {
                        distinct.push(k);
                        first_fused.push(fused);
                        distinct.len() - 1
                    }
                };
                steps.push(if epilogue {
                    Step::Epilogue { kernel, out, args }
                } else {
                    Step::Kernel { kernel, out, args }
                });
            }
            Pre::Library(eqn) => steps.push(Step::Library { eqn }),
        }
    }
    for (k, fused) in distinct.iter_mut().zip(first_fused) {
        k.fused = fused.iter().map(|&e| g.eqns[e].name()).collect();
    }
    // Last use of every buffer.
    let mut last: Vec<Option<usize>> = vec![None; g.avals.len()];
    for (s, step) in steps.iter().enumerate() {
        let reads: &[Var] = match step {
            Step::Kernel { args, .. } | Step::Epilogue { args, .. } => args,
            Step::Library { eqn } => &g.eqns[*eqn].inputs,
        };
        for &v in reads {
            last[v] = Some(s);
        }
    }
    let mut keep = vec![false; g.avals.len()];
    for &v in g
        .inputs
        .iter()
        .chain(g.consts.iter().map(|(v, _)| v))
        .chain(g.outputs.iter())
        .chain(g.writebacks.iter().map(|(_, v)| v))
    {
        keep[v] = true;
    }
    // In variable order, so each step's list is sorted.
    let mut frees = vec![Vec::new(); steps.len()];
    for (v, s) in last.iter().enumerate() {
        if let (Some(s), false) = (s, keep[v]) {
            frees[*s].push(v);
        }
    }
    Schedule {
        kernels: distinct,
        steps,
        frees,
    }
}

#[cfg(test)]
mod tests {
    use super::cache_size;

    /// sysfs writes cache sizes with a `K` suffix (some kernels `M`).
    #[test]
    fn cache_sizes_read_as_sysfs_writes_them() {
        assert_eq!(cache_size("32768K\n"), Some(32 << 20));
        assert_eq!(cache_size("2M"), Some(2 << 20));
        assert_eq!(cache_size("512"), Some(512));
        assert_eq!(cache_size(""), None);
        assert_eq!(cache_size("K"), None);
        assert_eq!(cache_size("lots"), None);
    }
}
