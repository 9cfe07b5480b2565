//! The loop interpreter: a staged loop (`scan`) run step by step with its
//! body's compiled `Program`, the body's plan resolved once into places
//! (`Place`, `Frame`), so that a step calls its kernels with no tensor,
//! lock or allocation.

use super::loop_shards::Shards;
use super::loop_stages::{Stages, RING};
use super::{call_kernel, contiguous, written_in_place, KernelEntry, Program};
use crate::graph::{Loop, Op, Var};
use crate::plan::Step;
use nx::raw::PAR_MIN;
use nx::{Prim, Tensor};

/// Where a value of a loop's body lives during one step (see
/// [`run_loop`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Place {
    /// The same buffer at every step: a const, an arena slot, a buffer of
    /// the call's own (index into [`Frame::fixed`]).
    Fixed(usize),
    /// Carry `i` as the step receives it.
    CarryIn(usize),
    /// Carry `i` as the step produces it.
    CarryOut(usize),
    /// Row `t` of stacked input `j`.
    X(usize),
    /// Row `t` of stacked output `j`.
    Y(usize),
    /// The result of library step `k` of this step (a fresh tensor).
    Lib(usize),
    /// Slot `i % RING` of ring `r`: a value one stage of a pipelined loop
    /// writes and another reads some steps later ([`super::loop_stages`]).
    Ring(usize),
}

/// Where one step of a loop is: the step's number `i`, the row `t` of the
/// stacked values it reads and writes (`i`, or counted from the end in a
/// reversed loop), and which of [`Frame::carries`] it reads and writes.
#[derive(Clone, Copy)]
pub(super) struct Cursor {
    i: usize,
    t: usize,
    carry_in: usize,
    carry_out: usize,
}

impl Cursor {
    /// Step `i` of `lp`, whose steps write carry buffers `first_out` and
    /// the other one (`3 - first_out`) alternately, starting with
    /// `first_out`; step 0 reads the caller's initial carries (buffer 0).
    pub(super) fn new(lp: &Loop, first_out: usize, i: usize) -> Cursor {
        let carry_out = if i.is_multiple_of(2) {
            first_out
        } else {
            3 - first_out
        };
        Cursor {
            i,
            t: if lp.reverse { lp.length - 1 - i } else { i },
            carry_in: if i == 0 { 0 } else { 3 - carry_out },
            carry_out,
        }
    }
}

/// The buffers behind a loop's places, as tensors and addresses; which
/// of them a step reads and writes is its [`Cursor`]'s.
pub(super) struct Frame {
    fixed: Vec<(Tensor, *mut u8)>,
    /// The carries' buffers: the caller's initial ones, then the two that
    /// the steps write alternately (the final ones, which the last step
    /// writes, and the scratch ones).
    carries: [Vec<(Tensor, *mut u8)>; 3],
    xs: Vec<(Tensor, *mut u8, usize)>,
    ys: Vec<(Tensor, *mut u8, usize)>,
    lib: Vec<Option<(Tensor, *mut u8)>>,
    /// A pipelined loop's rings: `RING` slots of `.2` bytes each.
    rings: Vec<(Tensor, *mut u8, usize)>,
}

impl Frame {
    /// Adds a buffer every step uses; its index, for [`Place::Fixed`].
    pub(super) fn add_fixed(&mut self, t: Tensor) -> usize {
        self.fixed.push(addressed(t));
        self.fixed.len() - 1
    }

    /// Adds a ring of [`RING`] slots of `slot` bytes (`t`: [RING, ...]);
    /// its index, for [`Place::Ring`].
    pub(super) fn add_ring(&mut self, t: Tensor, slot: usize) -> usize {
        let (t, p) = addressed(t);
        self.rings.push((t, p, slot));
        self.rings.len() - 1
    }

