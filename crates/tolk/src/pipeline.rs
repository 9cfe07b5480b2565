//! The compile driver, one for every dialect: a graph is simplified
//! ([`simplify()`]), fused into kernels, planned, lowered to loop nests and
//! rendered (`generate`) for a [`Target`] (the dialect, what its loops
//! can do, which library steps it runs). The CPU's compile
//! ([`crate::compile_with`], [`crate::export::compile`]) and the CUDA
//! device's ([`crate::cuda::render`]) both call it; what follows (building
//! with the system C compiler or NVRTC, loading, running) is theirs.
//!
//! Between the passes, each IR is checked by [`crate::verify`] in debug
//! builds, in tolk's tests, and with `TOLK_VERIFY=1` ([`verifying`]);
//! `TOLK_DUMP=1` prints each stage's IR on stderr (as [`stages`] returns it): the
//! simplified graph, the fused kernels, the plan, the loop nests and the
//! rendered source.

use crate::codegen::{self, Dialect};
use crate::fuse::{self, Kernel};
use crate::graph::{Graph, Op};
use crate::lower::{self, LoopNest};
use crate::plan::{self, Plan, Step};
use crate::{cache, verify};
use std::fmt::Write;
use std::time::Instant;

/// What a program is compiled for: the dialect its kernels are rendered
/// in and the choices each pass makes for it.
pub struct Target {
    /// The language the kernels are printed in.
    pub dialect: Box<dyn Dialect>,
    /// A device ([`fuse::fuse_with`]): every reduction a kernel (a device
    /// cannot call nx's eager reductions) and a split scatter one element
    /// of the updates' last dim per thread.
    pub device: bool,
    /// What the loops can do ([`lower::Target`]: a grid, column tiles,
    /// reduction blocks, streaming stores).
    pub lowering: lower::Target,
    /// Maps writing a program output in a pass moving at least this many
    /// bytes store it past the cache ([`plan::plan`]); `None`: none do.
    pub stream_min_bytes: Option<usize>,
    /// At most this many translation units ([`codegen::generate`]).
    pub units: usize,
    /// Which library steps the target runs; the compile refuses a
    /// program holding another, naming its primitives.
    pub runs: fn(&nx::Prim) -> bool,
}

impl Target {
    /// The host CPU: the C dialect, nx's eager kernels as library steps,
    /// one translation unit per core up to 4.
    pub fn cpu(stream_min_bytes: Option<usize>) -> Target {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Target {
            dialect: Box::new(codegen::c::C),
            device: false,
            lowering: lower::Target::CPU,
            stream_min_bytes,
            units: cores.min(4),
            runs: |_| true,
        }
    }
}

/// A simplified graph's kernels, loop nests, plan and code: what
/// [`generate`] makes.
pub(crate) struct Generated {
    /// The distinct kernels the plan's steps index.
    pub kernels: Vec<Kernel>,
    /// Per kernel: its loop nest.
    pub nests: Vec<LoopNest>,
    /// The steps and when buffers die.
    pub plan: Plan,
    /// Per kernel: what the runtime (and the cache) needs besides its code.
    pub meta: Vec<cache::KernelMeta>,
    /// The translation units, names and sources.
    pub code: codegen::Code,
    /// Milliseconds fusing and planning.
    pub ms_plan: f64,
    /// Milliseconds lowering and rendering.
    pub ms_render: f64,
}

/// Simplifies `graph` (constant folding, CSE, DCE and the rewrites of
/// the crate's `simplify` module), checked where [`verifying`].
pub fn simplify(graph: Graph) -> Graph {
    check("the graph to compile", verify::graph(&graph));
    let g = crate::simplify::simplify(graph);
    check("the simplified graph", verify::graph(&g));
    g
}

/// Fuses, plans, lowers and renders a simplified graph for `target`,
/// each IR checked where [`verifying`] and printed where [`dumping`].
/// `Err`: the primitives of library steps the target does not run
/// ([`Target::runs`]), each named once.
pub(crate) fn generate(g: &Graph, target: &Target) -> Result<Generated, Vec<String>> {
    let ms = |since: Instant| since.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let fusion = fuse::fuse_with(g, target.device);
    let mut refused: Vec<String> = Vec::new();
    for (e, &lib) in g.eqns.iter().zip(&fusion.library) {
        if let (true, Op::Prim(p)) = (lib, &e.op) {
            let name = p.name();
            if !(target.runs)(p) && !refused.contains(&name) {
                refused.push(name);
            }
        }
    }
    if !refused.is_empty() {
        return Err(refused);
    }
    let (kernels, plan) = plan::plan(g, fusion, target.stream_min_bytes);
    check(
        "the fused kernels and plan",
        verify::plan(g, &kernels, &plan),
    );
    let ms_plan = ms(t);
    let t = Instant::now();
    let nests: Vec<LoopNest> = kernels
        .iter()
        .map(|k| lower::lower(k, &target.lowering))
        .collect();
    check("the loop nests", verify::nests(&kernels, &nests));
    let code = codegen::generate(&*target.dialect, g, &kernels, &nests, &plan, target.units);
    let ms_render = ms(t);
    let meta: Vec<cache::KernelMeta> = kernels
        .iter()
        .zip(&nests)
        .zip(code.names.iter().zip(&code.exact_names))
        .map(|((k, n), (name, exact_name))| cache::KernelMeta {
            name: name.clone(),
            exact_name: exact_name.clone(),
            outer: n.outer(),
            weight: k.weight(),
            out_dtypes: k.out_dtypes.clone(),
            shape: k.out_shape().to_vec(),
        })
        .collect();
    let generated = Generated {
        kernels,
        nests,
        plan,
        meta,
        code,
        ms_plan,
        ms_render,
    };
    if dumping() {
        eprint!("{}", describe(g, &generated));
    }
    Ok(generated)
}

