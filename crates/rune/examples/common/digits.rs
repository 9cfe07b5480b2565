//! The UCI optical-recognition handwritten digits (Alpaydin and Kaynak;
//! CC BY 4.0), as scikit-learn ships them: `examples/data/digits.csv.gz`,
//! 1,797 lines of 64 pixel values (an 8x8 image, each 0..=16) then the
//! label. The file is compiled into the example (it is 57 KB), so the
//! binary runs from anywhere; see `examples/data/DIGITS.md` for its origin.
#![allow(dead_code)] // each example uses a subset

use std::io::Read;

use rune::prelude::*;

/// The gzipped CSV, as shipped in the repository.
pub const CSV_GZ: &[u8] = include_bytes!("../data/digits.csv.gz");
/// Its path in the repository, for messages.
pub const CSV_GZ_PATH: &str = "crates/rune/examples/data/digits.csv.gz";

pub const SIDE: usize = 8;
pub const PIXELS: usize = SIDE * SIDE;
/// The largest pixel value (a count of ink pixels in a 4x4 block).
pub const MAX_PIXEL: u8 = 16;
pub const COUNT: usize = 1797;
/// How many of the shuffled digits are held out (the last fifth).
pub const HELD_OUT: usize = 360;
/// The key of the fixed shuffle that splits training and held-out digits.
pub const SPLIT_SEED: u64 = 0x5eed_d161;

/// Pixel values (row-major, 0..=16) and labels (0..=9).
pub struct Digits {
    pub pixels: Vec<u8>,
    pub labels: Vec<u8>,
}

impl Digits {
    pub fn len(&self) -> usize {
        self.labels.len()
    }
}

/// Parses the CSV text: each non-empty line 64 integers in 0..=16 then a
/// label in 0..=9. Errors name the line.
pub fn parse_csv(text: &str) -> Result<Digits, String> {
    let mut pixels = Vec::with_capacity(COUNT * PIXELS);
    let mut labels = Vec::with_capacity(COUNT);
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let fields: Vec<&str> = line.trim().split(',').collect();
        if fields.len() != PIXELS + 1 {
            return Err(format!(
                "line {}: {} fields, {} expected (64 pixels and a label)",
                i + 1,
                fields.len(),
                PIXELS + 1
            ));
        }
        for (j, f) in fields.iter().enumerate() {
            // scikit-learn's file has integers; accept "3.0" too.
            let v: f64 = f
                .trim()
                .parse()
                .map_err(|_| format!("line {}, field {}: {f:?} is not a number", i + 1, j + 1))?;
            let max = if j < PIXELS { MAX_PIXEL as f64 } else { 9.0 };
            if v.fract() != 0.0 || !(0.0..=max).contains(&v) {
                return Err(format!(
                    "line {}, field {}: {f} is not an integer in 0..={max}",
                    i + 1,
                    j + 1
                ));
            }
            if j < PIXELS {
                pixels.push(v as u8);
            } else {
                labels.push(v as u8);
            }
        }
    }
    Ok(Digits { pixels, labels })
}

/// The shipped digits (gunzipped and parsed).
pub fn load() -> Result<Digits, String> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(CSV_GZ)
        .read_to_string(&mut text)
        .map_err(|e| format!("{CSV_GZ_PATH}: {e}"))?;
    let digits = parse_csv(&text).map_err(|e| format!("{CSV_GZ_PATH}: {e}"))?;
    if digits.len() != COUNT {
        return Err(format!(
            "{CSV_GZ_PATH}: {} digits, {COUNT} expected",
            digits.len()
        ));
    }
    Ok(digits)
}

/// The fixed split: a Fisher-Yates shuffle of `0..n` by splitmix64 from
/// `SPLIT_SEED`; the first `n - HELD_OUT` indices train, the rest are held
/// out. The same on every machine and in every run.
pub fn split(n: usize) -> (Vec<usize>, Vec<usize>) {
    let mut state = SPLIT_SEED;
    let mut next = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    let held_out = order.split_off(n - HELD_OUT.min(n));
    (order, held_out)
}

/// The digits at `idx` as `[len, 64]` F32 pixels scaled to [0, 1] and
/// `[len]` I32 labels.
pub fn tensors(d: &Digits, idx: &[usize]) -> (Tensor, Tensor) {
    let mut x = Vec::with_capacity(idx.len() * PIXELS);
    for &i in idx {
        x.extend(
            d.pixels[i * PIXELS..(i + 1) * PIXELS]
                .iter()
                .map(|&p| p as f32 / MAX_PIXEL as f32),
        );
    }
    let y: Vec<i32> = idx.iter().map(|&i| d.labels[i] as i32).collect();
    (
        Tensor::from_vec(x, &[idx.len(), PIXELS]),
        Tensor::from_vec(y, &[idx.len()]),
    )
}
