//! The inputs of W19 and W20 (`../shared/bench/generality/README.md`):
//! an integer hash, so that every implementation starts from the very same
//! numbers (and its first loss equals the shared `loss0`).

use rune::prelude::*;

/// `hash_u32`: murmur3's finalizer of `k * 0x9E3779B1 + seed * 0x85EBCA77 + 1`.
pub fn hash_u32(seed: u32, n: usize) -> Vec<u32> {
    let base = seed.wrapping_mul(0x85EB_CA77).wrapping_add(1);
    (0..n as u32)
        .map(|k| {
            let mut x = k.wrapping_mul(0x9E37_79B1).wrapping_add(base);
            x ^= x >> 16;
            x = x.wrapping_mul(0x85EB_CA6B);
            x ^= x >> 13;
            x = x.wrapping_mul(0xC2B2_AE35);
            x ^ (x >> 16)
        })
        .collect()
}

/// Uniform with standard deviation `std`, as the shared definition's `hashed`.
pub fn hashed(seed: u32, shape: &[usize], std: f64) -> Tensor {
    let n = shape.iter().product();
    let half = 3f64.sqrt() * std;
    let v = hash_u32(seed, n)
        .into_iter()
        .map(|x| ((2.0 * x as f64 / 4294967296.0 - 1.0) * half) as f32);
    Tensor::from_vec(v.collect(), shape)
}
