//! `rune::rng`: Threefry-2x32 known answers, JAX's streams (fixture written
//! by `bench/rng_fixtures.py`, so these tests need no JAX), determinism,
//! statistics with fixed keys, edge cases, vmap semantics and gradients
//! through reparameterized samples.

use half::{bf16, f16};
use rune::prelude::*;
mod common;
use common::panic_message;
use rune::rng;

// ---------------------------------------------------------------------------
// A minimal JSON reader for the fixture (numbers kept as text, read as u64,
// i64 or f64 on demand).

#[derive(Debug, Clone)]
enum Json {
    Num(String),
    Str(String),
    Bool,
    Null,
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }
    fn value(&mut self) -> Json {
        self.ws();
        match self.s[self.i] {
            b'{' => {
                self.i += 1;
                let mut v = Vec::new();
                loop {
                    self.ws();
                    if self.s[self.i] == b'}' {
                        self.i += 1;
                        break;
                    }
                    let Json::Str(k) = self.value() else {
                        panic!("object key")
                    };
                    self.ws();
                    assert_eq!(self.s[self.i], b':');
                    self.i += 1;
                    v.push((k, self.value()));
                    self.ws();
                    if self.s[self.i] == b',' {
                        self.i += 1;
                    }
                }
                Json::Obj(v)
            }
            b'[' => {
                self.i += 1;
                let mut v = Vec::new();
                loop {
                    self.ws();
                    if self.s[self.i] == b']' {
                        self.i += 1;
                        break;
                    }
                    v.push(self.value());
                    self.ws();
                    if self.s[self.i] == b',' {
                        self.i += 1;
                    }
                }
                Json::Arr(v)
            }
            b'"' => {
                let start = self.i + 1;
                let end = start + self.s[start..].iter().position(|&c| c == b'"').unwrap();
                self.i = end + 1;
                Json::Str(String::from_utf8(self.s[start..end].to_vec()).unwrap())
            }
            b't' => {
                self.i += 4;
                Json::Bool
            }
            b'f' => {
                self.i += 5;
                Json::Bool
            }
            b'n' => {
                self.i += 4;
                Json::Null
            }
            _ => {
                let start = self.i;
                while self.i < self.s.len()
                    && matches!(
                        self.s[self.i],
                        b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'
                    )
                {
                    self.i += 1;
                }
                Json::Num(String::from_utf8(self.s[start..self.i].to_vec()).unwrap())
            }
        }
    }
}

impl Json {
    fn get(&self, key: &str) -> &Json {
        match self {
            Json::Obj(v) => {
                &v.iter()
                    .find(|(k, _)| k == key)
                    .unwrap_or_else(|| panic!("no {key}"))
                    .1
            }
            _ => panic!("not an object"),
        }
    }
    fn arr(&self) -> &[Json] {
        match self {
            Json::Arr(v) => v,
            _ => panic!("not an array: {self:?}"),
        }
    }
    fn u64(&self) -> u64 {
        match self {
            Json::Num(s) => s.parse().unwrap(),
            _ => panic!("not a number"),
        }
    }
    fn i64(&self) -> i64 {
        match self {
            Json::Num(s) => s.parse().unwrap(),
            _ => panic!("not a number"),
        }
    }
    fn f64(&self) -> f64 {
        match self {
            Json::Num(s) => s.parse().unwrap(),
            _ => panic!("not a number"),
        }
    }
    fn str(&self) -> &str {
        match self {
            Json::Str(s) => s,
            _ => panic!("not a string"),
        }
    }
    fn u32s(&self) -> Vec<u32> {
        self.arr().iter().map(|v| v.u64() as u32).collect()
    }
    fn u64s(&self) -> Vec<u64> {
        self.arr().iter().map(|v| v.u64()).collect()
    }
    fn i32s(&self) -> Vec<i32> {
        self.arr().iter().map(|v| v.i64() as i32).collect()
    }
    fn shape(&self) -> Vec<usize> {
        self.arr().iter().map(|v| v.u64() as usize).collect()
    }
    fn key(&self) -> Tensor {
        Tensor::from_vec(self.u32s(), &[2])
    }
}

fn fixture() -> Json {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/rng_jax.json");
    let text = std::fs::read_to_string(path).expect("fixture");
    Parser {
        s: text.as_bytes(),
        i: 0,
    }
    .value()
}

// ---------------------------------------------------------------------------
// Helpers.

fn u32s(t: &Tensor) -> Vec<u32> {
    t.to_vec::<u32>()
}

fn f32_bits(t: &Tensor) -> Vec<u32> {
    t.to_vec::<f32>().iter().map(|v| v.to_bits()).collect()
}

fn f64s(t: &Tensor) -> Vec<f64> {
    t.cast(DType::F64).to_vec::<f64>()
}

/// Distance in units in the last place between two f32 bit patterns.
fn ulp32(a: u32, b: u32) -> u64 {
    let ord = |x: u32| -> i64 {
        if x & 0x8000_0000 != 0 {
            -((x & 0x7fff_ffff) as i64)
        } else {
            x as i64
        }
    };
    (ord(a) - ord(b)).unsigned_abs()
}

