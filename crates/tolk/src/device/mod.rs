//! The device layer: what the CUDA runtime needs of a device, as one small
//! interface ([`DeviceApi`]: allocate, free, copy in, copy out, copy on the
//! device, load a module, launch, gemm, synchronize), a caching allocator
//! over it ([`Device`], [`Buffer`]), and the devices by name ([`open`]).
//!
//! Two implementations:
//! - [`cuda_driver`]: the real device, through `cudarc` (the driver and
//!   cuBLAS, loaded at run time: the build needs no CUDA) and tolk's own
//!   NVRTC loader ([`crate::nvrtc`]) for the PTX. Opened only after
//!   [`crate::cuda_probe::probe`] found the driver, a device and NVRTC, so a
//!   missing piece is a message, never a crash inside a CUDA library.
//! - [`emulated`]: a device emulated on the host, for tests only (never
//!   offered to users; see [`emulated::install_for_tests`] for why it is a
//!   hidden function rather than an environment variable): the same CUDA C++
//!   source compiled by the host's C++ compiler with a small shim, device
//!   memory the host may touch only through copies.
//!
//! [`exec`] runs a rendered CUDA program ([`crate::cuda::CudaProgram`]) on a
//! [`Device`]: its kernels as launches, its products as gemm calls.

pub mod cuda_driver;
pub mod emulated;
pub mod exec;
mod loops;
pub mod sharded;

use nx::DType;
use rustc_hash::FxHashMap as HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// A device address: opaque to the host (never dereferenced here).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DevPtr(pub u64);

impl DevPtr {
    /// `bytes` past this address.
    pub fn offset(self, bytes: usize) -> DevPtr {
        DevPtr(self.0 + bytes as u64)
    }
}

/// A loaded module, as the implementation numbers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ModuleId(pub usize);

/// One kernel parameter, as `cuLaunchKernel` takes them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KernelArg {
    /// A buffer (`void *`).
    Ptr(DevPtr),
    /// An `int64_t`.
    I64(i64),
}

/// One operand of a [`Gemm`]: element strides of its rows, its columns and
/// its batch (a matrix `[rows, cols]` per batch entry).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Operand {
    /// Its first element.
    pub ptr: DevPtr,
    /// Element stride between rows.
    pub row_stride: usize,
    /// Element stride between columns.
    pub col_stride: usize,
    /// Element stride between batch entries (0: shared by all).
    pub batch_stride: usize,
}

impl Operand {
    /// How BLAS takes this operand as a row-major `[rows, cols]` matrix:
    /// `(false, ld)` when its rows are contiguous (`col_stride` 1, rows
    /// `ld >= cols` apart), `(true, ld)` when its columns are (`row_stride`
    /// 1, columns `ld >= rows` apart); `None` for a layout with neither (a
    /// single row or column counts as either).
    pub fn blas_layout(&self, rows: usize, cols: usize) -> Option<(bool, usize)> {
        let (rows1, cols1) = (rows.max(1), cols.max(1));
        if self.col_stride == 1 || cols <= 1 {
            let ld = if rows <= 1 { cols1 } else { self.row_stride };
            if ld >= cols1 {
                return Some((false, ld));
            }
        }
        if self.row_stride == 1 || rows <= 1 {
            let ld = if cols <= 1 { rows1 } else { self.col_stride };
            if ld >= rows1 {
                return Some((true, ld));
            }
        }
        None
    }
}

/// A batched matrix product, row-major as nx sees it: for each of `batch`
/// entries, `C[m, n] = A[m, k] · B[k, n]`, `C` contiguous (`[batch, m, n]`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gemm {
    /// The element type of A, B and C.
    pub dtype: DType,
    /// Batch entries.
    pub batch: usize,
    /// Rows of A and C.
    pub m: usize,
    /// Columns of B and C.
    pub n: usize,
    /// Columns of A, rows of B.
    pub k: usize,
    /// `[m, k]` per entry.
    pub a: Operand,
    /// `[k, n]` per entry.
    pub b: Operand,
    /// `[batch, m, n]`, contiguous.
    pub c: DevPtr,
}

