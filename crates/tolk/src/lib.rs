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
//! [`compile()`] (or [`compile_with`]) runs these stages, each a module;
//! stages 1 and 3 to 6 are [`pipeline`]'s driver, shared with the CUDA
//! device's compile ([`cuda::render`]), the dialect and what its loops can
//! do a parameter ([`pipeline::Target`]), each IR checked by [`verify`]
//! between passes in debug builds and tests (`TOLK_VERIFY=1` elsewhere) and
//! printed by `TOLK_DUMP=1` ([`pipeline::stages`]):
//!
//! 1. `simplify`: constant folding, common subexpressions, dead code;
//! 2. [`cache`] lookup: a program with the same structure, flags, compiler,
//!    CPU features and executable is loaded from disk (`JITCACHE=0` skips it);
//! 3. [`fuse`]: elementwise ops and views fuse into [`Kernel`]s (views as
//!    index arithmetic on each load), and so do reductions of computed
//!    values; the other primitives are library steps run by nx's eager
//!    kernels (`dot_general` through the GEMM crate);
//! 4. [`plan`]: the steps in order, identical kernels merged, and when each
//!    buffer dies;
//! 5. [`lower`]: each kernel becomes a loop nest (merged dims, index
//!    arithmetic, hoisted invariants, accumulators) and its schedule (two
//!    lanes, reduction blocks, column tiles, a GPU's grid, streaming
//!    stores, a scatter's parts), independent of the target language;
//! 6. [`codegen`]: the nests are printed in a dialect ([`codegen::c`]
//!    for the CPU, whose per-element C is bit-exact with nx's eager
//!    kernels; [`codegen::cuda`] for NVIDIA GPUs, through [`cuda`]); identical functions are emitted once, and split into
//!    translation units for concurrent compilers;
//! 7. [`build`]: the system C compiler (`$CC`, else `cc`) makes one shared
//!    object; 8. `load`: it is mapped and its kernels looked up, and the
//!    entry is written to the [`cache`];
//! 9. `runtime`: [`Program::run`] executes the plan of steps over buffers
//!    (intermediates in an arena kept with the program).
//!
//! A program whose C takes long to compile but little to run is returned
//! while stages 7 and 8 run on a thread of their own; its first call runs
//! through nx's eager kernels, later calls wait for the build
//! ([`Options::quick_first`]).
//!
//! A loop equation's body is a program of its own, compiled the same way
//! on a thread of its own. [`shard`] turns one graph into per-device
//! programs and the collectives between them, for rune's `pmap`.
//!
//! The modules depend only on those before them in this list (`graph`
//! and `hash` first; [`verify`] after [`lower`]; [`cache`] before
//! [`pipeline`] and [`build`], whose compiler identity it stores), and
//! [`shard`] on the whole pipeline.
//!
//! [`Kernel`]: fuse::Kernel
//!
//! Public modules are those rune, its tests and examples, and
//! [`codegen`]'s and [`fuse`]'s public docs reach; `graph`, `runtime`,
//! `simplify`, `load`, `hash` and `index_check` are the crate's own (their
//! public types are re-exported above where users need them).
#![warn(missing_docs)]

pub mod build;
pub mod cache;
pub mod codegen;
pub mod cost;
pub mod cuda;
pub mod cuda_probe;
pub mod device;
pub mod export;
pub mod fuse;
pub(crate) mod graph;
pub(crate) mod hash;
pub(crate) mod index_check;
pub(crate) mod load;
pub mod lower;
pub mod nvrtc;
pub mod pipeline;
pub mod plan;
#[cfg(test)]
mod prim_cases;
pub(crate) mod runtime;
pub mod shard;
pub(crate) mod simplify;
pub mod verify;

pub use graph::{Eqn, Graph, Loop, Op, Var};
pub use runtime::{pipelined_steps, sharded_steps, tier_switches, Program};

use runtime::KernelEntry;
use std::time::Instant;

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
    /// The program was returned while its C compiles: its first call runs
    /// eagerly unless the build has finished ([`Options::quick_first`]).
    pub eager_first: bool,
}

