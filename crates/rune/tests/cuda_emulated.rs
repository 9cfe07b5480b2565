//! `jit` on `"CUDA"`, run on the emulated device (`tolk::device::emulated`:
//! the CUDA dialect's source compiled by the host's C++ compiler, device
//! memory the host may touch only through copies, gemm answered by nx).
//! With `RUNE_TEST_REAL_CUDA=1` the same tests run against the real driver
//! (`bench/gpu_check.sh` does that on a GPU machine).
//!
//! - results against eager: elementwise and movement work bit for bit;
//!   reductions (every one a kernel on CUDA: one thread per output, f64
//!   accumulators) within 8 epsilons of `1 + |eager|`, as `jit_op_table`'s
//!   fused reductions; products bit for bit on the emulator (nx answers
//!   its gemm), within 8 epsilons × k on a GPU (cuBLAS's order);
//! - the residency rules with exact transfer counts (`jit_stats`);
//! - the caching allocator's reuse and the resident budget;
//! - a block's threads meeting at `__syncthreads` (the emulator runs them
//!   as host threads);
//! - a missing transfer: the host reading device memory without a copy is
//!   reported by the emulator (in a child process: it aborts);
//! - the op table's entries, each run on the device or refused naming the
//!   device (a `JitError` at trace time).
//!
//! The transfer counters are process-wide, so every test holds `LOCK`.

#[path = "common/bits.rs"]
mod bits;
#[path = "../../nx/tests/common/mod.rs"]
#[allow(dead_code)]
mod common;
use common::table;
#[path = "../../nx/tests/common/panics.rs"]
mod panics;

#[path = "../examples/common/mlp_step.rs"]
mod mlp_step;
#[path = "../examples/common/spirals.rs"]
#[allow(dead_code)]
mod spirals;
#[path = "../examples/common/splitmix.rs"]
mod splitmix;

use bits::same_bits;
use rune::prelude::*;
use rune::{jit_stats, jit_with, reset_jit_stats, JitOpts};
use std::sync::{Arc, Mutex, MutexGuard};

static LOCK: Mutex<()> = Mutex::new(());

fn real() -> bool {
    std::env::var("RUNE_TEST_REAL_CUDA").is_ok_and(|v| v == "1")
}

/// Serializes the tests and installs the emulator (unless the real driver
/// is asked for).
fn setup() -> MutexGuard<'static, ()> {
    let g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !real() {
        tolk::device::emulated::install_for_tests();
    }
    g
}

fn cuda() -> JitOpts {
    JitOpts {
        device: "CUDA".into(),
        donate: false,
    }
}

fn donating() -> JitOpts {
    JitOpts {
        device: "CUDA".into(),
        donate: true,
    }
}

fn device() -> Arc<tolk::device::Device> {
    tolk::device::open("CUDA").unwrap()
}

fn ramp(n: usize, scale: f32) -> Tensor {
    let v: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.37).sin() * scale).collect();
    Tensor::from_slice(&v, &[n])
}

/// Within `tol` epsilons of `1 + |want|`, elementwise.
fn close(got: &Tensor, want: &Tensor, tol: f64) -> Result<(), String> {
    let eps = match want.dtype() {
        DType::F16 => 9.8e-4,
        DType::BF16 => 7.8e-3,
        DType::F32 => f32::EPSILON as f64,
        DType::F64 => f64::EPSILON,
        _ => return same_bits(got, want),
    };
    if got.shape() != want.shape() || got.dtype() != want.dtype() {
        return same_bits(got, want);
    }
    let g = got.cast(DType::F64).to_vec::<f64>();
    let w = want.cast(DType::F64).to_vec::<f64>();
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        if !(a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= tol * eps * (1.0 + b.abs())) {
            return Err(format!(
                "element {i}: device {a:e}, eager {b:e} (beyond {tol} eps)"
            ));
        }
    }
    Ok(())
}

#[test]
fn elementwise_work_equals_eager_bit_for_bit() {
    let _g = setup();
    let f = |x: &Tensor| {
        (
            x.exp() * x + 1.0,
            x.tanh().sin(),
            x.sigmoid() / (x.abs() + 0.5),
        )
    };
    let jf = jit_with(f, cuda());
    for n in [1, 7, 256, 1000, 70_000] {
        let x = ramp(n, 3.0);
        let (a, b, c) = jf.call(&x);
        let (ea, eb, ec) = f(&x);
        same_bits(&a, &ea).unwrap();
        same_bits(&b, &eb).unwrap();
        same_bits(&c, &ec).unwrap();
    }
    // f64, integers, casts, a broadcast and a transpose.
    let g = |(x, y): &(Tensor, Tensor)| {
        let xt = x.transpose();
        (
            (&xt * &xt).log1p() + y,
            x.cast(DType::I32) * 3.0,
            x.cast(DType::F16),
        )
    };
    let x = Tensor::from_slice(
        &(0..12).map(|i| i as f64 * 0.7 - 2.0).collect::<Vec<_>>(),
        &[3, 4],
    );
    let y = Tensor::from_slice(&[1.0f64, 2.0, 3.0], &[3]);
    let got = jit_with(g, cuda()).call(&(x.clone(), y.clone()));
    let want = g(&(x, y));
    same_bits(&got.0, &want.0).unwrap();
    same_bits(&got.1, &want.1).unwrap();
    same_bits(&got.2, &want.2).unwrap();
    assert_eq!(jf.trace_count(), 5);
}

#[test]
fn reductions_are_kernels_within_8_eps() {
    let _g = setup();
    let f = |x: &Tensor| {
        (
            x.sum(&[1], false),
            x.max(&[0], true),
            (x * 2.0).exp().mean(&[1], false),
            x.sum_all(),
        )
    };
    let x = Tensor::from_slice(
        &(0..600)
            .map(|i| ((i * 7919) % 1000) as f32 / 100.0 - 5.0)
            .collect::<Vec<_>>(),
        &[20, 30],
    );
    let got = jit_with(f, cuda()).call(&x);
    let want = f(&x);
    close(&got.0, &want.0, 8.0).unwrap();
    same_bits(&got.1, &want.1).unwrap(); // max is exact
    close(&got.2, &want.2, 8.0).unwrap();
    close(&got.3, &want.3, 8.0).unwrap();
}

#[test]
fn products_run_through_the_device_gemm() {
    let _g = setup();
    let bound = |k: usize| if real() { 8.0 * k as f64 } else { 0.0 };
    let check = |got: &Tensor, want: &Tensor, k: usize| {
        if bound(k) == 0.0 {
            same_bits(got, want).unwrap()
        } else {
            close(got, want, bound(k)).unwrap()
        }
    };
    let a = Tensor::from_slice(
        &(0..35).map(|i| (i as f32 * 0.3).cos()).collect::<Vec<_>>(),
        &[5, 7],
    );
    let b = Tensor::from_slice(
        &(0..28).map(|i| (i as f32 * 0.7).sin()).collect::<Vec<_>>(),
        &[7, 4],
    );
    // A product, a transposed operand (a BLAS transpose, no copy), and
    // elementwise work on both sides.
    let f = |(a, b): &(Tensor, Tensor)| {
        let p = (a * 2.0).matmul(b);
        let q = a.transpose().transpose().matmul(&(b + 1.0));
        let r = a.matmul(&a.transpose());
        ((p.tanh()), q, r)
    };
    let got = jit_with(f, cuda()).call(&(a.clone(), b.clone()));
    let want = f(&(a.clone(), b.clone()));
    check(&got.0, &want.0, 7);
    check(&got.1, &want.1, 7);
    check(&got.2, &want.2, 7);
    // Batched, f64.
    let x = Tensor::from_slice(
        &(0..60).map(|i| i as f64 * 0.01).collect::<Vec<_>>(),
        &[3, 4, 5],
    );
    let y = Tensor::from_slice(
        &(0..45).map(|i| 1.0 - i as f64 * 0.02).collect::<Vec<_>>(),
        &[3, 5, 3],
    );
    let g = |(x, y): &(Tensor, Tensor)| x.matmul(y);
    let got = jit_with(g, cuda()).call(&(x.clone(), y.clone()));
    check(&got, &g(&(x, y)), 5);
}

