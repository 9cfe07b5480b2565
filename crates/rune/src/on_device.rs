//! jit on a device with a runtime of its own (`"CUDA"`, `"CUDA:n"`): the
//! program rendered as CUDA kernels (`tolk::cuda::render_program`) and run
//! through tolk's device layer (`tolk::device`), with the seed's residency
//! rules as on `CPU:n`: inputs copied to the device on every call, outputs
//! resident until first read (a tensor pending on [`OnDevice`]'s
//! [`DeviceResident`]), an unread output fed back seeding the input with
//! no transfer, `donate`, the resident budget, and the transfers counted
//! in `jit_stats`. Writebacks are read to the host and assigned into the
//! caller's leaves. Programs do not go through the disk cache yet.

use crate::device::{add_resident, count_transfers, remove_resident, resident_bytes};
use crate::resident::{budget, Resident};
use crate::signatures::{debug_level, SignatureCache};
use crate::stage::JitError;
use nx::{Prim, Ptree, Tensor};
use std::sync::{Arc, Mutex};
use tolk::device::exec::{DeviceProgram, DeviceValue};
use tolk::device::sharded::DeviceOutput;
use tolk::device::{Buffer, Device};

/// A function compiled for a device with a runtime of its own.
pub(crate) struct OnDevice<Q> {
    device: Arc<Device>,
    donate: bool,
    programs: SignatureCache<(DeviceProgram, Q)>,
}

/// The device bytes behind an unread output: one value on one device, or
/// one per device of a pmap (its shards along `split`, or replicas).
pub(crate) struct DeviceResident {
    values: Mutex<Option<Vec<DeviceValue>>>,
    /// The axis the values split the output along (`None`: each value is
    /// the whole output).
    split: Option<usize>,
    /// Bytes the devices hold for it.
    bytes: u64,
}

impl DeviceResident {
    /// An output held by the device: a host tensor whose bytes come from
    /// it on first access.
    fn output(v: DeviceValue) -> Tensor {
        let (dtype, shape) = (v.dtype, v.shape.clone());
        Self::wrap(vec![v], None, dtype, &shape)
    }

    /// An output of a pmap held by its devices (see [`DeviceOutput`]).
    pub(crate) fn sharded(o: DeviceOutput) -> Tensor {
        let v0 = &o.values[0];
        let mut shape = v0.shape.clone();
        if let Some(a) = o.split {
            shape[a] *= o.values.len();
        }
        let dtype = v0.dtype;
        Self::wrap(o.values, o.split, dtype, &shape)
    }

    fn wrap(
        values: Vec<DeviceValue>,
        split: Option<usize>,
        dtype: nx::DType,
        shape: &[usize],
    ) -> Tensor {
        let bytes = values.iter().map(|v| v.bytes() as u64).sum();
        add_resident(bytes);
        let r = DeviceResident {
            values: Mutex::new(Some(values)),
            split,
            bytes,
        };
        nx::raw::pending_tensor(dtype, shape, Arc::new(r))
    }

    /// The device values behind `t` if it is an unread output held by
    /// `devices` (in order) in layout `split` (the whole output, not a
    /// view of it).
    pub(crate) fn on_devices(
        t: &Tensor,
        devices: &[Arc<Device>],
        split: Option<usize>,
    ) -> Option<Vec<DeviceValue>> {
        let p = nx::raw::pending(t)?;
        let r = p.as_any().downcast_ref::<DeviceResident>()?;
        let vs = r.values.lock().unwrap();
        let vs = vs.as_ref()?;
        let whole = t.is_contiguous() && t.offset() == Some(0);
        let placed = vs.len() == devices.len()
            && vs
                .iter()
                .zip(devices)
                .all(|(v, d)| Arc::ptr_eq(v.buffer.device(), d));
        let layout = r.split == split || (devices.len() == 1 && r.split.is_none());
        (whole && placed && layout).then(|| vs.clone())
    }

    /// The device buffer behind `t` if it is an unread output held by
    /// `device` (the whole output, not a view of it).
    fn on(t: &Tensor, device: &Arc<Device>) -> Option<Arc<Buffer>> {
        let vs = Self::on_devices(t, std::slice::from_ref(device), None)?;
        (t.shape() == vs[0].shape.as_slice()).then(|| vs[0].buffer.clone())
    }

    fn is_resident(t: &Tensor) -> bool {
        nx::raw::pending(t).is_some_and(|p| p.as_any().is::<DeviceResident>())
    }

    fn release(&self) -> Option<Vec<DeviceValue>> {
        let v = self.values.lock().unwrap().take();
        if v.is_some() {
            remove_resident(self.bytes);
        }
        v
    }
}

/// `v`'s bytes on the host, as a contiguous tensor (counted in
/// `bytes_from_device`).
pub(crate) fn download(v: &DeviceValue) -> Result<Tensor, String> {
    let t = nx::raw::alloc(v.dtype, &v.shape);
    let bytes = v.bytes();
    if bytes > 0 {
        let w = nx::raw::write(&t);
        // SAFETY: `t` is fresh and contiguous: `bytes` bytes from its first
        // element are its own, exclusively ours while `w` lives.
        let host = unsafe { std::slice::from_raw_parts_mut(w.ptr(), bytes) };
        v.buffer.device().api().copy_out(v.buffer.ptr(), host)?;
    }
    count_transfers(0, bytes as u64);
    Ok(t)
}

