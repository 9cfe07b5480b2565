//! Lowering: a fused [`Kernel`] becomes a loop nest, independent of the
//! language it is rendered in but scheduled for a [`Target`] (what the
//! target's loops can do). It decides the loops (dims merged where every
//! access allows, the kept ones flattened into one grid-stride loop on a
//! GPU), each load's index as an offset plus strides over the loops, which
//! nodes are the same at every point (computed once, before the loops),
//! how a reduction accumulates (its accumulator's type, identity and fold,
//! [`ACCS`] independent accumulators), and the [`Schedule`]: two lanes for
//! latency-bound chains, a reduction written out point by point, in blocks
//! or over tiles of columns, streaming stores, a scatter's parts, and each
//! gather's offset width. Rendering ([`crate::codegen`]) prints these
//! decisions as source text and decides nothing.

use crate::fuse::{Kernel, Node};
use nx::{BinaryOp, DType, ReduceOp};

/// What a target's loops can do, which [`lower`] schedules for (the
/// dialect then prints the frame: [`crate::codegen::Dialect::loop_header`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// The kept dims run as one grid-stride loop over the output's points,
    /// each point's indices recovered by division (a GPU: one thread per
    /// output point); otherwise the outer loop is the first kept dim (the
    /// runtime splits it across threads) and the others nest inside, and a
    /// latency-bound map runs two lanes ([`Schedule::Map`]).
    pub grid: bool,
    /// Reductions over columns may accumulate tiles of neighbouring
    /// outputs at once ([`Schedule::Tiled`]).
    pub column_tiles: bool,
    /// A reduction's innermost reduced loop may run in blocks of this many
    /// elements (a multiple of [`ACCS`]); 0: never ([`Block`]).
    pub reduction_block: usize,
    /// Maps may store their output past the cache ([`Kernel::stream`]).
    pub streams: bool,
}

impl Target {
    /// The CPU (the C dialect): loops split across threads by the outer
    /// one, column tiles, reduction blocks, streaming stores.
    pub const CPU: Target = Target {
        grid: false,
        column_tiles: true,
        reduction_block: REDUCTION_BLOCK,
        streams: true,
    };
    /// A GPU (the CUDA dialect): the kept dims one grid-stride loop, a
    /// reduction one thread per output in the CPU's fold order; no column
    /// tiles, blocks or streaming stores.
    pub const GPU: Target = Target {
        grid: true,
        column_tiles: false,
        reduction_block: 0,
        streams: false,
    };
}

/// Elements per block of a reduction's innermost loop on the CPU
/// ([`Target::reduction_block`]).
pub const REDUCTION_BLOCK: usize = 64;

/// How a lowered kernel's loops run: the scheduling decisions the renderer
/// prints.
#[derive(Clone, Debug, PartialEq)]
pub enum Schedule {
    /// A map: each output element computed at its own point and stored as
    /// soon as it is computed.
    Map {
        /// The innermost loop runs two elements at a time, one per half of
        /// its range, their statements interleaved node by node so that two
        /// dependency chains overlap (`latency_bound` kernels:
        /// [`LANES_MIN_CALLS`] and the limits beside it).
        lanes: bool,
        /// The one loop runs in tiles computed into an L1 buffer and
        /// stored past the cache ([`Kernel::stream`], one loop only).
        stream: bool,
    },
    /// A reduction, one output at a time.
    Reduce {
        /// Few points per output and an innermost reduced loop shorter
        /// than [`ACCS`] ([`SMALL_REDUCTION_POINTS`]): every point written
        /// out in row-major order into one accumulator, the output loop
        /// free to vectorize (the same bits as the loops).
        unrolled: bool,
        /// The innermost reduced loop in blocks (`None`: not unrolled and
        /// shorter than a block, or a target without blocks).
        block: Option<Block>,
    },
    /// A reduction over columns, this many neighbouring outputs at once
    /// (`column_tile`; the same fold order per output).
    Tiled {
        /// Outputs per tile.
        tile: usize,
    },
    /// A scatter kernel ([`Node::Scatter`]): its loops in row-major order,
    /// each point adding into the output.
    Scatter {
        /// Split by fusion (`init_layout` set): the outer loop runs in
        /// parts (threads), each setting and adding into its own elements;
        /// otherwise one thread sets the whole output and runs every point.
        parted: bool,
        /// The innermost loop moves the destination (it is not the
        /// scattered axis): its points add into distinct elements, so its
        /// iterations are independent.
        distinct_inner: bool,
    },
}

