//! `nx::segment_sum` and `Tensor::index_add` against naive loops written
//! here (accumulating in the data's own type, in the order the operations
//! promise, so that float results compare bit for bit), and their panics.
//! Sizes above the thread pool's grain run the eager scatter-add split
//! across threads: those must give the sequential loop's bits too.

#[path = "common/panics.rs"]
mod panics;
use panics::panic_message;

use nx::{DType, Slice, Tensor};

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [lo, hi).
    fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo) as u64) as i64
    }
    /// Values of mixed magnitudes (1e-3 .. 1e3, either sign), so that the
    /// order of a float sum shows in its bits.
    fn mixed(&mut self) -> f64 {
        let m = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        let e = self.int(-3, 4) as i32;
        let s = if self.next() & 1 == 0 { 1.0 } else { -1.0 };
        s * (1.0 + m) * 10f64.powi(e)
    }
}

/// An element type the references are written in.
trait El: nx::Element + Copy + PartialEq + std::fmt::Debug {
    const DT: DType;
    fn of(rng: &mut Rng) -> Self;
    fn plus(self, o: Self) -> Self;
    fn zero() -> Self;
}

impl El for f32 {
    const DT: DType = DType::F32;
    fn of(rng: &mut Rng) -> Self {
        rng.mixed() as f32
    }
    fn plus(self, o: Self) -> Self {
        self + o
    }
    fn zero() -> Self {
        0.0
    }
}

impl El for f64 {
    const DT: DType = DType::F64;
    fn of(rng: &mut Rng) -> Self {
        rng.mixed()
    }
    fn plus(self, o: Self) -> Self {
        self + o
    }
    fn zero() -> Self {
        0.0
    }
}

impl El for i32 {
    const DT: DType = DType::I32;
    fn of(rng: &mut Rng) -> Self {
        rng.int(-1000, 1000) as i32
    }
    fn plus(self, o: Self) -> Self {
        self.wrapping_add(o)
    }
    fn zero() -> Self {
        0
    }
}

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

fn rand_vec<T: El>(rng: &mut Rng, n: usize) -> Vec<T> {
    (0..n).map(|_| T::of(rng)).collect()
}

/// Ids in `[-s, s)`, with both bounds (`0`, `s - 1`, `-s`, `-1`) among the
/// first ones when there is room.
fn rand_ids(rng: &mut Rng, n: usize, s: usize) -> Vec<i64> {
    let s = s as i64;
    let mut v: Vec<i64> = (0..n).map(|_| rng.int(-s, s)).collect();
    for (k, b) in [0, s - 1, -s, -1].into_iter().enumerate() {
        if k < n {
            v[(k * 7 + 3) % n] = b;
        }
    }
    v
}

fn ids_tensor(v: &[i64], dt: DType) -> Tensor {
    Tensor::from_slice(v, &[v.len()]).cast(dt)
}

fn wrap(i: i64, n: usize) -> usize {
    (if i < 0 { i + n as i64 } else { i }) as usize
}

/// `segment_sum` by a loop: rows in order of `i`.
fn naive_segment_sum<T: El>(data: &[T], row: usize, ids: &[i64], s: usize) -> Vec<T> {
    let mut out = vec![T::zero(); s * row];
    for (i, &id) in ids.iter().enumerate() {
        let at = wrap(id, s);
        for c in 0..row {
            out[at * row + c] = out[at * row + c].plus(data[i * row + c]);
        }
    }
    out
}

fn check_segment_sum<T: El>(rng: &mut Rng, shape: &[usize], s: usize, id_dt: DType) {
    let data = rand_vec::<T>(rng, numel(shape));
    let ids = rand_ids(rng, shape[0], s);
    let row = numel(&shape[1..]);
    let got = nx::segment_sum(
        &Tensor::from_slice(&data, shape),
        &ids_tensor(&ids, id_dt),
        s,
    );
    let mut want_shape = shape.to_vec();
    want_shape[0] = s;
    assert_eq!(got.shape(), want_shape.as_slice());
    assert_eq!(got.dtype(), T::DT);
    assert_eq!(
        got.to_vec::<T>(),
        naive_segment_sum(&data, row, &ids, s),
        "segment_sum {} {shape:?} into {s} ({id_dt} ids)",
        T::DT
    );
}

