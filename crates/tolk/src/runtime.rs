//! Running a compiled program: its plan of steps over buffers.
//!
//! Buffers are nx tensors. Contiguous inputs and constants are read in
//! place; a non-contiguous one is copied for the kernels that read it
//! (kernels are compiled for contiguous buffers), while library steps read
//! it as it is, as eager does (a reduction over a strided view sums in a
//! different order than over its contiguous copy).
//!
//! Intermediates that kernels, products and staged loops write live in the
//! program's arena: one buffer allocated with the program and kept across
//! calls, cut into slots; each value is assigned at compile time to a slot
//! that no value alive at the same time uses (`ArenaLayout`). Kernels write
//! and read arena values through the slots' addresses, with no allocation
//! and no lock; a product writes its slot through
//! `nx::raw::dot_general_to`; a loop writes its final carries and stacked
//! outputs into their slots and alternates each carry with a scratch slot
//! of its own, so a steady-state call allocates its outputs and nothing
//! else. Outputs and writeback values (and values that an output is a view
//! of) are fresh buffers every call, computed in place by their kernel;
//! other library steps (a sort, a convolution, ...) allocate their results
//! from nx's caching allocator, and every buffer that is not in the arena
//! is dropped at its last use. Writebacks are replayed into the caller's
//! input tensors after the steps.
//!
//! This file owns `Program` and its `run`; apart from it: the arena's
//! memory planner (`arena`), the background build and the eager first
//! call (`background`), and the loop interpreter (`loop_interp`).

mod arena;
mod background;
mod loop_interp;
mod loop_shards;
mod loop_stages;
pub use background::tier_switches;
pub use loop_interp::{pipelined_steps, sharded_steps};

use arena::written_in_place;
pub(crate) use arena::ArenaLayout;
pub(crate) use background::Build;
use loop_interp::run_loop;

use crate::graph::{Graph, Op, Var};
use crate::index_check::IndexCheck;
use crate::load::{KernelFn, Lazy, Loaded};
use crate::plan::{Plan, Step};
use nx::raw::{COMPILED_PAR_CHUNK as PAR_CHUNK, PAR_MIN};
use nx::{Prim, Tensor};
use std::cell::{Cell, RefCell};
use std::sync::Arc;

/// A compiled kernel as the runtime calls it.
#[derive(Clone)]
pub(crate) struct KernelEntry {
    pub f: KernelFn,
    /// Its exact form (function `.1` of the lazily built code), run over
    /// the whole range when `f` reports a failed guard.
    pub exact: Option<(Arc<Lazy>, usize)>,
    /// Extent of the kernel's outer loop.
    pub outer: usize,
    /// The dtypes of its outputs, all of shape `shape`.
    pub out_dtypes: Vec<nx::DType>,
    pub shape: Vec<usize>,
}

