//! Threefry-2x32, 20 rounds (Salmon, Moraes, Dror, Shaw, "Parallel random
//! numbers: as easy as 1, 2, 3", SC 2011), as Random123 and JAX's
//! `threefry2x32` define it: the last axis of `key` and `counter` holds a
//! pair; each counter pair is hashed under its key pair.
//!
//! The pairs are processed in blocks of `LANES`, de-interleaved into lane
//! arrays so that every round is a loop the compiler vectorizes; the pool splits
//! the blocks across cores above `PAR_MIN_PAIRS`. A key that is one pair
//! broadcast over the counter (the common case: `rune::rng` broadcasts a
//! `[2]` key) is read once.

use super::dispatch::{self, Kernel};
use super::movement;
use super::pool;
use crate::dtype::DType;
use crate::storage::Storage;
use crate::tensor::{Tensor, Value};

/// Key-schedule parity (Threefish's C240 for 32-bit words).
const PARITY: u32 = 0x1BD1_1BDA;
/// Pairs per vectorized block.
const LANES: usize = 16;
/// Below this many pairs the kernel runs on the calling thread.
const PAR_MIN_PAIRS: usize = super::pool::PAR_MIN;
/// Pairs per parallel task.
const PAR_CHUNK_PAIRS: usize = super::pool::PAR_CHUNK;

/// Four rounds with the given rotations, on every lane.
macro_rules! rounds {
    ($x0:ident, $x1:ident, $($r:literal),*) => {$(
        for i in 0..$x0.len() {
            $x0[i] = $x0[i].wrapping_add($x1[i]);
            $x1[i] = $x1[i].rotate_left($r) ^ $x0[i];
        }
    )*};
}

/// Key injection `s` (after every four rounds): `x0 += a`, `x1 += b + s`.
macro_rules! inject {
    ($x0:ident, $x1:ident, $a:ident, $b:ident, $s:literal) => {
        for i in 0..$x0.len() {
            $x0[i] = $x0[i].wrapping_add($a[i]);
            $x1[i] = $x1[i].wrapping_add($b[i]).wrapping_add($s);
        }
    };
}

/// The 20-round hash of `L` counter pairs `(x0[i], x1[i])` under the key
/// pairs `(k0[i], k1[i])`, in place (written out as JAX's unrolled lowering:
/// the rotation groups (13, 15, 26, 6) and (17, 29, 16, 24)
/// alternate, key words rotate through
/// `k0, k1, k2 = k0 ^ k1 ^ PARITY`).
#[inline(always)]
fn hash_lanes<const L: usize>(k0: &[u32; L], k1: &[u32; L], x0: &mut [u32; L], x1: &mut [u32; L]) {
    let mut k2 = [0u32; L];
    for i in 0..L {
        k2[i] = k0[i] ^ k1[i] ^ PARITY;
    }
    for i in 0..L {
        x0[i] = x0[i].wrapping_add(k0[i]);
        x1[i] = x1[i].wrapping_add(k1[i]);
    }
    rounds!(x0, x1, 13, 15, 26, 6);
    inject!(x0, x1, k1, k2, 1);
    rounds!(x0, x1, 17, 29, 16, 24);
    inject!(x0, x1, k2, k0, 2);
    rounds!(x0, x1, 13, 15, 26, 6);
    inject!(x0, x1, k0, k1, 3);
    rounds!(x0, x1, 17, 29, 16, 24);
    inject!(x0, x1, k1, k2, 4);
    rounds!(x0, x1, 13, 15, 26, 6);
    inject!(x0, x1, k2, k0, 5);
}

/// Hashes the interleaved pairs of `ctr` into `out` (same length, even);
/// `key(p)` is the key pair of the `p`-th pair of this run.
fn hash_run(ctr: &[u32], out: &mut [u32], key: impl Fn(usize) -> (u32, u32)) {
    dispatch::run(HashRun { ctr, out, key })
}

struct HashRun<'a, K> {
    ctr: &'a [u32],
    out: &'a mut [u32],
    key: K,
}