/// Compiles `graph` for the host CPU, through the persistent cache unless
/// `use_cache` is false (or `JITCACHE=0`). `Err` carries a message for the
/// user (no C compiler, say).
pub fn compile(graph: Graph, use_cache: bool) -> Result<Compiled, String> {
    compile_with(
        graph,
        &Options {
            use_cache,
            stream_min_bytes: plan::stream_min_bytes(),
            quick_first: true,
        },
    )
}

/// How [`compile_with`] compiles.
#[derive(Clone, Debug)]
pub struct Options {
    /// Through the persistent cache (unless `JITCACHE=0`).
    pub use_cache: bool,
    /// Maps that write a program output in a pass moving at least this
    /// many bytes store it past the cache ([`fuse::Kernel::stream`]);
    /// `None`: none do. [`compile()`] uses the last-level cache's size
    /// ([`plan::stream_min_bytes`]). The results are the same bit for bit.
    pub stream_min_bytes: Option<usize>,
    /// A program whose C takes long to compile (at least
    /// [`EAGER_FIRST_MIN_SOURCE`] bytes of kernels) and much less to run
    /// eagerly (at most [`EAGER_FIRST_WORK_PER_BYTE`] of kernel work per
    /// byte of that C, and every kernel a map) returns from compiling at
    /// once, its C compiling on a thread of its own: its first call
    /// evaluates the graph with nx's eager kernels
    /// (unless the build has finished), every later call runs the compiled
    /// kernels, waiting for them if need be ([`Program::finish_compiling`]).
    /// The values are the same bit for bit: a map's C computes each element
    /// as the eager kernel does, and library steps are eager kernels either
    /// way. Programs with loops, and loop bodies, never start eager.
    pub quick_first: bool,
}

/// The least kernel source, in bytes of C (the prelude aside), of a
/// program whose first call runs eagerly: about 100 ms of `-O2` here (a
/// 120-op transcendental chain's gradient, 33 KB, compiles in 0.24 s).
pub const EAGER_FIRST_MIN_SOURCE: usize = 16 << 10;

/// The most kernel work (elements visited times [`fuse::Kernel::weight`],
/// summed over the plan's kernel steps) per byte of kernel C of a program
/// whose first call runs eagerly. Measured here: evaluating a 120-op
/// transcendental chain's gradient equation by equation takes about 0.6 ns
/// per unit of work (16.8 ms over 65,536 elements, 29 M units; 1.2 ms over
/// 4,096), and gcc -O2 about 7 us per byte of its C (0.24 s for 33 KB):
/// at this ratio the eager call costs at most a fifth of the compile it
/// stands in for, a third beside the compiler on 2 cores (the chain over
/// 65,536 elements: first call 72 ms, compiled first 240 ms).
pub const EAGER_FIRST_WORK_PER_BYTE: usize = 2048;

/// The least kernel source, in bytes of C (the prelude aside), of a loop
/// body built in two tiers (the bodies of a program compiled with
/// [`Options::quick_first`]): first without vectorization
/// ([`TIER0_FLAGS`]), which the loop runs at once, then as usual on a
/// thread of its own, which the loop switches to once it has finished
/// (`Program::attach_upgrade`). The bodies build concurrently with their
/// program, and the longest build is its first call's critical path;
/// gcc's vectorizer is most of it (a 256-oscillator simulation's backward
/// body, 8 kernels of sines and cosines: 0.15 s at `-O2`, first call 0.18
/// -> 0.12 s in two tiers on a 2-vCPU Intel Xeon). The two builds compute
/// the same bits (the same C, no fast-math: nothing is reassociated or
/// contracted either way); the cache keeps the second. Programs without
/// loops build once: the calls right after their first would run beside
/// the second build (a CNN step's median over its first 100 calls 3.4 ->
/// 4.3 ms).
pub const TIER_MIN_SOURCE: usize = 4 << 10;

/// The first tier's flags, after [`codegen::c::CFLAGS`]: gcc's `-O1`, no
/// vectorization (small kernels are built so anyway, `codegen::SMALL_WORK`).
pub const TIER0_FLAGS: &[&str] = &["-O1"];

/// [`compile()`] with explicit [`Options`].
pub fn compile_with(graph: Graph, opts: &Options) -> Result<Compiled, String> {
    compile_graph(graph, opts, false)
}

