//! What a compiler's runtime needs from nx beyond `bind`: running an eager
//! kernel directly, fresh output buffers, raw pointers into a tensor's
//! storage for generated code, and the kernels' thread pool.
//!
//! tolk (the compiler) calls these; user code has no reason to. The pointers
//! of `read`/`write` are only valid while their guard lives, and the guards
//! are the storage's own read/write locks, so a compiled kernel never races
//! an `assign`. A [`Slab`] is the exception: a program's private buffer
//! whose pointer is handed out without a lock (its owner guarantees that no
//! other thread sees it).

use crate::dtype::DType;
use crate::prim::Prim;
use crate::storage::{ReadGuard, Storage, WriteGuard};
use crate::tensor::Tensor;
use std::sync::Arc;

/// Runs `prim`'s eager kernel on concrete inputs, bypassing the trace stack.
/// Panics on a traced input.
pub fn eval(prim: Prim, inputs: &[&Tensor]) -> Tensor {
    crate::cpu::eval(prim, inputs)
}

/// A fresh contiguous tensor of `shape`, contents unspecified (but
/// initialized): for outputs a kernel fills completely.
pub fn alloc(dtype: DType, shape: &[usize]) -> Tensor {
    Tensor::from_storage(
        dtype,
        shape,
        Storage::new(dtype, crate::shape::numel(shape)),
    )
}

/// Shared access to a concrete tensor's elements: `ptr()` is its first
/// element (its layout's offset applied), valid while this lives.
pub struct ReadView<'a> {
    _guard: ReadGuard<'a, u8>,
    ptr: *const u8,
}

impl ReadView<'_> {
    /// The address of the tensor's first element.
    pub fn ptr(&self) -> *const u8 {
        self.ptr
    }
}

/// Exclusive access to a concrete tensor's elements (see [`ReadView`]).
pub struct WriteView<'a> {
    _guard: WriteGuard<'a, u8>,
    ptr: *mut u8,
}

impl WriteView<'_> {
    /// The address of the tensor's first element.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }
}

/// Byte offset of `t`'s first element in its storage; 0 for an empty view
/// (whose offset may lie past the end).
fn byte_offset(t: &Tensor) -> usize {
    let v = t.value();
    if v.layout.numel() == 0 {
        0
    } else {
        v.layout.offset * v.dtype.size_in_bytes()
    }
}

/// Read access to `t` (concrete; panics on a tracer).
pub fn read(t: &Tensor) -> ReadView<'_> {
    let guard = t.value().storage.read::<u8>();
    let off = byte_offset(t);
    // `off` is within the storage: a non-empty layout's offset addresses one
    // of its elements.
    let ptr = guard[off..].as_ptr();
    ReadView { _guard: guard, ptr }
}

/// Write access to `t` (concrete; panics on a tracer). Taking it while a
/// `ReadView` of the same storage lives on this thread deadlocks.
pub fn write(t: &Tensor) -> WriteView<'_> {
    let mut guard = t.value().storage.write::<u8>();
    let off = byte_offset(t);
    let ptr = guard[off..].as_mut_ptr();
    WriteView { _guard: guard, ptr }
}

/// The first element of the integer tensor `t` (I32 or I64) out of
/// `[-len, len)` in row-major order, `None` when all are in range: the
/// index the eager gather over `t` would raise on first. A compiled gather
/// checks its indices with this before any kernel runs.
pub fn first_index_out_of_range(t: &Tensor, len: usize) -> Option<i64> {
    crate::cpu::index::first_out_of_range(t, len)
}

/// Starts, once per process, a background thread that pays the first-use
/// costs of the matrix-product libraries (their cache-size probes), so that
/// a first product (a jitted program's first call) does not. Returns at once;
/// later calls do nothing.
pub fn warm_up_in_background() {
    crate::cpu::dot::warm_up_in_background()
}

