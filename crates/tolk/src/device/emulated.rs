//! A CUDA device emulated on the host, for tests only: never offered to
//! users. It runs the CUDA runtime's own path (allocations, copies, module
//! loading, launches, gemm) with no GPU, so that CI checks what a GPU
//! machine's few minutes would otherwise have to find.
//!
//! - **Kernels**: the same CUDA C++ translation unit the CUDA dialect
//!   renders for NVRTC is compiled by the host's C++ compiler (`$CXX`, else
//!   `g++`) after a small shim ([`SHIM`]): `__global__`, `__device__`,
//!   `__launch_bounds__` as nothing, `blockIdx`/`threadIdx`/`blockDim`/
//!   `gridDim` as thread-local variables, CUDA's bit casts and `__clzll`,
//!   libm's functions with CUDA's `float` overloads, `__shared__` as
//!   `static`, `__syncthreads()` as a barrier. `__CUDACC__` is defined, so
//!   the prelude takes its CUDA branches, as under NVRTC. A launch runs every
//!   block in turn and, within it, every thread (each grid-stride loop runs
//!   to completion); a module whose source calls `__syncthreads` runs a
//!   block's threads as host threads meeting at a barrier (shared memory is
//!   then the block's, as blocks run one at a time). Options as NVRTC's:
//!   `-ffp-contract=off` for `--fmad=false`, no fast math.
//! - **Memory**: device memory is host memory the host may touch only
//!   through this interface. Every allocation lives in one reserved region
//!   whose pages are inaccessible (`PROT_NONE`) except while a copy, a
//!   launch or a gemm that names them runs (a launch opens exactly its
//!   buffers: a kernel reading memory it was not given faults too). A host
//!   access outside those — a missing transfer — faults, and the fault
//!   handler reports it ("the host touched emulated device memory ...
//!   without a copy") and aborts. Fresh allocations are filled with `0xFF`
//!   bytes (NaN for floats), so a buffer read before anything wrote it shows.
//! - **gemm** answers with nx's own product (`dot_general` through
//!   [`nx::raw::eval`]) on copies of the operands.
//!
//! Not checked here (only a GPU run checks them): the PTX NVRTC makes and the
//! driver loads, launch limits (threads per block, registers), real
//! concurrency between blocks, warp-level operations (shuffles, votes: not
//! in the shim), CUDA's libdevice functions (the host's libm answers), and
//! cuBLAS's rounding.

use super::{DevPtr, DeviceApi, Gemm, KernelArg, ModuleId};
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};

static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Makes `"CUDA"` (and `"CUDA:n"`) the emulated device in this process,
/// for tests only. Hidden from the documentation and never called by the
/// library: a test binary calls it first (the GPU check runs the same tests
/// without calling it, against the real driver).
///
/// Why a hidden function and not an environment variable or a cargo
/// feature: a variable could be left set in a user's shell and silently
/// turn "CUDA" into a slow host emulation; a feature would be unified into
/// every build of the workspace's tests and rebuild tolk and rune for
/// them. A call in the test's own code is visible where it happens and
/// reachable from nothing a user runs.
#[doc(hidden)]
pub fn install_for_tests() {
    INSTALLED.store(true, Ordering::SeqCst);
}

/// Whether [`install_for_tests`] ran.
pub(crate) fn installed() -> bool {
    INSTALLED.load(Ordering::SeqCst)
}