    /// The address of `p`'s first element at step `c`.
    pub(super) fn at(&self, p: Place, c: &Cursor) -> *mut u8 {
        match p {
            Place::Fixed(i) => self.fixed[i].1,
            Place::CarryIn(i) => self.carries[c.carry_in][i].1,
            Place::CarryOut(i) => self.carries[c.carry_out][i].1,
            // In bounds: row `t < length` of a contiguous [length, ...]
            // tensor whose rows are `row` bytes.
            Place::X(j) => self.xs[j].1.wrapping_add(c.t * self.xs[j].2),
            Place::Y(j) => self.ys[j].1.wrapping_add(c.t * self.ys[j].2),
            Place::Lib(k) => self.lib[k].as_ref().expect("computed this step").1,
            // In bounds: slot `i % RING` of a [RING, ...] tensor.
            Place::Ring(r) => self.rings[r].1.wrapping_add(c.i % RING * self.rings[r].2),
        }
    }

    /// `p` as a tensor at step `c` (a product's operand, a library step's).
    pub(super) fn tensor(&self, p: Place, c: &Cursor) -> Tensor {
        match p {
            Place::Fixed(i) => self.fixed[i].0.clone(),
            Place::CarryIn(i) => self.carries[c.carry_in][i].0.clone(),
            Place::CarryOut(i) => self.carries[c.carry_out][i].0.clone(),
            Place::X(j) => row(&self.xs[j].0, c.t),
            Place::Y(j) => row(&self.ys[j].0, c.t),
            Place::Lib(k) => self.lib[k].as_ref().expect("computed this step").0.clone(),
            Place::Ring(r) => row(&self.rings[r].0, c.i % RING),
        }
    }
}

/// `t` and the address of its first element (a dense tensor). The address
/// stays valid while `t` lives: storage never moves.
fn addressed(t: Tensor) -> (Tensor, *mut u8) {
    let p = nx::raw::read(&t).ptr() as *mut u8;
    (t, p)
}

/// Whether a loop body's kernel or product splits across the pool, chosen
/// by timing both on the first steps the loop runs.
///
/// A step of a staged loop hands its result to the next step: split, the
/// other cores read what the calling thread wrote a step before and write
/// what it reads next, and whether the cores' parallel work pays for that
/// depends on the host, not just the step's size (a scan RNN's 32x128x128
/// product: split, 0.66 against 0.87 ms per forward on a 2-vCPU AMD EPYC,
/// but 1.36 against 0.95 ms on a 2-vCPU Intel Xeon). So each such step is
/// run 12 times each way (`trials`), alternating, and keeps the
/// way whose fastest run was faster (split only when clearly so, by a
/// tenth: on the calling thread alone the other cores stay free). Both
/// ways give the same bits: kernels split over output elements, and a
/// product's bands each run the same one-thread product over whole rows
/// or columns. The choice is made once per compiled body, on its first
/// call: a machine busy with other work during those steps can leave the
/// slower way chosen (`TOLK_PROFILE=1` shows the loop's time).
///
/// A pipelined loop ([`super::loop_stages`]) is chosen the same way, whole
/// calls of the loop being the trials ([`SplitTuner::for_calls`]): its
/// stages hand values between cores, which on some hosts costs more than
/// the overlap gains.
#[derive(Clone, Copy, Debug)]
pub(super) struct SplitTuner {
    /// Trials each way.
    trials: u32,
    runs: u32,
    /// The fastest run so far on the calling thread, and split (seconds).
    best: [f64; 2],
    decided: Option<bool>,
}

impl Default for SplitTuner {
    /// A tuner of a loop body's step: 12 trials each way.
    fn default() -> SplitTuner {
        SplitTuner {
            trials: 12,
            runs: 0,
            best: [0.0; 2],
            decided: None,
        }
    }
}

impl SplitTuner {
    /// A tuner of whole calls of a loop: 3 trials each way (a first
    /// call's one-time costs are in the slower of its way's trials).
    pub(super) fn for_calls() -> SplitTuner {
        SplitTuner {
            trials: 3,
            ..SplitTuner::default()
        }
    }

    /// The way the next run takes: the chosen one, or while undecided,
    /// alternately on the calling thread and split, starting with the
    /// former.
    pub(super) fn next_split(&self) -> bool {
        self.decided.unwrap_or(self.runs % 2 == 1)
    }