/// Runs `f(0) .. f(parts - 1)` on nx's thread pool (the caller runs parts
/// too); returns when all are done.
pub fn parallel_for(parts: usize, f: &(dyn Fn(usize) + Sync)) {
    crate::cpu::pool::for_each(parts, f)
}

/// A buffer that a compiled program keeps across calls (one slot of its
/// arena): tensors of any dtype and shape that fit are views of it, and
/// generated code writes it through [`Slab::ptr`] without taking its lock.
pub struct Slab {
    storage: Arc<Storage>,
}

impl Slab {
    /// A slab of `bytes` bytes (contents unspecified but initialized).
    pub fn new(bytes: usize) -> Slab {
        Slab {
            storage: Arc::new(Storage::new(DType::U8, bytes)),
        }
    }

    /// A contiguous `dtype` tensor of `shape` starting `byte_offset` bytes
    /// into the slab (a multiple of the dtype's size). Panics if it does
    /// not fit.
    pub fn view(&self, byte_offset: usize, dtype: DType, shape: &[usize]) -> Tensor {
        let size = dtype.size_in_bytes();
        let bytes = crate::shape::numel(shape) * size;
        assert!(
            byte_offset % size == 0 && byte_offset + bytes <= self.storage.len_bytes(),
            "nx::raw::Slab::view: {bytes} bytes at {byte_offset} do not fit in a slab of {}",
            self.storage.len_bytes()
        );
        let mut layout = crate::layout::Layout::contiguous(shape);
        layout.offset = byte_offset / size;
        Tensor::from_value(dtype, layout, self.storage.clone())
    }

    /// The slab's first byte. Reading or writing through it is sound only
    /// while no other thread accesses the slab or its views: the owner must
    /// keep them to itself.
    pub fn ptr(&self) -> *mut u8 {
        self.storage.as_ptr()
    }
}

/// Whether two concrete tensors are views of the same storage.
pub fn shares_storage(a: &Tensor, b: &Tensor) -> bool {
    Arc::ptr_eq(&a.value().storage, &b.value().storage)
}

/// Runs a `Prim::DotGeneral` like [`eval`], calling `epilogue` on each block
/// of the product's output as soon as it is computed, on the thread that
/// computed it (nx's internal `cpu::dot::Epilogue`): `epilogue(out, rows,
/// cols)` gets the output's first element and a block of rows and columns
/// of the output seen as a row-major `[R, N]` matrix, where `R` is the
/// product of the batch and lhs free dims and `N` that of the rhs free dims.
/// The product itself is computed exactly as by [`eval`]. The epilogue must
/// not lock the output's storage (it is not yet a tensor anyone else sees).
pub fn dot_general_then(
    prim: &Prim,
    inputs: &[&Tensor],
    epilogue: &(dyn Fn(*mut u8, std::ops::Range<usize>, std::ops::Range<usize>) + Sync),
) -> Tensor {
    let [lhs_batch, rhs_batch, lhs_contract, rhs_contract] =
        dot_dims(prim, "nx::raw::dot_general_then");
    crate::cpu::dot::dot_general(
        inputs[0].value(),
        inputs[1].value(),
        lhs_batch,
        rhs_batch,
        lhs_contract,
        rhs_contract,
        Some(epilogue),
    )
}

/// Runs a `Prim::DotGeneral` like [`eval`], writing the product, row-major,
/// at `dst` instead of into a fresh buffer: a compiled program's arena slot,
/// so that a steady-state call allocates nothing. The same bits as [`eval`].
///
/// # Safety
/// `dst` addresses the product's elements (its shape's count, of the
/// operands' dtype), which no one else reads or writes until this returns
/// and which do not overlap the operands' storage. Panics (before writing)
/// unless `prim` is a `DotGeneral`.
pub unsafe fn dot_general_to(prim: &Prim, inputs: &[&Tensor], dst: *mut u8) {
    let [lhs_batch, rhs_batch, lhs_contract, rhs_contract] =
        dot_dims(prim, "nx::raw::dot_general_to");
    // SAFETY: the caller's contract.
    unsafe {
        crate::cpu::dot::dot_general_to(
            inputs[0].value(),
            inputs[1].value(),
            lhs_batch,
            rhs_batch,
            lhs_contract,
            rhs_contract,
            dst,
        )
    }
}