/// The shim compiled before the rendered source (see the module docs).
pub const SHIM: &str = r#"/* tolk's CUDA emulator: CUDA C++ on the host */
#define __CUDACC__ 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
struct tk_emu_dim3 { unsigned x, y, z; };
static thread_local tk_emu_dim3 blockIdx, threadIdx, blockDim, gridDim;
static void (*tk_emu_sync_hook)(void);
extern "C" void tk_emu_set_sync(void (*f)(void)) { tk_emu_sync_hook = f; }
static inline void __syncthreads(void) { tk_emu_sync_hook(); }
static inline float __int_as_float(int x) { float f; __builtin_memcpy(&f, &x, 4); return f; }
static inline float __uint_as_float(unsigned x) { float f; __builtin_memcpy(&f, &x, 4); return f; }
static inline int __float_as_int(float x) { int i; __builtin_memcpy(&i, &x, 4); return i; }
static inline unsigned __float_as_uint(float x) { unsigned i; __builtin_memcpy(&i, &x, 4); return i; }
static inline double __longlong_as_double(long long x) { double f; __builtin_memcpy(&f, &x, 8); return f; }
static inline long long __double_as_longlong(double x) { long long i; __builtin_memcpy(&i, &x, 8); return i; }
static inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
"#;

/// The host launcher appended after the rendered source: per kernel `k`,
/// `tk_emu_run_k` (every block and thread in turn) and `tk_emu_thread_k`
/// (one thread), unpacking `cuLaunchKernel`-style parameters (an array of
/// pointers to each argument) into the kernel's own parameter types.
const LAUNCHER: &str = r#"
template <unsigned... I> struct tk_emu_seq {};
template <unsigned N, unsigned... I> struct tk_emu_mkseq : tk_emu_mkseq<N - 1, N - 1, I...> {};
template <unsigned... I> struct tk_emu_mkseq<0, I...> { typedef tk_emu_seq<I...> type; };
template <typename... A, unsigned... I>
static inline void tk_emu_call(void (*f)(A...), void **p, tk_emu_seq<I...>) { f(*(A *)p[I]...); }
template <typename... A>
static void tk_emu_one(void (*f)(A...), void **p, unsigned b, unsigned t, unsigned grid, unsigned block) {
  gridDim.x = grid; gridDim.y = 1; gridDim.z = 1;
  blockDim.x = block; blockDim.y = 1; blockDim.z = 1;
  blockIdx.x = b; blockIdx.y = 0; blockIdx.z = 0;
  threadIdx.x = t; threadIdx.y = 0; threadIdx.z = 0;
  tk_emu_call(f, p, typename tk_emu_mkseq<sizeof...(A)>::type());
}
template <typename... A>
static void tk_emu_all(void (*f)(A...), void **p, unsigned grid, unsigned block) {
  for (unsigned b = 0; b < grid; b++)
    for (unsigned t = 0; t < block; t++) tk_emu_one(f, p, b, t, grid, block);
}
"#;

/// The kernels `source` defines: the name before the parameter list of
/// each `__global__` function.
pub fn kernel_names(source: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in source.lines().filter(|l| l.contains("__global__")) {
        let Some(open) = line.find('(') else { continue };
        // `__launch_bounds__(256)` comes before the name: take the last
        // identifier before the first `(` that is not inside it.
        let head = match line.find("__launch_bounds__") {
            Some(lb) if lb < open => {
                let close = line[lb..].find(')').map_or(open, |c| lb + c + 1);
                let rest = &line[close..];
                match rest.find('(') {
                    Some(o) => &rest[..o],
                    None => continue,
                }
            }
            _ => &line[..open],
        };
        if let Some(name) = head.split_whitespace().last() {
            names.push(name.trim_start_matches('*').to_string());
        }
    }
    names
}