#[test]
fn segment_sum_matches_a_loop() {
    let mut rng = Rng(1);
    for (shape, s) in [
        (&[1][..], 1),
        (&[7][..], 3),
        (&[10][..], 25), // most segments empty
        (&[12, 3][..], 4),
        (&[9, 2, 3][..], 5),
        (&[40, 5][..], 1), // every row into one segment
        (&[33, 1, 4][..], 64),
    ] {
        for dt in [DType::I32, DType::I64] {
            check_segment_sum::<f32>(&mut rng, shape, s, dt);
            check_segment_sum::<f64>(&mut rng, shape, s, dt);
            check_segment_sum::<i32>(&mut rng, shape, s, dt);
        }
    }
}

#[test]
fn segment_sum_large_matches_a_loop() {
    // Above the pool's grain (64K elements): wide rows, few segments (long
    // chains of adds into one element), and many segments.
    let mut rng = Rng(2);
    for (shape, s) in [
        (&[1024, 96][..], 7),
        (&[4096, 32][..], 1024),
        (&[70_000][..], 3), // 1-D: nothing off the scattered axis to split
        (&[300, 3, 80][..], 50),
    ] {
        check_segment_sum::<f32>(&mut rng, shape, s, DType::I32);
        check_segment_sum::<f64>(&mut rng, shape, s, DType::I64);
        check_segment_sum::<i32>(&mut rng, shape, s, DType::I32);
    }
}

#[test]
fn segment_sum_values_closed_form() {
    // Rows 0..5 of [[i, 10 i]] into segments [1, 1, -1, 0, 2] of 3:
    // segment 0 gets row 3, 1 gets rows 0 and 1, 2 (= -1) rows 2 and 4.
    let data = Tensor::from_slice(
        &[0.0f32, 0.0, 1.0, 10.0, 2.0, 20.0, 3.0, 30.0, 4.0, 40.0],
        &[5, 2],
    );
    let ids = Tensor::from_slice(&[1i64, 1, -1, 0, 2], &[5]);
    let s = nx::segment_sum(&data, &ids, 3);
    assert_eq!(s.to_vec::<f32>(), vec![3.0, 30.0, 1.0, 10.0, 6.0, 60.0]);
}

#[test]
fn segment_sum_empty() {
    // N = 0: all zeros, of the requested shape and dtype.
    let data = Tensor::zeros(&[0, 3], DType::F32);
    let ids = Tensor::zeros(&[0], DType::I32);
    let s = nx::segment_sum(&data, &ids, 4);
    assert_eq!(s.shape(), &[4, 3]);
    assert_eq!(s.to_vec::<f32>(), vec![0.0; 12]);
    // No segments, no rows.
    let s = nx::segment_sum(&data, &ids, 0);
    assert_eq!(s.shape(), &[0, 3]);
    // Rows of zero width.
    let data = Tensor::zeros(&[5, 0], DType::F64);
    let ids = Tensor::from_slice(&[0i32, 1, 0, 1, 0], &[5]);
    assert_eq!(nx::segment_sum(&data, &ids, 2).shape(), &[2, 0]);
}

#[test]
fn segment_sum_of_views() {
    // A transposed (non-contiguous) data view and a strided id view.
    let mut rng = Rng(3);
    let base = rand_vec::<f32>(&mut rng, 6 * 200);
    let d = Tensor::from_slice(&base, &[6, 200]).transpose(); // [200, 6]
    let all_ids = rand_ids(&mut rng, 400, 9);
    let ids = ids_tensor(&all_ids, DType::I32).slice(&[Slice::new(0, Some(400), 2)]);
    let dense: Vec<f32> = (0..200)
        .flat_map(|i| (0..6).map(move |c| (i, c)))
        .map(|(i, c)| base[c * 200 + i])
        .collect();
    let picked: Vec<i64> = all_ids.iter().step_by(2).copied().collect();
    let got = nx::segment_sum(&d, &ids, 9);
    assert_eq!(
        got.to_vec::<f32>(),
        naive_segment_sum(&dense, 6, &picked, 9)
    );
}