    /// Whether the choice is still open (runs are being timed).
    pub(super) fn trying(&self) -> bool {
        self.decided.is_none()
    }

    /// Runs `f` the chosen way (alternating while undecided), timing it
    /// while the choice is open.
    fn run(&mut self, f: impl FnOnce()) {
        let split = self.next_split();
        let t0 = self.trying().then(std::time::Instant::now);
        if split {
            f()
        } else {
            nx::raw::on_this_thread(f)
        }
        if let Some(t0) = t0 {
            self.record(split, t0.elapsed().as_secs_f64());
        }
    }

    /// Counts one trial run of `secs`, split or not; decides after the
    /// last.
    pub(super) fn record(&mut self, split: bool, secs: f64) {
        let best = &mut self.best[split as usize];
        *best = if self.runs < 2 { secs } else { best.min(secs) };
        self.runs += 1;
        if self.runs == 2 * self.trials {
            self.decided = Some(self.best[1] < 0.9 * self.best[0]);
        }
    }
}

/// One step of a loop body's plan, resolved to places.
pub(super) enum Call<'p> {
    Kernel {
        entry: &'p KernelEntry,
        places: Vec<Place>,
        work: usize,
    },
    /// A product written straight into its place.
    Product {
        prim: &'p Prim,
        inputs: Vec<Place>,
        out: Place,
        /// The product's size in bytes.
        bytes: usize,
    },
    Library {
        prim: &'p Prim,
        inputs: Vec<Place>,
        /// Index into [`Frame::lib`].
        out: usize,
    },
    /// A loop inside the body, with its own compiled body.
    Loop {
        lp: &'p Loop,
        body: &'p Program,
        inputs: Vec<Place>,
        /// Indices into [`Frame::lib`], one per output.
        outs: Vec<usize>,
    },
}

