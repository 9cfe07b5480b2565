//! Host memory for tensor data: 64-byte aligned buffers from a bounded,
//! size-bucketed caching allocator, and the live-bytes counters that benches
//! and memory tests read.
//!
//! Why a cache: glibc returns freed multi-megabyte blocks to the kernel, and
//! the page faults of the next fresh block cost 2-4x on large elementwise
//! workloads. Reusing a freed buffer of the same bucket avoids them. Each
//! thread first reuses its own recently freed small buffers (a few MiB),
//! then the shared, locked cache: threads running many small operations
//! (rune::rng's tiled draws) then neither contend on the lock nor pass
//! buffers between cores.
//!
//! This is one of the few modules with `unsafe`: it owns raw allocations and
//! hands out typed slices over them.

use crate::dtype::{DType, Element};
use std::alloc::{self, Layout};
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Every buffer's alignment in bytes, at least (see [`HUGE_PAGE`]).
#[doc(hidden)] // public for nx's tests only (`nx::raw::internals`)
pub const ALIGN: usize = 64;
/// Freed buffers kept for reuse, in bytes, at most.
const CACHE_LIMIT: usize = 1 << 30;

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);
static PEAK_BYTES: AtomicUsize = AtomicUsize::new(0);
static ALLOCATED_BYTES: AtomicU64 = AtomicU64::new(0);
static SYSTEM_BYTES: AtomicU64 = AtomicU64::new(0);

/// Bytes held by live tensor storage right now.
pub fn live_bytes() -> usize {
    LIVE_BYTES.load(Ordering::Relaxed)
}

/// Bytes of every buffer handed out since the process started (each new
/// tensor's storage, fresh or reused from the cache), on every thread:
/// the difference across a call is the new storage that call allocated.
pub fn allocated_bytes() -> u64 {
    ALLOCATED_BYTES.load(Ordering::Relaxed)
}

/// Bytes of the buffers taken from the system allocator since the process
/// started (the cache of freed buffers had none of the size): the
/// difference across a call is the memory that call newly obtained; a
/// steady-state call whose buffers all come back to the cache obtains none.
pub fn system_bytes() -> u64 {
    SYSTEM_BYTES.load(Ordering::Relaxed)
}

/// The highest `live_bytes()` since the last `reset_peak_bytes()`.
pub fn peak_bytes() -> usize {
    PEAK_BYTES.load(Ordering::Relaxed)
}

/// Restarts peak tracking from the current live bytes.
pub fn reset_peak_bytes() {
    PEAK_BYTES.store(live_bytes(), Ordering::Relaxed);
}

/// Bytes of freed buffers kept for reuse: the shared cache's and the
/// calling thread's own (other threads' own few are not counted).
pub fn cached_bytes() -> usize {
    let local = LOCAL.try_with(|l| l.borrow().bytes).unwrap_or(0);
    local + CACHE.lock().unwrap().cached_bytes
}

/// Drops every cached free buffer of the shared cache and of the calling
/// thread's own (returns the memory to the system). Other threads keep
/// their few own buffers (at most `LOCAL_MAX_BYTES` each) until they reuse
/// them or exit.
pub fn clear_cache() {
    let _ = LOCAL.try_with(|l| {
        let mut l = l.borrow_mut();
        l.bytes = 0;
        for (bucket, p) in l.free.drain(..) {
            // SAFETY: as below; the thread's cache owned `p` alone.
            unsafe { alloc::dealloc(p.as_ptr(), bucket_layout(bucket)) };
        }
    });
    let mut cache = CACHE.lock().unwrap();
    for (bucket, ptrs) in cache.free.drain() {
        for p in ptrs {
            // SAFETY: every cached pointer came from `fresh_buffer`, allocated with
            // `bucket_layout(bucket)` and is owned by the cache alone.
            unsafe { alloc::dealloc(p.as_ptr(), bucket_layout(bucket)) };
        }
    }
    cache.cached_bytes = 0;
}

struct Cache {
    free: HashMap<usize, Vec<NonNull<u8>>>,
    cached_bytes: usize,
}

// SAFETY: the cache only stores pointers to allocations it owns exclusively.
unsafe impl Send for Cache {}

static CACHE: std::sync::LazyLock<Mutex<Cache>> = std::sync::LazyLock::new(|| {
    Mutex::new(Cache {
        free: HashMap::new(),
        cached_bytes: 0,
    })
});

