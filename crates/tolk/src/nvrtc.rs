//! NVRTC, CUDA's run-time compiler, loaded at run time with `libloading`
//! (never linked: the project builds and runs on machines without CUDA,
//! and one binary takes CUDA 12 or 13). `$TOLK_NVRTC` names the library's
//! path; otherwise the usual names are tried (`libnvrtc.so.13`,
//! `libnvrtc.so.12`, `libnvrtc.so`). [`Nvrtc::get`] loads it once per
//! process; [`Nvrtc::compile_ptx`] compiles one source to PTX.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

/// The names tried when `$TOLK_NVRTC` is not set, newest first.
pub const LIBRARY_NAMES: &[&str] = &["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"];

type Program = *mut c_void;
type Result_ = c_int; // nvrtcResult; 0 is NVRTC_SUCCESS

/// The NVRTC functions tolk calls, from a loaded library.
pub struct Nvrtc {
    version: unsafe extern "C" fn(*mut c_int, *mut c_int) -> Result_,
    create: unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> Result_,
    compile: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> Result_,
    ptx_size: unsafe extern "C" fn(Program, *mut usize) -> Result_,
    ptx: unsafe extern "C" fn(Program, *mut c_char) -> Result_,
    log_size: unsafe extern "C" fn(Program, *mut usize) -> Result_,
    log: unsafe extern "C" fn(Program, *mut c_char) -> Result_,
    destroy: unsafe extern "C" fn(*mut Program) -> Result_,
    error_string: unsafe extern "C" fn(Result_) -> *const c_char,
    /// The library's path or name, as it was loaded.
    pub path: String,
    // Keeps the functions above mapped; dropped last.
    _lib: libloading::Library,
}

static NVRTC: OnceLock<Result<Nvrtc, String>> = OnceLock::new();

impl Nvrtc {
    /// NVRTC, loaded on first use; `Err` says what was tried and why it
    /// failed.
    pub fn get() -> Result<&'static Nvrtc, String> {
        NVRTC
            .get_or_init(Nvrtc::load)
            .as_ref()
            .map_err(Clone::clone)
    }

    fn load() -> Result<Nvrtc, String> {
        let candidates: Vec<String> = match std::env::var("TOLK_NVRTC") {
            Ok(p) if !p.is_empty() => vec![p],
            _ => LIBRARY_NAMES.iter().map(|s| s.to_string()).collect(),
        };
        let mut errors = Vec::new();
        for name in &candidates {
            // SAFETY (why sound): loading NVRTC runs only its initializers,
            // which have no preconditions; the library is not unloaded
            // while `Nvrtc` (which owns it) lives.
            match unsafe { libloading::Library::new(name) } {
                Ok(lib) => return Nvrtc::from_library(lib, name),
                Err(e) => errors.push(format!("{name}: {e}")),
            }
        }
        Err(format!(
            "NVRTC could not be loaded (set TOLK_NVRTC to libnvrtc's path): {}",
            errors.join("; ")
        ))
    }

    fn from_library(lib: libloading::Library, path: &str) -> Result<Nvrtc, String> {
        // SAFETY (why sound): each symbol is looked up with the signature
        // NVRTC's header (nvrtc.h, stable since CUDA 7) declares for it;
        // the copied function pointers stay valid while `_lib` is held in
        // the same struct.
        unsafe {
            macro_rules! sym {
                ($name:literal) => {
                    *lib.get($name).map_err(|e| format!("{path}: {e}"))?
                };
            }
            Ok(Nvrtc {
                version: sym!(b"nvrtcVersion\0"),
                create: sym!(b"nvrtcCreateProgram\0"),
                compile: sym!(b"nvrtcCompileProgram\0"),
                ptx_size: sym!(b"nvrtcGetPTXSize\0"),
                ptx: sym!(b"nvrtcGetPTX\0"),
                log_size: sym!(b"nvrtcGetProgramLogSize\0"),
                log: sym!(b"nvrtcGetProgramLog\0"),
                destroy: sym!(b"nvrtcDestroyProgram\0"),
                error_string: sym!(b"nvrtcGetErrorString\0"),
                path: path.to_string(),
                _lib: lib,
            })
        }
    }

    /// NVRTC's version (major, minor).
    pub fn version(&self) -> (i32, i32) {
        let (mut major, mut minor) = (0, 0);
        // SAFETY (why sound): two valid out-pointers, as nvrtcVersion takes.
        unsafe { (self.version)(&mut major, &mut minor) };
        (major, minor)
    }

    fn error(&self, r: Result_) -> String {
        // SAFETY (why sound): nvrtcGetErrorString returns a static
        // NUL-terminated string for any value.
        let p = unsafe { (self.error_string)(r) };
        if p.is_null() {
            format!("NVRTC error {r}")
        } else {
            // SAFETY: non-null, NUL-terminated, static (above).
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    }

    /// Compiles CUDA C++ `source` (named `name` in messages) with
    /// `options` (NVRTC's, `--gpu-architecture=compute_90` among them) to
    /// PTX. `Err` holds NVRTC's error and its log.
    pub fn compile_ptx(
        &self,
        source: &str,
        name: &str,
        options: &[&str],
    ) -> Result<String, String> {
        let src = CString::new(source).map_err(|_| "a NUL byte in CUDA source".to_string())?;
        let cname = CString::new(name).map_err(|_| "a NUL byte in a program name".to_string())?;
        let opts: Vec<CString> = options
            .iter()
            .map(|o| CString::new(*o).map_err(|_| format!("a NUL byte in option {o:?}")))
            .collect::<Result<_, _>>()?;
        let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
        let mut prog: Program = std::ptr::null_mut();
        // SAFETY (why sound): `src` and `cname` are NUL-terminated and
        // outlive the call; no headers are passed (count 0, null arrays).
        let r = unsafe {
            (self.create)(
                &mut prog,
                src.as_ptr(),
                cname.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        if r != 0 {
            return Err(format!("nvrtcCreateProgram: {}", self.error(r)));
        }
        // SAFETY (why sound): `prog` was created above and is destroyed
        // once, at the end; the option array holds `opt_ptrs.len()` valid
        // NUL-terminated strings; the buffers handed to nvrtcGetPTX and
        // nvrtcGetProgramLog have the sizes NVRTC reported for them.
        unsafe {
            let r = (self.compile)(prog, opt_ptrs.len() as c_int, opt_ptrs.as_ptr());
            let result = if r != 0 {
                let mut n = 0usize;
                (self.log_size)(prog, &mut n);
                let mut log = vec![0u8; n.max(1)];
                (self.log)(prog, log.as_mut_ptr().cast());
                let log = String::from_utf8_lossy(&log)
                    .trim_end_matches('\0')
                    .to_string();
                Err(format!("NVRTC ({name}): {}\n{log}", self.error(r)))
            } else {
                let mut n = 0usize;
                (self.ptx_size)(prog, &mut n);
                let mut ptx = vec![0u8; n.max(1)];
                (self.ptx)(prog, ptx.as_mut_ptr().cast());
                while ptx.last() == Some(&0) {
                    ptx.pop();
                }
                String::from_utf8(ptx).map_err(|_| "NVRTC returned PTX that is not UTF-8".into())
            };
            (self.destroy)(&mut prog);
            result
        }
    }
}
