//! The real CUDA device, through `cudarc`'s driver and cuBLAS bindings
//! (feature `dynamic-loading`: the libraries are loaded at run time, so the
//! build needs no CUDA), and tolk's own NVRTC loader ([`crate::nvrtc`]) for
//! the PTX (the one the compile side already uses, with its library search
//! and options).
//!
//! [`Driver::open`] runs [`crate::cuda_probe::probe`] first: cudarc panics
//! when a library it needs is missing, so nothing here touches cudarc
//! before the probe found the driver, a device and NVRTC. cuBLAS is
//! loaded on the first product (a program of kernels alone does not need
//! it), and its absence is an error naming it.
//!
//! One primary context per device, one non-blocking stream: every call is
//! ordered on it; `copy_out` synchronizes. Launches are asynchronous.
//!
//! PTX goes through the disk cache ([`super::Device::module`]: keyed by
//! the source, the NVRTC options, the device model and capability, the
//! driver's and NVRTC's versions).
//!
//! Products: `cublasSgemmStridedBatched`/`Dgemm`, f16 and bf16 through
//! `cublasGemmStridedBatchedEx` (f32 accumulation).
//!
//! Not built yet: pinned host buffers.

use super::{DevPtr, DeviceApi, Gemm, KernelArg, ModuleId, Operand};
use cudarc::cublas::{result as blas, sys as blas_sys};
use cudarc::driver::{result as drv, sys};
use std::ffi::{c_void, CString};
use std::sync::{Mutex, OnceLock};

/// The real device `ordinal`.
pub struct Driver {
    ordinal: usize,
    model: String,
    /// `compute_XY` for NVRTC.
    arch: String,
    /// What its PTX depends on (the disk cache's key).
    target: crate::cache::CudaTarget,
    ctx: sys::CUcontext,
    stream: sys::CUstream,
    /// Loaded modules and their functions by name.
    modules: Mutex<Vec<(sys::CUmodule, Vec<(String, sys::CUfunction)>)>>,
    /// cuBLAS, created on the first product.
    blas: OnceLock<Result<usize, String>>,
}

// SAFETY: the handles are the driver's and cuBLAS's opaque pointers, valid
// from any thread once the context is made current (every method does);
// the module table is behind a mutex.
unsafe impl Send for Driver {}
// SAFETY: as for Send: no method mutates shared state outside the mutex
// and the OnceLock.
unsafe impl Sync for Driver {}

fn err(what: &str, e: impl std::fmt::Debug) -> String {
    format!("CUDA: {what} failed: {e:?}")
}

impl Driver {
    /// Opens device `ordinal`: the probe, then its primary context and a
    /// stream. `Err` says what is missing.
    pub fn open(ordinal: usize) -> Result<Driver, String> {
        let found = crate::cuda_probe::probe()?;
        drv::init().map_err(|e| err("cuInit", e))?;
        let count = drv::device::get_count().map_err(|e| err("cuDeviceGetCount", e))?;
        if ordinal >= count as usize {
            return Err(format!(
                "no CUDA device {ordinal} (this machine has {count})"
            ));
        }
        let dev = drv::device::get(ordinal as i32).map_err(|e| err("cuDeviceGet", e))?;
        let model = drv::device::get_name(dev).map_err(|e| err("cuDeviceGetName", e))?;
        let (major, minor) = if ordinal == 0 {
            found.capability
        } else {
            use sys::CUdevice_attribute::*;
            // SAFETY: `dev` came from cuDeviceGet.
            unsafe {
                (
                    drv::device::get_attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
                        .map_err(|e| err("cuDeviceGetAttribute", e))?,
                    drv::device::get_attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
                        .map_err(|e| err("cuDeviceGetAttribute", e))?,
                )
            }
        };
        // SAFETY: `dev` came from cuDeviceGet; the primary context is kept
        // for the process (never released: devices are opened once).
        let ctx = unsafe { drv::primary_ctx::retain(dev) }
            .map_err(|e| err("cuDevicePrimaryCtxRetain", e))?;
        // SAFETY: `ctx` is the live primary context just retained.
        unsafe { drv::ctx::set_current(ctx) }.map_err(|e| err("cuCtxSetCurrent", e))?;
        let stream = drv::stream::create(drv::stream::StreamKind::NonBlocking)
            .map_err(|e| err("cuStreamCreate", e))?;
        Ok(Driver {
            ordinal,
            target: crate::cache::CudaTarget {
                device: model.clone(),
                capability: (major, minor),
                driver: found.driver,
                nvrtc: found.nvrtc,
            },
            model,
            arch: format!("compute_{major}{minor}"),
            ctx,
            stream,
            modules: Mutex::default(),
            blas: OnceLock::new(),
        })
    }

