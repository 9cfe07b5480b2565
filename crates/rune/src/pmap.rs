//! `pmap`: `f` compiled to run across a tuple of devices, its input leaves
//! split along an axis (`in_axes: Some(a)`) or replicated (`None`).
//!
//! The staged graph (global shapes) goes through `tolk::shard`: sharding
//! propagation marks each value split (an axis), replicated or partial,
//! and cuts the program into stages (one tolk program each, compiled once
//! and run over every device's shard) separated by collectives: the
//! all-reduce of a reduction over a split axis (a tree over the devices'
//! buffers), an all-gather where an operation needs a whole split axis, a
//! slice where a replicated value meets split ones. Compilations are never
//! persisted (the seed's rule for pmap).
//!
//! `CPU:n` (n >= 1) devices each run on a worker thread of their own, side
//! by side, and have memory of their own: each call copies every device's
//! input shards and replicas into fresh buffers and reads the outputs
//! back, counted in `jit_stats` (`CPU`/`CPU:0` is the host: the calling
//! thread, moving nothing). Outputs stay on the devices until first read
//! (`crate::resident`): fed back unread in the same layout they move
//! nothing, and `donate` consumes them once the call is done.

use crate::jit::{
    catch_jit, count_transfers, debug_level, device_backend, is_host, same_signature, stage,
};
use crate::resident::{reclaim_over_budget, Resident};
use crate::stage::JitError;
use nx::{DType, Ptree, Tensor};
use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use tolk::shard::Input;

/// Options of [`pmap_with`].
#[derive(Clone, Debug, Default)]
pub struct PmapOpts {
    /// The devices, one backend: `"CPU:1"`, `"CPU:2"`, ... (`"CUDA:0"`, ...
    /// where CUDA is available).
    pub devices: Vec<String>,
    /// One entry per input leaf, in traversal order: `Some(a)` splits the
    /// leaf along axis `a` into equal shards, one per device; `None`
    /// replicates it. `None` here means `Some(0)` for every leaf.
    pub in_axes: Option<Vec<Option<usize>>>,
    /// Consume resident inputs (see [`crate::JitOpts::donate`]).
    pub donate: bool,
}

/// A function compiled across devices (see [`pmap`]).
pub struct Pmap<F, P, Q> {
    f: F,
    name: &'static str,
    placed: Placed<Q>,
    _types: PhantomData<fn(&P) -> Q>,
}

/// How input leaves are laid out across the devices.
pub(crate) enum Axes {
    /// Every leaf split along axis 0 (pmap's default).
    First,
    /// One entry per leaf.
    Given(Vec<Option<usize>>),
    /// Every leaf replicated (jit on one host device).
    Replicated,
}

/// The compiled programs of a function placed on devices, and how it runs
/// (pmap's, and jit's on a `CPU:n` device).
pub(crate) struct Placed<Q> {
    /// What logs call it: "pmap" or "jit".
    pub what: &'static str,
    pub devices: Vec<String>,
    /// Per device: whether it is the host (see [`crate::jit::is_host`]).
    host: Vec<bool>,
    pub axes: Axes,
    pub donate: bool,
    /// Per leaf signature: the sharded program and the traced output.
    entries: RefCell<Vec<(Vec<(DType, Vec<usize>)>, tolk::shard::ShardedProgram, Q)>>,
    traces: Cell<usize>,
}

/// `f` compiled to run across `devices`, every input leaf split along its
/// axis 0 into one equal shard per device. `f` observes global shapes and
/// needs no collective operations: a reduction over the sharded axis (a
/// mean loss over a sharded batch) is the all-reduced value, so gradients
/// of such a loss are all-reduced too. Panics naming the device if
/// `devices` is empty, mixes backends, or holds an unavailable device.
///
/// ```
/// use rune::prelude::*;
/// let f = rune::pmap(|x: &Tensor| (x * 2.0).sum_all(), &["CPU:1", "CPU:2"]);
/// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[4]);
/// assert_eq!(f.call(&x).to_vec::<f32>(), vec![20.0]);
/// ```
pub fn pmap<P: Ptree, Q: Ptree, F: Fn(&P) -> Q>(f: F, devices: &[&str]) -> Pmap<F, P, Q> {
    pmap_with(
        f,
        PmapOpts {
            devices: devices.iter().map(|d| d.to_string()).collect(),
            ..PmapOpts::default()
        },
    )
}