#[test]
fn grad_of_an_mlp_loss_runs_on_the_device() {
    let _g = setup();
    let w = Tensor::from_slice(
        &(0..12)
            .map(|i| (i as f32 * 0.41).sin() * 0.5)
            .collect::<Vec<_>>(),
        &[3, 4],
    );
    let x = Tensor::from_slice(
        &(0..24).map(|i| (i as f32 * 0.13).cos()).collect::<Vec<_>>(),
        &[8, 3],
    );
    let loss = |(w, x): &(Tensor, Tensor)| {
        rune::grad(|w: &Tensor| x.matmul(w).tanh().square().mean_all(), w)
    };
    let got = jit_with(loss, cuda()).call(&(w.clone(), x.clone()));
    let want = loss(&(w, x));
    close(&got, &want, if real() { 64.0 } else { 8.0 }).unwrap();
}

#[test]
fn residency_transfers_are_counted_exactly() {
    let _g = setup();
    let n = 1024;
    let bytes = (n * 4) as u64;
    let step = jit_with(|x: &Tensor| x * 0.5 + 1.0, cuda());
    let x = ramp(n, 1.0);
    step.call(&x); // compile outside the counted calls
    reset_jit_stats();
    let base = jit_stats().resident_bytes;
    // Inputs are copied in on every call; the output stays on the device.
    let y = step.call(&x);
    let s = jit_stats();
    assert_eq!((s.bytes_to_device, s.bytes_from_device), (bytes, 0));
    assert_eq!(s.resident_bytes - base, bytes);
    // Metadata never transfers.
    assert_eq!((y.shape().to_vec(), y.dtype()), (vec![n], DType::F32));
    assert_eq!(jit_stats().bytes_from_device, 0);
    // An unread output fed back seeds the input with no transfer.
    let z = step.call(&y);
    let s = jit_stats();
    assert_eq!((s.bytes_to_device, s.bytes_from_device), (bytes, 0));
    assert_eq!(s.resident_bytes - base, 2 * bytes);
    // Reading moves it to the host once, for good.
    let want = (&x * 0.5 + 1.0) * 0.5 + 1.0;
    same_bits(&z, &want).unwrap();
    z.to_vec::<f32>();
    let s = jit_stats();
    assert_eq!(s.bytes_from_device, bytes);
    assert_eq!(s.resident_bytes - base, bytes);
    // A read output fed back is uploaded again; dropping y releases it.
    step.call(&z);
    assert_eq!(jit_stats().bytes_to_device, 2 * bytes);
    drop(y);
    assert_eq!(jit_stats().resident_bytes, base);
    // Writebacks: the value is read to the host and assigned.
    let acc = jit_with(
        |(s, x): &(Tensor, Tensor)| {
            s.assign(&(s + x));
            s.sum_all()
        },
        cuda(),
    );
    let s0 = Tensor::zeros(&[n], DType::F32);
    acc.call(&(s0.clone(), x.clone()));
    acc.call(&(s0.clone(), x.clone()));
    same_bits(&s0, &(&x + &x)).unwrap();
    reset_jit_stats();
    let total = acc.call(&(s0.clone(), x.clone()));
    let s = jit_stats();
    assert_eq!(s.bytes_to_device, 2 * bytes, "both leaves copied in");
    assert_eq!(s.bytes_from_device, bytes, "the writeback read back");
    close(&total, &(&x * 3.0).sum_all(), 8.0).unwrap();
}

#[test]
fn donation_releases_the_buffers_and_the_allocator_reuses_them() {
    let _g = setup();
    let n = 4096;
    let step = jit_with(|x: &Tensor| x * 0.99 + 0.01, donating());
    let mut state = step.call(&ramp(n, 1.0));
    let dev = device();
    let before = dev.alloc_stats();
    reset_jit_stats();
    for _ in 0..20 {
        state = step.call(&state);
    }
    let after = dev.alloc_stats();
    // A state-to-state loop takes its buffers from the cache: after the
    // first steps nothing new reaches the device.
    assert!(
        after.device_allocations - before.device_allocations <= 2,
        "{before:?} -> {after:?}"
    );
    assert!(
        after.reused - before.reused >= 18,
        "{before:?} -> {after:?}"
    );
    let s = jit_stats();
    assert_eq!((s.bytes_to_device, s.bytes_from_device), (0, 0));
    // The donated handle is unusable.
    let old = state.clone();
    let next = step.call(&state);
    let m = panics::panic_message(|| drop(old.to_vec::<f32>()));
    assert!(m.contains("donated"), "{m}");
    next.to_vec::<f32>();
    // The budget: past it, the cached buffers go back to the device.
    std::env::set_var("RUNE_JIT_RESIDENT_BUDGET", "1");
    let f = jit_with(|x: &Tensor| x + 1.0, cuda());
    drop(f.call(&ramp(n, 1.0)));
    assert!(dev.alloc_stats().cached_bytes > 0);
    drop(f.call(&ramp(n, 1.0)));
    std::env::remove_var("RUNE_JIT_RESIDENT_BUDGET");
    let st = dev.alloc_stats();
    assert!(st.cached_bytes <= 2 * (n as u64) * 4 + 4096, "{st:?}");
}

