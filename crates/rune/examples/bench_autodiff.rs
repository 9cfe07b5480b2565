//! Autodiff benchmark workloads of issues 3 and 4 ("Measure"), timed as the
//! anchors prescribe (inputs built once, untimed warmup calls, then
//! individually timed calls; min and median reported), printed as JSON lines
//! for `bench/autodiff.py`.
//!
//! ```sh
//! cargo run --release -p rune --example bench_autodiff            # all
//! cargo run --release -p rune --example bench_autodiff -- --only W4,M1
//! cargo run --release -p rune --example bench_autodiff -- --only W5,W6,W10
//! ```
//!
//! - W4: `value_and_grad` + SGD step of the 784-512-512-10 relu MLP, batch
//!   128, f32 (cross-entropy through log_softmax), eager.
//! - W5: per-example gradients of a 64-128-10 relu MLP (cross-entropy of
//!   one example), batch 256, f32: `vmap_with` of `grad` (parameters
//!   unmapped), and a loop of 256 single-example `grad` calls (the gradients
//!   collected in a `Vec`, not stacked), eager. The two are compared once.
//! - W6: Hessian-vector product (jvp of grad) of `sum(tanh(A x)^2)`, A
//!   200×200 f32, eager; and the full Hessian (`rune::hessian`, [200, 200]),
//!   checked once against the closed form `A^T diag(2(1-t²)(1-3t²)) A`.
//! - W10: `jacfwd` and `jacrev` of `f(x) = sin(x) * sum(x)`, x f32[500]
//!   (a [500, 500] Jacobian), checked once against the closed form
//!   `diag(cos x) sum(x) + sin(x) 1^T`.
//! - C1: a chain of 100 small elementwise operations on a [64] f32 tensor:
//!   the forward pass alone, and `grad` of its sum (the tape's overhead).
//! - M1: peak bytes of live tensor storage during `grad` of a 32-layer,
//!   256-wide tanh MLP on a batch of 256 (f32), without and with `remat`
//!   around each layer (above what was live before the call); the two
//!   gradients are compared for equality.

#[path = "common/timing.rs"]
mod timing;
use timing::{bench, emit};

use rune::prelude::*;

#[path = "common/c1.rs"]
mod c1;
use c1::chain;

#[path = "common/splitmix.rs"]
mod splitmix;
use splitmix::SplitMix;

#[derive(Ptree, Clone)]
struct Layer {
    w: Tensor,
    b: Tensor,
}

/// He-initialized weights and zero biases of an MLP with these layer sizes.
fn mlp_params(rng: &mut SplitMix, sizes: &[usize]) -> Vec<Layer> {
    sizes
        .windows(2)
        .map(|s| Layer {
            w: rng.normal_tensor(&[s[0], s[1]], (2.0 / s[0] as f32).sqrt()),
            b: Tensor::zeros(&[s[1]], DType::F32),
        })
        .collect()
}

fn w4() {
    let mut rng = SplitMix(0);
    let sizes = [784, 512, 512, 10];
    let params = mlp_params(&mut rng, &sizes);
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

/// Largest absolute difference between two f32 tensors of one shape.
fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.shape(), b.shape());
    a.to_vec::<f32>()
        .iter()
        .zip(b.to_vec::<f32>())
        .map(|(x, y)| (*x as f64 - y as f64).abs())
        .fold(0.0, f64::max)
}

fn check_row(id: &str, what: &str, err: f64) {
    println!(
        "{{\"id\": \"{id}\", \"framework\": \"ours\", \"variant\": \"check: {what}\", \"max_abs_err\": {err:e}}}"
    );
}

fn w5() {
    let mut rng = SplitMix(5);
    let sizes = [64, 128, 10];
    let params = mlp_params(&mut rng, &sizes);
    let x = rng.normal_tensor(&[256, 64], 1.0);
    let labels: Vec<i32> = (0..256).map(|_| (rng.next_u64() % 10) as i32).collect();
    let y = Tensor::from_vec(labels, &[256]);
    // One example: x [64], y [] (I32).
    let loss_single = |p: &Vec<Layer>, x: &Tensor, y: &Tensor| {
        let h = (x.matmul(&p[0].w) + &p[0].b).relu();
        let logits = h.matmul(&p[1].w) + &p[1].b;
        -logits
            .log_softmax(-1)
            .take_along_axis(&y.reshape(&[1]), 0)
            .sum_all()
    };
    let mut in_axes = vec![None; params.num_leaves()];
    in_axes.extend([Some(0), Some(0)]);
    let per_example = || {
        rune::vmap_with(
            |(p, x, y): &(Vec<Layer>, Tensor, Tensor)| {
                rune::grad(|p: &Vec<Layer>| loss_single(p, x, y), p)
            },
            &(params.clone(), x.clone(), y.clone()),
            rune::VmapOpts {
                in_axes: Some(in_axes.clone()),
                out_axis: 0,
            },
        )
    };
    let looped = || {
        (0..256)
            .map(|i| {
                rune::grad(
                    |p: &Vec<Layer>| loss_single(p, &x.get(i), &y.get(i)),
                    &params,
                )
            })
            .collect::<Vec<_>>()
    };
    // Once: the two agree.
    let (pe, lp) = (per_example(), looped());
    let mut err = 0f64;
    for (i, g) in lp.iter().enumerate() {
        for (b, s) in pe.leaves().iter().zip(g.leaves()) {
            err = err.max(max_abs_diff(&b.get(i), &s));
        }
    }
    check_row("W5", "vmap(grad) vs loop of grads", err);
    emit(
        "W5",
        "vmap(grad) (eager)",
        "ms",
        bench(per_example, 10, 300),
    );
    emit(
        "W5",
        "loop of single-example grads (eager)",
        "ms",
        bench(looped, 3, 30),
    );
}

