//! Row-sharded loops: a staged loop whose body treats the rows of its
//! carries independently (a batch of recurrent states, as in a scan RNN's
//! forward: `tanh(h @ W + x_t @ U + b)` computes row `r` of the next `h`
//! from row `r` of `h` and of `x_t`) runs as one loop per thread, each over
//! its own band of rows, with no handoff between threads until the end.
//!
//! Splitting each step's work across threads makes every step hand its
//! carry from core to core, which costs more than a step's work on some
//! hosts (16 KB of carry took 3 us to cross between the two cores of an
//! Intel Xeon VM, against 6 us for the step's product); a band's rows never
//! leave their core. Every call computes what the one-thread loop computes
//! for those rows: a product of a band of rows is the same one-thread
//! product over those rows (nx's bands split the same way), and a kernel
//! run over a range of its outer loop computes exactly those points. So
//! the results are the same bits.
//!
//! Which bodies qualify ([`Shards::of`]): every carry, per-step output and
//! value computed from them has the same number of rows along axis 0 and
//! each primitive maps row `r` of its output to row `r` of its row-bearing
//! inputs ([`keeps_rows`]); the other inputs are the loop's consts and
//! slices that no row owns, read whole. The body's steps are kernels and
//! products only (the product's left operand the row-bearing one), every
//! one computes row-bearing values, and no step checks indices.

use super::loop_interp::{rows, Call, Cursor, Frame, OutputCopy, Place};
use super::loop_stages::{kept_buffers, one_thread, product_flops};
use super::{call_kernel_range, Program};
use crate::graph::{Eqn, Graph, Loop, Op, Var};
use crate::plan::Step;
use nx::{Prim, PrimClass};

/// The fewest rows a band may have: fewer, and a product's band is too
/// small for the GEMM to run well.
const MIN_BAND_ROWS: usize = 8;

/// The least work (product flops and kernel points, over all steps) a loop
/// splits into bands for: below it, starting the other threads costs more
/// than they save.
const MIN_LOOP_WORK: usize = 1 << 21;

/// How a loop's rows split into bands (see the module's doc).
pub(super) struct Shards {
    /// Rows of every row-bearing value (its axis 0).
    rows: usize,
    /// Bands: one per thread, at least [`MIN_BAND_ROWS`] rows each.
    bands: usize,
    /// The values the steps compute into buffers of the body's (its
    /// arena shares slots between values the bands now compute at
    /// different times), each given a buffer of its own.
    private: Vec<Var>,
}

impl Shards {
    /// How `lp`'s body splits into bands of rows, given where its values
    /// are placed; `None` when it does not.
    pub(super) fn of(lp: &Loop, body: &Program, place: &[Option<Place>]) -> Option<Shards> {
        let g = &body.graph;
        let (nk, nc) = (lp.n_consts, lp.n_carry);
        let threads = nx::num_threads();
        if nc == 0 || threads < 2 || !body.index_checks.is_empty() || one_thread() {
            return None;
        }
        let rows = *g.aval(g.inputs[nk]).shape.first()?;
        let bands = threads.min(rows / MIN_BAND_ROWS);
        if bands < 2 {
            return None;
        }
        let has_rows = |v: Var| g.aval(v).shape.first() == Some(&rows);
        // Which values carry rows: the carries, the slices with as many
        // rows, and what is computed from them.
        let mut row = vec![false; g.avals.len()];
        for (i, &v) in g.inputs.iter().enumerate().skip(nk) {
            if i < nk + nc && !has_rows(v) {
                return None;
            }
            row[v] = has_rows(v);
        }
        for e in &g.eqns {
            if !e.inputs.iter().any(|&v| row[v]) {
                continue;
            }
            if !keeps_rows(e, g, &row, rows) {
                return None;
            }
            for &o in &e.outs {
                row[o] = true;
            }
        }
        if !g.outputs.iter().all(|&v| row[v]) {
            return None;
        }
        // Kernels and products only, each computing rows, each kernel's
        // outer loop a whole number of points per row.
        let kernels = body.kernels.borrow();
        let mut work = 0;
        for (step, &w) in body.plan.steps.iter().zip(&body.work) {
            match step {
                Step::Kernel { kernel, outs, .. } => {
                    if !outs.iter().all(|&o| row[o]) || !kernels[*kernel].outer.is_multiple_of(rows)
                    {
                        return None;
                    }
                    work += w;
                }
                Step::Library { eqn } => {
                    let e = &g.eqns[*eqn];
                    if !matches!(e.op, Op::Prim(Prim::DotGeneral { .. })) || !row[e.out()] {
                        return None;
                    }
                    work += product_flops(e, g);
                }
            }
        }
        if work.saturating_mul(lp.length) < MIN_LOOP_WORK {
            return None;
        }
        let mut computed = vec![false; g.avals.len()];
        for step in &body.plan.steps {
            let outs = match step {
                Step::Kernel { outs, .. } => outs,
                Step::Library { eqn } => &g.eqns[*eqn].outs,
            };
            for &o in outs {
                computed[o] = true;
            }
        }
        let private = (0..g.avals.len())
            .filter(|&v| computed[v] && matches!(place[v], Some(Place::Fixed(_))))
            .collect();
        Some(Shards {
            rows,
            bands,
            private,
        })
    }

    /// Places the values the steps compute in buffers of their own (kept
    /// across calls in `Program::loop_buffers`).
    pub(super) fn place_buffers(
        &self,
        body: &Program,
        frame: &mut Frame,
        place: &mut [Option<Place>],
    ) {
        let g = &body.graph;
        let avals: Vec<&nx::Aval> = self.private.iter().map(|&v| g.aval(v)).collect();
        let kept = kept_buffers(
            body,
            avals.iter().map(|a| (a.dtype, a.shape.clone())).collect(),
        );
        for (&v, t) in self.private.iter().zip(kept) {
            place[v] = Some(Place::Fixed(frame.add_fixed(t)));
        }
    }

