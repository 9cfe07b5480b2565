//! Ahead-of-time lowering and inspection (JAX's `jit(f).lower(x)`,
//! `.compile()`, `.cost_analysis()`): [`Lowered`] is the traced program for
//! one input signature, printable like a jaxpr; [`Compiled`] is it
//! compiled to native kernels, with their C source and a cost estimate,
//! callable and exportable.

use crate::export::{self, CpuTarget, ExportError, ExportOpts, LeafSpec};
use crate::stage::JitError;
use nx::{Ptree, Tensor};
use std::fmt;
use std::marker::PhantomData;
use std::path::Path;
use tolk::export::ProgramImage;

/// A function traced for one input signature, not compiled yet (see
/// [`crate::Jit::lower`]). `Display` prints the traced program, one
/// primitive a line (like a jaxpr).
///
/// ```
/// use rune::prelude::*;
/// let f = rune::jit(|x: &Tensor| (x.sin() * 2.0).sum(&[0], false));
/// let lowered = f.lower(&Tensor::zeros(&[4], DType::F32));
/// let text = lowered.to_string();
/// assert!(text.contains("sin") && text.contains("reduce_sum"));
/// let compiled = lowered.compile();
/// assert_eq!(compiled.cost_analysis().transcendentals, 4);
/// ```
pub struct Lowered<P, Q> {
    graph: tolk::Graph,
    template: Q,
    inputs: Vec<LeafSpec>,
    outputs: Vec<LeafSpec>,
    _args: PhantomData<fn(&P)>,
}

impl<P: Ptree, Q: Ptree> Lowered<P, Q> {
    pub(crate) fn new(graph: tolk::Graph, args: &P, template: Q) -> Lowered<P, Q> {
        let inputs = export::LeafSpec::of_tree(args);
        let paths = template.leaf_paths();
        let outputs = graph
            .outputs
            .iter()
            .enumerate()
            .map(|(i, &v)| LeafSpec {
                path: paths.get(i).cloned().unwrap_or_default(),
                dtype: graph.aval(v).dtype,
                shape: graph.aval(v).shape.clone(),
            })
            .collect();
        Lowered {
            graph,
            template,
            inputs,
            outputs,
            _args: PhantomData,
        }
    }

    /// The traced program (before simplification).
    ///
    /// ```
    /// # use rune::prelude::*;
    /// let lowered = rune::jit(|x: &Tensor| x.exp()).lower(&Tensor::zeros(&[2], DType::F32));
    /// assert_eq!(lowered.graph().eqns.len(), 1);
    /// ```
    pub fn graph(&self) -> &tolk::Graph {
        &self.graph
    }

    /// The input leaves' paths, dtypes and shapes, in traversal order.
    ///
    /// ```
    /// # use rune::prelude::*;
    /// let lowered = rune::jit(|p: &(Tensor, Tensor)| &p.0 + &p.1)
    ///     .lower(&(Tensor::zeros(&[2], DType::F32), Tensor::zeros(&[2], DType::F32)));
    /// let paths: Vec<&str> = lowered.inputs().iter().map(|s| s.path.as_str()).collect();
    /// assert_eq!(paths, ["0", "1"]);
    /// ```
    pub fn inputs(&self) -> &[LeafSpec] {
        &self.inputs
    }

    /// The output leaves' paths, dtypes and shapes, in traversal order.
    ///
    /// ```
    /// # use rune::prelude::*;
    /// let lowered = rune::jit(|x: &Tensor| x.argmax(0, false)).lower(&Tensor::zeros(&[5], DType::F32));
    /// assert_eq!(lowered.outputs()[0].dtype, DType::I32);
    /// ```
    pub fn outputs(&self) -> &[LeafSpec] {
        &self.outputs
    }

    /// Compiles the program for the host (no disk cache: it always
    /// builds, with the system C compiler). Panics with the `JitError`'s
    /// message when it cannot ([`try_compile`](Self::try_compile) returns it).
    ///
    /// ```
    /// # use rune::prelude::*;
    /// let c = rune::jit(|x: &Tensor| x.exp() + 1.0).lower(&Tensor::zeros(&[8], DType::F32)).compile();
    /// assert_eq!(c.kernel_sources().len(), 1);
    /// ```
    pub fn compile(&self) -> Compiled<P, Q> {
        self.try_compile()
            .unwrap_or_else(|e| panic!("{}", e.message()))
    }