/// A compiled program, ready to run.
pub struct Program {
    pub(crate) graph: Graph,
    pub(crate) plan: Plan,
    /// The kernels' entry points (none while `compiling`).
    pub(crate) kernels: RefCell<Vec<KernelEntry>>,
    /// Keeps the kernels' code mapped (shared by [`Program::instance`]s).
    loaded: RefCell<Option<Arc<Loaded>>>,
    /// The build of a program whose first call may run eagerly
    /// ([`crate::Options::quick_first`]), until its code is attached.
    compiling: RefCell<Option<Build>>,
    /// Whether the program has run (only its first call may run eagerly).
    ran: Cell<bool>,
    /// The build in `compiling` replaces code the program already runs
    /// (tier 0 by tier 1, [`crate::TIER_MIN_SOURCE`]): calls never wait
    /// for it, and attach it once it has finished.
    upgrading: Cell<bool>,
    /// Constants as captured (library steps read them as they are, like
    /// eager) and, for the non-contiguous ones, a contiguous copy made once
    /// at compile time (what kernels read).
    consts: Vec<(Var, Tensor, Option<Tensor>)>,
    /// The arena (kept alive: `arena_views` and `arena_ptrs` point into it).
    _arena: nx::raw::Slab,
    /// Per variable living in the arena: its tensor (a view of its slot)
    /// and the slot's address.
    arena_views: Vec<Option<Tensor>>,
    arena_ptrs: Vec<Option<*mut u8>>,
    /// Per step: a loop step's second buffer per carry, in its arena slot
    /// (written alternately with the carry's final buffer; empty for other
    /// steps, and in sanitized builds, where the loop allocates them).
    carry_scratch: Vec<Vec<(Tensor, *mut u8)>>,
    /// Per step: the elements a kernel step visits ([`step_work`]).
    work: Vec<usize>,
    /// Reused argument array of kernel calls.
    scratch: RefCell<Vec<*mut u8>>,
    /// Per step, when this program is a staged loop's body: whether the
    /// step splits across the pool or runs on the calling thread
    /// ([`loop_interp::SplitTuner`]), kept across calls.
    split_tuners: RefCell<Vec<loop_interp::SplitTuner>>,
    /// When this program is a pipelined loop's body: the buffers of the
    /// values its stages compute ([`loop_stages::Stages::place_buffers`]),
    /// kept across calls.
    loop_buffers: RefCell<Vec<Tensor>>,
    /// When this program is the body of a loop that splits into stages:
    /// whether its calls run pipelined, chosen by timing its first calls
    /// both ways ([`loop_interp::SplitTuner::for_calls`]).
    stage_tuner: Cell<loop_interp::SplitTuner>,
    /// When this program is a loop's body: how its steps run (in bands, in
    /// stages, on one thread), decided at its first call.
    loop_mode: std::cell::OnceCell<loop_interp::LoopMode>,
    slots: RefCell<Vec<Option<Tensor>>>,
    /// Contiguous copies of non-contiguous slots (inputs, constants) for
    /// kernels, which address their arguments as dense row-major buffers.
    dense: RefCell<Vec<Option<Tensor>>>,
    /// Per loop equation (by index): its compiled body.
    pub(crate) bodies: Vec<(usize, Program)>,
    /// The indices of the gathers run inside kernels, checked before any
    /// kernel runs: those read from inputs each call; a constant's only
    /// when it failed (checked once, when the program is made).
    index_checks: Vec<IndexCheck>,
    /// Per step: seconds spent and calls, when `TOLK_PROFILE` is set
    /// (printed, slowest first, when the program is dropped).
    profile: Option<RefCell<Vec<(f64, u64)>>>,
}

// SAFETY: the raw pointers a program holds (`arena_ptrs`, and `scratch`
// between calls) address its own arena, which moves with it; nothing else
// is tied to the thread that built it (tensors, kernel function pointers
// and the loaded library are all `Send`). Running needs `&self` and the
// `RefCell`s keep the program `!Sync`: one thread runs it at a time.
unsafe impl Send for Program {}

/// The argument array of one kernel call, shared by the threads running
/// its parts.
struct Args<'a>(&'a [*mut u8]);
// SAFETY: the pointers address buffers that outlive the call (their guards
// are held by the caller, or they are slabs of the program's arena, which
// no other thread sees); parts read the inputs and write disjoint ranges
// of the output.
unsafe impl Sync for Args<'_> {}

impl Args<'_> {
    fn as_ptr(&self) -> *const *mut u8 {
        self.0.as_ptr()
    }
}

fn contiguous(t: &Tensor) -> Tensor {
    if t.is_contiguous() {
        t.clone()
    } else {
        nx::raw::eval(Prim::Copy, &[t])
    }
}

impl Program {
    /// A program of `plan`'s steps, its kernels doing `weights[k]` work per
    /// point ([`crate::fuse::Kernel::weight`]), with their code or without
    /// (attached later).
    pub(crate) fn new(
        graph: Graph,
        plan: Plan,
        weights: &[usize],
        kernels: Vec<KernelEntry>,
        loaded: Option<Loaded>,
    ) -> Program {
        let work = step_work(&graph, &plan, weights);
        Program::with_code(graph, plan, work, kernels, loaded.map(Arc::new))
    }

