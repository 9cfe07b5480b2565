//! dot_general: batched matrix products through the `gemm` crate for floats,
//! plain loops for integers.
//!
//! Each operand is seen as a batch of matrices: the lhs as `[batch, M, K]`
//! (batch dims, then its free dims merged into `M`, then its contracting dims
//! merged into `K`) and the rhs as `[batch, K, N]`. Merging dims needs no
//! copy when their strides chain (`stride[i] == stride[i+1] * size[i+1]`,
//! size-1 dims ignored): `gemm` takes any row and column strides, so
//! transposed, sliced, flipped and broadcast views are multiplied in place.
//! Only an operand whose free or contracting dims cannot be merged into one
//! stride is first copied into a contiguous `[batch, rows, cols]` buffer.
//!
//! f32, f64, f16, c64 and c128 go to `gemm` (f16 accumulates in f32 inside `gemm`);
//! bf16 is converted to f32, multiplied, and rounded back. Integers (and
//! bool) use plain loops accumulating in `i64` with wrapping arithmetic, which
//! equals wrapping arithmetic in the element type.

use super::dispatch::{self, Kernel};
use super::elementwise::cast;
use super::pool;
use super::strided::Walk;
use crate::dtype::{DType, Element};
use crate::layout::Layout;
use crate::shape::numel;
use crate::storage::Storage;
use crate::tensor::{Tensor, Value};
use gemm::Parallelism;
use half::f16;
use std::ops::Range;

/// Products with fewer multiply-adds than this run on the calling thread:
/// below it, splitting across cores costs more than it saves. The best
/// value moves with the host (the pool's wake-up cost against one core's
/// product rate); 64^3 measured best or equal everywhere on the current
/// 2-core VM (AMD EPYC, AVX-512; `bench_jit`/`bench_generality`, two
/// alternating runs each, jitted), against 128^3: a scan RNN's forward
/// (32x128x128 steps) 0.87 -> 0.66 ms and its value_and_grad 2.52 -> 2.01
/// ms, a vmap of Hessian-vector products 79 -> 65 us, the flagship MLP step
/// 40 -> 37 us, an MLP 784-512-512-10 step 0.97 -> 0.94 ms, a transformer
/// block's step the same; 32^3 and 2^17 no better. (A Xeon VM before it
/// measured 128^3 better for the RNN and the flagship, 4.51 against 5.07
/// ms; a Zen 4 one before that, 64^3.)
#[doc(hidden)] // public for nx's tests only (`nx::raw::internals`)
pub const SPLIT_FLOPS: usize = 64 * 64 * 64;

/// The fewest rows (or columns) one thread's band of a split product gets.
const SPLIT_MIN: usize = 32;

/// Integer products go parallel (over output rows) from this many multiply-adds.
const PAR_FLOPS: usize = 64 * 64 * 64;

/// The output pointer of a product, shared by the threads that write
/// disjoint blocks of it (see the SAFETY comment in `dot_gemm`).
#[derive(Clone, Copy)]
pub(crate) struct OutPtr<T>(pub(crate) *mut T);
// SAFETY: only used to hand disjoint output blocks to the pool's parts,
// which all finish before the buffer is read or freed.
unsafe impl<T> Send for OutPtr<T> {}
unsafe impl<T> Sync for OutPtr<T> {}

impl<T> OutPtr<T> {
    /// The pointer (a method, so that closures capture the `Sync` wrapper
    /// rather than its field).
    pub(crate) fn get(self) -> *mut T {
        self.0
    }
}

/// Keeps `gemm`'s packing buffers out of `mmap`.
///
/// `gemm` allocates its packing buffers (hundreds of KiB) on every call.
/// glibc serves blocks that large with a fresh `mmap` and returns them with
/// `munmap`, and trims the heap's free top back to the kernel: every product
/// then pays page faults and TLB shootdowns, measured at a quarter of the
/// time of a 200x200 Hessian. Raising the mmap and trim thresholds once (to
/// 64 MiB and 256 MiB) lets freed buffers be reused from the heap.
pub(crate) fn keep_gemm_buffers_mapped() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            extern "C" {
                fn mallopt(param: std::ffi::c_int, value: std::ffi::c_int) -> std::ffi::c_int;
            }
            const M_TRIM_THRESHOLD: std::ffi::c_int = -1;
            const M_MMAP_THRESHOLD: std::ffi::c_int = -3;
            // SAFETY: `mallopt` is glibc's documented, thread-safe tuning
            // call; it only changes thresholds (a failure leaves them as
            // they were, which is harmless).
            unsafe {
                mallopt(M_MMAP_THRESHOLD, 64 << 20);
                mallopt(M_TRIM_THRESHOLD, 256 << 20);
            }
        });
    }
}

