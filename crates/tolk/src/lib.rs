//! tolk: Rune's compiler. It takes a staged [`Graph`] (a typed SSA list of
//! `nx` primitives; never a closure, and it knows nothing of rune) and turns
//! it into a [`Program`] of native kernels and eager library steps.
//!
//! ```
//! use nx::{Aval, DType, Prim, Tensor, UnaryOp, BinaryOp};
//! use tolk::{Eqn, Graph};
//!
//! // y = exp(x) * x, for x: f32[3]
//! let mut g = Graph::default();
//! let x = g.new_var(Aval::new(&[3], DType::F32));
//! let e = g.new_var(Aval::new(&[3], DType::F32));
//! let y = g.new_var(Aval::new(&[3], DType::F32));
//! g.inputs.push(x);
//! g.eqns.push(Eqn::prim(Prim::Unary(UnaryOp::Exp), vec![x], e));
//! g.eqns.push(Eqn::prim(Prim::Binary(BinaryOp::Mul), vec![e, x], y));
//! g.outputs.push(y);
//!
//! let compiled = tolk::compile(g, false).expect("needs a C compiler (cc)");
//! assert_eq!(compiled.program.num_kernels(), 1); // both equations fuse into one loop
//! let xs = Tensor::from_slice(&[0.0f32, 1.0, 2.0], &[3]);
//! let out = compiled.program.run(&[xs.clone()]);
//! assert_eq!(out[0].to_vec::<f32>(), (xs.exp() * &xs).to_vec::<f32>()); // bit for bit
//! ```
//!
//! # Pipeline
//!
//! [`compile()`] (or [`compile_with`]) runs, in order:
//!
//! 1. [`simplify`]: constant folding, common subexpressions, dead code;
//! 2. [`cache`] lookup: a program with the same structure, flags, compiler,
//!    CPU features and executable is loaded from disk (`JITCACHE=0` skips it);
//! 3. [`schedule`]: elementwise and movement ops fuse into [`Kernel`]s
//!    (movement as index arithmetic on each load), and so do reductions
//!    of computed values; the other primitives are library steps run by
//!    nx's eager kernels (`dot_general` through the GEMM crate); the plan
//!    frees each buffer at its last use;
//! 4. [`render`]: each kernel is lowered to a loop nest ([`render::lower`])
//!    and rendered as a C function ([`render::render`]; [`c_ops`] holds the
//!    per-element C, bit-exact with nx's eager kernels); identical C shares
//!    one function;
//! 5. [`compile`](mod@compile): all kernels into one shared object with the
//!    system C compiler (`$CC`, else `cc`), then loaded with `libloading`;
//!    the entry is written to the [`cache`];
//! 6. [`runtime`]: [`Program::run`] executes the plan of steps over buffers
//!    (intermediates in an arena kept with the program).
//!
//! [`shard`] turns one graph into per-device programs and the collectives
//! between them, for rune's `pmap`.
//!
//! [`Kernel`]: schedule::Kernel
#![warn(missing_docs)]

pub mod c_ops;
pub mod cache;
pub mod compile;
pub mod graph;
pub mod render;
pub mod runtime;
pub mod schedule;
pub mod shard;
pub mod simplify;

pub use graph::{Eqn, Graph, Loop, Op, Var};
pub use runtime::Program;

use runtime::{KernelEntry, Plan};
use std::time::Instant;

/// Programs with at least this many kernels are compiled in several
/// translation units at once.
const UNIT_MIN_KERNELS: usize = 16;