    /// Gives a program built without code (`new` with no kernels) its
    /// compiled kernels.
    pub(crate) fn attach_code(&mut self, kernels: Vec<KernelEntry>, loaded: Loaded) {
        *self.kernels.get_mut() = kernels;
        *self.loaded.get_mut() = Some(Arc::new(loaded));
    }

    /// Another instance of this program: the same compiled code, with its
    /// own arena and call state, so that two threads can run the same
    /// program at once (pmap's devices), one instance each.
    pub fn instance(&self) -> Program {
        self.finish_compiling();
        let mut p = Program::with_code(
            self.graph.clone(),
            self.plan.clone(),
            self.work.clone(),
            self.kernels.borrow().clone(),
            self.loaded.borrow().clone(),
        );
        p.bodies = self
            .bodies
            .iter()
            .map(|(e, b)| (*e, b.instance()))
            .collect();
        p
    }

    fn with_code(
        graph: Graph,
        plan: Plan,
        work: Vec<usize>,
        kernels: Vec<KernelEntry>,
        loaded: Option<Arc<Loaded>>,
    ) -> Program {
        let consts = graph
            .consts
            .iter()
            .map(|(v, t)| (*v, t.clone(), (!t.is_contiguous()).then(|| contiguous(t))))
            .collect();
        let n = graph.avals.len();
        let layout = ArenaLayout::new(&graph, &plan);
        // One allocation: slot `i` starts at `offsets[i]` (64-byte aligned,
        // as nx's own buffers).
        let mut offsets = Vec::with_capacity(layout.slab_bytes.len());
        let mut total = 0;
        for &b in &layout.slab_bytes {
            offsets.push(total);
            total += b.next_multiple_of(64);
        }
        let arena = nx::raw::Slab::new(total);
        let index_checks = IndexCheck::per_call(&graph, &plan);
        let mut arena_views = vec![None; n];
        let mut arena_ptrs = vec![None; n];
        for (v, slot) in layout.slab_of.iter().enumerate() {
            if let Some(i) = *slot {
                let a = graph.aval(v);
                arena_views[v] = Some(arena.view(offsets[i], a.dtype, &a.shape));
                // In bounds: `offsets[i] + slab_bytes[i] <= total`.
                arena_ptrs[v] = Some(arena.ptr().wrapping_add(offsets[i]));
            }
        }
        let carry_scratch = plan
            .steps
            .iter()
            .zip(&layout.carry_scratch)
            .map(|(step, slabs)| match step {
                Step::Library { eqn } => slabs
                    .iter()
                    .zip(&graph.eqns[*eqn].outs)
                    .map(|(&i, &c)| {
                        let a = graph.aval(c);
                        // In bounds, as above.
                        let p = arena.ptr().wrapping_add(offsets[i]);
                        (arena.view(offsets[i], a.dtype, &a.shape), p)
                    })
                    .collect(),
                Step::Kernel { .. } => Vec::new(),
            })
            .collect();
        let n_steps = plan.steps.len();
        Program {
            work,
            graph,
            kernels: RefCell::new(kernels),
            loaded: RefCell::new(loaded),
            compiling: RefCell::new(None),
            ran: Cell::new(false),
            upgrading: Cell::new(false),
            consts,
            _arena: arena,
            arena_views,
            arena_ptrs,
            carry_scratch,
            scratch: RefCell::new(Vec::new()),
            split_tuners: RefCell::new(vec![Default::default(); n_steps]),
            loop_buffers: RefCell::new(Vec::new()),
            stage_tuner: Cell::new(loop_interp::SplitTuner::for_calls()),
            loop_mode: std::cell::OnceCell::new(),
            slots: RefCell::new(vec![None; n]),
            dense: RefCell::new(vec![None; n]),
            bodies: Vec::new(),
            index_checks,
            profile: std::env::var_os("TOLK_PROFILE")
                .map(|_| RefCell::new(vec![(0.0, 0); n_steps])),
            plan,
        }
    }

