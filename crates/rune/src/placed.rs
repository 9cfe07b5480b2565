//! A function placed on devices: pmap's, and jit's on a `CPU:n` device.
//! Owns the layout of input leaves across the devices ([`Axes`]), the
//! function's sharded programs (one per signature, in a
//! [`SignatureCache`]), and the call path: checking the leaves against the
//! axes, tracing and sharding on a new signature (`tolk::shard`), feeding
//! unread resident outputs in the right layout straight to the devices,
//! running every `CPU:n` device on its own worker thread, counting the
//! transfers, wrapping outputs as resident tensors, and donation.

use crate::device::{count_transfers, is_host};
use crate::resident::{reclaim_over_budget, Resident};
use crate::signatures::{debug_level, SignatureCache};
use crate::stage::JitError;
use nx::{Ptree, Tensor};
use tolk::shard::Input;

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
    /// What logs and messages call it: "pmap" or "jit".
    pub(crate) what: &'static str,
    pub(crate) devices: Vec<String>,
    /// Per device: whether it is the host (see [`crate::device::is_host`]).
    host: Vec<bool>,
    axes: Axes,
    pub(crate) donate: bool,
    /// Whether the devices are an MPI world's processes (`"MPI:r"`).
    mpi: bool,
    /// Per leaf signature: the sharded program and the traced output.
    pub(crate) programs: SignatureCache<(tolk::shard::ShardedProgram, Q)>,
}

/// Refuses a program that assigns in place to a leaf split by `axes`.
pub(crate) fn no_sharded_writeback(
    graph: &tolk::Graph,
    axes: &[Option<usize>],
) -> Result<(), JitError> {
    match graph.writebacks.iter().find(|(i, _)| axes[*i].is_some()) {
        Some(&(leaf, _)) => Err(sharded_writeback(leaf)),
        None => Ok(()),
    }
}

fn sharded_writeback(leaf: usize) -> JitError {
    JitError::new(format!(
        "pmap: the function assigns in place to input leaf {leaf}, which is sharded: writing it \
         back would gather it from every device on each call. Return the new value instead, or \
         replicate the leaf (in_axes None)"
    ))
}

impl<Q: Ptree> Placed<Q> {
    /// `what` (named in logs) placed on `devices`; its programs go through
    /// tolk's disk cache when `persist`.
    pub fn new(
        what: &'static str,
        devices: Vec<String>,
        axes: Axes,
        donate: bool,
        persist: bool,
    ) -> Placed<Q> {
        Placed {
            what,
            host: devices.iter().map(|d| is_host(d)).collect(),
            mpi: devices.iter().any(|d| d.starts_with("MPI:")),
            devices,
            axes,
            donate,
            programs: SignatureCache::new(persist, false),
        }
    }

    /// How many times the function has been traced (once per new signature).
    pub fn trace_count(&self) -> usize {
        self.programs.trace_count()
    }

    /// Whether the devices are MPI processes (`"MPI:r"`): such a function
    /// runs through `distributed::pmap`, not [`Placed::call`].
    #[cfg(feature = "mpi")]
    pub(crate) fn is_mpi(&self) -> bool {
        self.mpi
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
        assert!(
            !self.mpi,
            "{name}: MPI devices run through rune::distributed (internal error)"
        );
        let leaves = p.leaves();
        let axes = self.check_leaves(&leaves);
        let n = self.devices.len();
        let (entry, how) = self.programs.get_or_build(
            f,
            p,
            &leaves,
            |graph| no_sharded_writeback(graph, &axes),
            |graph, template| {
                let program = tolk::shard::shard(graph, n, &axes, self.programs.persist)
                    .map_err(JitError::new)?;
                let origin = program.origin();
                Ok(((program, template), origin))
            },
        )?;
        let (program, template) = &*entry;
        let how = how.describe();
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

    /// Each of `count` leaves' split axis (no check of the shapes); panics
    /// if `in_axes` has another number of entries.
    pub(crate) fn axes_of(&self, count: usize) -> Vec<Option<usize>> {
        if let Axes::Given(axes) = &self.axes {
            if axes.len() != count {
                panic!(
                    "pmap: in_axes has {} entries but the input has {count} leaves; give one per \
                     leaf, in traversal order",
                    axes.len()
                );
            }
        }
        (0..count).map(|i| self.axis(i)).collect()
    }

    /// Each leaf's split axis; panics if `in_axes` does not fit `leaves`.
    pub(crate) fn check_leaves(&self, leaves: &[Tensor]) -> Vec<Option<usize>> {
        let n = self.devices.len();
        let axes = self.axes_of(leaves.len());
        for (i, t) in leaves.iter().enumerate() {
            let Some(a) = axes[i] else { continue };
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
        axes
    }
}