/// Rounds a request up to its bucket: 64 bytes minimum, then four buckets per
/// power of two (at most 25% slack).
#[doc(hidden)] // public for nx's tests only (`nx::raw::internals`)
pub fn bucket_size(bytes: usize) -> usize {
    if bytes <= ALIGN {
        return ALIGN;
    }
    let p = bytes.next_power_of_two();
    if p <= 4096 {
        return p;
    }
    let quarter = p / 8; // buckets at p/2 + k * p/8, k = 1..=4
    let base = p / 2;
    let k = (bytes - base).div_ceil(quarter);
    base + k * quarter
}

/// Large buffers are backed by transparent huge pages where the system
/// offers them (Linux, `madvise(MADV_HUGEPAGE)`; PyTorch's CPU allocator
/// has the same rule, opt-in): a fresh 4 KiB page costs 1.3-1.8 us to fault
/// in on the machines we measure on (allocation, zeroing, cgroup charge), a
/// 2 MiB one about as much as 40 of them, and streaming kernels miss the TLB
/// less. A fresh process computing `exp(x) + x` on 4M f32 elements (three
/// 16 MiB buffers) took 32-43 ms before, 12-17 ms after.
#[doc(hidden)] // public for nx's tests only (`nx::raw::internals`)
pub const HUGE_PAGE: usize = 2 << 20;

/// The allocation behind a bucket: 64-byte aligned, or for buckets of 1.5
/// MiB and up 2 MiB-aligned (see [`HUGE_PAGE`]) and rounded up to whole
/// huge pages when that adds at most a third (a 1.75 MiB bucket takes one
/// huge page; a 2.5 MiB one takes one and 0.5 MiB of small pages).
#[doc(hidden)] // public for nx's tests only (`nx::raw::internals`)
pub fn bucket_layout(bucket: usize) -> Layout {
    let whole = bucket.next_multiple_of(HUGE_PAGE);
    let (size, align) = if (whole - bucket) * 3 <= bucket {
        (whole, HUGE_PAGE)
    } else if bucket >= HUGE_PAGE {
        (bucket, HUGE_PAGE)
    } else {
        (bucket, ALIGN)
    };
    Layout::from_size_align(size, align).expect("tensor allocation too large")
}

/// A fresh, zeroed buffer for `bucket` (see [`bucket_layout`]).
fn fresh_buffer(bucket: usize) -> NonNull<u8> {
    let layout = bucket_layout(bucket);
    // SAFETY: the layout has non-zero size (bucket >= 64) and a valid alignment.
    let p = unsafe { alloc::alloc(layout) };
    let Some(p) = NonNull::new(p) else {
        alloc::handle_alloc_error(layout)
    };
    #[cfg(target_os = "linux")]
    if layout.align() == HUGE_PAGE {
        // SAFETY: `p..p + layout.size()` is one allocation of ours; madvise
        // only changes how the kernel backs it (an advice it may ignore, as
        // it does where transparent huge pages are off).
        unsafe { libc::madvise(p.as_ptr().cast(), layout.size(), libc::MADV_HUGEPAGE) };
    }
    // Zeroed, so that every element is initialized from the start (this is
    // also the first touch, which faults the pages in).
    // SAFETY: the buffer is at least `bucket` bytes long and exclusively ours.
    unsafe { std::ptr::write_bytes(p.as_ptr(), 0, bucket) };
    p
}

/// Each thread's own small stack of freed buffers, consulted before the
/// shared cache: a thread reusing what it freed itself touches no lock, and
/// the buffer is still in its core's cache (buffers bouncing between cores
/// through the shared cache made two threads of small eager operations no
/// faster than one).
struct Local {
    free: Vec<(usize, NonNull<u8>)>,
    bytes: usize,
}

/// What one thread keeps to itself, at most (buffers and bytes).
const LOCAL_MAX_BUFFERS: usize = 64;
const LOCAL_MAX_BYTES: usize = 8 << 20;

impl Drop for Local {
    fn drop(&mut self) {
        // A finished thread hands its buffers to the shared cache.
        for (bucket, p) in self.free.drain(..) {
            give_back_shared(p, bucket);
        }
    }
}

thread_local! {
    static LOCAL: std::cell::RefCell<Local> = const {
        std::cell::RefCell::new(Local { free: Vec::new(), bytes: 0 })
    };
}

fn take_buffer(bucket: usize) -> NonNull<u8> {
    let local = LOCAL
        .try_with(|l| {
            let mut l = l.borrow_mut();
            let i = l.free.iter().rposition(|&(b, _)| b == bucket)?;
            l.bytes -= bucket;
            Some(l.free.remove(i).1)
        })
        .ok()
        .flatten();
    if let Some(p) = local {
        return p;
    }
    {
        let mut cache = CACHE.lock().unwrap();
        if let Some(p) = cache.free.get_mut(&bucket).and_then(|v| v.pop()) {
            cache.cached_bytes -= bucket;
            return p;
        }
    }
    SYSTEM_BYTES.fetch_add(bucket as u64, Ordering::Relaxed);
    fresh_buffer(bucket)
}