    /// Number of distinct compiled kernels.
    pub fn num_kernels(&self) -> usize {
        self.plan
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Kernel { kernel, .. } => Some(kernel + 1),
                Step::Library { .. } => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// Number of steps in the plan.
    pub fn num_steps(&self) -> usize {
        self.plan.steps.len()
    }

    /// The primitives (or `scan`s) the plan runs as library steps, by name,
    /// in program order: what did not compile into a kernel. A loop's
    /// body's follow its `scan`, prefixed `scan/`.
    pub fn library_steps(&self) -> Vec<String> {
        let mut names = Vec::new();
        for step in &self.plan.steps {
            if let Step::Library { eqn } = step {
                names.push(self.graph.eqns[*eqn].name());
                if let Op::Loop(_) = self.graph.eqns[*eqn].op {
                    let body = self.body_of(*eqn).library_steps();
                    names.extend(body.into_iter().map(|n| format!("scan/{n}")));
                }
            }
        }
        names
    }

    /// The compiled body of loop equation `eqn`.
    fn body_of(&self, eqn: usize) -> &Program {
        self.bodies
            .iter()
            .find(|(i, _)| *i == eqn)
            .map(|(_, b)| b)
            .expect("tolk: a loop without its compiled body")
    }

    /// The simplified graph this program runs.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Runs the program on `inputs` (one per graph input, matching its
    /// avals), replays the writebacks into them, and returns the outputs.
    ///
    /// Panics, naming the input, if there are not as many inputs as the
    /// graph has or one's dtype or shape differs from its aval: the
    /// compiled kernels address their buffers by those shapes.
    pub fn run(&self, inputs: &[Tensor]) -> Vec<Tensor> {
        let g = &self.graph;
        assert_eq!(
            inputs.len(),
            g.inputs.len(),
            "tolk: Program::run takes {} inputs, got {}",
            g.inputs.len(),
            inputs.len()
        );
        for (i, (t, &v)) in inputs.iter().zip(&g.inputs).enumerate() {
            let a = g.aval(v);
            if t.dtype() != a.dtype || t.shape() != a.shape.as_slice() {
                panic!(
                    "tolk: Program::run: input {i} is {}{:?}, the program was compiled for {}{:?}",
                    t.dtype(),
                    t.shape(),
                    a.dtype,
                    a.shape
                );
            }
        }
        // A program still compiling runs its first call eagerly; later
        // calls wait for its code. One running its first tier takes the
        // second once built, never waiting.
        if self.upgrading.get() {
            self.attach_built(false);
        } else if !self.attach_built(self.ran.replace(true)) {
            return self.run_eagerly(inputs);
        }
        let kernels = self.kernels.borrow();
        let mut slots = self.slots.borrow_mut();
        let mut dense = self.dense.borrow_mut();
        // Inputs and constants stay as they are for library steps (so a
        // reduction or product of a strided input takes the same path, and
        // sums in the same order, as eager); kernels get contiguous copies,
        // made on first use.
        for (&v, t) in g.inputs.iter().zip(inputs) {
            slots[v] = Some(t.clone());
        }
        for (v, t, d) in &self.consts {
            slots[*v] = Some(t.clone());
            dense[*v] = d.clone();
        }
        for c in &self.index_checks {
            c.check(slots[c.base].as_ref().unwrap());
        }
        for (s, step) in self.plan.steps.iter().enumerate() {
            let started = self.profile.as_ref().map(|_| std::time::Instant::now());
            match step {
                Step::Kernel { kernel, outs, args } => {
                    let entry = &kernels[*kernel];
                    // The outputs go straight to their slots (no list of
                    // them per call: this is every kernel step of every call).
                    for (&v, &dt) in outs.iter().zip(&entry.out_dtypes) {
                        slots[v] = Some(match &self.arena_views[v] {
                            Some(t) => t.clone(),
                            None => nx::raw::alloc(dt, &entry.shape),
                        });
                    }
                    if nx::shape::numel(&entry.shape) > 0 {
                        for a in args {
                            let t = slots[*a].as_ref().unwrap();
                            if dense[*a].is_none() && !t.is_contiguous() {
                                dense[*a] = Some(contiguous(t));
                            }
                        }
                        // Arena values are addressed through their slab;
                        // every other buffer under its storage's lock.
                        let mut guards = Vec::new();
                        let mut writes = Vec::new();
                        let mut ptrs = self.scratch.borrow_mut();
                        ptrs.clear();
                        for &v in outs {
                            match self.arena_ptrs[v] {
                                Some(p) => ptrs.push(p),
                                None => {
                                    let w = nx::raw::write(slots[v].as_ref().unwrap());
                                    ptrs.push(w.ptr());
                                    writes.push(w);
                                }
                            }
                        }
                        for a in args {
                            match self.arena_ptrs[*a] {
                                Some(p) => ptrs.push(p),
                                None => {
                                    let t = dense[*a].as_ref().or(slots[*a].as_ref()).unwrap();
                                    let r = nx::raw::read(t);
                                    ptrs.push(r.ptr() as *mut u8);
                                    guards.push(r);
                                }
                            }
                        }
                        call_kernel(entry, &ptrs, self.work[s]);
                    }
                }
                Step::Library { eqn } => {
                    if let Op::Loop(lp) = &g.eqns[*eqn].op {
                        let e = &g.eqns[*eqn];
                        let body = self.body_of(*eqn);
                        let ins: Vec<&Tensor> = e
                            .inputs
                            .iter()
                            .map(|a| slots[*a].as_ref().unwrap())
                            .collect();
                        // The loop writes its outputs into their arena
                        // slots (fresh buffers for the program's outputs).
                        let dests: Vec<Option<(Tensor, *mut u8)>> = e
                            .outs
                            .iter()
                            .map(|&v| {
                                let t = self.arena_views[v].clone()?;
                                Some((t, self.arena_ptrs[v]?))
                            })
                            .collect();
                        let outs = run_loop(lp, body, &ins, &dests, &self.carry_scratch[s]);
                        for (&v, t) in e.outs.iter().zip(outs) {
                            slots[v] = Some(t);
                        }
                    } else {
                        let e = &g.eqns[*eqn];
                        let out = {
                            let ins: Vec<&Tensor> = e
                                .inputs
                                .iter()
                                .map(|a| slots[*a].as_ref().unwrap())
                                .collect();
                            let prim = e.as_prim().expect("tolk: loops are handled above");
                            if let (Prim::DotGeneral { .. }, Some(p)) =
                                (prim, self.arena_ptrs[e.out()])
                            {
                                // SAFETY: `p` is the product's arena slot,
                                // sized for it; no value live at this step
                                // (its operands included) shares the slot,
                                // and only this thread touches the arena.
                                unsafe { nx::raw::dot_general_to(prim, &ins, p) };
                                self.arena_views[e.out()].clone().unwrap()
                            } else {
                                self.eval_library(prim, &ins)
                            }
                        };
                        slots[e.out()] = Some(out);
                    }
                }
            }
            if let (Some(p), Some(t)) = (&self.profile, started) {
                let mut p = p.borrow_mut();
                p[s].0 += t.elapsed().as_secs_f64();
                p[s].1 += 1;
            }
            for &v in &self.plan.frees[s] {
                slots[v] = None;
            }
        }
        for &(i, v) in &g.writebacks {
            if g.inputs[i] != v {
                let src = slots[v].as_ref().unwrap();
                nx::raw::eval(Prim::Assign, &[&inputs[i], src]);
            }
        }
        let outs = g
            .outputs
            .iter()
            .map(|v| slots[*v].clone().expect("tolk: output not computed"))
            .collect();
        for s in slots.iter_mut() {
            *s = None;
        }
        for s in dense.iter_mut() {
            *s = None;
        }
        outs
    }
}

impl Program {
    /// A library step's result by nx's eager kernel.
    fn eval_library(&self, prim: &Prim, ins: &[&Tensor]) -> Tensor {
        let out = nx::raw::eval(prim.clone(), ins);
        // Only movement steps may return a view of an input (the arena
        // layout extends their sources' lifetimes); any other result is
        // fresh.
        debug_assert!(
            prim.class() == nx::PrimClass::View
                || ins.iter().all(|t| !nx::raw::shares_storage(t, &out)),
            "tolk: {} returned a view of its input",
            prim.name()
        );
        out
    }

