//! `jit`: stages a function into a `tolk::Graph` on the first call for each
//! leaf signature (dtypes and shapes in traversal order), compiles it with
//! tolk, and replays the compiled program on later calls. Under an
//! enclosing transformation the function runs directly, so the
//! transformation sees its operations and results never change.

//!
//! The device names and transfer counters are `crate::device`'s, the
//! per-signature programs `crate::signatures`', and a call on a `CPU:n`
//! device runs through `crate::placed` (as pmap's do).

use crate::device::{backend_or_panic, is_host, Backend};
use crate::export::{ExportError, ExportOpts};
use crate::lower::Lowered;
use crate::on_device::OnDevice;
use crate::placed::{Axes, Placed};
use crate::signatures::{catch_jit, debug_level, or_panic, stage, Lookup, SignatureCache};
use crate::stage::JitError;
use nx::Ptree;
use std::marker::PhantomData;
use std::path::Path;

/// Options of [`jit_with`].
#[derive(Clone, Debug)]
pub struct JitOpts {
    /// `"CPU"` (the default: the host, zero-copy), `"CPU:1"`, `"CPU:2"`,
    /// ... (host devices with a thread and memory of their own: inputs are
    /// copied to them, outputs stay there until read), `"CUDA"`, `"METAL"`.
    pub device: String,
    /// Consume resident inputs (meaningful on devices with their own
    /// memory; the CPU device reads inputs in place and has none).
    pub donate: bool,
}

impl Default for JitOpts {
    fn default() -> Self {
        JitOpts {
            device: "CPU".into(),
            donate: false,
        }
    }
}

/// One compiled signature on the host: the program and the traced output
/// (its structure, and ignored fields, for the results).
struct HostProgram<Q> {
    program: tolk::Program,
    template: Q,
    /// Seconds spent compiling (or loading) it, logged on its first call.
    compile_seconds: f64,
    /// Its first call ran eagerly while its kernels compiled (logged).
    eager_first: bool,
}

/// A compiled function (see [`jit`]). Not thread-safe: call it from the
/// thread that made it.
pub struct Jit<F, P, Q> {
    f: F,
    name: &'static str,
    /// The device it was made for (export names it when it refuses).
    device: String,
    /// On the host: its programs, through tolk's disk cache.
    programs: SignatureCache<HostProgram<Q>>,
    /// On a host device with memory of its own (`CPU:n`): how it runs there.
    placed: Option<Placed<Q>>,
    /// On a device with a runtime of its own (`CUDA`): how it runs there.
    on_device: Option<OnDevice<Q>>,
    _types: PhantomData<fn(&P) -> Q>,
}

/// `f` compiled: the first call with a new leaf signature traces `f`,
/// compiles the traced computation into fused kernels and runs them; later
/// calls with that signature replay the compiled program on the new leaf
/// values. Tensors `f` captures are compile-time constants (read in place
/// when contiguous); whole-tensor `assign` on an input leaf is replayed into
/// the caller's tensor on every call. A program whose C takes long to
/// compile but little to run (a long elementwise chain over a short vector)
/// runs its first call through the eager kernels while its C compiles, with
/// the same bits; later calls wait for the compiled kernels
/// (`tolk::Options::quick_first`).
///
/// Gathers (`take`, `take_along_axis`, `gather`) and `scatter_add` whose
/// indices are inputs or captured tensors compile into the kernels around
/// them (the gradient of a gather is such a scatter). Their indices are
/// checked before any kernel runs, on every call (a captured tensor's
/// once, when compiled): an index out of range panics with the eager
/// operation's message, before anything is written. Indices the program
/// computes (an `argmax`) are read by nx's eager kernel, which checks them.
///
/// ```
/// use rune::prelude::*;
/// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3]);
/// let f = rune::jit(|i: &Tensor| x.take(i, 0) * 10.0);
/// let i = Tensor::from_slice(&[2i32, -3], &[2]);
/// assert_eq!(f.call(&i).to_vec::<f32>(), vec![30.0, 10.0]);
/// let bad = Tensor::from_slice(&[3i32], &[1]);
/// assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f.call(&bad))).is_err());
/// ```
///
/// ```
/// use rune::prelude::*;
/// let f = rune::jit(|x: &Tensor| x.exp() * 2.0 + 1.0);
/// let x = Tensor::from_slice(&[0.0f32, 1.0], &[2]);
/// assert_eq!(f.call(&x).to_vec::<f32>(), (x.exp() * 2.0 + 1.0).to_vec::<f32>());
/// ```
pub fn jit<P: Ptree, Q: Ptree, F: Fn(&P) -> Q>(f: F) -> Jit<F, P, Q> {
    jit_with(f, JitOpts::default())
}

