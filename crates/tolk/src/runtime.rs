//! Running a compiled program: its plan of steps over buffers.
//!
//! Buffers are nx tensors. Contiguous inputs and constants are read in
//! place; a non-contiguous one is copied for the kernels that read it
//! (kernels are compiled for contiguous buffers), while library steps read
//! it as it is, as eager does (a reduction over a strided view sums in a
//! different order than over its contiguous copy); each kernel writes a fresh buffer from nx's caching
//! allocator, and a buffer is dropped at its last use (known at compile
//! time), so the next same-sized buffer reuses its memory: the allocator's
//! size buckets are the arena. Outputs are the kernels' buffers themselves.
//! Writebacks are replayed into the caller's input tensors after the steps.
//! A product followed by epilogue steps runs through
//! `nx::raw::dot_general_then`, which calls the epilogue kernels on each
//! block of its output (rows or columns, as nx splits the product across
//! threads) on the thread that computed it; their outputs are allocated
//! before the product starts.

use crate::compile::{KernelFn, Loaded};
use crate::graph::{Graph, Var};
use crate::schedule::Step;
use nx::{Prim, Tensor};
use std::cell::RefCell;
use std::ops::Range;

/// Below this many elements a kernel runs on the calling thread (as nx's
/// eager kernels do).
const PAR_MIN: usize = 1 << 16;
/// Elements per parallel part, about.
const PAR_CHUNK: usize = 1 << 14;

/// What the runtime needs of a schedule: the steps and when buffers die
/// (what the disk cache stores beside the shared object).
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub steps: Vec<Step>,
    pub frees: Vec<Vec<Var>>,
}

/// A compiled kernel as the runtime calls it.
pub(crate) struct KernelEntry {
    pub f: KernelFn,
    /// Extent of the kernel's outer loop.
    pub outer: usize,
    pub out_dtype: nx::DType,
    pub shape: Vec<usize>,
}

/// A compiled program, ready to run.
pub struct Program {
    pub(crate) graph: Graph,
    pub(crate) plan: Plan,
    pub(crate) kernels: Vec<KernelEntry>,
    /// Keeps the kernels' code mapped.
    _loaded: Option<Loaded>,
    /// Constants as captured (library steps read them as they are, like
    /// eager) and, for the non-contiguous ones, a contiguous copy made once
    /// at compile time (what kernels read).
    consts: Vec<(Var, Tensor, Option<Tensor>)>,
    slots: RefCell<Vec<Option<Tensor>>>,
    /// Contiguous copies of non-contiguous slots (inputs, constants) for
    /// kernels, which address their arguments as dense row-major buffers.
    dense: RefCell<Vec<Option<Tensor>>>,
}

/// The argument array of one kernel call, shared by the threads running
/// its parts.
struct Args(Vec<*mut u8>);
// SAFETY: the pointers address buffers that outlive the call (their guards
// are held by the caller); parts read the inputs and write disjoint ranges
// of the output.
unsafe impl Sync for Args {}

fn contiguous(t: &Tensor) -> Tensor {
    if t.is_contiguous() {
        t.clone()
    } else {
        nx::raw::eval(Prim::Copy, &[t])
    }
}

impl Program {
    pub(crate) fn new(
        graph: Graph,
        plan: Plan,
        kernels: Vec<KernelEntry>,
        loaded: Option<Loaded>,
    ) -> Program {
        let consts = graph
            .consts
            .iter()
            .map(|(v, t)| (*v, t.clone(), (!t.is_contiguous()).then(|| contiguous(t))))
            .collect();
        let n = graph.avals.len();
        Program {
            graph,
            plan,
            kernels,
            _loaded: loaded,
            consts,
            slots: RefCell::new(vec![None; n]),
            dense: RefCell::new(vec![None; n]),
        }
    }

    /// Number of distinct compiled kernels.
    pub fn num_kernels(&self) -> usize {
        self.kernels.len()
    }

    /// Number of steps in the plan.
    pub fn num_steps(&self) -> usize {
        self.plan.steps.len()
    }

    /// Number of kernel steps that run as epilogues of a product.
    pub fn num_epilogues(&self) -> usize {
        self.plan
            .steps
            .iter()
            .filter(|s| matches!(s, Step::Epilogue { .. }))
            .count()
    }

