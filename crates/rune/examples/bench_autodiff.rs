//! Autodiff benchmark workloads of issue 3 ("Measure"), timed as the
//! anchors prescribe (inputs built once, untimed warmup calls, then
//! individually timed calls; min and median reported), printed as JSON lines
//! for `bench/autodiff.py`.
//!
//! ```sh
//! cargo run --release -p rune --example bench_autodiff            # all
//! cargo run --release -p rune --example bench_autodiff -- --only W4,M1
//! ```
//!
//! - W4: `value_and_grad` + SGD step of the 784-512-512-10 relu MLP, batch
//!   128, f32 (cross-entropy through log_softmax), eager.
//! - W6: Hessian-vector product (jvp of grad) of `sum(tanh(A x)^2)`, A
//!   200×200 f32, eager.
//! - C1: a chain of 100 small elementwise operations on a [64] f32 tensor:
//!   the forward pass alone, and `grad` of its sum (the tape's overhead).
//! - M1: peak bytes of live tensor storage during `grad` of a 32-layer,
//!   256-wide tanh MLP on a batch of 256 (f32), without and with `remat`
//!   around each layer (above what was live before the call); the two
//!   gradients are compared for equality.

use rune::prelude::*;
use std::hint::black_box;
use std::time::Instant;

/// splitmix64 for inputs (values only need a sane range).
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn normal(&mut self) -> f32 {
        let u1 = 1.0 - (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let u2 = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
    }
    fn normal_tensor(&mut self, shape: &[usize], scale: f32) -> Tensor {
        let n = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| self.normal() * scale).collect();
        Tensor::from_vec(v, shape)
    }
}

/// Per-call seconds: `warmup` untimed calls, then `repeats` timed ones; (min, median).
fn bench<T>(mut f: impl FnMut() -> T, warmup: usize, repeats: usize) -> (f64, f64) {
    for _ in 0..warmup {
        black_box(f());
    }
    let mut ts: Vec<f64> = (0..repeats)
        .map(|_| {
            let t0 = Instant::now();
            let out = f();
            let dt = t0.elapsed().as_secs_f64();
            drop(black_box(out));
            dt
        })
        .collect();
    ts.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (ts[0], ts[repeats / 2])
}