/// Runs loop `lp` with its compiled `body` on the loop equation's inputs
/// (consts, initial carries, stacked xs); returns the final carries, then
/// the per-step outputs stacked along axis 0.
///
/// `dests` (one per output, or empty) are the buffers the outputs are
/// written into, where the caller planned them (its arena's slots); the
/// others are fresh buffers. `scratch` (one per carry, or empty: fresh
/// ones) are the carries' second buffers: each carry's steps write its
/// final buffer and its scratch one alternately, the last step the final
/// one, so that a loop whose buffers are all planned allocates nothing.
///
/// The body's plan is resolved once into places (no tensor, lock or
/// allocation per kernel call): a kernel computing a carry or a per-step
/// output writes it in place (the carry's next buffer, the output's row);
/// library steps make fresh tensors; outputs that are copies of other
/// values (an input passed through, a value returned twice, a library
/// result) are copied after the step.
///
/// The loop's own buffers (carries, outputs, scratch) are written through
/// their addresses without their storage's lock: no one else holds them
/// until the loop returns them (the caller's arena slots are its own).
/// Inputs are only read.
pub(super) fn run_loop(
    lp: &Loop,
    body: &Program,
    ins: &[&Tensor],
    dests: &[Option<(Tensor, *mut u8)>],
    scratch: &[(Tensor, *mut u8)],
) -> Vec<Tensor> {
    // A body running its first tier takes the second once built.
    if body.upgrading.get() {
        body.attach_built(false);
    }
    let g = &body.graph;
    let (nk, nc) = (lp.n_consts, lp.n_carry);
    let bytes = |a: &nx::Aval| a.numel() * a.dtype.size_in_bytes();
    let row_bytes = |t: &Tensor| bytes(&t.aval()) / t.shape()[0].max(1);
    let fresh = |a: &nx::Aval| addressed(nx::raw::alloc(a.dtype, &a.shape));
    let out_avals = lp.out_avals();
    // Output `o`'s buffer: its destination, else a fresh one.
    let dest = |o: usize| match dests.get(o) {
        Some(Some((t, p))) => (t.clone(), *p),
        _ => fresh(&out_avals[o]),
    };
    debug_assert!(lp.length > 0, "a loop runs at least one step");
    // The steps of the last one's parity write carry buffer 1 (the final
    // one), the others buffer 2: the first writes 1 when the steps after
    // it are even in number.
    let first_out = if (lp.length - 1).is_multiple_of(2) {
        1
    } else {
        2
    };
    let mut frame = Frame {
        fixed: Vec::new(),
        carries: [
            ins[nk..nk + nc]
                .iter()
                .map(|t| addressed(contiguous(t)))
                .collect(),
            (0..nc).map(dest).collect(),
            (0..nc)
                .map(|c| match scratch.get(c) {
                    Some((t, p)) => (t.clone(), *p),
                    None => fresh(&out_avals[c]),
                })
                .collect(),
        ],
        xs: ins[nk + nc..]
            .iter()
            .map(|x| {
                let (t, p) = addressed(contiguous(x));
                let r = row_bytes(&t);
                (t, p, r)
            })
            .collect(),
        ys: (nc..out_avals.len())
            .map(|o| {
                let (t, p) = dest(o);
                let a = &out_avals[o];
                let r = bytes(a) / a.shape[0].max(1);
                (t, p, r)
            })
            .collect(),
        lib: Vec::new(),
        rings: Vec::new(),
    };
    let mut place: Vec<Option<Place>> = vec![None; g.avals.len()];
    for (i, &v) in g.inputs.iter().enumerate() {
        place[v] = Some(if i < nk {
            frame.fixed.push(addressed(contiguous(ins[i])));
            Place::Fixed(frame.fixed.len() - 1)
        } else if i < nk + nc {
            Place::CarryIn(i - nk)
        } else {
            Place::X(i - nk - nc)
        });
    }
    for (v, t, d) in &body.consts {
        frame
            .fixed
            .push(addressed(d.clone().unwrap_or_else(|| t.clone())));
        place[*v] = Some(Place::Fixed(frame.fixed.len() - 1));
    }
    // Kernel outputs: an output of the body in place (its first), else
    // the body's arena, else a buffer of this call. Library results are
    // this step's tensors.
    let mut homed: Vec<Var> = Vec::new();
    for step in &body.plan.steps {
        match step {
            Step::Kernel { .. } | Step::Library { .. } if !written_in_place(g, step).is_empty() => {
                for &out in written_in_place(g, step) {
                    let home = g.outputs.iter().position(|&o| o == out);
                    place[out] = Some(match (home, &body.arena_views[out]) {
                        (Some(o), _) if place[out].is_none() => {
                            homed.push(out);
                            if o < nc {
                                Place::CarryOut(o)
                            } else {
                                Place::Y(o - nc)
                            }
                        }
                        (_, Some(view)) => {
                            frame
                                .fixed
                                .push((view.clone(), body.arena_ptrs[out].expect("a slot")));
                            Place::Fixed(frame.fixed.len() - 1)
                        }
                        _ => {
                            frame.fixed.push(fresh(g.aval(out)));
                            Place::Fixed(frame.fixed.len() - 1)
                        }
                    });
                }
            }
            Step::Kernel { .. } => {}
            Step::Library { eqn } => {
                for &o in &g.eqns[*eqn].outs {
                    place[o] = Some(Place::Lib(frame.lib.len()));
                    frame.lib.push(None);
                }
            }
        }
    }
    // A body whose rows are independent runs in bands of rows, else one
    // that splits into stages in a pipeline (decided at its first call:
    // it depends on the body alone); each gets buffers of its own for the
    // values it computes (rings where stages cross).
    let mode = body
        .loop_mode
        .get_or_init(|| match Shards::of(lp, body, &place) {
            Some(sh) => LoopMode::Bands(sh),
            None => Stages::of(lp, body, &place).map_or(LoopMode::OneThread, LoopMode::Stages),
        });
    match mode {
        LoopMode::Bands(sh) => sh.place_buffers(body, &mut frame, &mut place),
        LoopMode::Stages(st) => st.place_buffers(body, &mut frame, &mut place),
        LoopMode::OneThread => {}
    }
    let placed = |v: Var| place[v].expect("tolk: a loop body's value without a place");
    let body_kernels = body.kernels.borrow();
    let calls: Vec<(usize, Call<'_>)> = body
        .plan
        .steps
        .iter()
        .zip(&body.work)
        .enumerate()
        .filter_map(|(s, (step, &work))| match step {
            Step::Kernel { kernel, outs, args } => (g.aval(outs[0]).numel() > 0).then(|| {
                let call = Call::Kernel {
                    entry: &body_kernels[*kernel],
                    places: outs.iter().chain(args).map(|&v| placed(v)).collect(),
                    work,
                };
                (s, call)
            }),
            Step::Library { eqn } => {
                let e = &g.eqns[*eqn];
                let lib = |v: Var| match placed(v) {
                    Place::Lib(k) => k,
                    _ => unreachable!("a library result"),
                };
                let inputs = e.inputs.iter().map(|&v| placed(v)).collect();
                let call = match &e.op {
                    Op::Prim(prim @ Prim::DotGeneral { .. }) => Call::Product {
                        prim,
                        inputs,
                        out: placed(e.out()),
                        bytes: bytes(g.aval(e.out())),
                    },
                    Op::Prim(prim) => Call::Library {
                        prim,
                        inputs,
                        out: lib(e.outs[0]),
                    },
                    Op::Loop(lp) => Call::Loop {
                        lp,
                        body: body.body_of(*eqn),
                        inputs,
                        outs: e.outs.iter().map(|&v| lib(v)).collect(),
                    },
                };
                Some((s, call))
            }
        })
        .collect();
    // Outputs not written in place are copied after each step.
    let copies: Vec<OutputCopy> = g
        .outputs
        .iter()
        .enumerate()
        .filter(|&(o, v)| {
            let first = g.outputs.iter().position(|u| u == v) == Some(o);
            !(first && homed.contains(v))
        })
        .map(|(o, &v)| {
            let home = if o < nc {
                Place::CarryOut(o)
            } else {
                Place::Y(o - nc)
            };
            OutputCopy {
                output: o,
                from: placed(v),
                to: home,
                bytes: bytes(g.aval(v)),
            }
        })
        .collect();
    // Gathered indices: the loop's consts (and the body's failing
    // constants) once, carries and per-step inputs at every step.
    let (once, per_step): (Vec<_>, Vec<_>) = body
        .index_checks
        .iter()
        .map(|c| (c, placed(c.base)))
        .partition(|(_, p)| matches!(p, Place::Fixed(_)));
    for (c, p) in once {
        c.check(&frame.tensor(p, &Cursor::new(lp, first_out, 0)));
    }
    let staged = matches!(mode, LoopMode::Stages(_));
    if let LoopMode::Bands(sh) = mode {
        debug_assert!(per_step.is_empty(), "a row-sharded body checks no indices");
        STEPS_ON_THREADS.with(|n| n.set([n.get()[0] + lp.length as u64, n.get()[1]]));
        sh.run(lp, first_out, &frame, &calls, &copies);
    } else if let (LoopMode::Stages(st), true) = (mode, body.stage_tuner.get().next_split()) {
        debug_assert!(per_step.is_empty(), "a pipelined body checks no indices");
        STEPS_ON_THREADS.with(|n| n.set([n.get()[0], n.get()[1] + lp.length as u64]));
        let t0 = std::time::Instant::now();
        st.run(lp, first_out, &frame, &calls, &copies);
        tune_stages(body, true, t0);
    } else {
        let t0 = std::time::Instant::now();
        let mut tuners = body.split_tuners.borrow_mut();
        let mut ptrs: Vec<*mut u8> = Vec::new();
        for i in 0..lp.length {
            let at = Cursor::new(lp, first_out, i);
            for (c, p) in &per_step {
                c.check(&frame.tensor(*p, &at));
            }
            for (s, call) in &calls {
                match call {
                    Call::Kernel { .. } | Call::Product { .. } => {
                        run_compiled(call, &frame, &at, &mut ptrs, Some(&mut tuners[*s]))
                    }
                    Call::Library { prim, inputs, out } => {
                        let args: Vec<Tensor> =
                            inputs.iter().map(|&p| frame.tensor(p, &at)).collect();
                        let refs: Vec<&Tensor> = args.iter().collect();
                        let result = contiguous(&nx::raw::eval((*prim).clone(), &refs));
                        frame.lib[*out] = Some(addressed(result));
                    }
                    Call::Loop {
                        lp,
                        body,
                        inputs,
                        outs,
                    } => {
                        let args: Vec<Tensor> =
                            inputs.iter().map(|&p| frame.tensor(p, &at)).collect();
                        let refs: Vec<&Tensor> = args.iter().collect();
                        for (&k, t) in outs.iter().zip(run_loop(lp, body, &refs, &[], &[])) {
                            frame.lib[k] = Some(addressed(t));
                        }
                    }
                }
            }
            for copy in &copies {
                copy.run(&frame, &at);
            }
            for l in frame.lib.iter_mut() {
                *l = None;
            }
        }
        if staged {
            tune_stages(body, false, t0);
        }
    }
    // The last step wrote the final buffers.
    debug_assert!(Cursor::new(lp, first_out, lp.length - 1).carry_out == 1);
    let [_, last, _] = frame.carries;
    let mut outs: Vec<Tensor> = last.into_iter().map(|(t, _)| t).collect();
    outs.extend(frame.ys.into_iter().map(|(t, _, _)| t));
    outs
}

/// How a loop's steps run, decided once per body (`Program::loop_mode`).
pub(super) enum LoopMode {
    /// One loop per band of rows ([`super::loop_shards`]).
    Bands(Shards),
    /// In stages, pipelined when the tuner finds it faster
    /// ([`super::loop_stages`]).
    Stages(Stages),
    /// On the calling thread, each step's products and large kernels split
    /// or not ([`SplitTuner`]).
    OneThread,
}

thread_local! {
    /// Steps run in bands and pipelined by loops called from this thread.
    static STEPS_ON_THREADS: std::cell::Cell<[u64; 2]> = const { std::cell::Cell::new([0; 2]) };
}

/// How many steps of staged loops this thread's calls have run in bands of
/// rows on several threads (each band's steps counted once): for tests
/// that check a loop took that path.
#[doc(hidden)]
pub fn sharded_steps() -> u64 {
    STEPS_ON_THREADS.with(|n| n.get()[0])
}

/// How many steps of staged loops this thread's calls have run in stages
/// on two threads: for tests that check a loop took that path.
#[doc(hidden)]
pub fn pipelined_steps() -> u64 {
    STEPS_ON_THREADS.with(|n| n.get()[1])
}

/// Counts a call of a loop that splits into stages, run pipelined or on
/// this thread from `t0`, while its body's tuner is still trying.
fn tune_stages(body: &Program, pipelined: bool, t0: std::time::Instant) {
    let mut tuner = body.stage_tuner.get();
    if tuner.trying() {
        tuner.record(pipelined, t0.elapsed().as_secs_f64());
        if !tuner.trying() && std::env::var_os("TOLK_DUMP").is_some() {
            eprintln!(
                "tolk: a loop in stages runs {} (fastest call {:.1} us on one thread, {:.1} us pipelined)",
                if tuner.next_split() { "pipelined" } else { "on one thread" },
                tuner.best[0] * 1e6,
                tuner.best[1] * 1e6
            );
        }
        body.stage_tuner.set(tuner);
    }
}

/// An output of a loop's body copied after each step into its place.
pub(super) struct OutputCopy {
    /// Which output of the body.
    pub output: usize,
    pub from: Place,
    pub to: Place,
    pub bytes: usize,
}

impl OutputCopy {
    /// Copies at step `at`.
    pub(super) fn run(&self, frame: &Frame, at: &Cursor) {
        self.run_range(frame, at, 0..self.bytes);
    }

    /// Copies bytes `r` of the value at step `at`.
    pub(super) fn run_range(&self, frame: &Frame, at: &Cursor, r: std::ops::Range<usize>) {
        assert!(
            r.start <= r.end && r.end <= self.bytes,
            "tolk: a copy's range"
        );
        // SAFETY: both places address `bytes` bytes (the value's aval) of
        // live buffers, `r` lies inside them, and they differ: the
        // destination is the next carry buffer or an output row, which only
        // this copy writes in this step, and the source is another value's
        // buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(
                frame.at(self.from, at).wrapping_add(r.start),
                frame.at(self.to, at).wrapping_add(r.start),
                r.len(),
            )
        };
    }
}