fn ulp64(a: u64, b: u64) -> u64 {
    let ord = |x: u64| -> i128 {
        if x >> 63 != 0 {
            -((x & (u64::MAX >> 1)) as i128)
        } else {
            x as i128
        }
    };
    (ord(a) - ord(b)).unsigned_abs() as u64
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// Central moments 2, 3 and 4 of `v` around its mean.
fn central(v: &[f64]) -> (f64, f64, f64) {
    let m = mean(v);
    let n = v.len() as f64;
    let (mut m2, mut m3, mut m4) = (0.0, 0.0, 0.0);
    for &x in v {
        let d = x - m;
        m2 += d * d;
        m3 += d * d * d;
        m4 += d * d * d * d;
    }
    (m2 / n, m3 / n, m4 / n)
}

/// Kolmogorov–Smirnov statistic of `v` against the CDF `cdf`.
fn ks(v: &[f64], cdf: impl Fn(f64) -> f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = s.len() as f64;
    s.iter()
        .enumerate()
        .map(|(i, &x)| {
            let f = cdf(x);
            (f - i as f64 / n).abs().max(((i + 1) as f64 / n - f).abs())
        })
        .fold(0.0, f64::max)
}

/// Pearson's chi-square statistic of `counts` against `probs`.
fn chi_square(counts: &[usize], probs: &[f64]) -> f64 {
    let n: usize = counts.iter().sum();
    counts
        .iter()
        .zip(probs)
        .map(|(&c, &p)| {
            let e = p * n as f64;
            (c as f64 - e).powi(2) / e
        })
        .sum()
}

fn normal_cdf(x: f64) -> f64 {
    0.5 * (1.0 + libm_erf(x / std::f64::consts::SQRT_2))
}

/// erf in f64 through the tensor library (correctly rounded enough here).
fn libm_erf(x: f64) -> f64 {
    Tensor::scalar(x).erf().item::<f64>()
}

fn pearson(a: &[f64], b: &[f64]) -> f64 {
    let (ma, mb) = (mean(a), mean(b));
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (x, y) in a.iter().zip(b) {
        sab += (x - ma) * (y - mb);
        saa += (x - ma) * (x - ma);
        sbb += (y - mb) * (y - mb);
    }
    sab / (saa * sbb).sqrt()
}

// ---------------------------------------------------------------------------
// Threefry-2x32 known answers (Random123's kat_vectors for threefry2x32_20).

#[test]
fn threefry_random123_known_answers() {
    let cases: [([u32; 2], [u32; 2], [u32; 2]); 3] = [
        ([0, 0], [0, 0], [0x6b20_0159, 0x99ba_4efe]),
        (
            [0xffff_ffff, 0xffff_ffff],
            [0xffff_ffff, 0xffff_ffff],
            [0x1cb9_96fc, 0xbb00_2be7],
        ),
        (
            [0x1319_8a2e, 0x0370_7344],
            [0x243f_6a88, 0x85a3_08d3],
            [0xc492_3a9c, 0x483d_f7a0],
        ),
    ];
    for (key, ctr, want) in cases {
        let out = rng::threefry2x32(
            &Tensor::from_slice(&key, &[2]),
            &Tensor::from_slice(&ctr, &[2]),
        );
        assert_eq!(u32s(&out), want, "key {key:x?} counter {ctr:x?}");
    }
    // The same three as one batch, with per-pair keys [3, 2], and inside a
    // block of 16+ pairs (the vectorized path) next to the tail path.
    let keys: Vec<u32> = cases.iter().flat_map(|c| c.0).collect();
    let ctrs: Vec<u32> = cases.iter().flat_map(|c| c.1).collect();
    let want: Vec<u32> = cases.iter().flat_map(|c| c.2).collect();
    let out = rng::threefry2x32(
        &Tensor::from_slice(&keys, &[3, 2]),
        &Tensor::from_slice(&ctrs, &[3, 2]),
    );
    assert_eq!(u32s(&out), want);
    let reps = 7; // 21 pairs: one block of 16 and a tail of 5
    let k = Tensor::from_slice(&keys, &[3, 2])
        .expand(&[reps, 3, 2])
        .reshape(&[reps * 3, 2]);
    let c = Tensor::from_slice(&ctrs, &[3, 2])
        .expand(&[reps, 3, 2])
        .reshape(&[reps * 3, 2]);
    let out = u32s(&rng::threefry2x32(&k, &c));
    assert_eq!(out, want.repeat(reps));
    // Non-contiguous counters (a transposed view) read correctly.
    let ct = Tensor::from_slice(&ctrs, &[3, 2])
        .transpose()
        .contiguous()
        .transpose();
    assert!(!ct.is_contiguous());
    assert_eq!(
        u32s(&rng::threefry2x32(&Tensor::from_slice(&keys, &[3, 2]), &ct)),
        want
    );
}

#[test]
fn threefry_matches_jax_primitive() {
    let fx = fixture();
    for case in fx.get("threefry").arr() {
        let ctr = case.get("counter").u32s();
        let n = ctr.len() / 2;
        let out = rng::threefry2x32(&case.get("key").key(), &Tensor::from_vec(ctr, &[n, 2]));
        assert_eq!(u32s(&out), case.get("out").u32s());
    }
}

#[test]
fn threefry_is_an_integer_primitive_without_derivative_and_batches() {
    let k = rng::key(3);
    let ctr = Tensor::from_slice(&[0u32, 1, 0, 2, 5, 6], &[3, 2]);
    let want = rng::threefry2x32(&k, &ctr);
    // Batched counters: lane i hashes counter pair i.
    let lanes = rune::vmap(|c: &Tensor| rng::threefry2x32(&k, c), &ctr);
    assert_eq!(u32s(&lanes), u32s(&want));
    // Batched keys and counters together.
    let keys = rng::split(&k, 3);
    let both = rune::vmap(
        |(k, c): &(Tensor, Tensor)| rng::threefry2x32(k, c),
        &(keys.clone(), ctr.clone()),
    );
    for i in 0..3 {
        assert_eq!(
            u32s(&both.get(i)),
            u32s(&rng::threefry2x32(&keys.get(i), &ctr.get(i)))
        );
    }
    let msg = panic_message(|| {
        rng::threefry2x32(&Tensor::from_slice(&[1i32, 2], &[2]), &ctr);
    });
    assert!(msg.contains("u32"), "{msg}");
    let msg = panic_message(|| {
        rng::threefry2x32(&k, &Tensor::from_slice(&[1u32, 2, 3], &[3]));
    });
    assert!(msg.contains("last axis of 2"), "{msg}");
}

// ---------------------------------------------------------------------------
// JAX's streams.

#[test]
fn keys_match_jax_including_64_bit_seeds() {
    let fx = fixture();
    for section in ["keys", "keys_x64"] {
        for case in fx.get(section).arr() {
            let seed = case.get("seed").u64();
            assert_eq!(u32s(&rng::key(seed)), case.get("key").u32s(), "seed {seed}");
        }
    }
    assert_eq!(u32s(&rng::key(u64::MAX)), vec![u32::MAX, u32::MAX]);
}

#[test]
fn split_and_fold_in_match_jax() {
    let fx = fixture();
    for case in fx.get("split").arr() {
        let n = case.get("n").u64() as usize;
        let ks = rng::split(&case.get("key").key(), n);
        assert_eq!(ks.shape(), &[n, 2]);
        assert_eq!(ks.dtype(), DType::U32);
        assert_eq!(u32s(&ks), case.get("keys").u32s());
    }
    for case in fx.get("fold_in").arr() {
        let k = rng::fold_in(&case.get("key").key(), case.get("data").u64() as u32);
        assert_eq!(u32s(&k), case.get("key_out").u32s());
    }
    // fold_in(k, i) == split(k, n)[i], as in JAX.
    let k = rng::key(42);
    let ks = rng::split(&k, 6);
    for i in 0..6 {
        assert_eq!(u32s(&rng::fold_in(&k, i as u32)), u32s(&ks.get(i)));
    }
    assert_eq!(rng::split(&k, 0).shape(), &[0, 2]);
}

#[test]
fn bits_match_jax() {
    let fx = fixture();
    for case in fx.get("bits").arr() {
        let shape = case.get("shape").shape();
        let b = rng::bits(&case.get("key").key(), &shape);
        assert_eq!(b.shape(), &shape[..]);
        assert_eq!(b.dtype(), DType::U32);
        assert_eq!(u32s(&b), case.get("bits").u32s(), "shape {shape:?}");
    }
    // Large draws: the parallel path of the kernel.
    for case in fx.get("bits_large").arr() {
        let shape = case.get("shape").shape();
        let b = u32s(&rng::bits(&case.get("key").key(), &shape));
        check_summary(&b, case);
    }
}

fn check_summary(words: &[u32], case: &Json) {
    let sum = words.iter().fold(0u64, |s, &w| s.wrapping_add(w as u64));
    let xor = words.iter().fold(0u32, |s, &w| s ^ w);
    assert_eq!(sum, case.get("sum").u64());
    assert_eq!(xor as u64, case.get("xor").u64());
    for s in case.get("samples").arr() {
        let [i, v] = s.arr() else { panic!() };
        assert_eq!(words[i.u64() as usize] as u64, v.u64(), "index {}", i.u64());
    }
}

#[test]
fn uniform_f32_matches_jax_bit_for_bit() {
    let fx = fixture();
    for case in fx.get("uniform_f32").arr() {
        let shape = case.get("shape").shape();
        let u = rng::uniform(&case.get("key").key(), &shape, DType::F32);
        assert_eq!(u.shape(), &shape[..]);
        assert_eq!(f32_bits(&u), case.get("bits").u32s(), "shape {shape:?}");
    }
    for case in fx.get("uniform_f32_large").arr() {
        let u = rng::uniform(
            &case.get("key").key(),
            &case.get("shape").shape(),
            DType::F32,
        );
        check_summary(&f32_bits(&u), case);
    }
}

#[test]
fn uniform_half_and_f64_match_jax() {
    let fx = fixture();
    for case in fx.get("uniform_half").arr() {
        let k = case.get("key").key();
        let shape = case.get("shape").shape();
        let got: Vec<u64> = match case.get("dtype").str() {
            "f16" => rng::uniform(&k, &shape, DType::F16)
                .to_vec::<f16>()
                .iter()
                .map(|v| v.to_bits() as u64)
                .collect(),
            _ => rng::uniform(&k, &shape, DType::BF16)
                .to_vec::<bf16>()
                .iter()
                .map(|v| v.to_bits() as u64)
                .collect(),
        };
        assert_eq!(got, case.get("bits").u64s(), "{}", case.get("dtype").str());
    }
    for case in fx.get("uniform_f64").arr() {
        let u = rng::uniform(
            &case.get("key").key(),
            &case.get("shape").shape(),
            DType::F64,
        );
        let got: Vec<u64> = u.to_vec::<f64>().iter().map(|v| v.to_bits()).collect();
        assert_eq!(got, case.get("bits").u64s());
    }
}

#[test]
fn normal_f32_matches_jax_within_2_ulp() {
    let fx = fixture();
    let mut worst = 0;
    let mut exact = 0;
    let mut total = 0;
    let mut compare = |got: Vec<u32>, want: Vec<u32>| {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            let d = ulp32(*g, *w);
            assert!(
                d <= 2,
                "normal: {} vs JAX {} ({d} ulp)",
                f32::from_bits(*g),
                f32::from_bits(*w)
            );
            worst = worst.max(d);
            exact += (d == 0) as usize;
            total += 1;
        }
    };
    for case in fx.get("normal_f32").arr() {
        let shape = case.get("shape").shape();
        let z = rng::normal(&case.get("key").key(), &shape, DType::F32);
        assert_eq!(z.shape(), &shape[..]);
        compare(f32_bits(&z), case.get("bits").u32s());
    }
    let many = fx.get("normal_f32_many");
    let z = rng::normal(
        &many.get("key").key(),
        &many.get("shape").shape(),
        DType::F32,
    );
    compare(f32_bits(&z), many.get("bits").u32s());
    eprintln!("normal f32 vs JAX: {exact}/{total} bit-identical, worst {worst} ulp");
    // rune emulates XLA's evaluation (its log1p, its fused multiply-adds),
    // so all but a rare double rounding should be bit for bit.
    assert!(
        exact * 1000 >= total * 999,
        "only {exact}/{total} bit-identical"
    );
}

