//! Pipelined loops: a staged loop's body split into stages that run on
//! two threads at once, each step's values handed one way only.
//!
//! A step of a loop has a critical path: what computes the next carry from
//! this one. A scan RNN's forward step is `tanh(h @ W + x_t @ U + b)`, and
//! only `h @ W` and the `tanh` wait for the previous step; `x_t @ U` could
//! run any time. Its backward step computes the next `dh` from `dh @ Wᵀ`,
//! and the weight gradients' sums (`dW += hᵀ dz`, `dU += xᵀ dz`) are
//! carries nothing else reads. Splitting each product across cores makes
//! every step hand its carry from core to core and back, which costs more
//! than it saves on some hosts (see [`super::loop_interp::SplitTuner`]).
//! Here the body's calls are parted instead, by what they depend on:
//!
//! - [`Stage::Pre`]: calls that read no carry (only the loop's consts and
//!   this step's slices): they can run ahead;
//! - [`Stage::Core`]: calls needed to compute the *core* carries, those in
//!   the carry graph's source components (no carry outside a core carry's
//!   own cycle feeds it);
//! - [`Stage::Post`]: the rest, the other carries and per-step outputs,
//!   which can run behind.
//!
//! The calling thread runs the core stage in order; a second thread runs
//! pre stages ahead and post stages behind. A value one stage computes and
//! a later one reads lives in a ring of [`RING`] slots (slot `i % RING` at
//! step `i`), and no stage runs more than `RING` steps ahead of its
//! readers. Every call computes exactly what the one-thread loop computes
//! from the same inputs (its own product, its own kernel over its whole
//! range), so the results are bit for bit the same; only the thread and the
//! time differ.
//!
//! The two threads claim steps, so nothing waits on a thread that has not
//! started (nx's pool runs the parts in order when its worker is busy): the
//! calling thread runs a pre stage itself when the other has not claimed
//! it, and post stages when it would otherwise wait for a ring slot or the
//! end. Only bodies of kernels and products are pipelined, with no index
//! checks, whose rows are not independent (those run in bands,
//! [`super::loop_shards`]), and only when the work off the critical path
//! is worth a thread ([`MIN_OFF_CORE`]); and then only if the body's first
//! calls, alternating with one-thread runs, show the pipeline faster on
//! this host (`Program::stage_tuner`): the values a stage hands over cross
//! between cores (16 KB took about 3 us on a 2-vCPU Intel Xeon).

use super::loop_interp::{run_compiled, Call, Cursor, Frame, OutputCopy, Place};
use super::Program;
use crate::graph::{Loop, Op, Var};
use crate::plan::Step;
use nx::Prim;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Slots of a ring: how many steps a stage may run ahead of the stage
/// that reads its values.
pub(super) const RING: usize = 4;

/// Work per step (multiply-adds times two for products, elements visited
/// for kernels) off the critical path below which a loop runs on one
/// thread: about a microsecond of one core's work, less than a step's
/// handoff between cores costs.
const MIN_OFF_CORE: usize = 1 << 18;

/// The most memory a loop's rings may take: past it, the values handed
/// between stages are too large for a step to gain from overlapping.
const MAX_RING_BYTES: usize = 16 << 20;

/// Which part of a pipelined loop's step a call belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Stage {
    Pre = 0,
    Core = 1,
    Post = 2,
}

/// How a loop body splits into stages (see the module's doc).
pub(super) struct Stages {
    /// Per step of the body's plan.
    step: Vec<Stage>,
    /// Per output of the body: the stage that copies it there, when it is
    /// not written in place.
    output: Vec<Stage>,
    /// Values computed in one stage and read in a later one: in rings.
    crossing: Vec<Var>,
    /// The other values the stages compute into buffers of the body's:
    /// one buffer each (the body's arena shares slots between values the
    /// stages now compute at the same time).
    private: Vec<Var>,
    /// Whether a post stage reads a value the pre stage computed (then the
    /// pre stage waits for the post stage, too, before reusing a slot).
    pre_feeds_post: bool,
}