#[test]
fn a_block_of_threads_meets_at_syncthreads() {
    let _g = setup();
    // A block-wide tree sum in shared memory: what a fast reduction needs
    // of the device (the emulator runs the block's threads as host threads).
    let src = r#"
extern "C" __global__ void __launch_bounds__(64) block_sum(void *b0, void *b1) {
  __shared__ float s[64];
  const float *x = (const float *)b1;
  float *out = (float *)b0;
  unsigned t = threadIdx.x;
  s[t] = x[blockIdx.x * 64 + t];
  __syncthreads();
  for (unsigned w = 32; w > 0; w >>= 1) {
    if (t < w) s[t] += s[t + w];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}
"#;
    let dev = device();
    let m = dev.module(src).unwrap();
    let x: Vec<f32> = (0..128).map(|i| i as f32).collect();
    let xb = dev
        .upload(&x.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>())
        .unwrap();
    let out = dev.alloc(8).unwrap();
    use tolk::device::KernelArg::Ptr;
    dev.api()
        .launch(m, "block_sum", 2, 64, &[Ptr(out.ptr()), Ptr(xb.ptr())])
        .unwrap();
    let mut bytes = [0u8; 8];
    dev.api().copy_out(out.ptr(), &mut bytes).unwrap();
    let got = [
        f32::from_le_bytes(bytes[0..4].try_into().unwrap()),
        f32::from_le_bytes(bytes[4..8].try_into().unwrap()),
    ];
    assert_eq!(
        got,
        [(0..64).sum::<i32>() as f32, (64..128).sum::<i32>() as f32]
    );
}

/// The child of `a_host_read_without_a_copy_is_reported`: reads device
/// memory directly (run only in that child).
#[test]
#[ignore]
fn child_reads_device_memory_without_a_copy() {
    if std::env::var("RUNE_TEST_CHILD").is_err() {
        return;
    }
    let _g = setup();
    let dev = device();
    let b = dev.upload(&[1, 2, 3, 4]).unwrap();
    // SAFETY: deliberately wrong: the emulator must catch this read.
    let v = unsafe { std::ptr::read_volatile(b.ptr().0 as *const u8) };
    println!("read {v} without a fault");
}

#[test]
fn a_host_read_without_a_copy_is_reported() {
    if real() {
        return; // a real device pointer is not host memory at all
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_reads_device_memory_without_a_copy",
            "--ignored",
            "--nocapture",
        ])
        .env("RUNE_TEST_CHILD", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the child survived: {err}");
    assert!(
        err.contains("the host touched emulated device memory") && err.contains("without a copy"),
        "{err}"
    );
}

#[test]
fn operations_not_on_the_device_yet_are_a_jit_error_naming_it() {
    let _g = setup();
    let a = Tensor::from_slice(&[1.0f32, -2.0, 3.0, 0.5, 4.0, -1.0], &[2, 3]);
    let e = jit_with(|x: &Tensor| x.argsort(1, false), cuda())
        .try_call(&a)
        .err()
        .expect("refused");
    assert!(
        e.message().contains("argsort") && e.message().contains("\"CUDA\""),
        "{}",
        e.message()
    );
}

/// Gathers and scatter-adds by input or captured indices are kernels on
/// the device, equal to eager bit for bit (a scatter adds each element's
/// updates in eager's order, one thread per element of the updates' last
/// dim); out-of-range indices raise eager's error before anything runs.
#[test]
fn gathers_and_scatters_are_kernels_equal_to_eager() {
    let _g = setup();
    let x = Tensor::from_slice(
        &(0..60)
            .map(|i| ((i * 37) % 17) as f32 * 0.25 - 2.0)
            .collect::<Vec<_>>(),
        &[6, 10],
    );
    let idx = Tensor::from_slice(&[5i32, 0, -1, 2, 2, 0, 3], &[7]);
    // A gather fused with its neighbours: rows picked, then a sum over them.
    let f = |(x, i): &(Tensor, Tensor)| (x.take(i, 0) * 2.0, (x.take(i, 1).exp()).sum(&[1], false));
    let got = jit_with(f, cuda()).call(&(x.clone(), idx.clone()));
    let want = f(&(x.clone(), idx.clone()));
    same_bits(&got.0, &want.0).unwrap();
    close(&got.1, &want.1, 8.0).unwrap();
    // Captured indices; the gradient of a gather is a scatter-add.
    let cap = idx.clone();
    let loss = move |x: &Tensor| (x.take(&cap, 0).sin() * x.take(&cap, 0)).sum_all();
    let g = move |x: &Tensor| rune::grad(&loss, x);
    let got = jit_with(g.clone(), cuda()).call(&x);
    same_bits(&got, &g(&x)).unwrap();
    // segment_sum (scattered axis 0, repeated ids: one thread per column)
    // and index_add along the last axis (one thread for all).
    let ids = Tensor::from_slice(&[0i64, 2, 2, 1, 0, 2], &[6]);
    let h = |(x, ids): &(Tensor, Tensor)| {
        (
            nx::segment_sum(&(x * 1.5), ids, 4),
            x.index_add(
                1,
                &Tensor::from_slice(&[9i32, 0, 9, -1], &[4]),
                &x.narrow(1, 0, 4),
            ),
        )
    };
    let got = jit_with(h, cuda()).call(&(x.clone(), ids.clone()));
    let want = h(&(x.clone(), ids));
    same_bits(&got.0, &want.0).unwrap();
    same_bits(&got.1, &want.1).unwrap();
    // Out of range: eager's message, at every call.
    let jf = jit_with(f, cuda());
    let bad = Tensor::from_slice(&[1i32, 6], &[2]);
    let m = panics::panic_message(|| drop(jf.call(&(x.clone(), bad.clone()))));
    let e = panics::panic_message(|| drop(f(&(x.clone(), bad.clone()))));
    assert_eq!(m, e);
    let m = panics::panic_message(|| drop(jf.call(&(x.clone(), bad.clone()))));
    assert_eq!(m, e);
}

/// Pools whose windows become maps or reductions run on the device:
/// average pools of any geometry and their gradients (bit for bit), max
/// pools over tiling windows and their gradients (a reduction: within 8
/// epsilons; the gradient's masks exactly).
#[test]
fn pools_are_kernels_on_the_device() {
    let _g = setup();
    let x = Tensor::from_slice(
        &(0..2 * 3 * 8 * 6)
            .map(|i| ((i * 53) % 29) as f32 * 0.125 - 1.5)
            .collect::<Vec<_>>(),
        &[2, 3, 8, 6],
    );
    let avg = |x: &Tensor| {
        let a = x.avg_pool(&[3, 3], &[2, 2], nx::Padding::Same);
        let g = rune::grad(
            |x: &Tensor| {
                x.avg_pool(&[2, 3], &[1, 2], nx::Padding::Valid)
                    .square()
                    .sum_all()
            },
            x,
        );
        (a, g)
    };
    let got = jit_with(avg, cuda()).call(&x);
    let want = avg(&x);
    same_bits(&got.0, &want.0).unwrap();
    same_bits(&got.1, &want.1).unwrap();
    let max = |x: &Tensor| {
        let m = x.max_pool(&[2, 2], &[2, 2], nx::Padding::Valid);
        let g = rune::grad(
            |x: &Tensor| {
                x.max_pool(&[2, 3], &[2, 3], nx::Padding::Valid)
                    .exp()
                    .sum_all()
            },
            x,
        );
        (m, g)
    };
    let got = jit_with(max, cuda()).call(&x);
    let want = max(&x);
    close(&got.0, &want.0, 8.0).unwrap();
    same_bits(&got.1, &want.1).unwrap();
}

/// Values for window tests: ties, signed zeros, NaN and infinities among
/// ordinary values, in an order that puts them at every window position.
fn special(shape: &[usize], k: usize) -> Tensor {
    const V: [f32; 12] = [
        1.5,
        -0.0,
        0.0,
        2.0,
        f32::NAN,
        f32::NEG_INFINITY,
        2.0,
        -1.25,
        f32::INFINITY,
        0.0,
        -0.0,
        1.5,
    ];
    let n: usize = shape.iter().product();
    // Mostly ordinary values (so most windows have a finite maximum),
    // every special one somewhere.
    let v: Vec<f32> = (0..n)
        .map(|i| {
            let j = (i * 7 + k * 5) % 23;
            if j < V.len() {
                V[j]
            } else {
                ((i * 31 + k) % 9) as f32 * 0.5 - 2.0
            }
        })
        .collect();
    Tensor::from_slice(&v, shape)
}

/// The max pools the CPU leaves to nx's kernel (padded, overlapping at a
/// stride, more than 32 points per window) and large sum windows are
/// kernels of their own on the device: each equal to eager bit for bit
/// (ties keep the first, -0.0 before +0.0, NaN, infinities, windows of
/// padding only giving the lowest value), over NCHW and NHWC (a
/// transposed pool), 1-D and 3-D windows, f32, f64, f16, bf16 and i32;
/// and their gradients (the first maximum of each window, a scatter-add
/// and a gather by those computed indices), bit for bit too.
#[test]
fn padded_max_pools_and_their_gradients_equal_eager_bit_for_bit() {
    use nx::Padding::{Explicit, Same, Valid};
    let _g = setup();
    type Pool = (
        &'static str,
        Vec<usize>,
        Vec<usize>,
        Vec<usize>,
        nx::Padding,
    );
    let pools: Vec<Pool> = vec![
        ("3x3/2 SAME", vec![2, 3, 9, 7], vec![3, 3], vec![2, 2], Same),
        ("2x2/1 SAME", vec![1, 2, 6, 5], vec![2, 2], vec![1, 1], Same),
        (
            "3x2/2x1 explicit",
            vec![2, 2, 5, 6],
            vec![3, 2],
            vec![2, 1],
            Explicit(vec![(1, 2), (0, 1)]),
        ),
        (
            "3x3/2 VALID (overlapping)",
            vec![1, 3, 9, 9],
            vec![3, 3],
            vec![2, 2],
            Valid,
        ),
        (
            "6x6/1 VALID (36 points)",
            vec![1, 2, 8, 8],
            vec![6, 6],
            vec![1, 1],
            Valid,
        ),
        (
            "padding-only windows",
            vec![1, 1, 2, 3],
            vec![2, 2],
            vec![2, 2],
            Explicit(vec![(2, 2), (3, 2)]),
        ),
        (
            "1-D 4/3",
            vec![2, 3, 10],
            vec![4],
            vec![3],
            Explicit(vec![(2, 1)]),
        ),
        (
            "3-D",
            vec![1, 2, 4, 5, 3],
            vec![2, 3, 2],
            vec![1, 2, 1],
            Same,
        ),
    ];
    for (i, (what, shape, w, st, pad)) in pools.iter().enumerate() {
        let x = special(shape, i);
        let f = |x: &Tensor| {
            let m = x.max_pool(w, st, pad.clone());
            let g = rune::grad(
                |x: &Tensor| (x.max_pool(w, st, pad.clone()) * 1.5).sin().sum_all(),
                x,
            );
            let tangent = x.cos();
            let (_, jv) = rune::jvp(|x: &Tensor| x.max_pool(w, st, pad.clone()), x, &tangent);
            (m, g, jv)
        };
        let got = jit_with(f, cuda()).call(&x);
        let want = f(&x);
        for (k, (a, b)) in [(&got.0, &want.0), (&got.1, &want.1), (&got.2, &want.2)]
            .into_iter()
            .enumerate()
        {
            same_bits(a, b).unwrap_or_else(|e| panic!("{what}, output {k}: {e}"));
        }
        for dt in [DType::F64, DType::F16, DType::BF16, DType::I32] {
            let xd = if dt == DType::I32 {
                // Ties, the type's lowest value (the padding's) and others.
                let v: Vec<i32> = (0..x.numel())
                    .map(|j| match (j * 7 + i) % 9 {
                        0 => i32::MIN,
                        r => r as i32 - 4,
                    })
                    .collect();
                Tensor::from_slice(&v, shape)
            } else {
                x.cast(dt)
            };
            let f = |x: &Tensor| x.max_pool(w, st, pad.clone());
            let got = jit_with(f, cuda()).call(&xd);
            same_bits(&got, &f(&xd)).unwrap_or_else(|e| panic!("{what}, {dt}: {e}"));
        }
        // NHWC: the same pool over a transposed input.
        if shape.len() == 4 {
            let nhwc = x.permute(&[0, 2, 3, 1]).contiguous();
            let f = |x: &Tensor| {
                x.permute(&[0, 3, 1, 2])
                    .max_pool(w, st, pad.clone())
                    .permute(&[0, 2, 3, 1])
            };
            let got = jit_with(f, cuda()).call(&nhwc);
            same_bits(&got, &f(&nhwc)).unwrap_or_else(|e| panic!("{what}, NHWC: {e}"));
        }
    }
    // Sum windows of more than 32 points (a 6x6 average pool, forward and
    // backward): kernels of their own, eager's order of additions.
    let x = data(&[2, 3, 9, 8], 3);
    let f = |x: &Tensor| {
        let a = x.avg_pool(&[6, 6], &[1, 2], Same);
        let g = rune::grad(
            |x: &Tensor| x.avg_pool(&[6, 6], &[3, 3], Valid).square().sum_all(),
            x,
        );
        (a, g)
    };
    let got = jit_with(f, cuda()).call(&x);
    let want = f(&x);
    same_bits(&got.0, &want.0).unwrap();
    same_bits(&got.1, &want.1).unwrap();
}

/// Gathers and scatter-adds by indices the program computes run on the
/// device, each after a check kernel whose flag is read back (4 bytes):
/// `take`, `take_along_axis`, `scatter_add`, `index_add`, `segment_sum`
/// and the gradient of a take, with I32 and I64 indices at both bounds
/// and negative; bit for bit with eager. A computed index out of range
/// raises eager's message, for a gather, a scatter-add and a gather inside
/// a staged loop's body.
#[test]
fn gathers_and_scatters_by_computed_indices_equal_eager() {
    let _g = setup();
    let x = data(&[6, 4], 1);
    let u = data(&[3, 6], 2);
    // Computed: i - 6 over 0..12 is -6..6, both bounds of an axis of 6.
    let i32s = Tensor::from_slice(&[0i32, 11, 3, 6, 7, 10], &[6]);
    let f = |(x, u, i): &(Tensor, Tensor, Tensor)| {
        let j = i - 6.0;
        let t0 = x.take(&j, 0);
        let t1 = x.take(&(i % 4.0), 1);
        let along = x.take_along_axis(&j.reshape(&[6, 1]).broadcast_to(&[6, 4]), 0);
        let sc = x
            .transpose()
            .scatter_add(1, &j.reshape(&[1, 6]).broadcast_to(&[3, 6]), u);
        let ia = x.index_add(0, &j, &(x * 2.0));
        let seg = nx::segment_sum(x, &(i % 3.0), 3);
        let g = rune::grad(|x: &Tensor| x.take(&j, 0).exp().sum_all(), x);
        (t0, t1, along, sc, ia, seg, g)
    };
    for idx in [i32s.clone(), i32s.cast(DType::I64)] {
        let args = (x.clone(), u.clone(), idx);
        let jf = jit_with(f, cuda());
        jf.call(&args);
        reset_jit_stats();
        let got = jf.call(&args);
        // The outputs stay on the device until read below: during the call
        // only the checks' flags came back, 4 bytes each.
        let flags = jit_stats().bytes_from_device;
        assert!(flags > 0 && flags % 4 == 0 && flags <= 4 * 16, "{flags}");
        let want = f(&args);
        for (k, (a, b)) in got.leaves().iter().zip(want.leaves()).enumerate() {
            same_bits(a, &b).unwrap_or_else(|e| panic!("output {k}: {e}"));
        }
    }
    // Out of range: eager's message, before the results are used.
    let gather = |(x, i): &(Tensor, Tensor)| x.take(&(i - 6.0), 0).sum_all();
    let bad = (x.clone(), Tensor::from_slice(&[3i32, 12, 13], &[3]));
    let m = panics::panic_message(|| drop(jit_with(gather, cuda()).call(&bad)));
    assert_eq!(m, panics::panic_message(|| drop(gather(&bad))));
    assert!(m.contains("index 6 is out of bounds"), "{m}");
    let low = (x.clone(), Tensor::from_slice(&[-1i32], &[1]));
    let m = panics::panic_message(|| drop(jit_with(gather, cuda()).call(&low)));
    assert_eq!(m, panics::panic_message(|| drop(gather(&low))));
    // Inside a staged loop: indices computed in the body from a carry,
    // checked on the device at every step; out of range at a later step,
    // eager's message.
    let looped = |(tb, i0, xs): &(Tensor, Tensor, Tensor)| {
        rune::scan(
            |(i, c): &(Tensor, Tensor), x: &Tensor| {
                let j = (i * 2.0) - 3.0;
                ((i + 1.0, c + tb.take(&j, 0).sum(&[0], false) * x), ())
            },
            &(i0.clone(), Tensor::zeros(&[4], DType::F32)),
            xs,
        )
        .0
         .1
    };
    let xs = data(&[3, 4], 6);
    let args = (x.clone(), Tensor::from_slice(&[0i32, 2], &[2]), xs.clone());
    let got = jit_with(looped, cuda()).call(&args);
    same_bits(&got, &looped(&args)).unwrap();
    let bad = (x.clone(), Tensor::from_slice(&[0i32, 3], &[2]), xs);
    let m = panics::panic_message(|| drop(jit_with(looped, cuda()).call(&bad)));
    assert_eq!(m, panics::panic_message(|| drop(looped(&bad))));
    let scatter = |(x, i): &(Tensor, Tensor)| x.index_add(0, &(i * 2.0), &x.take(&i, 0));
    let bad = (x.clone(), Tensor::from_slice(&[1i32, 2, 3], &[3]));
    let m = panics::panic_message(|| drop(jit_with(scatter, cuda()).call(&bad)));
    assert_eq!(m, panics::panic_message(|| drop(scatter(&bad))));
    assert!(m.contains("scatter_add"), "{m}");
}

/// Arg-reductions and running sums and products are kernels of their own
/// on the device, equal to eager bit for bit: argmax/argmin keep the first
/// of ties and take the first NaN, over any axis; cumsum/cumprod run
/// floats in f64 (f32, f64, f16, bf16) and wrap integers (bools are
/// searched; nx refuses their running ops); the gradients of the running
/// ops too.
#[test]
fn arg_reductions_and_running_ops_equal_eager_bit_for_bit() {
    let _g = setup();
    let x = special(&[3, 5, 7], 4);
    let f = |x: &Tensor| {
        let mut outs = Vec::new();
        for axis in 0..3 {
            outs.push(x.argmax(axis, false));
            outs.push(x.argmin(axis, true));
            outs.push(x.cumsum(axis));
            outs.push(x.cumprod(axis));
        }
        outs
    };
    for dt in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let xd = x.cast(dt);
        let got = jit_with(f, cuda()).call(&xd);
        for (k, (a, b)) in got.iter().zip(f(&xd)).enumerate() {
            same_bits(a, &b).unwrap_or_else(|e| panic!("{dt}, output {k}: {e}"));
        }
    }
    // Integers wrap (a running product of i8 overflows); bools searched.
    let ints: Vec<i32> = (0..105).map(|i| ((i * 37) % 23) as i32 - 11).collect();
    let xi = Tensor::from_slice(&ints, &[3, 5, 7]);
    for dt in [DType::I32, DType::I8, DType::U8, DType::I64] {
        let xd = xi.cast(dt);
        let got = jit_with(f, cuda()).call(&xd);
        for (k, (a, b)) in got.iter().zip(f(&xd)).enumerate() {
            same_bits(a, &b).unwrap_or_else(|e| panic!("{dt}, output {k}: {e}"));
        }
    }
    let xb = xi.greater(&Tensor::scalar(2i32));
    let fb = |x: &Tensor| (x.argmax(1, false), x.argmin(2, false));
    let got = jit_with(fb, cuda()).call(&xb);
    let want = fb(&xb);
    for (k, (a, b)) in got.leaves().iter().zip(want.leaves()).enumerate() {
        same_bits(a, &b).unwrap_or_else(|e| panic!("bool, output {k}: {e}"));
    }
    // Gradients of the running ops: cumsum's (a reversed cumsum) bit for
    // bit; cumprod's holds a sum over a masked product matrix, a fused
    // reduction (f64 accumulators on the device): within 8 epsilons.
    let xg = data(&[4, 6], 5);
    let g = |x: &Tensor| rune::grad(|x: &Tensor| (x.cumsum(1).sin() * x.cumsum(0)).sum_all(), x);
    same_bits(&jit_with(g, cuda()).call(&xg), &g(&xg)).unwrap();
    let g = |x: &Tensor| rune::grad(|x: &Tensor| (x.cumprod(0) * x.cumsum(0)).sum_all(), x);
    close(&jit_with(g, cuda()).call(&xg), &g(&xg), 8.0).unwrap();
}

