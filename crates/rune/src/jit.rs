//! `jit`: stages a function into a `tolk::Graph` on the first call for each
//! leaf signature (dtypes and shapes in traversal order), compiles it with
//! tolk, and replays the compiled program on later calls. Under an
//! enclosing transformation the function runs directly, so the
//! transformation sees its operations and results never change.

use crate::stage::{JitError, Staging};
use nx::{DType, Ptree, Tensor};
use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// Transfer counters of compiled functions (the seed's `jit_stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JitStats {
    /// Bytes copied from the host to a device since the last
    /// [`reset_jit_stats`] (0 on the CPU device).
    pub bytes_to_device: u64,
    /// Bytes copied from a device back to the host since the last
    /// [`reset_jit_stats`] (0 on the CPU device).
    pub bytes_from_device: u64,
    /// Device bytes held now by unread outputs (live; not reset).
    pub resident_bytes: u64,
}

static BYTES_TO_DEVICE: AtomicU64 = AtomicU64::new(0);
static BYTES_FROM_DEVICE: AtomicU64 = AtomicU64::new(0);
pub(crate) static RESIDENT_BYTES: AtomicU64 = AtomicU64::new(0);

/// The cumulative transfer counters. The CPU device reads and writes host
/// memory in place: it moves, and counts, nothing.
pub fn jit_stats() -> JitStats {
    JitStats {
        bytes_to_device: BYTES_TO_DEVICE.load(Ordering::Relaxed),
        bytes_from_device: BYTES_FROM_DEVICE.load(Ordering::Relaxed),
        resident_bytes: RESIDENT_BYTES.load(Ordering::Relaxed),
    }
}

/// Adds a call's transfers to the counters.
pub(crate) fn count_transfers(to_device: u64, from_device: u64) {
    BYTES_TO_DEVICE.fetch_add(to_device, Ordering::Relaxed);
    BYTES_FROM_DEVICE.fetch_add(from_device, Ordering::Relaxed);
}

/// Zeroes the cumulative transfer counters (`resident_bytes` is live state
/// and stays).
pub fn reset_jit_stats() {
    BYTES_TO_DEVICE.store(0, Ordering::Relaxed);
    BYTES_FROM_DEVICE.store(0, Ordering::Relaxed);
}

/// One compiled signature.
struct Entry<Q> {
    signature: Vec<(DType, Vec<usize>)>,
    /// The program assigns to inputs (overlapping views are then an error).
    writes: bool,
    /// Which leaves alias which is part of the signature: when the program
    /// writes, or when it was traced with aliased leaves (they were staged
    /// as one input, so the program reads only the first of them: a later
    /// call with distinct tensors there must trace again).
    keyed_by_aliases: bool,
    aliases: Vec<usize>,
    program: tolk::Program,
    /// The traced output: its structure (and ignored fields) for the results.
    template: Q,
}

/// A compiled function (see [`jit`]). Not thread-safe, as the seed says.
pub struct Jit<F, P, Q> {
    f: F,
    name: &'static str,
    entries: RefCell<Vec<Entry<Q>>>,
    traces: Cell<usize>,
    /// On a host device with memory of its own (`CPU:n`): how it runs there.
    placed: Option<crate::pmap::Placed<Q>>,
    _types: PhantomData<fn(&P) -> Q>,
}

/// `f` compiled: the first call with a new leaf signature traces `f`,
/// compiles the traced computation into fused kernels and runs them; later
/// calls with that signature replay the compiled program on the new leaf
/// values. Tensors `f` captures are compile-time constants (read in place
/// when contiguous); whole-tensor `assign` on an input leaf is replayed into
/// the caller's tensor on every call.
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
    if let Err(e) = device_backend(&opts.device) {
        panic!("jit: {e}");
    }
    let host = is_host(&opts.device);
    if host {
        // The first call's products would otherwise pay the GEMM
        // libraries' one-time setup (see nx's `warm_up_in_background`).
        nx::raw::warm_up_in_background();
    }
    Jit {
        f,
        name: std::any::type_name::<F>(),
        entries: RefCell::new(Vec::new()),
        traces: Cell::new(0),
        placed: (!host).then(|| {
            crate::pmap::Placed::new(
                "jit",
                vec![opts.device.clone()],
                crate::pmap::Axes::Replicated,
                opts.donate,
            )
        }),
        _types: PhantomData,
    }
}