impl nx::storage::Pending for DeviceResident {
    fn fill(&self) -> Tensor {
        let vs = self.release().expect("a resident output is read once");
        let read = |v: &DeviceValue| {
            download(v).unwrap_or_else(|e| panic!("reading a device output: {e}"))
        };
        match self.split {
            // Every shard, joined on the host.
            Some(a) => Tensor::concatenate(&vs.iter().map(read).collect::<Vec<_>>(), a as isize),
            // One replica.
            None => read(&vs[0]),
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Drop for DeviceResident {
    fn drop(&mut self) {
        self.release();
    }
}

/// `t`'s bytes on the device (contiguous first), counted in
/// `bytes_to_device`.
pub(crate) fn upload(device: &Arc<Device>, t: &Tensor) -> Result<Arc<Buffer>, String> {
    let b = device.upload_tensor(t)?;
    count_transfers((t.numel() * t.dtype().size_in_bytes()) as u64, 0);
    Ok(Arc::new(b))
}

impl<Q: Ptree> OnDevice<Q> {
    /// `device` (`"CUDA"`, `"CUDA:n"`), opened (checked available by
    /// `crate::device::backend`).
    pub fn new(device: &str, donate: bool) -> OnDevice<Q> {
        let device = tolk::device::open(device).unwrap_or_else(|e| panic!("jit: {e}"));
        OnDevice {
            device,
            donate,
            programs: SignatureCache::new(false, false),
        }
    }

    /// How many times the function has been traced.
    pub fn trace_count(&self) -> usize {
        self.programs.trace_count()
    }

    /// Runs `f` (named `name` in logs) on the device.
    pub fn call<P: Ptree>(&self, f: &impl Fn(&P) -> Q, name: &str, p: &P) -> Result<Q, JitError> {
        let leaves = p.leaves();
        let (entry, how) = self.programs.get_or_build(
            f,
            p,
            &leaves,
            |_| Ok(()),
            |graph, template| {
                let rendered = tolk::cuda::render_program(graph).map_err(JitError::new)?;
                let program = DeviceProgram::new(&self.device, rendered).map_err(JitError::new)?;
                count_transfers(program.const_bytes, 0);
                Ok(((program, template), tolk::Origin::Compiled))
            },
        )?;
        let (program, template) = &*entry;
        let moved = crate::device::jit_stats();
        // An unread output of an earlier call on this device is used where
        // it is; everything else is copied in.
        let fed: Vec<Option<Arc<Buffer>>> = leaves
            .iter()
            .map(|t| DeviceResident::on(t, &self.device))
            .collect();
        let incoming: u64 = leaves
            .iter()
            .zip(&fed)
            .filter(|(_, f)| f.is_none())
            .map(|(t, _)| (t.numel() * t.dtype().size_in_bytes()) as u64)
            .sum();
        let cached = self.device.alloc_stats().cached_bytes;
        let reclaimed = (cached > 0 && resident_bytes() + cached + incoming > budget())
            .then(|| self.device.clear_cache());
        let dev = self.device.name();
        // Indices are checked on the host before anything runs: a leaf as
        // it is, an unread output of this device read back (counted).
        let checked = program.check_indices(&mut |pos| match &fed[pos] {
            Some(buf) => {
                let t = &leaves[pos];
                let v = DeviceValue {
                    buffer: buf.clone(),
                    dtype: t.dtype(),
                    shape: t.shape().to_vec(),
                };
                or_fail(download(&v), name, dev)
            }
            None => leaves[pos].clone(),
        });
        if let Err(message) = checked {
            panic!("{message}");
        }
        let inputs: Result<Vec<Arc<Buffer>>, String> = leaves
            .iter()
            .zip(fed)
            .map(|(t, fed)| fed.map_or_else(|| upload(&self.device, t), Ok))
            .collect::<Result<_, _>>();
        let inputs = or_fail(inputs, name, dev);
        let run = or_fail(program.run(&inputs), name, dev);
        drop(inputs);
        count_transfers(0, run.index_bytes);
        for (leaf, v) in &run.writebacks {
            let host = or_fail(download(v), name, dev);
            nx::raw::eval(Prim::Assign, &[&leaves[*leaf], &host]);
        }
        let outs: Vec<Tensor> = run
            .outputs
            .into_iter()
            .map(DeviceResident::output)
            .collect();
        if self.donate {
            donate_fed(&leaves);
        }
        if debug_level() >= 1 {
            let now = crate::device::jit_stats();
            eprintln!(
                "jit {name} on {}: {}, {} kernels, transfers {} B to the device, {} B from it",
                self.device.name(),
                how.describe(),
                program.num_kernels(),
                now.bytes_to_device - moved.bytes_to_device,
                now.bytes_from_device - moved.bytes_from_device,
            );
            if let Some(bytes) = reclaimed {
                eprintln!(
                    "jit {name}: reclaimed {bytes} B of freed device buffers before the call \
                     (past RUNE_JIT_RESIDENT_BUDGET)"
                );
            }
        }
        Ok(template.with_leaves(&outs))
    }
}

/// Consumes the unread device outputs among `leaves` (fed to a call that
/// is done): `donate`.
pub(crate) fn donate_fed(leaves: &[Tensor]) {
    for t in leaves {
        if DeviceResident::is_resident(t) {
            Resident::donate(t);
        }
    }
}

/// A device failure during a call (after tracing): a panic naming the
/// function and the device.
fn or_fail<T>(r: Result<T, String>, name: &str, device: &str) -> T {
    r.unwrap_or_else(|e| panic!("jit {name} on {device}: {e}"))
}