/// `self.index_add(axis, idx, src)` by a loop.
fn naive_index_add<T: El>(x: &[T], shape: &[usize], axis: usize, idx: &[i64], src: &[T]) -> Vec<T> {
    let pre = numel(&shape[..axis]);
    let post = numel(&shape[axis + 1..]);
    let (n, k) = (shape[axis], idx.len());
    let mut out = x.to_vec();
    for p in 0..pre {
        for (j, &i) in idx.iter().enumerate() {
            let at = wrap(i, n);
            for q in 0..post {
                let o = (p * n + at) * post + q;
                out[o] = out[o].plus(src[(p * k + j) * post + q]);
            }
        }
    }
    out
}

fn check_index_add<T: El>(rng: &mut Rng, shape: &[usize], axis: isize, k: usize, id_dt: DType) {
    let a = if axis < 0 {
        (axis + shape.len() as isize) as usize
    } else {
        axis as usize
    };
    let x = rand_vec::<T>(rng, numel(shape));
    let mut ss = shape.to_vec();
    ss[a] = k;
    let src = rand_vec::<T>(rng, numel(&ss));
    let idx = rand_ids(rng, k, shape[a]);
    let got = Tensor::from_slice(&x, shape).index_add(
        axis,
        &ids_tensor(&idx, id_dt),
        &Tensor::from_slice(&src, &ss),
    );
    assert_eq!(got.shape(), shape);
    assert_eq!(
        got.to_vec::<T>(),
        naive_index_add(&x, shape, a, &idx, &src),
        "index_add {} {shape:?} axis {axis}, {k} indices",
        T::DT
    );
}

#[test]
fn index_add_matches_a_loop() {
    let mut rng = Rng(4);
    for (shape, axis, k) in [
        (&[5][..], 0, 8),
        (&[4, 3][..], 0, 6),
        (&[4, 3][..], 1, 5),
        (&[4, 3][..], -1, 2),
        (&[2, 5, 3][..], 1, 9),
        (&[2, 3, 4][..], 2, 1),
        (&[3, 2, 2][..], -3, 4),
        (&[3, 4][..], 1, 0), // nothing added
    ] {
        for dt in [DType::I32, DType::I64] {
            check_index_add::<f32>(&mut rng, shape, axis, k, dt);
            check_index_add::<f64>(&mut rng, shape, axis, k, dt);
            check_index_add::<i32>(&mut rng, shape, axis, k, dt);
        }
    }
}

#[test]
fn index_add_large_matches_a_loop() {
    let mut rng = Rng(5);
    for (shape, axis, k) in [
        (&[512, 160][..], 0, 700), // rows
        (&[300, 40][..], 1, 300),  // columns: split along the rows
        (&[20, 30, 150][..], 1, 40),
        (&[70_000][..], 0, 70_000),
    ] {
        check_index_add::<f32>(&mut rng, shape, axis, k, DType::I64);
        check_index_add::<f64>(&mut rng, shape, axis, k, DType::I32);
        check_index_add::<i32>(&mut rng, shape, axis, k, DType::I32);
    }
}

#[test]
fn index_add_closed_form() {
    let x = Tensor::from_slice(&[1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]);
    let i = Tensor::from_slice(&[-1i32, 0, 2], &[3]);
    let s = Tensor::from_slice(&[10.0f64, 20.0, 30.0, 40.0, 50.0, 60.0], &[3, 2]);
    // Rows 0 and 2 of s into row 2 (-1 is the last), row 1 into row 0.
    assert_eq!(
        x.index_add(0, &i, &s).to_vec::<f64>(),
        vec![31.0, 42.0, 3.0, 4.0, 65.0, 86.0]
    );
}

// ---------------------------------------------------------------- panics