/// [`jit`] with options. Panics naming the device if it is unknown or
/// unavailable.
pub fn jit_with<P: Ptree, Q: Ptree, F: Fn(&P) -> Q>(f: F, opts: JitOpts) -> Jit<F, P, Q> {
    let backend = backend_or_panic("jit", &opts.device);
    if backend == Backend::Mpi {
        panic!(
            "jit: device {:?} is a process of an MPI world, which only pmap over \
             world.devices() runs across; jit on \"CPU\" compiles for this process",
            opts.device
        );
    }
    let cuda = backend == Backend::Cuda;
    let host = is_host(&opts.device);
    if host {
        // The first call's products would otherwise pay the GEMM
        // libraries' one-time setup (see nx's `warm_up_in_background`).
        nx::raw::warm_up_in_background();
    }
    Jit {
        f,
        name: std::any::type_name::<F>(),
        device: opts.device.clone(),
        programs: SignatureCache::new(true, true),
        on_device: cuda.then(|| OnDevice::new(&opts.device, opts.donate)),
        placed: (!host && !cuda).then(|| {
            Placed::new(
                "jit",
                vec![opts.device.clone()],
                Axes::Replicated,
                opts.donate,
                true,
            )
        }),
        _types: PhantomData,
    }
}

/// The staged graph of `f` at `p` (like JAX's `make_jaxpr`), without
/// compiling it. Its `Display` prints one primitive a line.
///
/// ```
/// use rune::prelude::*;
/// let g = rune::make_graph(|x: &Tensor| x.sin() + 1.0, &Tensor::zeros(&[3], DType::F32));
/// assert!(g.to_string().contains("sin"));
/// ```
pub fn make_graph<P: Ptree, Q: Ptree>(f: impl Fn(&P) -> Q, p: &P) -> tolk::Graph {
    or_panic(catch_jit(|| stage(&f, p).0))
}

/// The kernels jit would compile for `f` at `p` on `device`, rendered
/// but not built or run: today only `"CUDA"`, whose kernels render (and
/// compile, given NVRTC) on any machine, GPU or not. `Err` is the
/// `JitError` jit raises at trace time: an operation not yet on the
/// device (naming it and the device), or one jit refuses everywhere.
/// Panics for a device that has no renderer of its own (`"CPU"`: its
/// kernels are C, compiled by `jit`).
///
/// ```
/// use rune::prelude::*;
/// let x = Tensor::zeros(&[3], DType::F32);
/// let k = rune::device_kernels(|x: &Tensor| x.exp() * 2.0, &x, "CUDA").unwrap();
/// assert!(k.source.contains("__global__"));
/// let a = Tensor::zeros(&[2, 2], DType::F32);
/// let e = rune::device_kernels(|a: &Tensor| a.matmul(a), &a, "CUDA").err().unwrap();
/// assert!(e.message().contains("dot_general") && e.message().contains("CUDA"));
/// ```
pub fn device_kernels<P: Ptree, Q: Ptree>(
    f: impl Fn(&P) -> Q,
    p: &P,
    device: &str,
) -> Result<tolk::cuda::CudaProgram, JitError> {
    let name = device.split_once(':').map_or(device, |(b, _)| b);
    assert!(
        name == tolk::cuda::DEVICE,
        "device_kernels: device {device:?} has no renderer of its own; the devices with one \
         are \"CUDA\""
    );
    let graph = catch_jit(|| stage(&f, p).0)?;
    tolk::cuda::render(graph).map_err(JitError::new)
}