/// The C prelude's libm prototypes (`double f(double); float ff(float);`)
/// as declarations, and CUDA's `float` overloads of the `double` names.
fn math_declarations() -> String {
    let p = crate::codegen::c::PRELUDE;
    let start = p.find("#if !defined(__CUDACC__)").unwrap_or(0);
    let end = p[start..].find("#include").map_or(p.len(), |e| start + e);
    let mut decls = String::from("extern \"C\" {\n");
    let mut overloads = String::new();
    for proto in p[start..end].split(';') {
        // The text since the last line break (the first prototype follows
        // the `#if` and `#define` lines).
        let proto = proto.rsplit('\n').next().unwrap_or("").trim();
        let (Some(open), true) = (proto.find('('), proto.ends_with(')')) else {
            continue;
        };
        let mut head = proto[..open].split_whitespace();
        let (Some(ret), Some(name), None) = (head.next(), head.next(), head.next()) else {
            continue;
        };
        if !(ret == "double" || ret == "float") {
            continue;
        }
        decls.push_str(proto);
        decls.push_str(";\n");
        if ret == "float" {
            let arity = proto[open..].split(',').count();
            let base = name.strip_suffix('f').unwrap_or(name);
            let params: Vec<String> = (0..arity).map(|i| format!("float a{i}")).collect();
            let args: Vec<String> = (0..arity).map(|i| format!("a{i}")).collect();
            overloads.push_str(&format!(
                "static inline float {base}({}) {{ return {name}({}); }}\n",
                params.join(", "),
                args.join(", ")
            ));
        }
    }
    decls.push_str("}\n");
    decls + &overloads
}

/// The whole translation unit the host compiler builds for `source`.
pub fn emulated_source(source: &str) -> String {
    let mut s = String::from(SHIM);
    s.push_str(&math_declarations());
    s.push_str(source);
    s.push_str(LAUNCHER);
    for k in kernel_names(source) {
        s.push_str(&format!(
            "extern \"C\" void tk_emu_run_{k}(void **p, unsigned g, unsigned b) \
             {{ tk_emu_all({k}, p, g, b); }}\n\
             extern \"C\" void tk_emu_thread_{k}(void **p, unsigned bi, unsigned ti, unsigned g, \
             unsigned b) {{ tk_emu_one({k}, p, bi, ti, g, b); }}\n"
        ));
    }
    s
}

// ---- memory -----------------------------------------------------------

/// The reserved region's size: address space only (`MAP_NORESERVE`);
/// pages exist once a copy or kernel writes them.
const REGION: usize = 64 << 30;
const PAGE: usize = 4096;

/// The region's bounds, read by the fault handler (no lock there).
static REGION_START: AtomicUsize = AtomicUsize::new(0);
static REGION_END: AtomicUsize = AtomicUsize::new(0);

/// Allocations in the region.
struct Arena {
    base: usize,
    /// Next never-used byte (offset).
    bump: usize,
    /// Freed blocks by size, for reuse.
    free: BTreeMap<usize, Vec<usize>>,
    /// Live blocks: start address -> size.
    live: BTreeMap<usize, usize>,
}

fn arena() -> &'static Mutex<Arena> {
    static A: std::sync::OnceLock<Mutex<Arena>> = std::sync::OnceLock::new();
    A.get_or_init(|| {
        // SAFETY: an anonymous private mapping with no address hint has no
        // preconditions; it is never unmapped (the process keeps it).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                REGION,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert!(
            base != libc::MAP_FAILED,
            "tolk emulated CUDA device: cannot reserve {REGION} bytes of address space"
        );
        let base = base as usize;
        REGION_START.store(base, Ordering::SeqCst);
        REGION_END.store(base + REGION, Ordering::SeqCst);
        install_fault_handler();
        Mutex::new(Arena {
            base,
            bump: 0,
            free: BTreeMap::new(),
            live: BTreeMap::new(),
        })
    })
}

/// Opens (`PROT_READ | PROT_WRITE`) or closes (`PROT_NONE`) `[addr, addr + len)`.
fn protect(addr: usize, len: usize, open: bool) {
    let prot = if open {
        libc::PROT_READ | libc::PROT_WRITE
    } else {
        libc::PROT_NONE
    };
    // SAFETY: `[addr, addr + len)` is page-aligned and inside the region
    // this module mapped; changing its protection touches no Rust object.
    let r = unsafe { libc::mprotect(addr as *mut c_void, len, prot) };
    assert_eq!(r, 0, "tolk emulated CUDA device: mprotect failed");
}