/// A kernel is compiled without vectorization (gcc's `-O1`, through the
/// `optimize` attribute) when its work (iteration points times nodes) is at
/// most this and, over all its calls, at most 1/[`SMALL_SHARE`] of the
/// program's (kernels plus library steps, a product counted as its
/// multiply-adds). Vectorizing is most of gcc's time for a small loop
/// (about 20 ms of a function's 25 on this machine), while such a kernel's
/// run time is lost in the program's: W4's step has 12 of them (the
/// softmax over `[128, 10]`, scalars) beside its 513M-flop products. In a
/// program made only of small kernels (the 100-op chain, W7) nothing
/// qualifies, so latency-bound programs keep vectorized, inlined code (gcc
/// does not inline the prelude's helpers into a function with other
/// optimization options). Results are the same bit for bit at either level
/// (no fast-math, so no reassociation).
///
/// A product's multiply-adds count at 1/[`PRODUCT_SPEED`] of a kernel's
/// work point: the GEMM runs them about that much faster than a kernel
/// built at `-O1` runs its points (45 G multiply-adds/s on one core here,
/// against 1.2 G points/s for W9's bias-gradient reduction). Counted at
/// par, a reduction run once per scan step passed as small beside W9's
/// products and was 7% of the T = 1000 run.
const SMALL_WORK: usize = 8192;
const SMALL_SHARE: usize = 200;
const PRODUCT_SPEED: usize = 32;

/// The attribute that compiles a small kernel at `-O1` (gcc only; clang
/// ignores `optimize`, so its kernels all build at the flags' level).
const SMALL_ATTR: &str = "#if defined(__GNUC__) && !defined(__clang__)\n#define TK_SMALL __attribute__((optimize(\"O1\")))\n#else\n#define TK_SMALL\n#endif\n";

/// Where a compiled program came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Loaded from the persistent cache.
    Disk,
    /// Scheduled and compiled in this call.
    Compiled,
}

/// A compiled program and how it was obtained.
pub struct Compiled {
    /// The program, ready to run.
    pub program: Program,
    /// Whether it came from the disk cache or was compiled now.
    pub origin: Origin,
    /// Seconds spent simplifying, scheduling, compiling and loading.
    pub seconds: f64,
    /// Per kernel, the primitives it fused and its C source (filled when
    /// compiled in this call; empty on a disk hit).
    pub kernel_sources: Vec<(Vec<String>, String)>,
}

/// Compiles `graph` for the host CPU, through the persistent cache unless
/// `use_cache` is false (or `JITCACHE=0`). `Err` carries a message for the
/// user (no C compiler, say).
pub fn compile(graph: Graph, use_cache: bool) -> Result<Compiled, String> {
    compile_with(
        graph,
        &Options {
            use_cache,
            epilogues: schedule::epilogues_enabled(),
            stream_min_bytes: schedule::stream_min_bytes(),
        },
    )
}

/// How [`compile_with`] compiles.
#[derive(Clone, Debug)]
pub struct Options {
    /// Through the persistent cache (unless `JITCACHE=0`).
    pub use_cache: bool,
    /// Kernels that read a product's output at the element they write run
    /// as epilogues of the product ([`schedule::Step::Epilogue`]); off, each
    /// is a pass of its own (the results are the same bit for bit).
    /// [`compile()`] turns them on only with `TOLK_EPILOGUE=1`
    /// ([`schedule::epilogues_enabled`] says why).
    pub epilogues: bool,
    /// Maps that write a program output in a pass moving at least this
    /// many bytes store it past the cache ([`schedule::Kernel::stream`]);
    /// `None`: none do. [`compile()`] uses the last-level cache's size
    /// ([`schedule::stream_min_bytes`]). The results are the same bit for bit.
    pub stream_min_bytes: Option<usize>,
}

/// [`compile()`] with explicit [`Options`].
pub fn compile_with(graph: Graph, opts: &Options) -> Result<Compiled, String> {
    let start = Instant::now();
    let g = simplify::simplify(graph);
    // Each loop's body is a program of its own (through the cache like
    // any program), compiled on a thread of its own while this one
    // compiles the rest: the C compilers run concurrently.
    let loops: Vec<(usize, Graph)> = g
        .eqns
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match &e.op {
            Op::Loop(lp) => Some((i, lp.body.clone())),
            Op::Prim(_) => None,
        })
        .collect();
    let (bodies, compiled) = std::thread::scope(|s| {
        let threads: Vec<_> = loops
            .into_iter()
            .map(|(i, body)| s.spawn(move || compile_with(body, opts).map(|c| (i, c.program))))
            .collect();
        let compiled = compile_simplified(g, opts, start);
        let bodies: Result<Vec<(usize, Program)>, String> = threads
            .into_iter()
            .map(|t| t.join().expect("tolk: a compiler thread panicked"))
            .collect();
        (bodies, compiled)
    });
    let mut compiled = compiled?;
    compiled.program.bodies = bodies?;
    Ok(compiled)
}