/// Starts, once per process, a thread that pays the product libraries'
/// first-use costs in the background: `gemm`'s and faer's cache-size probes
/// (each walks sysfs: about 0.7 ms here; faer's first product cost 1.2-1.5
/// ms against 22 us after). A process's first products otherwise pay them
/// on the caller's thread. `rune::jit` calls this, so the probes overlap
/// the first call's tracing and program loading: the first call of the
/// jitted MLP step (784-512-512-10, batch 128) in a fresh process with a warm persistent cache, 30
/// alternating processes each, min 8.5 -> 7.8 ms, median 13.5 -> 10.6 ms.
/// (Also lowering the thread's priority measured no better.)
pub(crate) fn warm_up_in_background() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let spawned = std::thread::Builder::new()
            .name("nx-warm-up".into())
            .spawn(|| {
                keep_gemm_buffers_mapped();
                const N: usize = 64;
                let a = vec![0f32; N * N];
                let mut c = vec![0f32; N * N];
                let (l, d, ld) = (a.as_ptr(), c.as_mut_ptr(), N as isize);
                // A row-major rhs goes to gemm, a column-major one to faer.
                for rhs_strides in [(ld, 1), (1, ld)] {
                    // SAFETY: `a` and `c` hold N x N elements, both stride
                    // pairs stay inside them, and `c` is this thread's alone.
                    unsafe { product_block::<f32>(N, N, N, d, ld, l, (ld, 1), l, rhs_strides) };
                }
            });
        // Without the thread, the first product pays the costs itself.
        drop(spawned);
    });
}

/// Flushes subnormal floats to zero while it lives (x86-64: the MXCSR's
/// flush-to-zero and denormals-are-zero bits), restoring the caller's mode
/// on drop.
///
/// Why: a product fed subnormal values runs up to 30x slower on x86 (every
/// multiply-add with one takes a microcode assist). Gradients that decay
/// through a long recurrence reach that range: the backward pass of a
/// 1000-step RNN spent three quarters of its time in such products. XLA's
/// CPU backend runs every computation with both bits set; nx sets them only
/// around the `gemm` kernels, so products treat subnormal inputs as zero and
/// round subnormal results to zero, while elementwise operations keep them.
pub(crate) struct FlushSubnormals {
    #[cfg(target_arch = "x86_64")]
    saved: u32,
}

impl FlushSubnormals {
    /// MXCSR bit 15 (flush to zero) and bit 6 (denormals are zero).
    #[cfg(target_arch = "x86_64")]
    const BITS: u32 = 0x8040;

    pub(crate) fn new() -> FlushSubnormals {
        #[cfg(target_arch = "x86_64")]
        {
            let mut saved: u32 = 0;
            // SAFETY: `stmxcsr`/`ldmxcsr` read and write this thread's SSE
            // control register (present on every x86-64 CPU) through a
            // valid u32; only the two bits above change, and the guard is a
            // local of the one closure that runs `gemm`, dropped on the
            // thread that made it, which restores the saved value.
            unsafe {
                std::arch::asm!("stmxcsr [{}]", in(reg) &mut saved, options(nostack));
                let flushed = saved | Self::BITS;
                std::arch::asm!("ldmxcsr [{}]", in(reg) &flushed, options(nostack, readonly));
            }
            FlushSubnormals { saved }
        }
        #[cfg(not(target_arch = "x86_64"))]
        FlushSubnormals {}
    }
}

impl Drop for FlushSubnormals {
    fn drop(&mut self) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: restores the value `new` read on this thread.
        unsafe {
            std::arch::asm!("ldmxcsr [{}]", in(reg) &self.saved, options(nostack, readonly));
        }
    }
}

/// Work to run on each block of a product's output once the block is
/// computed: called with the output's first element and a block of rows and
/// columns of the output seen as a `[batch * M, N]` row-major matrix. Every
/// element is in exactly one block; blocks may run concurrently (on
/// disjoint elements). A product split into bands of rows (or one product
/// per task) runs it on each band right after computing it, on the same
/// thread, while the band is in cache; one split into bands of columns, or
/// computed in one piece, runs it afterwards over bands of whole rows
/// across the pool. It runs outside the subnormal-flushing mode of the
/// product itself.
pub type Epilogue<'a> = &'a (dyn Fn(*mut u8, Range<usize>, Range<usize>) + Sync);

/// Runs `epi` over a whole `rows x cols` output, in row bands across the
/// pool when it is large (a product computed in one piece, or by a path
/// that does not split into blocks).
fn epilogue_whole(epi: Epilogue<'_>, base: *mut u8, rows: usize, cols: usize) {
    let parts = if rows * cols >= pool::PAR_MIN {
        pool::threads().min(rows)
    } else {
        1
    };
    let base = OutPtr(base);
    if parts <= 1 {
        epi(base.get(), 0..rows, 0..cols);
    } else {
        pool::for_each(parts, &|p| epi(base.get(), band(rows, parts, p), 0..cols));
    }
}

/// Band `p` of `parts` near-equal bands of `0..len`.
fn band(len: usize, parts: usize, p: usize) -> Range<usize> {
    len * p / parts..len * (p + 1) / parts
}

/// One logical axis of an operand: its size and its stride in elements.
#[doc(hidden)] // public for nx's tests only (`nx::raw::internals`)
#[derive(Clone, Copy, Debug)]
pub struct Ax {
    /// The size.
    pub n: usize,
    /// The stride, in elements.
    pub s: isize,
}

/// Merges `axes` (outermost first) into a single `(size, stride)` when their
/// strides chain; size-1 axes do not matter. No axes (or only size-1 ones)
/// merge into a single row of stride 0 (`crate::layout::merge_to_one`).
#[doc(hidden)] // public for nx's tests only (`nx::raw::internals`)
pub fn merge(axes: &[Ax]) -> Option<(usize, isize)> {
    crate::layout::merge_pairs_to_one(axes.iter().map(|a| (a.n, a.s)))
}