impl Stages {
    /// How `lp`'s body splits, given where its values are placed; `None`
    /// when it runs on one thread.
    pub(super) fn of(lp: &Loop, body: &Program, place: &[Option<Place>]) -> Option<Stages> {
        let g = &body.graph;
        let (nk, nc) = (lp.n_consts, lp.n_carry);
        if nc == 0 || nc > 64 || lp.length < 2 * RING || nx::num_threads() < 2 {
            return None;
        }
        if !body.index_checks.is_empty() || one_thread() {
            return None;
        }
        let steps = &body.plan.steps;
        // Each step's inputs and outputs; only kernels and products.
        let mut io: Vec<(&[Var], &[Var])> = Vec::with_capacity(steps.len());
        for step in steps {
            io.push(match step {
                Step::Kernel { outs, args, .. } => (args, outs),
                Step::Library { eqn } => {
                    let e = &g.eqns[*eqn];
                    if !matches!(e.op, Op::Prim(Prim::DotGeneral { .. })) {
                        return None;
                    }
                    (&e.inputs, &e.outs)
                }
            });
        }
        // Which carries (as the step receives them) each value depends
        // on, and which step computes it.
        let n = g.avals.len();
        let mut carries_of = vec![0u64; n];
        let mut producer: Vec<Option<usize>> = vec![None; n];
        let carry_in = |v: Var| g.inputs[nk..nk + nc].iter().position(|&u| u == v);
        for c in 0..nc {
            carries_of[g.inputs[nk + c]] |= 1 << c;
        }
        for (s, (ins, outs)) in io.iter().enumerate() {
            let m = ins.iter().fold(0, |m, &v| m | carries_of[v]);
            for &o in outs.iter() {
                carries_of[o] = m;
                producer[o] = Some(s);
            }
        }
        // Carry `c`'s new value depends on `into[c]`'s old values, through
        // any number of steps; `c` is core when every carry feeding it is
        // fed by it (its cycle is a source of the carry graph).
        let mut into: Vec<u64> = (0..nc).map(|c| carries_of[g.outputs[c]]).collect();
        loop {
            let mut changed = false;
            for c in 0..nc {
                let m = bits(into[c]).fold(into[c], |m, d| m | into[d]);
                changed |= m != into[c];
                into[c] = m;
            }
            if !changed {
                break;
            }
        }
        let core: u64 = (0..nc)
            .filter(|&c| bits(into[c]).all(|d| into[d] >> c & 1 == 1))
            .fold(0, |m, c| m | 1 << c);
        let carry_stage = |c: usize| {
            if core >> c & 1 == 1 {
                Stage::Core
            } else {
                Stage::Post
            }
        };
        // The steps the core carries need.
        let mut needed = vec![false; steps.len()];
        let mut seen = vec![false; n];
        let mut stack: Vec<Var> = bits(core).map(|c| g.outputs[c]).collect();
        while let Some(v) = stack.pop() {
            if std::mem::replace(&mut seen[v], true) {
                continue;
            }
            if let Some(s) = producer[v] {
                needed[s] = true;
                stack.extend_from_slice(io[s].0);
            }
        }
        let step: Vec<Stage> = io
            .iter()
            .enumerate()
            .map(|(s, (ins, _))| {
                if ins.iter().all(|&v| carries_of[v] == 0) {
                    Stage::Pre
                } else if needed[s] {
                    Stage::Core
                } else {
                    Stage::Post
                }
            })
            .collect();
        // The stage that computes (or owns) a value, if any.
        let stage_of = |v: Var| match producer[v] {
            Some(s) => Some(step[s]),
            None => carry_in(v).map(carry_stage),
        };
        // A reader in stage `r` of `v`: whether it may read it, and the
        // values that must go in rings.
        let mut crossing: Vec<Var> = Vec::new();
        let mut pre_feeds_post = false;
        let mut read = |v: Var, r: Stage| -> bool {
            let Some(w) = stage_of(v) else {
                return true; // a const or a slice of this step
            };
            if w == r {
                return true;
            }
            if w > r || producer[v].is_none() {
                return false; // a later stage's value, another stage's carry
            }
            match place[v] {
                Some(Place::Fixed(_)) => {
                    if !crossing.contains(&v) {
                        crossing.push(v);
                    }
                    pre_feeds_post |= w == Stage::Pre && r == Stage::Post;
                    true
                }
                // A row of a stacked output stays until the loop ends.
                Some(Place::Y(_)) => true,
                // The next carry buffer is overwritten two steps later.
                _ => false,
            }
        };
        for (s, (ins, outs)) in io.iter().enumerate() {
            if !ins.iter().all(|&v| read(v, step[s])) {
                return None;
            }
            // A step writes only its own stage's carries.
            for &o in outs.iter() {
                if let Some(Place::CarryOut(c)) = place[o] {
                    if carry_stage(c) != step[s] {
                        return None;
                    }
                }
            }
        }
        let output: Vec<Stage> = g
            .outputs
            .iter()
            .enumerate()
            .map(|(o, &v)| {
                if o < nc {
                    carry_stage(o)
                } else {
                    stage_of(v).unwrap_or(Stage::Core)
                }
            })
            .collect();
        for (&v, &st) in g.outputs.iter().zip(&output) {
            if !read(v, st) {
                return None;
            }
        }
        let has = |st: Stage| step.contains(&st) || output.contains(&st);
        if !has(Stage::Pre) && !has(Stage::Post) {
            return None;
        }
        // Worth a thread: enough work off the critical path.
        let off_core: usize = steps
            .iter()
            .zip(&step)
            .zip(&body.work)
            .filter(|&((_, &st), _)| st != Stage::Core)
            .map(|((s, _), &work)| match s {
                Step::Kernel { .. } => work,
                Step::Library { eqn } => product_flops(&g.eqns[*eqn], g),
            })
            .sum();
        if off_core < MIN_OFF_CORE {
            return None;
        }
        // Pre stages of different steps may run at once, on either
        // thread: every value they compute gets a slot per step.
        let mut private = Vec::new();
        for v in 0..n {
            let Some(s) = producer[v] else { continue };
            if matches!(place[v], Some(Place::Fixed(_))) && !crossing.contains(&v) {
                if step[s] == Stage::Pre {
                    crossing.push(v);
                } else {
                    private.push(v);
                }
            }
        }
        // Rings hold RING copies of what crosses: not for large values.
        let ring_bytes: usize = crossing
            .iter()
            .map(|&v| RING * g.aval(v).numel() * g.aval(v).dtype.size_in_bytes())
            .sum();
        if ring_bytes > MAX_RING_BYTES {
            return None;
        }
        Some(Stages {
            step,
            output,
            crossing,
            private,
            pre_feeds_post,
        })
    }