/// Entries whose run closure inspects eager memory layout, or assigns into
/// a view (refused by jit on every device).
const SKIP: &[&str] = &["contiguous", "assign"];
/// Entries per compiled batch (one module per batch).
const BATCH: usize = 64;

/// Whether the program of `case` has a reduction (a kernel on CUDA, f64
/// accumulators: held to 8 epsilons).
fn reduces(g: &tolk::Graph) -> bool {
    g.eqns
        .iter()
        .any(|e| matches!(e.as_prim(), Some(nx::Prim::Reduce { .. })))
}

/// Every op-table entry (inputs as arguments) on the device against eager:
/// bit for bit, reductions within 8 epsilons; or refused, naming the
/// device, before anything runs.
#[test]
fn the_op_table_runs_on_the_device_or_is_refused_naming_it() {
    let _g = setup();
    let start = std::time::Instant::now();
    let cases = table::all_cases();
    let mut runnable = Vec::new();
    let (mut refused, mut checked) = (0, 0);
    let mut failures = Vec::new();
    for case in cases.iter().filter(|c| !SKIP.contains(&c.op)) {
        let g = rune::make_graph(|xs: &Vec<Tensor>| (case.run)(xs), &case.inputs);
        let red = reduces(&g);
        match tolk::cuda::render_program(g) {
            Ok(_) => runnable.push((case, red, (case.run)(&case.inputs))),
            Err(e) if e.contains("\"CUDA\"") => refused += 1,
            Err(e) => failures.push(format!(
                "{}: refused without naming the device: {e}",
                case.name
            )),
        }
    }
    let run = |items: &[&(&table::OpCase, bool, Vec<Tensor>)]| -> Result<Vec<Vec<Tensor>>, String> {
        let args: Vec<Tensor> = items
            .iter()
            .flat_map(|it| it.0.inputs.iter().cloned())
            .collect();
        let f = |xs: &Vec<Tensor>| {
            let mut next = 0;
            let mut outs = Vec::new();
            for it in items {
                let n = it.0.inputs.len();
                outs.push((it.0.run)(&xs[next..next + n].to_vec()));
                next += n;
            }
            outs
        };
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            jit_with(f, cuda()).try_call(&args)
        }))
        .map_err(|p| {
            p.downcast_ref::<String>()
                .cloned()
                .unwrap_or_else(|| "a panic".into())
        })?
        .map_err(|e| e.message().to_string())
    };
    let compare =
        |it: &(&table::OpCase, bool, Vec<Tensor>), got: &[Tensor]| -> Result<(), String> {
            if got.len() != it.2.len() {
                return Err("another number of outputs".into());
            }
            for (g, w) in got.iter().zip(&it.2) {
                if it.1 {
                    close(g, w, 8.0)?
                } else {
                    same_bits(g, w)?
                }
            }
            Ok(())
        };
    let mut not_run = Vec::new();
    for chunk in runnable.chunks(BATCH) {
        let refs: Vec<_> = chunk.iter().collect();
        match run(&refs) {
            Ok(outs) => {
                for (it, got) in chunk.iter().zip(&outs) {
                    match compare(it, got) {
                        Ok(()) => checked += 1,
                        Err(e) => failures.push(format!("{}: {e}", it.0.name)),
                    }
                }
            }
            Err(_) => {
                for it in chunk {
                    match run(&[it]) {
                        Ok(o) => match compare(it, &o[0]) {
                            Ok(()) => checked += 1,
                            Err(e) => failures.push(format!("{}: {e}", it.0.name)),
                        },
                        // What the runtime does not run yet, named.
                        Err(e) if e.contains("is not run yet") => {
                            not_run.push(format!("{}: {e}", it.0.name))
                        }
                        Err(e) => failures.push(format!("{}: {e}", it.0.name)),
                    }
                }
            }
        }
    }
    eprintln!(
        "op table on {}: {checked} entries equal eager, {refused} refused at trace time naming the \
         device, {} refused at run time ({:.1} s)",
        device().api().describe(),
        not_run.len(),
        start.elapsed().as_secs_f64()
    );
    for n in not_run.iter().take(10) {
        eprintln!("  not run yet: {n}");
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(checked > 1000, "only {checked} entries ran");
}