/// The live block holding `p` (its start and size).
fn block_of(a: &Arena, p: u64) -> Result<(usize, usize), String> {
    let p = p as usize;
    match a.live.range(..=p).next_back() {
        Some((&start, &len)) if p < start + len || (p == start + len && len == 0) => {
            Ok((start, len))
        }
        _ => Err(format!(
            "tolk emulated CUDA device: {p:#x} is not in a live device allocation"
        )),
    }
}

/// Runs `f` with the blocks holding `ptrs` open, then closes them.
fn with_open<R>(ptrs: &[u64], f: impl FnOnce() -> R) -> Result<R, String> {
    let a = arena().lock().unwrap();
    let mut blocks: Vec<(usize, usize)> = Vec::new();
    for &p in ptrs {
        let b = block_of(&a, p)?;
        if !blocks.contains(&b) {
            blocks.push(b);
        }
    }
    for &(s, l) in &blocks {
        protect(s, l, true);
    }
    // The arena stays locked: no block is freed or reused while open, and
    // operations on the device are ordered (one stream).
    let r = f();
    for &(s, l) in &blocks {
        protect(s, l, false);
    }
    Ok(r)
}

// ---- the fault handler --------------------------------------------------

static OLD_HANDLER: Mutex<Option<libc::sigaction>> = Mutex::new(None);
static OLD_ACTION: std::sync::OnceLock<libc::sigaction> = std::sync::OnceLock::new();

extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    let (lo, hi) = (
        REGION_START.load(Ordering::Relaxed),
        REGION_END.load(Ordering::Relaxed),
    );
    if addr >= lo && addr < hi {
        let mut msg = *b"tolk emulated CUDA device: the host touched emulated device memory at 0x0000000000000000 without a copy (a missing transfer: device buffers are read only through copy_out)\n";
        let at = msg.iter().position(|&c| c == b'x').unwrap() + 1;
        for i in 0..16 {
            let nib = (addr >> (60 - 4 * i)) & 0xf;
            msg[at + i] = b"0123456789abcdef"[nib];
        }
        // SAFETY: write(2) and abort(3) are async-signal-safe; `msg` is a
        // live stack buffer of its length.
        unsafe {
            libc::write(2, msg.as_ptr() as *const c_void, msg.len());
            libc::abort();
        }
    }
    // Not ours: hand the fault to the handler installed before (Rust's
    // stack-overflow guard, or the default action).
    if let Some(old) = OLD_ACTION.get() {
        if old.sa_sigaction == libc::SIG_DFL || old.sa_sigaction == libc::SIG_IGN {
            // SAFETY: restoring the previous disposition and returning
            // re-runs the faulting instruction under it (the default kills).
            unsafe { libc::sigaction(sig, old, std::ptr::null_mut()) };
        } else if old.sa_flags & libc::SA_SIGINFO != 0 {
            // SAFETY: the previous handler was installed with SA_SIGINFO,
            // so it has this signature; it gets the kernel's arguments.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) =
                unsafe { std::mem::transmute(old.sa_sigaction) };
            f(sig, info, ctx);
        } else {
            // SAFETY: a handler without SA_SIGINFO takes the signal number.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(old.sa_sigaction) };
            f(sig);
        }
    }
}

fn install_fault_handler() {
    let mut guard = OLD_HANDLER.lock().unwrap();
    if guard.is_some() {
        return;
    }
    // SAFETY: a zeroed sigaction is a valid value to fill in; the handler
    // only reads atomics and calls async-signal-safe functions for faults
    // in the region, and defers to the previous handler otherwise.
    unsafe {
        let mut new: libc::sigaction = std::mem::zeroed();
        new.sa_sigaction = on_fault as *const () as usize;
        new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigemptyset(&mut new.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGSEGV, &new, &mut old);
        let _ = OLD_ACTION.set(old);
        *guard = Some(old);
    }
}