    /// Places the values the stages compute in buffers of their own,
    /// allocated at the body's first pipelined run and kept across calls
    /// (`Program::loop_buffers`): rings for the crossing ones.
    pub(super) fn place_buffers(
        &self,
        body: &Program,
        frame: &mut Frame,
        place: &mut [Option<Place>],
    ) {
        let g = &body.graph;
        let shapes: Vec<(nx::DType, Vec<usize>)> = self
            .crossing
            .iter()
            .map(|&v| {
                let a = g.aval(v);
                let mut shape = vec![RING];
                shape.extend_from_slice(&a.shape);
                (a.dtype, shape)
            })
            .chain(self.private.iter().map(|&v| {
                let a = g.aval(v);
                (a.dtype, a.shape.clone())
            }))
            .collect();
        let kept = kept_buffers(body, shapes);
        let (rings, private) = kept.split_at(self.crossing.len());
        for (&v, t) in self.crossing.iter().zip(rings) {
            let a = g.aval(v);
            let slot = a.numel() * a.dtype.size_in_bytes();
            place[v] = Some(Place::Ring(frame.add_ring(t.clone(), slot)));
        }
        for (&v, t) in self.private.iter().zip(private) {
            place[v] = Some(Place::Fixed(frame.add_fixed(t.clone())));
        }
    }

