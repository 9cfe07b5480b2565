//! Fusion: decides which values become buffers and groups the rest into
//! fused kernels.
//!
//! Elementwise primitives and views fuse into the kernel of the buffer that
//! consumes them. Views are pushed down to the buffers they read (they
//! commute with elementwise ops), so each load of a kernel reads a buffer
//! through one strided `Layout`: index arithmetic, never a copy. `pad` and
//! `concat` are masked loads. A reduction of computed values is a kernel
//! with its input's expression fused in. Everything else is a library step
//! run by nx's eager kernel (`dot_general` is the GEMM crate split across
//! threads, as in eager mode); a view feeding a library step is an eager
//! view step.
//!
//! A value becomes a buffer when it is an output or a writeback, feeds a
//! library step, is used by more than one kernel (computed once, not per
//! consumer, unless recomputing it is cheaper), is broadcast to a larger
//! shape, or sits under a reshape that no strided layout expresses.

use crate::graph::{Eqn, Graph, Var};
use nx::{BinaryOp, CmpOp, DType, Layout, Prim, PrimClass, ReduceOp, UnaryOp};

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
    /// Element of kernel argument `arg` picked by an index: at `layout`'s
    /// address plus the index node's value (negative ones count from the
    /// end of the axis) times `axis_stride`, as [`Prim::Gather`]. The
    /// runtime checks every index before any kernel runs
    /// (`runtime::IndexCheck`), so the address is always in the buffer.
    Gather {
        /// Index into the kernel's argument buffers.
        arg: usize,
        /// Where each iteration point's element lies with index 0 (the
        /// data's layout with its stride along the gathered axis zeroed).
        layout: Layout,
        /// The integer node holding the index.
        index: usize,
        /// The gathered axis's size (what a negative index counts back from).
        axis_len: usize,
        /// The data's stride along the gathered axis, in elements.
        axis_stride: isize,
        /// The data buffer's elements (every address lies below it).
        buffer_len: usize,
    },
    /// A scatter kernel's root, as [`Prim::ScatterAdd`]: `value` added into
    /// the output at `layout`'s address plus the index node's value
    /// (negative ones count from the end) times `axis_stride`. The kernel
    /// first sets its output to `init`, then adds at every point in
    /// row-major order, as the eager kernel does (the same bits); it is
    /// never split across threads. Indices are checked as a gather's.
    Scatter {
        /// Where each iteration point adds with index 0 (the output's
        /// contiguous strides over the updates' shape, 0 along the axis).
        layout: Layout,
        /// The integer node holding the index.
        index: usize,
        /// The node holding the value added.
        value: usize,
        /// The scattered axis's size.
        axis_len: usize,
        /// The output's stride along the scattered axis, in elements.
        axis_stride: isize,
        /// The scattered axis (of the updates' shape).
        axis: usize,
        /// The output's shape (the kernel's shape is the updates').
        out_shape: Vec<usize>,
        /// What the output holds before the updates are added.
        init: ScatterInit,
        /// For a kernel split across threads (`Kernel::split_scatter`):
        /// the output's elements in the kernel's loop order (its first dim
        /// the kernel's), which each part sets for its own range before
        /// adding into them. `None`: one part sets the whole output.
        init_layout: Option<Layout>,
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

/// The initial value of a scatter kernel's output ([`Node::Scatter`]).
#[derive(Clone, Debug, PartialEq)]
pub enum ScatterInit {
    /// Kernel argument `arg`: a contiguous buffer of the output's shape.
    Arg(usize),
    /// A constant (an `f64`'s bits, as [`Node::Lit`]): zeros, mostly, in
    /// the transpose of a gather.
    Lit(u64),
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

/// A fused loop nest over `shape`, writing contiguous buffers: one for a
/// reduction, one or more for a map (a multi-output map: see `merge_maps`).
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    /// The iteration space (for a reduction: kept dims, then reduced ones).
    pub shape: Vec<usize>,
    /// The dtypes of the buffers it writes, one per root.
    pub out_dtypes: Vec<DType>,
    /// Argument buffers: dtype of each.
    pub arg_dtypes: Vec<DType>,
    /// The body, in topological order.
    pub nodes: Vec<Node>,
    /// The nodes whose values are stored, one per output buffer.
    pub roots: Vec<usize>,
    /// The graph primitives fused into it, for debug output: those of the
    /// first of the identical kernels it stands for (empty until
    /// deduplicated, so that identical kernels compare equal).
    pub fused: Vec<String>,
    /// A reduction kernel: the last `shape.len() - kept` dims of `shape`
    /// are reduced with `op`; the output is contiguous over the first `kept`.
    pub reduce: Option<(ReduceOp, usize)>,
    /// The output goes to memory past the cache: a one-output map writing a
    /// program output in a pass that moves at least
    /// [`stream_min_bytes`](crate::plan::stream_min_bytes) (decided by the
    /// plan); rendered so when it lowers to one loop. The values are the same.
    pub stream: bool,
}

impl Node {
    /// The layout through which it addresses (a load's, gather's or
    /// scatter's buffer, an iota's coordinates), if it has one.
    pub fn layout(&self) -> Option<&Layout> {
        match self {
            Node::Load { layout, .. }
            | Node::Gather { layout, .. }
            | Node::Scatter { layout, .. }
            | Node::Iota { layout, .. }
            | Node::Coord { layout, .. } => Some(layout),
            _ => None,
        }
    }

    /// About what computing this node costs per point, in elementwise
    /// additions: transcendentals 16, divisions and roots 4, loads and
    /// constants nothing ([`Kernel::weight`]; the renderer's choice of two
    /// lanes counts the nodes of cost 4 and more).
    pub fn cost(&self) -> usize {
        match self {
            Node::Unary { op, .. } => match op {
                UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Sign => 1,
                UnaryOp::Sqrt | UnaryOp::Rsqrt | UnaryOp::Recip => 4,
                _ => 16,
            },
            Node::Binary { op, .. } => match op {
                BinaryOp::Div | BinaryOp::Rem => 4,
                BinaryOp::Pow | BinaryOp::Atan2 => 16,
                _ => 1,
            },
            Node::Compare { .. }
            | Node::Where { .. }
            | Node::Cast { .. }
            | Node::Gather { .. }
            | Node::Scatter { .. } => 1,
            Node::Load { .. } | Node::Lit { .. } | Node::Iota { .. } | Node::Coord { .. } => 0,
        }
    }
}

impl Kernel {
    /// About how much work one iteration point costs, in elementwise
    /// additions (at least 1): transcendentals count 16, divisions and
    /// roots 4. The runtime splits a kernel across threads by its points
    /// times this, so that a long chain of `sin`/`tanh` over a short vector
    /// runs on every core while a few additions over the same vector stay
    /// on one.
    ///
    /// A scatter kernel weighs 0: it is never split (the updates to one
    /// element are added in order, by one thread).
    pub fn weight(&self) -> usize {
        if let Some(Node::Scatter {
            init_layout: None, ..
        }) = self.scatter()
        {
            return 0;
        }
        let cost: usize = self.nodes.iter().map(Node::cost).sum();
        (cost / 8).max(1)
    }

    /// Shape of the buffers it writes (a map's all have the kernel's shape).
    pub fn out_shape(&self) -> &[usize] {
        match (self.reduce, self.scatter()) {
            (Some((_, kept)), _) => &self.shape[..kept],
            (None, Some(Node::Scatter { out_shape, .. })) => out_shape,
            _ => &self.shape,
        }
    }

    /// Its root when it is a scatter kernel ([`Node::Scatter`]).
    pub fn scatter(&self) -> Option<&Node> {
        let root = &self.nodes[*self.roots.first()?];
        matches!(root, Node::Scatter { .. }).then_some(root)
    }

    /// A scatter kernel whose updates' last dim is not the scattered axis
    /// and holds at least two blocks of `block` elements is reordered to
    /// loop over those blocks outermost (`[blocks, the other dims in
    /// order, block]`): parts of its outer loop then add into disjoint
    /// elements, so the runtime splits it across threads, and each
    /// element's updates still add in row-major order (eager's bits).
    fn split_scatter(&mut self, block: usize) {
        let Some(&Node::Scatter {
            axis,
            ref out_shape,
            ..
        }) = self.scatter()
        else {
            return;
        };
        let n = self.shape.len();
        let last = self.shape[n - 1];
        if axis + 1 == n || last % block != 0 || last < 2 * block {
            return;
        }
        let split = |shape: &[usize]| {
            let mut s = shape[..n - 1].to_vec();
            s.extend([last / block, block]);
            s
        };
        let mut perm = vec![n - 1];
        perm.extend(0..n - 1);
        perm.push(n);
        let reorder = |l: &Layout| Some(l.reshape(&split(&l.shape))?.permute(&perm));
        let Some(init) = reorder(&Layout::contiguous(out_shape)) else {
            return;
        };
        let mut nodes = self.nodes.clone();
        for node in &mut nodes {
            if let Node::Load { layout, .. }
            | Node::Gather { layout, .. }
            | Node::Scatter { layout, .. }
            | Node::Iota { layout, .. }
            | Node::Coord { layout, .. } = node
            {
                match reorder(layout) {
                    Some(l) => *layout = l,
                    None => return,
                }
            }
            if let Node::Scatter { init_layout, .. } = node {
                *init_layout = Some(init.clone());
            }
        }
        self.nodes = nodes;
        self.shape = Layout::contiguous(&split(&self.shape)).permute(&perm).shape;
    }

    /// Whether it is a map: one or more outputs of the kernel's shape, each
    /// element computed at its own point (not a reduction or a scatter).
    pub fn is_map(&self) -> bool {
        self.reduce.is_none() && self.scatter().is_none()
    }
}

/// What fusion decided, for the plan.
pub struct Fusion {
    /// The kernels, one per buffer that one computes.
    pub kernels: Vec<FusedKernel>,
    /// Per equation: whether it runs as a library step (its own eager
    /// kernel, a loop, or an eager view feeding one).
    pub library: Vec<bool>,
    /// Per variable: whether it is a view feeding a library step (run as
    /// an eager view step).
    pub views: Vec<bool>,
}

/// A kernel and where it sits in the graph.
pub struct FusedKernel {
    /// The buffers it writes, in the kernel's output order.
    pub outs: Vec<Var>,
    /// The equation at whose place in program order it runs: its first
    /// output's (for a multi-output map, its earliest member's).
    pub at: usize,
    /// The kernel.
    pub kernel: Kernel,
    /// Its argument buffers, in the kernel's argument order.
    pub args: Vec<Var>,
    /// The equations fused in (for debug output).
    pub eqns: Vec<usize>,
}

/// Elements of a scatter's last dim one part of a split scatter kernel
/// adds into ([`Kernel::split_scatter`]) on a CPU with `threads` threads,
/// for a last dim of `last`: whole cache lines of f32 (16), as many as
/// leave a part per thread, at most four, and dividing `last` (a block
/// that does not is no split at all). A part's loop adds its block at
/// every update, the blocks' vectors independent of each other, so wider
/// blocks overlap more of the scattered loads and stores: W17's
/// segment sums (8192 updates of 64 features) 0.65 -> 0.59 ms per step on
/// 2 threads with blocks of 32 instead of 16.
fn scatter_block(last: usize, threads: usize) -> usize {
    let most = (last / 16 / threads.max(1)).clamp(1, 4);
    (1..=most)
        .rev()
        .map(|lines| 16 * lines)
        .find(|block| last % block == 0)
        .unwrap_or(16)
}

#[cfg(test)]
#[test]
fn scatter_blocks_are_cache_lines_a_part_per_thread_dividing_the_dim() {
    assert_eq!(scatter_block(64, 2), 32);
    assert_eq!(scatter_block(64, 8), 16);
    assert_eq!(scatter_block(1024, 2), 64);
    // 80 = 5 lines: two lines per part would not divide it.
    assert_eq!(scatter_block(80, 2), 16);
    assert_eq!(scatter_block(96, 2), 48);
    assert_eq!(scatter_block(16, 1), 16);
}

/// Full reductions at least this large stay with nx's eager kernel, which
/// splits them across threads (a fused kernel splits over kept dims only).
const FUSED_FULL_REDUCE_MAX: usize = 1 << 16;

/// How each equation of `g` is scheduled: its primitive's class, with
/// eager-only primitives and loops as library steps, and reductions refined.
/// A reduction compiles as a kernel when its input is computed by
/// elementwise work (which then fuses into it); a reduction of a buffer
/// (an input, a matrix product's result) stays with nx's eager kernel,
/// which is as fast, exact with eager, and threaded for full reductions.
///
/// For a `device` (CUDA: no nx eager kernels there) every reduction is a
/// kernel.
fn classes(g: &Graph, def: &[Option<usize>], device: bool) -> Vec<PrimClass> {
    let mut kinds: Vec<PrimClass> = Vec::with_capacity(g.eqns.len());
    for e in &g.eqns {
        let Some(prim) = e.as_prim() else {
            kinds.push(PrimClass::Library); // a loop: a step of its own
            continue;
        };
        let k = match prim {
            Prim::Reduce { axes, .. } => {
                let x = g.aval(e.inputs[0]);
                let full = axes.len() == x.shape.len();
                let mut v = e.inputs[0];
                while let Some(i) = def[v].filter(|&i| kinds[i] == PrimClass::View) {
                    v = g.eqns[i].inputs[0];
                }
                let computed = def[v].is_some_and(|i| {
                    matches!(
                        kinds[i],
                        PrimClass::Elementwise | PrimClass::Shifted | PrimClass::Indexed
                    )
                });
                if device {
                    PrimClass::Reduction
                } else if !computed
                    || x.dtype == DType::Bool
                    || (full && x.numel() >= FUSED_FULL_REDUCE_MAX)
                {
                    PrimClass::Library
                } else {
                    PrimClass::Reduction
                }
            }
            Prim::Gather { .. } | Prim::ScatterAdd { .. } => {
                // Compiled when its indices are a program input or constant
                // (seen through views), which the runtime checks before any
                // kernel runs; indices computed by the program could only
                // be checked by the kernel that reads them.
                let mut v = e.inputs[1];
                while let Some(i) = def[v].filter(|&i| kinds[i] == PrimClass::View) {
                    v = g.eqns[i].inputs[0];
                }
                if def[v].is_some() {
                    PrimClass::Library
                } else {
                    prim.class()
                }
            }
            p => match p.class() {
                // Refused by jit's staging; a library step if a graph held one.
                PrimClass::EagerOnly => PrimClass::Library,
                PrimClass::InPlace => {
                    unreachable!("assign is staged as a writeback, never an equation")
                }
                c => c,
            },
        };
        kinds.push(k);
    }
    kinds
}

/// The primitive of an equation the scheduler fuses (never a loop: loops
/// are library steps).
fn prim_of(e: &Eqn) -> &Prim {
    e.as_prim()
        .expect("tolk: a loop where a fusible primitive was expected")
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
    kinds: &'g [PrimClass],
    buffers: &'g VarSet,
    /// The buffers this kernel computes (several for a merged map).
    roots: &'g [Var],
    /// Whether a value may be left to a kernel of its own when this one
    /// grows too big (not when rebuilding merged maps, which fit by
    /// construction).
    may_spill: bool,
    nodes: Vec<Node>,
    args: Vec<Var>,
    /// Nodes already built: (value, movement chain) and its node. A kernel
    /// has at most [`MAX_NODES`] nodes (a merged map [`MERGED_MAX_NODES`]),
    /// so a list is quick enough, and quicker than a map whose lookups
    /// would allocate the key.
    memo: Vec<(Var, Vec<usize>, usize)>,
    /// Nesting of elementwise nodes above the current one.
    depth: usize,
    /// Values this kernel loads because it grew too big to compute them.
    spilled: Vec<Var>,
    /// The equations fused in (named only once per distinct kernel).
    fused: Vec<usize>,
}

impl<'g> Builder<'g> {
    fn new(
        g: &'g Graph,
        def: &'g [Option<usize>],
        kinds: &'g [PrimClass],
        buffers: &'g VarSet,
        roots: &'g [Var],
        may_spill: bool,
    ) -> Self {
        Builder {
            g,
            def,
            kinds,
            buffers,
            roots,
            may_spill,
            nodes: Vec::new(),
            args: Vec::new(),
            memo: Vec::new(),
            depth: 0,
            spilled: Vec::new(),
            fused: Vec::new(),
        }
    }

    /// The kernel built, storing each `(value, node)` of `outs` into the
    /// value's buffer, run at equation `at`'s place.
    fn finish(self, outs: Vec<(Var, usize)>, at: usize) -> FusedKernel {
        let (g, def) = (self.g, self.def);
        let root = outs[0].0;
        let kernel = Kernel {
            shape: iteration_shape(g, def, root),
            out_dtypes: outs.iter().map(|&(v, _)| g.aval(v).dtype).collect(),
            arg_dtypes: self.args.iter().map(|&a| g.aval(a).dtype).collect(),
            nodes: self.nodes,
            roots: outs.iter().map(|&(_, n)| n).collect(),
            fused: Vec::new(),
            reduce: reduce_of(g, def, root),
            stream: false,
        };
        FusedKernel {
            outs: outs.iter().map(|&(v, _)| v).collect(),
            at,
            kernel,
            args: self.args,
            eqns: self.fused,
        }
    }

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
            layout = prim_of(e).view_layout(&layout).ok_or(NeedBuffer(below))?;
            below = e.out();
        }
        Ok(layout)
    }

    /// `start` with `chain` applied; `None` when a reshape cannot express it.
    fn through_from(&self, start: Layout, chain: &[usize]) -> Option<Layout> {
        chain
            .iter()
            .try_fold(start, |l, &m| prim_of(&self.g.eqns[m]).view_layout(&l))
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
        // Coordinates as i32 where they fit: gcc vectorizes the masked
        // loads of a loop over f32 only when the masks come from 32-bit
        // compares (from i64 ones the loop stays scalar).
        let fits = out_shape.iter().all(|&n| i32::try_from(n).is_ok());
        let cdt = if fits { DType::I32 } else { DType::I64 };
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
            let c = self.push(Node::Coord { layout, dtype: cdt });
            let bound = |b: &mut Self, v: usize| {
                b.push(Node::Lit {
                    dtype: cdt,
                    bits: (v as f64).to_bits(),
                })
            };
            let (low, high) = (bound(self, lo[d]), bound(self, lo[d] + in_shape[d]));
            let above = self.push(Node::Compare {
                op: CmpOp::Ge,
                dtype: cdt,
                a: c,
                b: low,
            });
            let below = self.push(Node::Compare {
                op: CmpOp::Lt,
                dtype: cdt,
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
        let (base, seen) = self.buffer_view(x)?;
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
        let arg = self.arg(base);
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

    /// `x` as a view of a buffer: the buffer and the layout through which
    /// `x` sees it. `Err` names the value that must become a buffer first
    /// (a computed value, or a merged map's own output read elsewhere than
    /// at its own element).
    fn buffer_view(&self, x: Var) -> Result<(Var, Layout), NeedBuffer> {
        let mut views = Vec::new();
        let mut base = x;
        while !self.buffers.contains(&base) {
            match self.def[base] {
                Some(i) if self.kinds[i] == PrimClass::View => {
                    views.push(i);
                    base = self.g.eqns[i].inputs[0];
                }
                Some(_) => return Err(NeedBuffer(base)),
                None => break, // an input or constant: a buffer
            }
        }
        views.reverse();
        if self.roots.len() > 1 && self.roots.contains(&base) {
            return Err(NeedBuffer(base)); // a merged map's own output, moved
        }
        Ok((base, self.through(base, &views)?))
    }

    /// The kernel argument reading buffer `v` (added on first use).
    fn arg(&mut self, v: Var) -> usize {
        match self.args.iter().position(|&a| a == v) {
            Some(a) => a,
            None => {
                self.args.push(v);
                self.args.len() - 1
            }
        }
    }

    /// A gather of `x` (a buffer or a view of one) by `idx` along `axis`,
    /// the element of `var` seen through `chain`: the data's layout with
    /// the axis's stride moved into the index term, and the index's own
    /// expression at the same point.
    fn gather(
        &mut self,
        x: Var,
        idx: Var,
        axis: usize,
        var: Var,
        chain: &[usize],
    ) -> Result<usize, NeedBuffer> {
        let (base, seen) = self.buffer_view(x)?;
        let axis_stride = seen.strides[axis];
        let mut strides = seen.strides;
        strides[axis] = 0;
        let at_zero = Layout {
            shape: self.g.aval(var).shape.clone(),
            strides,
            offset: seen.offset,
        };
        let layout = self.through_from(at_zero, chain).ok_or(NeedBuffer(var))?;
        self.depth += 1;
        let index = self.expr(idx, chain)?;
        self.depth -= 1;
        let arg = self.arg(base);
        Ok(self.push(Node::Gather {
            arg,
            layout,
            index,
            axis_len: seen.shape[axis],
            axis_stride,
            buffer_len: self.g.aval(base).numel(),
        }))
    }

    /// The root of a scatter kernel computing `var`, `x` with `updates`
    /// added at `idx` along `axis`; the kernel iterates over the updates'
    /// shape.
    fn scatter(
        &mut self,
        x: Var,
        idx: Var,
        updates: Var,
        axis: usize,
        var: Var,
    ) -> Result<usize, NeedBuffer> {
        let out_shape = self.g.aval(var).shape.clone();
        let init = match fill_value(self.g, self.def, self.kinds, x) {
            Some(bits) => ScatterInit::Lit(bits),
            None => ScatterInit::Arg(self.arg(x)),
        };
        self.depth += 1;
        let value = self.expr(updates, &[])?;
        let index = self.expr(idx, &[])?;
        self.depth -= 1;
        let strides = nx::shape::contiguous_strides(&out_shape);
        let axis_stride = strides[axis];
        let mut at_zero = strides;
        at_zero[axis] = 0;
        Ok(self.push(Node::Scatter {
            layout: Layout {
                shape: self.g.aval(idx).shape.clone(),
                strides: at_zero,
                offset: 0,
            },
            index,
            value,
            axis_len: out_shape[axis],
            axis_stride,
            axis,
            out_shape,
            init,
            init_layout: None,
        }))
    }

    /// The node computing `var` seen through `chain` (movement equations
    /// applied after `var`, innermost first).
    fn expr(&mut self, var: Var, chain: &[usize]) -> Result<usize, NeedBuffer> {
        if let Some(&(_, _, n)) = self.memo.iter().find(|(v, c, _)| *v == var && c == chain) {
            return Ok(n);
        }
        let eqn = self.def[var].map(|e| &self.g.eqns[e]);
        if !chain.is_empty() && self.roots.len() > 1 && self.roots.contains(&var) {
            // A merged map reads another of its own outputs only at the
            // element it is computing (`merge_maps` checks), which the
            // chain may reach through movement ops that change nothing.
            let own = Layout::contiguous(&self.g.aval(var).shape);
            return match self.through(var, chain) {
                Ok(l) if l == own => self.expr(var, &[]),
                _ => Err(NeedBuffer(var)),
            };
        }
        let is_root_call = chain.is_empty() && self.roots.contains(&var);
        // A kernel stops growing past a size (a long sum of terms, such as a
        // gradient accumulated over a scan's steps, would otherwise become
        // one kernel reading every term): the value is computed by a kernel
        // of its own, and identical pieces compile once.
        let too_big = self.depth >= MAX_DEPTH || self.nodes.len() >= MAX_NODES;
        if !is_root_call
            && self.may_spill
            && too_big
            && self.def[var].is_some_and(|i| self.kinds[i] == PrimClass::Elementwise)
            && !self.buffers.contains(&var)
        {
            self.spilled.push(var);
        }
        let computed = |b: &Self| !b.buffers.contains(&var) && !b.spilled.contains(&var);
        let node = match eqn {
            Some(e)
                if computed(self)
                    || (is_root_call
                        && self.kinds[self.def[var].unwrap()] != PrimClass::Library) =>
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
                            | Node::Gather { layout, .. }
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
                    Prim::Gather { axis } => {
                        let (x, idx) = (e.inputs[0], e.inputs[1]);
                        self.gather(x, idx, *axis, var, chain)?
                    }
                    Prim::ScatterAdd { axis } => {
                        debug_assert!(is_root_call, "a scatter is a buffer");
                        self.scatter(e.inputs[0], e.inputs[1], e.inputs[2], *axis, var)?
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
                    p if p.class() == PrimClass::View => {
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
                let arg = self.arg(var);
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

/// Decides which values are buffers and builds the kernel computing each
/// buffer that is not an input, a constant or a library step's result.
pub fn fuse(g: &Graph) -> Fusion {
    fuse_with(g, false)
}

/// [`fuse`] for the CPU (`device` false) or a device (CUDA): there every
/// reduction is a kernel (a library step cannot run one) and a split
/// scatter gives each thread one element of the updates' last dim.
pub fn fuse_with(g: &Graph, device: bool) -> Fusion {
    let mut def = vec![None; g.avals.len()];
    for (i, e) in g.eqns.iter().enumerate() {
        for &o in &e.outs {
            def[o] = Some(i);
        }
    }
    let kinds = classes(g, &def, device);
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
        kinds: &[PrimClass],
        buffers: &mut VarSet,
        views: &mut VarSet,
    ) {
        match def[v].map(|e| (e, kinds[e])) {
            Some((e, PrimClass::View)) => {
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
            while let Some(i) = def[v].filter(|&i| kinds[i] == PrimClass::View) {
                v = g.eqns[i].inputs[0];
            }
            let expands = nx::shape::numel(shape) > g.aval(v).numel();
            if expands && def[v].is_some_and(|i| kinds[i] == PrimClass::Elementwise) {
                buffers.insert(v);
            }
        }
    }
    for (i, e) in g.eqns.iter().enumerate() {
        if kinds[i] == PrimClass::Reduction {
            buffers.insert(e.out());
        }
        if kinds[i] == PrimClass::Scatter {
            // A kernel of its own, adding into a copy of its first input
            // (a contiguous buffer) unless that is a constant fill.
            buffers.insert(e.out());
            if fill_value(g, &def, &kinds, e.inputs[0]).is_none() {
                buffers.insert(e.inputs[0]);
            }
        }
        if matches!(kinds[i], PrimClass::Shifted | PrimClass::Indexed) {
            // Masked and indexed loads read buffers (through views), never
            // expressions (a gather's indices are inputs: `classes`).
            let data = match kinds[i] {
                PrimClass::Indexed => &e.inputs[..1],
                _ => &e.inputs[..],
            };
            for &x in data {
                let mut v = x;
                while let Some(d) = def[v].filter(|&d| kinds[d] == PrimClass::View) {
                    v = g.eqns[d].inputs[0];
                }
                if def[v].is_some() {
                    buffers.insert(v);
                }
            }
        }
        if kinds[i] == PrimClass::Library {
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
        let mut kernels: Vec<FusedKernel> = Vec::new();
        let mut need = None;
        let mut work: Vec<Var> = buffers.iter().rev().collect();
        while let Some(root) = work.pop() {
            match kind_of(root) {
                None | Some(PrimClass::Library) => continue,
                _ => {}
            }
            let roots = [root];
            let mut b = Builder::new(g, &def, &kinds, &buffers, &roots, true);
            let result = b.expr(root, &[]);
            let spilled = std::mem::take(&mut b.spilled);
            match result {
                Ok(r) => {
                    let at = def[root].expect("a kernel computes an equation's output");
                    kernels.push(b.finish(vec![(root, r)], at));
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
        // A device's threads are many and light: one per element of the
        // updates' last dim (a CPU thread takes cache lines of them).
        for k in &mut kernels {
            let last = k.kernel.shape.last().copied().unwrap_or(1);
            let block = if device {
                1
            } else {
                scatter_block(last, nx::num_threads())
            };
            k.kernel.split_scatter(block);
        }
        let kernels = merge_maps(g, &def, &kinds, kernels, &views);
        // A view some kernel also writes as a buffer (a scatter's first
        // input that a loop reads too) is that buffer, not a second, eager
        // view step: kernels address it by its arena slot, whose lifetime
        // the view step's reads would not extend (seed 1007244).
        for k in &kernels {
            for &v in &k.outs {
                views.0[v] = false;
            }
        }
        return Fusion {
            kernels,
            library: kinds.iter().map(|&k| k == PrimClass::Library).collect(),
            views: views.0,
        };
    }
}

/// Most nodes of a map merged from several ([`merge_maps`]).
const MERGED_MAX_NODES: usize = 1024;

/// Multi-output fusion (XLA's): maps over the same iteration space where
/// one reads another's output at the element it computes become one map
/// that computes both and stores what the rest of the program reads. A
/// chain of elementwise passes over one vector (a forward pass kept for
/// the backward one, an optimizer's moments and parameters) then runs as
/// one loop, not one loop and one buffer per value, and the C compiler
/// sees each value once.
///
/// In program order, a map joins the group of a map whose output it loads
/// (at its own element, never through a view that moves it) when their
/// shapes agree, the merged body stays under [`MERGED_MAX_NODES`], and
/// every other buffer it reads is computed before the group's first member
/// (the merged kernel runs there). Reductions stay kernels of their own.
fn merge_maps(
    g: &Graph,
    def: &[Option<usize>],
    kinds: &[PrimClass],
    kernels: Vec<FusedKernel>,
    views: &VarSet,
) -> Vec<FusedKernel> {
    struct Group {
        members: Vec<usize>,
        /// The earliest member's equation: where the merged kernel runs.
        at: usize,
        nodes: usize,
    }
    let mut order: Vec<usize> = (0..kernels.len()).collect();
    order.sort_by_key(|&k| kernels[k].at);
    let mut producer: Vec<Option<usize>> = vec![None; g.avals.len()];
    for (k, fk) in kernels.iter().enumerate() {
        producer[fk.outs[0]] = Some(k);
    }
    // Whether map `k` reads its argument `a` only at its own element.
    let own_element = |k: usize, a: usize| {
        let own = Layout::contiguous(&kernels[k].kernel.shape);
        kernels[k].kernel.nodes.iter().all(|n| match n {
            Node::Load { arg, layout, mask } if *arg == a => mask.is_none() && *layout == own,
            Node::Gather { arg, .. } => *arg != a,
            _ => true,
        })
    };
    let mut groups: Vec<Group> = Vec::new();
    let mut group_of = vec![usize::MAX; kernels.len()];
    // Whether `members` can run as part of group `into`: what they read of
    // `into` or of each other they read at their own element (the merged
    // loop has it there, and nowhere else yet); every other buffer is
    // computed before `into` runs.
    let can_join = |members: &[usize], into: usize, groups: &[Group], group_of: &[usize]| {
        members.iter().all(|&m| {
            kernels[m]
                .args
                .iter()
                .enumerate()
                .all(|(a, &v)| match producer[v] {
                    Some(p) if group_of[p] == into || members.contains(&p) => own_element(m, a),
                    _ => def[v].is_none_or(|e| e < groups[into].at),
                })
        })
    };
    for &k in &order {
        let fk = &kernels[k];
        group_of[k] = groups.len();
        groups.push(Group {
            members: vec![k],
            at: fk.at,
            nodes: fk.kernel.nodes.len(),
        });
        if !fk.kernel.is_map() {
            continue;
        }
        // The groups of the maps it loads, latest first: it joins the
        // latest, then that group joins each earlier one it can (an
        // optimizer's update reads two moments computed apart).
        let mut candidates: Vec<usize> = fk
            .args
            .iter()
            .filter_map(|&v| {
                let p = producer[v]?;
                let q = &kernels[p].kernel;
                (q.is_map() && q.shape == fk.kernel.shape).then_some(group_of[p])
            })
            .collect();
        candidates.sort_by_key(|&gi| std::cmp::Reverse(groups[gi].at));
        candidates.dedup();
        let mut from = group_of[k];
        for into in candidates {
            let fits = groups[into].nodes + groups[from].nodes <= MERGED_MAX_NODES;
            if !(fits && can_join(&groups[from].members, into, &groups, &group_of)) {
                break;
            }
            let moved = std::mem::take(&mut groups[from].members);
            for &m in &moved {
                group_of[m] = into;
            }
            groups[into].nodes += std::mem::take(&mut groups[from].nodes);
            groups[into].members.extend(moved);
            from = into;
        }
    }
    groups.retain(|grp| !grp.members.is_empty());
    if groups.len() == kernels.len() {
        return kernels;
    }
    // Which values something outside their group reads: those stay stored.
    let mut read_outside = vec![false; g.avals.len()];
    for &v in g.outputs.iter().chain(g.writebacks.iter().map(|(_, v)| v)) {
        read_outside[v] = true;
    }
    for (i, e) in g.eqns.iter().enumerate() {
        if kinds[i] == PrimClass::Library || e.outs.iter().any(|&o| views.contains(&o)) {
            for &v in &e.inputs {
                read_outside[v] = true;
            }
        }
    }
    for (k, fk) in kernels.iter().enumerate() {
        for &v in &fk.args {
            if producer[v].is_some_and(|p| group_of[p] != group_of[k]) {
                read_outside[v] = true;
            }
        }
    }
    let mut slots: Vec<Option<FusedKernel>> = kernels.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(groups.len());
    for grp in &groups {
        if grp.members.len() == 1 {
            out.extend(slots[grp.members[0]].take());
            continue;
        }
        let roots: Vec<Var> = grp
            .members
            .iter()
            .map(|&k| slots[k].as_ref().unwrap().outs[0])
            .collect();
        // The buffers the members load, and only those: a value spilled by
        // a kernel built after a member is a buffer now, but the member
        // computed it (the group's readiness was checked on what they load).
        let mut loaded = VarSet::new(g.avals.len());
        for &k in &grp.members {
            loaded.extend(slots[k].as_ref().unwrap().args.iter().copied());
        }
        let mut b = Builder::new(g, def, kinds, &loaded, &roots, false);
        let built: Result<Vec<(Var, usize)>, NeedBuffer> = roots
            .iter()
            .map(|&r| Ok((r, b.expr(r, &[])?)))
            .filter(|r| !matches!(r, Ok((v, _)) if !read_outside[*v]))
            .collect();
        match built {
            Ok(stored) if !stored.is_empty() => out.push(b.finish(stored, grp.at)),
            // Not expected (the members were checked); keep them apart.
            _ => out.extend(grp.members.iter().filter_map(|&k| slots[k].take())),
        }
    }
    out
}

/// The shape a kernel iterates over: its root's, or for a reduction the
/// input's with the reduced axes last.
fn iteration_shape(g: &Graph, def: &[Option<usize>], root: Var) -> Vec<usize> {
    let e = def[root].map(|e| &g.eqns[e]);
    match e.and_then(Eqn::as_prim) {
        Some(Prim::ScatterAdd { .. }) => g.aval(e.unwrap().inputs[1]).shape.clone(),
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

/// The bits of the constant `v` holds everywhere when it is a `full` seen
/// through views (a scatter's zeros), else `None`.
fn fill_value(g: &Graph, def: &[Option<usize>], kinds: &[PrimClass], v: Var) -> Option<u64> {
    let mut v = v;
    while let Some(i) = def[v].filter(|&i| kinds[i] == PrimClass::View) {
        v = g.eqns[i].inputs[0];
    }
    match def[v].and_then(|i| g.eqns[i].as_prim()) {
        Some(Prim::Full { value, .. }) => Some(value.to_bits()),
        _ => None,
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
/// than each written to a buffer by kernels of their own (an MLP's training step: two passes
/// over `[128, 512]` fewer per layer).
fn shared_values(g: &Graph, buffers: &VarSet, kinds: &[PrimClass]) -> Vec<Var> {
    const NONE: usize = usize::MAX;
    const MANY: usize = usize::MAX - 1;
    let n = g.avals.len();
    // What recomputing each value costs: light elementwise operations, and
    // buffers as large as the value it loads (`None`: not cheap). A
    // buffer, a constant or a view of them costs no operation.
    let mut cost: Vec<Option<(usize, usize)>> = vec![None; n];
    for (i, e) in g.eqns.iter().enumerate() {
        if kinds[i] == PrimClass::Library {
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
            PrimClass::Fill => Some((0, 0)),
            PrimClass::View => of(e.inputs[0]),
            PrimClass::Elementwise if light(prim_of(e)) => e
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
        if kinds[ei] == PrimClass::Library {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn map(nodes: Vec<Node>) -> Kernel {
        Kernel {
            shape: vec![256],
            out_dtypes: vec![DType::F32],
            arg_dtypes: vec![DType::F32],
            roots: vec![nodes.len() - 1],
            nodes,
            fused: Vec::new(),
            reduce: None,
            stream: false,
        }
    }

    /// A few additions weigh 1 per point; transcendentals 16, divisions 4,
    /// over 8; loads and literals nothing.
    #[test]
    fn a_kernels_weight_counts_its_transcendentals() {
        let load = Node::Load {
            arg: 0,
            layout: Layout::contiguous(&[256]),
            mask: None,
        };
        let add = |a, b| Node::Binary {
            op: BinaryOp::Add,
            dtype: DType::F32,
            a,
            b,
        };
        let unary = |op, x| Node::Unary {
            op,
            dtype: DType::F32,
            x,
        };
        assert_eq!(map(vec![load.clone(), add(0, 0), add(1, 0)]).weight(), 1);
        let mut chain = vec![load];
        for i in 0..10 {
            chain.push(unary(UnaryOp::Sin, i));
        }
        assert_eq!(map(chain.clone()).weight(), 10 * 16 / 8);
        chain.push(Node::Binary {
            op: BinaryOp::Div,
            dtype: DType::F32,
            a: 10,
            b: 0,
        });
        assert_eq!(map(chain).weight(), (10 * 16 + 4) / 8);
    }
}