fn w6() {
    let mut rng = SplitMix(1);
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
    // Once: the Hessian against its closed form, in f64.
    let (a64, x64) = (a.cast(DType::F64), x.cast(DType::F64));
    let t = a64.matmul(&x64).tanh();
    let t2 = t.square();
    let d = (1.0 - &t2) * (1.0 - &t2 * 3.0) * 2.0;
    let exact = a64.transpose().matmul(&(a64.clone() * d.unsqueeze(1)));
    check_row(
        "W6",
        "hessian vs closed form",
        max_abs_diff(&rune::hessian(f, &x), &exact.cast(DType::F32)),
    );
    emit(
        "W6",
        "hessian = jacfwd of grad (eager)",
        "ms",
        bench(|| rune::hessian(f, &x), 10, 300),
    );
}

fn w10() {
    let x = SplitMix(10).normal_tensor(&[500], 1.0);
    let f = |x: &Tensor| x.sin() * x.sum_all();
    // Once: both Jacobians against the closed form, in f64.
    let x64 = x.cast(DType::F64);
    let exact = (Tensor::eye(500, DType::F64) * x64.cos().unsqueeze(1) * x64.sum_all()
        + x64.sin().unsqueeze(1))
    .cast(DType::F32);
    check_row(
        "W10",
        "jacfwd vs closed form",
        max_abs_diff(&rune::jacfwd(f, &x), &exact),
    );
    check_row(
        "W10",
        "jacrev vs closed form",
        max_abs_diff(&rune::jacrev(f, &x), &exact),
    );
    emit(
        "W10",
        "jacfwd (eager)",
        "ms",
        bench(|| rune::jacfwd(f, &x), 10, 500),
    );
    emit(
        "W10",
        "jacrev (eager)",
        "ms",
        bench(|| rune::jacrev(f, &x), 10, 500),
    );
}

fn c1() {
    let x = SplitMix(2).normal_tensor(&[64], 1.0);
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
    let mut rng = SplitMix(3);
    let ws: Vec<Tensor> = (0..32)
        .map(|_| rng.normal_tensor(&[256, 256], 1.0 / 16.0))
        .collect();
    let x = rng.normal_tensor(&[256, 256], 1.0);
    let layer = |(h, w): &(Tensor, Tensor)| h.matmul(w).tanh();
    // Live bytes when the forward pass ends: what the tape keeps for the
    // backward pass (context for the peak, which also holds the gradients).
    let at_end = std::cell::Cell::new(0usize);
    let plain = |ws: &Vec<Tensor>| {
        let mut h = x.clone();
        for w in ws {
            h = layer(&(h, w.clone()));
        }
        let loss = h.square().mean_all();
        drop(h);
        at_end.set(nx::storage::live_bytes());
        loss
    };
    let remated = |ws: &Vec<Tensor>| {
        let mut h = x.clone();
        for w in ws {
            h = rune::remat(layer, &(h, w.clone()));
        }
        let loss = h.square().mean_all();
        drop(h);
        at_end.set(nx::storage::live_bytes());
        loss
    };
    let measure = |f: &dyn Fn(&Vec<Tensor>) -> Tensor| {
        nx::storage::clear_cache();
        let before = nx::storage::live_bytes();
        nx::storage::reset_peak_bytes();
        let g = rune::grad(f, &ws);
        let peak = nx::storage::peak_bytes() - before;
        (g, peak, at_end.get() - before)
    };
    let (g_plain, peak_plain, kept_plain) = measure(&plain);
    let (g_remat, peak_remat, kept_remat) = measure(&remated);
    let same = g_plain
        .iter()
        .zip(&g_remat)
        .all(|(a, b)| a.to_vec::<f32>() == b.to_vec::<f32>());
    let mib = |b: usize| b as f64 / (1024.0 * 1024.0);
    println!(
        "{{\"id\": \"M1\", \"framework\": \"ours\", \"variant\": \"peak during grad, 32x256 tanh MLP, batch 256\", \"unit\": \"MiB\", \"plain\": {:.2}, \"remat\": {:.2}, \"ratio\": {:.3}, \"kept_plain\": {:.2}, \"kept_remat\": {:.2}, \"identical_gradients\": {same}}}",
        mib(peak_plain),
        mib(peak_remat),
        peak_remat as f64 / peak_plain as f64,
        mib(kept_plain),
        mib(kept_remat)
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
    if want("W10") {
        w10();
    }
    if want("W5") {
        w5();
    }
    if want("W4") {
        w4();
    }
}