#[test]
fn normal_f64_is_close_to_jax() {
    let fx = fixture();
    for case in fx.get("normal_f64").arr() {
        let z = rng::normal(
            &case.get("key").key(),
            &case.get("shape").shape(),
            DType::F64,
        );
        for (g, w) in z.to_vec::<f64>().iter().zip(case.get("bits").u64s()) {
            let d = ulp64(g.to_bits(), w);
            assert!(
                d <= 8,
                "normal f64: {g} vs JAX {} ({d} ulp)",
                f64::from_bits(w)
            );
        }
    }
}

#[test]
fn samplers_follow_jax_algorithms() {
    let fx = fixture();
    for case in fx.get("randint").arr() {
        let (lo, hi) = (case.get("low").i64(), case.get("high").i64());
        let r = rng::randint(&case.get("key").key(), lo, hi, &case.get("shape").shape());
        assert_eq!(r.dtype(), DType::I32);
        let want = case.get("values").i32s();
        assert_eq!(r.to_vec::<i32>(), want, "randint [{lo}, {hi})");
    }
    for case in fx.get("permutation").arr() {
        let n = case.get("n").u64() as usize;
        let p = rng::permutation(&case.get("key").key(), n);
        assert_eq!(p.dtype(), DType::I32);
        let want = case.get("values").i32s();
        assert_eq!(p.to_vec::<i32>(), want, "permutation of {n}");
    }
    for case in fx.get("bernoulli").arr() {
        let b = rng::bernoulli(
            &case.get("key").key(),
            case.get("p").f64(),
            &case.get("shape").shape(),
        );
        assert_eq!(b.dtype(), DType::Bool);
        let want: Vec<bool> = case
            .get("values")
            .arr()
            .iter()
            .map(|v| v.u64() == 1)
            .collect();
        assert_eq!(b.to_vec::<bool>(), want);
    }
    for case in fx.get("gumbel_f32").arr() {
        let g = rng::gumbel(
            &case.get("key").key(),
            &case.get("shape").shape(),
            DType::F32,
        );
        for (g, w) in f32_bits(&g).iter().zip(case.get("bits").u32s()) {
            assert!(
                ulp32(*g, w) <= 4,
                "gumbel {} vs JAX {}",
                f32::from_bits(*g),
                f32::from_bits(w)
            );
        }
    }
    for case in fx.get("categorical").arr() {
        let logits: Vec<f32> = case
            .get("logits")
            .u32s()
            .into_iter()
            .map(f32::from_bits)
            .collect();
        let logits = Tensor::from_vec(logits, &case.get("shape").shape());
        let axis = case.get("axis").i64() as isize;
        let c = rng::categorical(&case.get("key").key(), &logits, axis);
        let want = case.get("values").i32s();
        assert_eq!(c.to_vec::<i32>(), want, "categorical along {axis}");
    }
    for case in fx.get("truncated_normal_f32").arr() {
        let (lo, hi) = (case.get("lo").f64(), case.get("hi").f64());
        let t = rng::truncated_normal(
            &case.get("key").key(),
            lo,
            hi,
            &case.get("shape").shape(),
            DType::F32,
        );
        // Not bit for bit: the bounds go through erf, whose f32 rounding
        // differs from XLA's by an ulp, and u = a + (b - a) v cancels near
        // 0; so an absolute tolerance of a few ulp of 1.
        for (g, w) in f32_bits(&t).iter().zip(case.get("bits").u32s()) {
            let (g, w) = (f32::from_bits(*g), f32::from_bits(w));
            assert!(
                (g - w).abs() <= 1e-6 * w.abs().max(1.0),
                "truncated_normal {g} vs JAX {w}"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Determinism and independence.

#[test]
fn same_key_same_bits_different_keys_different_bits() {
    let k = rng::key(7);
    let a = u32s(&rng::bits(&k, &[1000]));
    assert_eq!(a, u32s(&rng::bits(&k, &[1000])));
    assert_eq!(a, u32s(&rng::bits(&rng::key(7), &[1000])));
    // The first elements do not depend on how many are drawn.
    assert_eq!(&a[..10], &u32s(&rng::bits(&k, &[10]))[..]);
    // (split(k, n)[i] is fold_in(k, i) by design, so only one of each.)
    let others = [
        rng::key(8),
        rng::fold_in(&k, 0),
        rng::fold_in(&k, 1),
        rng::split(&k, 1001).get(1000),
        rng::split(&rng::key(8), 2).get(0),
        rng::fold_in(&rng::fold_in(&k, 0), 0),
    ];
    let mut all = vec![a.clone()];
    for o in &others {
        all.push(u32s(&rng::bits(o, &[1000])));
    }
    for i in 0..all.len() {
        for j in i + 1..all.len() {
            let same = all[i].iter().zip(&all[j]).filter(|(x, y)| x == y).count();
            // Chance agreement of independent words: 1000 / 2^32.
            assert!(
                same <= 1,
                "streams {i} and {j} agree on {same} of 1000 words"
            );
        }
    }
    // Different fold_in data give different keys.
    let folded: Vec<Vec<u32>> = (0..64).map(|d| u32s(&rng::fold_in(&k, d))).collect();
    for i in 0..folded.len() {
        for j in i + 1..folded.len() {
            assert_ne!(folded[i], folded[j]);
        }
    }
    // Samplers are deterministic too.
    assert_eq!(
        f32_bits(&rng::normal(&k, &[100], DType::F32)),
        f32_bits(&rng::normal(&k, &[100], DType::F32))
    );
}

#[test]
fn large_eager_draws_equal_traced_ones() {
    // Eager draws above a tile run in cache-sized pieces on all cores; under
    // a transformation the same draw is one pass over the whole tensor. The
    // numbers must not depend on which (a one-lane vmap traces the key).
    let key = rng::fold_in(&rng::key(77), 5);
    let one = key.unsqueeze(0);
    let shape = [3, 33_333]; // not a multiple of the tile
    let traced = |f: &dyn Fn(&Tensor) -> Tensor| rune::vmap(|k: &Tensor| f(k), &one).get(0);
    type Sampler = Box<dyn Fn(&Tensor) -> Tensor>;
    let samplers: Vec<(&str, Sampler)> = vec![
        ("bits", Box::new(move |k| rng::bits(k, &shape))),
        (
            "uniform",
            Box::new(move |k| rng::uniform(k, &shape, DType::F32)),
        ),
        (
            "uniform f64",
            Box::new(move |k| rng::uniform(k, &shape, DType::F64)),
        ),
        (
            "normal",
            Box::new(move |k| rng::normal(k, &shape, DType::F32)),
        ),
        (
            "normal bf16",
            Box::new(move |k| rng::normal(k, &shape, DType::BF16)),
        ),
        (
            "randint",
            Box::new(move |k| rng::randint(k, -9, 1000, &shape)),
        ),
        (
            "bernoulli",
            Box::new(move |k| rng::bernoulli(k, 0.25, &shape).cast(DType::U8)),
        ),
        (
            "gumbel",
            Box::new(move |k| rng::gumbel(k, &shape, DType::F32)),
        ),
        (
            "truncated_normal",
            Box::new(move |k| rng::truncated_normal(k, -1.0, 0.5, &shape, DType::F32)),
        ),
    ];
    for (name, f) in &samplers {
        let eager = f(&key);
        assert_eq!(eager.shape(), &shape);
        let t = traced(&**f);
        assert_eq!(
            eager.cast(DType::F64).to_vec::<f64>(),
            t.cast(DType::F64).to_vec::<f64>(),
            "{name}"
        );
    }
    // And the eager draw's prefix is the small draw (the counter is the flat index).
    let big = f32_bits(&rng::uniform(&key, &[100_000], DType::F32));
    assert_eq!(
        &big[..1000],
        &f32_bits(&rng::uniform(&key, &[1000], DType::F32))[..]
    );
}

// ---------------------------------------------------------------------------
// Statistics, with fixed keys. Bounds are five standard errors (moments)
// or the 0.1 % critical values (chi-square, Kolmogorov–Smirnov): a correct
// generator fails one with probability well below 1e-3, and since the keys
// are fixed the outcome never changes from run to run.

const N: usize = 100_000;

#[test]
fn uniform_moments_and_ks() {
    let u = f64s(&rng::uniform(&rng::key(101), &[N], DType::F32));
    assert!(u.iter().all(|&x| (0.0..1.0).contains(&x)));
    let n = N as f64;
    // mean 1/2, sd of the sample mean sqrt(1/12 / n)
    let m = mean(&u);
    assert!((m - 0.5).abs() < 5.0 * (1.0 / 12.0 / n).sqrt(), "mean {m}");
    // variance 1/12; sd of the sample variance sqrt((mu4 - sigma^4) / n), mu4 = 1/80
    let (v, m3, _) = central(&u);
    assert!(
        (v - 1.0 / 12.0).abs() < 5.0 * ((1.0 / 80.0 - 1.0 / 144.0) / n).sqrt(),
        "var {v}"
    );
    // third central moment 0; its sd is sqrt(mu6 / n), mu6 = 1/448
    assert!(m3.abs() < 5.0 * (1.0 / 448.0 / n).sqrt(), "m3 {m3}");
    // KS at the 0.1 % level: 1.95 / sqrt(n)
    let d = ks(&u, |x| x.clamp(0.0, 1.0));
    assert!(d < 1.95 / n.sqrt(), "KS {d}");
    // f64 and half dtypes draw sane uniforms too.
    for dtype in [DType::F64, DType::F16, DType::BF16] {
        let u = f64s(&rng::uniform(&rng::key(102), &[N], dtype));
        assert!(u.iter().all(|&x| (0.0..1.0).contains(&x)), "{dtype}");
        let m = mean(&u);
        // Half types have a lattice of 2^-10 / 2^-7: its mean is 1/2 - 2^-11 / 2^-8.
        assert!(
            (m - 0.5).abs() < 5.0 * (1.0 / 12.0 / n).sqrt() + 0.004,
            "{dtype} mean {m}"
        );
    }
}

#[test]
fn normal_moments_and_ks() {
    for dtype in [DType::F32, DType::F64] {
        let z = f64s(&rng::normal(&rng::key(202), &[N], dtype));
        let n = N as f64;
        let m = mean(&z);
        assert!(m.abs() < 5.0 / n.sqrt(), "{dtype} mean {m}");
        let (v, m3, m4) = central(&z);
        // sd of the sample variance sqrt(2 / n), skewness sqrt(6 / n),
        // excess kurtosis sqrt(24 / n)
        assert!((v - 1.0).abs() < 5.0 * (2.0 / n).sqrt(), "{dtype} var {v}");
        let skew = m3 / v.powf(1.5);
        assert!(skew.abs() < 5.0 * (6.0 / n).sqrt(), "{dtype} skew {skew}");
        let kurt = m4 / (v * v) - 3.0;
        assert!(
            kurt.abs() < 5.0 * (24.0 / n).sqrt(),
            "{dtype} kurtosis {kurt}"
        );
        let d = ks(&z, normal_cdf);
        assert!(d < 1.95 / n.sqrt(), "{dtype} KS {d}");
        assert!(z.iter().all(|x| x.is_finite()));
    }
}

#[test]
fn randint_chi_square() {
    for (lo, hi) in [(0i64, 10i64), (-3, 2), (-7, 6)] {
        let k = (hi - lo) as usize;
        let r = rng::randint(&rng::key(303), lo, hi, &[N]).to_vec::<i32>();
        let mut counts = vec![0usize; k];
        for v in r {
            assert!((lo..hi).contains(&(v as i64)), "{v} outside [{lo}, {hi})");
            counts[(v as i64 - lo) as usize] += 1;
        }
        // 0.1 % critical values of chi-square with k - 1 degrees of freedom
        let crit = match k - 1 {
            9 => 27.88,
            4 => 18.47,
            12 => 32.91,
            _ => unreachable!(),
        };
        let c = chi_square(&counts, &vec![1.0 / k as f64; k]);
        assert!(
            c < crit,
            "randint [{lo}, {hi}): chi-square {c} >= {crit}, counts {counts:?}"
        );
    }
}

#[test]
fn categorical_chi_square() {
    let probs = [0.1f64, 0.2, 0.3, 0.4];
    let logits: Vec<f32> = probs.iter().map(|p| p.ln() as f32 + 1.5).collect();
    let logits = Tensor::from_slice(&logits, &[1, 4]).expand(&[N, 4]);
    let c = rng::categorical(&rng::key(404), &logits, -1);
    assert_eq!(c.shape(), &[N]);
    assert_eq!(c.dtype(), DType::I32);
    let mut counts = [0usize; 4];
    for v in c.to_vec::<i32>() {
        counts[v as usize] += 1;
    }
    // chi-square with 3 degrees of freedom, 0.1 %: 16.27
    let x = chi_square(&counts, &probs);
    assert!(x < 16.27, "chi-square {x}, counts {counts:?}");
    // Along axis 0: logits [4, M], samples per column.
    let lt = Tensor::from_slice(&probs.map(|p| p.ln() as f32), &[4, 1]).expand(&[4, 2000]);
    let c0 = rng::categorical(&rng::key(405), &lt, 0);
    assert_eq!(c0.shape(), &[2000]);
    assert!(c0.to_vec::<i32>().iter().all(|&v| (0..4).contains(&v)));
}

#[test]
fn split_subkeys_are_uncorrelated() {
    let ks = rng::split(&rng::key(505), 6);
    let draws: Vec<Vec<f64>> = (0..6)
        .map(|i| f64s(&rng::uniform(&ks.get(i), &[N], DType::F32)))
        .collect();
    // sd of Pearson's r under independence: 1 / sqrt(n)
    let bound = 5.0 / (N as f64).sqrt();
    for i in 0..6 {
        for j in i + 1..6 {
            let r = pearson(&draws[i], &draws[j]);
            assert!(r.abs() < bound, "subkeys {i} and {j}: r = {r}");
        }
    }
    // A subkey is also uncorrelated with its parent.
    let parent = f64s(&rng::uniform(&rng::key(505), &[N], DType::F32));
    assert!(pearson(&parent, &draws[0]).abs() < bound);
    // And neighbouring elements of one stream are uncorrelated (lag 1).
    let r = pearson(&draws[0][..N - 1], &draws[0][1..]);
    assert!(r.abs() < bound, "lag-1 r = {r}");
}

#[test]
fn bernoulli_frequency() {
    for p in [0.05, 0.5, 0.8] {
        let b = rng::bernoulli(&rng::key(606), p, &[N]).to_vec::<bool>();
        let f = b.iter().filter(|&&x| x).count() as f64 / N as f64;
        assert!(
            (f - p).abs() < 5.0 * (p * (1.0 - p) / N as f64).sqrt(),
            "p {p}: {f}"
        );
    }
    assert!(rng::bernoulli(&rng::key(1), 0.0, &[1000])
        .to_vec::<bool>()
        .iter()
        .all(|&x| !x));
    assert!(rng::bernoulli(&rng::key(1), 1.0, &[1000])
        .to_vec::<bool>()
        .iter()
        .all(|&x| x));
}

#[test]
fn gumbel_and_truncated_normal_distributions() {
    // Gumbel(0, 1): mean Euler's gamma, variance pi^2 / 6.
    let g = f64s(&rng::gumbel(&rng::key(707), &[N], DType::F32));
    let n = N as f64;
    let m = mean(&g);
    let var = std::f64::consts::PI.powi(2) / 6.0;
    assert!(
        (m - 0.577_215_664_9).abs() < 5.0 * (var / n).sqrt(),
        "mean {m}"
    );
    let d = ks(&g, |x| (-(-x).exp()).exp());
    assert!(d < 1.95 / n.sqrt(), "gumbel KS {d}");
    // Truncated normal on (-1, 2): inside the bounds, KS against the
    // truncated CDF.
    for dtype in [DType::F32, DType::F64] {
        let t = f64s(&rng::truncated_normal(
            &rng::key(708),
            -1.0,
            2.0,
            &[N],
            dtype,
        ));
        assert!(t.iter().all(|&x| x > -1.0 && x < 2.0), "{dtype}");
        let (a, b) = (normal_cdf(-1.0), normal_cdf(2.0));
        let d = ks(&t, |x| (normal_cdf(x) - a) / (b - a));
        assert!(d < 1.95 / n.sqrt(), "{dtype} truncated KS {d}");
    }
    // Far in a tail, and with infinite bounds.
    let t = f64s(&rng::truncated_normal(
        &rng::key(709),
        3.0,
        3.5,
        &[1000],
        DType::F32,
    ));
    assert!(t.iter().all(|&x| x > 3.0 && x < 3.5));
    let t = f64s(&rng::truncated_normal(
        &rng::key(709),
        f64::NEG_INFINITY,
        0.0,
        &[1000],
        DType::F32,
    ));
    assert!(t.iter().all(|&x| x < 0.0 && x.is_finite()));
}

#[test]
fn permutation_and_shuffle() {
    for n in [0usize, 1, 2, 17, 1000, 5000] {
        let p = rng::permutation(&rng::key(808), n).to_vec::<i32>();
        let mut s = p.clone();
        s.sort();
        assert_eq!(s, (0..n as i32).collect::<Vec<_>>());
        if n >= 17 {
            assert_ne!(p, s, "n = {n} left in order");
        }
    }
    // Every position is equally likely: 4000 permutations of 4 (vmapped
    // over split keys), position of element 0 chi-square, 3 dof, 0.1 %.
    let keys = rng::split(&rng::key(809), 4000);
    let perms = rune::vmap(|k: &Tensor| rng::permutation(k, 4), &keys).to_vec::<i32>();
    let mut counts = [0usize; 4];
    for row in perms.chunks(4) {
        counts[row.iter().position(|&v| v == 0).unwrap()] += 1;
    }
    let c = chi_square(&counts, &[0.25; 4]);
    assert!(c < 16.27, "chi-square {c}, counts {counts:?}");
    // shuffle moves whole slices along an axis.
    let x = Tensor::arange(0.0, 12.0, 1.0, DType::F32).reshape(&[3, 4]);
    let k = rng::key(810);
    let p = rng::permutation(&k, 4).to_vec::<i32>();
    let s = rng::shuffle(&k, &x, 1).to_vec::<f32>();
    for r in 0..3 {
        for c in 0..4 {
            assert_eq!(s[r * 4 + c], (r * 4 + p[c] as usize) as f32);
        }
    }
    let s0 = rng::shuffle(&k, &x, 0);
    assert_eq!(s0.shape(), &[3, 4]);
    // Differentiable in x: the gradient of sum(w * shuffle(x)) is w unshuffled.
    let w = Tensor::arange(1.0, 5.0, 1.0, DType::F64);
    let xs = Tensor::zeros(&[4], DType::F64);
    let g = rune::grad(|x: &Tensor| (rng::shuffle(&k, x, 0) * &w).sum_all(), &xs).to_vec::<f64>();
    for (i, &pi) in p.iter().enumerate() {
        assert_eq!(g[pi as usize], (i + 1) as f64);
    }
    let msg = panic_message(|| {
        rng::shuffle(&k, &Tensor::scalar(1.0f32), 0);
    });
    assert!(msg.contains("0-d"), "{msg}");
}

// ---------------------------------------------------------------------------
// Edge cases.

#[test]
fn uniform_never_returns_one_in_any_float_dtype() {
    // The largest draws, through the conversion uniform uses.
    let max32 = Tensor::from_slice(&[u32::MAX, 0xffff_ff80, 0x0000_ffff, 0x0000_00ff], &[4]);
    let f = rng::float_from_bits(&max32, DType::F16).to_vec::<f16>();
    assert!(f.iter().all(|v| v.to_f64() < 1.0), "{f:?}");
    assert_eq!(f[0].to_f64(), 1.0 - 2f64.powi(-10));
    let b = rng::float_from_bits(&max32, DType::BF16).to_vec::<bf16>();
    assert!(b.iter().all(|v| v.to_f64() < 1.0), "{b:?}");
    assert_eq!(b[0].to_f64(), 1.0 - 2f64.powi(-7));
    let s = rng::float_from_bits(&max32, DType::F32).to_vec::<f32>();
    assert_eq!(s[0], 1.0 - 2f32.powi(-23));
    let d =
        rng::float_from_bits(&Tensor::from_slice(&[u64::MAX], &[1]), DType::F64).to_vec::<f64>();
    assert_eq!(d[0], 1.0 - 2f64.powi(-52));
    // Every 16-bit pattern (which covers every 8-bit one): all in [0, 1),
    // and the smallest draw is exactly 0.
    let all: Vec<u32> = (0..=0xffffu32).map(|v| v | 0xabcd_0000).collect();
    let all = Tensor::from_vec(all, &[1 << 16]);
    for dtype in [DType::F16, DType::BF16, DType::F32] {
        let v = f64s(&rng::float_from_bits(&all, dtype));
        assert!(v.iter().all(|&x| (0.0..1.0).contains(&x)), "{dtype}");
    }
    assert_eq!(
        f64s(&rng::float_from_bits(
            &Tensor::from_slice(&[0u32], &[1]),
            DType::F16
        ))[0],
        0.0
    );
    // And many actual draws.
    for dtype in [DType::F16, DType::BF16] {
        let v = f64s(&rng::uniform(&rng::key(909), &[200_000], dtype));
        assert!(v.iter().all(|&x| (0.0..1.0).contains(&x)), "{dtype}");
        assert!(
            v.iter().cloned().fold(0.0, f64::max) > 0.99,
            "{dtype} never drew its top values"
        );
    }
}

#[test]
fn randint_bounds_are_exact() {
    let r = rng::randint(&rng::key(1001), -3, 2, &[10_000]).to_vec::<i32>();
    let mut seen: Vec<i32> = r.clone();
    seen.sort();
    seen.dedup();
    assert_eq!(seen, vec![-3, -2, -1, 0, 1]);
    // One-value and extreme ranges.
    assert!(rng::randint(&rng::key(1), 5, 6, &[100])
        .to_vec::<i32>()
        .iter()
        .all(|&v| v == 5));
    let full =
        rng::randint(&rng::key(2), i32::MIN as i64, i32::MAX as i64 + 1, &[1000]).to_vec::<i32>();
    assert!(full.iter().any(|&v| v < 0) && full.iter().any(|&v| v > 0));
    let top = rng::randint(
        &rng::key(3),
        i32::MAX as i64 - 1,
        i32::MAX as i64 + 1,
        &[100],
    )
    .to_vec::<i32>();
    assert!(top.iter().all(|&v| v == i32::MAX - 1 || v == i32::MAX));
    assert!(top.contains(&i32::MAX) && top.contains(&(i32::MAX - 1)));
    let msg = panic_message(|| {
        rng::randint(&rng::key(1), 3, 3, &[2]);
    });
    assert!(msg.contains("low < high"), "{msg}");
    let msg = panic_message(|| {
        rng::randint(&rng::key(1), 0, 1 << 40, &[2]);
    });
    assert!(msg.contains("i32"), "{msg}");
}

#[test]
fn scalar_and_empty_shapes() {
    let k = rng::key(4);
    assert_eq!(rng::uniform(&k, &[], DType::F32).shape(), &[] as &[usize]);
    assert_eq!(rng::normal(&k, &[0, 3], DType::F32).shape(), &[0, 3]);
    assert_eq!(rng::bits(&k, &[2, 0]).numel(), 0);
    assert_eq!(rng::randint(&k, 0, 3, &[]).shape(), &[] as &[usize]);
}

#[test]
fn key_errors_name_the_sampler() {
    let bad = Tensor::from_slice(&[1i32, 2], &[2]);
    let msg = panic_message(|| {
        rng::normal(&bad, &[3], DType::F32);
    });
    assert!(
        msg.contains("rng::normal") && msg.contains("[2] u32"),
        "{msg}"
    );
    let msg = panic_message(|| {
        rng::split(&Tensor::zeros(&[3], DType::U32), 2);
    });
    assert!(msg.contains("rng::split"), "{msg}");
    let msg = panic_message(|| {
        rng::uniform(&rng::key(0), &[3], DType::I32);
    });
    assert!(msg.contains("float dtype"), "{msg}");
}

// ---------------------------------------------------------------------------
// vmap semantics and gradients.

#[test]
fn vmap_over_split_keys_gives_each_lane_its_key_s_draws() {
    let keys = rng::split(&rng::key(1111), 5);
    let lanes = rune::vmap(|k: &Tensor| rng::normal(k, &[3, 2], DType::F32), &keys);
    assert_eq!(lanes.shape(), &[5, 3, 2]);
    for i in 0..5 {
        assert_eq!(
            f32_bits(&lanes.get(i)),
            f32_bits(&rng::normal(&keys.get(i), &[3, 2], DType::F32))
        );
    }
    // Lanes differ.
    assert_ne!(f32_bits(&lanes.get(0)), f32_bits(&lanes.get(1)));
    // Determinism under vmap.
    let again = rune::vmap(|k: &Tensor| rng::normal(k, &[3, 2], DType::F32), &keys);
    assert_eq!(f32_bits(&lanes), f32_bits(&again));
    // Every sampler batches the same way.
    type Sampler = Box<dyn Fn(&Tensor) -> Tensor>;
    let logits = Tensor::from_slice(&[0.0f32, 1.0, 2.0, -1.0], &[4]);
    let x = Tensor::arange(0.0, 6.0, 1.0, DType::F32);
    let samplers: Vec<(&str, Sampler)> = vec![
        ("bits", Box::new(|k| rng::bits(k, &[4]))),
        ("uniform", Box::new(|k| rng::uniform(k, &[4], DType::F32))),
        (
            "uniform f64",
            Box::new(|k| rng::uniform(k, &[4], DType::F64)),
        ),
        ("split", Box::new(|k| rng::split(k, 3))),
        ("fold_in", Box::new(|k| rng::fold_in(k, 9))),
        (
            "bernoulli",
            Box::new(|k| rng::bernoulli(k, 0.3, &[4]).cast(DType::I32)),
        ),
        ("randint", Box::new(|k| rng::randint(k, -5, 50, &[4]))),
        ("gumbel", Box::new(|k| rng::gumbel(k, &[4], DType::F32))),
        (
            "categorical",
            Box::new(move |k| rng::categorical(k, &logits, 0)),
        ),
        ("permutation", Box::new(|k| rng::permutation(k, 6))),
        ("shuffle", Box::new(move |k| rng::shuffle(k, &x, 0))),
        (
            "truncated_normal",
            Box::new(|k| rng::truncated_normal(k, -0.5, 0.5, &[4], DType::F32)),
        ),
    ];
    for (name, f) in &samplers {
        let lanes = rune::vmap(|k: &Tensor| f(k), &keys);
        for i in 0..5 {
            let want = f(&keys.get(i));
            assert_eq!(
                lanes.get(i).cast(DType::F64).to_vec::<f64>(),
                want.cast(DType::F64).to_vec::<f64>(),
                "{name}, lane {i}"
            );
        }
    }
    // Keys mapped along axis 1 (a [2, n] stack) work the same.
    let kt = keys.transpose();
    let lanes_t = rune::vmap_with(
        |k: &Tensor| rng::uniform(k, &[3], DType::F32),
        &kt,
        rune::VmapOpts {
            in_axes: Some(vec![Some(1)]),
            out_axis: 0,
        },
    );
    for i in 0..5 {
        assert_eq!(
            f32_bits(&lanes_t.get(i)),
            f32_bits(&rng::uniform(&keys.get(i), &[3], DType::F32))
        );
    }
}

#[test]
fn a_closed_over_key_gives_identical_lanes() {
    let key = rng::key(1212);
    let xs = Tensor::zeros(&[4, 3], DType::F32);
    let out = rune::vmap(|x: &Tensor| x + rng::normal(&key, &[3], DType::F32), &xs);
    let want = f32_bits(&rng::normal(&key, &[3], DType::F32));
    for i in 0..4 {
        assert_eq!(f32_bits(&out.get(i)), want);
    }
    // Per-lane keys from fold_in of a closed-over key and a mapped... the
    // seed's recipe: split, stack, map.
    let keys = rng::split(&key, 4);
    let out = rune::vmap(
        |(x, k): &(Tensor, Tensor)| x + rng::normal(k, &[3], DType::F32),
        &(xs.clone(), keys),
    );
    assert_ne!(f32_bits(&out.get(0)), f32_bits(&out.get(1)));
}

#[test]
fn gradients_flow_through_reparameterized_samples() {
    let key = rng::key(1313);
    let eps = rng::normal(&key, &[5], DType::F64);
    let mu = Tensor::from_slice(&[0.5f64, -1.0, 2.0, 0.0, 3.0], &[5]);
    let sigma = Tensor::from_slice(&[1.0f64, 0.5, 2.0, 1.5, 0.1], &[5]);
    let f = |(mu, sigma): &(Tensor, Tensor)| {
        (mu + sigma * rng::normal(&key, &[5], DType::F64)).sum_all()
    };
    let (gm, gs) = rune::grad(f, &(mu.clone(), sigma.clone()));
    assert_eq!(gm.to_vec::<f64>(), vec![1.0; 5]);
    assert_eq!(gs.to_vec::<f64>(), eps.to_vec::<f64>());
    // A squared loss: d/dmu = 2 x, d/dsigma = 2 x eps.
    let g = |(mu, sigma): &(Tensor, Tensor)| {
        (mu + sigma * rng::normal(&key, &[5], DType::F64))
            .square()
            .sum_all()
    };
    let (gm, gs) = rune::grad(g, &(mu.clone(), sigma.clone()));
    let x = (&mu + &sigma * &eps).to_vec::<f64>();
    let e = eps.to_vec::<f64>();
    for i in 0..5 {
        assert!((gm.to_vec::<f64>()[i] - 2.0 * x[i]).abs() < 1e-12);
        assert!((gs.to_vec::<f64>()[i] - 2.0 * x[i] * e[i]).abs() < 1e-12);
    }
    // Forward mode, F32, and per-example under vmap with per-lane keys.
    let (_, t) = rune::jvp(
        |s: &Tensor| s * rng::normal(&key, &[5], DType::F32),
        &Tensor::ones(&[5], DType::F32),
        &Tensor::ones(&[5], DType::F32),
    );
    assert_eq!(f32_bits(&t), f32_bits(&rng::normal(&key, &[5], DType::F32)));
    let keys = rng::split(&key, 3);
    let per_lane = rune::vmap(
        |k: &Tensor| {
            rune::grad(
                |s: &Tensor| (s * rng::normal(k, &[2], DType::F64)).sum_all(),
                &Tensor::ones(&[2], DType::F64),
            )
        },
        &keys,
    );
    for i in 0..3 {
        assert_eq!(
            per_lane.get(i).to_vec::<f64>(),
            rng::normal(&keys.get(i), &[2], DType::F64).to_vec::<f64>()
        );
    }
    // Gradients through truncated_normal's and gumbel's samples as constants.
    let gt = rune::grad(
        |m: &Tensor| (m + rng::truncated_normal(&key, -1.0, 1.0, &[3], DType::F64)).sum_all(),
        &Tensor::zeros(&[3], DType::F64),
    );
    assert_eq!(gt.to_vec::<f64>(), vec![1.0; 3]);
}