    /// [`compile`](Self::compile), returning why it cannot (no C compiler).
    ///
    /// ```
    /// # use rune::prelude::*;
    /// let lowered = rune::jit(|x: &Tensor| x * 3.0).lower(&Tensor::zeros(&[2], DType::F32));
    /// let c = lowered.try_compile().unwrap();
    /// let y = c.call(&Tensor::ones(&[2], DType::F32)).unwrap();
    /// assert_eq!(y.to_vec::<f32>(), vec![3.0, 3.0]);
    /// ```
    pub fn try_compile(&self) -> Result<Compiled<P, Q>, JitError> {
        let compiled = tolk::export::compile(self.graph.clone(), &[CpuTarget::Native])
            .map_err(JitError::new)?;
        let program = compiled.image.instantiate(0).map_err(JitError::new)?;
        Ok(Compiled {
            graph: self.graph.clone(),
            image: compiled.image,
            compilers: compiled.compilers,
            program,
            template: self.template.map_leaves(&mut |t| t.clone()),
            inputs: self.inputs.clone(),
            outputs: self.outputs.clone(),
            _args: PhantomData,
        })
    }

    /// Compiles the program for `opts`' targets and writes it to `path`
    /// as an exported file (what [`crate::Jit::export_with`] does).
    pub(crate) fn export_with(&self, path: &Path, opts: &ExportOpts) -> Result<(), ExportError> {
        export::compile_and_write(self.graph.clone(), path, opts, &self.inputs, &self.outputs)
    }
}

impl<P, Q> fmt::Display for Lowered<P, Q> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.graph)
    }
}

/// A program's estimated cost for one call, as JAX's `cost_analysis`
/// (how each figure is counted: [`tolk::cost`]).
///
/// ```
/// use rune::prelude::*;
/// let a = Tensor::zeros(&[8, 16], DType::F32);
/// let b = Tensor::zeros(&[16, 4], DType::F32);
/// let c = rune::jit(|p: &(Tensor, Tensor)| p.0.matmul(&p.1)).lower(&(a, b)).compile();
/// let cost = c.cost_analysis();
/// assert_eq!(cost.flops, 2 * 8 * 16 * 4);
/// assert_eq!(cost.bytes_accessed, 4 * (8 * 16 + 16 * 4 + 8 * 4));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CostAnalysis {
    /// Arithmetic operations other than transcendentals.
    pub flops: u64,
    /// Transcendental function evaluations (`exp`, `log`, `tanh`, ...).
    pub transcendentals: u64,
    /// Bytes read and written by the program's steps (each step's
    /// operands read once: a lower bound).
    pub bytes_accessed: u64,
    /// Bytes of the arena holding the intermediates kernels write.
    pub arena_bytes: u64,
}

/// A [`Lowered`] program compiled to native kernels: callable, exportable,
/// inspectable (the kernels' C, the simplified program, a cost estimate).
///
/// ```
/// use rune::prelude::*;
/// let x = Tensor::from_slice(&[1.0f32, 2.0], &[2]);
/// let c = rune::jit(|x: &Tensor| x.exp() * x).lower(&x).compile();
/// assert!(c.kernel_sources()[0].1.contains("tk_k0"));
/// assert_eq!(c.call(&x).unwrap().to_vec::<f32>(), (x.exp() * &x).to_vec::<f32>());
/// ```
pub struct Compiled<P, Q> {
    /// The lowered program (an export for other targets compiles it again).
    graph: tolk::Graph,
    /// Built for the host ([`CpuTarget::Native`]).
    image: ProgramImage,
    /// The compiler that built it.
    compilers: Vec<String>,
    program: tolk::Program,
    template: Q,
    inputs: Vec<LeafSpec>,
    outputs: Vec<LeafSpec>,
    _args: PhantomData<fn(&P)>,
}

impl<P: Ptree, Q: Ptree> Compiled<P, Q> {
    /// Runs it on `args` (a tree of the signature it was lowered for:
    /// another is a named error, as for [`crate::Exported::call`]).
    ///
    /// ```
    /// # use rune::prelude::*;
    /// let c = rune::jit(|x: &Tensor| x + 1.0).lower(&Tensor::zeros(&[2], DType::F32)).compile();
    /// assert!(c.call(&Tensor::zeros(&[3], DType::F32)).is_err());
    /// ```
    pub fn call(&self, args: &P) -> Result<Q, ExportError> {
        let leaves: Vec<Tensor> = args.leaves();
        let outs = export::run_checked(&self.program, &self.inputs, &leaves)?;
        Ok(self.template.with_leaves(&outs))
    }