/// One operand as a batch of matrices: `axes` lists its batch axes, then
/// the axes merged into rows, then those merged into columns.
#[doc(hidden)] // public for nx's tests only (`nx::raw::internals`)
#[derive(Debug)]
pub struct Side {
    axes: Vec<Ax>,
    nb: usize,
    nr: usize,
    offset: usize,
    /// The row or column axes do not merge: copy to `[batch, rows, cols]` first.
    pub copy: bool,
}

impl Side {
    fn rows(&self) -> &[Ax] {
        &self.axes[self.nb..self.nb + self.nr]
    }
    fn cols(&self) -> &[Ax] {
        &self.axes[self.nb + self.nr..]
    }
    fn mergeable(&self) -> bool {
        merge(self.rows()).is_some() && merge(self.cols()).is_some()
    }
}

/// How to run one dot_general.
#[doc(hidden)] // public for nx's tests only (`nx::raw::internals`)
#[derive(Debug)]
pub struct Plan {
    batch: Vec<usize>,
    /// The rows of the product (its lhs free dims).
    pub m: usize,
    /// The columns (the rhs free dims).
    pub n: usize,
    /// The contracted length.
    pub k: usize,
    /// The lhs as a batch of `m x k` matrices.
    pub lhs: Side,
    /// The rhs as a batch of `k x n` matrices.
    pub rhs: Side,
}

/// The [`Plan`] of a dot_general of operands laid out as `l` and `r`.
#[doc(hidden)] // public for nx's tests only (`nx::raw::internals`)
pub fn plan(
    l: &Layout,
    r: &Layout,
    lhs_batch: &[usize],
    rhs_batch: &[usize],
    lhs_contract: &[usize],
    rhs_contract: &[usize],
) -> Plan {
    let ax = |lay: &Layout, a: usize| Ax {
        n: lay.shape[a],
        s: lay.strides[a],
    };
    let free = |lay: &Layout, b: &[usize], c: &[usize]| -> Vec<usize> {
        (0..lay.shape.len())
            .filter(|a| !b.contains(a) && !c.contains(a))
            .collect()
    };
    let (lfree, rfree) = (
        free(l, lhs_batch, lhs_contract),
        free(r, rhs_batch, rhs_contract),
    );
    let batch: Vec<Ax> = lhs_batch.iter().map(|&a| ax(l, a)).collect();
    let rbatch: Vec<Ax> = rhs_batch.iter().map(|&a| ax(r, a)).collect();
    let mrows: Vec<Ax> = lfree.iter().map(|&a| ax(l, a)).collect();
    let ncols: Vec<Ax> = rfree.iter().map(|&a| ax(r, a)).collect();

    // The order in which the contracting pairs are summed is free: try the
    // given one and the ones that sort either side's strides outermost
    // first, and keep the order that needs the fewest copies.
    let nk = lhs_contract.len();
    let identity: Vec<usize> = (0..nk).collect();
    let by = |c: &[usize], lay: &Layout| {
        let mut o = identity.clone();
        o.sort_by_key(|&j| std::cmp::Reverse(lay.strides[c[j]].unsigned_abs()));
        o
    };
    let mut orders = vec![identity.clone()];
    for o in [by(lhs_contract, l), by(rhs_contract, r)] {
        // Often all the same (always with one contracting pair): each
        // distinct order is tried once (planning is a step's overhead).
        if !orders.contains(&o) {
            orders.push(o);
        }
    }
    let side = |b: &[Ax], rows: &[Ax], cols: &[Ax], lay: &Layout| {
        let mut axes = b.to_vec();
        axes.extend_from_slice(rows);
        axes.extend_from_slice(cols);
        let mut s = Side {
            axes,
            nb: b.len(),
            nr: rows.len(),
            offset: lay.offset,
            copy: false,
        };
        s.copy = !s.mergeable();
        s
    };
    let candidates = orders.iter().map(|o| {
        let lk: Vec<Ax> = o.iter().map(|&j| ax(l, lhs_contract[j])).collect();
        let rk: Vec<Ax> = o.iter().map(|&j| ax(r, rhs_contract[j])).collect();
        let lhs = side(&batch, &mrows, &lk, l);
        let rhs = side(&rbatch, &rk, &ncols, r);
        (lhs.copy as usize + rhs.copy as usize, lhs, rhs)
    });
    let (_, lhs, rhs) = candidates.min_by_key(|c| c.0).unwrap();
    Plan {
        batch: batch.iter().map(|a| a.n).collect(),
        m: mrows.iter().map(|a| a.n).product(),
        n: ncols.iter().map(|a| a.n).product(),
        k: lhs.cols().iter().map(|a| a.n).product(),
        lhs,
        rhs,
    }
}