#[test]
fn segment_sum_panics() {
    let d = Tensor::zeros(&[4, 2], DType::F32);
    let ids = Tensor::from_slice(&[0i32, 1, 2, 3], &[4]);
    assert_eq!(
        panic_message(|| drop(nx::segment_sum(&d, &ids.cast(DType::F32), 4))),
        "segment_sum: indices must be i32 or i64, got f32"
    );
    assert_eq!(
        panic_message(|| drop(nx::segment_sum(&d, &ids.reshape(&[2, 2]), 4))),
        "segment_sum: expects data of shape [N, ...] and 1-D segment ids of length N, got shapes [4, 2] and [2, 2]"
    );
    assert_eq!(
        panic_message(|| drop(nx::segment_sum(&d, &ids.narrow(0, 0, 3), 4))),
        "segment_sum: expects data of shape [N, ...] and 1-D segment ids of length N, got shapes [4, 2] and [3]"
    );
    assert_eq!(
        panic_message(|| drop(nx::segment_sum(&Tensor::scalar(1.0f32), &ids, 4))),
        "segment_sum: expects data of shape [N, ...] and 1-D segment ids of length N, got shapes [] and [4]"
    );
    // Out of range: [-3, 3) for three segments.
    assert_eq!(
        panic_message(|| drop(nx::segment_sum(&d, &ids, 3))),
        "scatter_add: index 3 is out of bounds for axis 0 of size 3"
    );
    let neg = Tensor::from_slice(&[0i64, -4, 1, 1], &[4]);
    assert_eq!(
        panic_message(|| drop(nx::segment_sum(&d, &neg, 3))),
        "scatter_add: index -4 is out of bounds for axis 0 of size 3"
    );
    // The first bad id in row order is the one named, on a large input too.
    let mut v = vec![0i32; 100_000];
    v[70_001] = 9;
    v[90_000] = -12;
    let big = Tensor::zeros(&[100_000, 2], DType::F32);
    assert_eq!(
        panic_message(|| drop(nx::segment_sum(
            &big,
            &Tensor::from_slice(&v, &[100_000]),
            5
        ))),
        "scatter_add: index 9 is out of bounds for axis 0 of size 5"
    );
}

#[test]
fn index_add_panics() {
    let x = Tensor::zeros(&[3, 4], DType::F32);
    let i = Tensor::from_slice(&[0i32, 2], &[2]);
    let s = Tensor::ones(&[2, 4], DType::F32);
    assert_eq!(
        panic_message(|| drop(x.index_add(0, &i.cast(DType::F64), &s))),
        "index_add: indices must be i32 or i64, got f64"
    );
    assert_eq!(
        panic_message(|| drop(x.index_add(0, &i, &s.cast(DType::F64)))),
        "index_add: dtype mismatch: f32 and f64 (no implicit promotion; cast one operand first)"
    );
    assert_eq!(
        panic_message(|| drop(x.index_add(0, &i.reshape(&[2, 1]), &s))),
        "index_add: indices must be 1-D, got shape [2, 1]"
    );
    assert_eq!(
        panic_message(|| drop(x.index_add(1, &i, &s))),
        "index_add: the source must have shape [3, 2] (the tensor's [3, 4] with 2 indices along axis 1), got [2, 4]"
    );
    assert!(panic_message(|| drop(x.index_add(2, &i, &s))).starts_with("index_add: "));
    let bad = Tensor::from_slice(&[1i64, -5], &[2]);
    assert_eq!(
        panic_message(|| drop(x.index_add(1, &bad, &Tensor::ones(&[3, 2], DType::F32)))),
        "scatter_add: index -5 is out of bounds for axis 1 of size 4"
    );
}

// ------------------------------------------- scatter_add's split kernel

/// `x.scatter_add(axis, idx, upd)` by a loop over `idx`'s positions in
/// row-major order, each add rounded once in `T` (exact in f64, as the
/// kernel documents; for f32 and f64 that is the plain add).
fn naive_scatter_add<T: nx::Element>(
    x: &Tensor,
    axis: usize,
    idx: &Tensor,
    upd: &Tensor,
) -> Vec<T> {
    let (xs, is) = (x.shape().to_vec(), idx.shape().to_vec());
    let mut out = x.to_vec::<T>();
    let (iv, uv) = (idx.cast(DType::I64).to_vec::<i64>(), upd.to_vec::<T>());
    for (p, (&i, &u)) in iv.iter().zip(&uv).enumerate() {
        // Unravel p in idx's shape, replace the axis coordinate, ravel in x's.
        let (mut rem, mut at, mut mul) = (p, 0usize, 1usize);
        let mut coords = vec![0; is.len()];
        for d in (0..is.len()).rev() {
            coords[d] = rem % is[d];
            rem /= is[d];
        }
        coords[axis] = wrap(i, xs[axis]);
        for d in (0..xs.len()).rev() {
            at += coords[d] * mul;
            mul *= xs[d];
        }
        out[at] = if T::DTYPE.is_complex() {
            T::from_c128(out[at].to_c128() + u.to_c128())
        } else if T::DTYPE.is_float() {
            T::from_f64(out[at].to_f64() + u.to_f64())
        } else {
            T::from_i128(out[at].to_i128() + u.to_i128())
        };
    }
    out
}

