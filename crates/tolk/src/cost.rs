//! A compiled program's cost estimate, as JAX's `cost_analysis` gives one:
//! floating-point (and integer) operations, transcendental evaluations,
//! and bytes moved to and from memory.
//!
//! How it is counted (XLA's `HloCostAnalysis` conventions, over tolk's own
//! program rather than the traced one):
//!
//! - **flops**, per equation of the simplified graph: one per output
//!   element of an elementwise primitive that is not a transcendental
//!   (copies and `stop_gradient` none); one per input element of a
//!   reduction, arg-reduction or running sum; `2·M·N·K` for a product
//!   (`2 · output elements · contracted size`); `2 · output elements ·
//!   input channels per group · kernel window` for a convolution; output
//!   elements times window size for window reductions; one per update of a
//!   scatter-add; `n·⌈log2 n⌉` per sorted row; 35 per Threefry element
//!   (20 rounds of an add, a rotate and a xor per pair, and the key
//!   injections); views, fills, pads, concatenations and gathers none.
//! - **transcendentals**: one per output element of `exp`, `log`, `sin`,
//!   `tanh`, `erf`, `sigmoid`, `pow`, `atan2` and the like (counted here
//!   instead of in flops, as XLA does).
//! - **bytes accessed**, per step of the plan: a kernel reads each of its
//!   argument buffers once and writes each output (whatever it fused stays
//!   in registers: this is what fusion saves); a library step reads its
//!   inputs and writes its output; an eager view step moves nothing. A
//!   broadcast read again and again counts once: the figure is the traffic
//!   with perfect caching of each step's operands, a lower bound.
//! - A loop counts its body's cost once per step, and the bytes of its
//!   carries and of each step's slices of `xs` and `ys`.

use crate::graph::{Graph, Op};
use crate::plan::{Plan, Step};
use nx::{BinaryOp, Prim, PrimClass, UnaryOp};

/// A program's estimated cost (see the [module](self) docs for how each
/// figure is counted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cost {
    /// Arithmetic operations other than transcendentals.
    pub flops: u64,
    /// Transcendental function evaluations (`exp`, `log`, `tanh`, ...).
    pub transcendentals: u64,
    /// Bytes read and written by the plan's steps.
    pub bytes_accessed: u64,
}

impl std::ops::Add for Cost {
    type Output = Cost;
    fn add(self, o: Cost) -> Cost {
        Cost {
            flops: self.flops + o.flops,
            transcendentals: self.transcendentals + o.transcendentals,
            bytes_accessed: self.bytes_accessed + o.bytes_accessed,
        }
    }
}

impl std::ops::Mul<u64> for Cost {
    type Output = Cost;
    fn mul(self, n: u64) -> Cost {
        Cost {
            flops: self.flops * n,
            transcendentals: self.transcendentals * n,
            bytes_accessed: self.bytes_accessed * n,
        }
    }
}

fn is_transcendental_unary(op: UnaryOp) -> bool {
    use UnaryOp::*;
    matches!(
        op,
        Exp | Exp2
            | Log
            | Log2
            | Log1p
            | Expm1
            | Sin
            | Cos
            | Tan
            | Asin
            | Acos
            | Atan
            | Sinh
            | Cosh
            | Tanh
            | Asinh
            | Acosh
            | Atanh
            | Erf
            | Sigmoid
            | Angle
    )
}

