//! The CUDA device's compile side: a [`Graph`] rendered as CUDA kernels
//! ([`codegen::cuda`], the same fusion, plan and lowering as the CPU's) and
//! compiled by NVRTC ([`crate::nvrtc`]) to PTX. Running them is
//! [`crate::device`]'s ([`crate::device::exec`]).
//!
//! The compile is [`crate::pipeline`]'s, for [`target`]: every reduction
//! is a kernel here ([`crate::fuse::fuse_with`]): the CPU's
//! library reductions are nx's eager kernels, which a device cannot call.
//! Gathers and scatter-adds by input or captured indices are kernels as on
//! the CPU (their indices checked before any kernel runs), and so are the
//! window reductions `simplify` turns into maps or reductions (average
//! pools, unpadded max pools over small windows). The library steps the
//! CPU leaves to nx's kernels that have a rule in
//! [`codegen::cuda_library`] are kernels of their own here
//! ([`LibraryKernel`]): max windows with padding, overlapping at a stride
//! or of more than 32 points, large sum windows, the first maxima of
//! windows (a max pool's gradient), arg-reductions, running sums and
//! products, and gathers and scatter-adds by indices the program
//! computes, after a check kernel whose flag the runtime reads back
//! ([`IndexKernel`]). The other library steps (convolutions, sorts,
//! top-k, threefry) are not rendered yet: [`render`] refuses a program holding one, naming its
//! primitives and the device. A staged loop is a host-driven loop over
//! its body's kernels: its body is rendered as a program of its own.

use crate::codegen::{self, cuda::Cuda};
use crate::graph::Graph;
use crate::lower;
use crate::pipeline::{self, Generated, Target};
use crate::plan::{Plan, Step};

/// The device's name in messages.
pub const DEVICE: &str = "CUDA";

/// A program's CUDA kernels, rendered.
pub struct CudaProgram {
    /// One CUDA C++ translation unit defining every kernel (the prelude
    /// first).
    pub source: String,
    /// Per kernel, as the plan indexes them.
    pub kernels: Vec<CudaKernel>,
    /// The steps over buffers (as the CPU's plan: kernels, loops, frees).
    pub plan: Plan,
    /// Per loop equation (its index): its body's program.
    pub bodies: Vec<(usize, CudaProgram)>,
    /// The library steps run as kernels of their own
    /// ([`codegen::cuda_library`]), in plan order.
    pub library: Vec<LibraryKernel>,
    /// The simplified graph the plan indexes (inputs, constants, outputs,
    /// writebacks, and the equations of library steps).
    pub graph: Graph,
}

/// One kernel of a [`CudaProgram`].
pub struct CudaKernel {
    /// Its `extern "C"` function's name in [`CudaProgram::source`].
    pub name: String,
    /// How many output points its grid-stride loop covers (`hi`; `lo` = 0).
    pub points: usize,
    /// Buffers it takes (its outputs first, then its arguments).
    pub buffers: usize,
    /// The primitives it fused.
    pub fused: Vec<String>,
}

/// A library step the device runs as a kernel of its own (its operands
/// contiguous, its output fresh): a window reduction `simplify` left, a
/// window's first maximum, an arg-reduction, a running sum or product, a
/// gather or scatter-add by computed indices.
pub struct LibraryKernel {
    /// The equation it computes (a [`Step::Library`] of the plan).
    pub eqn: usize,
    /// Its kernel (`b0` the output, then the equation's inputs).
    pub kernel: CudaKernel,
    /// A gather's or scatter-add's index check, run before it.
    pub check: Option<IndexKernel>,
}

/// The check of a library gather's or scatter-add's indices (its input 1)
/// on the device ([`codegen::cuda_library::index_check`]): the kernel
/// sets a flag ([`codegen::cuda_library::FLAG_CLEAR`] clears it) that the
/// runtime reads back before the step; when set, it reads the indices
/// and raises eager's message for the first out of range.
pub struct IndexKernel {
    /// The check's kernel (`b0` the flag, `b1` the indices).
    pub kernel: CudaKernel,
    /// The primitive as eager names it in its message.
    pub op: &'static str,
    /// The gathered (or scattered) axis.
    pub axis: usize,
    /// Its size.
    pub axis_len: usize,
}

