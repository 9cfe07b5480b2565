//! The eager kernels' thread pool: fork-join over numbered parts.
//!
//! `for_each(parts, f)` runs `f(0)`, ..., `f(parts - 1)` on the calling
//! thread and the pool's workers and returns when all have finished. Parts
//! are claimed one at a time from a shared counter, so the caller never
//! waits for a worker that has not started: if every worker is slow to
//! wake, the caller simply runs all the parts itself.
//!
//! Why not rayon here: a rayon worker that has gone to sleep takes 50-200 us
//! to wake on a virtual machine (an inter-processor interrupt to a halted
//! vCPU), more than most kernels it would split, and the calling thread of
//! `par_iter` blocks until the worker is done. Our workers spin for
//! [`SPIN`] after each job before parking, so back-to-back kernels (an
//! eager training step issues dozens) find them awake.
//!
//! One job runs at a time. A call made while the pool is busy (from another
//! thread, or nested inside a part) runs its parts inline, in order.
//! The pool has one worker fewer than [`threads`]: the caller is the other.

use std::any::Any;
use std::cell::Cell;
use std::ops::Range;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long an idle worker spins before parking.
const SPIN: Duration = Duration::from_millis(2);

// The kernels' parallel grain, in one place. Every eager kernel that splits
// across this pool uses these (tolk's runtime keeps grains of its own for
// compiled kernels).

/// Below this many elements (or threefry pairs, or multiply-adds of an
/// epilogue) a kernel runs on the calling thread: splitting costs a few
/// microseconds, more than small operations take. 64K: lowered from 256K
/// when this pool replaced rayon (commit 66777d9, measured on the 2-core
/// VM: the MLP training step of the autodiff benchmark 2.35 -> 2.0 ms, its
/// Hessian 0.50 -> 0.36 ms, jacfwd/jacrev 0.63/0.59 -> 0.48/0.47 ms).
pub const PAR_MIN: usize = 1 << 16;

/// Elements (or threefry pairs) per part of an elementwise split: 16K, a
/// quarter of [`PAR_MIN`], so a kernel at the threshold still gives every
/// thread of a small machine a few parts to claim. Set with `PAR_MIN` in
/// commit 66777d9 (was 32K); no measurement of its own is recorded.
pub(crate) const PAR_CHUNK: usize = 1 << 14;

/// Elements per part of a kernel compiled by tolk, about, for kernels large
/// enough to give every thread several parts (smaller ones get one part per
/// thread). Longer than `PAR_CHUNK`: a compiled kernel streams, and
/// `exp(x) * y + 1` over 4M elements ran at 0.85-1.2 ms in 2^14-element
/// parts against 0.58-1.1 ms in 2^18 (six alternating runs each; a part per
/// thread measured the same as 2^18).
pub const COMPILED_PAR_CHUNK: usize = 1 << 18;

/// Input elements per part of a reduction: 64K. It also fixes the order in
/// which a long sum's partial totals are added, so changing it changes the
/// low bits of large float reductions. Chosen when the reductions were
/// written (commit ef7c7ac); no measurement is recorded.
pub(crate) const REDUCE_PAR_CHUNK: usize = 1 << 16;