    /// `TOLK_PROFILE`'s report: each step's mean time, slowest first; the
    /// 24 slowest, or as many as `TOLK_PROFILE` says when it is a number.
    fn print_profile(&self, times: &[(f64, u64)]) {
        let shown = std::env::var("TOLK_PROFILE")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&n| n > 1)
            .unwrap_or(24);
        let total: f64 = times.iter().map(|t| t.0).sum();
        let calls = times.iter().map(|t| t.1).max().unwrap_or(0);
        if calls == 0 {
            return;
        }
        eprintln!(
            "tolk profile: {} steps, {calls} calls, {:.1} µs per call",
            times.len(),
            total / calls as f64 * 1e6
        );
        let mut order: Vec<usize> = (0..times.len()).collect();
        order.sort_by(|&a, &b| times[b].0.total_cmp(&times[a].0));
        for s in order.into_iter().take(shown) {
            let what = match &self.plan.steps[s] {
                Step::Kernel { kernel, outs, .. } => {
                    let entry = &self.kernels.borrow()[*kernel];
                    format!(
                        "kernel {kernel} {:?} -> {:?}",
                        entry.shape,
                        self.graph.aval(outs[0]).shape
                    )
                }
                Step::Library { eqn } => {
                    let e = &self.graph.eqns[*eqn];
                    let shape = |v: &Var| self.graph.aval(*v).shape.clone();
                    let ins: Vec<_> = e.inputs.iter().map(shape).collect();
                    format!("library {} {ins:?} -> {:?}", e.name(), shape(&e.outs[0]))
                }
            };
            eprintln!(
                "  step {s:3}: {:8.1} µs  {what}",
                times[s].0 / calls as f64 * 1e6
            );
        }
    }
}