/// The elements at `axes` (row-major over them) from `offset`, converted by
/// `f`; split over the pool by rows when there are `PAR_MIN` or more (a
/// transformer block's backward gathers two [8, 128, 256] operands per step
/// whose rows do not merge: run on one thread they left the other idle for
/// a tenth of the step).
fn gather_axes<T: Element, U: Copy + Default + Send + Sync>(
    data: &[T],
    offset: usize,
    axes: &[Ax],
    f: impl Fn(T) -> U + Sync,
) -> Vec<U> {
    let shape: Vec<usize> = axes.iter().map(|a| a.n).collect();
    let strides: Vec<isize> = axes.iter().map(|a| a.s).collect();
    let total = numel(&shape);
    if total == 0 {
        return Vec::new();
    }
    let walk = Walk::new(&shape, [&strides], [offset]);
    let len = walk.row_len();
    let [s] = walk.row_strides();
    let fill = |r0: usize, out: &mut [U]| {
        let mut w = 0;
        walk.for_rows(r0, r0 + out.len() / len, |_, [o]| {
            for i in 0..len {
                out[w] = f(data[(o + i as isize * s) as usize]);
                w += 1;
            }
        });
    };
    let mut out = vec![U::default(); total];
    if total < pool::PAR_MIN {
        fill(0, &mut out);
    } else {
        let rows_per_part = (pool::PAR_CHUNK / len).max(1);
        pool::chunks_mut(&mut out, rows_per_part * len, &|i, part| {
            fill(i * rows_per_part, part)
        });
    }
    out
}

/// Where one side's matrices are: the storage index of each batch's element
/// `[0, 0]`, and the row and column strides.
struct View {
    batch_offsets: Vec<usize>,
    rs: isize,
    cs: isize,
}

/// Storage index of element `[0, 0]` of every batch, in row-major batch order.
fn batch_offsets(batch: &[Ax], offset: usize) -> Vec<usize> {
    let shape: Vec<usize> = batch.iter().map(|a| a.n).collect();
    let mut out = Vec::with_capacity(numel(&shape));
    let mut idx = vec![0usize; shape.len()];
    let mut off = offset as isize;
    for _ in 0..numel(&shape) {
        out.push(off as usize);
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            off += batch[d].s;
            if idx[d] < shape[d] {
                break;
            }
            off -= batch[d].s * shape[d] as isize;
            idx[d] = 0;
        }
    }
    out
}

impl Side {
    /// The view of this side over its storage (when `copy` is false) or over
    /// the contiguous `[batch, rows, cols]` copy made by `gather_axes` (when true).
    fn view(&self) -> View {
        let b = &self.axes[..self.nb];
        if self.copy {
            let (r, c) = (
                self.rows().iter().map(|a| a.n).product::<usize>(),
                self.cols().iter().map(|a| a.n).product::<usize>(),
            );
            let shape: Vec<usize> = b.iter().map(|a| a.n).collect();
            let strides = crate::shape::contiguous_strides(&shape);
            let cb: Vec<Ax> = shape
                .iter()
                .zip(&strides)
                .map(|(&n, &s)| Ax {
                    n,
                    s: s * (r * c) as isize,
                })
                .collect();
            View {
                batch_offsets: batch_offsets(&cb, 0),
                rs: c as isize,
                cs: 1,
            }
        } else {
            let (_, rs) = merge(self.rows()).expect("rows merge when no copy is planned");
            let (_, cs) = merge(self.cols()).expect("columns merge when no copy is planned");
            View {
                batch_offsets: batch_offsets(b, self.offset),
                rs,
                cs,
            }
        }
    }
}

/// [`product_block`]'s signature (and [`faer_block`]'s).
type BlockFn<T> = unsafe fn(
    usize,
    usize,
    usize,
    *mut T,
    isize,
    *const T,
    (isize, isize),
    *const T,
    (isize, isize),
);

/// An element type `gemm` multiplies natively.
#[doc(hidden)] // public for nx's tests only (`nx::raw::internals`)
pub trait GemmElem: Element {
    /// faer's matmul for this type, where [`product_block`] uses it.
    const FAER: Option<BlockFn<Self>> = None;
    /// The loop for tiny products ([`tiny_block`]), where it exists.
    const TINY: Option<BlockFn<Self>> = None;
}
impl GemmElem for f32 {
    const FAER: Option<BlockFn<f32>> = Some(faer_block::<f32>);
    const TINY: Option<BlockFn<f32>> = Some(tiny_block::<f32>);
}
impl GemmElem for f64 {
    const FAER: Option<BlockFn<f64>> = Some(faer_block::<f64>);
    const TINY: Option<BlockFn<f64>> = Some(tiny_block::<f64>);
}
impl GemmElem for f16 {}
// `gemm::c32`/`c64` are `num_complex`'s `Complex<f32>`/`<f64>` themselves
// (one num-complex in the lock file), so complex products need no
// conversion; the conjugation flags stay off (a plain product, as JAX's).
impl GemmElem for crate::Complex<f32> {}
impl GemmElem for crate::Complex<f64> {}