impl<P: Ptree, Q: Ptree, F: Fn(&P) -> Q> Jit<F, P, Q> {
    /// Runs the compiled function. Panics with the `JitError`'s message if
    /// `f` cannot be compiled.
    pub fn call(&self, p: &P) -> Q {
        or_panic(self.try_call(p))
    }

    /// Runs the compiled function, or returns why `f` cannot be compiled.
    ///
    /// A `JitError` raised while tracing `f` (an operation jit refuses,
    /// reading a traced value) travels back here by unwinding the panic it
    /// raises inside the trace: built with `panic = "abort"`, it aborts
    /// the process instead of returning `Err`.
    pub fn try_call(&self, p: &P) -> Result<Q, JitError> {
        if nx::trace::depth() > 0 {
            // Under a transformation (or an outer jit): let it see `f`.
            return Ok((self.f)(p));
        }
        if let Some(placed) = &self.placed {
            return placed.call(&self.f, self.name, p);
        }
        if let Some(d) = &self.on_device {
            return d.call(&self.f, self.name, p);
        }
        let leaves = p.leaves();
        let (entry, how) = self.programs.get_or_build(
            &self.f,
            p,
            &leaves,
            |_| Ok(()),
            |graph, template| {
                let compiled =
                    tolk::compile(graph, self.programs.persist).map_err(JitError::new)?;
                if debug_level() >= 2 {
                    eprintln!("jit {}: program\n{}", self.name, compiled.program.graph());
                    for (i, (fused, src)) in compiled.kernel_sources.iter().enumerate() {
                        eprintln!("jit kernel {i} fuses [{}]:\n{src}", fused.join(" "));
                    }
                }
                let entry = HostProgram {
                    program: compiled.program,
                    template,
                    compile_seconds: compiled.seconds,
                    eager_first: compiled.eager_first,
                };
                Ok((entry, compiled.origin))
            },
        )?;
        // Timed only on a miss: the warm path reads no clock.
        let t_run = (how != Lookup::Hit).then(std::time::Instant::now);
        let outs = entry.program.run(&leaves);
        if debug_level() >= 1 {
            // On a miss: how long tracing, compiling (or loading) and the
            // first run took.
            let timing = match (how, t_run) {
                (Lookup::Miss { trace_seconds, .. }, Some(t_run)) => format!(
                    ", trace {:.1} ms, compile {:.1} ms, run {:.1} ms{}",
                    trace_seconds * 1e3,
                    entry.compile_seconds * 1e3,
                    t_run.elapsed().as_secs_f64() * 1e3,
                    if entry.eager_first {
                        " (eager, while the kernels compile)"
                    } else {
                        ""
                    }
                ),
                _ => String::new(),
            };
            eprintln!(
                "jit {}: {}, {} kernels, {} steps{timing}, transfers 0 B",
                self.name,
                how.describe(),
                entry.program.num_kernels(),
                entry.program.num_steps()
            );
        }
        Ok(entry.template.with_leaves(&outs))
    }

    /// `f` traced for `p`'s signature, not compiled (JAX's `lower`):
    /// print it, [`compile`](Lowered::compile) it to inspect its kernels
    /// and cost, call or export that. Panics with the `JitError`'s message
    /// when `f` cannot be staged ([`try_lower`](Self::try_lower) returns it).
    /// Lowering compiles for the host, whatever the device.
    ///
    /// ```
    /// use rune::prelude::*;
    /// let f = rune::jit(|x: &Tensor| x.exp().sum(&[0], false));
    /// let lowered = f.lower(&Tensor::zeros(&[3], DType::F32));
    /// println!("{lowered}"); // { lambda %0:f32[3] . %1:f32[3] = exp %0 ... }
    /// let compiled = lowered.compile();
    /// assert_eq!(compiled.cost_analysis().transcendentals, 3);
    /// ```
    pub fn lower(&self, p: &P) -> Lowered<P, Q> {
        or_panic(self.try_lower(p))
    }

