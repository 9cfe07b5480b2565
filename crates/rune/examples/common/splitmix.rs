//! splitmix64, the small deterministic generator the examples use for their
//! data, shuffles and benchmark inputs (not rune's keyed PRNG, `rune::rng`).
#![allow(dead_code)] // each example uses a subset

use rune::prelude::*;

pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniformly random permutation of `0..n` (Fisher-Yates).
    pub fn permutation(&mut self, n: usize) -> Vec<i32> {
        let mut p: Vec<i32> = (0..n as i32).collect();
        for i in (1..n).rev() {
            let j = (self.next_u64() % (i as u64 + 1)) as usize;
            p.swap(i, j);
        }
        p
    }

    /// A standard normal draw (Box-Muller).
    pub fn normal(&mut self) -> f32 {
        let u1 = 1.0 - (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let u2 = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
    }

    /// An f32 vector of `n` entries ~ U[0, 1) (24 random bits each).
    pub fn uniform_tensor(&mut self, n: usize) -> Tensor {
        let v: Vec<f32> = (0..n)
            .map(|_| (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32)
            .collect();
        Tensor::from_vec(v, &[n])
    }

    /// An f32 tensor of `shape` with normal entries times `scale`.
    pub fn normal_tensor(&mut self, shape: &[usize], scale: f32) -> Tensor {
        let n = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| self.normal() * scale).collect();
        Tensor::from_vec(v, shape)
    }
}
