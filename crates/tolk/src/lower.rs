//! Lowering: a fused [`Kernel`] becomes a loop nest, independent of the
//! language it is rendered in. It decides the loops (dims merged where every
//! access allows), each load's index as an offset plus strides over the
//! loops, which nodes are the same at every point (computed once, before
//! the loops), how a reduction accumulates (its accumulator's type,
//! identity and fold, [`ACCS`] independent accumulators) and whether it
//! runs over tiles of columns. Rendering ([`crate::codegen`]) turns these
//! decisions into source text.

use crate::fuse::{Kernel, Node};
use nx::{BinaryOp, DType, ReduceOp};

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
    /// A reduction whose innermost kept dim is accumulated in tiles of this
    /// many outputs (`column_tile`).
    pub tile: Option<usize>,
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
    /// Extent of the outer loop (what the runtime splits).
    pub fn outer(&self) -> usize {
        self.dims[0]
    }

    /// The output's points: the product of the kept dims (the range of a
    /// dialect that flattens them, [`crate::codegen::Dialect::flattens_kept_dims`]).
    pub fn points(&self) -> usize {
        self.dims[..self.kept].iter().product()
    }
}

/// Merges the kernel's dims: size-1 dims go, and neighbours merge when the
/// output and every load step through them as one (never across the
/// boundary between kept and reduced dims).
pub fn lower(k: &Kernel) -> LoopNest {
    let nkept = k.reduce.map_or(k.shape.len(), |(_, kept)| kept);
    let groups = [0..nkept, nkept..k.shape.len()];
    let mut dims = Vec::new();
    let mut loads: Vec<Option<Index>> = k
        .nodes
        .iter()
        .map(|n| match n {
            Node::Load { layout, .. }
            | Node::Gather { layout, .. }
            | Node::Scatter { layout, .. }
            | Node::Iota { layout, .. }
            | Node::Coord { layout, .. } => Some(Index {
                offset: layout.offset,
                strides: Vec::new(),
            }),
            _ => None,
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
        let layouts: Vec<&nx::Layout> = k
            .nodes
            .iter()
            .filter_map(|n| match n {
                Node::Load { layout, .. }
                | Node::Gather { layout, .. }
                | Node::Scatter { layout, .. }
                | Node::Iota { layout, .. }
                | Node::Coord { layout, .. } => Some(layout),
                _ => None,
            })
            .collect();
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
        tile: None,
    };
    nest.invariant = invariant(k, &nest);
    nest.tile = k.reduce.and_then(|_| column_tile(k, &nest));
    nest
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
pub fn same_along_innermost(k: &Kernel, nest: &LoopNest) -> Vec<bool> {
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
