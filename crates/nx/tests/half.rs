//! The half types: conversions into f16 and bf16 round to nearest even, keep
//! subnormals and overflow to infinity, on every path a value takes into a
//! half tensor (cast from f64 and f32, scalars, `full`, integers); arithmetic
//! in f16/bf16 rounds correctly. Expected values come from `common`'s
//! rounding, written from the IEEE definition with integer arithmetic.

mod common;

use common::{pseudo_random, round_to_bf16, round_to_f16};
use half::{bf16, f16};
use nx::{DType, Tensor};

fn p2(e: i32) -> f64 {
    2f64.powi(e)
}

fn cast_f64_to_f16(v: &[f64]) -> Vec<f64> {
    Tensor::from_slice(v, &[v.len()])
        .cast(DType::F16)
        .to_vec::<f16>()
        .iter()
        .map(|h| h.to_f64())
        .collect()
}

fn cast_f64_to_bf16(v: &[f64]) -> Vec<f64> {
    Tensor::from_slice(v, &[v.len()])
        .cast(DType::BF16)
        .to_vec::<bf16>()
        .iter()
        .map(|h| h.to_f64())
        .collect()
}

fn same(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || (a == b && a.is_sign_negative() == b.is_sign_negative())
}

fn check_all(input: &[f64], got: &[f64], want: &[f64], what: &str) {
    let bad: Vec<String> = (0..input.len())
        .filter(|&i| !same(got[i], want[i]))
        .map(|i| format!("  {:e} -> got {:e}, want {:e}", input[i], got[i], want[i]))
        .take(10)
        .collect();
    assert!(bad.is_empty(), "{what}:\n{}", bad.join("\n"));
}

#[test]
fn f16_round_to_nearest_even_cases() {
    let cases: &[(f64, f64)] = &[
        (p2(-25), 0.0),           // exactly half the smallest subnormal: tie to even 0
        (1.5 * p2(-25), p2(-24)), // above the tie: the smallest subnormal
        (-(p2(-25)), -0.0),       // sign kept
        (p2(-26), 0.0),
        (p2(-24), p2(-24)), // subnormals are kept
        (3.0 * p2(-24), 3.0 * p2(-24)),
        (2.5 * p2(-24), 2.0 * p2(-24)), // tie between subnormals: even
        (3.5 * p2(-24), 4.0 * p2(-24)),
        (p2(-14) - p2(-25), p2(-14)), // rounds up into the normals
        (65504.0, 65504.0),           // the largest finite
        (65519.0, 65504.0),           // below the halfway point
        (65520.0, f64::INFINITY),     // halfway to 2^16: ties to even = overflow
        (65536.0, f64::INFINITY),
        (-65536.0, f64::NEG_INFINITY),
        (1e10, f64::INFINITY),
        (1.0 + p2(-11), 1.0),                     // tie: even
        (1.0 + 3.0 * p2(-11), 1.0 + p2(-9)),      // tie: even (up)
        (1.0 + p2(-11) + p2(-40), 1.0 + p2(-10)), // just above the tie (needs the low bits)
        (-(1.0 + p2(-11) + p2(-30)), -(1.0 + p2(-10))),
        (2049.0, 2048.0),
        (2051.0, 2052.0),
        (0.1, 0.0999755859375),
        (f64::INFINITY, f64::INFINITY),
        (-0.0, -0.0),
    ];
    let input: Vec<f64> = cases.iter().map(|c| c.0).collect();
    let want: Vec<f64> = cases.iter().map(|c| c.1).collect();
    // The test's own rounding agrees with the table above...
    let mine: Vec<f64> = input.iter().map(|&x| round_to_f16(x)).collect();
    check_all(&input, &mine, &want, "reference rounding to f16");
    // ... and so does nx on every path into f16.
    check_all(&input, &cast_f64_to_f16(&input), &want, "cast f64 -> f16");
    let full: Vec<f64> = input
        .iter()
        .map(|&x| Tensor::full(&[1], x, DType::F16).to_vec::<f16>()[0].to_f64())
        .collect();
    check_all(&input, &full, &want, "Tensor::full(.., F16)");
    let scalar: Vec<f64> = input
        .iter()
        .map(|&x| {
            let z = Tensor::zeros(&[1], DType::F16);
            (&z + x).to_vec::<f16>()[0].to_f64()
        })
        .collect();
    // 0 + (-0) is +0; compare by value there.
    for (i, (&g, &w)) in scalar.iter().zip(&want).enumerate() {
        assert!(
            g == w || (g.is_nan() && w.is_nan()),
            "f16 zeros + {:e}: got {g:e}, want {w:e}",
            input[i]
        );
    }
    let nan = cast_f64_to_f16(&[f64::NAN]);
    assert!(nan[0].is_nan());
}