/// The backend of `device` if it is one that can run here (`"CPU"`, the
/// host, or a host device `"CPU:n"`), else why not, naming it.
pub(crate) fn device_backend(device: &str) -> Result<&'static str, String> {
    let (backend, instance) = match device.split_once(':') {
        Some((b, i)) => (b, Some(i)),
        None => (device, None),
    };
    let instance_ok = instance.is_none_or(|i| i.parse::<usize>().is_ok());
    match backend {
        "CPU" if instance_ok => Ok("CPU"),
        "CUDA" if instance_ok => Err(format!(
            "device {device:?} is not available: CUDA is not available in this build of rune; \
             use \"CPU\""
        )),
        "METAL" if instance_ok => Err(format!(
            "device {device:?} is not available: METAL is available on macOS only"
        )),
        _ => Err(format!(
            "unknown device {device:?}; the devices are \"CPU\", \"CUDA\" and \"METAL\", \
             with an instance suffix to address several (\"CPU:1\", \"CPU:2\", ...)"
        )),
    }
}

/// Whether `device` is the host itself (`"CPU"`, `"CPU:0"`: zero-copy, the
/// calling thread) rather than a device with memory of its own.
pub(crate) fn is_host(device: &str) -> bool {
    device == "CPU" || device == "CPU:0"
}

/// `RUNE_JIT_DEBUG`'s level (0 when unset).
pub(crate) fn debug_level() -> u8 {
    static LEVEL: std::sync::OnceLock<u8> = std::sync::OnceLock::new();
    *LEVEL.get_or_init(|| {
        std::env::var("RUNE_JIT_DEBUG")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    })
}

/// How the input leaves alias one another: `first[j]` is the first leaf
/// that is the same view of the same storage as leaf `j` (`j` if none);
/// `overlap` names two leaves that share storage through different views
/// (which a compiled program cannot model when it assigns in place).
struct Aliases {
    first: Vec<usize>,
    overlap: Option<(usize, usize)>,
}

impl Aliases {
    fn of(leaves: &[Tensor]) -> Aliases {
        let mut first: Vec<usize> = (0..leaves.len()).collect();
        let mut overlap = None;
        for j in 0..leaves.len() {
            for i in 0..j {
                if first[i] == i && leaves[i].shares_storage_with(&leaves[j]) {
                    let same = leaves[i].shape() == leaves[j].shape()
                        && leaves[i].strides() == leaves[j].strides()
                        && leaves[i].offset() == leaves[j].offset();
                    if same {
                        first[j] = i;
                        break;
                    }
                    overlap.get_or_insert((i, j));
                }
            }
        }
        Aliases { first, overlap }
    }
}

fn overlap_error(i: usize, j: usize) -> JitError {
    JitError::new(format!(
        "jit: input leaves {i} and {j} are different views of one tensor's storage and the          function assigns to its inputs in place; the compiled program cannot replay how the          writes would show through the other view. Pass separate tensors (copy one of them)"
    ))
}

/// Runs `f` under a staging trace on tracers for `p`'s leaves.
pub(crate) fn stage<P: Ptree, Q: Ptree>(f: &impl Fn(&P) -> Q, p: &P) -> (tolk::Graph, Q) {
    let leaves = p.leaves();
    stage_with(f, p, &leaves, &(0..leaves.len()).collect::<Vec<_>>())
}

fn stage_with<P: Ptree, Q: Ptree>(
    f: &impl Fn(&P) -> Q,
    p: &P,
    leaves: &[Tensor],
    aliases: &[usize],
) -> (tolk::Graph, Q) {
    let (staging, tracers) = Staging::begin(leaves, aliases);
    let q = f(&p.with_leaves(&tracers));
    let graph = staging.finish(&q.leaves());
    (graph, q)
}

/// Catches a `JitError` raised while tracing; other panics propagate.
pub(crate) fn catch_jit<R>(f: impl FnOnce() -> R) -> Result<R, JitError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => Ok(r),
        Err(payload) => match payload.downcast::<JitError>() {
            Ok(e) => Err(*e),
            Err(other) => std::panic::resume_unwind(other),
        },
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
    match catch_jit(|| stage(&f, p).0) {
        Ok(g) => g,
        Err(e) => panic!("{}", e.message()),
    }
}

impl<P: Ptree, Q: Ptree, F: Fn(&P) -> Q> Jit<F, P, Q> {
    /// Runs the compiled function. Panics with the `JitError`'s message if
    /// `f` cannot be compiled.
    pub fn call(&self, p: &P) -> Q {
        match self.try_call(p) {
            Ok(q) => q,
            Err(e) => panic!("{}", e.message()),
        }
    }