impl Drop for Program {
    /// A program dropped while its C compiles waits for the build, so that
    /// it lands in the disk cache (a process that called it once and exits
    /// finds it there next time) and no compiler outlives the process.
    fn drop(&mut self) {
        if let Some(build) = self.compiling.get_mut().take() {
            let _ = build.join();
        }
        if let Some(p) = self.profile.take() {
            self.print_profile(&p.into_inner());
        }
    }
}

/// Per step of `plan`, about how much work a kernel step does: the number
/// of elements it visits (its outputs' size or its largest argument's,
/// whichever is more: a reduction's work is its input's, a bias gradient
/// sums [128, 512] into [512]) times its kernel's work per element
/// (`weights`, [`crate::fuse::Kernel::weight`] by kernel); 0 for other
/// steps.
pub(crate) fn step_work(g: &Graph, plan: &Plan, weights: &[usize]) -> Vec<usize> {
    plan.steps
        .iter()
        .map(|step| match step {
            Step::Kernel { kernel, outs, args } => {
                let points = outs
                    .iter()
                    .chain(args)
                    .map(|&v| g.aval(v).numel())
                    .fold(0, usize::max);
                points * weights[*kernel]
            }
            _ => 0,
        })
        .collect()
}

/// How many parts a kernel visiting `work` elements (at least `PAR_MIN`)
/// over an outer loop of `outer` is split into on `threads` threads: parts
/// of about `PAR_CHUNK` elements, at least one per thread, at most one per
/// outer index.
fn kernel_parts(work: usize, outer: usize, threads: usize) -> usize {
    (work / PAR_CHUNK).max(threads).min(outer)
}

/// Runs a kernel that visits about `work` elements, split over nx's pool
/// when that is at least `PAR_MIN`: into parts of about `PAR_CHUNK`
/// elements, at least one per thread.
fn call_kernel(entry: &KernelEntry, ptrs: &[*mut u8], work: usize) {
    if call_parts(entry.f, entry.outer, ptrs, work) {
        let (code, i) = entry
            .exact
            .as_ref()
            .expect("tolk: a kernel without guarded forms reported a failed guard");
        // The exact form rewrites every element, the same bits wherever
        // the fast forms were in range.
        call_parts(code.get(*i), entry.outer, ptrs, work);
    }
}