#[test]
fn f32_to_f16_rounds_once() {
    let cases: &[(f64, f64)] = &[
        (p2(-25), 0.0),
        (1.5 * p2(-25), p2(-24)),
        (65519.0, 65504.0),
        (65520.0, f64::INFINITY),
        (1.0 + p2(-11) + p2(-23), 1.0 + p2(-10)),
        (1.0 + p2(-11), 1.0),
    ];
    let input: Vec<f32> = cases.iter().map(|c| c.0 as f32).collect();
    let got: Vec<f64> = Tensor::from_slice(&input, &[input.len()])
        .cast(DType::F16)
        .to_vec::<f16>()
        .iter()
        .map(|h| h.to_f64())
        .collect();
    let want: Vec<f64> = cases.iter().map(|c| c.1).collect();
    let inp: Vec<f64> = input.iter().map(|&x| x as f64).collect();
    check_all(&inp, &got, &want, "cast f32 -> f16");
}

#[test]
fn bf16_round_to_nearest_even_cases() {
    let max = (2.0 - p2(-7)) * p2(127);
    let cases: &[(f64, f64)] = &[
        (p2(-134), 0.0), // half the smallest subnormal (2^-133)
        (1.5 * p2(-134), p2(-133)),
        (p2(-133), p2(-133)), // subnormals kept
        (3.0 * p2(-133), 3.0 * p2(-133)),
        (2.5 * p2(-133), 2.0 * p2(-133)),
        (max, max),
        (max + p2(118), max),           // below halfway to 2^128
        (max + p2(119), f64::INFINITY), // halfway: even = overflow
        (max + p2(120), f64::INFINITY),
        (p2(128), f64::INFINITY),
        (-p2(200), f64::NEG_INFINITY),
        (1.0 + p2(-8), 1.0), // tie: even
        (1.0 + 3.0 * p2(-8), 1.0 + p2(-6)),
        (1.0 + p2(-8) + p2(-40), 1.0 + p2(-7)), // low bits decide
        (1.0 + p2(-8) + p2(-23), 1.0 + p2(-7)),
        (-(1.0 + p2(-8) + p2(-50)), -(1.0 + p2(-7))),
        (257.0, 256.0),
        (259.0, 260.0),
        (-0.0, -0.0),
    ];
    let input: Vec<f64> = cases.iter().map(|c| c.0).collect();
    let want: Vec<f64> = cases.iter().map(|c| c.1).collect();
    let mine: Vec<f64> = input.iter().map(|&x| round_to_bf16(x)).collect();
    check_all(&input, &mine, &want, "reference rounding to bf16");
    check_all(&input, &cast_f64_to_bf16(&input), &want, "cast f64 -> bf16");
    let full: Vec<f64> = input
        .iter()
        .map(|&x| Tensor::full(&[1], x, DType::BF16).to_vec::<bf16>()[0].to_f64())
        .collect();
    check_all(&input, &full, &want, "Tensor::full(.., BF16)");
    // From f32 (only the cases representable in f32).
    let f32s: Vec<(f64, f64)> = cases
        .iter()
        .copied()
        .filter(|c| (c.0 as f32) as f64 == c.0)
        .collect();
    let inp: Vec<f32> = f32s.iter().map(|c| c.0 as f32).collect();
    let got: Vec<f64> = Tensor::from_slice(&inp, &[inp.len()])
        .cast(DType::BF16)
        .to_vec::<bf16>()
        .iter()
        .map(|h| h.to_f64())
        .collect();
    let want32: Vec<f64> = f32s.iter().map(|c| c.1).collect();
    let inp64: Vec<f64> = inp.iter().map(|&x| x as f64).collect();
    check_all(&inp64, &got, &want32, "cast f32 -> bf16");
}

