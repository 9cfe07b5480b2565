//! `pmap`: `f` compiled to run across a tuple of devices, its input leaves
//! split along an axis (`in_axes: Some(a)`) or replicated (`None`).
//!
//! What is built: the seed's interface and every check it lists (devices:
//! empty, mixed backends, unavailable; `in_axes`: one entry per leaf, the
//! axis in range and divisible across the devices; a sharded input leaf
//! assigned in place is a `JitError` at trace time), compilation through
//! jit's staging and tolk (never persisted, as the seed says), and results:
//! `f` observes global shapes, so the compiled global program computes
//! exactly what the sharded one must (a reduction over a sharded axis is
//! the all-reduced value). Not built yet (issue 11): the per-device
//! programs themselves: sharding propagation over the graph, `CPU:n`
//! worker threads with memory of their own, the all-reduce step, resident
//! outputs and `donate`, and the transfer counters; until then the program
//! runs on the host device, so `jit_stats` counts no transfers.

use crate::jit::{device_backend, Jit, JitOpts};
use crate::stage::JitError;
use nx::{Ptree, Tensor};

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
    jit: Jit<F, P, Q>,
    devices: Vec<String>,
    in_axes: Option<Vec<Option<usize>>>,
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
        let b = device_backend(d, true).unwrap_or_else(|e| panic!("pmap: {e}"));
        match backend {
            None => backend = Some((b, d)),
            Some((b0, d0)) if b0 != b => {
                panic!("pmap: devices mix backends: {d0:?} and {d:?}; all must share one")
            }
            Some(_) => {}
        }
    }
    let mut jit = crate::jit::jit_with(
        f,
        JitOpts {
            device: "CPU".into(),
            donate: opts.donate,
        },
    );
    jit.persist = false;
    if let Some(axes) = opts.in_axes.clone() {
        jit.refuse = Some(Box::new(move |g: &tolk::Graph| {
            let (leaf, _) = g
                .writebacks
                .iter()
                .find(|(i, _)| axes.get(*i).is_some_and(|a| a.is_some()))?;
            Some(sharded_writeback(*leaf))
        }));
    } else {
        jit.refuse = Some(Box::new(|g: &tolk::Graph| {
            g.writebacks.first().map(|(i, _)| sharded_writeback(*i))
        }));
    }
    Pmap {
        jit,
        devices: opts.devices,
        in_axes: opts.in_axes,
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
        if nx::trace::depth() == 0 {
            self.check_leaves(&p.leaves());
        }
        self.jit.try_call(p)
    }

    /// How many times `f` has been traced (once per new signature).
    pub fn trace_count(&self) -> usize {
        self.jit.trace_count()
    }

    fn check_leaves(&self, leaves: &[Tensor]) {
        let n = self.devices.len();
        if let Some(axes) = &self.in_axes {
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
            let axis = match &self.in_axes {
                Some(axes) => axes[i],
                None => Some(0),
            };
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
    }
}
