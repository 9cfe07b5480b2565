//! The MPI calls, and nothing else: initialization (once, at the thread
//! level the runtime needs, finalized at exit), and the collectives on raw
//! contiguous buffers of one MPI datatype over `MPI_COMM_WORLD`. Everything
//! `unsafe` in `rune::distributed` is here; the callers hand in tensors
//! they own (contiguous, concrete) and this file takes their pointers.

use mpi::ffi;
use nx::{DType, Tensor};
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Bytes this process contributed to collectives since the start.
static BYTES_SENT: AtomicU64 = AtomicU64::new(0);

pub(crate) fn bytes_sent() -> u64 {
    BYTES_SENT.load(Ordering::Relaxed)
}

fn count(bytes: usize) {
    BYTES_SENT.fetch_add(bytes as u64, Ordering::Relaxed);
}

/// `MPI_IN_PLACE`, which mpi-sys does not export: Open MPI's `mpi.h`
/// defines it as `(void *) 1`, MPICH's as `(void *) -1`; the library's
/// version string says which is in use.
fn in_place() -> *mut c_void {
    static IN_PLACE: OnceLock<usize> = OnceLock::new();
    *IN_PLACE.get_or_init(|| {
        if library_version().contains("Open MPI") {
            1
        } else {
            usize::MAX
        }
    }) as *mut c_void
}

fn library_version() -> String {
    let mut buf = vec![0u8; 8192];
    let mut len: c_int = 0;
    // Why sound: `buf` holds MPI_MAX_LIBRARY_VERSION_STRING (8192 in Open
    // MPI and MPICH) bytes, the size the call may write; `len` is a valid
    // out-pointer. Callable before MPI_Init.
    unsafe { ffi::MPI_Get_library_version(buf.as_mut_ptr() as *mut _, &mut len) };
    buf.truncate(len.max(0) as usize);
    String::from_utf8_lossy(&buf).into_owned()
}

/// This process's rank and the world's size, MPI initialized on first call
/// (thread level `MPI_THREAD_SERIALIZED`: rune calls MPI from whichever
/// thread calls a collective or a cross-process pmap, one at a time;
/// checked) and finalized when the process exits.
pub(crate) fn init() -> (usize, usize) {
    static WORLD: OnceLock<(usize, usize)> = OnceLock::new();
    *WORLD.get_or_init(|| {
        let (mut rank, mut size, mut flag, mut provided) = (0, 0, 0, 0);
        // Why sound: every pointer is to a live local; null argc/argv are
        // allowed by MPI-2 and later; the world communicator is a constant
        // handle valid once MPI is initialized; `finalize` is an
        // `extern "C" fn()` with no captured state.
        unsafe {
            ffi::MPI_Initialized(&mut flag);
            if flag == 0 {
                let required = ffi::RSMPI_THREAD_SERIALIZED;
                ffi::MPI_Init_thread(
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    required,
                    &mut provided,
                );
                if provided < required {
                    panic!(
                        "rune::distributed::init: the MPI library provides thread level \
                         {provided}, rune needs MPI_THREAD_SERIALIZED ({required}); use an MPI \
                         built with thread support"
                    );
                }
                libc::atexit(finalize);
            }
            ffi::MPI_Comm_rank(ffi::RSMPI_COMM_WORLD, &mut rank);
            ffi::MPI_Comm_size(ffi::RSMPI_COMM_WORLD, &mut size);
        }
        (rank as usize, size as usize)
    })
}

extern "C" fn finalize() {
    let mut done = 0;
    // Why sound: called once at exit, after `init` initialized MPI; MPI
    // tolerates the query after any state.
    unsafe {
        ffi::MPI_Finalized(&mut done);
        if done == 0 {
            ffi::MPI_Finalize();
        }
    }
}

/// The MPI datatype of a dtype MPI can sum natively (`None`: f16, bf16,
/// bool and 4-bit ones).
fn datatype(d: DType) -> Option<ffi::MPI_Datatype> {
    // Why sound: the RSMPI_* datatypes are constants set by mpi-sys's C
    // shim at load time, read-only afterwards.
    unsafe {
        Some(match d {
            DType::F32 => ffi::RSMPI_FLOAT,
            DType::F64 => ffi::RSMPI_DOUBLE,
            DType::I8 => ffi::RSMPI_INT8_T,
            DType::I16 => ffi::RSMPI_INT16_T,
            DType::I32 => ffi::RSMPI_INT32_T,
            DType::I64 => ffi::RSMPI_INT64_T,
            DType::U8 => ffi::RSMPI_UINT8_T,
            DType::U16 => ffi::RSMPI_UINT16_T,
            DType::U32 => ffi::RSMPI_UINT32_T,
            DType::U64 => ffi::RSMPI_UINT64_T,
            DType::C64 => ffi::RSMPI_FLOAT_COMPLEX,
            DType::C128 => ffi::RSMPI_DOUBLE_COMPLEX,
            _ => return None,
        })
    }
}