/// What the runtime needs of a device. Every call is ordered after the
/// ones before it (one stream); `copy_out` returns once the bytes are on
/// the host. Errors are messages naming what failed.
pub trait DeviceApi: Send + Sync {
    /// Describes the device (its model, or "emulated").
    fn describe(&self) -> String;
    /// `bytes` of device memory (contents unspecified).
    fn allocate(&self, bytes: usize) -> Result<DevPtr, String>;
    /// Returns memory from [`DeviceApi::allocate`] (of that many `bytes`).
    fn free(&self, ptr: DevPtr, bytes: usize);
    /// Host bytes to the device.
    fn copy_in(&self, dst: DevPtr, src: &[u8]) -> Result<(), String>;
    /// Device bytes to the host (waits for the work before it).
    fn copy_out(&self, src: DevPtr, dst: &mut [u8]) -> Result<(), String>;
    /// Device bytes to device bytes (no transfer).
    fn copy_on_device(&self, dst: DevPtr, src: DevPtr, bytes: usize) -> Result<(), String>;
    /// Bytes of another device (`src_device`, of the same implementation)
    /// to this one's (a peer copy: no host transfer), ordered after the
    /// work of both devices before it.
    fn copy_from_peer(
        &self,
        dst: DevPtr,
        src_device: &dyn DeviceApi,
        src: DevPtr,
        bytes: usize,
    ) -> Result<(), String>;
    /// The implementation, for [`DeviceApi::copy_from_peer`] to reach its
    /// peer's handles.
    fn as_any(&self) -> &dyn std::any::Any;
    /// Compiles one CUDA C++ translation unit as rendered by the CUDA
    /// dialect ([`crate::codegen::cuda`]) into the image this device loads
    /// (PTX on the real device).
    fn compile(&self, source: &str) -> Result<Vec<u8>, String>;
    /// Loads an image made by [`DeviceApi::compile`] from `source`.
    fn load_image(&self, image: &[u8], source: &str) -> Result<ModuleId, String>;
    /// What an image depends on besides its source, for the disk cache's
    /// key ([`crate::cache::cuda_key`]): the device model and capability,
    /// the driver's and NVRTC's versions (the emulated device: its
    /// compiler). `None`: images are not cached.
    fn image_target(&self) -> Option<crate::cache::CudaTarget>;
    /// Launches `kernel` of `module` on `grid` blocks of `block` threads.
    fn launch(
        &self,
        module: ModuleId,
        kernel: &str,
        grid: u32,
        block: u32,
        args: &[KernelArg],
    ) -> Result<(), String>;
    /// A batched matrix product (cuBLAS on the device).
    fn gemm(&self, g: &Gemm) -> Result<(), String>;
    /// Waits for every call before it.
    fn synchronize(&self) -> Result<(), String>;
}

/// The allocator's counters (see [`Device::alloc_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocStats {
    /// Allocations that reached the device ([`DeviceApi::allocate`]).
    pub device_allocations: u64,
    /// Allocations served from the cache of freed buffers.
    pub reused: u64,
    /// Bytes held by live buffers (their size classes).
    pub live_bytes: u64,
    /// Bytes of freed buffers kept for reuse.
    pub cached_bytes: u64,
}

/// A device and its caching allocator: freed buffers are kept by size
/// class and handed out again; [`Device::clear_cache`] returns them to the
/// device (the resident budget's reclaim).
pub struct Device {
    name: String,
    api: Box<dyn DeviceApi>,
    /// Freed buffers by size class.
    cache: Mutex<HashMap<usize, Vec<DevPtr>>>,
    /// Loaded modules by their source's digest.
    modules: Mutex<HashMap<String, ModuleId>>,
    device_allocations: AtomicU64,
    reused: AtomicU64,
    live_bytes: AtomicU64,
    cached_bytes: AtomicU64,
}

/// The size class of a request: powers of two up to 1 MiB (at least 256
/// bytes), whole MiB above.
pub fn size_class(bytes: usize) -> usize {
    const MIB: usize = 1 << 20;
    if bytes <= MIB {
        bytes.max(256).next_power_of_two()
    } else {
        bytes.div_ceil(MIB) * MIB
    }
}