fn give_back(p: NonNull<u8>, bucket: usize) {
    let kept = LOCAL
        .try_with(|l| {
            let mut l = l.borrow_mut();
            if bucket <= LOCAL_MAX_BYTES / 8 && l.bytes + bucket <= LOCAL_MAX_BYTES {
                if l.free.len() == LOCAL_MAX_BUFFERS {
                    // Keep the most recent: the oldest goes to the shared cache.
                    let (b, old) = l.free.remove(0);
                    l.bytes -= b;
                    give_back_shared(old, b);
                }
                l.bytes += bucket;
                l.free.push((bucket, p));
                true
            } else {
                false
            }
        })
        .unwrap_or(false);
    if !kept {
        give_back_shared(p, bucket);
    }
}

fn give_back_shared(p: NonNull<u8>, bucket: usize) {
    let mut cache = CACHE.lock().unwrap();
    if cache.cached_bytes + bucket <= CACHE_LIMIT {
        cache.cached_bytes += bucket;
        cache.free.entry(bucket).or_default().push(p);
    } else {
        drop(cache);
        // SAFETY: `p` came from `fresh_buffer(bucket)` (`bucket_layout(bucket)`) and nothing else owns it.
        unsafe { alloc::dealloc(p.as_ptr(), bucket_layout(bucket)) };
    }
}

/// One block of tensor memory, shared by every view of it.
///
/// Reads and writes go through an `RwLock`, so an in-place `assign` on one
/// thread can never race a kernel reading the same storage on another.
///
/// `version` counts the in-place writes (`write`): reverse mode records it
/// with each value it keeps for the backward pass and refuses a backward
/// pass over a value written since (PyTorch's version counters).
pub struct Storage {
    ptr: NonNull<u8>,
    bytes: usize,
    bucket: usize,
    lock: RwLock<()>,
    version: AtomicU64,
    /// Where the bytes are until first accessed (see [`Pending`]); `lazy`
    /// says whether there is anything here, so that an ordinary read costs
    /// one atomic load.
    pending: Mutex<Option<Arc<dyn Pending>>>,
    lazy: AtomicBool,
}

/// Bytes that live elsewhere until the storage is first read or written:
/// a device's resident output, which moves to the host on first access.
pub trait Pending: Send + Sync {
    /// The bytes, as a contiguous tensor of the storage's dtype and length.
    /// Called on first access, under the storage's write lock; if it panics
    /// (a donated handle, a failed transfer) the storage stays pending and
    /// the next access panics again.
    fn fill(&self) -> crate::Tensor;
    /// For the owner to recognise its own (downcast).
    fn as_any(&self) -> &dyn std::any::Any;
}

// SAFETY: the memory is owned by this value; every access to it after
// construction goes through `lock` (shared reads, exclusive writes).
unsafe impl Send for Storage {}
unsafe impl Sync for Storage {}