/// Whether MPI sums `d` natively.
pub(crate) fn summable(d: DType) -> bool {
    datatype(d).is_some()
}

/// The reduction a collective applies.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Op {
    Sum,
    Prod,
    Max,
    Min,
}

fn op(o: Op) -> ffi::MPI_Op {
    // Why sound: constant handles, as for the datatypes.
    unsafe {
        match o {
            Op::Sum => ffi::RSMPI_SUM,
            Op::Prod => ffi::RSMPI_PROD,
            Op::Max => ffi::RSMPI_MAX,
            Op::Min => ffi::RSMPI_MIN,
        }
    }
}

/// Largest element count one MPI call takes (counts are C ints).
const CHUNK: usize = 1 << 30;

fn check(rc: c_int, what: &str) {
    if rc != 0 {
        panic!("rune::distributed: {what} failed (MPI error {rc})");
    }
}

/// All-reduces `t` in place across the world. `t` must be contiguous,
/// concrete, of a [`summable`] dtype, and owned by the caller alone (it is
/// overwritten).
pub(crate) fn all_reduce_in_place(t: &Tensor, o: Op) {
    assert!(t.is_contiguous(), "all_reduce_in_place: contiguous only");
    let w = nx::raw::write(t);
    all_reduce_chunks(t, None, w.ptr(), o);
}

/// The all-reduce of `t` across the world into a fresh tensor (`t` is
/// read, not written). `t` must be contiguous and [`summable`].
pub(crate) fn all_reduce_into(t: &Tensor, o: Op) -> Tensor {
    assert!(t.is_contiguous(), "all_reduce_into: contiguous only");
    let out = nx::raw::alloc(t.dtype(), t.shape());
    {
        let r = nx::raw::read(t);
        let w = nx::raw::write(&out);
        all_reduce_chunks(t, Some(r.ptr()), w.ptr(), o);
    }
    out
}

/// `MPI_Allreduce` of `t`'s elements, at most [`CHUNK`] per call, from
/// `send` (`None`: in place, `recv` holds the input) into `recv`. The
/// callers hold `send` and `recv` as guards over `t`'s contiguous elements
/// (`recv` exclusive) or a fresh tensor of the same dtype and shape.
fn all_reduce_chunks(t: &Tensor, send: Option<*const u8>, recv: *mut u8, o: Op) {
    let dt = datatype(t.dtype()).expect("a dtype MPI reduces");
    let (n, size) = (t.numel(), t.dtype().size_in_bytes());
    count(n * size);
    let mut done = 0;
    while done < n {
        let k = (n - done).min(CHUNK);
        // Why sound: `send` (when given) and `recv` each address `n`
        // contiguous elements of `size` bytes held by the callers' guards
        // (`recv` exclusively, and a distinct storage from `send`); the call
        // reads and writes `k` of them from element `done`, within the
        // buffers; the datatype matches the dtype.
        let rc = unsafe {
            ffi::MPI_Allreduce(
                match send {
                    Some(p) => p.add(done * size) as *const c_void,
                    None => in_place() as *const c_void,
                },
                recv.add(done * size) as *mut c_void,
                k as c_int,
                dt,
                op(o),
                ffi::RSMPI_COMM_WORLD,
            )
        };
        check(rc, "MPI_Allreduce");
        done += k;
    }
}