/// Runs a kernel or a product of a loop's body at step `at`: split across
/// the pool or not as `tuner` decides, else as the kernel's size says
/// (inline, inside a pipelined loop's stages).
pub(super) fn run_compiled(
    call: &Call<'_>,
    frame: &Frame,
    at: &Cursor,
    ptrs: &mut Vec<*mut u8>,
    tuner: Option<&mut SplitTuner>,
) {
    match call {
        Call::Kernel {
            entry,
            places,
            work,
        } => {
            ptrs.clear();
            ptrs.extend(places.iter().map(|&p| frame.at(p, at)));
            match tuner {
                Some(tuner) if *work >= PAR_MIN => tuner.run(|| call_kernel(entry, ptrs, *work)),
                _ => call_kernel(entry, ptrs, *work),
            }
        }
        Call::Product {
            prim, inputs, out, ..
        } => {
            // A product's two operands, with no vector per step.
            let (lhs, rhs) = (frame.tensor(inputs[0], at), frame.tensor(inputs[1], at));
            let refs = [&lhs, &rhs];
            let dst = frame.at(*out, at);
            // SAFETY: `dst` is the product's own place (an arena slot, a
            // buffer of this call, the next carry, this step's output row
            // or ring slot), sized for it and shared with no value live at
            // this step, its operands included.
            let product = || unsafe { nx::raw::dot_general_to(prim, &refs, dst) };
            match tuner {
                Some(tuner) => tuner.run(product),
                None => product(),
            }
        }
        Call::Library { .. } | Call::Loop { .. } => {
            unreachable!("tolk: a library step or loop run as compiled code")
        }
    }
}