/// Random f64 values over the whole range of the half types: normal,
/// subnormal, overflowing, near ties.
fn wide_sample(seed: u64) -> Vec<f64> {
    let mut v = vec![];
    let exps = pseudo_random(seed, 3000, -30.0, 18.0);
    let mants = pseudo_random(seed + 1, 3000, 1.0, 2.0);
    let signs = pseudo_random(seed + 2, 3000, -1.0, 1.0);
    for i in 0..3000 {
        let x = mants[i] * p2(exps[i].floor() as i32);
        v.push(if signs[i] < 0.0 { -x } else { x });
    }
    // Values on and next to the ties of f16: k/2 ulps, plus or minus a little.
    for k in 0..200 {
        let base = 1.0 + (2 * k + 1) as f64 * p2(-11);
        v.extend([base, base + p2(-45), base - p2(-45)]);
    }
    v
}

#[test]
fn random_f64_and_f32_to_f16_match_the_definition() {
    let input = wide_sample(1);
    let want: Vec<f64> = input.iter().map(|&x| round_to_f16(x)).collect();
    check_all(&input, &cast_f64_to_f16(&input), &want, "cast f64 -> f16");
    let inp32: Vec<f32> = input.iter().map(|&x| x as f32).collect();
    let got: Vec<f64> = Tensor::from_slice(&inp32, &[inp32.len()])
        .cast(DType::F16)
        .to_vec::<f16>()
        .iter()
        .map(|h| h.to_f64())
        .collect();
    let i64s: Vec<f64> = inp32.iter().map(|&x| x as f64).collect();
    let want: Vec<f64> = i64s.iter().map(|&x| round_to_f16(x)).collect();
    check_all(&i64s, &got, &want, "cast f32 -> f16");
}

#[test]
fn random_f64_and_f32_to_bf16_match_the_definition() {
    let mut input = wide_sample(2);
    input.extend(pseudo_random(3, 500, -1e38, 1e38));
    for k in 0..200 {
        let base = 1.0 + (2 * k + 1) as f64 * p2(-8) / 2.0;
        input.extend([base, base + p2(-30), base - p2(-30)]);
    }
    let want: Vec<f64> = input.iter().map(|&x| round_to_bf16(x)).collect();
    check_all(&input, &cast_f64_to_bf16(&input), &want, "cast f64 -> bf16");
    let inp32: Vec<f32> = input.iter().map(|&x| x as f32).collect();
    let got: Vec<f64> = Tensor::from_slice(&inp32, &[inp32.len()])
        .cast(DType::BF16)
        .to_vec::<bf16>()
        .iter()
        .map(|h| h.to_f64())
        .collect();
    let x64: Vec<f64> = inp32.iter().map(|&x| x as f64).collect();
    let want: Vec<f64> = x64.iter().map(|&x| round_to_bf16(x)).collect();
    check_all(&x64, &got, &want, "cast f32 -> bf16");
}

/// Decodes an f16 bit pattern from the IEEE definition.
fn decode_f16(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let e = ((bits >> 10) & 0x1f) as i32;
    let m = (bits & 0x3ff) as f64;
    sign * match e {
        0 => m * p2(-24),
        31 => {
            if m == 0.0 {
                f64::INFINITY
            } else {
                f64::NAN
            }
        }
        _ => (1.0 + m / 1024.0) * p2(e - 15),
    }
}

fn decode_bf16(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let e = ((bits >> 7) & 0xff) as i32;
    let m = (bits & 0x7f) as f64;
    sign * match e {
        0 => m * p2(-133),
        255 => {
            if m == 0.0 {
                f64::INFINITY
            } else {
                f64::NAN
            }
        }
        _ => (1.0 + m / 128.0) * p2(e - 127),
    }
}

