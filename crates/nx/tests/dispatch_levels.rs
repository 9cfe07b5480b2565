//! The eager kernels at every instruction-set level this machine supports
//! (`nx::force_cpu_level`) give the same bits: the maps, reductions, casts,
//! half-precision conversions and threefry at every level; the f32
//! polynomials (exp, log, tanh, sin, cos, sigmoid), whose `mla` fuses at the
//! levels with FMA, among the levels that share that choice, and within
//! their error bounds at each level.
//!
//! One test: the level is global, and the other tests of a binary would run
//! beside it.

#[path = "common/ulps.rs"]
mod ulps;
use nx::half::{bf16, f16};
use nx::{CpuLevel, DType, Prim, Tensor};
use ulps::ulps;

/// xorshift32: any bit pattern (NaNs, infinities, subnormals, huge values).
fn bit_patterns(n: usize, mut s: u32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            f32::from_bits(s)
        })
        .collect()
}

/// Random bit patterns, a dense sweep of each function's interesting range
/// and the special values: 300k inputs (above the parallel threshold).
fn inputs() -> Vec<f32> {
    let mut v = bit_patterns(150_000, 0x9e37_79b9);
    v.extend((0..140_000).map(|i| -110.0 + 220.0 * i as f32 / 140_000.0));
    v.extend([
        0.0,
        -0.0,
        1.0,
        -1.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7fa0_0001),
        f32::MAX,
        f32::MIN,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        88.72283,
        -103.97,
        32768.0,
        32768.004,
        1e-30,
        0.5,
        2.5,
    ]);
    v.resize(300_000, 0.25);
    v
}

/// Every NaN reads as this: which operand's NaN an operation returns is not
/// defined (LLVM may swap the operands of `a + b`), only that it is NaN.
const NAN: u64 = u64::MAX;

/// The result's bits, NaNs as `NAN`.
fn bits(t: &Tensor) -> Vec<u64> {
    fn float<T: Copy>(v: Vec<T>, is_nan: fn(T) -> bool, bits: fn(T) -> u64) -> Vec<u64> {
        v.into_iter()
            .map(|x| if is_nan(x) { NAN } else { bits(x) })
            .collect()
    }
    match t.dtype() {
        DType::F32 => float(t.to_vec::<f32>(), f32::is_nan, |v| v.to_bits() as u64),
        DType::F64 => float(t.to_vec::<f64>(), f64::is_nan, f64::to_bits),
        DType::F16 => float(t.to_vec::<f16>(), f16::is_nan, |v| v.to_bits() as u64),
        DType::BF16 => float(t.to_vec::<bf16>(), bf16::is_nan, |v| v.to_bits() as u64),
        DType::I32 => t.to_vec::<i32>().iter().map(|&v| v as u32 as u64).collect(),
        DType::U32 => t.to_vec::<u32>().iter().map(|&v| v as u64).collect(),
        DType::U8 => t.to_vec::<u8>().iter().map(|&v| v as u64).collect(),
        d => panic!("no bits for {d:?}"),
    }
}

/// Every kernel's output on the inputs, by name; the second list is the
/// f32 polynomials (their bits depend on the level's FMA).
fn outputs(x: &[f32]) -> (Vec<(&'static str, Vec<u64>)>, Vec<(&'static str, Vec<u64>)>) {
    let n = x.len();
    let t = Tensor::from_slice(x, &[n]);
    let y = Tensor::from_slice(&bit_patterns(n, 7), &[n]);
    let small = t.narrow(0, 0, 1000); // below the parallel threshold
    let strided = t.reshape(&[n / 2, 2]).transpose(); // a non-unit-stride view
    let fin: Vec<f32> = x
        .iter()
        .map(|v| {
            if v.is_finite() {
                v.clamp(-1e6, 1e6)
            } else {
                0.5
            }
        })
        .collect();
    let tf = Tensor::from_slice(&fin, &[n]);
    let m = tf.reshape(&[600, 500]);
    let key = Tensor::from_slice(&[0x1234_5678u32, 0x9abc_def0], &[2]);
    let ctr: Vec<u32> = x.iter().map(|v| v.to_bits()).collect();
    let ctr = Tensor::from_slice(&ctr, &[n / 2, 2]);
    let keys = Tensor::from_slice(
        &ctr.to_vec::<u32>()[..]
            .iter()
            .rev()
            .copied()
            .collect::<Vec<_>>(),
        &[n / 2, 2],
    );
    let exact = vec![
        ("add", bits(&(&t + &y))),
        ("mul", bits(&(&t * &y))),
        ("div", bits(&(&t / &y))),
        ("scalar add", bits(&(&t + 1.0))),
        ("max", bits(&t.maximum(&y))),
        ("sqrt", bits(&t.sqrt())),
        ("where", bits(&Tensor::where_(&t.less(&y), &t, &y))),
        ("strided mul", bits(&(&strided * &strided))),
        ("row broadcast add", bits(&(&m + &m.narrow(0, 0, 1)))),
        ("sum", bits(&tf.sum_all())),
        ("sum f64", bits(&tf.cast(DType::F64).sum_all())),
        ("row sums", bits(&m.sum(&[1], false))),
        ("column sums", bits(&m.sum(&[0], false))),
        ("strided sum", bits(&m.transpose().sum(&[1], false))),
        ("max all", bits(&m.max(&[0, 1], false))),
        ("prod", bits(&(&m * 0.001 + 1.0).prod(&[1], false))),
        ("cast f16", bits(&t.cast(DType::F16))),
        ("cast bf16", bits(&t.cast(DType::BF16))),
        ("cast i32", bits(&t.cast(DType::I32))),
        ("cast u8", bits(&t.cast(DType::U8))),
        ("cast f64", bits(&t.cast(DType::F64))),
        ("f16 round trip", bits(&t.cast(DType::F16).cast(DType::F32))),
        ("f16 exp", bits(&t.cast(DType::F16).exp())),
        (
            "bf16 mul",
            bits(&(&t.cast(DType::BF16) * &y.cast(DType::BF16))),
        ),
        ("f64 exp", bits(&t.cast(DType::F64).exp())),
        (
            "threefry",
            bits(&nx::bind(Prim::Threefry2x32, &[&key, &ctr])),
        ),
        (
            "threefry keys",
            bits(&nx::bind(Prim::Threefry2x32, &[&keys, &ctr])),
        ),
    ];
    let poly = vec![
        ("exp", bits(&t.exp())),
        ("exp serial", bits(&small.exp())),
        ("exp strided", bits(&strided.exp())),
        ("log", bits(&t.log())),
        ("tanh", bits(&t.tanh())),
        ("sin", bits(&t.sin())),
        ("sin strided", bits(&strided.sin())),
        ("cos", bits(&t.cos())),
        ("sigmoid", bits(&t.sigmoid())),
        ("exp(x) * y + 1", bits(&(t.exp() * &y + 1.0))),
    ];
    (exact, poly)
}

