//! Device-resident outputs: the residency rules, once, for every device
//! with memory of its own (`CPU:n` now; CUDA later).
//!
//! An output of a call on such devices is a host tensor whose bytes are
//! pending (`nx::storage::Pending`) on a [`Resident`]: the values the
//! devices hold. Its shape and dtype are known; the first read or write of
//! its data gathers the bytes to the host for good (counted in
//! `bytes_from_device`), after which it is an ordinary tensor. Fed back
//! unread to a call on the same devices in the same layout, its device
//! values become the program's input with no transfer. `resident_bytes` is
//! what the devices hold for unread outputs: it falls when they are read,
//! dropped (the device values go with the last handle) or donated.
//!
//! The budget: an unreferenced device value is released at once (Rust
//! frees with the last handle, where a garbage-collected runtime waits for
//! a collection), but its buffer stays in the allocator's cache for reuse.
//! Before a call allocates on the devices, if what they hold for unread
//! outputs plus those cached buffers plus the call's inputs would pass
//! `RUNE_JIT_RESIDENT_BUDGET` bytes (default 4 GiB), the cached buffers are
//! returned to the system first ([`reclaim_over_budget`]).

use crate::device::{add_resident, count_transfers, remove_resident, resident_bytes};
use nx::Tensor;
use std::sync::{Arc, Mutex};

/// What the devices may hold before unreferenced buffers are reclaimed.
const DEFAULT_BUDGET: u64 = 4 << 30;

/// `RUNE_JIT_RESIDENT_BUDGET` in bytes, read at each call on devices (so a
/// process may change it); panics on a value that is not a number of bytes.
pub(crate) fn budget() -> u64 {
    match std::env::var("RUNE_JIT_RESIDENT_BUDGET") {
        Err(_) => DEFAULT_BUDGET,
        Ok(s) => s.trim().parse().unwrap_or_else(|_| {
            panic!(
                "RUNE_JIT_RESIDENT_BUDGET must be a number of bytes (like 4294967296), got {s:?}"
            )
        }),
    }
}

/// Called before a call on devices allocates for `incoming` bytes of
/// inputs: past the budget, the freed buffers kept for reuse are returned
/// to the system. Returns the bytes reclaimed, if it reclaimed.
pub(crate) fn reclaim_over_budget(incoming: u64) -> Option<usize> {
    let cached = nx::storage::cached_bytes();
    let held = resident_bytes() + cached as u64;
    if cached == 0 || held + incoming <= budget() {
        return None;
    }
    nx::storage::clear_cache();
    Some(cached)
}

/// The device values behind an unread output.
pub(crate) struct Resident {
    pub devices: Vec<String>,
    /// `Some(axis)`: split along it; `None`: replicated.
    pub split: Option<usize>,
    /// The global shape (a view of the output is not the output).
    shape: Vec<usize>,
    /// `None` once read.
    values: Mutex<Option<Vec<Tensor>>>,
    /// What the devices hold (counted in `resident_bytes` until released).
    device_bytes: u64,
    /// What reading it moves (every shard, or one replica).
    read_bytes: u64,
}

impl Resident {
    /// An output held by `devices`: a tensor of the global shape whose
    /// bytes come from them on first access.
    pub fn output(devices: &[String], out: tolk::shard::Output, host: &[bool]) -> Tensor {
        let global = global_shape(&out);
        let dtype = out.values[0].dtype();
        let r = Resident {
            devices: devices.to_vec(),
            split: out.split,
            shape: global.clone(),
            device_bytes: out.device_bytes(host),
            read_bytes: out.read_bytes(host),
            values: Mutex::new(Some(out.values)),
        };
        add_resident(r.device_bytes);
        nx::raw::pending_tensor(dtype, &global, Arc::new(r))
    }

    /// The device values behind `t` if it is an unread output held by
    /// `devices` in layout `split` (the output itself: a view of it is
    /// read to the host and sent again).
    pub fn on(t: &Tensor, devices: &[String], split: Option<usize>) -> Option<Vec<Tensor>> {
        let p = nx::raw::pending(t)?;
        let r = p.as_any().downcast_ref::<Resident>()?;
        let whole = t.shape() == r.shape.as_slice() && t.is_contiguous() && t.offset() == Some(0);
        if r.devices != devices || r.split != split || !whole {
            return None;
        }
        let values = r.values.lock().unwrap().clone();
        values
    }

    /// Whether `t` is an unread output of some call (what `donate` consumes).
    pub fn is_resident(t: &Tensor) -> bool {
        nx::raw::pending(t).is_some_and(|p| p.as_any().is::<Resident>())
    }

    /// Releases `t`'s device values: reading it (or feeding it to a call)
    /// panics from now on, naming `donate`.
    pub fn donate(t: &Tensor) {
        nx::raw::replace_pending(t, Arc::new(Donated));
    }

    fn release(&self) -> Option<Vec<Tensor>> {
        let v = self.values.lock().unwrap().take();
        if v.is_some() {
            remove_resident(self.device_bytes);
        }
        v
    }
}

fn global_shape(out: &tolk::shard::Output) -> Vec<usize> {
    let mut s = out.values[0].shape().to_vec();
    if let Some(a) = out.split {
        s[a] = out.values.iter().map(|v| v.shape()[a]).sum();
    }
    s
}

impl nx::storage::Pending for Resident {
    fn fill(&self) -> Tensor {
        let values = self.release().expect("a resident output is read once");
        count_transfers(0, self.read_bytes);
        let t = match self.split {
            Some(a) => Tensor::concatenate(&values, a as isize),
            None => values[0].clone(),
        };
        if t.is_contiguous() {
            t
        } else {
            t.copy()
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Drop for Resident {
    fn drop(&mut self) {
        self.release();
    }
}

/// What a donated handle is left with.
struct Donated;

impl nx::storage::Pending for Donated {
    fn fill(&self) -> Tensor {
        panic!(
            "pmap: this tensor was donated (donate: true) to a call, which released its device \
             buffers; read or copy it before the call if it is still needed"
        )
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