/// Deterministic f32 data of `shape` (seeded by `k`).
fn data(shape: &[usize], k: usize) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| (((i * 7 + k * 13) as f32) * 0.61).sin() * 0.8)
        .collect();
    Tensor::from_slice(&v, shape)
}

fn bytes_of(ts: &[&Tensor]) -> u64 {
    ts.iter()
        .map(|t| (t.numel() * t.dtype().size_in_bytes()) as u64)
        .sum()
}

/// One step of a small recurrent map (a product in the body: a gemm per
/// step on the device).
fn rnn_step(w: &Tensor, c: &Tensor, x: &Tensor) -> (Tensor, Tensor) {
    let next = (c.matmul(w) * 0.9 + x).tanh();
    let y = c.sin() * x;
    (next, y)
}

fn rnn(p: &(Tensor, Tensor, Tensor)) -> (Tensor, Tensor) {
    let (w, c0, xs) = p;
    rune::scan(|c: &Tensor, x: &Tensor| rnn_step(w, c, x), c0, xs)
}

fn rnn_loss(p: &(Tensor, Tensor, Tensor)) -> Tensor {
    let (c, ys) = rnn(p);
    c.square().sum_all() + ys.sum_all()
}

/// A staged scan runs on the device, driven from the host over its body's
/// kernels: its results equal eager's, and its carries stay on the device
/// between steps: a call moves its inputs in and nothing else, whatever
/// the length (no transfer per step); its outputs stay resident until read.
#[test]
fn a_staged_scan_runs_on_the_device_with_no_transfer_per_step() {
    let _g = setup();
    let tol = if real() { 64.0 } else { 0.0 };
    let check = |got: &Tensor, want: &Tensor, what: &str| {
        let r = if tol == 0.0 {
            same_bits(got, want)
        } else {
            close(got, want, tol)
        };
        r.unwrap_or_else(|e| panic!("{what}: {e}"));
    };
    let jf = jit_with(rnn, cuda());
    for t in [1usize, 10, 100] {
        let p = (
            data(&[4, 4], 1) * 0.5,
            data(&[3, 4], 2),
            data(&[t, 3, 4], 3),
        );
        jf.call(&p); // compile outside the counted call
        reset_jit_stats();
        let base = jit_stats().resident_bytes;
        let (c, ys) = jf.call(&p);
        let s = jit_stats();
        assert_eq!(
            (s.bytes_to_device, s.bytes_from_device),
            (bytes_of(&[&p.0, &p.1, &p.2]), 0),
            "length {t}: the inputs in, nothing out"
        );
        assert_eq!(s.resident_bytes - base, bytes_of(&[&c, &ys]));
        let (ce, yse) = rnn(&p);
        check(&c, &ce, "carry");
        check(&ys, &yse, "ys");
        assert_eq!(jit_stats().bytes_from_device, bytes_of(&[&c, &ys]));
    }
    // The final carry fed back unread: the next call moves only what is
    // not on the device already.
    let p = (
        data(&[4, 4], 1) * 0.5,
        data(&[3, 4], 2),
        data(&[20, 3, 4], 3),
    );
    let (c, _) = jf.call(&p);
    reset_jit_stats();
    let (c2, _) = jf.call(&(p.0.clone(), c.clone(), p.2.clone()));
    assert_eq!(jit_stats().bytes_to_device, bytes_of(&[&p.0, &p.2]));
    let (ce, _) = rnn(&p);
    let (c2e, _) = rnn(&(p.0.clone(), ce, p.2.clone()));
    check(&c2, &c2e, "carry of the second call");
}