/// The flops and transcendentals of one primitive equation.
pub(crate) fn prim_cost(g: &Graph, prim: &Prim, ins: &[usize], out: usize) -> Cost {
    let n = |v: usize| g.aval(v).numel() as u64;
    let out_n = n(out);
    let (flops, transcendentals) = match prim {
        Prim::Unary(op) if is_transcendental_unary(*op) => (0, out_n),
        Prim::Binary(BinaryOp::Pow | BinaryOp::Atan2) => (0, out_n),
        Prim::Unary(_) | Prim::Binary(_) | Prim::Compare(_) | Prim::Where | Prim::Cast(_) => {
            (out_n, 0)
        }
        Prim::Reduce { .. } | Prim::ArgReduce { .. } | Prim::Cumulative { .. } => (n(ins[0]), 0),
        Prim::DotGeneral { lhs_contract, .. } => {
            let lhs = &g.aval(ins[0]).shape;
            let k: u64 = lhs_contract.iter().map(|&a| lhs[a] as u64).product();
            (2 * out_n * k, 0)
        }
        Prim::Conv { .. } => {
            // kernel [O, C/groups, window...]: per output element, one
            // multiply-add per kernel element of its output channel.
            let kernel = &g.aval(ins[1]).shape;
            let per_out: u64 = kernel[1..].iter().map(|&d| d as u64).product();
            (2 * out_n * per_out, 0)
        }
        Prim::ReduceWindow { window, .. } | Prim::WindowArgmax { window, .. } => {
            (out_n * window.iter().map(|&w| w as u64).product::<u64>(), 0)
        }
        Prim::ScatterAdd { .. } => (n(ins[2]), 0),
        Prim::Argsort { axis, .. } => {
            let len = g.aval(ins[0]).shape[*axis].max(1) as u64;
            (
                n(ins[0]) * (u64::BITS - (len - 1).leading_zeros()) as u64,
                0,
            )
        }
        Prim::TopK { .. } => {
            let shape = &g.aval(ins[0]).shape;
            let len = shape.last().copied().unwrap_or(1).max(1) as u64;
            (
                n(ins[0]) * (u64::BITS - (len - 1).leading_zeros()) as u64,
                0,
            )
        }
        Prim::Threefry2x32 => (35 * out_n, 0),
        // Moves, fills, gathers and assignments compute nothing; the
        // linear algebra and FFTs never reach a compiled program (eager
        // only). Listed one by one so that a new primitive must say.
        Prim::Copy
        | Prim::StopGradient
        | Prim::Full { .. }
        | Prim::Iota { .. }
        | Prim::Reshape { .. }
        | Prim::Broadcast { .. }
        | Prim::Permute { .. }
        | Prim::Slice { .. }
        | Prim::Flip { .. }
        | Prim::Pad { .. }
        | Prim::Concat { .. }
        | Prim::Gather { .. }
        | Prim::Assign
        | Prim::Cholesky
        | Prim::TriangularSolve { .. }
        | Prim::Solve
        | Prim::Slogdet
        | Prim::Qr { .. }
        | Prim::Eigh
        | Prim::Svd { .. }
        | Prim::Fft { .. } => (0, 0),
    };
    Cost {
        flops,
        transcendentals,
        bytes_accessed: 0,
    }
}

/// The cost of running `plan` over `g` once; `body(eqn)` is the cost of
/// one step of loop equation `eqn`'s compiled body.
pub fn program_cost(g: &Graph, plan: &Plan, body: &dyn Fn(usize) -> Cost) -> Cost {
    let bytes = |v: usize| (g.aval(v).numel() * g.aval(v).dtype.size_in_bytes()) as u64;
    let mut total = Cost::default();
    for e in &g.eqns {
        if let Op::Prim(p) = &e.op {
            total = total + prim_cost(g, p, &e.inputs, e.out());
        }
    }
    for step in &plan.steps {
        match step {
            Step::Kernel { outs, args, .. } => {
                total.bytes_accessed += outs.iter().chain(args).map(|&v| bytes(v)).sum::<u64>();
            }
            Step::Library { eqn } => {
                let e = &g.eqns[*eqn];
                match &e.op {
                    Op::Prim(p) if p.class() == PrimClass::View => {}
                    Op::Prim(_) => {
                        total.bytes_accessed += e
                            .inputs
                            .iter()
                            .chain(&e.outs)
                            .map(|&v| bytes(v))
                            .sum::<u64>();
                    }
                    Op::Loop(lp) => {
                        let per_step = body(*eqn);
                        // Each step reads its carries and slices and writes
                        // new carries and slices: the body's own steps
                        // count what its kernels read and write; the loop
                        // moves the stacked xs and ys once more.
                        let moved: u64 = e.inputs[lp.n_consts + lp.n_carry..]
                            .iter()
                            .chain(&e.outs[lp.n_carry..])
                            .map(|&v| bytes(v))
                            .sum();
                        total = total + per_step * lp.length as u64;
                        total.bytes_accessed += moved;
                    }
                }
            }
        }
    }
    total
}