/// A reduction's innermost reduced loop in blocks: each block's values
/// computed in one loop that vectorizes as a map's does (gcc's SLP gives
/// up on eight unrolled copies of a long body, leaving it scalar), then
/// folded into the accumulators in the same order as without blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// Elements per block.
    pub len: usize,
    /// The block's values computed two at a time (a latency-bound body).
    pub lanes: bool,
}

/// A kernel lowered to a loop nest: merged dims and, per load, its offset
/// and strides over them. For a reduction, the first `kept` dims are the
/// output's and the rest are reduced.
#[derive(Clone, Debug, PartialEq)]
pub struct LoopNest {
    /// The loop extents, outermost first (adjacent dims merged where every
    /// load's strides allow).
    pub dims: Vec<usize>,
    /// How many leading dims are the output's (all of them for a kernel
    /// without a reduction).
    pub kept: usize,
    /// For each node that is a load (or an iota or coordinate): where it
    /// reads.
    pub loads: Vec<Option<Index>>,
    /// For each node: whether its value is the same at every point of the
    /// loops (`invariant`).
    pub invariant: Vec<bool>,
    /// The kept dims are one grid-stride loop over the output's points
    /// ([`Target::grid`]; never for a scatter, whose outer loop is its
    /// range).
    pub grid: bool,
    /// How the loops run.
    pub schedule: Schedule,
    /// For each node: a gather addressing with 32-bit offsets (`narrow_gathers`).
    pub narrow: Vec<bool>,
}

/// Where a load reads: element `offset + sum(i_d * strides[d])` at loop
/// indices `i_0, i_1, ...`.
#[derive(Clone, Debug, PartialEq)]
pub struct Index {
    /// The element at index 0 of every loop.
    pub offset: usize,
    /// The step per loop, outermost first (0: the loop does not move it).
    pub strides: Vec<isize>,
}

impl LoopNest {
    /// The range `lo..hi` covers: the outer loop's extent (what the
    /// runtime splits), or the output's points where the kept dims are one
    /// grid-stride loop ([`LoopNest::grid`]).
    pub fn outer(&self) -> usize {
        if self.grid {
            self.points()
        } else {
            self.dims[0]
        }
    }

    /// The output's points: the product of the kept dims.
    pub fn points(&self) -> usize {
        self.dims[..self.kept].iter().product()
    }
}

/// Lowers kernel `k` for `target`: merges its dims (size-1 dims go, and
/// neighbours merge when the output and every load step through them as
/// one, never across the boundary between kept and reduced dims), then
/// finds the invariant nodes and decides the [`Schedule`].
pub fn lower(k: &Kernel, target: &Target) -> LoopNest {
    let nkept = k.reduce.map_or(k.shape.len(), |(_, kept)| kept);
    let groups = [0..nkept, nkept..k.shape.len()];
    let mut dims = Vec::new();
    let mut loads: Vec<Option<Index>> = k
        .nodes
        .iter()
        .map(|n| {
            n.layout().map(|layout| Index {
                offset: layout.offset,
                strides: Vec::new(),
            })
        })
        .collect();
    let mut kept = 0;
    for (gi, range) in groups.into_iter().enumerate() {
        if gi == 1 && k.reduce.is_none() {
            break;
        }
        // The loads' strides over this group's dims (the output is
        // contiguous, so it merges wherever they all do).
        let range: Vec<usize> = range.collect();
        let layouts: Vec<&nx::Layout> = k.nodes.iter().filter_map(Node::layout).collect();
        let strides: Vec<Vec<isize>> = layouts
            .iter()
            .map(|l| range.iter().map(|&d| l.strides[d]).collect())
            .collect();
        let shape: Vec<usize> = range.iter().map(|&d| k.shape[d]).collect();
        let refs: Vec<&[isize]> = strides.iter().map(|s| s.as_slice()).collect();
        let merged = nx::layout::merge_dims(&shape, &refs);
        let (mut gdims, mut gstrides) = (merged.shape, merged.strides);
        if gdims.is_empty() {
            gdims.push(1);
            for st in gstrides.iter_mut() {
                st.push(0);
            }
        }
        if gi == 0 {
            kept = gdims.len();
        }
        dims.extend(gdims);
        for (ix, st) in loads.iter_mut().flatten().zip(gstrides) {
            ix.strides.extend(st);
        }
    }
    let mut nest = LoopNest {
        dims,
        kept,
        loads,
        invariant: Vec::new(),
        grid: target.grid && k.scatter().is_none(),
        schedule: Schedule::Map {
            lanes: false,
            stream: false,
        },
        narrow: Vec::new(),
    };
    nest.invariant = invariant(k, &nest);
    nest.schedule = schedule(k, &nest, target);
    nest.narrow = narrow_gathers(k, &nest);
    nest
}