/// `dst = lhs @ rhs` for one `m x n` block (`dst` row-major with row
/// stride `dst_rs`; each operand given by its (row, column) strides), on
/// the calling thread.
///
/// A column-major rhs (`rhs_strides.0 == 1`: reverse mode's `g @ W^T`, read
/// through a transposed view) goes to faer's matmul for f32 and f64: `gemm`
/// 0.19 packs such an rhs at half speed (an MLP step's `g @ W^T`,
/// 128x512x512 on one thread: 500 us against faer's 330 us; a scan RNN's
/// 32x128x128 `dz @ W^T`: 9.6 vs 6.0 us; `examples/bench_gemm_split.rs`).
/// So does every block of [`FAER_BLOCKS`] multiply-adds, whatever the
/// layouts: one band of the MLP step's products (the forward `x @ W`, the
/// weight gradients' `x^T @ g`) ran 0-6% faster through faer alone
/// (`bench_gemm_split`), and the jitted MLP step
/// 4-5% faster at the 10th percentile and median with every one of its
/// products there (the two rules alternating call by call in one process;
/// the column-major lhs alone: 1.5-2%). Everything else goes to `gemm`.
///
/// # Safety
/// Every `lhs + i*rs + j*cs` (`i < m`, `j < k`) and `rhs + i*rs + j*cs`
/// (`i < k`, `j < n`) is an element of a live buffer, every `dst + i*dst_rs
/// + j` (`i < m`, `j < n`) one of a buffer no one else reads or writes
/// meanwhile, and `m, n, k > 0`; `T` is f32, f64, f16, c32 or c64.
#[doc(hidden)] // public for nx's tests only (`nx::raw::internals`)
#[allow(clippy::too_many_arguments)]
pub unsafe fn product_block<T: GemmElem>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut T,
    dst_rs: isize,
    lhs: *const T,
    (lrs, lcs): (isize, isize),
    rhs: *const T,
    (rrs, rcs): (isize, isize),
) {
    let rhs_col_major = rrs == 1 && rcs != 1 && n > 1;
    let to_faer = rhs_col_major || FAER_BLOCKS.contains(&(m * n * k));
    // SAFETY (all three calls): the caller's contract, read as each
    // library's (pointer, sizes, strides) views.
    match (T::TINY, T::FAER) {
        (Some(tiny), _) if m * n * k <= TINY_FLOPS => {
            tiny(m, n, k, dst, dst_rs, lhs, (lrs, lcs), rhs, (rrs, rcs))
        }
        (_, Some(faer)) if to_faer => faer(m, n, k, dst, dst_rs, lhs, (lrs, lcs), rhs, (rrs, rcs)),
        _ => gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            dst_rs,
            false,
            lhs,
            lcs,
            lrs,
            rhs,
            rcs,
            rrs,
            T::from_f64(0.0),
            T::from_f64(1.0),
            false,
            false,
            false,
            Parallelism::None,
        ),
    }
}

/// The sizes (multiply-adds of one block) that go to faer whatever the
/// layouts (see [`product_block`]): below, `gemm` is even or ahead (a scan
/// RNN's 64x128x32 bands of `h^T @ dz`: 3.1-3.3 against 3.8-4.0 us), and above
/// too (squares of 1024 and 2048 in two bands: 5% ahead).
#[doc(hidden)] // public for nx's tests only (`nx::raw::internals`)
pub const FAER_BLOCKS: std::ops::Range<usize> = (1 << 20)..(1 << 27);

/// Products of at most this many multiply-adds go to [`tiny_block`]:
/// `gemm`'s fixed cost per call (packing, dispatch) is most of a tiny
/// product's time. One thread, a batch of products (eager `matmul`,
/// 2-vCPU AMD EPYC; rune's `bench_small_products` times it under jit and
/// vmap beside jax.jit): 1024 of 8x8: 290-350 us
/// through `gemm`, 125 us here; 2048 of 4x4: 610 -> 277 us; but 256 of
/// 16x16: 72-94 us through `gemm`, 153 us here (its microkernel blocks
/// rows and fuses multiply-adds), so the line is at 8x8x8.
const TINY_FLOPS: usize = 8 * 8 * 8;

/// [`product_block`] as plain loops (same contract), for f32 and f64:
/// each output row is the sum over `p` of `lhs[i, p] * rhs[p, ..]`, added
/// in order of `p` (a multiply, then an add: no fused multiply-add), the
/// rows vectorized for the machine's level.
#[allow(clippy::too_many_arguments)]
unsafe fn tiny_block<F>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut F,
    dst_rs: isize,
    lhs: *const F,
    (lrs, lcs): (isize, isize),
    rhs: *const F,
    (rrs, rcs): (isize, isize),
) where
    F: Element + std::ops::Mul<Output = F> + std::ops::Add<Output = F>,
{
    /// The loops, a [`Kernel`] so that they vectorize for the level.
    struct Tiny<F> {
        m: usize,
        n: usize,
        k: usize,
        dst: *mut F,
        dst_rs: isize,
        lhs: *const F,
        l: (isize, isize),
        rhs: *const F,
        r: (isize, isize),
    }
    impl<F: Element + std::ops::Mul<Output = F> + std::ops::Add<Output = F>> Kernel for Tiny<F> {
        type Output = ();
        #[inline(always)]
        fn run<const FMA: bool>(self) {
            let Tiny {
                m,
                n,
                k,
                dst,
                dst_rs,
                lhs,
                l,
                rhs,
                r,
            } = self;
            // Eight columns at a time, summed in a fixed-size array that
            // stays in registers (a row accumulated in memory stalled on
            // every store: 4x slower).
            const W: usize = 8;
            for i in 0..m {
                for j0 in (0..n).step_by(W) {
                    let w = W.min(n - j0);
                    // Sums start from -0, the exact identity of addition
                    // (+0 would turn a sum of -0 products into +0): the
                    // GEMM's results, zeros' signs included.
                    let mut acc = [F::from_f64(-0.0); W];
                    for p in 0..k {
                        // SAFETY: `i < m`, `p < k`, `j0 + t < n`: elements
                        // of the operands by `tiny_block`'s contract.
                        let a = unsafe { *lhs.offset(i as isize * l.0 + p as isize * l.1) };
                        let b = |t: usize| unsafe {
                            *rhs.offset(p as isize * r.0 + (j0 + t) as isize * r.1)
                        };
                        if w == W && r.1 == 1 {
                            // SAFETY: the `W` contiguous elements `[p, j0..]`.
                            let row = unsafe {
                                &*(rhs.offset(p as isize * r.0 + j0 as isize) as *const [F; W])
                            };
                            for (o, &v) in acc.iter_mut().zip(row) {
                                *o = *o + a * v;
                            }
                        } else {
                            for (t, o) in acc[..w].iter_mut().enumerate() {
                                *o = *o + a * b(t);
                            }
                        }
                    }
                    for (t, &v) in acc[..w].iter().enumerate() {
                        // SAFETY: element `[i, j0 + t]` of the output, which
                        // no one else touches (the contract).
                        unsafe { *dst.offset(i as isize * dst_rs + (j0 + t) as isize) = v };
                    }
                }
            }
        }
    }
    dispatch::run(Tiny {
        m,
        n,
        k,
        dst,
        dst_rs,
        lhs,
        l: (lrs, lcs),
        rhs,
        r: (rrs, rcs),
    })
}