/// Device memory from a [`Device`]'s allocator: back to its cache when
/// dropped.
pub struct Buffer {
    device: Arc<Device>,
    ptr: DevPtr,
    /// Its size class.
    class: usize,
    /// The bytes asked for.
    bytes: usize,
}

impl Buffer {
    /// Its first byte on the device.
    pub fn ptr(&self) -> DevPtr {
        self.ptr
    }
    /// The bytes asked for.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    /// The device holding it.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Buffer({} B at {:#x} on {})",
            self.bytes, self.ptr.0, self.device.name
        )
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let d = &self.device;
        d.live_bytes.fetch_sub(self.class as u64, Ordering::Relaxed);
        d.cached_bytes
            .fetch_add(self.class as u64, Ordering::Relaxed);
        d.cache
            .lock()
            .unwrap()
            .entry(self.class)
            .or_default()
            .push(self.ptr);
    }
}

impl Device {
    /// A device over `api`, named `name` in messages.
    pub fn new(name: &str, api: Box<dyn DeviceApi>) -> Arc<Device> {
        Arc::new(Device {
            name: name.to_string(),
            api,
            cache: Mutex::default(),
            modules: Mutex::default(),
            device_allocations: AtomicU64::new(0),
            reused: AtomicU64::new(0),
            live_bytes: AtomicU64::new(0),
            cached_bytes: AtomicU64::new(0),
        })
    }

    /// Its name (`"CUDA:0"`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The interface below the allocator.
    pub fn api(&self) -> &dyn DeviceApi {
        &*self.api
    }

    /// A buffer of at least `bytes` (a freed one of its size class if the
    /// cache has one).
    pub fn alloc(self: &Arc<Self>, bytes: usize) -> Result<Buffer, String> {
        let class = size_class(bytes);
        let cached = self
            .cache
            .lock()
            .unwrap()
            .get_mut(&class)
            .and_then(Vec::pop);
        let ptr = match cached {
            Some(p) => {
                self.reused.fetch_add(1, Ordering::Relaxed);
                self.cached_bytes.fetch_sub(class as u64, Ordering::Relaxed);
                p
            }
            None => {
                let p = match self.api.allocate(class) {
                    Ok(p) => p,
                    Err(_) => {
                        // Out of memory, maybe: give the cache back, once.
                        self.clear_cache();
                        self.api.allocate(class)?
                    }
                };
                self.device_allocations.fetch_add(1, Ordering::Relaxed);
                p
            }
        };
        self.live_bytes.fetch_add(class as u64, Ordering::Relaxed);
        Ok(Buffer {
            device: self.clone(),
            ptr,
            class,
            bytes,
        })
    }

    /// A buffer holding `bytes` copied in from the host.
    pub fn upload(self: &Arc<Self>, bytes: &[u8]) -> Result<Buffer, String> {
        let b = self.alloc(bytes.len())?;
        if !bytes.is_empty() {
            self.api.copy_in(b.ptr, bytes)?;
        }
        Ok(b)
    }

    /// A host tensor's elements in a new device buffer (a contiguous copy
    /// first if it is not contiguous from its first element).
    pub fn upload_tensor(self: &Arc<Self>, t: &nx::Tensor) -> Result<Buffer, String> {
        let t = if t.is_contiguous() && t.offset() == Some(0) {
            t.clone()
        } else {
            t.copy()
        };
        let bytes = t.numel() * t.dtype().size_in_bytes();
        let r = nx::raw::read(&t);
        // SAFETY: `t` is contiguous: `bytes` bytes from its first element
        // are its elements, alive while `r` is.
        let host = unsafe { std::slice::from_raw_parts(r.ptr(), bytes) };
        self.upload(host)
    }

    /// Returns the cached freed buffers to the device; the bytes returned.
    pub fn clear_cache(&self) -> usize {
        let drained: Vec<(usize, Vec<DevPtr>)> = self.cache.lock().unwrap().drain().collect();
        let mut total = 0;
        for (class, ptrs) in drained {
            for p in ptrs {
                self.api.free(p, class);
                total += class;
            }
        }
        self.cached_bytes.fetch_sub(total as u64, Ordering::Relaxed);
        total
    }