/// Each stage's IR of a compiled program as text: the graph, compiled for
/// `target` (the CPU: [`Target::cpu`]), printed after simplification,
/// then its fused kernels (each node), the plan's steps, each kernel's
/// loop nest and schedule, and the rendered source: what `TOLK_DUMP=1`
/// prints as each program compiles (a loop's body is a program of its own,
/// printed by its own compile; here not included). `Err` names the
/// library steps the target does not run.
pub fn stages(graph: Graph, target: &Target) -> Result<String, String> {
    let g = simplify(graph);
    let generated = generate(&g, target)
        .map_err(|r| format!("library steps not run on this target: {}", r.join(", ")))?;
    Ok(describe(&g, &generated))
}

/// Whether `TOLK_DUMP` asks for each stage's IR on stderr.
pub(crate) fn dumping() -> bool {
    std::env::var_os("TOLK_DUMP").is_some_and(|v| v != "0")
}

/// Whether the IRs are checked between passes: debug builds, tolk's own
/// tests, and `TOLK_VERIFY=1` (read once).
pub fn verifying() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    cfg!(any(debug_assertions, test))
        || *ON.get_or_init(|| std::env::var_os("TOLK_VERIFY").is_some_and(|v| v != "0"))
}

/// Panics naming the IR when a check failed (a bug in the pass before it).
fn check(what: &str, result: impl FnOnce() -> Result<(), String>) {
    if verifying() {
        if let Err(e) = result() {
            panic!("tolk: {what} is malformed: {e}");
        }
    }
}

/// The text [`stages`] returns (and `TOLK_DUMP=1` prints).
pub(crate) fn describe(g: &Graph, gen: &Generated) -> String {
    let mut s = describe_plan(g, &gen.plan);
    for (k, (kernel, nest)) in gen.kernels.iter().zip(&gen.nests).enumerate() {
        let _ = writeln!(s, "tolk: fused kernel {k}");
        s += &describe_kernel(kernel);
        let _ = writeln!(s, "tolk: loop nest {k}");
        s += &describe_nest(nest);
    }
    for (k, (fused, src)) in gen.code.sources.iter().enumerate() {
        s += &format!("tolk: kernel {k} ({})\n{src}\n", fused.join(", "));
    }
    s
}

/// What `TOLK_DUMP=1` prints for a program loaded from the disk cache: its
/// graph and plan, and where its kernels came from (the cache keeps their
/// machine code, not the stages between).
pub(crate) fn describe_cached(g: &Graph, plan: &Plan, entry: &str) -> String {
    describe_plan(g, plan)
        + &format!(
            "tolk: kernels loaded from the disk cache ({entry}); JITCACHE=0 compiles them \
             again and prints each stage\n"
        )
}

/// The graph and the plan's steps.
fn describe_plan(g: &Graph, plan: &Plan) -> String {
    let mut s = format!("tolk: graph\n{g}\ntolk: plan\n");
    for step in &plan.steps {
        match step {
            Step::Kernel { kernel, outs, args } => {
                s += &format!("  kernel {kernel}: {outs:?} <- {args:?}\n");
            }
            Step::Library { eqn } => {
                s += &format!(
                    "  library {}: {:?}\n",
                    g.eqns[*eqn].name(),
                    g.eqns[*eqn].outs
                );
            }
        }
    }
    s
}

/// A fused kernel, one node a line.
fn describe_kernel(k: &Kernel) -> String {
    let mut s = format!(
        "  shape {:?}, outputs {:?}, arguments {:?}",
        k.shape, k.out_dtypes, k.arg_dtypes
    );
    if let Some((op, kept)) = k.reduce {
        let _ = write!(s, ", reduce {op:?} over dims {kept}..");
    }
    if k.stream {
        s += ", streamed";
    }
    let _ = writeln!(s, ", roots {:?}", k.roots);
    for (i, n) in k.nodes.iter().enumerate() {
        let _ = writeln!(s, "  v{i} = {n:?}");
    }
    s
}