impl CudaProgram {
    /// The translation units of this program and of its loops' bodies, in
    /// order (this program's first).
    pub fn sources(&self) -> Vec<&str> {
        let mut out = vec![self.source.as_str()];
        for (_, b) in &self.bodies {
            out.extend(b.sources());
        }
        out
    }

    /// Kernels in this program and its loops' bodies.
    pub fn num_kernels(&self) -> usize {
        self.kernels.len()
            + self.library.len()
            + self.library.iter().filter(|l| l.check.is_some()).count()
            + self
                .bodies
                .iter()
                .map(|(_, b)| b.num_kernels())
                .sum::<usize>()
    }
}

/// Renders `graph` as CUDA kernels. `Err` names the primitives the CUDA
/// dialect does not render yet and the device (rune raises it as a
/// `JitError` at trace time: never a silent host round trip).
pub fn render(graph: Graph) -> Result<CudaProgram, String> {
    render_with(graph, false)
}

/// [`render`] for running on a device ([`crate::device::exec`]): products
/// (`dot_general`) are library steps there (gemm through the device
/// interface), and the views feeding them eager view steps; the other
/// library steps are refused as by [`render`].
pub fn render_program(graph: Graph) -> Result<CudaProgram, String> {
    render_with(graph, true)
}

/// Whether a library step runs on the device ([`render_program`]): a
/// product (gemm), or a primitive rendered as a kernel of its own
/// ([`codegen::cuda_library::renders`]).
pub fn runs_on_device(p: &nx::Prim) -> bool {
    matches!(p, nx::Prim::DotGeneral { .. }) || codegen::cuda_library::renders(p)
}

/// The compile target of [`render`] (`products` false: products refused)
/// and [`render_program`] (products and the views feeding them run as
/// library steps): the CUDA dialect, every reduction a kernel, the kept
/// dims one grid-stride loop ([`lower::Target::GPU`]), one translation
/// unit; the library steps with a kernel of their own
/// ([`codegen::cuda_library`]) and the views feeding them run in both.
pub fn target(products: bool) -> Target {
    Target {
        dialect: Box::new(Cuda::for_host()),
        device: true,
        lowering: lower::Target::GPU,
        stream_min_bytes: None,
        units: 1,
        runs: if products {
            |p| runs_on_device(p) || p.class() == nx::PrimClass::View
        } else {
            |p| codegen::cuda_library::renders(p) || p.class() == nx::PrimClass::View
        },
    }
}

fn render_with(graph: Graph, products: bool) -> Result<CudaProgram, String> {
    let g = pipeline::simplify(graph);
    // Each loop's body, its consts that are constants here made its own
    // (as the CPU's compile does: their indices checked once).
    let mut bodies = Vec::new();
    for (i, body) in crate::loop_bodies(&g) {
        bodies.push((i, render_with(body, products)?));
    }
    let Generated {
        kernels,
        nests,
        plan,
        code,
        ..
    } = pipeline::generate(&g, &target(products)).map_err(|r| refusal(&r))?;
    debug_assert!(
        code.exact.is_empty(),
        "the CUDA dialect has no guarded forms"
    );
    let described = kernels
        .iter()
        .zip(&nests)
        .zip(&code.names)
        .map(|((k, n), name)| CudaKernel {
            name: name.clone(),
            // The grid-stride loop's range: the output's points, or a
            // scatter's outer loop (its threads part that loop only).
            points: n.outer(),
            buffers: k.out_dtypes.len() + k.arg_dtypes.len(),
            fused: k.fused.clone(),
        })
        .collect();
    let mut source = code.units.into_iter().next().unwrap_or_default();
    let at = source.len();
    let library = library_kernels(&g, &plan, &mut source).map_err(|r| refusal(&[r]))?;
    if pipeline::dumping() && source.len() > at {
        eprint!("tolk: CUDA library kernels\n{}", &source[at..]);
    }
    Ok(CudaProgram {
        source,
        kernels: described,
        plan,
        bodies,
        library,
        graph: g,
    })
}