    /// Runs the compiled function, or returns why `f` cannot be compiled.
    pub fn try_call(&self, p: &P) -> Result<Q, JitError> {
        if nx::trace::depth() > 0 {
            // Under a transformation (or an outer jit): let it see `f`.
            return Ok((self.f)(p));
        }
        if let Some(placed) = &self.placed {
            return placed.call(&self.f, self.name, p);
        }
        let leaves = p.leaves();
        let mut aliases: Option<Aliases> = None;
        let hit = {
            let entries = self.entries.borrow();
            entries.iter().position(|e| {
                same_signature(&e.signature, &leaves)
                    && (!e.keyed_by_aliases
                        || aliases.get_or_insert_with(|| Aliases::of(&leaves)).first == e.aliases)
            })
        };
        if let Some(i) = hit {
            if self.entries.borrow()[i].writes {
                if let Some((a, b)) = aliases.as_ref().and_then(|a| a.overlap) {
                    return Err(overlap_error(a, b));
                }
            }
        }
        let (index, how, first_call) = match hit {
            Some(i) => (i, "hit memory", None),
            None => {
                let aliases = aliases.unwrap_or_else(|| Aliases::of(&leaves));
                let t_trace = std::time::Instant::now();
                let (graph, template) =
                    catch_jit(|| stage_with(&self.f, p, &leaves, &aliases.first))?;
                let trace_seconds = t_trace.elapsed().as_secs_f64();
                let writes = !graph.writebacks.is_empty();
                if writes {
                    if let Some((a, b)) = aliases.overlap {
                        return Err(overlap_error(a, b));
                    }
                }
                self.traces.set(self.traces.get() + 1);
                let compiled = tolk::compile(graph, true).map_err(JitError::new)?;
                if debug_level() >= 2 {
                    eprintln!("jit {}: program\n{}", self.name, compiled.program.graph());
                    for (i, (fused, src)) in compiled.kernel_sources.iter().enumerate() {
                        eprintln!("jit kernel {i} fuses [{}]:\n{src}", fused.join(" "));
                    }
                }
                let how = match compiled.origin {
                    tolk::Origin::Disk => "miss memory, hit disk",
                    tolk::Origin::Compiled => "miss, compiled",
                };
                let mut entries = self.entries.borrow_mut();
                entries.push(Entry {
                    signature: leaves
                        .iter()
                        .map(|t| (t.dtype(), t.shape().to_vec()))
                        .collect(),
                    writes,
                    keyed_by_aliases: writes
                        || aliases.first.iter().enumerate().any(|(j, &i)| i != j),
                    aliases: aliases.first,
                    program: compiled.program,
                    template,
                });
                (
                    entries.len() - 1,
                    how,
                    Some((trace_seconds, compiled.seconds)),
                )
            }
        };
        let entries = self.entries.borrow();
        let entry = &entries[index];
        // Timed only on a miss: the warm path reads no clock.
        let t_run = first_call.map(|_| std::time::Instant::now());
        let outs = entry.program.run(&leaves);
        if debug_level() >= 1 {
            // On a miss: how long tracing, compiling (or loading) and the
            // first run took.
            let timing = match (first_call, t_run) {
                (Some((trace, compile)), Some(t_run)) => format!(
                    ", trace {:.1} ms, compile {:.1} ms, run {:.1} ms",
                    trace * 1e3,
                    compile * 1e3,
                    t_run.elapsed().as_secs_f64() * 1e3
                ),
                _ => String::new(),
            };
            eprintln!(
                "jit {}: {how}, {} kernels, {} steps{timing}, transfers 0 B",
                self.name,
                entry.program.num_kernels(),
                entry.program.num_steps()
            );
        }
        Ok(entry.template.with_leaves(&outs))
    }

    /// How many times `f` has been traced (once per new signature).
    pub fn trace_count(&self) -> usize {
        self.placed
            .as_ref()
            .map_or(self.traces.get(), |p| p.trace_count())
    }
}

pub(crate) fn same_signature(sig: &[(DType, Vec<usize>)], leaves: &[Tensor]) -> bool {
    sig.len() == leaves.len()
        && sig
            .iter()
            .zip(leaves)
            .all(|((d, s), t)| *d == t.dtype() && s.as_slice() == t.shape())
}