// ---- the device ---------------------------------------------------------

type RunAll = unsafe extern "C" fn(*mut *mut c_void, u32, u32);
type RunOne = unsafe extern "C" fn(*mut *mut c_void, u32, u32, u32, u32);

struct Module {
    /// Keeps the kernels mapped.
    _lib: libloading::Library,
    /// Per kernel name: its launchers.
    kernels: Vec<(String, RunAll, RunOne)>,
    /// Its source calls `__syncthreads`: a block's threads run as host
    /// threads.
    threaded: bool,
}

/// The emulated device (see the module docs).
pub struct Emulated {
    ordinal: usize,
    modules: Mutex<Vec<Module>>,
}

thread_local! {
    static BARRIER: std::cell::Cell<*const Barrier> = const { std::cell::Cell::new(std::ptr::null()) };
}

extern "C" fn sync_threads() {
    BARRIER.with(|b| {
        let b = b.get();
        assert!(!b.is_null(), "__syncthreads outside a threaded launch");
        // SAFETY: set by the launch for the lifetime of this thread's
        // kernel call, which this call is inside.
        unsafe { (*b).wait() };
    });
}

/// A fresh directory to build or load a module in.
fn build_dir() -> Result<std::path::PathBuf, String> {
    let dir = std::env::temp_dir().join(format!(
        "tolk-emulated-cuda-{}-{}",
        std::process::id(),
        BUILDS.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("emulated CUDA device: {e}"))?;
    Ok(dir)
}

/// The C++ compiler's name and first `--version` line (once per process):
/// what an emulated module's image depends on besides its source.
fn cxx_identity() -> String {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let v = std::process::Command::new(cxx())
            .arg("--version")
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string()
            })
            .unwrap_or_default();
        format!("{} {v}", cxx())
    })
    .clone()
}

/// The host's C++ compiler: `$CXX`, else `g++`.
fn cxx() -> String {
    std::env::var("CXX")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "g++".into())
}

impl Emulated {
    /// Emulated device `ordinal` (the region is reserved on first use).
    pub fn new(ordinal: usize) -> Result<Emulated, String> {
        arena();
        Ok(Emulated {
            ordinal,
            modules: Mutex::default(),
        })
    }

    /// Bytes of emulated device memory in live allocations (for tests).
    pub fn live_bytes() -> usize {
        arena().lock().unwrap().live.values().sum()
    }
}

static BUILDS: AtomicUsize = AtomicUsize::new(0);

impl DeviceApi for Emulated {
    fn describe(&self) -> String {
        format!("emulated CUDA device {} (host, {})", self.ordinal, cxx())
    }

    fn allocate(&self, bytes: usize) -> Result<DevPtr, String> {
        let len = bytes.max(1).div_ceil(PAGE) * PAGE;
        let mut a = arena().lock().unwrap();
        let off = match a.free.get_mut(&len).and_then(Vec::pop) {
            Some(o) => o,
            None => {
                if a.bump + len > REGION {
                    return Err(format!(
                        "emulated CUDA device: out of memory ({bytes} bytes asked)"
                    ));
                }
                a.bump += len;
                a.bump - len
            }
        };
        let start = a.base + off;
        a.live.insert(start, len);
        // Poison: what CUDA leaves is unspecified; NaN bytes make a read
        // before any write show.
        protect(start, len, true);
        // SAFETY: `[start, start + len)` is a block of the region, open
        // now and owned by no one else (just taken from the free list or
        // the never-used part).
        unsafe { std::ptr::write_bytes(start as *mut u8, 0xFF, len) };
        protect(start, len, false);
        Ok(DevPtr(start as u64))
    }

    fn free(&self, ptr: DevPtr, _bytes: usize) {
        let mut a = arena().lock().unwrap();
        let start = ptr.0 as usize;
        if let Some(len) = a.live.remove(&start) {
            let off = start - a.base;
            a.free.entry(len).or_default().push(off);
        }
    }

