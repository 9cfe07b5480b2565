//! Code generation: a program's kernels, lowered, become source text in a
//! [`Dialect`] (the C dialect, [`c::C`], today), one function per distinct
//! source, split into translation units for concurrent compilers.
//!
//! [`render`] holds the structure every C-like language shares (frames,
//! loops, accumulators, guarded fast paths, streaming stores), printing
//! what the lowering scheduled ([`crate::lower::Schedule`]); a dialect
//! supplies the types, the per-element expressions and the function frame,
//! as tinygrad's `CStyleLanguage` does.

pub mod c;
pub mod cuda;
pub mod cuda_library;
pub mod render;

use crate::fuse::Kernel;
use crate::graph::{Graph, Op};
use crate::lower::LoopNest;
use crate::plan::{Plan, Step};
use nx::{BinaryOp, CmpOp, DType, UnaryOp};

/// What a C-like target language says differently: types, per-element
/// expressions, and the function frame. Per-element expressions are exact:
/// each computes the same bits as nx's eager kernel for its (op, dtype).
pub trait Dialect: Sync {
    /// Source emitted once at the top of each translation unit (helpers
    /// the expressions call, macros the frame uses).
    fn prelude(&self) -> String;
    /// The type that holds one element of `dtype` in memory.
    fn ty(&self, dtype: DType) -> &'static str;
    /// `op(x)` for an element of `dtype` (`x` evaluated once).
    fn unary(&self, op: UnaryOp, dtype: DType, x: &str) -> String;
    /// A faster form of `op(x)` exact only for inputs in range, and a guard
    /// key that exceeds the dialect's limit when `x` is not (`x` named
    /// twice: pass a variable); `None` when `op` has no such form.
    fn unary_vectorized(&self, op: UnaryOp, dtype: DType, x: &str) -> Option<(String, String)>;
    /// `op(a, b)` for elements of `dtype`.
    fn binary(&self, op: BinaryOp, dtype: DType, a: &str, b: &str) -> String;
    /// `op(a, b)` for elements of `dtype`, a `Bool` result.
    fn compare(&self, op: CmpOp, dtype: DType, a: &str, b: &str) -> String;
    /// `c ? a : b` for elements of `dtype`.
    fn select(&self, dtype: DType, c: &str, a: &str, b: &str) -> String;
    /// `x` converted from `from` to `to`.
    fn cast(&self, from: DType, to: DType, x: &str) -> String;
    /// The constant `v` in `dtype`.
    fn literal(&self, dtype: DType, v: f64) -> String;
    /// A kernel function's signature, without the body: it takes the
    /// `buffers` buffers (as [`Dialect::buffer`] names them), `lo` and `hi`
    /// (the outer loop's range) and, where the dialect has guards, returns
    /// an `int` (nonzero: a guard failed). `small`: compiled for size
    /// rather than speed (see [`SMALL_WORK`]).
    fn kernel_signature(&self, name: &str, small: bool, buffers: usize) -> String;
    /// How the body names buffer `k` (the outputs first, then the arguments).
    fn buffer(&self, k: usize) -> String {
        format!("b[{k}]")
    }
    /// The statement returning from a kernel: `guard_failed` is a C
    /// expression, nonzero when a guard failed (a dialect without guarded
    /// forms returns nothing).
    fn ret(&self, guard_failed: &str) -> String {
        format!("return {guard_failed};")
    }
    /// The header of loop `var` over `from..to`, opening its block; `outer`:
    /// the kernel's outer loop (the one the runtime splits, or a GPU's
    /// grid-stride loop: [`crate::lower::Target::grid`]).
    fn loop_header(&self, var: &str, from: &str, to: &str, outer: bool) -> String {
        let _ = outer;
        format!("for (int64_t {var} = {from}; {var} < {to}; {var}++) {{")
    }
    /// A statement that ends every thread of the kernel but one, where a
    /// launch runs many: a kernel whose work cannot be parted (an unsplit
    /// scatter) runs on that one.
    fn single_thread(&self) -> Option<&'static str> {
        None
    }
    /// A line put before a map's innermost loop saying that its iterations
    /// are independent (its outputs never alias its inputs), where the
    /// language has one.
    fn independent_loop(&self) -> Option<&'static str> {
        None
    }
}

/// Programs with at least this many distinct kernels are compiled in
/// several translation units at once.
const UNIT_MIN_KERNELS: usize = 16;

/// A kernel is compiled without vectorization (gcc's `-O1`, through the
/// `optimize` attribute) when its work (iteration points times nodes) is at
/// most this and, over all its calls, at most 1/`SMALL_SHARE` of the
/// program's (kernels plus library steps, a product counted as its
/// multiply-adds). Vectorizing is most of gcc's time for a small loop
/// (about 20 ms of a function's 25 on this machine), while such a kernel's
/// run time is lost in the program's: a training step's softmax over
/// `[128, 10]` and its scalars beside 513M-flop products. In a program made
/// only of small kernels (a chain of elementwise ops on a short vector)
/// nothing qualifies, so latency-bound programs keep vectorized, inlined
/// code (gcc does not inline the prelude's helpers into a function with
/// other optimization options). Results are the same bit for bit at either
/// level (no fast-math, so no reassociation).
///
/// A product's multiply-adds count at 1/`PRODUCT_SPEED` of a kernel's
/// work point: the GEMM runs them about that much faster than a kernel
/// built at `-O1` runs its points (45 G multiply-adds/s on one core here,
/// against 1.2 G points/s for a bias-gradient reduction). Counted at par, a
/// reduction run once per scan step passed as small beside an RNN's
/// products and was 7% of a 1000-step run.
pub const SMALL_WORK: usize = 8192;
const SMALL_SHARE: usize = 200;
const PRODUCT_SPEED: usize = 32;