/// The [`Schedule`] of kernel `k` lowered to `nest` (its dims and
/// invariant nodes decided) for `target`.
fn schedule(k: &Kernel, nest: &LoopNest, target: &Target) -> Schedule {
    let (nd, nkept) = (nest.dims.len(), nest.kept);
    let looped = |i: usize| !nest.invariant[i];
    if k.scatter().is_some() {
        // The innermost loop's points add into distinct elements when it
        // moves the destination (it is not the scattered axis).
        let root = k.roots[0];
        let distinct_inner = nest.loads[root]
            .as_ref()
            .is_some_and(|ix| ix.strides[nd - 1] != 0);
        let parted = matches!(
            &k.nodes[root],
            Node::Scatter {
                init_layout: Some(_),
                ..
            }
        );
        return Schedule::Scatter {
            parted,
            distinct_inner,
        };
    }
    if k.reduce.is_none() {
        let buffers = k.out_dtypes.len() + k.arg_dtypes.len();
        // `stream` is only set on maps that are not epilogues.
        let stream = k.stream && nd == 1 && target.streams;
        let lanes = !stream
            && !nest.grid
            && nest.dims[nkept - 1] >= LANES_MIN_EXTENT
            && (buffers <= LANES_MAX_BUFFERS
                || nest.dims.iter().product::<usize>() <= LANES_L1_POINTS)
            && latency_bound(k, &looped);
        return Schedule::Map { lanes, stream };
    }
    if let Some(tile) = column_tile(k, nest).filter(|_| target.column_tiles) {
        return Schedule::Tiled { tile };
    }
    let unrolled = small_reduction(nest);
    let n = nest.dims[nd - 1];
    let len = target.reduction_block;
    let block = (!unrolled && len > 0 && n >= len).then(|| Block {
        len,
        lanes: latency_bound(k, &looped),
    });
    Schedule::Reduce { unrolled, block }
}

/// Whether a kernel's values are worth computing two elements at a time
/// ([`Schedule::Map`]'s and [`Block`]'s lanes): at least
/// [`LANES_MIN_CALLS`] transcendental, root or dividing nodes in its loop
/// ([`Node::cost`] 4 and up), whose chains are then long enough to be
/// bound by their latency rather than by the loads and stores.
fn latency_bound(k: &Kernel, looped: &dyn Fn(usize) -> bool) -> bool {
    let heavy = (k.nodes.iter().enumerate()).filter(|&(i, n)| looped(i) && n.cost() >= 4);
    heavy.count() >= LANES_MIN_CALLS
}

/// See `latency_bound`: a 2-lane chain of 10 softplus (two calls each)
/// over 4,096 f32 ran 1.75x faster than one lane; a kernel of one or two
/// calls is bound by memory, and doubling its C only costs compile time.
pub const LANES_MIN_CALLS: usize = 4;

/// A map reading and writing more buffers than this keeps one lane unless
/// it is small ([`LANES_L1_POINTS`]): two lanes double the streams the
/// caches follow, and the gradient of a 90-op chain over 4,096 f32 (22
/// outputs) ran 1.3x slower with them.
pub const LANES_MAX_BUFFERS: usize = 8;

/// At most this many points, all of a map's buffers stay in L1 whatever
/// their number (the gradient of a 120-op chain over 256 f32, 24 buffers,
/// ran 1.8x faster with two lanes).
pub const LANES_L1_POINTS: usize = 1024;

/// Loops shorter than this keep one lane: each half would be under two
/// 16-float vectors.
pub const LANES_MIN_EXTENT: usize = 64;