    /// The allocator's counters.
    pub fn alloc_stats(&self) -> AllocStats {
        AllocStats {
            device_allocations: self.device_allocations.load(Ordering::Relaxed),
            reused: self.reused.load(Ordering::Relaxed),
            live_bytes: self.live_bytes.load(Ordering::Relaxed),
            cached_bytes: self.cached_bytes.load(Ordering::Relaxed),
        }
    }

    /// The module of `source`, loaded once per device; its image (PTX)
    /// comes from the disk cache when an earlier process or device of the
    /// same model, driver and NVRTC compiled it ([`crate::cache::dir`],
    /// `JITCACHE=0` turns it off), else it is compiled and written there.
    pub fn module(&self, source: &str) -> Result<ModuleId, String> {
        let key = crate::hash::hash(&[source.as_bytes()]);
        if let Some(&m) = self.modules.lock().unwrap().get(&key) {
            return Ok(m);
        }
        let cached = match (self.api.image_target(), crate::cache::dir()) {
            (Some(t), Some(dir)) => {
                let arch = format!("compute_{}{}", t.capability.0, t.capability.1);
                let opts = crate::cuda::nvrtc_options(&arch);
                let refs: Vec<&str> = opts.iter().map(String::as_str).collect();
                Some((dir, crate::cache::cuda_key(source, &refs, &t)))
            }
            _ => None,
        };
        let image = match cached
            .as_ref()
            .and_then(|(dir, k)| crate::cache::read_module(dir, k))
        {
            Some(image) => {
                MODULES_FROM_DISK.fetch_add(1, Ordering::Relaxed);
                image
            }
            None => {
                let image = self.api.compile(source)?;
                MODULES_COMPILED.fetch_add(1, Ordering::Relaxed);
                if let Some((dir, k)) = &cached {
                    // Best effort: a failed write costs a compile later.
                    let _ = crate::cache::write_module(dir, k, &image);
                }
                image
            }
        };
        let m = self.api.load_image(&image, source)?;
        self.modules.lock().unwrap().insert(key, m);
        Ok(m)
    }
}

static MODULES_COMPILED: AtomicU64 = AtomicU64::new(0);
static MODULES_FROM_DISK: AtomicU64 = AtomicU64::new(0);

/// Modules this process compiled, and loaded from the disk cache
/// (every device together; for tests and logs).
pub fn module_stats() -> (u64, u64) {
    (
        MODULES_COMPILED.load(Ordering::Relaxed),
        MODULES_FROM_DISK.load(Ordering::Relaxed),
    )
}

/// The CUDA devices opened so far, by name (`"CUDA:0"`).
fn registry() -> &'static Mutex<HashMap<String, Arc<Device>>> {
    static R: OnceLock<Mutex<HashMap<String, Arc<Device>>>> = OnceLock::new();
    R.get_or_init(Mutex::default)
}

/// The ordinal a CUDA device name designates (`"CUDA"` is `"CUDA:0"`), or
/// `None` for another name.
pub fn cuda_ordinal(name: &str) -> Option<usize> {
    match name.split_once(':') {
        None => (name == crate::cuda::DEVICE).then_some(0),
        Some((b, i)) if b == crate::cuda::DEVICE => i.parse().ok(),
        _ => None,
    }
}

/// The CUDA device `name` (`"CUDA"`, `"CUDA:n"`), opened on first use and
/// kept for the process: the emulated one once
/// [`emulated::install_for_tests`] ran, else the real one, which needs the
/// driver, a device of that ordinal and NVRTC. `Err` says what is missing.
pub fn open(name: &str) -> Result<Arc<Device>, String> {
    let ordinal = cuda_ordinal(name).ok_or_else(|| format!("{name:?} is not a CUDA device"))?;
    let key = format!("{}:{ordinal}", crate::cuda::DEVICE);
    if let Some(d) = registry().lock().unwrap().get(&key) {
        return Ok(d.clone());
    }
    let api: Box<dyn DeviceApi> = if emulated::installed() {
        Box::new(emulated::Emulated::new(ordinal)?)
    } else {
        Box::new(cuda_driver::Driver::open(ordinal)?)
    };
    let d = Device::new(&key, api);
    Ok(registry().lock().unwrap().entry(key).or_insert(d).clone())
}