/// Reverse, unrolled (with the remainder traced after the loop) and
/// nested scans, structured carries swapped and passed through: bit for
/// bit against eager (elementwise bodies).
#[test]
fn reverse_unrolled_and_nested_scans_equal_eager_bit_for_bit() {
    let _g = setup();
    type C = (Tensor, Tensor, Tensor);
    let f = |xs: &Tensor| {
        let init = (data(&[5], 62), data(&[5], 63), data(&[5], 64));
        rune::scan(
            |(a, b, c): &C, x: &Tensor| {
                let n = (a.sin() * 0.5 + x).tanh();
                (
                    (b.clone(), n.clone(), c.clone()),
                    (n.clone(), n * 2.0, x.clone(), a.clone()),
                )
            },
            &init,
            xs,
        )
    };
    for t in [1usize, 2, 7, 8] {
        let xs = data(&[t, 5], 61 + t);
        let (got_c, got_y) = jit_with(f, cuda()).call(&xs);
        let (want_c, want_y) = f(&xs);
        for (g, w) in got_c.leaves().iter().zip(want_c.leaves()) {
            same_bits(g, &w).unwrap();
        }
        for (g, w) in got_y.leaves().iter().zip(want_y.leaves()) {
            same_bits(g, &w).unwrap();
        }
    }
    let unrolled = |xs: &Tensor| {
        rune::scan_with(
            |c: &Tensor, x: &Tensor| ((c * 0.5 + x).sin(), c.exp()),
            &data(&[6], 5),
            xs,
            rune::ScanOpts { unroll: 3 },
        )
    };
    let xs = data(&[10, 6], 6);
    let got = jit_with(unrolled, cuda()).call(&xs);
    let want = unrolled(&xs);
    same_bits(&got.0, &want.0).unwrap();
    same_bits(&got.1, &want.1).unwrap();
    // A scan over rows, each row an inner scan over its entries.
    let nested = |m: &Tensor| {
        rune::scan(
            |s: &Tensor, row: &Tensor| {
                let (inner, _) =
                    rune::scan(|a: &Tensor, x: &Tensor| (a * 0.5 + x.cos(), ()), s, row);
                (inner.clone() + 1.0, inner)
            },
            &Tensor::scalar(0.25f32),
            m,
        )
    };
    let m = data(&[4, 7], 8);
    let text = format!("{}", rune::make_graph(nested, &m));
    assert_eq!(text.matches("scan{length: ").count(), 2, "{text}");
    let got = jit_with(nested, cuda()).call(&m);
    let want = nested(&m);
    same_bits(&got.0, &want.0).unwrap();
    same_bits(&got.1, &want.1).unwrap();
}

/// grad of a scan (a forward loop stacking residuals, a reverse loop over
/// the cotangents, both on the device) equals eager's; the inputs move in
/// once and only the gradients come out, when read.
#[test]
fn grad_of_a_staged_scan_runs_on_the_device() {
    let _g = setup();
    let p = (data(&[4, 4], 1) * 0.5, data(&[4], 2), data(&[30, 4], 3));
    let g = |p: &(Tensor, Tensor, Tensor)| rune::grad(rnn_loss, p);
    let text = format!("{}", rune::make_graph(g, &p));
    assert!(text.matches("scan{").count() >= 2, "{text}");
    let jg = jit_with(g, cuda());
    jg.call(&p);
    reset_jit_stats();
    let got = jg.call(&p);
    assert_eq!(
        (jit_stats().bytes_to_device, jit_stats().bytes_from_device),
        (bytes_of(&[&p.0, &p.1, &p.2]), 0)
    );
    let want = g(&p);
    let tol = if real() { 256.0 } else { 64.0 };
    close(&got.0, &want.0, tol).unwrap();
    close(&got.1, &want.1, tol).unwrap();
    close(&got.2, &want.2, tol).unwrap();
    assert_eq!(
        jit_stats().bytes_from_device,
        bytes_of(&[&got.0, &got.1, &got.2])
    );
    let v = jit_with(
        |p: &(Tensor, Tensor, Tensor)| rune::value_and_grad(rnn_loss, p),
        cuda(),
    )
    .call(&p);
    close(&v.0, &rnn_loss(&p), 8.0).unwrap();
}