    /// The simplified graph this program runs.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Runs the program on `inputs` (one per graph input, matching its
    /// avals), replays the writebacks into them, and returns the outputs.
    pub fn run(&self, inputs: &[Tensor]) -> Vec<Tensor> {
        let g = &self.graph;
        assert_eq!(inputs.len(), g.inputs.len(), "tolk: wrong number of inputs");
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
        let steps = &self.plan.steps;
        let mut s = 0;
        while s < steps.len() {
            let end = match &steps[s] {
                Step::Kernel { kernel, out, args } => {
                    let entry = &self.kernels[*kernel];
                    let o = nx::raw::alloc(entry.out_dtype, &entry.shape);
                    let numel = o.numel();
                    if numel > 0 {
                        for a in args {
                            let t = slots[*a].as_ref().unwrap();
                            if dense[*a].is_none() && !t.is_contiguous() {
                                dense[*a] = Some(contiguous(t));
                            }
                        }
                        let ins: Vec<&Tensor> = args
                            .iter()
                            .map(|a| dense[*a].as_ref().or(slots[*a].as_ref()).unwrap())
                            .collect();
                        call_kernel(entry, &o, &ins, numel);
                    }
                    slots[*out] = Some(o);
                    s + 1
                }
                Step::Library { eqn } => {
                    let epilogues = steps[s + 1..]
                        .iter()
                        .take_while(|t| matches!(t, Step::Epilogue { .. }))
                        .count();
                    if epilogues > 0 {
                        let group = &steps[s + 1..s + 1 + epilogues];
                        self.run_product(&mut slots, &mut dense, *eqn, group);
                    } else {
                        let e = &g.eqns[*eqn];
                        let out = {
                            let ins: Vec<&Tensor> = e
                                .inputs
                                .iter()
                                .map(|a| slots[*a].as_ref().unwrap())
                                .collect();
                            nx::raw::eval(e.prim.clone(), &ins)
                        };
                        slots[e.out] = Some(out);
                    }
                    s + 1 + epilogues
                }
                Step::Epilogue { .. } => unreachable!("tolk: an epilogue without its product"),
            };
            for frees in &self.plan.frees[s..end] {
                for &v in frees {
                    slots[v] = None;
                }
            }
            s = end;
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

/// Where an epilogue argument's buffer comes from while its product runs.
#[derive(Clone, Copy)]
enum Member {
    /// The product's output (its pointer is given per block).
    Product,
    /// The output of epilogue `j` of the same product.
    Epilogue(usize),
}

/// What the threads running a product's blocks need to call its
/// epilogues: per epilogue, its function, its argument array (output
/// first; product-group buffers left null) and which entries to fill in.
struct Epilogues {
    fns: Vec<KernelFn>,
    args: Vec<Vec<*mut u8>>,
    fill: Vec<Vec<(usize, Member)>>,
    outs: Vec<*mut u8>,
}
// SAFETY: the pointers address buffers that outlive the product's call
// (their guards are held by `run_product`); every block writes its own
// elements of the epilogues' outputs and reads only those elements of the
// group's buffers, after the product (and earlier epilogues) wrote them on
// the same thread.
unsafe impl Sync for Epilogues {}

impl Epilogues {
    /// Runs every epilogue over rows `rows` and columns `cols` of the
    /// product's output (first element at `product`).
    fn run(&self, product: *mut u8, rows: Range<usize>, cols: Range<usize>) {
        if rows.is_empty() || cols.is_empty() {
            return;
        }
        let cols = [cols.start as i64, cols.end as i64];
        for (j, f) in self.fns.iter().enumerate() {
            let mut ptrs = self.args[j].clone();
            for &(i, m) in &self.fill[j] {
                ptrs[i] = match m {
                    Member::Product => product,
                    Member::Epilogue(k) => self.outs[k],
                };
            }
            ptrs.push(cols.as_ptr() as *mut u8);
            // SAFETY: as in `call_kernel`: `ptrs` holds the output and
            // every argument buffer of the sizes and dtypes the kernel was
            // compiled for, then the column range, a block of the kernel's
            // `[rows, cols]` iteration space, as are the rows.
            unsafe { f(ptrs.as_ptr(), rows.start as i64, rows.end as i64) };
        }
    }
}

impl Program {
    /// Runs product `eqn` with `group` (its epilogue steps) on each block.
    fn run_product(
        &self,
        slots: &mut [Option<Tensor>],
        dense: &mut [Option<Tensor>],
        eqn: usize,
        group: &[Step],
    ) {
        let e = &self.graph.eqns[eqn];
        let parts: Vec<(&KernelEntry, Var, &[Var])> = group
            .iter()
            .map(|st| match st {
                Step::Epilogue { kernel, out, args } => (&self.kernels[*kernel], *out, &args[..]),
                _ => unreachable!("a product's group holds epilogues"),
            })
            .collect();
        let member = |v: Var, before: usize| -> Option<Member> {
            if v == e.out {
                return Some(Member::Product);
            }
            parts[..before]
                .iter()
                .position(|p| p.1 == v)
                .map(Member::Epilogue)
        };
        for (j, (_, _, args)) in parts.iter().enumerate() {
            for &a in args.iter() {
                if member(a, j).is_none() {
                    let t = slots[a].as_ref().unwrap();
                    if dense[a].is_none() && !t.is_contiguous() {
                        dense[a] = Some(contiguous(t));
                    }
                }
            }
        }
        let outs: Vec<Tensor> = parts
            .iter()
            .map(|(entry, _, _)| nx::raw::alloc(entry.out_dtype, &entry.shape))
            .collect();
        let product = {
            let writes: Vec<nx::raw::WriteView<'_>> = outs.iter().map(nx::raw::write).collect();
            let mut reads: Vec<nx::raw::ReadView<'_>> = Vec::new();
            let mut epi = Epilogues {
                fns: Vec::new(),
                args: Vec::new(),
                fill: Vec::new(),
                outs: writes.iter().map(|w| w.ptr()).collect(),
            };
            for (j, (entry, _, args)) in parts.iter().enumerate() {
                let mut ptrs = vec![epi.outs[j]];
                let mut fill = Vec::new();
                for &a in args.iter() {
                    match member(a, j) {
                        Some(m) => {
                            fill.push((ptrs.len(), m));
                            ptrs.push(std::ptr::null_mut());
                        }
                        None => {
                            let t = dense[a].as_ref().or(slots[a].as_ref()).unwrap();
                            let r = nx::raw::read(t);
                            ptrs.push(r.ptr() as *mut u8);
                            reads.push(r);
                        }
                    }
                }
                epi.fns.push(entry.f);
                epi.args.push(ptrs);
                epi.fill.push(fill);
            }
            let ins: Vec<&Tensor> = e
                .inputs
                .iter()
                .map(|a| slots[*a].as_ref().unwrap())
                .collect();
            nx::raw::dot_general_then(&e.prim, &ins, &|p, r, c| epi.run(p, r, c))
        };
        slots[e.out] = Some(product);
        for ((_, out, _), o) in parts.iter().zip(outs) {
            slots[*out] = Some(o);
        }
    }
}

fn call_kernel(entry: &KernelEntry, out: &Tensor, ins: &[&Tensor], numel: usize) {
    let reads: Vec<nx::raw::ReadView<'_>> = ins.iter().map(|t| nx::raw::read(t)).collect();
    let write = nx::raw::write(out);
    let mut ptrs = Vec::with_capacity(1 + reads.len());
    ptrs.push(write.ptr());
    ptrs.extend(reads.iter().map(|r| r.ptr() as *mut u8));
    let args = Args(ptrs);
    let outer = entry.outer;
    let f = entry.f;
    if numel < PAR_MIN || outer < 2 {
        // SAFETY: `args` holds the output and every argument buffer, each
        // of the size and dtype the kernel was compiled for (the plan
        // allocates outputs from the kernel's own shape; inputs match the
        // graph's avals, checked by the caller's signature lookup), and the
        // kernel reads and writes only within `0..outer` of its loop nest.
        unsafe { f(args.0.as_ptr(), 0, outer as i64) };
        return;
    }
    let parts = numel.div_ceil(PAR_CHUNK).min(outer);
    let args = &args;
    nx::raw::parallel_for(parts, &|p| {
        let lo = outer * p / parts;
        let hi = outer * (p + 1) / parts;
        // SAFETY: as above; parts cover disjoint ranges of the outer loop.
        unsafe { f(args.0.as_ptr(), lo as i64, hi as i64) };
    });
}
