//! W4's, W5's, W6's and W9's matrix products (and large squares, for the
//! machine's GEMM peak) through the `gemm` crate directly, f32, under each way of
//! using two threads: one thread (`st`); a band of rows per thread
//! (`rows2`) or of columns (`cols2`), each a one-threaded `gemm` call on
//! nx's pool (what `cpu/dot.rs` does); `gemm`'s own rayon split (`rayon2`);
//! faer's matmul on one thread (`faer-st`) and per band (`faer-2`: what
//! `cpu/dot.rs` does when the rhs is column-major, the `rt` shapes); the
//! transposed problem `C^T = B^T @ A^T` written straight into row-major
//! `C`, per band of columns, through `gemm` (`swap2`) and faer (`fswap2`);
//! and a column-major output transposed after (`st-cm+T`). Min and median of
//! each, in us, and GFLOP/s at the min.
//!
//! `cargo run --release -p nx --example bench_gemm_split -- [name filter]`
//! (`REPS` sets the repeats, 200; the squares run 20; `FLUSH=1` evicts the
//! caches before each timed call, as a training step's first touch of its
//! operands finds them).
use gemm::Parallelism;
use std::time::Instant;

#[derive(Clone, Copy)]
struct Shape {
    name: &'static str,
    m: usize,
    n: usize,
    k: usize,
    lt: bool, // lhs stored transposed ([k, m] row-major)
    rt: bool, // rhs stored transposed ([n, k] row-major)
}

impl Shape {
    /// The (row, column) strides of the lhs and of the rhs, in elements.
    fn strides(&self) -> ((isize, isize), (isize, isize)) {
        let (m, n, k) = (self.m as isize, self.n as isize, self.k as isize);
        let l = if self.lt { (1, m) } else { (k, 1) };
        let r = if self.rt { (1, k) } else { (n, 1) };
        (l, r)
    }
}

/// Strides of one matrix operand, (row, column), in elements.
type Strides = (isize, isize);

/// Which library computes a product.
#[derive(Clone, Copy)]
enum Lib {
    /// `gemm`, split as the `Parallelism` says.
    Gemm(Parallelism),
    /// faer's matmul, one-threaded.
    Faer,
}

/// `dst = lhs @ rhs` for an `m x n x k` product through `lib`. SAFETY:
/// every address the strides reach for `i < m`, `j < n`, `p < k` lies
/// inside its buffer.
unsafe fn product(
    lib: Lib,
    (m, n, k): (usize, usize, usize),
    dst: *mut f32,
    (drs, dcs): Strides,
    lhs: *const f32,
    (lrs, lcs): Strides,
    rhs: *const f32,
    (rrs, rcs): Strides,
) {
    match lib {
        Lib::Faer => {
            let l = faer::MatRef::<f32>::from_raw_parts(lhs, m, k, lrs, lcs);
            let r = faer::MatRef::<f32>::from_raw_parts(rhs, k, n, rrs, rcs);
            let d = faer::MatMut::<f32>::from_raw_parts_mut(dst, m, n, drs, dcs);
            faer::linalg::matmul::matmul(d, faer::Accum::Replace, l, r, 1.0f32, faer::Par::Seq);
        }
        Lib::Gemm(par) => gemm::gemm(
            m, n, k, dst, dcs, drs, false, lhs, lcs, lrs, rhs, rcs, rrs, 0.0, 1.0, false, false,
            false, par,
        ),
    }
}

/// The whole product into a column-major output (through `gemm`).
fn run_cm(s: &Shape, a: &[f32], b: &[f32], c: &mut [f32]) {
    let (l, r) = s.strides();
    // SAFETY: the operands and the `m x n` column-major output fill their buffers.
    unsafe {
        product(
            Lib::Gemm(Parallelism::None),
            (s.m, s.n, s.k),
            c.as_mut_ptr(),
            (1, s.m as isize),
            a.as_ptr(),
            l,
            b.as_ptr(),
            r,
        )
    }
}

/// Rows `r` and columns `cc` of `C = A @ B` (row-major) through `lib`.
fn run(
    s: &Shape,
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    r: std::ops::Range<usize>,
    cc: std::ops::Range<usize>,
    lib: Lib,
) {
    let ((lrs, lcs), (rrs, rcs)) = s.strides();
    // SAFETY: the views cover rows `r` of the lhs, columns `cc` of the rhs
    // and that block of the output, all inside their buffers.
    unsafe {
        product(
            lib,
            (r.len(), cc.len(), s.k),
            c.as_mut_ptr().add(r.start * s.n + cc.start),
            (s.n as isize, 1),
            a.as_ptr().offset(r.start as isize * lrs),
            (lrs, lcs),
            b.as_ptr().offset(cc.start as isize * rcs),
            (rrs, rcs),
        )
    }
}