#[test]
fn every_half_value_widens_exactly() {
    let all: Vec<u16> = (0..=u16::MAX).collect();
    let h: Vec<f16> = all.iter().map(|&b| f16::from_bits(b)).collect();
    let b: Vec<bf16> = all.iter().map(|&b| bf16::from_bits(b)).collect();
    let th = Tensor::from_slice(&h, &[h.len()]);
    let tb = Tensor::from_slice(&b, &[b.len()]);
    let h64 = th.cast(DType::F64).to_vec::<f64>();
    let h32 = th.cast(DType::F32).to_vec::<f32>();
    let b64 = tb.cast(DType::F64).to_vec::<f64>();
    let b32 = tb.cast(DType::F32).to_vec::<f32>();
    for i in 0..all.len() {
        let (dh, db) = (decode_f16(all[i]), decode_bf16(all[i]));
        assert!(
            same(h64[i], dh),
            "f16 {:#06x} -> f64 {} vs {}",
            all[i],
            h64[i],
            dh
        );
        assert!(same(h32[i] as f64, dh), "f16 {:#06x} -> f32", all[i]);
        assert!(
            same(b64[i], db),
            "bf16 {:#06x} -> f64 {} vs {}",
            all[i],
            b64[i],
            db
        );
        assert!(same(b32[i] as f64, db), "bf16 {:#06x} -> f32", all[i]);
    }
    // And narrowing them back is the identity (NaNs stay NaN).
    let back = th.cast(DType::F64).cast(DType::F16).to_vec::<f16>();
    for i in 0..all.len() {
        assert!(
            back[i].to_bits() == all[i] || (back[i].is_nan() && h[i].is_nan()),
            "f16 {:#06x} round trip gave {:#06x}",
            all[i],
            back[i].to_bits()
        );
    }
    let back = tb.cast(DType::F32).cast(DType::BF16).to_vec::<bf16>();
    for i in 0..all.len() {
        assert!(
            back[i].to_bits() == all[i] || (back[i].is_nan() && b[i].is_nan()),
            "bf16 {:#06x} round trip gave {:#06x}",
            all[i],
            back[i].to_bits()
        );
    }
}

#[test]
fn integers_to_half_round_once() {
    // f16: integers above 2048 are spaced 2, above 4096 spaced 4, ...
    let ints: Vec<i64> = vec![
        2049,
        2051,
        4097,
        4098,
        4099,
        65504,
        65519,
        65520,
        70000,
        -2051,
        i64::MAX,
        i64::MIN,
    ];
    let got: Vec<f64> = Tensor::from_slice(&ints, &[ints.len()])
        .cast(DType::F16)
        .to_vec::<f16>()
        .iter()
        .map(|h| h.to_f64())
        .collect();
    let want: Vec<f64> = ints.iter().map(|&i| round_to_f16(i as f64)).collect();
    let inp: Vec<f64> = ints.iter().map(|&i| i as f64).collect();
    check_all(&inp, &got, &want, "cast i64 -> f16");
    // bf16 and f32 from 64-bit integers beyond 2^53: one rounding from the
    // exact integer (2^60 + 2^52 + 1 is just above a bf16 tie, which f64
    // alone would round onto).
    let big: Vec<u64> = vec![
        (1 << 60) + (1 << 52) + 1,
        (1 << 60) + (1 << 36) + 1,
        u64::MAX,
        (1 << 53) + 1,
    ];
    let want_bf16 = [p2(60) + p2(53), p2(60), p2(64), p2(53)];
    let want_f32 = [p2(60) + p2(52), p2(60) + p2(37), p2(64), p2(53)];
    let t = Tensor::from_slice(&big, &[big.len()]);
    let gb: Vec<f64> = t
        .cast(DType::BF16)
        .to_vec::<bf16>()
        .iter()
        .map(|h| h.to_f64())
        .collect();
    let gf: Vec<f64> = t
        .cast(DType::F32)
        .to_vec::<f32>()
        .iter()
        .map(|&h| h as f64)
        .collect();
    let inp: Vec<f64> = big.iter().map(|&i| i as f64).collect();
    check_all(&inp, &gb, &want_bf16, "cast u64 -> bf16");
    check_all(&inp, &gf, &want_f32, "cast u64 -> f32");
}

/// Random values of a half type (finite), as f64.
fn half_values(seed: u64, n: usize, dtype: DType) -> Vec<f64> {
    let bits = pseudo_random(seed, n, 0.0, 65536.0);
    bits.iter()
        .map(|&b| {
            let b = b as u16;
            if dtype == DType::F16 {
                decode_f16(b)
            } else {
                decode_bf16(b)
            }
        })
        .filter(|x| x.is_finite())
        .collect()
}

