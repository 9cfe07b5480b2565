//! I4 / U4: storage (one value per byte, kept to its low 4 bits), casts to
//! and from every dtype over the whole range, wrapping arithmetic against
//! the same arithmetic done in i32 and reduced mod 16, comparisons, Display,
//! and the operations they refuse.

use nx::{Complex, DType, Tensor, I4, U4};

fn i4_range() -> Vec<I4> {
    (-8..=7).map(I4).collect()
}

fn u4_range() -> Vec<U4> {
    (0..=15).map(U4).collect()
}

/// `v`'s low 4 bits, sign-extended.
fn wrap_i4(v: i64) -> i8 {
    let m = v.rem_euclid(16) as i8;
    if m >= 8 {
        m - 16
    } else {
        m
    }
}

fn wrap_u4(v: i64) -> u8 {
    v.rem_euclid(16) as u8
}

#[test]
fn newtypes_have_the_documented_bounds_and_byte_storage() {
    assert_eq!(DType::I4.size_in_bytes(), 1);
    assert_eq!(DType::U4.size_in_bytes(), 1);
    assert_eq!(
        (I4::MIN, I4::MAX, U4::MIN, U4::MAX),
        (I4(-8), I4(7), U4(0), U4(15))
    );
    assert!(DType::I4.is_signed_int() && DType::U4.is_unsigned_int());
    assert!(DType::I4.is_4bit() && !DType::I8.is_4bit());
    let x = Tensor::from_slice(&i4_range(), &[16]);
    assert_eq!(x.dtype(), DType::I4);
    assert_eq!(x.to_vec::<I4>(), i4_range());
}

#[test]
fn out_of_range_values_keep_their_low_four_bits() {
    let x = Tensor::from_slice(&[I4(8), I4(9), I4(-9), I4(100)], &[4]);
    let want: Vec<I4> = [8i64, 9, -9, 100].iter().map(|&v| I4(wrap_i4(v))).collect();
    assert_eq!(x.to_vec::<I4>(), want);
    let y = Tensor::from_slice(&[U4(16), U4(17), U4(255)], &[3]);
    assert_eq!(y.to_vec::<U4>(), vec![U4(0), U4(1), U4(15)]);
}

#[test]
fn integer_casts_wrap_over_the_whole_range() {
    // Every i16 value into I4 and U4: the low 4 bits.
    let all: Vec<i16> = (i16::MIN..=i16::MAX).collect();
    let x = Tensor::from_slice(&all, &[all.len()]);
    let i4 = x.cast(DType::I4).to_vec::<I4>();
    let u4 = x.cast(DType::U4).to_vec::<U4>();
    for (k, &v) in all.iter().enumerate() {
        assert_eq!(i4[k], I4(wrap_i4(v as i64)), "{v} -> i4");
        assert_eq!(u4[k], U4(wrap_u4(v as i64)), "{v} -> u4");
    }
    // And back out to every real dtype: exact.
    for d in DType::ALL {
        let back = Tensor::from_slice(&i4_range(), &[16])
            .cast(d)
            .cast(DType::F64);
        let want: Vec<f64> = (-8..=7)
            .map(|v: i64| match d {
                DType::Bool => (v != 0) as u8 as f64,
                _ if d.is_unsigned_int() => {
                    let bits = d.size_in_bytes() * 8;
                    (v as i128).rem_euclid(1i128 << bits) as f64
                }
                _ => v as f64,
            })
            .collect();
        assert_eq!(back.to_vec::<f64>(), want, "i4 -> {d}");
        let back = Tensor::from_slice(&u4_range(), &[16])
            .cast(d)
            .cast(DType::F64);
        let want: Vec<f64> = (0..=15)
            .map(|v: i64| {
                if d == DType::Bool {
                    (v != 0) as u8 as f64
                } else {
                    v as f64
                }
            })
            .collect();
        assert_eq!(back.to_vec::<f64>(), want, "u4 -> {d}");
    }
    // I4 <-> U4 wraps both ways.
    let x = Tensor::from_slice(&i4_range(), &[16])
        .cast(DType::U4)
        .to_vec::<U4>();
    assert_eq!(x, (-8..=7).map(|v| U4(wrap_u4(v))).collect::<Vec<_>>());
    let y = Tensor::from_slice(&u4_range(), &[16])
        .cast(DType::I4)
        .to_vec::<I4>();
    assert_eq!(y, (0..=15).map(|v| I4(wrap_i4(v))).collect::<Vec<_>>());
}