    /// Per kernel: the primitives it fused and its C function.
    ///
    /// ```
    /// # use rune::prelude::*;
    /// let c = rune::jit(|x: &Tensor| x.tanh()).lower(&Tensor::zeros(&[2], DType::F32)).compile();
    /// let (fused, source) = &c.kernel_sources()[0];
    /// assert_eq!(fused, &["tanh".to_string()]);
    /// assert!(source.starts_with("int tk_k0") || source.contains("tk_k0("));
    /// ```
    pub fn kernel_sources(&self) -> &[(Vec<String>, String)] {
        &self.image.sources
    }

    /// The simplified program the kernels run (its `Display` prints it).
    ///
    /// ```
    /// # use rune::prelude::*;
    /// let c = rune::jit(|x: &Tensor| x.exp() * 2.0).lower(&Tensor::zeros(&[2], DType::F32)).compile();
    /// assert!(c.graph().to_string().contains("exp"));
    /// ```
    pub fn graph(&self) -> &tolk::Graph {
        &self.image.graph
    }

    /// The estimated cost of one call (see [`CostAnalysis`]).
    ///
    /// ```
    /// # use rune::prelude::*;
    /// let c = rune::jit(|x: &Tensor| x * 2.0 + 1.0).lower(&Tensor::zeros(&[100], DType::F32)).compile();
    /// let cost = c.cost_analysis();
    /// assert_eq!(cost.flops, 200); // one multiply and one add per element
    /// assert_eq!(cost.bytes_accessed, 800); // one fused kernel: reads x, writes y
    /// ```
    pub fn cost_analysis(&self) -> CostAnalysis {
        let c = self.image.cost();
        CostAnalysis {
            flops: c.flops,
            transcendentals: c.transcendentals,
            bytes_accessed: c.bytes_accessed,
            arena_bytes: self.image.arena_bytes() as u64,
        }
    }

    /// Writes it to `path` as an exported file ([`crate::Exported::load`]
    /// reads it), with [`ExportOpts::default`]: the program is compiled
    /// again for the default targets (what is compiled here runs on this
    /// host: it is built for [`CpuTarget::Native`]).
    ///
    /// ```
    /// # use rune::prelude::*;
    /// let x = Tensor::from_slice(&[0.5f32], &[1]);
    /// let c = rune::jit(|x: &Tensor| x.sqrt()).lower(&x).compile();
    /// let path = std::env::temp_dir().join(format!("rune_doc_compiled_{}.rune", std::process::id()));
    /// c.export(&path).unwrap();
    /// let m = rune::Exported::load(&path).unwrap();
    /// assert_eq!(m.call(&x).unwrap()[0].to_vec::<f32>(), x.sqrt().to_vec::<f32>());
    /// std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn export(&self, path: impl AsRef<Path>) -> Result<(), ExportError> {
        self.export_with(path, &ExportOpts::default())
    }

    /// [`export`](Self::export) with options: the CPU targets to build
    /// for and a signing key. Targets `[CpuTarget::Native]` write the code
    /// compiled here; others compile the program again.
    ///
    /// ```
    /// # use rune::prelude::*;
    /// use rune::export::{CpuTarget, ExportOpts};
    /// let x = Tensor::from_slice(&[0.5f32], &[1]);
    /// let c = rune::jit(|x: &Tensor| x.sqrt()).lower(&x).compile();
    /// let path = std::env::temp_dir().join(format!("rune_doc_compiled_native_{}.rune", std::process::id()));
    /// c.export_with(&path, &ExportOpts { cpu: vec![CpuTarget::Native], ..Default::default() }).unwrap();
    /// let m = rune::Exported::load(&path).unwrap();
    /// assert_eq!(m.info().targets[0].name, "native");
    /// std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn export_with(
        &self,
        path: impl AsRef<Path>,
        opts: &ExportOpts,
    ) -> Result<(), ExportError> {
        let path = path.as_ref();
        if opts.cpu != [CpuTarget::Native] {
            return export::compile_and_write(
                self.graph.clone(),
                path,
                opts,
                &self.inputs,
                &self.outputs,
            );
        }
        export::write_file(
            path,
            &self.image,
            &export::FileParts {
                targets: &opts.cpu,
                compilers: &self.compilers,
                inputs: &self.inputs,
                outputs: &self.outputs,
                signing_key: opts.signing_key.as_ref(),
            },
        )
    }
}