/// Columns `cc` of `C = A @ B` computed as the transposed problem `C^T =
/// B^T @ A^T` (rows `cc` of `C^T`), written straight into row-major `C`
/// (which is `C^T` column-major): the operands swap roles, so the library
/// packs `B^T` as its lhs and `A^T` as its rhs.
fn run_swap(s: &Shape, a: &[f32], b: &[f32], c: &mut [f32], cc: std::ops::Range<usize>, lib: Lib) {
    let ((lrs, lcs), (rrs, rcs)) = s.strides();
    // SAFETY: the views cover columns `cc` of B (as rows of B^T), all of A
    // (as A^T) and columns `cc` of C, all inside their buffers.
    unsafe {
        product(
            lib,
            (cc.len(), s.m, s.k),
            c.as_mut_ptr().add(cc.start),
            (1, s.n as isize),
            b.as_ptr().offset(cc.start as isize * rcs),
            (rcs, rrs),
            a.as_ptr(),
            (lcs, lrs),
        )
    }
}

#[derive(Clone, Copy)]
struct P(*mut f32);
unsafe impl Send for P {}
unsafe impl Sync for P {}
impl P {
    fn get(&self) -> *mut f32 {
        self.0
    }
}

/// With `FLUSH=1`, writes a line of every 64 bytes of a 64 MiB buffer
/// (twice the L3), so that the next call reads its operands from memory.
fn flush() {
    thread_local!(static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) });
    if std::env::var("FLUSH").is_ok_and(|v| v == "1") {
        BUF.with(|b| {
            let mut b = b.borrow_mut();
            b.resize(64 << 20, 0);
            for i in (0..b.len()).step_by(64) {
                b[i] = b[i].wrapping_add(1);
            }
            std::hint::black_box(&b[0]);
        });
    }
}