/// Gathers in a loop's body: by captured indices (checked once, when the
/// program is made), by an input's (checked with the call's inputs,
/// before any kernel runs, no transfer) and by carried indices (copied
/// out and checked before each step, counted); an index out of range
/// inside the loop raises eager's message.
#[test]
fn gathers_inside_a_scan_check_their_indices_as_eager() {
    let _g = setup();
    let table = data(&[6, 3], 9);
    let idx = Tensor::from_slice(&[5i32, 0, -1, 2], &[4]);
    let cap = idx.clone();
    let captured = move |(tb, xs): &(Tensor, Tensor)| {
        rune::scan(
            |c: &Tensor, x: &Tensor| {
                let g = tb.take(&cap, 0);
                ((c + g.sum(&[0], false)) * x, g.exp())
            },
            &Tensor::zeros(&[3], DType::F32),
            xs,
        )
    };
    let xs = data(&[5, 3], 10);
    let jc = jit_with(captured.clone(), cuda());
    let got = jc.call(&(table.clone(), xs.clone()));
    let want = captured(&(table.clone(), xs.clone()));
    close(&got.0, &want.0, 8.0).unwrap();
    same_bits(&got.1, &want.1).unwrap();
    // Indices as an input of the call: checked with the inputs.
    let by_input = |(tb, i, xs): &(Tensor, Tensor, Tensor)| {
        rune::scan(
            |c: &Tensor, x: &Tensor| (c * x + tb.take(i, 0).sum(&[0], false), ()),
            &Tensor::zeros(&[3], DType::F32),
            xs,
        )
        .0
    };
    let ji = jit_with(by_input, cuda());
    let args = (table.clone(), idx.clone(), xs.clone());
    ji.call(&args);
    reset_jit_stats();
    let got = ji.call(&args);
    assert_eq!(jit_stats().bytes_from_device, 0, "no index read back");
    close(&got, &by_input(&args), 8.0).unwrap();
    let bad = (
        table.clone(),
        Tensor::from_slice(&[1i32, 6], &[2]),
        xs.clone(),
    );
    let m = panics::panic_message(|| drop(jit_with(by_input, cuda()).call(&bad)));
    assert_eq!(m, panics::panic_message(|| drop(by_input(&bad))));
    // Carried indices: read back before each step (their bytes counted).
    let carried = |(tb, i0, xs): &(Tensor, Tensor, Tensor)| {
        rune::scan(
            |(i, c): &(Tensor, Tensor), x: &Tensor| {
                let next = (i + 1.0) % 6.0;
                ((next, c + tb.take(i, 0).sum(&[0], false) * x), ())
            },
            &(i0.clone(), Tensor::zeros(&[3], DType::F32)),
            xs,
        )
        .0
    };
    let jcar = jit_with(carried, cuda());
    let args = (
        table.clone(),
        Tensor::from_slice(&[0i32, 3], &[2]),
        xs.clone(),
    );
    jcar.call(&args);
    reset_jit_stats();
    let got = jcar.call(&args);
    assert_eq!(
        jit_stats().bytes_from_device,
        5 * 8,
        "2 i32 indices per step"
    );
    let want = carried(&args);
    same_bits(&got.0, &want.0).unwrap();
    close(&got.1, &want.1, 8.0).unwrap();
    let bad = (table, Tensor::from_slice(&[0i32, 3], &[2]), xs);
    let grows = |(tb, i0, xs): &(Tensor, Tensor, Tensor)| {
        rune::scan(
            |(i, c): &(Tensor, Tensor), x: &Tensor| {
                ((i + 2.0, c + tb.take(i, 0).sum(&[0], false) * x), ())
            },
            &(i0.clone(), Tensor::zeros(&[3], DType::F32)),
            xs,
        )
        .0
         .1
    };
    let m = panics::panic_message(|| drop(jit_with(grows, cuda()).call(&bad)));
    assert_eq!(m, panics::panic_message(|| drop(grows(&bad))));
}

fn cuda_devices(n: usize) -> Vec<String> {
    (0..n).map(|d| format!("CUDA:{d}")).collect()
}

/// pmap over `CUDA:0`, `CUDA:1`, ... (emulated devices): every sharding
/// rule whose operations the device runs, over 2 and 4 devices, the input
/// split along axis 0 or 1, against eager: stages per device, all-reduces
/// (partial reductions, products contracting the split axis), all-gathers
/// and slices on the devices.
#[test]
fn pmap_over_cuda_devices_equals_eager_for_every_sharding_rule() {
    let _g = setup();
    use rune::prelude::Slice;
    type F = fn(&(Tensor, Tensor)) -> Tensor;
    let progs: Vec<(&str, F)> = vec![
        ("elementwise with a replicated operand", |(x, r)| {
            (x * r).sin() + 1.0
        }),
        ("reduce over every axis", |(x, r)| (x * r).sum_all()),
        ("reduce over axis 0", |(x, r)| {
            (x.exp() + r).max(&[0], false)
        }),
        ("reduce over axis 1", |(x, r)| (x - r).sum(&[1], true) * 2.0),
        ("softmax along 1", |(x, _)| x.softmax(1)),
        ("log_softmax along 0", |(x, _)| x.log_softmax(0)),
        ("reshape splitting axis 1", |(x, _)| {
            x.reshape(&[4, 6, 2]).sum(&[2], false)
        }),
        ("transpose", |(x, r)| (x + r).transpose().tanh()),
        ("slice rows", |(x, _)| x.slice(&[Slice::from(1..3)]) * 3.0),
        ("slice columns", |(x, _)| {
            x.slice(&[Slice::from(..), Slice::from(0..12).step(2)])
        }),
        ("flip", |(x, _)| x.flip(&[0, 1]) - x),
        ("pad", |(x, _)| {
            x.pad(&[(1, 0), (0, 2)], 0.5).sum(&[1], false)
        }),
        ("concat", |(x, r)| {
            Tensor::concatenate(&[x.clone(), r.clone()], 1).exp()
        }),
        ("x @ x^T", |(x, _)| x.matmul(&x.transpose())),
        ("x^T @ x", |(x, _)| x.transpose().matmul(x)),
    ];
    let x = data(&[4, 12], 11);
    let r = data(&[4, 12], 12);
    let mut runs = 0;
    for (name, f) in progs {
        let eager = f(&(x.clone(), r.clone()));
        for n in [2, 4] {
            for axis in [0usize, 1] {
                for r_axis in [None, Some(axis)] {
                    let opts = rune::PmapOpts {
                        devices: cuda_devices(n),
                        in_axes: Some(vec![Some(axis), r_axis]),
                        donate: false,
                    };
                    let got = rune::pmap_with(f, opts).call(&(x.clone(), r.clone()));
                    close(&got, &eager, 16.0).unwrap_or_else(|e| {
                        panic!("{name} over {n} devices, split axis {axis}, r {r_axis:?}: {e}")
                    });
                    runs += 1;
                }
            }
        }
    }
    assert_eq!(runs, 15 * 8);
}

/// A data-parallel SGD step over two CUDA devices: the loss and the
/// gradients all-reduced on the devices (nothing gathered), the
/// parameters replicated; a call moves the batch's shards and, the first
/// time, the parameters' replicas; the updated parameters fed back unread
/// move nothing; reading them reads one replica. The trajectory equals one
/// device's (jit on CUDA) within tolerance.
#[test]
fn a_data_parallel_step_over_cuda_devices_moves_only_the_batch() {
    let _g = setup();
    type P = (Tensor, Tensor);
    let step = |(w, b, x, y): &(Tensor, Tensor, Tensor, Tensor)| {
        let loss = |(w, b): &P| (x.matmul(w) + b).tanh().sub(y).square().mean_all();
        let (l, (gw, gb)) = rune::value_and_grad(loss, &(w.clone(), b.clone()));
        (w - gw * 0.5, b - gb * 0.5, l)
    };
    let opts = rune::PmapOpts {
        devices: cuda_devices(2),
        in_axes: Some(vec![None, None, Some(0), Some(0)]),
        donate: false,
    };
    let dp = rune::pmap_with(step, opts);
    let one = jit_with(step, cuda());
    let (mut w, mut b) = (data(&[3, 2], 21) * 0.5, data(&[2], 22) * 0.1);
    let (mut w1, mut b1) = (w.clone(), b.clone());
    let x = data(&[8, 3], 23);
    let y = data(&[8, 2], 24) * 0.5;
    let mut losses = Vec::new();
    for i in 0..6 {
        reset_jit_stats();
        let (nw, nb, l) = dp.call(&(w.clone(), b.clone(), x.clone(), y.clone()));
        let s = jit_stats();
        let batch = bytes_of(&[&x, &y]);
        let params = 2 * bytes_of(&[&w, &b]);
        if i == 0 {
            assert_eq!(s.bytes_to_device, batch + params, "step {i}");
        } else {
            assert_eq!(
                s.bytes_to_device, batch,
                "step {i}: the parameters stay on the devices"
            );
        }
        assert_eq!(s.bytes_from_device, 0, "step {i}");
        let (ow, ob, ol) = one.call(&(w1.clone(), b1.clone(), x.clone(), y.clone()));
        close(&l, &ol, 64.0).unwrap();
        losses.push(l.item::<f32>());
        // The loss of each: one replica of the pmap's, the jit's output.
        assert_eq!(jit_stats().bytes_from_device, 2 * 4);
        (w, b, w1, b1) = (nw, nb, ow, ob);
    }
    close(&w, &w1, 64.0).unwrap();
    close(&b, &b1, 64.0).unwrap();
    assert!(losses[5] < losses[0], "{losses:?}");
}