/// [`pmap`] with options: which leaves are split along which axis
/// (`in_axes`), and `donate`.
pub fn pmap_with<P: Ptree, Q: Ptree, F: Fn(&P) -> Q>(f: F, opts: PmapOpts) -> Pmap<F, P, Q> {
    if opts.devices.is_empty() {
        panic!("pmap: devices is empty; give one or more, e.g. [\"CPU:1\", \"CPU:2\"]");
    }
    let mut backend = None;
    for d in &opts.devices {
        let b = device_backend(d).unwrap_or_else(|e| panic!("pmap: {e}"));
        match backend {
            None => backend = Some((b, d)),
            Some((b0, d0)) if b0 != b => {
                panic!("pmap: devices mix backends: {d0:?} and {d:?}; all must share one")
            }
            Some(_) => {}
        }
    }
    let axes = match opts.in_axes {
        Some(a) => Axes::Given(a),
        None => Axes::First,
    };
    Pmap {
        f,
        name: std::any::type_name::<F>(),
        placed: Placed::new("pmap", opts.devices, axes, opts.donate),
        _types: PhantomData,
    }
}

fn sharded_writeback(leaf: usize) -> JitError {
    JitError::new(format!(
        "pmap: the function assigns in place to input leaf {leaf}, which is sharded: writing it \
         back would gather it from every device on each call. Return the new value instead, or \
         replicate the leaf (in_axes None)"
    ))
}

impl<P: Ptree, Q: Ptree, F: Fn(&P) -> Q> Pmap<F, P, Q> {
    /// Runs the compiled function. Panics if `in_axes` does not fit the
    /// leaves (one entry per leaf; a sharded axis in range and divisible by
    /// the number of devices), and with the `JitError`'s message if `f`
    /// cannot be compiled.
    pub fn call(&self, p: &P) -> Q {
        match self.try_call(p) {
            Ok(q) => q,
            Err(e) => panic!("{}", e.message()),
        }
    }

    /// Runs the compiled function, or returns why `f` cannot be compiled.
    /// Panics as [`Pmap::call`] if `in_axes` does not fit the leaves.
    pub fn try_call(&self, p: &P) -> Result<Q, JitError> {
        if nx::trace::depth() > 0 {
            // Under a transformation: let it see `f`, as jit does.
            return Ok((self.f)(p));
        }
        self.placed.call(&self.f, self.name, p)
    }

    /// How many times `f` has been traced (once per new signature).
    pub fn trace_count(&self) -> usize {
        self.placed.trace_count()
    }
}

impl<Q: Ptree> Placed<Q> {
    pub fn new(what: &'static str, devices: Vec<String>, axes: Axes, donate: bool) -> Placed<Q> {
        Placed {
            what,
            host: devices.iter().map(|d| is_host(d)).collect(),
            devices,
            axes,
            donate,
            entries: RefCell::new(Vec::new()),
            traces: Cell::new(0),
        }
    }

    pub fn trace_count(&self) -> usize {
        self.traces.get()
    }

    fn axis(&self, leaf: usize) -> Option<usize> {
        match &self.axes {
            Axes::First => Some(0),
            Axes::Given(a) => a[leaf],
            Axes::Replicated => None,
        }
    }