/// The number of threads eager kernels split across: `NX_NUM_THREADS` when
/// set to a positive number, else the machine's available parallelism.
/// Read once, at the first call; with 1, every kernel runs on the thread
/// that calls it.
///
/// ```
/// assert!(nx::num_threads() >= 1);
/// ```
pub fn threads() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| {
        std::env::var("NX_NUM_THREADS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    })
}

/// One fork-join job. The closure pointer is only dereferenced for a part
/// index claimed below `parts`, and the caller does not return (so the
/// closure outlives every such use) until `left` reaches zero.
struct Job {
    f: *const (dyn Fn(usize) + Sync),
    parts: usize,
    next: AtomicUsize,
    left: AtomicUsize,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

// SAFETY: `f` points to a `Sync` closure that outlives every dereference
// (see `Job`); the other fields are thread-safe.
unsafe impl Send for Job {}
unsafe impl Sync for Job {}

impl Job {
    /// Claims and runs parts until none are left; a panicking part is
    /// recorded (the first one wins) and still counted as done.
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.parts {
                return;
            }
            // SAFETY: `i < parts`, so the caller is still inside
            // `for_each` waiting for this part: the closure is alive.
            let f = unsafe { &*self.f };
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| f(i))) {
                self.panic.lock().unwrap().get_or_insert(p);
            }
            self.left.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

struct Pool {
    /// Held by the thread whose job is running.
    busy: AtomicBool,
    /// Bumped once per job; workers watch it.
    epoch: AtomicU64,
    current: Mutex<Option<Arc<Job>>>,
    sleepers: AtomicUsize,
    park: Mutex<()>,
    wake: Condvar,
}

thread_local! {
    /// True on the pool's worker threads (their nested calls run inline).
    #[doc(hidden)] // public for nx's tests only (`nx::raw::internals`)
    pub static IN_WORKER: Cell<bool> = const { Cell::new(false) };
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<&'static Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let pool: &'static Pool = Box::leak(Box::new(Pool {
            busy: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            current: Mutex::new(None),
            sleepers: AtomicUsize::new(0),
            park: Mutex::new(()),
            wake: Condvar::new(),
        }));
        for w in 1..threads() {
            std::thread::Builder::new()
                .name(format!("nx-worker-{w}"))
                .spawn(move || worker(pool))
                .expect("nx: cannot spawn a kernel worker thread");
        }
        pool
    })
}

/// While non-zero, idle workers park at once instead of spinning: other
/// threads (pmap's device threads, each running its kernels inline) have
/// the cores. See [`rest`].
static RESTING: AtomicUsize = AtomicUsize::new(0);

/// Idle workers park at once, instead of spinning, until the guard drops.
pub(crate) fn rest() -> Rest {
    RESTING.fetch_add(1, Ordering::SeqCst);
    Rest
}

/// The guard of nx's internal `rest()`: while any is alive, idle pool
/// workers park at once instead of spinning; dropping it ends that.
pub struct Rest;

impl Drop for Rest {
    fn drop(&mut self) {
        RESTING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs `f` with every kernel it calls on this thread alone (parts run
/// inline, as on a worker).
pub(crate) fn on_this_thread<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            IN_WORKER.with(|w| w.set(self.0));
        }
    }
    let _restore = Restore(IN_WORKER.with(|w| w.replace(true)));
    f()
}

fn worker(pool: &'static Pool) {
    IN_WORKER.with(|w| w.set(true));
    let mut seen = 0;
    loop {
        // Spin for a while, then park until the epoch moves.
        let start = Instant::now();
        while pool.epoch.load(Ordering::SeqCst) == seen
            && start.elapsed() < SPIN
            && RESTING.load(Ordering::Relaxed) == 0
        {
            std::hint::spin_loop();
        }
        if pool.epoch.load(Ordering::SeqCst) == seen {
            let mut guard = pool.park.lock().unwrap();
            pool.sleepers.fetch_add(1, Ordering::SeqCst);
            while pool.epoch.load(Ordering::SeqCst) == seen {
                guard = pool.wake.wait(guard).unwrap();
            }
            pool.sleepers.fetch_sub(1, Ordering::SeqCst);
        }
        seen = pool.epoch.load(Ordering::SeqCst);
        let job = pool.current.lock().unwrap().clone();
        if let Some(job) = job {
            job.work();
        }
    }
}