/// [`compile_with`] of a simplified graph, its loops' bodies aside.
fn compile_simplified(g: Graph, opts: &Options, start: Instant) -> Result<Compiled, String> {
    let t_simplify = start.elapsed().as_secs_f64();
    let cache_dir = if opts.use_cache { cache::dir() } else { None };
    let cc = compile::compiler_identity();
    let mut flags = compile::flags();
    if opts.epilogues {
        flags.push("epilogues");
    }
    let stream = format!("stream>={:?}", opts.stream_min_bytes);
    flags.push(&stream);
    // The key names the cache entry; without a cache it is not needed.
    let key = match &cache_dir {
        Some(_) => cache::key(&g.structure_key(), &flags, cc.as_deref().unwrap_or("none")),
        None => String::new(),
    };
    if let Some(dir) = &cache_dir {
        if let Some(entry) = cache::read(dir, &key) {
            if let Ok(program) = load_entry(&g, dir, &key, entry) {
                return Ok(Compiled {
                    program,
                    origin: Origin::Disk,
                    seconds: start.elapsed().as_secs_f64(),
                    kernel_sources: Vec::new(),
                });
            }
        }
    }
    let t_key = start.elapsed().as_secs_f64();
    let sched = schedule::schedule_with(&g, opts.epilogues, opts.stream_min_bytes);
    let t_schedule = start.elapsed().as_secs_f64();
    let nests: Vec<render::LoopNest> = sched.kernels.iter().map(render::lower).collect();
    // Kernels whose C is the same (the same loop nest over buffers of other
    // shapes that lower to the same loops, as a 1-D elementwise pass of any
    // length does) share one compiled function: `names[i]` is the function
    // kernel `i` calls, and `bodies` holds each distinct function once.
    let mut names: Vec<String> = Vec::with_capacity(sched.kernels.len());
    let mut bodies: Vec<(String, String)> = Vec::new();
    let mut kernel_sources = Vec::new();
    let mut by_text: std::collections::HashMap<String, usize> = Default::default();
    let mut body_of = Vec::with_capacity(sched.kernels.len());
    for (k, nest) in sched.kernels.iter().zip(&nests) {
        let text = render::render("TK_NAME", k, nest);
        let next = bodies.len();
        let f = *by_text.entry(text.clone()).or_insert(next);
        if f == next {
            let name = format!("tk_k{f}");
            bodies.push((name.clone(), text.replace("TK_NAME", &name)));
        }
        body_of.push(f);
        names.push(bodies[f].0.clone());
    }
    let small = small_bodies(&g, &sched, &nests, &body_of, bodies.len());
    for ((_, src), _) in bodies.iter_mut().zip(&small).filter(|(_, s)| **s) {
        *src = src.replace("void tk_", "TK_SMALL void tk_");
    }
    for (k, &f) in sched.kernels.iter().zip(&body_of) {
        kernel_sources.push((k.fused.clone(), bodies[f].1.clone()));
    }
    let mut header = String::from(c_ops::PRELUDE);
    header.push_str(SMALL_ATTR);
    // Programs with many kernels compile as one translation unit per core
    // (concurrent compiler processes), linked into one shared object.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let n_units = if bodies.len() >= UNIT_MIN_KERNELS {
        cores.min(4)
    } else {
        1
    };
    // Bodies go to units largest first, each to the unit with the least
    // estimated work, so that the concurrent compilers finish together.
    // The estimate is the body's loops (gcc's time goes to vectorizing
    // them: a column-tiled reduction, with a dozen, took 70 ms of a W4
    // unit's 110), half as much for a small kernel (`-O1`). Split by the
    // C's length instead, W4's two units took 0.13 and 0.12 s of CPU; by
    // loops 0.11 and 0.10 (the least of 10 compiles each).
    let mut units = vec![header.clone(); n_units];
    let mut load = vec![0usize; n_units];
    let cost = |f: usize| (1 + bodies[f].1.matches("for (").count()) * if small[f] { 1 } else { 2 };
    let mut order: Vec<usize> = (0..bodies.len()).collect();
    order.sort_by_key(|&f| std::cmp::Reverse(cost(f)));
    for f in order {
        let u = (0..n_units).min_by_key(|&u| load[u]).unwrap_or(0);
        load[u] += cost(f);
        units[u].push('\n');
        units[u].push_str(&bodies[f].1);
    }
    let source_len: usize = units.iter().map(|u| u.len()).sum();
    let meta: Vec<(String, usize, nx::DType, Vec<usize>)> = sched
        .kernels
        .iter()
        .zip(&nests)
        .zip(&names)
        .map(|((k, n), name)| (name.clone(), n.outer(), k.out_dtype, k.out_shape().to_vec()))
        .collect();
    // The schedule's steps move into the plan (a long program has
    // thousands; the kernels stay for the code below).
    let plan = Plan {
        steps: sched.steps,
        frees: sched.frees,
    };
    let program = if sched.kernels.is_empty() {
        Program::new(g, plan, Vec::new(), None)
    } else {
        cc?;
        let (dir, scratch) = match &cache_dir {
            Some(d) => (d.clone(), false),
            None => (compile::scratch_dir(), true),
        };
        let so_name = if scratch {
            format!("{}.so", compile::unique_suffix())
        } else {
            format!("{key}.so")
        };
        let so = dir.join(so_name);
        let t_render = start.elapsed().as_secs_f64();
        let n_eqns = g.eqns.len();
        // What the cache keeps beside the shared object (nothing without a
        // cache): taken before the plan moves into the program.
        let cache_entry = (!scratch).then(|| cache::Entry {
            plan: plan.clone(),
            kernels: meta.clone(),
        });
        // The program (its arena: first-touched memory, 16 MiB for W9 at
        // T = 1000) is built while the compiler runs; its code comes after.
        let (built, mut program) = std::thread::scope(|s| {
            let cc = s.spawn(|| compile::build_units(&units, &so, &[]));
            let program = Program::new(g, plan, Vec::new(), None);
            (
                cc.join().expect("tolk: the compiler thread panicked"),
                program,
            )
        });
        built?;
        let t_cc = start.elapsed().as_secs_f64();
        let loaded = compile::load(&so, &names)?;
        match cache_entry {
            // A cache that cannot be written costs the next process a
            // compile, nothing else.
            Some(entry) => {
                let _ = cache::write_meta(&dir, &key, &entry);
                cache::evict_old(&dir);
            }
            // The mapping outlives the file.
            None => {
                let _ = std::fs::remove_file(&so);
            }
        }
        program.attach_code(entries(&loaded, &meta), loaded);
        if std::env::var("TOLK_TIMING").is_ok() {
            let ms = |a: f64, b: f64| (b - a) * 1e3;
            eprintln!(
                "tolk: {} equations; simplify {:.1} ms, cache key and lookup {:.1} ms, \
                 schedule {:.1} ms, lower and render {:.1} ms, cc (and meanwhile the \
                 arena) {:.1} ms ({source_len} bytes of C), load {:.1} ms",
                n_eqns,
                ms(0.0, t_simplify),
                ms(t_simplify, t_key),
                ms(t_key, t_schedule),
                ms(t_schedule, t_render),
                ms(t_render, t_cc),
                ms(t_cc, start.elapsed().as_secs_f64())
            );
        }
        program
    };
    Ok(Compiled {
        program,
        origin: Origin::Compiled,
        seconds: start.elapsed().as_secs_f64(),
        kernel_sources,
    })
}