#[test]
fn float_casts_truncate_and_saturate() {
    let vals = [
        -100.0,
        -8.5,
        -7.9,
        -0.5,
        0.0,
        0.75,
        6.75,
        7.5,
        15.5,
        16.0,
        1e9,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ];
    let x = Tensor::from_slice(&vals, &[vals.len()]);
    let i4 = x.cast(DType::I4).to_vec::<I4>();
    let u4 = x.cast(DType::U4).to_vec::<U4>();
    for (k, &v) in vals.iter().enumerate() {
        let t = if v.is_nan() { 0.0 } else { v.trunc() };
        assert_eq!(i4[k], I4(t.clamp(-8.0, 7.0) as i8), "{v} -> i4");
        assert_eq!(u4[k], U4(t.clamp(0.0, 15.0) as u8), "{v} -> u4");
    }
    // f32 and f16 sources agree with f64's.
    for d in [DType::F32, DType::F16, DType::BF16] {
        let y = x.cast(d).cast(DType::I4).to_vec::<I4>();
        assert_eq!(y, i4, "{d} -> i4");
    }
    // complex sources go through real() (a direct cast panics)
    let z = Tensor::from_slice(&[Complex::new(-9.5f32, 3.0), Complex::new(3.7, -1.0)], &[2]);
    assert_eq!(z.real().cast(DType::I4).to_vec::<I4>(), vec![I4(-8), I4(3)]);
    // and 4-bit values widen into complex ones
    let c = Tensor::from_slice(&[I4(-8), I4(7)], &[2]).cast(DType::C64);
    assert_eq!(
        c.to_vec::<Complex<f32>>(),
        vec![Complex::new(-8.0, 0.0), Complex::new(7.0, 0.0)]
    );
}

#[test]
fn arithmetic_wraps_like_i32_mod_16() {
    let a: Vec<I4> = (0..256).map(|k| I4(((k / 16) as i8) - 8)).collect();
    let b: Vec<I4> = (0..256).map(|k| I4(((k % 16) as i8) - 8)).collect();
    let (x, y) = (
        Tensor::from_slice(&a, &[256]),
        Tensor::from_slice(&b, &[256]),
    );
    type Op = fn(i64, i64) -> i64;
    let cases: [(&str, Tensor, Op); 6] = [
        ("add", x.add(&y), |p, q| p + q),
        ("sub", x.sub(&y), |p, q| p - q),
        ("mul", x.mul(&y), |p, q| p * q),
        ("div", x.div(&y), |p, q| if q == 0 { 0 } else { p / q }),
        ("rem", x.rem(&y), |p, q| if q == 0 { 0 } else { p % q }),
        ("maximum", x.maximum(&y), |p, q| p.max(q)),
    ];
    for (name, got, f) in cases {
        let got = got.to_vec::<I4>();
        for k in 0..256 {
            let want = I4(wrap_i4(f(a[k].0 as i64, b[k].0 as i64)));
            assert_eq!(got[k], want, "{name}({:?}, {:?})", a[k], b[k]);
        }
    }
    let neg = x.neg().to_vec::<I4>();
    let abs = x.abs().to_vec::<I4>();
    for k in 0..256 {
        assert_eq!(neg[k], I4(wrap_i4(-(a[k].0 as i64))));
        assert_eq!(abs[k], I4(wrap_i4((a[k].0 as i64).abs())));
    }
    let ua: Vec<U4> = (0..256).map(|k| U4((k / 16) as u8)).collect();
    let ub: Vec<U4> = (0..256).map(|k| U4((k % 16) as u8)).collect();
    let (u, v) = (
        Tensor::from_slice(&ua, &[256]),
        Tensor::from_slice(&ub, &[256]),
    );
    let (s, d, m) = (
        u.add(&v).to_vec::<U4>(),
        u.sub(&v).to_vec::<U4>(),
        u.mul(&v).to_vec::<U4>(),
    );
    for k in 0..256 {
        let (p, q) = (ua[k].0 as i64, ub[k].0 as i64);
        assert_eq!(
            (s[k], d[k], m[k]),
            (U4(wrap_u4(p + q)), U4(wrap_u4(p - q)), U4(wrap_u4(p * q)))
        );
    }
    // scalars take the tensor's dtype
    assert_eq!((&u + 1.0).to_vec::<U4>()[255], U4(0));
}

#[test]
fn comparisons_order_by_value() {
    let x = Tensor::from_slice(&i4_range(), &[16]);
    let zero = Tensor::from_slice(&[I4(0)], &[1]);
    let lt = x.less(&zero).to_vec::<bool>();
    assert_eq!(lt, (-8..=7).map(|v| v < 0).collect::<Vec<_>>());
    let eq = x.equal(&x).to_vec::<bool>();
    assert!(eq.iter().all(|&b| b));
}

#[test]
fn display_prints_integers() {
    let x = Tensor::from_slice(&[I4(-8), I4(7), I4(0)], &[3]);
    let s = format!("{x}");
    assert!(
        s.contains("-8") && s.contains('7') && s.contains("i4"),
        "{s}"
    );
    let y = Tensor::from_slice(&[U4(15), U4(3)], &[2]);
    let s = format!("{y}");
    assert!(s.contains("15") && s.contains("u4"), "{s}");
}

#[test]
fn movement_keeps_values() {
    let x = Tensor::from_slice(&i4_range(), &[4, 4]);
    let t = x.transpose().to_vec::<I4>();
    for r in 0..4 {
        for c in 0..4 {
            assert_eq!(t[r * 4 + c], I4((c * 4 + r) as i8 - 8));
        }
    }
    let c = Tensor::concatenate(&[x.clone(), x.clone()], 0);
    assert_eq!(c.shape(), &[8, 4]);
}

#[test]
#[should_panic(expected = "i4 tensors are not supported")]
fn reductions_are_refused_with_the_operation_named() {
    let _ = Tensor::from_slice(&i4_range(), &[16]).sum_all();
}
