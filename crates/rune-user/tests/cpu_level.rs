//! From a user's crate (built with no flags of ours): the eager kernels run
//! at the best level the machine supports, detected here independently, so
//! a dispatch regression fails here deterministically rather than as a slow
//! benchmark; and their results equal independent scalar computations.

use rune::nx::{DType, Tensor};

/// The level name the machine's features call for (x86-64-v3/-v4 as the
/// psABI levels define them).
fn expected_level() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        let v3 = [
            has!("sse3"),
            has!("ssse3"),
            has!("sse4.1"),
            has!("sse4.2"),
            has!("popcnt"),
            has!("avx"),
            has!("avx2"),
            has!("bmi1"),
            has!("bmi2"),
            has!("f16c"),
            has!("fma"),
            has!("lzcnt"),
            has!("movbe"),
        ]
        .iter()
        .all(|&b| b);
        let v4 = [
            has!("avx512f"),
            has!("avx512bw"),
            has!("avx512cd"),
            has!("avx512dq"),
            has!("avx512vl"),
        ]
        .iter()
        .all(|&b| b);
        match (v3, v4) {
            (true, true) => "x86-64-v4",
            (true, false) => "x86-64-v3",
            _ => "x86-64",
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        "neon"
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        "generic"
    }
}

#[test]
fn kernels_run_at_the_best_level_the_machine_supports() {
    assert!(
        std::env::var_os("NX_CPU_LEVEL").is_none(),
        "unset NX_CPU_LEVEL to run this test"
    );
    assert_eq!(rune::nx::cpu_features().to_string(), expected_level());
    assert_eq!(rune::nx::cpu_features(), rune::nx::CpuLevel::best());
}

/// W1, `exp(x) * y + 1` on 4M f32 (the parallel, vectorized path): exp
/// within its 2 ulp of f64's, and the product and sum rounded as f32
/// scalars would be.
#[test]
fn w1_matches_scalar_arithmetic() {
    let n = 4 << 20;
    let xs: Vec<f32> = (0..n).map(|i| -20.0 + 40.0 * i as f32 / n as f32).collect();
    let ys: Vec<f32> = (0..n).map(|i| 1.0 + (i % 7) as f32 * 0.125).collect();
    let (x, y) = (Tensor::from_slice(&xs, &[n]), Tensor::from_slice(&ys, &[n]));
    let e = x.exp().to_vec::<f32>();
    let w1 = (x.exp() * &y + 1.0).to_vec::<f32>();
    for i in 0..n {
        let want = (xs[i] as f64).exp();
        let ulp = 2f64.powi(want.log2().floor() as i32 - 23);
        assert!(((e[i] as f64) - want).abs() <= 2.0 * ulp, "exp({})", xs[i]);
        assert_eq!(w1[i].to_bits(), (e[i] * ys[i] + 1.0).to_bits(), "W1 at {i}");
    }
}

/// A 3M-element f32 sum of small integers (the vector lanes, the blocks and
/// the parallel split all exact): the exact total, rounded once to f32.
#[test]
fn sum_is_the_exact_total_rounded_once() {
    let n = 3_000_000usize;
    let xs: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let exact: u64 = (0..n as u64).map(|i| i % 1000).sum();
    let s = Tensor::from_slice(&xs, &[n]).sum_all().item::<f32>();
    assert_eq!(s, exact as f32);
}

/// Threefry-2x32-20 on 100k pairs (lanes and threads) cycling through
/// Random123's known-answer vectors.
#[test]
fn threefry_gives_random123s_known_answers() {
    let kat: [([u32; 2], [u32; 2], [u32; 2]); 3] = [
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
    let n = 100_000;
    let pick = |f: fn(&([u32; 2], [u32; 2], [u32; 2])) -> [u32; 2]| -> Vec<u32> {
        (0..n).flat_map(|i| f(&kat[i % 3])).collect()
    };
    let key = Tensor::from_vec(pick(|k| k.0), &[n, 2]);
    let ctr = Tensor::from_vec(pick(|k| k.1), &[n, 2]);
    let got = rune::rng::threefry2x32(&key, &ctr);
    assert_eq!(got.dtype(), DType::U32);
    assert_eq!(got.to_vec::<u32>(), pick(|k| k.2));
}