    /// Runs every step of the loop, the core stages on this thread and the
    /// others wherever they are claimed first (see the module's doc).
    pub(super) fn run(
        &self,
        lp: &Loop,
        first_out: usize,
        frame: &Frame,
        calls: &[(usize, Call<'_>)],
        copies: &[OutputCopy],
    ) {
        let mut parts: [(Vec<&Call<'_>>, Vec<&OutputCopy>); 3] = Default::default();
        for (s, call) in calls {
            parts[self.step[*s] as usize].0.push(call);
        }
        for copy in copies {
            parts[self.output[copy.output] as usize].1.push(copy);
        }
        let pipe = Pipe {
            lp,
            first_out,
            frame,
            parts,
            pre: (0..lp.length).map(|_| AtomicU8::new(FREE)).collect(),
            core_done: AtomicUsize::new(0),
            post: AtomicUsize::new(0),
            failed: AtomicBool::new(false),
            pre_feeds_post: self.pre_feeds_post,
        };
        let pipe = &pipe;
        nx::raw::parallel_for(2, &|part| {
            // Every call runs inline on the thread of its stage.
            nx::raw::on_this_thread(|| {
                let _flag = FailFlag(&pipe.failed);
                if part == 0 {
                    pipe.lead()
                } else {
                    pipe.help()
                }
            })
        });
    }
}

/// Buffers of `shapes` for a loop body's values, kept across calls in
/// `Program::loop_buffers`: allocated at the body's first run (or when the
/// shapes differ from the kept ones), so that later calls allocate nothing.
pub(super) fn kept_buffers(
    body: &Program,
    shapes: Vec<(nx::DType, Vec<usize>)>,
) -> Vec<nx::Tensor> {
    let mut kept = body.loop_buffers.borrow_mut();
    let fits = kept.len() == shapes.len()
        && kept
            .iter()
            .zip(&shapes)
            .all(|(t, (d, s))| t.dtype() == *d && t.shape() == &s[..]);
    if !fits {
        *kept = shapes.iter().map(|(d, s)| nx::raw::alloc(*d, s)).collect();
    }
    kept.clone()
}

/// Whether `TOLK_LOOPS_ONE_THREAD` is set (read once): staged loops then
/// run on the calling thread alone, neither in bands of rows nor in
/// stages, for measuring what those gain.
pub(super) fn one_thread() -> bool {
    static ONE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ONE.get_or_init(|| std::env::var_os("TOLK_LOOPS_ONE_THREAD").is_some())
}

/// A product's multiply-adds times two (its flops as `cost_analysis`
/// counts them).
pub(super) fn product_flops(e: &crate::graph::Eqn, g: &crate::graph::Graph) -> usize {
    match &e.op {
        Op::Prim(prim) => crate::cost::prim_cost(g, prim, &e.inputs, e.out()).flops as usize,
        Op::Loop(_) => 0,
    }
}

/// The set bits of `m`.
fn bits(m: u64) -> impl Iterator<Item = usize> {
    (0..64).filter(move |&c| m >> c & 1 == 1)
}

/// A pre stage's state.
const FREE: u8 = 0;
const CLAIMED: u8 = 1;
const DONE: u8 = 2;

/// One run of a pipelined loop, shared by its two threads.
struct Pipe<'a, 'p> {
    lp: &'a Loop,
    first_out: usize,
    frame: &'a Frame,
    /// Per stage: its calls and copies, in the body's order.
    parts: [(Vec<&'a Call<'p>>, Vec<&'a OutputCopy>); 3],
    /// Per step: its pre stage's state.
    pre: Vec<AtomicU8>,
    /// Core stages done (they run in order, on the calling thread).
    core_done: AtomicUsize,
    /// Twice the post stages done, plus one while one runs (they run in
    /// order, one at a time, on either thread).
    post: AtomicUsize,
    /// Set when a stage panicked: the other thread stops waiting.
    failed: AtomicBool,
    pre_feeds_post: bool,
}

// SAFETY: the threads share the frame's buffers under the stages'
// discipline: a stage writes only its own values (its carries' buffers,
// its rows of stacked outputs, its ring slots and its private buffers),
// and a ring slot is rewritten only after every stage reading it has
// finished that step (the waits in `lead` and `help`, whose atomics order
// the writes before the reads). The calls hold kernels and products only
// (`Stages::of` admits no other), whose entries and primitives are
// read-only.
unsafe impl Sync for Pipe<'_, '_> {}

impl Pipe<'_, '_> {
    fn has(&self, st: Stage) -> bool {
        let (calls, copies) = &self.parts[st as usize];
        !calls.is_empty() || !copies.is_empty()
    }

    /// Runs stage `st` of step `i`.
    fn stage(&self, st: Stage, i: usize, ptrs: &mut Vec<*mut u8>) {
        let at = Cursor::new(self.lp, self.first_out, i);
        let (calls, copies) = &self.parts[st as usize];
        for call in calls {
            run_compiled(call, self.frame, &at, ptrs, None);
        }
        for copy in copies {
            copy.run(self.frame, &at);
        }
    }

    fn post_done(&self) -> usize {
        self.post.load(Ordering::Acquire) / 2
    }

    /// Runs pre stage `i` if no one has claimed it and its ring slots are
    /// free; whether it ran.
    fn try_pre(&self, i: usize, ptrs: &mut Vec<*mut u8>) -> bool {
        let free = i < self.core_done.load(Ordering::Acquire) + RING
            && (!self.pre_feeds_post || i < self.post_done() + RING);
        if !free
            || self.pre[i]
                .compare_exchange(FREE, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return false;
        }
        self.stage(Stage::Pre, i, ptrs);
        self.pre[i].store(DONE, Ordering::Release);
        true
    }

    /// Runs the next post stage if its core stage is done and no one runs
    /// one; whether it ran.
    fn try_post(&self, ptrs: &mut Vec<*mut u8>) -> bool {
        let s = self.post.load(Ordering::Acquire);
        let i = s / 2;
        if s % 2 == 1
            || i >= self.lp.length
            || i >= self.core_done.load(Ordering::Acquire)
            || self
                .post
                .compare_exchange(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return false;
        }
        self.stage(Stage::Post, i, ptrs);
        self.post.store(s + 2, Ordering::Release);
        true
    }

    /// The calling thread: every core stage in order, the pre stages the
    /// other thread has not claimed, and post stages while it waits.
    fn lead(&self) {
        let mut ptrs = Vec::new();
        let has_post = self.has(Stage::Post);
        for i in 0..self.lp.length {
            // Step `i`'s ring slots held step `i - RING`'s values.
            let mut wait = Wait::new();
            while has_post && self.post_done() + RING <= i {
                if !self.try_post(&mut ptrs) && !wait.spin(&self.failed) {
                    return;
                }
            }
            let mut wait = Wait::new();
            while self.has(Stage::Pre) && self.pre[i].load(Ordering::Acquire) != DONE {
                if !self.try_pre(i, &mut ptrs) && !wait.spin(&self.failed) {
                    return;
                }
            }
            self.stage(Stage::Core, i, &mut ptrs);
            self.core_done.store(i + 1, Ordering::Release);
        }
        let mut wait = Wait::new();
        while has_post && self.post_done() < self.lp.length {
            if !self.try_post(&mut ptrs) && !wait.spin(&self.failed) {
                return;
            }
        }
    }

    /// The other thread: pre stages ahead of the core, post stages behind
    /// it, until every stage is done.
    fn help(&self) {
        let mut ptrs = Vec::new();
        let (has_pre, has_post) = (self.has(Stage::Pre), self.has(Stage::Post));
        let mut next_pre = 0;
        let mut wait = Wait::new();
        loop {
            while has_pre
                && next_pre < self.lp.length
                && self.pre[next_pre].load(Ordering::Acquire) != FREE
            {
                next_pre += 1;
            }
            let pres_left = has_pre && next_pre < self.lp.length;
            let posts_left = has_post && self.post_done() < self.lp.length;
            if !pres_left && !posts_left {
                return;
            }
            // A pre stage the core is about to need first, then post
            // stages, then pre stages further ahead.
            let soon = next_pre <= self.core_done.load(Ordering::Acquire) + 1;
            let ran = (pres_left && soon && self.try_pre(next_pre, &mut ptrs))
                || (posts_left && self.try_post(&mut ptrs))
                || (pres_left && self.try_pre(next_pre, &mut ptrs));
            if ran {
                wait = Wait::new();
            } else if !wait.spin(&self.failed) {
                return;
            }
        }
    }
}

/// Sets its flag when dropped while its thread panics.
struct FailFlag<'a>(&'a AtomicBool);

impl Drop for FailFlag<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Release);
        }
    }
}

/// A wait for the other thread: spinning, then (after a millisecond, in
/// case it was preempted) yielding between checks.
struct Wait(Instant);

impl Wait {
    fn new() -> Wait {
        Wait(Instant::now())
    }

    /// Waits a moment; false when the other thread has failed.
    fn spin(&mut self, failed: &AtomicBool) -> bool {
        if failed.load(Ordering::Acquire) {
            return false;
        }
        if self.0.elapsed() > Duration::from_millis(1) {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
        true
    }
}