fn bits<T: nx::Element>(v: &[T]) -> Vec<u128> {
    v.iter()
        .map(|x| {
            let mut b = [0u8; 16];
            // SAFETY: T is a plain value of at most 16 bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    x as *const T as *const u8,
                    b.as_mut_ptr(),
                    std::mem::size_of::<T>(),
                )
            };
            u128::from_le_bytes(b)
        })
        .collect()
}

fn check_scatter<T: nx::Element>(x: &Tensor, axis: usize, idx: &Tensor, upd: &Tensor, what: &str) {
    let got = x.scatter_add(axis as isize, idx, upd);
    assert_eq!(
        bits(&got.to_vec::<T>()),
        bits(&naive_scatter_add::<T>(x, axis, idx, upd)),
        "{what}"
    );
}

#[test]
fn scatter_add_large_matches_a_loop_in_every_split() {
    let mut rng = Rng(6);
    let mut f64s = |n: usize| (0..n).map(|_| rng.mixed()).collect::<Vec<f64>>();
    let mut rng2 = Rng(7);
    let mut ids = |n: usize, s: usize| Tensor::from_slice(&rand_ids(&mut rng2, n, s), &[n]);
    // A full index (one per element) along each axis of [40, 50, 60]
    // (the per-element path: split over the dims before the axis, or over
    // the columns when the axis is first).
    let shape = [40usize, 50, 60];
    let n = numel(&shape);
    for axis in 0..3 {
        let x = Tensor::from_slice(&f64s(n), &shape);
        let u = Tensor::from_slice(&f64s(n), &shape);
        let i = ids(n, shape[axis]).reshape(&shape);
        for dt in [DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32] {
            let (x, u) = (x.cast(dt), u.cast(dt));
            let what = format!("full index, axis {axis}, {dt}");
            match dt {
                DType::F32 => check_scatter::<f32>(&x, axis, &i, &u, &what),
                DType::F64 => check_scatter::<f64>(&x, axis, &i, &u, &what),
                DType::F16 => check_scatter::<nx::half::f16>(&x, axis, &i, &u, &what),
                DType::BF16 => check_scatter::<nx::half::bf16>(&x, axis, &i, &u, &what),
                _ => check_scatter::<i32>(&x, axis, &i, &u, &what),
            }
        }
        let (x, u) = (x.cast(DType::C64), u.cast(DType::C64));
        check_scatter::<nx::Complex<f32>>(&x, axis, &i, &u, &format!("axis {axis}, c64"));
    }
    // Rows along the axis, updates a view whose dims after the axis do not
    // merge (the split over those rows): [300, 20, 30] from [300, 30, 20].
    let u = Tensor::from_slice(&f64s(300 * 600), &[300, 30, 20])
        .swapaxes(1, 2)
        .cast(DType::F32);
    let i = ids(300, 7);
    let got = nx::segment_sum(&u, &i, 7);
    let want = nx::segment_sum(&u.contiguous(), &i, 7);
    assert_eq!(bits(&got.to_vec::<f32>()), bits(&want.to_vec::<f32>()));
    let dense = u.contiguous().to_vec::<f32>();
    let idv = i.to_vec::<i64>();
    assert_eq!(
        bits(&got.to_vec::<f32>()),
        bits(&naive_segment_sum(&dense, 600, &idv, 7)),
        "segment_sum of a non-merging view"
    );
}
