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
//! persisted: pmap's programs stay out of tolk's disk cache.
//!
//! `CPU:n` (n >= 1) devices each run on a worker thread of their own, side
//! by side, and have memory of their own: each call copies every device's
//! input shards and replicas into fresh buffers and reads the outputs
//! back, counted in `jit_stats` (`CPU`/`CPU:0` is the host: the calling
//! thread, moving nothing). Outputs stay on the devices until first read
//! (`crate::resident`): fed back unread in the same layout they move
//! nothing, and `donate` consumes them once the call is done.
//!
//! `CUDA:n` devices run through `crate::on_devices` (the same sharding,
//! run by tolk's device layer: collectives on the devices by peer copies).
//!
//! This file holds pmap's API and its checks of the devices; the call path
//! it shares with jit on a `CPU:n` device is `crate::placed`.

use crate::device::{backend_or_panic, Backend};
use crate::on_devices::OnDevices;
use crate::placed::{Axes, Placed};
use crate::signatures::or_panic;
use crate::stage::JitError;
use nx::Ptree;
use std::marker::PhantomData;

/// Options of [`pmap_with`].
#[derive(Clone, Debug, Default)]
pub struct PmapOpts {
    /// The devices, one backend: `"CPU:1"`, `"CPU:2"`, ... (`"CUDA:0"`, ...
    /// where CUDA is available), or an MPI world's `world.devices()`
    /// (`"MPI:0"`, ...: one per process; feature `mpi`, see
    /// `rune::distributed`).
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
    /// On CUDA devices: the call path of `crate::on_devices`.
    cuda: Option<OnDevices<Q>>,
    _types: PhantomData<fn(&P) -> Q>,
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
        let b = backend_or_panic("pmap", d);
        match backend {
            None => backend = Some((b, d)),
            Some((b0, d0)) if b0 != b => {
                panic!("pmap: devices mix backends: {d0:?} and {d:?}; all must share one")
            }
            Some(_) => {}
        }
    }
    if let Some((Backend::Mpi, _)) = backend {
        mpi_devices_or_panic(&opts.devices);
    }
    let axes = || match &opts.in_axes {
        Some(a) => Axes::Given(a.clone()),
        None => Axes::First,
    };
    let cuda = matches!(backend, Some((Backend::Cuda, _)))
        .then(|| OnDevices::new(opts.devices.clone(), axes(), opts.donate));
    Pmap {
        f,
        name: std::any::type_name::<F>(),
        placed: Placed::new("pmap", opts.devices.clone(), axes(), opts.donate, false),
        cuda,
        _types: PhantomData,
    }
}

/// MPI devices must be the world's, all of them, in rank order.
#[cfg(feature = "mpi")]
fn mpi_devices_or_panic(devices: &[String]) {
    let world = crate::distributed::init();
    if devices != world.devices() {
        panic!(
            "pmap: devices {devices:?} are not this MPI world's; pass world.devices() ({:?}): \
             one device per process, every process in rank order",
            world.devices()
        );
    }
}

#[cfg(not(feature = "mpi"))]
fn mpi_devices_or_panic(_devices: &[String]) {
    unreachable!("MPI devices are refused without the feature")
}

impl<P: Ptree, Q: Ptree, F: Fn(&P) -> Q> Pmap<F, P, Q> {
    /// Runs the compiled function. Panics if `in_axes` does not fit the
    /// leaves (one entry per leaf; a sharded axis in range and divisible by
    /// the number of devices), and with the `JitError`'s message if `f`
    /// cannot be compiled.
    pub fn call(&self, p: &P) -> Q {
        or_panic(self.try_call(p))
    }

    /// Runs the compiled function, or returns why `f` cannot be compiled.
    /// Panics as [`Pmap::call`] if `in_axes` does not fit the leaves.
    pub fn try_call(&self, p: &P) -> Result<Q, JitError> {
        if nx::trace::depth() > 0 {
            // Under a transformation: let it see `f`, as jit does.
            return Ok((self.f)(p));
        }
        #[cfg(feature = "mpi")]
        if self.placed.is_mpi() {
            return crate::distributed::pmap::call(&self.placed, &self.f, self.name, p);
        }
        if let Some(c) = &self.cuda {
            return c.call(&self.f, self.name, p);
        }
        self.placed.call(&self.f, self.name, p)
    }

    /// How many times `f` has been traced (once per new signature).
    pub fn trace_count(&self) -> usize {
        match &self.cuda {
            Some(c) => c.trace_count(),
            None => self.placed.trace_count(),
        }
    }
}