/// The flagship's training (`examples/train_mlp.rs`'s step: value_and_grad
/// of the spirals MLP's cross-entropy and an Adam update, `--device CUDA`)
/// on the emulated device: the loss decreases and follows the CPU's within
/// tolerance step by step; the state stays on the device between steps
/// (fed back unread), so a step moves only the minibatch and the step size
/// in, and nothing out but the loss when read.
#[test]
fn train_mlp_trains_on_the_device_as_on_the_cpu() {
    let _g = setup();
    use mlp_step::{adam_lr, train_step, State};
    use spirals::{accuracy, Mlp, CLASSES, HIDDEN};
    nx::seed(42);
    let mut rng = splitmix::SplitMix(42);
    let (x, y) = spirals::spirals(&mut rng);
    let params = Mlp::init([2, HIDDEN, HIDDEN, CLASSES]);
    let zeros = params.map_leaves(&mut |t| t.zeros_like());
    let init = State {
        params,
        m: zeros.clone(),
        v: zeros,
    };
    let on_cuda = jit_with(train_step, cuda());
    let on_cpu = rune::jit(train_step);
    let (mut s_dev, mut s_cpu) = (init.clone(), init);
    let batch = 128;
    let steps = 300;
    let (mut first, mut last) = (Vec::new(), Vec::new());
    for step in 0..steps {
        let order = rng.permutation(x.shape()[0]);
        let idx = Tensor::from_slice(&order[..batch], &[batch]);
        let (xb, yb) = (x.take(&idx, 0), y.take(&idx, 0));
        let lr = Tensor::scalar(adam_lr(1e-2, step as i32 + 1) as f32);
        reset_jit_stats();
        let (l_dev, next) = on_cuda.call(&(s_dev, xb.clone(), yb.clone(), lr.clone()));
        if step > 0 {
            assert_eq!(
                (jit_stats().bytes_to_device, jit_stats().bytes_from_device),
                (bytes_of(&[&xb, &yb, &lr]), 0),
                "step {step}: the state stays on the device"
            );
        }
        s_dev = next;
        let (l_cpu, next) = on_cpu.call(&(s_cpu, xb, yb, lr));
        s_cpu = next;
        let (a, b) = (l_dev.item::<f32>() as f64, l_cpu.item::<f32>() as f64);
        assert!(
            (a - b).abs() <= 1e-3 * (1.0 + b.abs()),
            "step {step}: device loss {a}, CPU loss {b}"
        );
        if step < 10 {
            first.push(a);
        } else if step >= steps - 10 {
            last.push(a);
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    assert!(
        mean(&last) < 0.95 * mean(&first),
        "the loss did not decrease: {first:?} -> {last:?}"
    );
    let (acc_dev, acc_cpu) = (
        accuracy(&s_dev.params, &x, &y),
        accuracy(&s_cpu.params, &x, &y),
    );
    assert!(
        (acc_dev - acc_cpu).abs() < 0.02,
        "accuracy {acc_dev} vs {acc_cpu}"
    );
}

/// The child of `a_second_process_loads_its_modules_from_the_disk_cache`:
/// jits a program with a loop on CUDA, checks it against eager, and
/// prints this process's module counts.
#[test]
#[ignore]
fn child_jits_and_reports_module_stats() {
    if std::env::var("RUNE_TEST_CHILD").is_err() {
        return;
    }
    let _g = setup();
    let f = |xs: &Tensor| {
        rune::scan(
            |c: &Tensor, x: &Tensor| ((c * 0.5 + x).tanh(), c.exp()),
            &Tensor::zeros(&[7], DType::F32),
            xs,
        )
    };
    let xs = data(&[5, 7], 70);
    let got = jit_with(f, cuda()).call(&xs);
    let want = f(&xs);
    same_bits(&got.0, &want.0).unwrap();
    same_bits(&got.1, &want.1).unwrap();
    // A second jit of it in this process: its modules are loaded already.
    let before = tolk::device::module_stats();
    jit_with(f, cuda()).call(&xs).0.to_vec::<f32>();
    assert_eq!(tolk::device::module_stats(), before);
    let (compiled, from_disk) = before;
    println!("modules: compiled {compiled}, from disk {from_disk}");
}

/// The module images (PTX on a GPU; the emulated device's shared objects)
/// go through the disk cache keyed by the device, driver and NVRTC: a
/// first process compiles and writes them, a second one with the same
/// cache directory loads every one from disk and compiles none; with
/// `JITCACHE=0` nothing is read or written.
#[test]
fn a_second_process_loads_its_modules_from_the_disk_cache() {
    let dir = std::env::temp_dir().join(format!("rune-cumod-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let run = |jitcache: &str| -> (u64, u64) {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_jits_and_reports_module_stats",
                "--ignored",
                "--nocapture",
            ])
            .env("RUNE_TEST_CHILD", "1")
            .env("XDG_CACHE_HOME", &dir)
            .env("JITCACHE", jitcache)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("modules: compiled "))
            .unwrap_or_else(|| panic!("no counts in {text}"));
        let (c, d) = line.split_once(", from disk ").unwrap();
        (c.parse().unwrap(), d.parse().unwrap())
    };
    let (compiled, from_disk) = run("1");
    assert!(
        compiled >= 2 && from_disk == 0,
        "first: {compiled}, {from_disk}"
    );
    let files = std::fs::read_dir(dir.join("tolk/rune_jit"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".cumod"))
        })
        .count();
    assert_eq!(files as u64, compiled, "one image per module");
    assert_eq!(run("1"), (0, compiled), "second: every module from disk");
    assert_eq!(run("0"), (compiled, 0), "JITCACHE=0: compiled again");
    let _ = std::fs::remove_dir_all(&dir);
}

/// f16 and bf16 products run through the device gemm (cublasGemmEx with
/// f32 accumulation on a GPU; nx's product on the emulator, so bit for bit
/// there): plain, transposed and batched, with elementwise work around
/// them, and a gradient through one.
#[test]
fn f16_and_bf16_products_run_through_the_device_gemm() {
    let _g = setup();
    for dt in [DType::F16, DType::BF16] {
        let a = data(&[6, 9], 31).cast(dt);
        let b = data(&[9, 5], 32).cast(dt);
        let c = data(&[3, 4, 9], 33).cast(dt);
        let f = |(a, b, c): &(Tensor, Tensor, Tensor)| {
            (
                (a * 2.0).matmul(b).tanh(),
                a.matmul(&a.transpose()),
                c.matmul(&c.swapaxes(1, 2)),
                rune::grad(
                    |b: &Tensor| a.matmul(b).cast(DType::F32).square().sum_all(),
                    b,
                ),
            )
        };
        let p = (a, b, c);
        let got = jit_with(f, cuda()).call(&p);
        let want = f(&p);
        let check = |g: &Tensor, w: &Tensor, k: usize| {
            if real() {
                close(g, w, 8.0 * k as f64).unwrap()
            } else {
                same_bits(g, w).unwrap()
            }
        };
        check(&got.0, &want.0, 9);
        check(&got.1, &want.1, 9);
        check(&got.2, &want.2, 9);
        check(&got.3, &want.3, 6);
    }
}