/// The plan's library steps that have a kernel of their own
/// ([`codegen::cuda_library`]), rendered and appended to `source` (with
/// their index checks, and the flag's clearing kernel once); `Err` names
/// one that is not rendered (its dtype).
fn library_kernels(
    g: &Graph,
    plan: &Plan,
    source: &mut String,
) -> Result<Vec<LibraryKernel>, String> {
    use codegen::cuda_library as lib;
    let d = Cuda::for_host();
    let mut out = Vec::new();
    for step in &plan.steps {
        let Step::Library { eqn } = step else {
            continue;
        };
        let e = &g.eqns[*eqn];
        let Some(prim) = e.as_prim().filter(|p| lib::renders(p)) else {
            continue;
        };
        let ins: Vec<&nx::Aval> = e.inputs.iter().map(|&v| g.aval(v)).collect();
        let o = g.aval(e.out());
        let name = format!("tk_klib{eqn}");
        source.push_str(&lib::render(&d, &name, prim, &ins, o)?);
        let check = match prim {
            nx::Prim::Gather { axis } | nx::Prim::ScatterAdd { axis } => {
                let op = if matches!(prim, nx::Prim::Gather { .. }) {
                    "gather"
                } else {
                    "scatter_add"
                };
                let axis_len = ins[0].shape[*axis];
                let cname = format!("tk_kcheck{eqn}");
                source.push_str(&lib::index_check(&d, &cname, ins[1], axis_len));
                Some(IndexKernel {
                    kernel: CudaKernel {
                        name: cname,
                        points: ins[1].numel(),
                        buffers: 2,
                        fused: vec![format!("{op} index check")],
                    },
                    op,
                    axis: *axis,
                    axis_len,
                })
            }
            _ => None,
        };
        out.push(LibraryKernel {
            eqn: *eqn,
            kernel: CudaKernel {
                name,
                points: lib::points(prim, o),
                buffers: 1 + ins.len(),
                fused: vec![prim.name()],
            },
            check,
        });
    }
    if out.iter().any(|l| l.check.is_some()) {
        source.push_str(&lib::flag_clear(&d));
    }
    Ok(out)
}

/// The message for primitives not rendered on CUDA yet.
fn refusal(prims: &[String]) -> String {
    let (what, verb) = if prims.len() == 1 {
        ("operation", "is")
    } else {
        ("operations", "are")
    };
    format!(
        "{what} {} {verb} not supported on device \"{DEVICE}\" yet (the CUDA dialect renders \
         elementwise, movement, pad/concat, reduction, gather and scatter-add kernels, window \
         reductions, arg-reductions, running sums and products, and staged loops; products run \
         as gemm steps; convolutions, sorts, top-k and threefry are not rendered yet); use \
         device \"CPU\"",
        prims.join(", ")
    )
}

/// The NVRTC options for compute capability `arch` (`"compute_90"`): the
/// dialect's ([`codegen::cuda::NVRTC_OPTIONS`]) and the architecture.
pub fn nvrtc_options(arch: &str) -> Vec<String> {
    let mut o: Vec<String> = codegen::cuda::NVRTC_OPTIONS
        .iter()
        .map(|s| s.to_string())
        .collect();
    o.push(format!("--gpu-architecture={arch}"));
    o
}