/// Which compiled bodies are small (see [`SMALL_WORK`]): `body_of[k]` is
/// the body kernel `k` calls.
fn small_bodies(
    g: &Graph,
    sched: &schedule::Schedule,
    nests: &[render::LoopNest],
    body_of: &[usize],
    n_bodies: usize,
) -> Vec<bool> {
    let kernel_work: Vec<usize> = sched
        .kernels
        .iter()
        .zip(nests)
        .map(|(k, n)| n.dims.iter().product::<usize>() * k.nodes.len())
        .collect();
    let mut small = vec![true; n_bodies];
    let mut body_work = vec![0usize; n_bodies];
    let mut total = 0usize;
    for step in &sched.steps {
        match step {
            schedule::Step::Kernel { kernel, .. } | schedule::Step::Epilogue { kernel, .. } => {
                let (w, f) = (kernel_work[*kernel], body_of[*kernel]);
                small[f] &= w <= SMALL_WORK;
                body_work[f] += w;
                total += w;
            }
            schedule::Step::Library { eqn } => {
                let e = &g.eqns[*eqn];
                let out = g.aval(e.out()).shape.iter().product::<usize>();
                total += match &e.op {
                    // A loop's work: its steps' outputs (its kernels are
                    // another program's).
                    Op::Loop(lp) => lp.length * out,
                    Op::Prim(nx::Prim::DotGeneral { lhs_contract, .. }) => {
                        let lhs = &g.aval(e.inputs[0]).shape;
                        out * lhs_contract.iter().map(|&a| lhs[a]).product::<usize>()
                            / PRODUCT_SPEED
                    }
                    _ => out,
                };
            }
        }
    }
    for (s, w) in small.iter_mut().zip(&body_work) {
        *s &= w.saturating_mul(SMALL_SHARE) <= total;
    }
    small
}

