//! Devices: what a device name means and what moving data to and from
//! devices costs. Owns the device names (`"CPU"`, `"CPU:n"`, `"CUDA"`,
//! `"METAL"`), their parsing into a [`Backend`], the panics for unknown or
//! unavailable devices, whether a device is the host itself, and the
//! transfer counters behind [`jit_stats`]. A new backend (CUDA) plugs in
//! here: its name, its availability, and its transfers counted the same way.

use std::sync::atomic::{AtomicU64, Ordering};

/// The kind of device a name designates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    /// The host's cores: `"CPU"` (`"CPU:0"`) is the host itself, `"CPU:n"`
    /// (n >= 1) a host device with a thread and memory of its own.
    Cpu,
    /// `"MPI:r"`: the process of rank `r` of an MPI world (feature `mpi`),
    /// one device per process; only pmap over `World::devices()` runs there.
    Mpi,
    /// `"CUDA"`, `"CUDA:n"`: an NVIDIA GPU through `tolk::device` (jit only).
    Cuda,
}

/// The backend of `device` if it is one that can run here (`"CPU"`, the
/// host, or a host device `"CPU:n"`), else why not, naming it.
pub(crate) fn backend(device: &str) -> Result<Backend, String> {
    let (name, instance) = match device.split_once(':') {
        Some((b, i)) => (b, Some(i)),
        None => (device, None),
    };
    let instance_ok = instance.is_none_or(|i| i.parse::<usize>().is_ok());
    match name {
        "CPU" if instance_ok => Ok(Backend::Cpu),
        "MPI" if instance.is_some() && instance_ok => mpi(device),
        // ---- CUDA (issue 45): available when tolk's device layer opens it.
        "CUDA" if instance_ok => match tolk::device::open(device) {
            Ok(_) => Ok(Backend::Cuda),
            Err(missing) => Err(format!(
                "device {device:?} is not available: {}; use \"CPU\"",
                cuda_unavailable(&missing)
            )),
        },
        "METAL" if instance_ok => Err(format!(
            "device {device:?} is not available: METAL is available on macOS only"
        )),
        _ => Err(format!(
            "unknown device {device:?}; the devices are \"CPU\", \"CUDA\" and \"METAL\", \
             with an instance suffix to address several (\"CPU:1\", \"CPU:2\", ...), and \
             \"MPI:0\", \"MPI:1\", ... (one per process; feature `mpi`)"
        )),
    }
}

#[cfg(feature = "mpi")]
fn mpi(_device: &str) -> Result<Backend, String> {
    Ok(Backend::Mpi)
}

#[cfg(not(feature = "mpi"))]
fn mpi(device: &str) -> Result<Backend, String> {
    Err(format!(
        "device {device:?} is not available: this build of rune has no MPI; build rune with \
         the cargo feature `mpi`"
    ))
}

/// Why CUDA cannot run here: what `tolk::device::open` found missing (the
/// driver, a device, NVRTC: probed before anything touches CUDA).
fn cuda_unavailable(missing: &str) -> String {
    format!("CUDA needs a driver, a device and NVRTC: {missing}")
}

/// [`backend`], panicking with `func`'s name (`"jit"`, `"pmap"`) and the
/// reason when the device is unknown or unavailable.
pub(crate) fn backend_or_panic(func: &str, device: &str) -> Backend {
    backend(device).unwrap_or_else(|e| panic!("{func}: {e}"))
}

/// Whether `device` is the host itself (`"CPU"`, `"CPU:0"`: zero-copy, the
/// calling thread) rather than a device with memory of its own.
pub(crate) fn is_host(device: &str) -> bool {
    device == "CPU" || device == "CPU:0"
}

/// Transfer counters of compiled functions (see [`jit_stats`]).
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
static RESIDENT_BYTES: AtomicU64 = AtomicU64::new(0);

/// The cumulative transfer counters. The CPU device reads and writes host
/// memory in place: it moves, and counts, nothing.
pub fn jit_stats() -> JitStats {
    JitStats {
        bytes_to_device: BYTES_TO_DEVICE.load(Ordering::Relaxed),
        bytes_from_device: BYTES_FROM_DEVICE.load(Ordering::Relaxed),
        resident_bytes: resident_bytes(),
    }
}

/// Zeroes the cumulative transfer counters (`resident_bytes` is live state
/// and stays).
pub fn reset_jit_stats() {
    BYTES_TO_DEVICE.store(0, Ordering::Relaxed);
    BYTES_FROM_DEVICE.store(0, Ordering::Relaxed);
}

/// Adds a call's transfers to the counters.
pub(crate) fn count_transfers(to_device: u64, from_device: u64) {
    BYTES_TO_DEVICE.fetch_add(to_device, Ordering::Relaxed);
    BYTES_FROM_DEVICE.fetch_add(from_device, Ordering::Relaxed);
}

/// What the devices hold now for unread outputs.
pub(crate) fn resident_bytes() -> u64 {
    RESIDENT_BYTES.load(Ordering::Relaxed)
}

/// Counts `bytes` more held by the devices for an unread output.
pub(crate) fn add_resident(bytes: u64) {
    RESIDENT_BYTES.fetch_add(bytes, Ordering::Relaxed);
}

/// Counts `bytes` released by the devices (an output read, dropped or
/// donated).
pub(crate) fn remove_resident(bytes: u64) {
    RESIDENT_BYTES.fetch_sub(bytes, Ordering::Relaxed);
}