impl Storage {
    /// A buffer of `len` elements of `dtype`. The contents are unspecified
    /// (zeros or a previous tensor's data) but always initialized; `Bool`
    /// buffers are zeroed so that every byte is a valid `bool`.
    pub fn new(dtype: DType, len: usize) -> Storage {
        let bytes = len * dtype.size_in_bytes();
        let bucket = bucket_size(bytes);
        let ptr = take_buffer(bucket);
        if dtype == DType::Bool {
            // SAFETY: the buffer is `bucket >= bytes` bytes long and exclusively ours.
            unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, bytes) };
        }
        let live = LIVE_BYTES.fetch_add(bytes, Ordering::Relaxed) + bytes;
        PEAK_BYTES.fetch_max(live, Ordering::Relaxed);
        ALLOCATED_BYTES.fetch_add(bytes as u64, Ordering::Relaxed);
        Storage {
            ptr,
            bytes,
            bucket,
            lock: RwLock::new(()),
            version: AtomicU64::new(0),
            pending: Mutex::new(None),
            lazy: AtomicBool::new(false),
        }
    }

    /// Makes the bytes pending on `p` (or, `None`, present as they are).
    pub fn set_pending(&self, p: Option<Arc<dyn Pending>>) {
        let _w = self.lock.write().unwrap_or_else(|e| e.into_inner());
        self.lazy.store(p.is_some(), Ordering::Release);
        *self.pending.lock().unwrap_or_else(|e| e.into_inner()) = p;
    }

    /// What the bytes are pending on, if they are not here yet.
    pub fn pending(&self) -> Option<Arc<dyn Pending>> {
        if !self.lazy.load(Ordering::Acquire) {
            return None;
        }
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Brings pending bytes in (once) before an access.
    fn settle(&self) {
        if !self.lazy.load(Ordering::Acquire) {
            return;
        }
        let _w = self.lock.write().unwrap_or_else(|e| e.into_inner());
        let p = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let Some(p) = p else { return };
        let t = p.fill();
        let src = crate::raw::read(&t);
        assert!(
            t.is_contiguous() && t.numel() * t.dtype().size_in_bytes() == self.bytes,
            "a pending storage's bytes must match it"
        );
        // SAFETY: `src` addresses `self.bytes` initialized bytes of another
        // storage (held by its read guard); ours is `bytes` long and the write
        // guard excludes every other access to it.
        unsafe { std::ptr::copy_nonoverlapping(src.ptr(), self.ptr.as_ptr(), self.bytes) };
        *self.pending.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.lazy.store(false, Ordering::Release);
    }

    /// A buffer holding a copy of `data`.
    pub fn from_slice<T: Element>(data: &[T]) -> Storage {
        let mut s = Storage::new(T::DTYPE, data.len());
        s.as_mut_slice::<T>().copy_from_slice(data);
        s
    }

    /// The buffer's size in bytes.
    pub fn len_bytes(&self) -> usize {
        self.bytes
    }

    /// The first byte, for a program's private buffer (`raw::Slab`), which
    /// its owner accesses without the lock.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Address of the first byte, for telling storages apart (overlap checks).
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Exclusive access to a buffer nobody else holds yet (a fresh kernel output).
    pub fn as_mut_slice<T: Element>(&mut self) -> &mut [T] {
        let len = self.bytes / std::mem::size_of::<T>();
        // SAFETY: `&mut self` proves exclusive access; the memory is initialized
        // (zeroed or previously written, `Bool` re-zeroed), 64-byte aligned and
        // at least `len * size_of::<T>()` bytes long. Element types are plain data
        // for which every initialized bit pattern is valid (bool aside, handled in `new`).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr() as *mut T, len) }
    }

    /// Shared read access for kernels.
    pub fn read<T: Element>(&self) -> ReadGuard<'_, T> {
        self.settle();
        let guard = self.lock.read().unwrap_or_else(|e| e.into_inner());
        let len = self.bytes / std::mem::size_of::<T>();
        // SAFETY: as in `as_mut_slice`; the read guard excludes writers for its lifetime.
        let slice = unsafe { std::slice::from_raw_parts(self.ptr.as_ptr() as *const T, len) };
        ReadGuard {
            _guard: guard,
            slice,
        }
    }

    /// How many times `write` has been called on this buffer: a value read
    /// earlier is stale if this has changed since.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Relaxed)
    }

    /// Exclusive write access for in-place operations (`assign`, and any
    /// later writeback); bumps `version`.
    pub fn write<T: Element>(&self) -> WriteGuard<'_, T> {
        self.settle();
        let guard = self.lock.write().unwrap_or_else(|e| e.into_inner());
        // Relaxed: the lock orders the write itself; the counter only has to
        // change, and a reader on another thread synchronizes through the lock.
        self.version.fetch_add(1, Ordering::Relaxed);
        let len = self.bytes / std::mem::size_of::<T>();
        // SAFETY: as in `as_mut_slice`; the write guard excludes all other access.
        let slice = unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr() as *mut T, len) };
        WriteGuard {
            _guard: guard,
            slice,
        }
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        LIVE_BYTES.fetch_sub(self.bytes, Ordering::Relaxed);
        give_back(self.ptr, self.bucket);
    }
}

/// Shared access to a storage's elements as a `[T]` slice ([`Storage::read`]),
/// holding its read lock until dropped.
pub struct ReadGuard<'a, T> {
    _guard: RwLockReadGuard<'a, ()>,
    slice: &'a [T],
}

impl<T> std::ops::Deref for ReadGuard<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.slice
    }
}

/// Exclusive access to a storage's elements as a `[T]` slice
/// ([`Storage::write`]), holding its write lock until dropped.
pub struct WriteGuard<'a, T> {
    _guard: RwLockWriteGuard<'a, ()>,
    slice: &'a mut [T],
}

impl<T> std::ops::Deref for WriteGuard<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.slice
    }
}

impl<T> std::ops::DerefMut for WriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.slice
    }
}