    fn copy_in(&self, dst: DevPtr, src: &[u8]) -> Result<(), String> {
        check_span(dst, src.len())?;
        with_open(&[dst.0], || {
            // SAFETY: the destination block is open and holds
            // `src.len()` bytes from `dst` (checked); the regions are
            // disjoint (the host slice is not in the region).
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.0 as *mut u8, src.len()) }
        })
    }

    fn copy_out(&self, src: DevPtr, dst: &mut [u8]) -> Result<(), String> {
        check_span(src, dst.len())?;
        with_open(&[src.0], || {
            // SAFETY: as in `copy_in`, the other way.
            unsafe {
                std::ptr::copy_nonoverlapping(src.0 as *const u8, dst.as_mut_ptr(), dst.len())
            }
        })
    }

    fn copy_on_device(&self, dst: DevPtr, src: DevPtr, bytes: usize) -> Result<(), String> {
        check_span(src, bytes)?;
        check_span(dst, bytes)?;
        with_open(&[src.0, dst.0], || {
            // SAFETY: both blocks are open and hold `bytes` from their
            // addresses (checked); `copy` allows overlap.
            unsafe { std::ptr::copy(src.0 as *const u8, dst.0 as *mut u8, bytes) }
        })
    }

    fn copy_from_peer(
        &self,
        dst: DevPtr,
        _src_device: &dyn DeviceApi,
        src: DevPtr,
        bytes: usize,
    ) -> Result<(), String> {
        // Every emulated device's memory is a block of the one region.
        self.copy_on_device(dst, src, bytes)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn compile(&self, source: &str) -> Result<Vec<u8>, String> {
        let dir = build_dir()?;
        let cpp = dir.join("module.cpp");
        let so = dir.join("module.so");
        std::fs::write(&cpp, emulated_source(source))
            .map_err(|e| format!("emulated CUDA device: {e}"))?;
        let out = std::process::Command::new(cxx())
            .args(["-std=c++17", "-O1", "-fPIC", "-shared", "-w"])
            .args([
                "-ffp-contract=off",
                "-fno-fast-math",
                "-fno-strict-aliasing",
            ])
            .arg("-o")
            .arg(&so)
            .arg(&cpp)
            .output()
            .map_err(|e| format!("emulated CUDA device: cannot run {}: {e}", cxx()))?;
        if !out.status.success() {
            return Err(format!(
                "emulated CUDA device: {} failed on {}:\n{}",
                cxx(),
                cpp.display(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let image = std::fs::read(&so).map_err(|e| format!("emulated CUDA device: {e}"));
        let _ = std::fs::remove_dir_all(&dir);
        image
    }

    fn load_image(&self, image: &[u8], source: &str) -> Result<ModuleId, String> {
        let dir = build_dir()?;
        let so = dir.join("module.so");
        std::fs::write(&so, image).map_err(|e| format!("emulated CUDA device: {e}"))?;
        // SAFETY: the library was just built from our own source; loading
        // it runs no initializers beyond the C++ runtime's.
        let lib = unsafe { libloading::Library::new(&so) }
            .map_err(|e| format!("emulated CUDA device: loading {}: {e}", so.display()))?;
        let mut kernels = Vec::new();
        for k in kernel_names(source) {
            // SAFETY: the launchers are defined by `emulated_source` with
            // exactly these signatures; `lib` is kept with them.
            unsafe {
                let all: RunAll = *lib
                    .get::<RunAll>(format!("tk_emu_run_{k}\0").as_bytes())
                    .map_err(|e| format!("emulated CUDA device: {e}"))?;
                let one: RunOne = *lib
                    .get::<RunOne>(format!("tk_emu_thread_{k}\0").as_bytes())
                    .map_err(|e| format!("emulated CUDA device: {e}"))?;
                kernels.push((k, all, one));
            }
        }
        // SAFETY: `tk_emu_set_sync` is the shim's setter, taking a C
        // function pointer; `sync_threads` is one for the process's life.
        unsafe {
            let set: libloading::Symbol<unsafe extern "C" fn(extern "C" fn())> = lib
                .get(b"tk_emu_set_sync\0")
                .map_err(|e| format!("emulated CUDA device: {e}"))?;
            set(sync_threads);
        }
        let _ = std::fs::remove_dir_all(&dir);
        let mut m = self.modules.lock().unwrap();
        m.push(Module {
            _lib: lib,
            kernels,
            threaded: source.contains("__syncthreads"),
        });
        Ok(ModuleId(m.len() - 1))
    }

    fn image_target(&self) -> Option<crate::cache::CudaTarget> {
        Some(crate::cache::CudaTarget {
            device: format!("emulated ({})", cxx_identity()),
            capability: (0, 0),
            driver: 0,
            nvrtc: (0, 0),
        })
    }

    fn launch(
        &self,
        module: ModuleId,
        kernel: &str,
        grid: u32,
        block: u32,
        args: &[KernelArg],
    ) -> Result<(), String> {
        let (all, one, threaded) = {
            let m = self.modules.lock().unwrap();
            let md = m
                .get(module.0)
                .ok_or_else(|| format!("emulated CUDA device: no module {}", module.0))?;
            let k = md
                .kernels
                .iter()
                .find(|k| k.0 == kernel)
                .ok_or_else(|| format!("emulated CUDA device: no kernel {kernel}"))?;
            (k.1, k.2, md.threaded)
        };
        let mut values: Vec<u64> = args
            .iter()
            .map(|a| match *a {
                KernelArg::Ptr(p) => p.0,
                KernelArg::I64(v) => v as u64,
            })
            .collect();
        let ptrs: Vec<u64> = args
            .iter()
            .filter_map(|a| match a {
                KernelArg::Ptr(p) => Some(p.0),
                _ => None,
            })
            .collect();
        let params: Vec<usize> = values.iter_mut().map(|v| v as *mut u64 as usize).collect();
        with_open(&ptrs, || {
            if !threaded {
                let mut p: Vec<*mut c_void> = params.iter().map(|&a| a as *mut c_void).collect();
                // SAFETY: `all` is the module's launcher for `kernel`, whose
                // parameters are `void *` buffers then `int64_t`s, as the
                // runtime passes them (one 8-byte value per argument); the
                // buffers are open for the call.
                unsafe { all(p.as_mut_ptr(), grid, block) };
                return;
            }
            for b in 0..grid {
                let barrier = Barrier::new(block as usize);
                std::thread::scope(|s| {
                    for t in 0..block {
                        let barrier = &barrier;
                        let params = &params;
                        s.spawn(move || {
                            BARRIER.with(|c| c.set(barrier as *const Barrier));
                            let mut p: Vec<*mut c_void> =
                                params.iter().map(|&a| a as *mut c_void).collect();
                            // SAFETY: as above, one thread of block `b`;
                            // `barrier` outlives the scope.
                            unsafe { one(p.as_mut_ptr(), b, t, grid, block) };
                            BARRIER.with(|c| c.set(std::ptr::null()));
                        });
                    }
                });
            }
        })
    }

    fn gemm(&self, g: &Gemm) -> Result<(), String> {
        let es = g.dtype.size_in_bytes();
        let read = |o: &super::Operand, rows: usize, cols: usize| -> Vec<u8> {
            let mut out = vec![0u8; g.batch * rows * cols * es];
            let mut at = 0;
            for b in 0..g.batch {
                for r in 0..rows {
                    for c in 0..cols {
                        let e = b * o.batch_stride + r * o.row_stride + c * o.col_stride;
                        let src = o.ptr.0 as usize + e * es;
                        // SAFETY: the operand's block is open (below) and
                        // every element it addresses lies in it (`span`).
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                src as *const u8,
                                out[at..].as_mut_ptr(),
                                es,
                            )
                        };
                        at += es;
                    }
                }
            }
            out
        };
        let span = |o: &super::Operand, rows: usize, cols: usize| {
            let last = (g.batch.max(1) - 1) * o.batch_stride
                + (rows.max(1) - 1) * o.row_stride
                + (cols.max(1) - 1) * o.col_stride;
            check_span(o.ptr, (last + 1) * es)
        };
        span(&g.a, g.m, g.k)?;
        span(&g.b, g.k, g.n)?;
        let (a, b) = with_open(&[g.a.ptr.0, g.b.ptr.0], || {
            (read(&g.a, g.m, g.k), read(&g.b, g.k, g.n))
        })?;
        let tensor = |bytes: &[u8], shape: &[usize]| {
            let t = nx::raw::alloc(g.dtype, shape);
            // SAFETY: `t` is fresh and contiguous with exactly
            // `bytes.len()` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), nx::raw::write(&t).ptr(), bytes.len())
            };
            t
        };
        let c = if g.batch == 1 {
            let (ta, tb) = (tensor(&a, &[g.m, g.k]), tensor(&b, &[g.k, g.n]));
            nx::raw::eval(
                nx::Prim::DotGeneral {
                    lhs_contract: vec![1],
                    rhs_contract: vec![0],
                    lhs_batch: vec![],
                    rhs_batch: vec![],
                },
                &[&ta, &tb],
            )
        } else {
            let ta = tensor(&a, &[g.batch, g.m, g.k]);
            let tb = tensor(&b, &[g.batch, g.k, g.n]);
            nx::raw::eval(
                nx::Prim::DotGeneral {
                    lhs_contract: vec![2],
                    rhs_contract: vec![1],
                    lhs_batch: vec![0],
                    rhs_batch: vec![0],
                },
                &[&ta, &tb],
            )
        };
        let c = if c.is_contiguous() && c.offset() == Some(0) {
            c
        } else {
            c.copy()
        };
        let bytes = g.batch * g.m * g.n * es;
        let r = nx::raw::read(&c);
        let src = r.ptr();
        check_span(g.c, bytes)?;
        with_open(&[g.c.0], || {
            // SAFETY: C's block is open and holds `bytes` (checked); `src`
            // is nx's contiguous result of that many bytes.
            unsafe { std::ptr::copy_nonoverlapping(src, g.c.0 as *mut u8, bytes) }
        })
    }

    fn synchronize(&self) -> Result<(), String> {
        Ok(())
    }
}

/// `bytes` from `p` lie in one live block.
fn check_span(p: DevPtr, bytes: usize) -> Result<(), String> {
    let a = arena().lock().unwrap();
    let (start, len) = block_of(&a, p.0)?;
    if p.0 as usize + bytes > start + len {
        return Err(format!(
            "emulated CUDA device: {bytes} bytes at {:#x} pass the end of its allocation",
            p.0
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names_skip_launch_bounds() {
        let src = "extern \"C\" __global__ void __launch_bounds__(256) k_12(void *b0, int64_t lo, int64_t hi) {\n}\nextern \"C\" __global__ void plain(void *b0) {}\n";
        assert_eq!(kernel_names(src), ["k_12", "plain"]);
    }

    #[test]
    fn math_declarations_declare_libm_and_float_overloads() {
        let d = math_declarations();
        assert!(d.contains("float expf(float);"), "{d}");
        assert!(d.contains("double acos(double);"), "the first one too: {d}");
        assert!(
            d.contains("static inline float exp(float a0) { return expf(a0); }"),
            "{d}"
        );
        assert!(
            d.contains("static inline float atan2(float a0, float a1)"),
            "{d}"
        );
    }
}