/// [`product_block`] through faer (same contract), one-threaded; f32 and
/// f64 only (the [`GemmElem::FAER`] of those two).
#[allow(clippy::too_many_arguments)]
unsafe fn faer_block<F: faer::traits::ComplexField + num_traits::One>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut F,
    dst_rs: isize,
    lhs: *const F,
    (lrs, lcs): (isize, isize),
    rhs: *const F,
    (rrs, rcs): (isize, isize),
) {
    // SAFETY: the caller's contract, which is `faer_matmul`'s.
    unsafe {
        faer_matmul(
            (m, n, k),
            dst,
            dst_rs,
            false,
            lhs,
            (lrs, lcs),
            rhs,
            (rrs, rcs),
        )
    }
}

/// `dst = lhs @ rhs`, or `dst += lhs @ rhs` when `accumulate`, through
/// faer, one-threaded (also the convolution's product of a column-major
/// im2col chunk).
///
/// # Safety
/// As [`product_block`]: every element the strides address is live,
/// `dst`'s `m x n` (row stride `dst_rs`, column stride 1) is read and
/// written by no one else meanwhile, and `m, n, k > 0`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn faer_matmul<F: faer::traits::ComplexField + num_traits::One>(
    (m, n, k): (usize, usize, usize),
    dst: *mut F,
    dst_rs: isize,
    accumulate: bool,
    lhs: *const F,
    (lrs, lcs): (isize, isize),
    rhs: *const F,
    (rrs, rcs): (isize, isize),
) {
    // SAFETY: the caller's contract, read as faer's (pointer, sizes,
    // strides) views.
    let (l, r, d) = unsafe {
        (
            faer::MatRef::<F>::from_raw_parts(lhs, m, k, lrs, lcs),
            faer::MatRef::<F>::from_raw_parts(rhs, k, n, rrs, rcs),
            faer::MatMut::<F>::from_raw_parts_mut(dst, m, n, dst_rs, 1),
        )
    };
    let accum = if accumulate {
        faer::Accum::Add
    } else {
        faer::Accum::Replace
    };
    faer::linalg::matmul::matmul(d, accum, l, r, F::one(), faer::Par::Seq);
}

/// The product's shape: the batch dims, the lhs free dims, the rhs free dims.
fn out_shape(p: &Plan) -> Vec<usize> {
    let mut out_shape = p.batch.clone();
    out_shape.extend(p.lhs.rows().iter().map(|a| a.n));
    out_shape.extend(p.rhs.cols().iter().map(|a| a.n));
    out_shape
}

fn dot_gemm<T: GemmElem>(lhs: &Value, rhs: &Value, p: &Plan, epi: Option<Epilogue<'_>>) -> Tensor {
    let total = numel(&p.batch) * p.m * p.n;
    let mut storage = Storage::new(T::DTYPE, total);
    let out = &mut storage.as_mut_slice::<T>()[..total];
    // SAFETY: `out` is a fresh buffer of the product's `total` elements.
    unsafe { gemm_to(lhs, rhs, p, epi, out.as_mut_ptr()) };
    Tensor::from_storage(T::DTYPE, &out_shape(p), storage)
}