/// Runs `f(i)` for every `i < parts`, split across the pool (see the
/// module's doc); returns when all have run. A panic in a part is
/// re-raised here after every part has finished.
pub(crate) fn for_each(parts: usize, f: &(dyn Fn(usize) + Sync)) {
    let inline = parts <= 1 || threads() == 1 || IN_WORKER.with(|w| w.get());
    let pool = (!inline).then(pool);
    let Some(pool) = pool.filter(|p| {
        p.busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }) else {
        (0..parts).for_each(f);
        return;
    };
    // SAFETY (lifetime erasure): the `Job` keeps a pointer to `f` past this
    // call only inside `Arc`s that workers may still hold, and they
    // dereference it only for claimed parts below `parts`, all of which
    // finish before this function returns (we wait for `left == 0`).
    let f: &'static (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(f) };
    let job = Arc::new(Job {
        f,
        parts,
        next: AtomicUsize::new(0),
        left: AtomicUsize::new(parts),
        panic: Mutex::new(None),
    });
    *pool.current.lock().unwrap() = Some(job.clone());
    pool.epoch.fetch_add(1, Ordering::SeqCst);
    if pool.sleepers.load(Ordering::SeqCst) > 0 {
        drop(pool.park.lock().unwrap());
        pool.wake.notify_all();
    }
    job.work();
    // Wait for parts still running on workers; after a millisecond, yield
    // between checks in case a worker was preempted (more busy threads than
    // cores). Yielding sooner costs a system call per check on the fast path.
    let waiting = Instant::now();
    while job.left.load(Ordering::Acquire) != 0 {
        if waiting.elapsed() > Duration::from_millis(1) {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    *pool.current.lock().unwrap() = None;
    pool.busy.store(false, Ordering::Release);
    let panic = job.panic.lock().unwrap().take();
    if let Some(p) = panic {
        resume_unwind(p);
    }
}

/// A mutable slice shared by parts that write disjoint ranges of it.
struct Shared<U>(*mut U, usize);

// SAFETY: parts only take disjoint sub-slices (see `range`).
unsafe impl<U: Send> Sync for Shared<U> {}

impl<U> Shared<U> {
    /// The sub-slice `r`. SAFETY: `r` lies inside the slice and no other
    /// live sub-slice overlaps it.
    unsafe fn range(&self, r: Range<usize>) -> &mut [U] {
        debug_assert!(r.start <= r.end && r.end <= self.1);
        std::slice::from_raw_parts_mut(self.0.add(r.start), r.len())
    }
}

/// Runs `body(i, chunk)` over the chunks of `cs` elements of `out` (the last
/// may be shorter), `i` counting chunks, in parallel.
#[doc(hidden)] // public for nx's tests only (`nx::raw::internals`)
pub fn chunks_mut<U: Send>(out: &mut [U], cs: usize, body: &(dyn Fn(usize, &mut [U]) + Sync)) {
    let (len, cs) = (out.len(), cs.max(1));
    let shared = Shared(out.as_mut_ptr(), len);
    for_each(len.div_ceil(cs), &|i| {
        // SAFETY: chunk `i` is `i*cs .. min((i+1)*cs, len)`, inside `out`
        // and disjoint from every other chunk; each index runs once.
        body(i, unsafe { shared.range(i * cs..((i + 1) * cs).min(len)) })
    });
}

/// Runs `body(row, j, piece)` over `out` seen as rows of `row_len` elements,
/// each split into pieces of `cs` elements (`j` counting pieces within the
/// row), in parallel over all pieces of all rows.
#[doc(hidden)] // public for nx's tests only (`nx::raw::internals`)
pub fn row_pieces_mut<U: Send>(
    out: &mut [U],
    row_len: usize,
    cs: usize,
    body: &(dyn Fn(usize, usize, &mut [U]) + Sync),
) {
    if row_len == 0 {
        return;
    }
    let (len, cs) = (out.len(), cs.max(1));
    let per_row = row_len.div_ceil(cs);
    let shared = Shared(out.as_mut_ptr(), len);
    for_each(len / row_len * per_row, &|p| {
        let (r, j) = (p / per_row, p % per_row);
        let start = r * row_len + j * cs;
        let end = (start + cs).min((r + 1) * row_len);
        // SAFETY: piece `(r, j)` lies inside row `r` (inside `out`, as
        // `r < len / row_len`), disjoint from the other pieces; each runs once.
        body(r, j, unsafe { shared.range(start..end) })
    });
}