/// Reductions over at most this many points per output (a pool's window)
/// are written out point by point (`small_reduction`).
pub const SMALL_REDUCTION_POINTS: usize = 32;

/// Whether a reduction's points per output are few and its innermost
/// reduced loop shorter than [`ACCS`], so that the general loops would fold
/// every point into one accumulator in row-major order: rendered as that
/// fold written out, with the output loop free to vectorize (a 2x2 max
/// pool's 4-point windows: 24x faster than the general loops).
fn small_reduction(nest: &LoopNest) -> bool {
    let reduced = &nest.dims[nest.kept..];
    nest.kept > 0
        && !reduced.is_empty()
        && reduced.iter().product::<usize>() <= SMALL_REDUCTION_POINTS
        && reduced.last().is_some_and(|&n| n < ACCS)
}

/// Buffers with fewer elements than this are gathered from with 32-bit
/// offsets (each term of the address, and the sum, stays within the
/// buffer's size, so within half of `i32::MAX`).
pub const GATHER_I32_MAX: usize = 1 << 30;

/// For each node: whether it is a gather addressing with 32-bit offsets:
/// where the buffer allows ([`GATHER_I32_MAX`]) and the index moves along
/// the innermost loop (gcc vectorizes an f32 gather only with 32-bit
/// offsets). An index fixed along it reads a run of the row: 64-bit
/// offsets, which gcc sees are affine and loads as plain vectors (a gather
/// instruction there is 4x slower).
fn narrow_gathers(k: &Kernel, nest: &LoopNest) -> Vec<bool> {
    let same_inner = same_along_innermost(k, nest);
    k.nodes
        .iter()
        .map(|n| match n {
            Node::Gather {
                index, buffer_len, ..
            } => *buffer_len < GATHER_I32_MAX && !same_inner[*index],
            _ => false,
        })
        .collect()
}

/// The dtype of node `i`'s value.
pub fn node_dtype(k: &Kernel, i: usize) -> DType {
    match &k.nodes[i] {
        Node::Load { arg, .. } | Node::Gather { arg, .. } => k.arg_dtypes[*arg],
        Node::Lit { dtype, .. } | Node::Iota { dtype, .. } | Node::Coord { dtype, .. } => *dtype,
        Node::Unary { dtype, .. } | Node::Binary { dtype, .. } | Node::Where { dtype, .. } => {
            *dtype
        }
        Node::Compare { .. } => DType::Bool,
        Node::Scatter { value, .. } => node_dtype(k, *value),
        Node::Cast { to, .. } => *to,
    }
}

/// Which nodes are the same at every point of the loop nest: literals,
/// loads (and iotas) that step through no loop, and operations on those
/// only. They are computed once, before the loops. Besides the work saved,
/// a chain of them inside a loop (a broadcast scalar squared twice, then a
/// bf16 sigmoid) kept clang's loop vectorizer busy for over 20 minutes: its
/// analysis walks each use of a value, exponential in a chain of squares.
///
/// A load is hoisted only when the loops run at least once (the kernel
/// returns first on an empty range, and no loop of the nest is empty), so
/// that it reads an element the loops would have read.
fn invariant(k: &Kernel, nest: &LoopNest) -> Vec<bool> {
    let nonempty = nest.dims.iter().all(|&d| d > 0);
    same_along(k, nest, nonempty, &|_| true)
}

/// For each node: whether its value is the same along the innermost loop
/// (a gather whose index is reads a contiguous run there, which the C
/// compiler vectorizes as plain loads when it sees the address is affine).
fn same_along_innermost(k: &Kernel, nest: &LoopNest) -> Vec<bool> {
    let last = nest.dims.len().wrapping_sub(1);
    same_along(k, nest, true, &|l| l == last)
}