    /// Makes this device's context current on the calling thread.
    fn current(&self) -> Result<(), String> {
        // SAFETY: `self.ctx` is the primary context retained in `open`,
        // never released.
        unsafe { drv::ctx::set_current(self.ctx) }.map_err(|e| err("cuCtxSetCurrent", e))
    }

    fn blas(&self) -> Result<blas_sys::cublasHandle_t, String> {
        let h = self.blas.get_or_init(|| {
            self.current()?;
            // cudarc panics when it cannot load cuBLAS: a message instead.
            let made = std::panic::catch_unwind(blas::create_handle)
                .map_err(|_| "no cuBLAS (libcublas could not be loaded)".to_string())?
                .map_err(|e| err("cublasCreate", e))?;
            // SAFETY: `made` is a fresh handle and `self.stream` a live
            // stream of the current context.
            unsafe { blas::set_stream(made, self.stream as _) }
                .map_err(|e| err("cublasSetStream", e))?;
            Ok(made as usize)
        });
        h.clone().map(|h| h as blas_sys::cublasHandle_t)
    }
}

/// cuBLAS's operation and leading dimension for a row-major `[rows, cols]`
/// operand (see [`Operand::blas_layout`]).
fn op(o: &Operand, rows: usize, cols: usize) -> Result<(blas_sys::cublasOperation_t, i32), String> {
    let (transposed, ld) = o
        .blas_layout(rows, cols)
        .ok_or_else(|| format!("CUDA: gemm operand layout {o:?} has no unit stride"))?;
    let op = if transposed {
        blas_sys::cublasOperation_t::CUBLAS_OP_T
    } else {
        blas_sys::cublasOperation_t::CUBLAS_OP_N
    };
    Ok((op, ld as i32))
}

impl DeviceApi for Driver {
    fn describe(&self) -> String {
        format!(
            "CUDA device {} ({}, {})",
            self.ordinal, self.model, self.arch
        )
    }

    fn allocate(&self, bytes: usize) -> Result<DevPtr, String> {
        self.current()?;
        // SAFETY: a plain allocation in the current context.
        let p = unsafe { drv::malloc_sync(bytes.max(1)) }.map_err(|e| err("cuMemAlloc", e))?;
        Ok(DevPtr(p))
    }

    fn free(&self, ptr: DevPtr, _bytes: usize) {
        if self.current().is_ok() {
            // The stream's work may still use it: wait first.
            // SAFETY: `self.stream` is live; `ptr` came from `allocate`
            // and is freed once (the allocator owns it).
            unsafe {
                let _ = drv::stream::synchronize(self.stream);
                let _ = drv::free_sync(ptr.0);
            }
        }
    }

    fn copy_in(&self, dst: DevPtr, src: &[u8]) -> Result<(), String> {
        self.current()?;
        // SAFETY: `dst` holds at least `src.len()` bytes (the allocator's
        // buffer for this value); the synchronous copy reads `src` before
        // returning.
        unsafe { drv::memcpy_htod_sync(dst.0, src) }.map_err(|e| err("cuMemcpyHtoD", e))
    }

    fn copy_out(&self, src: DevPtr, dst: &mut [u8]) -> Result<(), String> {
        self.current()?;
        // SAFETY: the stream's work is waited for first; `src` holds at
        // least `dst.len()` bytes.
        unsafe {
            drv::stream::synchronize(self.stream).map_err(|e| err("cuStreamSynchronize", e))?;
            drv::memcpy_dtoh_sync(dst, src.0).map_err(|e| err("cuMemcpyDtoH", e))
        }
    }