fn to_half_tensor(v: &[f64], dtype: DType) -> Tensor {
    if dtype == DType::F16 {
        Tensor::from_vec(v.iter().map(|&x| f16::from_f64(x)).collect(), &[v.len()])
    } else {
        Tensor::from_vec(v.iter().map(|&x| bf16::from_f64(x)).collect(), &[v.len()])
    }
}

fn read_half(t: &Tensor) -> Vec<f64> {
    if t.dtype() == DType::F16 {
        t.to_vec::<f16>().iter().map(|h| h.to_f64()).collect()
    } else {
        t.to_vec::<bf16>().iter().map(|h| h.to_f64()).collect()
    }
}

#[test]
fn half_arithmetic_rounds_correctly() {
    // For + - * / and sqrt, the exact result (f64 is wide enough for the
    // first three exactly, and rounds the others innocuously) rounded once to
    // the half type is what the operation must give.
    for dtype in [DType::F16, DType::BF16] {
        let round = |x: f64| {
            if dtype == DType::F16 {
                round_to_f16(x)
            } else {
                round_to_bf16(x)
            }
        };
        let a = half_values(10, 4000, dtype);
        let b = half_values(11, 4000, dtype);
        let n = a.len().min(b.len());
        let (a, b) = (&a[..n], &b[..n]);
        let (ta, tb) = (to_half_tensor(a, dtype), to_half_tensor(b, dtype));
        type Op = (
            &'static str,
            fn(&Tensor, &Tensor) -> Tensor,
            fn(f64, f64) -> f64,
        );
        let ops: [Op; 4] = [
            ("add", Tensor::add, |x, y| x + y),
            ("sub", Tensor::sub, |x, y| x - y),
            ("mul", Tensor::mul, |x, y| x * y),
            ("div", Tensor::div, |x, y| x / y),
        ];
        for (name, f, rf) in ops {
            let got = read_half(&f(&ta, &tb));
            let want: Vec<f64> = (0..n).map(|i| round(rf(a[i], b[i]))).collect();
            let bad: Vec<String> = (0..n)
                .filter(|&i| !(got[i] == want[i] || (got[i].is_nan() && want[i].is_nan())))
                .map(|i| {
                    format!(
                        "  {:e} {name} {:e}: got {:e}, want {:e}",
                        a[i], b[i], got[i], want[i]
                    )
                })
                .take(10)
                .collect();
            assert!(bad.is_empty(), "{dtype} {name}:\n{}", bad.join("\n"));
        }
        let pos: Vec<f64> = a.iter().map(|x| x.abs()).collect();
        let got = read_half(&to_half_tensor(&pos, dtype).sqrt());
        for i in 0..n {
            assert_eq!(got[i], round(pos[i].sqrt()), "{dtype} sqrt({:e})", pos[i]);
        }
        // Scalars take the half type: x * 0.1 multiplies by 0.1 rounded to the type.
        let got = read_half(&(&ta * 0.1));
        for i in 0..n {
            let w = round(a[i] * round(0.1));
            assert!(
                got[i] == w,
                "{dtype} {:e} * 0.1: got {:e}, want {w:e}",
                a[i],
                got[i]
            );
        }
    }
}

#[test]
fn half_specials() {
    // Overflow, underflow and NaN in f16 arithmetic.
    let x = Tensor::from_slice(
        &[
            f16::from_f64(60000.0),
            f16::from_f64(p2(-24)),
            f16::from_f64(-2.0),
        ],
        &[3],
    );
    let y = &x * 2.0;
    let v = read_half(&y);
    assert_eq!(v[0], f64::INFINITY);
    assert_eq!(v[1], p2(-23));
    assert_eq!(v[2], -4.0);
    let z = read_half(&(&x * 0.5));
    assert_eq!(z[1], 0.0, "half of the smallest subnormal ties to 0");
    assert!(read_half(&(&x - &x).div(&(&x - &x)))[0].is_nan());
    assert_eq!(f16::MAX.to_f64(), 65504.0);
    assert_eq!(bf16::MAX.to_f64(), (2.0 - p2(-7)) * p2(127));
}