/// [`dot_gemm`] writing the product, row-major, at `dst`.
///
/// # Safety
/// `dst` addresses the product's `batch * m * n` elements of `T`, which no
/// one else reads or writes meanwhile, and which do not overlap the
/// operands' storage.
unsafe fn gemm_to<T: GemmElem>(
    lhs: &Value,
    rhs: &Value,
    p: &Plan,
    epi: Option<Epilogue<'_>>,
    dst: *mut T,
) {
    keep_gemm_buffers_mapped();
    let (m, n, k) = (p.m, p.n, p.k);
    let nbatch = numel(&p.batch);
    let total = nbatch * m * n;
    {
        if k == 0 {
            for i in 0..total {
                // SAFETY: `i < total`, within `dst`'s elements (the contract).
                unsafe { dst.add(i).write(T::from_f64(0.0)) };
            }
        }
        let base = OutPtr(dst);
        if k == 0 {
            if let (Some(epi), true) = (epi, total > 0) {
                epilogue_whole(epi, base.get() as *mut u8, nbatch * m, n);
            }
        } else if total > 0 {
            let lg = lhs.storage.read::<T>();
            let rg = rhs.storage.read::<T>();
            let lcopy = p
                .lhs
                .copy
                .then(|| gather_axes(&lg, p.lhs.offset, &p.lhs.axes, |v| v));
            let rcopy = p
                .rhs
                .copy
                .then(|| gather_axes(&rg, p.rhs.offset, &p.rhs.axes, |v| v));
            let ldata: &[T] = lcopy.as_deref().unwrap_or(&lg);
            let rdata: &[T] = rcopy.as_deref().unwrap_or(&rg);
            let (lv, rv) = (p.lhs.view(), p.rhs.view());
            let flops = m * n * k;
            // One block of one batch's product: rows `r` and columns `c` of
            // `C = A @ B`, written through `dst`, that batch's `m x n`
            // row-major output.
            let gemm_block =
                |b: usize, dst: OutPtr<T>, r: Range<usize>, c: Range<usize>, then: bool| {
                    let (lo, ro) = (lv.batch_offsets[b], rv.batch_offsets[b]);
                    // SAFETY: `r` and `c` are non-empty sub-ranges of `0..m` and
                    // `0..n`, and `k > 0`. `gemm` reads the lhs at `lo + i*rs +
                    // j*cs` for `i` in `r`, `j < k`: `lo` is the storage index of
                    // this batch's element [0, 0] and the merged strides reproduce
                    // exactly the indices `offset + sum(idx * stride)` of the
                    // operand's (valid) layout over `ldata`, or of the contiguous
                    // copy, so every address is an element of `ldata` (the
                    // pointer offset `r.start * rs` stays inside it too); likewise
                    // the rhs for `j < k`, columns in `c`, over `rdata`. It writes
                    // `dst + i*n + j` for `i` in `r`, `j` in `c`: inside the
                    // batch's `m * n` output, and callers give concurrent blocks
                    // disjoint rows or columns, so no element is written twice.
                    // Reads and writes do not overlap (`gemm_to`'s contract).
                    let flush = FlushSubnormals::new();
                    unsafe {
                        product_block(
                            r.len(),
                            c.len(),
                            k,
                            dst.0.add(r.start * n + c.start),
                            n as isize,
                            ldata.as_ptr().add(lo).offset(r.start as isize * lv.rs),
                            (lv.rs, lv.cs),
                            rdata.as_ptr().add(ro).offset(c.start as isize * rv.cs),
                            (rv.rs, rv.cs),
                        )
                    }
                    drop(flush);
                    if let (Some(epi), true) = (epi, then) {
                        let row0 = b * m;
                        epi(base.get() as *mut u8, row0 + r.start..row0 + r.end, c);
                    }
                };
            // Every output pointer derives from `base`: batch `b`'s matrix
            // starts at `base + b * m * n`.
            let at = |b: usize| OutPtr(base.get().wrapping_add(b * m * n));
            let block = |b, r, c| gemm_block(b, at(b), r, c, true);
            let threads = pool::threads();
            let parts = threads.min(m.max(n) / SPLIT_MIN);
            if nbatch >= threads && nbatch * flops >= SPLIT_FLOPS {
                // Enough products for every thread: a run of whole
                // products per task, four runs per thread (a task per
                // product made 1024 products of 8x8 contend for the
                // counter of claimed tasks).
                let per = nbatch.div_ceil(threads * 4);
                pool::for_each(nbatch.div_ceil(per), &|t| {
                    for b in t * per..((t + 1) * per).min(nbatch) {
                        block(b, 0..m, 0..n)
                    }
                });
            } else if flops >= SPLIT_FLOPS && parts > 1 {
                // A large product: each thread computes a band of the larger
                // of rows and columns with a one-threaded `gemm`. On few
                // cores this beats `gemm`'s own splitting (measured with
                // examples/bench_matmul.rs), chiefly for transposed operands.
                for b in 0..nbatch {
                    if m >= n {
                        pool::for_each(parts, &|p| block(b, band(m, parts, p), 0..n));
                    } else {
                        // Bands of columns: the epilogue runs after the
                        // product, one band of whole rows per thread (run on
                        // each column band right after it, an MLP layer
                        // (512 wide, batch 128) with bias and relu measured
                        // 2-5% slower).
                        pool::for_each(parts, &|p| {
                            gemm_block(b, at(b), 0..m, band(n, parts, p), false)
                        });
                        if let Some(epi) = epi {
                            let r0 = b * m;
                            pool::for_each(parts, &|p| {
                                let r = band(m, parts, p);
                                epi(base.get() as *mut u8, r0 + r.start..r0 + r.end, 0..n)
                            });
                        }
                    }
                }
            } else if let (Some(epi), true) = (epi, nbatch * m * n >= 1 << 16) {
                // One thread computes the product; the epilogue over a
                // large output still splits.
                for b in 0..nbatch {
                    gemm_block(b, at(b), 0..m, 0..n, false);
                }
                epilogue_whole(epi, base.get() as *mut u8, nbatch * m, n);
            } else {
                for b in 0..nbatch {
                    block(b, 0..m, 0..n);
                }
            }
        }
    }
}