    /// Runs the loop, band `b` of the rows on the `b`-th part of nx's pool
    /// (in turn, when the pool is busy): every step of the band in order.
    pub(super) fn run(
        &self,
        lp: &Loop,
        first_out: usize,
        frame: &Frame,
        calls: &[(usize, Call<'_>)],
        copies: &[OutputCopy],
    ) {
        let shared = Bands {
            lp,
            first_out,
            frame,
            calls,
            copies,
            rows: self.rows,
            bands: self.bands,
        };
        let shared = &shared;
        nx::raw::parallel_for(self.bands, &|b| {
            nx::raw::on_this_thread(|| shared.band(b));
        });
    }
}

/// Whether primitive equation `e`, some of whose inputs are row-bearing
/// (`row`), computes row `r` of its output (which must have `rows` rows)
/// from row `r` of those inputs only (its other inputs are read whole).
fn keeps_rows(e: &Eqn, g: &Graph, row: &[bool], rows: usize) -> bool {
    let Op::Prim(prim) = &e.op else {
        return false;
    };
    if e.outs.len() != 1 || g.aval(e.out()).shape.first() != Some(&rows) {
        return false;
    }
    let x = g.aval(e.inputs[0]);
    let first_has_rows = row[e.inputs[0]] && x.shape.first() == Some(&rows);
    match prim {
        // Same-shaped operands, element by element.
        _ if prim.class() == PrimClass::Elementwise => true,
        Prim::Reduce { axes, .. } => first_has_rows && !axes.contains(&0),
        Prim::ArgReduce { axis, .. } | Prim::Cumulative { axis, .. } => {
            first_has_rows && *axis != 0
        }
        // Row-major: the leading `rows` dims match, so each row's elements
        // stay together.
        Prim::Reshape { .. } => first_has_rows,
        // Aligned on the right: axis 0 stays axis 0 when the rank does.
        Prim::Broadcast { shape } => first_has_rows && shape.len() == x.shape.len(),
        Prim::Permute { perm } => perm.first() == Some(&0),
        Prim::Slice { start, end, step } => start[0] == 0 && end[0] == rows && step[0] == 1,
        Prim::Flip { axes } => !axes.contains(&0),
        Prim::Pad { lo, hi, .. } => lo[0] == 0 && hi[0] == 0,
        Prim::Concat { axis } => *axis != 0,
        // The left operand's rows become the product's; the right one is
        // read whole.
        Prim::DotGeneral {
            lhs_batch,
            rhs_batch,
            lhs_contract,
            ..
        } => {
            lhs_batch.is_empty()
                && rhs_batch.is_empty()
                && first_has_rows
                && !row[e.inputs[1]]
                && !lhs_contract.contains(&0)
        }
        _ => false,
    }
}

/// One run of a row-sharded loop, shared by the threads running its bands.
struct Bands<'a, 'p> {
    lp: &'a Loop,
    first_out: usize,
    frame: &'a Frame,
    calls: &'a [(usize, Call<'p>)],
    copies: &'a [OutputCopy],
    rows: usize,
    bands: usize,
}

// SAFETY: each band writes only its own rows of the values the steps
// compute (its range of each kernel's outer loop, its rows of each
// product, its rows of each copy), in buffers no other value shares
// (`Shards::place_buffers`), and reads only its own rows of those values
// (`keeps_rows`) and the loop's consts and slices, which no band writes.
// The calls hold kernels and products only (`Shards::of`), whose entries
// and primitives are read-only.
unsafe impl Sync for Bands<'_, '_> {}

impl Bands<'_, '_> {
    /// Band `b`'s rows.
    fn range(&self, b: usize) -> std::ops::Range<usize> {
        self.rows * b / self.bands..self.rows * (b + 1) / self.bands
    }

    /// Runs every step of band `b`.
    fn band(&self, b: usize) {
        let r = self.range(b);
        let mut ptrs: Vec<*mut u8> = Vec::new();
        for i in 0..self.lp.length {
            let at = Cursor::new(self.lp, self.first_out, i);
            for (_, call) in self.calls {
                match call {
                    Call::Kernel { entry, places, .. } => {
                        ptrs.clear();
                        ptrs.extend(places.iter().map(|&p| self.frame.at(p, &at)));
                        let per_row = entry.outer / self.rows;
                        call_kernel_range(entry, &ptrs, r.start * per_row, r.end * per_row);
                    }
                    Call::Product {
                        prim,
                        inputs,
                        out,
                        bytes,
                    } => {
                        let lhs = rows(&self.frame.tensor(inputs[0], &at), r.clone());
                        let rhs = self.frame.tensor(inputs[1], &at);
                        let out_row = bytes / self.rows;
                        // In bounds: rows `r` of the product's place.
                        let dst = self.frame.at(*out, &at).wrapping_add(r.start * out_row);
                        // SAFETY: `dst` addresses this band's rows of the
                        // product's own place (see `run_compiled`), which no
                        // other band writes or reads.
                        unsafe { nx::raw::dot_general_to(prim, &[&lhs, &rhs], dst) };
                    }
                    Call::Library { .. } | Call::Loop { .. } => {
                        unreachable!("tolk: a library step in a row-sharded loop")
                    }
                }
            }
            for copy in self.copies {
                let row = copy.bytes / self.rows;
                copy.run_range(self.frame, &at, r.start * row..r.end * row);
            }
        }
    }
}