impl<K: Fn(usize) -> (u32, u32)> Kernel for HashRun<'_, K> {
    type Output = ();
    #[inline(always)]
    fn run<const FMA: bool>(self) {
        hash_run_loop(self.ctr, self.out, self.key)
    }
}

#[inline(always)]
fn hash_run_loop(ctr: &[u32], out: &mut [u32], key: impl Fn(usize) -> (u32, u32)) {
    let pairs = ctr.len() / 2;
    let mut p = 0;
    while p + LANES <= pairs {
        let (mut k0, mut k1, mut x0, mut x1) =
            ([0u32; LANES], [0u32; LANES], [0u32; LANES], [0u32; LANES]);
        for i in 0..LANES {
            (k0[i], k1[i]) = key(p + i);
            x0[i] = ctr[2 * (p + i)];
            x1[i] = ctr[2 * (p + i) + 1];
        }
        hash_lanes(&k0, &k1, &mut x0, &mut x1);
        for i in 0..LANES {
            out[2 * (p + i)] = x0[i];
            out[2 * (p + i) + 1] = x1[i];
        }
        p += LANES;
    }
    for q in p..pairs {
        let (a, b) = key(q);
        let (mut x0, mut x1) = ([ctr[2 * q]], [ctr[2 * q + 1]]);
        hash_lanes(&[a], &[b], &mut x0, &mut x1);
        out[2 * q] = x0[0];
        out[2 * q + 1] = x1[0];
    }
}

/// Runs `body(first_pair, ctr_run, out_run)` over the pairs, in parallel
/// when there are many.
fn for_runs(ctr: &[u32], out: &mut [u32], body: impl Fn(usize, &[u32], &mut [u32]) + Sync) {
    let pairs = ctr.len() / 2;
    if pairs >= PAR_MIN_PAIRS {
        let cs = 2 * PAR_CHUNK_PAIRS;
        pool::chunks_mut(out, cs, &|c, o| {
            body(c * PAR_CHUNK_PAIRS, &ctr[c * cs..c * cs + o.len()], o)
        });
    } else {
        body(0, ctr, out);
    }
}

/// A contiguous version of `v` (itself when it already is).
fn contiguous(v: &Value) -> Option<Tensor> {
    (!v.layout.is_contiguous()).then(|| movement::copy(v))
}

pub(crate) fn threefry2x32(key: &Value, ctr: &Value) -> Tensor {
    debug_assert!(key.dtype == DType::U32 && ctr.dtype == DType::U32);
    let shape = ctr.layout.shape.clone();
    let n = ctr.layout.numel();
    let mut out = Storage::new(DType::U32, n);
    if n == 0 {
        return Tensor::from_storage(DType::U32, &shape, out);
    }
    let ctr_copy = contiguous(ctr);
    let ctr = ctr_copy.as_ref().map_or(ctr, |t| t.value());
    {
        let o = &mut out.as_mut_slice::<u32>()[..n];
        let cd = ctr.storage.read::<u32>();
        let cs = &cd[ctr.layout.offset..ctr.layout.offset + n];
        let kl = &key.layout;
        let last = kl.strides.len() - 1;
        if kl.strides[..last].iter().all(|&s| s == 0) {
            // One key pair broadcast over every counter pair.
            let kd = key.storage.read::<u32>();
            let (k0, k1) = (
                kd[kl.offset],
                kd[(kl.offset as isize + kl.strides[last]) as usize],
            );
            for_runs(cs, o, move |_, x, o| hash_run(x, o, move |_| (k0, k1)));
        } else {
            let key_copy = contiguous(key);
            let key = key_copy.as_ref().map_or(key, |t| t.value());
            let kd = key.storage.read::<u32>();
            let ks = &kd[key.layout.offset..key.layout.offset + n];
            for_runs(cs, o, |first, x, o| {
                let k = &ks[2 * first..2 * first + x.len()];
                hash_run(x, o, move |p| (k[2 * p], k[2 * p + 1]))
            });
        }
    }
    Tensor::from_storage(DType::U32, &shape, out)
}