/// Row `t` of `x` along axis 0, as a view without that axis.
fn row(x: &Tensor, t: usize) -> Tensor {
    nx::raw::eval(
        Prim::Reshape {
            shape: x.shape()[1..].to_vec(),
        },
        &[&rows(x, t..t + 1)],
    )
}

/// Rows `r` of `x` along axis 0, as a view.
pub(super) fn rows(x: &Tensor, r: std::ops::Range<usize>) -> Tensor {
    let shape = x.shape();
    let mut start = vec![0; shape.len()];
    start[0] = r.start;
    let mut end = shape.to_vec();
    end[0] = r.end;
    let step = vec![1; shape.len()];
    nx::raw::eval(Prim::Slice { start, end, step }, &[x])
}

#[cfg(test)]
mod tests {
    use super::SplitTuner;

    /// Trials alternate (one thread first), the fastest of each way counts,
    /// and the split wins only when a tenth faster.
    #[test]
    fn the_tuner_splits_only_when_a_tenth_faster() {
        let decide = |one: f64, split: f64| {
            let mut t = SplitTuner::default();
            for i in 0..2 * SplitTuner::default().trials {
                let s = i % 2 == 1;
                assert_eq!(t.decided.unwrap_or(t.runs % 2 == 1), s, "trial {i}");
                // A slow first run of each way does not count against it.
                let secs = if i < 2 {
                    1.0
                } else if s {
                    split
                } else {
                    one
                };
                t.record(s, secs);
            }
            t.decided
        };
        assert_eq!(decide(10e-6, 8e-6), Some(true));
        assert_eq!(decide(10e-6, 9.5e-6), Some(false));
        assert_eq!(decide(6e-6, 7e-6), Some(false));
    }
}