/// For each node: whether its value is the same along every loop `moving`
/// picks; loads count only where `loads_ok` (a hoisted load must read an
/// element the loops would have read).
fn same_along(
    k: &Kernel,
    nest: &LoopNest,
    loads_ok: bool,
    moving: &dyn Fn(usize) -> bool,
) -> Vec<bool> {
    let mut inv = vec![false; k.nodes.len()];
    let nonempty = loads_ok;
    for (i, n) in k.nodes.iter().enumerate() {
        inv[i] = match n {
            Node::Lit { .. } => true,
            Node::Load { .. } | Node::Gather { .. } | Node::Iota { .. } | Node::Coord { .. } => {
                let reads_where_variant = match n {
                    Node::Load { mask: Some(m), .. } => !inv[m.when],
                    Node::Gather { index, .. } => !inv[*index],
                    _ => false,
                };
                nonempty
                    && !reads_where_variant
                    && nest.loads[i].as_ref().is_some_and(|ix| {
                        ix.strides
                            .iter()
                            .enumerate()
                            .all(|(l, &st)| st == 0 || !moving(l))
                    })
            }
            Node::Unary { x, .. } | Node::Cast { x, .. } => inv[*x],
            Node::Binary { a, b, .. } | Node::Compare { a, b, .. } => inv[*a] && inv[*b],
            Node::Where { c, a, b, .. } => inv[*c] && inv[*a] && inv[*b],
            Node::Scatter { .. } => false, // a store at every point
        };
    }
    inv
}

/// Independent accumulators of a reduction's innermost loop (so the fold
/// is not one serial dependency chain).
pub const ACCS: usize = 8;

/// Kept elements a column-wise reduction accumulates side by side.
const TILE: usize = 64;

/// The tile width for a reduction whose loads step by one along the
/// innermost kept dim but not along the innermost reduced one (a sum over
/// the rows of a row-major matrix): accumulating a tile of neighbouring
/// outputs at once reads contiguous memory and vectorizes, where one
/// output at a time walks a column. `None` for other reductions.
fn column_tile(k: &Kernel, nest: &LoopNest) -> Option<usize> {
    let (nkept, nd) = (nest.kept, nest.dims.len());
    if nkept == 0 || nd == nkept || nest.dims[nkept - 1] < ACCS {
        return None;
    }
    let strides: Vec<&Vec<isize>> = k
        .nodes
        .iter()
        .zip(&nest.loads)
        .filter(|(n, _)| matches!(n, Node::Load { .. }))
        .filter_map(|(_, l)| l.as_ref().map(|ix| &ix.strides))
        .collect();
    let kept_unit = strides.iter().any(|s| s[nkept - 1].abs() == 1)
        && strides.iter().all(|s| s[nkept - 1].abs() <= 1);
    let reduced_unit = strides.iter().any(|s| s[nd - 1].abs() == 1);
    (kept_unit && !reduced_unit).then_some(TILE.min(nest.dims[nkept - 1]))
}

/// How a reduction accumulates.
pub struct Accumulator {
    /// The accumulator's dtype: f64 for float sums and products, u64 for
    /// integer ones (the same residue modulo 2^bits as wrapping in the
    /// element type), the element's own for max and min.
    pub dtype: DType,
    /// The fold's identity.
    pub init: Identity,
    /// How a value (converted to `dtype`) folds into the accumulator, and
    /// how two accumulators merge.
    pub fold: BinaryOp,
}

/// A reduction's identity value.
pub enum Identity {
    /// This value in the accumulator's dtype.
    Value(f64),
    /// The accumulator's (integer) dtype's lowest value (max's identity).
    Lowest,
    /// The accumulator's (integer) dtype's highest value (min's identity).
    Highest,
}

/// How a reduction by `op` of `dtype` elements accumulates.
pub fn accumulator(op: ReduceOp, dtype: DType) -> Accumulator {
    let float = dtype.is_float();
    let wide = if float { DType::F64 } else { DType::U64 };
    match op {
        ReduceOp::Sum => Accumulator {
            dtype: wide,
            init: Identity::Value(0.0),
            fold: BinaryOp::Add,
        },
        ReduceOp::Prod => Accumulator {
            dtype: wide,
            init: Identity::Value(1.0),
            fold: BinaryOp::Mul,
        },
        ReduceOp::Max => Accumulator {
            dtype,
            init: if float {
                Identity::Value(f64::NEG_INFINITY)
            } else {
                Identity::Lowest
            },
            fold: BinaryOp::Max,
        },
        ReduceOp::Min => Accumulator {
            dtype,
            init: if float {
                Identity::Value(f64::INFINITY)
            } else {
                Identity::Highest
            },
            fold: BinaryOp::Min,
        },
    }
}