    fn copy_on_device(&self, dst: DevPtr, src: DevPtr, bytes: usize) -> Result<(), String> {
        self.current()?;
        // SAFETY: both buffers hold `bytes` from these addresses; the copy
        // is ordered on the stream.
        unsafe { drv::memcpy_dtod_async(dst.0, src.0, bytes, self.stream) }
            .map_err(|e| err("cuMemcpyDtoDAsync", e))
    }

    fn copy_from_peer(
        &self,
        dst: DevPtr,
        src_device: &dyn DeviceApi,
        src: DevPtr,
        bytes: usize,
    ) -> Result<(), String> {
        let peer = src_device
            .as_any()
            .downcast_ref::<Driver>()
            .ok_or("CUDA: a peer copy from a device of another kind")?;
        // The source's stream may still be writing it.
        peer.synchronize()?;
        self.current()?;
        // SAFETY: `dst` (this context) and `src` (the peer's) hold `bytes`
        // from these addresses; the contexts are the retained primary
        // ones; the copy is ordered on this device's stream.
        unsafe { drv::memcpy_peer_async(self.ctx, dst.0, peer.ctx, src.0, bytes, self.stream) }
            .map_err(|e| err("cuMemcpyPeerAsync", e))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn compile(&self, source: &str) -> Result<Vec<u8>, String> {
        let nvrtc = crate::nvrtc::Nvrtc::get()?;
        let opts = crate::cuda::nvrtc_options(&self.arch);
        let refs: Vec<&str> = opts.iter().map(String::as_str).collect();
        Ok(nvrtc.compile_ptx(source, "tolk.cu", &refs)?.into_bytes())
    }

    fn image_target(&self) -> Option<crate::cache::CudaTarget> {
        Some(self.target.clone())
    }

    fn load_image(&self, image: &[u8], source: &str) -> Result<ModuleId, String> {
        let ptx = CString::new(image).map_err(|e| format!("CUDA: PTX with a NUL byte: {e}"))?;
        self.current()?;
        // SAFETY: `ptx` is a NUL-terminated PTX image, read during the call.
        let module = unsafe { drv::module::load_data(ptx.as_ptr() as *const c_void) }
            .map_err(|e| err("cuModuleLoadData", e))?;
        let mut functions = Vec::new();
        for name in super::emulated::kernel_names(source) {
            let c = CString::new(name.clone()).unwrap();
            // SAFETY: `module` was just loaded and is never unloaded.
            let f = unsafe { drv::module::get_function(module, c) }
                .map_err(|e| err(&format!("cuModuleGetFunction({name})"), e))?;
            functions.push((name, f));
        }
        let mut m = self.modules.lock().unwrap();
        m.push((module, functions));
        Ok(ModuleId(m.len() - 1))
    }

    fn launch(
        &self,
        module: ModuleId,
        kernel: &str,
        grid: u32,
        block: u32,
        args: &[KernelArg],
    ) -> Result<(), String> {
        let f = {
            let m = self.modules.lock().unwrap();
            m.get(module.0)
                .and_then(|(_, fs)| fs.iter().find(|(n, _)| n == kernel))
                .map(|(_, f)| *f)
                .ok_or_else(|| format!("CUDA: no kernel {kernel} in module {}", module.0))?
        };
        let mut values: Vec<u64> = args
            .iter()
            .map(|a| match *a {
                KernelArg::Ptr(p) => p.0,
                KernelArg::I64(v) => v as u64,
            })
            .collect();
        let mut params: Vec<*mut c_void> = values
            .iter_mut()
            .map(|v| v as *mut u64 as *mut c_void)
            .collect();
        self.current()?;
        // SAFETY: `f` is a function of a loaded module whose parameters are
        // `void *` buffers then `int64_t`s, one 8-byte value per argument
        // as `params` points to; the values are read by cuLaunchKernel
        // before it returns; the buffers are live device allocations.
        unsafe { drv::launch_kernel(f, (grid, 1, 1), (block, 1, 1), 0, self.stream, &mut params) }
            .map_err(|e| err(&format!("cuLaunchKernel({kernel})"), e))
    }

    fn gemm(&self, g: &Gemm) -> Result<(), String> {
        let handle = self.blas()?;
        self.current()?;
        // Row-major C = A B is column-major Cᵀ = Bᵀ Aᵀ: cuBLAS computes an
        // n × m column-major matrix (ldc = n) from B (first) and A.
        let (op_b, ldb) = op(&g.b, g.k, g.n)?;
        let (op_a, lda) = op(&g.a, g.m, g.k)?;
        let (m, n, k) = (g.n as i32, g.m as i32, g.k as i32);
        let (sa, sb, sc) = (
            g.a.batch_stride as i64,
            g.b.batch_stride as i64,
            (g.m * g.n) as i64,
        );
        match g.dtype {
            nx::DType::F32 => {
                let (alpha, beta) = (1.0f32, 0.0f32);
                // SAFETY: A, B and C are live device buffers holding every
                // element these dimensions and strides address (checked by
                // the exec layer); alpha and beta are host scalars read
                // during the call.
                unsafe {
                    blas::sgemm_strided_batched(
                        handle,
                        op_b,
                        op_a,
                        m,
                        n,
                        k,
                        &alpha,
                        g.b.ptr.0 as *const f32,
                        ldb,
                        sb,
                        g.a.ptr.0 as *const f32,
                        lda,
                        sa,
                        &beta,
                        g.c.0 as *mut f32,
                        m,
                        sc,
                        g.batch as i32,
                    )
                }
                .map_err(|e| err("cublasSgemmStridedBatched", e))
            }
            nx::DType::F64 => {
                let (alpha, beta) = (1.0f64, 0.0f64);
                // SAFETY: as for f32.
                unsafe {
                    blas::dgemm_strided_batched(
                        handle,
                        op_b,
                        op_a,
                        m,
                        n,
                        k,
                        &alpha,
                        g.b.ptr.0 as *const f64,
                        ldb,
                        sb,
                        g.a.ptr.0 as *const f64,
                        lda,
                        sa,
                        &beta,
                        g.c.0 as *mut f64,
                        m,
                        sc,
                        g.batch as i32,
                    )
                }
                .map_err(|e| err("cublasDgemmStridedBatched", e))
            }
            nx::DType::F16 | nx::DType::BF16 => {
                // Half operands and result, f32 accumulation (as nx's
                // eager product accumulates them).
                let ty = if g.dtype == nx::DType::F16 {
                    blas_sys::cudaDataType::CUDA_R_16F
                } else {
                    blas_sys::cudaDataType::CUDA_R_16BF
                };
                let (alpha, beta) = (1.0f32, 0.0f32);
                // SAFETY: as for f32; alpha and beta are f32 as the
                // compute type CUBLAS_COMPUTE_32F asks.
                unsafe {
                    blas::gemm_strided_batched_ex(
                        handle,
                        op_b,
                        op_a,
                        m,
                        n,
                        k,
                        &alpha as *const f32 as *const c_void,
                        g.b.ptr.0 as *const c_void,
                        ty,
                        ldb,
                        sb,
                        g.a.ptr.0 as *const c_void,
                        ty,
                        lda,
                        sa,
                        &beta as *const f32 as *const c_void,
                        g.c.0 as *mut c_void,
                        ty,
                        m,
                        sc,
                        g.batch as i32,
                        blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                        blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                    )
                }
                .map_err(|e| err("cublasGemmStridedBatchedEx", e))
            }
            d => Err(format!(
                "products of {d:?} on CUDA are not built yet; f16, bf16, f32 and f64 are"
            )),
        }
    }

    fn synchronize(&self) -> Result<(), String> {
        self.current()?;
        // SAFETY: `self.stream` is live.
        unsafe { drv::stream::synchronize(self.stream) }.map_err(|e| err("cuStreamSynchronize", e))
    }
}