/// Runs points `lo..hi` of a kernel's outer loop on this thread (a band of
/// a row-sharded loop): its exact form over the same range when a fast
/// form reports a failed guard.
fn call_kernel_range(entry: &KernelEntry, ptrs: &[*mut u8], lo: usize, hi: usize) {
    debug_assert!(lo <= hi && hi <= entry.outer);
    let args = Args(ptrs);
    // SAFETY: as in `call_parts`: `args` holds the kernel's buffers, and
    // `lo..hi` lies inside its outer loop.
    let failed = unsafe { (entry.f)(args.as_ptr(), lo as i64, hi as i64) } != 0;
    if failed {
        let (code, i) = entry
            .exact
            .as_ref()
            .expect("tolk: a kernel without guarded forms reported a failed guard");
        // SAFETY: as above.
        unsafe { (code.get(*i))(args.as_ptr(), lo as i64, hi as i64) };
    }
}

/// Runs `f` over `0..outer`, split across threads when its work is large;
/// whether any part reported a failed guard.
fn call_parts(f: KernelFn, outer: usize, ptrs: &[*mut u8], work: usize) -> bool {
    let args = Args(ptrs);
    if work < PAR_MIN || outer < 2 {
        // SAFETY: `args` holds the output and every argument buffer, each
        // of the size and dtype the kernel was compiled for (the plan
        // allocates outputs from the kernel's own shape; inputs match the
        // graph's avals, checked by `Program::run`), and the kernel reads
        // and writes only within `0..outer` of its loop nest.
        return unsafe { f(args.as_ptr(), 0, outer as i64) } != 0;
    }
    let parts = kernel_parts(work, outer, nx::num_threads());
    let args = &args;
    let failed = std::sync::atomic::AtomicBool::new(false);
    nx::raw::parallel_for(parts, &|p| {
        let lo = outer * p / parts;
        let hi = outer * (p + 1) / parts;
        // SAFETY: as above; parts cover disjoint ranges of the outer loop.
        if unsafe { f(args.as_ptr(), lo as i64, hi as i64) } != 0 {
            failed.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    });
    failed.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Eqn;
    use nx::{Aval, DType};

    #[test]
    fn kernels_split_into_long_parts_at_least_one_per_thread() {
        // 4M elements in 16 parts of 2^18 (not 256 of 2^14).
        assert_eq!(kernel_parts(1 << 22, 1 << 22, 2), 16);
        // Just above the threshold: one part per thread.
        assert_eq!(kernel_parts(PAR_MIN, PAR_MIN, 2), 2);
        assert_eq!(kernel_parts(PAR_MIN, PAR_MIN, 8), 8);
        // Never more parts than outer indices.
        assert_eq!(kernel_parts(1 << 22, 3, 8), 3);
    }

    pub(super) fn kernel(out: Var, args: &[Var]) -> Step {
        Step::Kernel {
            kernel: 0,
            outs: vec![out],
            args: args.to_vec(),
        }
    }

    /// A reduction's work is its input's size: [128, 512] summed into [512]
    /// visits 64K elements, enough to split over the pool.
    #[test]
    fn a_kernel_step_visits_its_largest_buffer() {
        let mut g = Graph::default();
        let x = g.new_var(Aval::new(&[128, 512], DType::F32));
        let sum = g.new_var(Aval::new(&[512], DType::F32));
        let y = g.new_var(Aval::new(&[4, 512], DType::F32));
        g.inputs = vec![x];
        g.outputs = vec![sum, y];
        let steps = vec![kernel(sum, &[x]), kernel(y, &[sum])];
        let plan = Plan {
            frees: vec![Vec::new(); steps.len()],
            steps,
        };
        assert_eq!(step_work(&g, &plan, &[1]), vec![128 * 512, 4 * 512]);
        assert!(step_work(&g, &plan, &[1])[0] >= PAR_MIN);
    }

    /// A step's work is its points times its kernel's weight: a short
    /// vector under a long transcendental chain reaches the split threshold
    /// that its length alone would not.
    #[test]
    fn a_kernel_steps_work_is_its_points_times_its_weight() {
        let mut g = Graph::default();
        let x = g.new_var(Aval::new(&[256], DType::F32));
        let y = g.new_var(Aval::new(&[256], DType::F32));
        g.inputs = vec![x];
        g.outputs = vec![y];
        let steps = vec![kernel(y, &[x])];
        let plan = Plan {
            frees: vec![Vec::new(); steps.len()],
            steps,
        };
        assert_eq!(step_work(&g, &plan, &[1]), vec![256]);
        assert_eq!(step_work(&g, &plan, &[300]), vec![256 * 300]);
        assert!(256 < PAR_MIN && 256 * 300 >= PAR_MIN);
    }

    /// A long chain of transcendentals over a short vector starts eager
    /// (`Options::quick_first`) and still splits its kernel by its weight:
    /// its step work is the same as when compiled before its first call,
    /// and every call gives the compiled program's bits.
    #[test]
    fn a_program_that_starts_eager_has_its_kernels_weights() {
        use nx::UnaryOp::{Exp, Sin, Tanh};
        let mut g = Graph::default();
        let x = g.new_var(Aval::new(&[256], DType::F32));
        g.inputs = vec![x];
        let mut h = x;
        for i in 0..240 {
            let y = g.new_var(Aval::new(&[256], DType::F32));
            let op = [Sin, Tanh, Exp][i % 3];
            g.eqns.push(Eqn::prim(nx::Prim::Unary(op), vec![h], y));
            h = y;
        }
        g.outputs = vec![h];
        let compile = |quick_first| {
            let opts = crate::Options {
                use_cache: false,
                stream_min_bytes: None,
                quick_first,
            };
            crate::compile_with(g.clone(), &opts).expect("a C compiler")
        };
        let (first, eager) = (compile(false), compile(true));
        assert!(!first.eager_first && eager.eager_first);
        assert_eq!(eager.program.work, first.program.work);
        assert!(first.program.work[0] >= PAR_MIN && 256 < PAR_MIN);
        let xs = Tensor::from_slice(&[0.5f32; 256], &[256]);
        let want = first.program.run(std::slice::from_ref(&xs))[0].to_vec::<f32>();
        for _ in 0..2 {
            let got = eager.program.run(std::slice::from_ref(&xs));
            assert_eq!(got[0].to_vec::<f32>(), want);
        }
    }

    /// Inputs of another dtype or shape than the graph's are refused before
    /// any kernel runs (the kernels address buffers by the compiled shapes).
    #[test]
    fn run_refuses_inputs_of_another_dtype_or_shape() {
        let mut g = Graph::default();
        let x = g.new_var(Aval::new(&[3], DType::F32));
        let y = g.new_var(Aval::new(&[3], DType::F32));
        g.inputs = vec![x];
        g.eqns
            .push(Eqn::prim(nx::Prim::Unary(nx::UnaryOp::Exp), vec![x], y));
        g.outputs = vec![y];
        let p = crate::compile(g, false).expect("a C compiler").program;
        let ok = Tensor::from_slice(&[0.0f32, 1.0, 2.0], &[3]);
        assert_eq!(
            p.run(&[ok.clone()])[0].to_vec::<f32>(),
            ok.exp().to_vec::<f32>()
        );
        let message = |t: Tensor| {
            let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| p.run(&[t])))
                .expect_err("a panic");
            e.downcast_ref::<String>().cloned().unwrap_or_default()
        };
        let m = message(Tensor::from_slice(&[0.0f64, 1.0, 2.0], &[3]));
        assert!(
            m.contains("input 0 is f64[3]") && m.contains("compiled for f32[3]"),
            "{m}"
        );
        let m = message(Tensor::from_slice(&[0.0f32; 8], &[8]));
        assert!(m.contains("input 0 is f32[8]"), "{m}");
        let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| p.run(&[])));
        assert!(e.is_err(), "a missing input");
    }
}