/// A program's generated code.
pub struct Code {
    /// The translation units, each starting with the dialect's prelude.
    pub units: Vec<String>,
    /// Per kernel (as the plan indexes them): the function it calls.
    pub names: Vec<String>,
    /// Per kernel: the function computing its exact form, when it has
    /// guarded fast forms (see [`render::render`]).
    pub exact_names: Vec<Option<String>>,
    /// A translation unit defining the exact forms (empty when no kernel
    /// has one): built only if a guard ever fails, so that a program's
    /// first build compiles each kernel once.
    pub exact: String,
    /// Per kernel: the primitives it fused and its function's source.
    pub sources: Vec<(Vec<String>, String)>,
}

/// Renders `kernels` (lowered to `nests`, run by `plan` over `g`) in
/// dialect `d`: kernels whose source is the same (the same loop nest over
/// buffers of other shapes that lower to the same loops, as a 1-D
/// elementwise pass of any length does) share one function; small ones are
/// compiled for size; with many, the functions are spread over up to
/// `units` translation units of about equal compile time.
pub fn generate(
    d: &dyn Dialect,
    g: &Graph,
    kernels: &[Kernel],
    nests: &[LoopNest],
    plan: &Plan,
    units: usize,
) -> Code {
    // Distinct functions, by their source under a placeholder name.
    let mut by_text: std::collections::HashMap<String, usize> = Default::default();
    let mut first: Vec<usize> = Vec::new(); // per function: its first kernel
    let mut fn_of = Vec::with_capacity(kernels.len());
    for (i, (k, nest)) in kernels.iter().zip(nests).enumerate() {
        let text = render::render(d, "tk_kernel", k, nest, false);
        let next = first.len();
        let f = *by_text.entry(text).or_insert(next);
        if f == next {
            first.push(i);
        }
        fn_of.push(f);
    }
    let small = small_functions(g, kernels, nests, plan, &fn_of, first.len());
    let fns: Vec<(String, String)> = first
        .iter()
        .enumerate()
        .map(|(f, &i)| {
            let name = format!("tk_k{f}");
            let text = render::render(d, &name, &kernels[i], &nests[i], small[f]);
            (name, text)
        })
        .collect();
    let names = fn_of.iter().map(|&f| fns[f].0.clone()).collect();
    let exact_fns: Vec<Option<String>> = first
        .iter()
        .map(|&i| {
            render::render_exact(
                d,
                &format!("tk_k{}_exact", fn_of[i]),
                &kernels[i],
                &nests[i],
            )
        })
        .collect();
    let exact_names = fn_of
        .iter()
        .map(|&f| {
            exact_fns[f]
                .is_some()
                .then(|| format!("{}_exact", fns[f].0))
        })
        .collect();
    let exact = if exact_fns.iter().any(Option::is_some) {
        let mut unit = d.prelude();
        for f in exact_fns.iter().flatten() {
            unit.push('\n');
            unit.push_str(f);
        }
        unit
    } else {
        String::new()
    };
    let sources = kernels
        .iter()
        .zip(&fn_of)
        .map(|(k, &f)| (k.fused.clone(), fns[f].1.clone()))
        .collect();
    // Functions go to units largest first, each to the unit with the least
    // estimated work, so that the concurrent compilers finish together.
    // The estimate is the function's loops (gcc's time goes to vectorizing
    // them: a column-tiled reduction, with a dozen, took 70 ms of a 110 ms
    // unit), half as much for a small kernel (`-O1`). Split by the source's
    // length instead, a training step's two units took 0.13 and 0.12 s of
    // CPU; by loops 0.11 and 0.10 (the least of 10 compiles each).
    let n_units = if fns.len() >= UNIT_MIN_KERNELS {
        units.max(1)
    } else {
        1
    };
    let prelude = d.prelude();
    let mut out = vec![prelude; n_units];
    let mut load = vec![0usize; n_units];
    let cost = |f: usize| (1 + fns[f].1.matches("for (").count()) * if small[f] { 1 } else { 2 };
    let mut order: Vec<usize> = (0..fns.len()).collect();
    order.sort_by_key(|&f| std::cmp::Reverse(cost(f)));
    for f in order {
        let u = (0..n_units).min_by_key(|&u| load[u]).unwrap_or(0);
        load[u] += cost(f);
        out[u].push('\n');
        out[u].push_str(&fns[f].1);
    }
    Code {
        units: out,
        names,
        exact_names,
        exact,
        sources,
    }
}

/// Which functions are small (see [`SMALL_WORK`]): `fn_of[k]` is the
/// function kernel `k` calls.
fn small_functions(
    g: &Graph,
    kernels: &[Kernel],
    nests: &[LoopNest],
    plan: &Plan,
    fn_of: &[usize],
    n_fns: usize,
) -> Vec<bool> {
    let kernel_work: Vec<usize> = kernels
        .iter()
        .zip(nests)
        .map(|(k, n)| n.dims.iter().product::<usize>() * k.nodes.len())
        .collect();
    let mut small = vec![true; n_fns];
    let mut fn_work = vec![0usize; n_fns];
    let mut total = 0usize;
    for step in &plan.steps {
        match step {
            Step::Kernel { kernel, .. } => {
                let (w, f) = (kernel_work[*kernel], fn_of[*kernel]);
                small[f] &= w <= SMALL_WORK;
                fn_work[f] += w;
                total += w;
            }
            Step::Library { eqn } => {
                let e = &g.eqns[*eqn];
                let out = g.aval(e.out()).numel();
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
    for (s, w) in small.iter_mut().zip(&fn_work) {
        *s &= w.saturating_mul(SMALL_SHARE) <= total;
    }
    small
}