fn entries(
    loaded: &compile::Loaded,
    meta: &[(String, usize, nx::DType, Vec<usize>)],
) -> Vec<KernelEntry> {
    loaded
        .fns
        .iter()
        .zip(meta)
        .map(|(&f, (_, outer, dt, shape))| KernelEntry {
            f,
            outer: *outer,
            out_dtype: *dt,
            shape: shape.clone(),
        })
        .collect()
}

/// A program from a valid cache entry (the graph is the one being compiled:
/// the key covers its structure).
fn load_entry(
    g: &Graph,
    dir: &std::path::Path,
    key: &str,
    entry: cache::Entry,
) -> Result<Program, String> {
    let steps_ok = entry.plan.steps.iter().enumerate().all(|(i, s)| match s {
        schedule::Step::Epilogue { kernel, out, args } => {
            // An epilogue follows a product step or another epilogue.
            let follows = i > 0
                && match &entry.plan.steps[i - 1] {
                    schedule::Step::Epilogue { .. } => true,
                    schedule::Step::Library { eqn } => g
                        .eqns
                        .get(*eqn)
                        .is_some_and(|e| matches!(e.as_prim(), Some(nx::Prim::DotGeneral { .. }))),
                    schedule::Step::Kernel { .. } => false,
                };
            follows
                && *kernel < entry.kernels.len()
                && *out < g.avals.len()
                && args.iter().all(|a| *a < g.avals.len())
        }
        schedule::Step::Kernel { kernel, out, args } => {
            *kernel < entry.kernels.len()
                && *out < g.avals.len()
                && args.iter().all(|a| *a < g.avals.len())
        }
        schedule::Step::Library { eqn } => *eqn < g.eqns.len(),
    });
    if !steps_ok {
        return Err("jit cache: entry does not match the program".into());
    }
    if entry.kernels.is_empty() {
        return Ok(Program::new(g.clone(), entry.plan, Vec::new(), None));
    }
    let (so, _) = cache::paths(dir, key);
    let names: Vec<String> = entry.kernels.iter().map(|k| k.0.clone()).collect();
    let loaded = compile::load(&so, &names)?;
    let entries = entries(&loaded, &entry.kernels);
    Ok(Program::new(g.clone(), entry.plan, entries, Some(loaded)))
}