/// A loop nest: its loops, schedule and each load's index.
fn describe_nest(n: &LoopNest) -> String {
    let mut s = format!(
        "  dims {:?} ({} kept{}), {:?}\n",
        n.dims,
        n.kept,
        if n.grid { ", one grid-stride loop" } else { "" },
        n.schedule
    );
    for (i, ix) in n.loads.iter().enumerate() {
        if let Some(ix) = ix {
            let _ = write!(s, "  v{i}: {} + {:?}", ix.offset, ix.strides);
            if n.invariant[i] {
                s += ", invariant";
            }
            if n.narrow[i] {
                s += ", 32-bit offsets";
            }
            s.push('\n');
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Eqn;
    use nx::{Aval, BinaryOp, DType, Prim, ReduceOp, UnaryOp};

    /// `exp(x) * x` and the row sums of `x * x`, for `x: f32[4, 300]`.
    fn exp_sum() -> Graph {
        let mut g = Graph::default();
        let a = Aval::new(&[4, 300], DType::F32);
        let [x, e, y, z] = [(); 4].map(|_| g.new_var(a.clone()));
        let s = g.new_var(Aval::new(&[4], DType::F32));
        let (mul, exp) = (Prim::Binary(BinaryOp::Mul), Prim::Unary(UnaryOp::Exp));
        let sum = Prim::Reduce {
            op: ReduceOp::Sum,
            axes: vec![1],
        };
        g.inputs = vec![x];
        g.eqns = vec![
            Eqn::prim(exp, vec![x], e),
            Eqn::prim(mul.clone(), vec![e, x], y),
            Eqn::prim(mul, vec![x, x], z),
            Eqn::prim(sum, vec![z], s),
        ];
        g.outputs = vec![y, s];
        g
    }

    #[test]
    fn stages_print_each_ir() {
        let text = stages(exp_sum(), &Target::cpu(None)).unwrap();
        for part in [
            "tolk: graph",
            "tolk: plan",
            "tolk: fused kernel 0",
            "tolk: loop nest 0",
            "tolk: kernel 0 (",
        ] {
            assert!(text.contains(part), "{part} missing from\n{text}");
        }
        // The reduction's schedule, decided by the lowering, is printed.
        assert!(text.contains("Reduce {"), "{text}");
    }

    #[test]
    fn the_schedule_is_the_targets() {
        let g = crate::simplify::simplify(exp_sum());
        let cpu = generate(&g, &Target::cpu(None)).ok().unwrap();
        let gpu = generate(&g, &crate::cuda::target(false)).ok().unwrap();
        assert!(cpu.nests.iter().all(|n| !n.grid));
        assert!(gpu.nests.iter().all(|n| n.grid));
        // On the CPU the 300-point rows reduce in blocks; not on the GPU.
        let blocks = |gen: &Generated| {
            gen.nests
                .iter()
                .any(|n| matches!(n.schedule, lower::Schedule::Reduce { block: Some(_), .. }))
        };
        assert!(blocks(&cpu) && !blocks(&gpu));
        // The GPU's range is the output's points.
        let mut points: Vec<usize> = gpu.nests.iter().map(LoopNest::outer).collect();
        points.sort();
        assert_eq!(points, [4, 1200]);
    }

    #[test]
    fn the_verifier_finds_a_load_outside_its_buffer_and_a_wrong_schedule() {
        let g = crate::simplify::simplify(exp_sum());
        let mut gen = generate(&g, &Target::cpu(None)).ok().unwrap();
        assert!(verify::plan(&g, &gen.kernels, &gen.plan)().is_ok());
        assert!(verify::nests(&gen.kernels, &gen.nests)().is_ok());
        let k = gen.kernels.iter().position(|k| k.reduce.is_none()).unwrap();
        let mut bad = gen.kernels.clone();
        if let Some(crate::fuse::Node::Load { layout, .. }) = bad[k]
            .nodes
            .iter_mut()
            .find(|n| matches!(n, crate::fuse::Node::Load { .. }))
        {
            layout.offset += 1;
        }
        let e = verify::plan(&g, &bad, &gen.plan)().unwrap_err();
        assert!(e.contains("addresses elements"), "{e}");
        gen.nests[k].schedule = lower::Schedule::Tiled { tile: 8 };
        let e = verify::nests(&gen.kernels, &gen.nests)().unwrap_err();
        assert!(e.contains("does not fit"), "{e}");
    }

    #[test]
    fn the_verifier_finds_a_read_before_its_definition() {
        let mut g = exp_sum();
        g.eqns.swap(0, 1);
        let e = verify::graph(&g)().unwrap_err();
        assert!(e.contains("before it is defined"), "{e}");
    }
}
