//! `pmap` over CUDA devices (`"CUDA:0"`, `"CUDA:1"`, ...): the staged
//! graph sharded by `tolk::shard::plan` (the same propagation as on
//! `CPU:n`) and run by `tolk::device::sharded` (stages per device,
//! all-reduce, all-gather and slices on the devices through peer copies),
//! with the residency rules of one device (`crate::on_device`): each
//! call copies the host leaves' shards and replicas in, outputs stay on
//! the devices until first read (reading gathers the shards, or one
//! replica), an unread output fed back in the layout the program reads it
//! moves nothing, `donate`, the resident budget, and `jit_stats` counting
//! the bytes each way. Programs are never persisted (as pmap's on `CPU:n`).

use crate::device::count_transfers;
use crate::on_device::{donate_fed, download, DeviceResident};
use crate::placed::{no_sharded_writeback, Axes, Placed};
use crate::resident::budget;
use crate::signatures::{debug_level, SignatureCache};
use crate::stage::JitError;
use nx::{Prim, Ptree, Tensor};
use std::sync::Arc;
use tolk::device::sharded::{DeviceInput, ShardedOnDevices};
use tolk::device::Device;

/// A function placed on CUDA devices by pmap.
pub(crate) struct OnDevices<Q> {
    devices: Vec<Arc<Device>>,
    /// The leaves' layout and its checks (pmap's, shared with `CPU:n`).
    layout: Placed<Q>,
    programs: SignatureCache<(ShardedOnDevices, Q)>,
}

impl<Q: Ptree> OnDevices<Q> {
    /// `devices` (CUDA, checked available), opened.
    pub fn new(devices: Vec<String>, axes: Axes, donate: bool) -> OnDevices<Q> {
        let opened = devices
            .iter()
            .map(|d| tolk::device::open(d).unwrap_or_else(|e| panic!("pmap: {e}")))
            .collect();
        OnDevices {
            devices: opened,
            layout: Placed::new("pmap", devices, axes, donate, false),
            programs: SignatureCache::new(false, false),
        }
    }

    /// How many times the function has been traced.
    pub fn trace_count(&self) -> usize {
        self.programs.trace_count()
    }

    /// Runs `f` (named `name` in logs) across the devices.
    pub fn call<P: Ptree>(&self, f: &impl Fn(&P) -> Q, name: &str, p: &P) -> Result<Q, JitError> {
        let leaves = p.leaves();
        let axes = self.layout.check_leaves(&leaves);
        let n = self.devices.len();
        let (entry, how) = self.programs.get_or_build(
            f,
            p,
            &leaves,
            |graph| no_sharded_writeback(graph, &axes),
            |graph, template| {
                let plan = tolk::shard::plan(graph, n, &axes).map_err(JitError::new)?;
                let program = ShardedOnDevices::new(&self.devices, plan).map_err(JitError::new)?;
                count_transfers(program.const_bytes, 0);
                Ok(((program, template), tolk::Origin::Compiled))
            },
        )?;
        let (program, template) = &*entry;
        let moved = crate::device::jit_stats();
        // An unread output of an earlier call on these devices, in the
        // layout this program reads the leaf in, is used where it is.
        let inputs: Vec<DeviceInput> = leaves
            .iter()
            .enumerate()
            .map(|(i, t)| {
                match DeviceResident::on_devices(t, &self.devices, program.input_layout(i)) {
                    Some(vs) => DeviceInput::OnDevices(vs),
                    None => DeviceInput::Global(t.clone()),
                }
            })
            .collect();
        let incoming: u64 = inputs
            .iter()
            .zip(&leaves)
            .filter(|(i, _)| matches!(i, DeviceInput::Global(_)))
            .map(|(_, t)| (t.numel() * t.dtype().size_in_bytes()) as u64)
            .sum();
        let cached: u64 = self
            .devices
            .iter()
            .map(|d| d.alloc_stats().cached_bytes)
            .sum();
        if cached > 0 && crate::device::resident_bytes() + cached + incoming > budget() {
            for d in &self.devices {
                d.clear_cache();
            }
        }
        let run = program
            .run(&inputs)
            .unwrap_or_else(|e| panic!("pmap {name} on {:?}: {e}", self.layout.devices));
        drop(inputs);
        count_transfers(run.to_device, run.from_device);
        for (leaf, v) in &run.writebacks {
            let host = download(v)
                .unwrap_or_else(|e| panic!("pmap {name} on {:?}: {e}", self.layout.devices));
            nx::raw::eval(Prim::Assign, &[&leaves[*leaf], &host]);
        }
        let outs: Vec<Tensor> = run
            .outputs
            .into_iter()
            .map(DeviceResident::sharded)
            .collect();
        if self.layout.donate {
            donate_fed(&leaves);
        }
        if debug_level() >= 1 {
            let now = crate::device::jit_stats();
            eprintln!(
                "pmap {name} on {:?}: {}, {}, transfers {} B to the devices, {} B from them",
                self.layout.devices,
                how.describe(),
                program.describe(),
                now.bytes_to_device - moved.bytes_to_device,
                now.bytes_from_device - moved.bytes_from_device,
            );
        }
        Ok(template.with_leaves(&outs))
    }
}