    /// Runs `f` (named `name` in logs) placed on the devices: traces and
    /// shards it on a new leaf signature, feeds unread resident outputs in
    /// the right layout straight to the devices, and returns resident
    /// outputs (gathered at once when every device is the host).
    pub fn call<P: Ptree>(&self, f: &impl Fn(&P) -> Q, name: &str, p: &P) -> Result<Q, JitError> {
        let leaves = p.leaves();
        let axes = self.check_leaves(&leaves);
        let hit = self
            .entries
            .borrow()
            .iter()
            .position(|(sig, _, _)| same_signature(sig, &leaves));
        let (index, how) = match hit {
            Some(i) => (i, "hit memory"),
            None => {
                let (graph, template) = catch_jit(|| stage(f, p))?;
                if let Some(&(leaf, _)) = graph.writebacks.iter().find(|(i, _)| axes[*i].is_some())
                {
                    return Err(sharded_writeback(leaf));
                }
                self.traces.set(self.traces.get() + 1);
                // jit's compilations persist across processes, pmap's never
                // (the seed's rule).
                let persist = self.what == "jit";
                let program = tolk::shard::shard(graph, self.devices.len(), &axes, persist)
                    .map_err(JitError::new)?;
                let disk = program.origin() == tolk::Origin::Disk;
                let sig = leaves
                    .iter()
                    .map(|t| (t.dtype(), t.shape().to_vec()))
                    .collect();
                let mut entries = self.entries.borrow_mut();
                entries.push((sig, program, template));
                let how = if disk {
                    "miss memory, hit disk"
                } else {
                    "miss, compiled"
                };
                (entries.len() - 1, how)
            }
        };
        let entries = self.entries.borrow();
        let (_, program, template) = &entries[index];
        let host = &self.host;
        let devices: Vec<Option<&str>> = self
            .devices
            .iter()
            .zip(host)
            .map(|(d, &h)| (!h).then_some(d.as_str()))
            .collect();
        // An unread output of an earlier call on these devices, in the
        // layout this program reads the leaf in, is used where it is.
        let inputs: Vec<Input> = leaves
            .iter()
            .enumerate()
            .map(
                |(i, t)| match Resident::on(t, &self.devices, program.input_layout(i)) {
                    Some(values) => Input::OnDevices(values),
                    None => Input::Global(t.clone()),
                },
            )
            .collect();
        let incoming = inputs
            .iter()
            .zip(&leaves)
            .filter(|(i, _)| matches!(i, Input::Global(_)))
            .map(|(_, t)| (t.numel() * t.dtype().size_in_bytes()) as u64)
            .sum();
        let reclaimed = if host.iter().all(|&h| h) {
            None
        } else {
            reclaim_over_budget(incoming)
        };
        let (outs, moved) = program.run_on(&inputs, &leaves, &devices);
        count_transfers(moved.to_device, moved.from_device);
        let outs: Vec<Tensor> = if host.iter().all(|&h| h) {
            outs.iter().map(|o| o.gather()).collect()
        } else {
            outs.into_iter()
                .map(|o| Resident::output(&self.devices, o, host))
                .collect()
        };
        if self.donate {
            // Unread outputs fed in are consumed now that the call is done
            // (a leaf written back was read by the writeback: not donated).
            for t in &leaves {
                if Resident::is_resident(t) {
                    Resident::donate(t);
                }
            }
        }
        if debug_level() >= 1 {
            eprintln!(
                "{} {name} on {:?}: {how}, {}, transfers {} B to the devices, {} B from them",
                self.what,
                self.devices,
                program.describe(),
                moved.to_device,
                moved.from_device
            );
            if let Some(bytes) = reclaimed {
                eprintln!(
                    "{} {name}: reclaimed {bytes} B of freed device buffers before the call \
                     (past RUNE_JIT_RESIDENT_BUDGET)",
                    self.what
                );
            }
        }
        Ok(template.with_leaves(&outs))
    }

    /// Each leaf's split axis; panics if `in_axes` does not fit `leaves`.
    fn check_leaves(&self, leaves: &[Tensor]) -> Vec<Option<usize>> {
        let n = self.devices.len();
        if let Axes::Given(axes) = &self.axes {
            if axes.len() != leaves.len() {
                panic!(
                    "pmap: in_axes has {} entries but the input has {} leaves; give one per \
                     leaf, in traversal order",
                    axes.len(),
                    leaves.len()
                );
            }
        }
        for (i, t) in leaves.iter().enumerate() {
            let axis = self.axis(i);
            let Some(a) = axis else { continue };
            if a >= t.shape().len() {
                panic!(
                    "pmap: leaf {i} (shape {:?}) has no axis {a} to split across the devices",
                    t.shape()
                );
            }
            if t.shape()[a] % n != 0 {
                panic!(
                    "pmap: leaf {i} (shape {:?}) cannot be split evenly along axis {a} across \
                     {n} devices ({} is not a multiple of {n})",
                    t.shape(),
                    t.shape()[a]
                );
            }
        }
        (0..leaves.len()).map(|i| self.axis(i)).collect()
    }
}