/// Broadcasts `t`'s bytes from `root` into `t` on every other rank. `t`
/// must be contiguous and owned by the caller alone.
pub(crate) fn broadcast_in_place(t: &Tensor, root: usize) {
    assert!(t.is_contiguous(), "broadcast_in_place: contiguous only");
    let n = t.numel() * t.dtype().size_in_bytes();
    if init().0 == root {
        count(n);
    }
    let w = nx::raw::write(t);
    let mut done = 0;
    while done < n {
        let k = (n - done).min(CHUNK);
        // Why sound: `w` is exclusive access to `n` contiguous bytes; the
        // call reads (root) or writes (others) `k` of them from `done`.
        let rc = unsafe {
            ffi::MPI_Bcast(
                w.ptr().add(done) as *mut c_void,
                k as c_int,
                ffi::RSMPI_UINT8_T,
                root as c_int,
                ffi::RSMPI_COMM_WORLD,
            )
        };
        check(rc, "MPI_Bcast");
        done += k;
    }
}

/// Every rank's `bytes` (the same length on each), concatenated in rank
/// order. Metadata (signatures): not counted in [`bytes_sent`].
pub(crate) fn all_gather_bytes(bytes: &[u8]) -> Vec<u8> {
    let size = init().1;
    let mut out = vec![0u8; bytes.len() * size];
    all_gather_raw(bytes.as_ptr(), out.as_mut_ptr(), bytes.len(), false);
    out
}

/// Every rank's contiguous `t` (the same shape on each) into a fresh
/// tensor of shape `[size, ..t.shape()]`, in rank order.
pub(crate) fn all_gather_tensor(t: &Tensor) -> Tensor {
    assert!(t.is_contiguous(), "all_gather_tensor: contiguous only");
    let size = init().1;
    let mut shape = vec![size];
    shape.extend_from_slice(t.shape());
    let out = nx::raw::alloc(t.dtype(), &shape);
    let n = t.numel() * t.dtype().size_in_bytes();
    {
        let r = nx::raw::read(t);
        let w = nx::raw::write(&out);
        all_gather_raw(r.ptr(), w.ptr(), n, true);
    }
    out
}

fn all_gather_raw(send: *const u8, recv: *mut u8, n: usize, counted: bool) {
    if counted {
        count(n);
    }
    if n > CHUNK {
        panic!(
            "rune::distributed: all_gather of {n} bytes per rank; at most {CHUNK} are supported"
        );
    }
    // Why sound: callers pass `send` valid for `n` bytes and `recv` for
    // `n * size` bytes, distinct buffers.
    let rc = unsafe {
        ffi::MPI_Allgather(
            send as *const c_void,
            n as c_int,
            ffi::RSMPI_UINT8_T,
            recv as *mut c_void,
            n as c_int,
            ffi::RSMPI_UINT8_T,
            ffi::RSMPI_COMM_WORLD,
        )
    };
    check(rc, "MPI_Allgather");
}

/// Every rank's `bytes` (lengths may differ), one `Vec` per rank.
/// Metadata (a mismatch's descriptions): not counted in [`bytes_sent`].
pub(crate) fn all_gather_varying(bytes: &[u8]) -> Vec<Vec<u8>> {
    let size = init().1;
    let lens = all_gather_bytes(&(bytes.len() as u64).to_le_bytes());
    let lens: Vec<usize> = lens
        .chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()) as usize)
        .collect();
    let counts: Vec<c_int> = lens.iter().map(|&l| l as c_int).collect();
    let mut displs = vec![0 as c_int; size];
    for r in 1..size {
        displs[r] = displs[r - 1] + counts[r - 1];
    }
    let total: usize = lens.iter().sum();
    let mut out = vec![0u8; total];
    // Why sound: `bytes` is valid for its length (this rank's count);
    // `out` holds the sum of every rank's count, at the displacements
    // computed from them; `counts` and `displs` hold `size` entries.
    let rc = unsafe {
        ffi::MPI_Allgatherv(
            bytes.as_ptr() as *const c_void,
            bytes.len() as c_int,
            ffi::RSMPI_UINT8_T,
            out.as_mut_ptr() as *mut c_void,
            counts.as_ptr(),
            displs.as_ptr(),
            ffi::RSMPI_UINT8_T,
            ffi::RSMPI_COMM_WORLD,
        )
    };
    check(rc, "MPI_Allgatherv");
    let mut per = Vec::with_capacity(size);
    let mut at = 0;
    for l in lens {
        per.push(out[at..at + l].to_vec());
        at += l;
    }
    per
}

/// Blocks until every rank has called it.
pub(crate) fn barrier() {
    // Why sound: no buffers; the world communicator is valid after init.
    let rc = unsafe { ffi::MPI_Barrier(ffi::RSMPI_COMM_WORLD) };
    check(rc, "MPI_Barrier");
}