fn time(reps: usize, mut f: impl FnMut()) -> (f64, f64) {
    for _ in 0..5 {
        f();
    }
    let mut v: Vec<f64> = (0..reps)
        .map(|_| {
            flush();
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[0], v[v.len() / 2])
}

fn main() {
    let shapes = [
        Shape {
            name: "W9 dz@W^T",
            m: 32,
            n: 128,
            k: 128,
            lt: false,
            rt: true,
        },
        Shape {
            name: "W9 h^T@dz",
            m: 128,
            n: 128,
            k: 32,
            lt: true,
            rt: false,
        },
        Shape {
            name: "W9 x^T@dz",
            m: 64,
            n: 128,
            k: 32,
            lt: true,
            rt: false,
        },
        Shape {
            name: "W9 h@W",
            m: 32,
            n: 128,
            k: 128,
            lt: false,
            rt: false,
        },
        Shape {
            name: "W5 g@W2^T",
            m: 256,
            n: 128,
            k: 10,
            lt: false,
            rt: true,
        },
        Shape {
            name: "fwd1 x@W1",
            m: 128,
            n: 512,
            k: 784,
            lt: false,
            rt: false,
        },
        Shape {
            name: "fwd2 h1@W2",
            m: 128,
            n: 512,
            k: 512,
            lt: false,
            rt: false,
        },
        Shape {
            name: "fwd3 h2@W3",
            m: 128,
            n: 10,
            k: 512,
            lt: false,
            rt: false,
        },
        Shape {
            name: "bwd g@W3^T",
            m: 128,
            n: 512,
            k: 10,
            lt: false,
            rt: true,
        },
        Shape {
            name: "bwd h2^T@g",
            m: 512,
            n: 10,
            k: 128,
            lt: true,
            rt: false,
        },
        Shape {
            name: "bwd g@W2^T",
            m: 128,
            n: 512,
            k: 512,
            lt: false,
            rt: true,
        },
        Shape {
            name: "bwd h1^T@g",
            m: 512,
            n: 512,
            k: 128,
            lt: true,
            rt: false,
        },
        Shape {
            name: "bwd x^T@g",
            m: 784,
            n: 512,
            k: 128,
            lt: true,
            rt: false,
        },
        Shape {
            name: "W6 A@I^T",
            m: 200,
            n: 200,
            k: 200,
            lt: false,
            rt: true,
        },
        Shape {
            name: "W6 A^T@B^T",
            m: 200,
            n: 200,
            k: 200,
            lt: true,
            rt: true,
        },
        Shape {
            name: "sq1024",
            m: 1024,
            n: 1024,
            k: 1024,
            lt: false,
            rt: false,
        },
        Shape {
            name: "W19 x^T@g",
            m: 128,
            n: 128,
            k: 2048,
            lt: true,
            rt: false,
        },
        Shape {
            name: "W19 h^T@g",
            m: 512,
            n: 128,
            k: 2048,
            lt: true,
            rt: false,
        },
        Shape {
            name: "W19 x^T@gh",
            m: 128,
            n: 512,
            k: 2048,
            lt: true,
            rt: false,
        },
        Shape {
            name: "W19 x@W",
            m: 2048,
            n: 512,
            k: 128,
            lt: false,
            rt: false,
        },
        Shape {
            name: "sq2048",
            m: 2048,
            n: 2048,
            k: 2048,
            lt: false,
            rt: false,
        },
    ];
    let only: Option<String> = std::env::args().nth(1);
    let reps: usize = std::env::var("REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    nx::raw::parallel_for(2, &|_| {});
    for s in &shapes {
        if let Some(o) = &only {
            if !s.name.contains(o.as_str()) {
                continue;
            }
        }
        let a: Vec<f32> = (0..s.m * s.k)
            .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
            .collect();
        let b: Vec<f32> = (0..s.k * s.n)
            .map(|i| ((i * 104729) % 1000) as f32 / 1000.0 - 0.5)
            .collect();
        let mut c = vec![0f32; s.m * s.n];
        let fl = 2.0 * (s.m * s.n * s.k) as f64;
        let reps = if s.m >= 1024 { 20 } else { reps };
        let mut row = format!("{:<12} {:4}x{:4}x{:4}", s.name, s.m, s.n, s.k);
        let mut add = |label: &str, (mn, md): (f64, f64)| {
            row += &format!(" | {label} {mn:7.1} {md:7.1}us {:5.0}GF", fl / mn / 1e3);
        };
        let (m, n) = (s.m, s.n);
        let one = Lib::Gemm(Parallelism::None);
        add("st", time(reps, || run(s, &a, &b, &mut c, 0..m, 0..n, one)));
        let cp = P(c.as_mut_ptr());
        let len = c.len();
        let (ar, br) = (&a[..], &b[..]);
        // Part `p` of two: a band of rows or of columns, through `lib`.
        let bands = |lib: Lib, rows: bool| {
            move |p: usize| {
                let c = unsafe { std::slice::from_raw_parts_mut(cp.get(), len) };
                if rows {
                    run(s, ar, br, c, m * p / 2..m * (p + 1) / 2, 0..n, lib)
                } else {
                    run(s, ar, br, c, 0..m, n * p / 2..n * (p + 1) / 2, lib)
                }
            }
        };
        let fr = bands(one, true);
        add("rows2", time(reps, || nx::raw::parallel_for(2, &fr)));
        let fc = bands(one, false);
        add("cols2", time(reps, || nx::raw::parallel_for(2, &fc)));
        let rayon = Lib::Gemm(Parallelism::Rayon(2));
        add(
            "rayon2",
            time(reps, || run(s, &a, &b, &mut c, 0..m, 0..n, rayon)),
        );
        add(
            "faer-st",
            time(reps, || run(s, &a, &b, &mut c, 0..m, 0..n, Lib::Faer)),
        );
        let ffr = bands(Lib::Faer, m >= n);
        add("faer-2", time(reps, || nx::raw::parallel_for(2, &ffr)));
        for (label, lib) in [("swap2", one), ("fswap2", Lib::Faer)] {
            let f = move |p: usize| {
                let c = unsafe { std::slice::from_raw_parts_mut(cp.get(), len) };
                run_swap(s, ar, br, c, n * p / 2..n * (p + 1) / 2, lib)
            };
            add(label, time(reps, || nx::raw::parallel_for(2, &f)));
        }
        // Split K: each of two threads multiplies half of the contracted
        // length into its own buffer (faer, one-threaded), then the halves
        // are summed.
        let mut halves = vec![0f32; 2 * m * n];
        let hp = P(halves.as_mut_ptr());
        let ((lrs, lcs), (rrs, rcs)) = s.strides();
        let fk = move |p: usize| {
            let k0 = s.k * p / 2;
            let kl = s.k * (p + 1) / 2 - k0;
            // SAFETY: part p writes its own m x n half; the operand views
            // cover columns k0..k0+kl of A and rows k0..k0+kl of B.
            unsafe {
                product(
                    Lib::Faer,
                    (m, n, kl),
                    hp.get().add(p * m * n),
                    (n as isize, 1),
                    ar.as_ptr().offset(k0 as isize * lcs),
                    (lrs, lcs),
                    br.as_ptr().offset(k0 as isize * rrs),
                    (rrs, rcs),
                )
            }
        };
        add(
            "splitk2",
            time(reps, || {
                nx::raw::parallel_for(2, &fk);
                let h = unsafe { std::slice::from_raw_parts(hp.get(), 2 * m * n) };
                for i in 0..m * n {
                    c[i] = h[i] + h[m * n + i];
                }
            }),
        );
        let mut t = vec![0f32; m * n];
        add(
            "st-cm+T",
            time(reps, || {
                run_cm(s, &a, &b, &mut t);
                for i in 0..m {
                    for j in 0..n {
                        c[i * n + j] = t[j * m + i];
                    }
                }
            }),
        );
        println!("{row}");
    }
}