/// The f32 polynomials within their documented bounds (cpu/math.rs).
fn check_bounds(level: CpuLevel, x: &[f32], poly: &[(&str, Vec<u64>)]) {
    let get = |name: &str| &poly.iter().find(|p| p.0 == name).unwrap().1;
    let cases: [(&str, fn(f64) -> f64, f64, fn(f32) -> bool); 5] = [
        ("exp", f64::exp, 2.0, |_| true),
        ("log", f64::ln, 1.0, |_| true),
        ("tanh", f64::tanh, 7.0, |_| true),
        ("sin", f64::sin, 3.0, |v| v.abs() <= 32768.0),
        ("cos", f64::cos, 3.0, |v| v.abs() <= 32768.0),
    ];
    for (name, reference, bound, domain) in cases {
        for (&v, &b) in x.iter().zip(get(name)) {
            if domain(v) {
                let e = ulps(f32::from_bits(b as u32), reference(v as f64));
                assert!(e <= bound, "{level}: {name}({v:e}) is {e} ulp off");
            }
        }
    }
}

#[test]
fn every_level_gives_the_same_bits() {
    let x = inputs();
    let levels = CpuLevel::supported();
    assert_eq!(*levels.last().unwrap(), CpuLevel::best());
    let mut runs = Vec::new();
    for &level in &levels {
        nx::force_cpu_level(Some(level));
        assert_eq!(nx::cpu_features(), level);
        let (exact, poly) = outputs(&x);
        check_bounds(level, &x, &poly);
        runs.push((level, exact, poly));
    }
    nx::force_cpu_level(None);
    let fma = |l: CpuLevel| matches!(l, CpuLevel::X86_64V3 | CpuLevel::X86_64V4);
    let (l0, exact0, _) = &runs[0];
    for (level, exact, poly) in &runs[1..] {
        for ((name, a), (_, b)) in exact0.iter().zip(exact) {
            assert!(a == b, "{name}: {level} differs from {l0}");
        }
        for (l1, _, poly1) in &runs {
            if fma(*l1) == fma(*level) {
                for ((name, a), (_, b)) in poly1.iter().zip(poly) {
                    assert!(a == b, "{name}: {level} differs from {l1}");
                }
            }
        }
    }
    // The serial and strided paths compute what the parallel one does.
    for (level, _, poly) in &runs {
        let get = |name: &str| &poly.iter().find(|p| p.0 == name).unwrap().1;
        assert_eq!(get("exp serial")[..], get("exp")[..1000], "{level}");
        let n = x.len();
        let unstride = |v: &Vec<u64>| -> Vec<u64> {
            // strided[i, j] = x[2 j + i]
            let mut out = vec![0; n];
            for (k, &b) in v.iter().enumerate() {
                let (i, j) = (k / (n / 2), k % (n / 2));
                out[2 * j + i] = b;
            }
            out
        };
        assert_eq!(unstride(get("exp strided")), *get("exp"), "{level}");
        assert_eq!(unstride(get("sin strided")), *get("sin"), "{level}");
    }
}