/// [`compile_with`]; `tiered`: built in two tiers when its kernels are
/// long to compile ([`TIER_MIN_SOURCE`]), as the loop bodies of a program
/// compiled for a quick first call are.
fn compile_graph(graph: Graph, opts: &Options, tiered: bool) -> Result<Compiled, String> {
    let start = Instant::now();
    let g = pipeline::simplify(graph);
    // Each loop's body is a program of its own (through the cache like
    // any program), compiled on a thread of its own while this one
    // compiles the rest: the C compilers run concurrently.
    let loops = loop_bodies(&g);
    let (bodies, compiled) = std::thread::scope(|s| {
        let threads: Vec<_> = loops
            .into_iter()
            .map(|(i, body)| {
                let body_opts = Options {
                    quick_first: false,
                    ..opts.clone()
                };
                let tiered = opts.quick_first || tiered;
                s.spawn(move || compile_graph(body, &body_opts, tiered).map(|c| (i, c.program)))
            })
            .collect();
        let compiled = compile_simplified(g, opts, start, tiered);
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

/// The body of each loop equation of a simplified graph, by equation
/// index, as a graph to compile as a program of its own.
pub(crate) fn loop_bodies(g: &Graph) -> Vec<(usize, Graph)> {
    g.eqns
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match &e.op {
            Op::Loop(lp) => {
                // A loop const that is a captured constant here is one in
                // the body too (its indices then checked and inverted at
                // compile time, its values folded).
                let known: Vec<(usize, nx::Tensor)> = e.inputs[..lp.n_consts]
                    .iter()
                    .enumerate()
                    .filter_map(|(k, v)| {
                        let (_, t) = g.consts.iter().find(|(c, _)| c == v)?;
                        Some((k, t.clone()))
                    })
                    .collect();
                Some((i, lp.body.clone().with_constant_inputs(known)))
            }
            Op::Prim(_) => None,
        })
        .collect()
}

/// [`compile_with`] of a simplified graph, its loops' bodies aside: the
/// cache lookup, then fuse, plan, lower, render, build, load, and the
/// cache's write.
fn compile_simplified(
    g: Graph,
    opts: &Options,
    start: Instant,
    tiered: bool,
) -> Result<Compiled, String> {
    let ms = |since: Instant| since.elapsed().as_secs_f64() * 1e3;
    let t_simplify = ms(start);
    let cache_dir = if opts.use_cache { cache::dir() } else { None };
    let cc = build::compiler_identity();
    // Fusion's choices that depend on more than the graph: the stream
    // threshold, and the thread count (a scatter's parts, `fuse.rs`).
    let stream = format!(
        "stream>={:?} threads={}",
        opts.stream_min_bytes,
        nx::num_threads()
    );
    let mut flags = build::flags();
    flags.push(&stream);
    // The key names the cache entry; without a cache it is not needed.
    let key = match &cache_dir {
        Some(_) => cache::key(&g.structure_key(), &flags, cc.as_deref().unwrap_or("none")),
        None => String::new(),
    };
    if let Some(dir) = &cache_dir {
        if let Some(entry) = cache::read(dir, &key) {
            if let Ok(program) = load_entry(&g, dir, &key, entry) {
                if pipeline::dumping() {
                    let entry = dir.join(&key);
                    eprint!(
                        "{}",
                        pipeline::describe_cached(&g, &program.plan, &entry.display().to_string())
                    );
                }
                return Ok(Compiled {
                    program,
                    origin: Origin::Disk,
                    seconds: start.elapsed().as_secs_f64(),
                    kernel_sources: Vec::new(),
                    eager_first: false,
                });
            }
        }
    }
    let target = pipeline::Target::cpu(opts.stream_min_bytes);
    let pipeline::Generated {
        kernels,
        plan,
        meta,
        code,
        ms_plan: t_plan,
        ms_render: t_render,
        ..
    } = pipeline::generate(&g, &target)
        .map_err(|r| format!("tolk: the CPU runs every library step, not {r:?}"))?;
    let weights: Vec<usize> = meta.iter().map(|k| k.weight).collect();
    if kernels.is_empty() {
        return Ok(Compiled {
            program: Program::new(g, plan, &weights, Vec::new(), None),
            origin: Origin::Compiled,
            seconds: start.elapsed().as_secs_f64(),
            kernel_sources: Vec::new(),
            eager_first: false,
        });
    }
    cc?;
    let (dir, scratch) = match &cache_dir {
        Some(d) => (d.clone(), false),
        None => (build::scratch_dir(), true),
    };
    let so = dir.join(if scratch {
        format!("{}.so", cache::unique_suffix())
    } else {
        format!("{key}.so")
    });
    let n_eqns = g.eqns.len();
    let source_len: usize = code.units.iter().map(|u| u.len()).sum();
    // What the cache keeps beside the shared object (nothing without a
    // cache): taken before the plan moves into the program.
    let cache_entry = (!scratch).then(|| cache::Entry {
        plan: plan.clone(),
        kernels: meta.clone(),
        exact: code.exact.clone(),
    });
    let eager_first =
        opts.quick_first && starts_eager(&g, &kernels, &plan, &weights, &code.sources);
    let source: usize = code.sources.iter().map(|(_, c)| c.len()).sum();
    // The first tier: the same units built without vectorization, in a
    // scratch file.
    let tiered = tiered && !eager_first && source >= TIER_MIN_SOURCE;
    let tier0 = tiered.then(|| {
        (
            code.units.clone(),
            code.names.clone(),
            code.exact.clone(),
            meta.clone(),
        )
    });
    // The build: compile, load, write the cache entry.
    let (units, names, exact) = (code.units, code.names, code.exact);
    let build = move || -> Result<(Vec<KernelEntry>, load::Loaded), String> {
        build::build_units(&units, &so, &[])?;
        let loaded = load::load(&so, &names)?;
        match cache_entry {
            // A cache that cannot be written costs the next process a
            // compile, nothing else.
            Some(entry) => {
                let _ = cache::write_meta(&dir, &key, &entry);
                // Once per process: the scan stats every entry (about 10
                // ms per compile with 9,000 entries), and entries expire
                // after days, not between two compiles of one process.
                static EVICTED: std::sync::Once = std::sync::Once::new();
                EVICTED.call_once(|| cache::evict_old(&dir));
            }
            // The mapping outlives the file.
            None => {
                let _ = std::fs::remove_file(&so);
            }
        }
        Ok((entries(&loaded, &meta, exact), loaded))
    };
    // The program (its arena: first-touched memory, 16 MiB for a
    // 1000-step RNN's gradient) is built while the compiler runs; its
    // code comes after.
    let t = Instant::now();
    let mut program;
    if eager_first {
        let compiling = std::thread::spawn(build);
        program = Program::new(g, plan, &weights, Vec::new(), None);
        program.attach_compiling(compiling);
    } else if let Some((units, names, exact, meta)) = tier0 {
        let so = build::scratch_dir().join(format!("{}-tier0.so", cache::unique_suffix()));
        let quick =
            build::build_units(&units, &so, TIER0_FLAGS).and_then(|()| load::load(&so, &names));
        // The mapping outlives the file.
        let _ = std::fs::remove_file(&so);
        let loaded = quick?;
        program = Program::new(g, plan, &weights, Vec::new(), None);
        program.attach_code(entries(&loaded, &meta, exact), loaded);
        program.attach_upgrade(std::thread::spawn(build));
    } else {
        let built;
        (built, program) = std::thread::scope(|s| {
            let cc = s.spawn(build);
            let program = Program::new(g, plan, &weights, Vec::new(), None);
            (
                cc.join().expect("tolk: the compiler thread panicked"),
                program,
            )
        });
        let (entries, loaded) = built?;
        program.attach_code(entries, loaded);
    }
    let t_build = ms(t);
    if std::env::var("TOLK_TIMING").is_ok() {
        eprintln!(
            "tolk: {n_eqns} equations; simplify and cache lookup {t_simplify:.1} ms, \
             fuse and plan {t_plan:.1} ms, lower and render {t_render:.1} ms, build, load \
             (and meanwhile the arena) {t_build:.1} ms ({source_len} bytes of C{})",
            if eager_first {
                "; compiling on, the first call eager"
            } else if tiered {
                "; without vectorization, the vectorized build going on"
            } else {
                ""
            },
        );
    }
    Ok(Compiled {
        program,
        origin: Origin::Compiled,
        seconds: start.elapsed().as_secs_f64(),
        kernel_sources: code.sources,
        eager_first,
    })
}

/// Whether a program's first call runs eagerly while its C compiles
/// ([`Options::quick_first`]): long to compile, quick to run, every kernel
/// a map (so that eager values are the compiled ones bit for bit), no loop.
fn starts_eager(
    g: &Graph,
    kernels: &[fuse::Kernel],
    plan: &plan::Plan,
    weights: &[usize],
    sources: &[(Vec<String>, String)],
) -> bool {
    let work: usize = runtime::step_work(g, plan, weights).iter().sum();
    let source: usize = sources.iter().map(|(_, c)| c.len()).sum();
    source >= EAGER_FIRST_MIN_SOURCE
        && work <= source.saturating_mul(EAGER_FIRST_WORK_PER_BYTE)
        && kernels.iter().all(|k| k.is_map())
        && g.eqns.iter().all(|e| matches!(e.op, Op::Prim(_)))
}

/// The names of the exact forms `meta`'s kernels call, sorted, each once:
/// the functions of the unit [`cache::Entry::exact`] defines, in the order
/// a [`load::Lazy`] of them indexes them.
pub(crate) fn exact_names(meta: &[cache::KernelMeta]) -> Vec<String> {
    let mut names: Vec<String> = meta.iter().filter_map(|k| k.exact_name.clone()).collect();
    names.sort();
    names.dedup();
    names
}

/// The runtime's view of each kernel: its function, its exact form (built
/// on first use from `exact`, the unit defining them), its output.
fn entries(loaded: &load::Loaded, meta: &[cache::KernelMeta], exact: String) -> Vec<KernelEntry> {
    let lazy = std::sync::Arc::new(load::Lazy::new(exact, exact_names(meta)));
    entries_with(loaded, meta, lazy)
}

/// [`entries`] with the exact forms given (built already, or to build).
pub(crate) fn entries_with(
    loaded: &load::Loaded,
    meta: &[cache::KernelMeta],
    lazy: std::sync::Arc<load::Lazy>,
) -> Vec<KernelEntry> {
    let exact_names = exact_names(meta);
    loaded
        .fns
        .iter()
        .zip(meta)
        .map(|(&f, k)| KernelEntry {
            f,
            exact: k.exact_name.as_ref().map(|n| {
                let i = exact_names.binary_search(n).expect("listed above");
                (std::sync::Arc::clone(&lazy), i)
            }),
            outer: k.outer,
            out_dtypes: k.out_dtypes.clone(),
            shape: k.shape.clone(),
        })
        .collect()
}

/// Whether `entry`'s plan refers only to `g`'s variables and equations and
/// to its own kernels (so running it indexes nothing out of range).
pub(crate) fn entry_fits(g: &Graph, entry: &cache::Entry) -> bool {
    entry.plan.steps.len() == entry.plan.frees.len()
        && entry.plan.steps.iter().all(|s| match s {
            plan::Step::Kernel { kernel, outs, args } => {
                *kernel < entry.kernels.len()
                    && outs.len() == entry.kernels[*kernel].out_dtypes.len()
                    && outs.iter().chain(args).all(|v| *v < g.avals.len())
            }
            plan::Step::Library { eqn } => *eqn < g.eqns.len(),
        })
        && entry
            .plan
            .frees
            .iter()
            .flatten()
            .all(|v| *v < g.avals.len())
}

/// A program from a valid cache entry (the graph is the one being compiled:
/// the key covers its structure).
fn load_entry(
    g: &Graph,
    dir: &std::path::Path,
    key: &str,
    entry: cache::Entry,
) -> Result<Program, String> {
    if !entry_fits(g, &entry) {
        return Err("jit cache: entry does not match the program".into());
    }
    let weights: Vec<usize> = entry.kernels.iter().map(|k| k.weight).collect();
    if entry.kernels.is_empty() {
        return Ok(Program::new(
            g.clone(),
            entry.plan,
            &weights,
            Vec::new(),
            None,
        ));
    }
    let (so, _) = cache::paths(dir, key);
    let names: Vec<String> = entry.kernels.iter().map(|k| k.name.clone()).collect();
    let loaded = load::load(&so, &names)?;
    let entries = entries(&loaded, &entry.kernels, entry.exact);
    Ok(Program::new(
        g.clone(),
        entry.plan,
        &weights,
        entries,
        Some(loaded),
    ))
}