/// Compiles a rendered program's translation units (its own and its
/// loops' bodies') to PTX for `arch`, one NVRTC program per unit.
pub fn compile_ptx(p: &CudaProgram, arch: &str) -> Result<Vec<String>, String> {
    let nvrtc = crate::nvrtc::Nvrtc::get()?;
    let opts = nvrtc_options(arch);
    let refs: Vec<&str> = opts.iter().map(String::as_str).collect();
    p.sources()
        .iter()
        .enumerate()
        .map(|(i, s)| nvrtc.compile_ptx(s, &format!("tolk_cuda_{i}.cu"), &refs))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Eqn;
    use nx::{Aval, BinaryOp, DType, Prim, ReduceOp, UnaryOp};

    fn exp_sum() -> Graph {
        let mut g = Graph::default();
        let x = g.new_var(Aval::new(&[4, 300], DType::F32));
        let e = g.new_var(Aval::new(&[4, 300], DType::F32));
        let y = g.new_var(Aval::new(&[4, 300], DType::F32));
        let s = g.new_var(Aval::new(&[4], DType::F32));
        g.inputs.push(x);
        g.eqns
            .push(Eqn::prim(Prim::Unary(UnaryOp::Exp), vec![x], e));
        g.eqns
            .push(Eqn::prim(Prim::Binary(BinaryOp::Mul), vec![e, x], y));
        g.eqns.push(Eqn::prim(
            Prim::Reduce {
                op: ReduceOp::Sum,
                axes: vec![1],
            },
            vec![x],
            s,
        ));
        g.outputs.push(y);
        g.outputs.push(s);
        g
    }

    #[test]
    fn kernels_are_grid_stride_loops_and_a_reduction_of_an_input_is_a_kernel() {
        let p = render(exp_sum()).unwrap();
        // The map and the sum of an input (a library step on the CPU).
        assert_eq!(p.kernels.len(), 2);
        assert!(p.source.contains("extern \"C\" __global__"));
        assert!(p.source.contains("blockIdx.x * blockDim.x + threadIdx.x"));
        assert!(p.source.contains("tk_exp_f32("), "the CPU's exp");
        assert!(!p.source.contains("return 0;"));
        let mut points: Vec<usize> = p.kernels.iter().map(|k| k.points).collect();
        points.sort();
        assert_eq!(points, [4, 1200]);
    }

    /// A padded max window and a gather by the indices the program
    /// computes (its first maxima) are library steps with kernels of their
    /// own, the gather's after its index check; the flag's clearing
    /// kernel once.
    #[test]
    fn library_steps_with_a_rule_are_kernels_of_their_own() {
        let mut g = Graph::default();
        let x = g.new_var(Aval::new(&[2, 9, 7], DType::F32));
        let m = g.new_var(Aval::new(&[2, 5, 4], DType::F32));
        let am = g.new_var(Aval::new(&[2, 5, 4], DType::I32));
        let flat = g.new_var(Aval::new(&[2, 63], DType::F32));
        let idx = g.new_var(Aval::new(&[2, 20], DType::I32));
        let picked = g.new_var(Aval::new(&[2, 20], DType::F32));
        g.inputs.push(x);
        let (window, strides, padding) =
            (vec![1, 3, 3], vec![1, 2, 2], vec![(0, 0), (1, 1), (1, 1)]);
        g.eqns.push(Eqn::prim(
            Prim::ReduceWindow {
                op: ReduceOp::Max,
                window: window.clone(),
                strides: strides.clone(),
                padding: padding.clone(),
            },
            vec![x],
            m,
        ));
        g.eqns.push(Eqn::prim(
            Prim::WindowArgmax {
                window,
                strides,
                padding,
                flat_from: 1,
            },
            vec![x],
            am,
        ));
        g.eqns.push(Eqn::prim(
            Prim::Reshape { shape: vec![2, 63] },
            vec![x],
            flat,
        ));
        g.eqns.push(Eqn::prim(
            Prim::Reshape { shape: vec![2, 20] },
            vec![am],
            idx,
        ));
        g.eqns
            .push(Eqn::prim(Prim::Gather { axis: 1 }, vec![flat, idx], picked));
        g.outputs.extend([m, picked]);
        let p = render(g).unwrap();
        let names: Vec<&str> = p.library.iter().map(|l| l.kernel.name.as_str()).collect();
        assert_eq!(names.len(), 3, "{names:?}");
        for n in &names {
            assert!(p.source.contains(&format!("{n}(")), "{n}");
        }
        let gather = p.library.last().unwrap();
        let check = gather.check.as_ref().expect("an index check");
        assert_eq!((check.op, check.axis, check.axis_len), ("gather", 1, 63));
        assert_eq!(check.kernel.points, 40);
        assert_eq!(
            p.source.matches(codegen::cuda_library::FLAG_CLEAR).count(),
            1
        );
        // Padding is skipped by a bounds check; the max starts at -inf.
        assert!(p
            .source
            .contains("(uint64_t)i1 >= 9ull || (uint64_t)i2 >= 7ull"));
        assert!(p.source.contains("acc = (-INFINITY)"));
    }

    #[test]
    fn a_product_is_refused_naming_it_and_the_device() {
        let mut g = Graph::default();
        let a = g.new_var(Aval::new(&[2, 3], DType::F32));
        let b = g.new_var(Aval::new(&[3, 2], DType::F32));
        let c = g.new_var(Aval::new(&[2, 2], DType::F32));
        g.inputs.extend([a, b]);
        g.eqns.push(Eqn::prim(
            Prim::DotGeneral {
                lhs_contract: vec![1],
                rhs_contract: vec![0],
                lhs_batch: vec![],
                rhs_batch: vec![],
            },
            vec![a, b],
            c,
        ));
        g.outputs.push(c);
        let e = render(g).err().expect("refused");
        assert!(e.contains("dot_general") && e.contains("\"CUDA\""), "{e}");
    }
}