/// Integer (and bool) products: wrapping `i64` accumulation, converted back
/// with wrapping (bool: non-zero is true, so a sum of ands is an or of ands).
fn dot_int<T: Element>(lhs: &Value, rhs: &Value, p: &Plan) -> Tensor {
    let (m, n, k) = (p.m, p.n, p.k);
    let nbatch = numel(&p.batch);
    let total = nbatch * m * n;
    let mut storage = Storage::new(T::DTYPE, total);
    {
        let out = &mut storage.as_mut_slice::<T>()[..total];
        if total > 0 {
            let to64 = |v: T| v.to_i128() as i64;
            // Contiguous [batch, m, k] and [batch, k, n] copies in i64.
            let l = gather_axes(&lhs.storage.read::<T>(), p.lhs.offset, &p.lhs.axes, to64);
            let r = gather_axes(&rhs.storage.read::<T>(), p.rhs.offset, &p.rhs.axes, to64);
            let row = |ri: usize, o: &mut [T]| {
                let (b, i) = (ri / m, ri % m);
                let mut acc = vec![0i64; n];
                let lrow = &l[(b * m + i) * k..(b * m + i + 1) * k];
                for (kk, &a) in lrow.iter().enumerate() {
                    let rrow = &r[(b * k + kk) * n..(b * k + kk + 1) * n];
                    for (c, &v) in acc.iter_mut().zip(rrow) {
                        *c = c.wrapping_add(a.wrapping_mul(v));
                    }
                }
                for (o, &c) in o.iter_mut().zip(&acc) {
                    *o = T::from_i128(c as i128);
                }
            };
            if total * k.max(1) >= PAR_FLOPS {
                pool::chunks_mut(out, n, &|ri, o| row(ri, o));
            } else {
                for (ri, o) in out.chunks_mut(n).enumerate() {
                    row(ri, o);
                }
            }
        }
    }
    Tensor::from_storage(T::DTYPE, &out_shape(p), storage)
}

/// [`dot_general`] (no epilogue) writing the product, row-major, at `dst`:
/// floating-point products straight from the GEMM, others (integers, bool,
/// bf16, which go through a conversion) computed, then copied.
///
/// # Safety
/// `dst` addresses the product's elements (of the operands' dtype), which
/// no one else reads or writes meanwhile, and which do not overlap the
/// operands' storage.
pub(crate) unsafe fn dot_general_to(
    lhs: &Value,
    rhs: &Value,
    lhs_batch: &[usize],
    rhs_batch: &[usize],
    lhs_contract: &[usize],
    rhs_contract: &[usize],
    dst: *mut u8,
) {
    let p = plan(
        &lhs.layout,
        &rhs.layout,
        lhs_batch,
        rhs_batch,
        lhs_contract,
        rhs_contract,
    );
    // SAFETY (each arm): the caller's contract, `dst` read as the dtype's
    // elements.
    unsafe {
        match lhs.dtype {
            DType::F32 => gemm_to::<f32>(lhs, rhs, &p, None, dst.cast()),
            DType::F64 => gemm_to::<f64>(lhs, rhs, &p, None, dst.cast()),
            DType::F16 => gemm_to::<f16>(lhs, rhs, &p, None, dst.cast()),
            DType::C64 => gemm_to::<crate::Complex<f32>>(lhs, rhs, &p, None, dst.cast()),
            DType::C128 => gemm_to::<crate::Complex<f64>>(lhs, rhs, &p, None, dst.cast()),
            _ => {
                let out = dot_general(
                    lhs,
                    rhs,
                    lhs_batch,
                    rhs_batch,
                    lhs_contract,
                    rhs_contract,
                    None,
                );
                let bytes = out.numel() * out.dtype().size_in_bytes();
                let g = out.value().storage.read::<u8>();
                std::ptr::copy_nonoverlapping(g.as_ptr(), dst, bytes);
            }
        }
    }
}

pub(crate) fn dot_general(
    lhs: &Value,
    rhs: &Value,
    lhs_batch: &[usize],
    rhs_batch: &[usize],
    lhs_contract: &[usize],
    rhs_contract: &[usize],
    epi: Option<Epilogue<'_>>,
) -> Tensor {
    let p = plan(
        &lhs.layout,
        &rhs.layout,
        lhs_batch,
        rhs_batch,
        lhs_contract,
        rhs_contract,
    );
    // Paths that compute the product in one piece run the epilogue after.
    let whole = |out: Tensor| {
        if let Some(epi) = epi {
            let (rows, cols) = (numel(&p.batch) * p.m, p.n);
            if rows * cols > 0 {
                let mut g = out.value().storage.write::<u8>();
                epilogue_whole(epi, g.as_mut_ptr(), rows, cols);
            }
        }
        out
    };
    match lhs.dtype {
        DType::F32 => dot_gemm::<f32>(lhs, rhs, &p, epi),
        DType::F64 => dot_gemm::<f64>(lhs, rhs, &p, epi),
        DType::F16 => dot_gemm::<f16>(lhs, rhs, &p, epi),
        DType::C64 => dot_gemm::<crate::Complex<f32>>(lhs, rhs, &p, epi),
        DType::C128 => dot_gemm::<crate::Complex<f64>>(lhs, rhs, &p, epi),
        DType::BF16 => {
            // Converted to f32, multiplied, rounded back.
            let (l32, r32) = (cast(lhs, DType::F32), cast(rhs, DType::F32));
            let out = dot_general(
                l32.value(),
                r32.value(),
                lhs_batch,
                rhs_batch,
                lhs_contract,
                rhs_contract,
                None,
            );
            whole(cast(out.value(), DType::BF16))
        }
        d => whole(crate::with_dtype!(d, T => dot_int::<T>(lhs, rhs, &p))),
    }
}