fn emit(id: &str, variant: &str, unit: &str, (min, median): (f64, f64)) {
    let scale = match unit {
        "ms" => 1e3,
        "us" => 1e6,
        _ => 1.0,
    };
    println!(
        "{{\"id\": \"{id}\", \"framework\": \"ours\", \"variant\": \"{variant}\", \"unit\": \"{unit}\", \"min\": {}, \"median\": {}, \"threads\": {}}}",
        min * scale,
        median * scale,
        rayon_threads()
    );
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[derive(Ptree, Clone)]
struct Layer {
    w: Tensor,
    b: Tensor,
}

fn w4() {
    let mut rng = Rng(0);
    let sizes = [784, 512, 512, 10];
    let params: Vec<Layer> = sizes
        .windows(2)
        .map(|s| Layer {
            w: rng.normal_tensor(&[s[0], s[1]], (2.0 / s[0] as f32).sqrt()),
            b: Tensor::zeros(&[s[1]], DType::F32),
        })
        .collect();
    let x = rng.normal_tensor(&[128, 784], 1.0);
    let labels: Vec<i32> = (0..128).map(|_| (rng.next_u64() % 10) as i32).collect();
    let y = Tensor::from_vec(labels, &[128, 1]);
    let loss = |p: &Vec<Layer>| {
        let mut h = x.clone();
        for l in &p[..p.len() - 1] {
            h = (h.matmul(&l.w) + &l.b).relu();
        }
        let last = &p[p.len() - 1];
        let logits = h.matmul(&last.w) + &last.b;
        -logits.log_softmax(-1).take_along_axis(&y, 1).mean_all()
    };
    let step = |p: &Vec<Layer>| {
        let (l, g) = rune::value_and_grad(loss, p);
        (l, p.map2_leaves(&g, &mut |w, g| w - g * 0.01))
    };
    emit(
        "W4",
        "value_and_grad + SGD (eager)",
        "ms",
        bench(|| step(&params), 10, 200),
    );
}

fn w6() {
    let mut rng = Rng(1);
    let a = rng.normal_tensor(&[200, 200], 1.0 / (200f32).sqrt());
    let x = rng.normal_tensor(&[200], 1.0);
    let v = rng.normal_tensor(&[200], 1.0);
    let f = |x: &Tensor| a.matmul(x).tanh().square().sum_all();
    emit(
        "W6",
        "hvp = jvp of grad (eager)",
        "ms",
        bench(|| rune::hvp(f, &x, &v), 10, 1000),
    );
}

/// 100 elementwise operations, bounded for any input.
fn chain(x: &Tensor) -> Tensor {
    let mut h = x.clone();
    for i in 0..25 {
        h = (&h * 0.9 + 0.01 * i as f64).sin().tanh();
    }
    h
}

fn c1() {
    let x = Rng(2).normal_tensor(&[64], 1.0);
    emit(
        "C1",
        "forward, 100 ops on [64]",
        "us",
        bench(|| chain(&x), 200, 2000),
    );
    emit(
        "C1",
        "grad of the same (forward + tape + backward)",
        "us",
        bench(
            || rune::grad(|x: &Tensor| chain(x).sum_all(), &x),
            200,
            2000,
        ),
    );
}

fn m1() {
    let mut rng = Rng(3);
    let ws: Vec<Tensor> = (0..32)
        .map(|_| rng.normal_tensor(&[256, 256], 1.0 / 16.0))
        .collect();
    let x = rng.normal_tensor(&[256, 256], 1.0);
    let layer = |(h, w): &(Tensor, Tensor)| h.matmul(w).tanh();
    let plain = |ws: &Vec<Tensor>| {
        let mut h = x.clone();
        for w in ws {
            h = layer(&(h, w.clone()));
        }
        h.square().mean_all()
    };
    let remated = |ws: &Vec<Tensor>| {
        let mut h = x.clone();
        for w in ws {
            h = rune::remat(layer, &(h, w.clone()));
        }
        h.square().mean_all()
    };
    let measure = |f: &dyn Fn(&Vec<Tensor>) -> Tensor| {
        nx::storage::clear_cache();
        let before = nx::storage::live_bytes();
        nx::storage::reset_peak_bytes();
        let g = rune::grad(f, &ws);
        let peak = nx::storage::peak_bytes() - before;
        (g, peak)
    };
    let (g_plain, peak_plain) = measure(&plain);
    let (g_remat, peak_remat) = measure(&remated);
    let same = g_plain
        .iter()
        .zip(&g_remat)
        .all(|(a, b)| a.to_vec::<f32>() == b.to_vec::<f32>());
    let mib = |b: usize| b as f64 / (1024.0 * 1024.0);
    println!(
        "{{\"id\": \"M1\", \"framework\": \"ours\", \"variant\": \"peak during grad, 32x256 tanh MLP, batch 256\", \"unit\": \"MiB\", \"plain\": {:.2}, \"remat\": {:.2}, \"ratio\": {:.3}, \"identical_gradients\": {same}}}",
        mib(peak_plain),
        mib(peak_remat),
        peak_remat as f64 / peak_plain as f64
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let only: Option<Vec<String>> = args
        .iter()
        .position(|a| a == "--only")
        .map(|i| args[i + 1].split(',').map(String::from).collect());
    let want = |id: &str| only.as_ref().is_none_or(|o| o.iter().any(|x| x == id));
    if want("M1") {
        m1();
    }
    if want("C1") {
        c1();
    }
    if want("W6") {
        w6();
    }
    if want("W4") {
        w4();
    }
}