    /// [`lower`](Self::lower), returning why `f` cannot be staged.
    ///
    /// ```
    /// use rune::prelude::*;
    /// let f = rune::jit(|x: &Tensor| if x.sum_all().item::<f32>() > 0.0 { x.clone() } else { -x });
    /// assert!(f.try_lower(&Tensor::ones(&[2], DType::F32)).is_err()); // a branch on a traced value
    /// ```
    pub fn try_lower(&self, p: &P) -> Result<Lowered<P, Q>, JitError> {
        let (graph, template) = catch_jit(|| stage(&self.f, p))?;
        Ok(Lowered::new(graph, p, template))
    }

    /// Compiles `f` for `example`'s signature and writes it to `path` as one
    /// self-contained file: the kernels' native code, the plan, the arena
    /// layout, the signature and tree structure, the captured constants,
    /// the CPU features the code needs, a format version and a checksum
    /// ([`crate::export`] has the layout). [`Exported::load`](crate::Exported::load)
    /// runs it with no tracing and no C compiler. Staged loops (`scan`)
    /// are included, their bodies compiled as programs of their own.
    ///
    /// Works for jit on the host (`"CPU"`) and on host devices (`"CPU:n"`,
    /// whose code is the host's); a function jitted for `"CUDA"` is
    /// [`ExportError::UnsupportedDevice`]. A function that cannot be staged
    /// or compiled is [`ExportError::Jit`].
    ///
    /// ```
    /// use rune::prelude::*;
    /// let f = rune::jit(|x: &Tensor| x.relu() * 2.0);
    /// let x = Tensor::from_slice(&[-1.0f32, 3.0], &[2]);
    /// let path = std::env::temp_dir().join(format!("rune_doc_export_{}.rune", std::process::id()));
    /// f.export(&x, &path).unwrap();
    /// let m = rune::Exported::load(&path).unwrap();
    /// assert_eq!(m.call(&x).unwrap()[0].to_vec::<f32>(), vec![0.0, 6.0]);
    /// std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn export(&self, example: &P, path: impl AsRef<Path>) -> Result<(), ExportError> {
        self.export_with(example, path, &ExportOpts::default())
    }

    /// [`export`](Self::export) with options: the CPU targets the kernels
    /// are built for (default: x86-64-v2, -v3 and -v4 on x86-64, so the
    /// file runs on any x86-64-v2 CPU and at full speed on newer ones; the
    /// loader runs the best the host has) and a key that signs the file
    /// ([`Exported::load_trusted`](crate::Exported::load_trusted) checks
    /// it). A target that cannot be built (aarch64 without a cross
    /// compiler, targets of two architectures) is
    /// [`ExportError::CpuTarget`].
    ///
    /// ```
    /// use rune::prelude::*;
    /// use rune::export::{CpuTarget, ExportOpts};
    /// let f = rune::jit(|x: &Tensor| x.relu() * 2.0);
    /// let x = Tensor::from_slice(&[-1.0f32, 3.0], &[2]);
    /// let path = std::env::temp_dir().join(format!("rune_doc_export_with_{}.rune", std::process::id()));
    /// let portable = ExportOpts { cpu: vec![CpuTarget::portable()], ..Default::default() };
    /// f.export_with(&x, &path, &portable).unwrap();
    /// let m = rune::Exported::load(&path).unwrap();
    /// assert_eq!(m.call(&x).unwrap()[0].to_vec::<f32>(), vec![0.0, 6.0]);
    /// assert_eq!(m.info().targets.len(), 1);
    /// std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn export_with(
        &self,
        example: &P,
        path: impl AsRef<Path>,
        opts: &ExportOpts,
    ) -> Result<(), ExportError> {
        if self.on_device.is_some() {
            return Err(ExportError::UnsupportedDevice {
                device: self.device.clone(),
            });
        }
        let lowered = self.try_lower(example).map_err(ExportError::Jit)?;
        lowered.export_with(path.as_ref(), opts)
    }

    /// How many times `f` has been traced (once per new signature).
    pub fn trace_count(&self) -> usize {
        match (&self.placed, &self.on_device) {
            (Some(p), _) => p.trace_count(),
            (_, Some(d)) => d.trace_count(),
            _ => self.programs.trace_count(),
        }
    }
}