/// A `DotGeneral`'s batch and contracting dims (lhs batch, rhs batch, lhs
/// contract, rhs contract); panics naming `who` for another primitive.
fn dot_dims<'p>(prim: &'p Prim, who: &str) -> [&'p [usize]; 4] {
    let Prim::DotGeneral {
        lhs_batch,
        rhs_batch,
        lhs_contract,
        rhs_contract,
    } = prim
    else {
        panic!("{who}: not a dot_general ({})", prim.name());
    };
    [lhs_batch, rhs_batch, lhs_contract, rhs_contract]
}

/// A contiguous tensor of `shape` whose bytes are pending on `p` (a device's
/// resident output): its shape and dtype are known, and the first read or
/// write of its data brings the bytes in through [`crate::storage::Pending::fill`].
pub fn pending_tensor(
    dtype: DType,
    shape: &[usize],
    p: std::sync::Arc<dyn crate::storage::Pending>,
) -> Tensor {
    let t = alloc(dtype, shape);
    t.value().storage.set_pending(Some(p));
    t
}

/// What `t`'s bytes are pending on, if they are not here yet (`None` for a
/// tracer).
pub fn pending(t: &Tensor) -> Option<std::sync::Arc<dyn crate::storage::Pending>> {
    t.tracer()
        .is_none()
        .then(|| t.value().storage.pending())
        .flatten()
}

/// Replaces what `t`'s storage is pending on (donation: a marker whose
/// `fill` panics). No effect on a tensor that is not pending.
pub fn replace_pending(t: &Tensor, p: std::sync::Arc<dyn crate::storage::Pending>) {
    if pending(t).is_some() {
        t.value().storage.set_pending(Some(p));
    }
}

pub use crate::cpu::pool::Rest as PoolRest;
/// The pool's grains (`cpu/pool.rs` says how each was chosen): below
/// `PAR_MIN` elements a kernel runs on the calling thread; a compiled
/// kernel is split into parts of about `COMPILED_PAR_CHUNK` elements.
pub use crate::cpu::pool::{COMPILED_PAR_CHUNK, PAR_MIN};

/// Runs `f` with every eager kernel it calls on the calling thread alone
/// (no part goes to nx's pool): for one of several threads that share the
/// cores, such as pmap's device threads.
pub fn on_this_thread<R>(f: impl FnOnce() -> R) -> R {
    crate::cpu::pool::on_this_thread(f)
}

/// While the returned guard lives, nx's idle pool workers park at once
/// instead of spinning for their next job, leaving the cores to other
/// threads (pmap's devices).
pub fn pool_rest() -> PoolRest {
    crate::cpu::pool::rest()
}

/// nx's internals that its own tests (`crates/nx/tests/internals.rs`)
/// check directly: the storage buckets, the matrix-product planner and
/// blocks, the thread pool's splitting helpers and worker flag, and the f32
/// polynomials with their `FMA` choice. Public for those tests only (the
/// library has no unit-test build, so `cargo test` compiles it once): not
/// part of nx's API, hidden from its docs, changed at will.
#[doc(hidden)]
pub mod internals {
    pub use crate::cpu::dot::{
        merge, plan, product_block, Ax, GemmElem, Plan, Side, FAER_BLOCKS, SPLIT_FLOPS,
    };
    pub use crate::cpu::math::{
        atan_f32, cos_f32, cos_f32_slice, erf_f32, exp_f32, ln_1p_f32, ln_f32, sin_f32,
        sin_f32_slice, tanh_f32, trig_big, TRIG_BOUND,
    };
    pub use crate::cpu::pool::{chunks_mut, row_pieces_mut, IN_WORKER};
    pub use crate::storage::{bucket_layout, bucket_size, ALIGN, HUGE_PAGE};
}
