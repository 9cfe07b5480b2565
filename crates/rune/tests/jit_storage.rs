//! New storage per steady-state call of a jitted program (issue 44, item
//! 3): products and staged loops (their final carries, stacked outputs and
//! carry scratch) write into the program's arena like kernels, and a
//! loop's steps allocate nothing, so a call allocates its outputs and
//! nothing else, at any loop length: W9's scan RNN, W16's gather-coupled
//! ODE scan and W17's message-passing step are checked here, with their
//! values against eager.

use rune::prelude::*;
use std::sync::{Mutex, MutexGuard};

/// The storage counters are the process's: tests that read them run one
/// at a time (each holds this for its whole body, eager work included).
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Bytes of new storage one call of `f` allocates, after two warm-up calls
/// (the first compiles; the second may still fill caches).
fn allocated_by<T>(f: impl Fn() -> T) -> u64 {
    drop(f());
    drop(f());
    let before = nx::storage::allocated_bytes();
    let out = f();
    let after = nx::storage::allocated_bytes();
    drop(out);
    after - before
}

fn normal(shape: &[usize], seed: u64, scale: f32) -> Tensor {
    let n: usize = shape.iter().product();
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let v: Vec<f32> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0 * scale
        })
        .collect();
    Tensor::from_slice(&v, shape)
}

/// Bytes of new storage one steady-state call of `f` allocates besides
/// its outputs' buffers.
fn besides_outputs<T: Ptree>(f: impl Fn() -> T) -> i64 {
    let outputs: usize = f()
        .leaves()
        .iter()
        .map(|t| t.numel() * t.dtype().size_in_bytes())
        .sum();
    allocated_by(f) as i64 - outputs as i64
}

/// Within 1e-5 of eager's largest magnitude, element by element.
fn close(a: &Tensor, b: &Tensor) {
    close_within(a, b, 1e-5)
}

/// Within `rtol` of eager's largest magnitude, element by element.
fn close_within(a: &Tensor, b: &Tensor, rtol: f32) {
    assert_eq!(a.shape(), b.shape());
    let (a, b) = (a.to_vec::<f32>(), b.to_vec::<f32>());
    let scale = b.iter().fold(1e-6f32, |m, x| m.max(x.abs()));
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() <= rtol * scale, "{x} vs eager {y}");
    }
}

/// Every leaf of `a` close to `b`'s (see [`close_within`]).
fn all_close<T: Ptree>(a: &T, b: &T, rtol: f32) {
    let (a, b) = (a.leaves(), b.leaves());
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        close_within(x, y, rtol);
    }
}

/// Whether the arena is off (sanitized builds give every value its own
/// buffer, so that AddressSanitizer sees each one's ends).
fn sanitized() -> bool {
    std::env::var_os("TOLK_SANITIZE").is_some()
}

type Rnn = (Tensor, Tensor, Tensor);

fn rnn_loss((w, u, b): &Rnn, xs: &Tensor, h0: &Tensor) -> Tensor {
    let (ht, ()) = rune::scan(
        |h: &Tensor, x: &Tensor| ((h.matmul(w) + x.matmul(u) + b).tanh(), ()),
        h0,
        xs,
    );
    ht.square().sum_all()
}

fn rnn_params() -> Rnn {
    (
        normal(&[32, 32], 1, 0.2),
        normal(&[16, 32], 2, 0.2),
        normal(&[32], 3, 0.1),
    )
}

#[test]
fn a_scan_rnn_step_allocates_the_same_at_any_length() {
    let _serial = serial();
    let p = rnn_params();
    let h0 = Tensor::zeros(&[8, 32], DType::F32);
    let step = rune::jit(|(p, xs, h0): &(Rnn, Tensor, Tensor)| {
        rune::value_and_grad(|p: &Rnn| rnn_loss(p, xs, h0), p)
    });
    let forward = rune::jit(|(p, xs, h0): &(Rnn, Tensor, Tensor)| rnn_loss(p, xs, h0));
    let mut grads = Vec::new();
    let mut fwd = Vec::new();
    for t in [10, 40] {
        let args = (p.clone(), normal(&[t, 8, 16], 4, 1.0), h0.clone());
        grads.push(allocated_by(|| step.call(&args)));
        fwd.push(allocated_by(|| forward.call(&args)));
        // The values are eager's (a loop with products, differentiated).
        let (l, g) = step.call(&args);
        let (el, eg) = rune::value_and_grad(|p: &Rnn| rnn_loss(p, &args.1, &args.2), &p);
        close(&l, &el);
        for (a, b) in [(&g.0, &eg.0), (&g.1, &eg.1), (&g.2, &eg.2)] {
            close(a, b);
        }
    }
    eprintln!("value_and_grad: {grads:?} bytes per call; forward: {fwd:?}");
    if sanitized() {
        return;
    }
    // Nothing but the outputs at either length: the loops write their
    // carries, per-step products and the residuals the forward loop stacks
    // for the backward loop into the programs' arenas.
    let outputs = 4 * (1 + 32 * 32 + 16 * 32 + 32);
    assert_eq!(grads, [outputs; 2], "the differentiated scan");
    assert_eq!(fwd, [4; 2], "the forward scan");
}

type Mlp = (Tensor, Tensor, Tensor, Tensor);

fn mlp_loss((w1, b1, w2, b2): &Mlp, x: &Tensor, y: &Tensor) -> Tensor {
    let h = (x.matmul(w1) + b1).relu();
    (h.matmul(w2) + b2 - y).square().mean_all()
}

#[test]
fn an_mlp_step_allocates_only_its_outputs() {
    let _serial = serial();
    let p: Mlp = (
        normal(&[16, 32], 5, 0.3),
        normal(&[32], 6, 0.1),
        normal(&[32, 4], 7, 0.3),
        normal(&[4], 8, 0.1),
    );
    let (x, y) = (normal(&[24, 16], 9, 1.0), normal(&[24, 4], 10, 1.0));
    let step = rune::jit(|p: &Mlp| {
        let (l, g) = rune::value_and_grad(|p: &Mlp| mlp_loss(p, &x, &y), p);
        let sgd = |w: &Tensor, g: &Tensor| w - g * 0.1;
        (
            l,
            (
                sgd(&p.0, &g.0),
                sgd(&p.1, &g.1),
                sgd(&p.2, &g.2),
                sgd(&p.3, &g.3),
            ),
        )
    });
    let bytes = allocated_by(|| step.call(&p));
    if sanitized() {
        return;
    }
    // The loss and the four new parameters: every product and kernel of the
    // step (the forward activations, the gradients) lives in the arena.
    let outputs = 4 * (1 + 16 * 32 + 32 + 32 * 4 + 4);
    assert_eq!(bytes, outputs as u64);
    let (l, _) = step.call(&p);
    close(&l, &mlp_loss(&p, &x, &y));
}

#[test]
fn a_buffer_the_cache_lacks_comes_from_the_system() {
    let _serial = serial();
    // A size no other buffer in this process has: nx's cache cannot give
    // it, so the system allocator does (the counter only grows, so other
    // tests running meanwhile cannot make this fail).
    let n = 3_000_017;
    let before = nx::storage::system_bytes();
    let t = Tensor::zeros(&[n], DType::F32);
    assert!(nx::storage::system_bytes() - before >= (n * 4) as u64);
    drop(t);
}

/// W9's scan RNN (H 128, I 64, B 32; 50 steps here): its forward pass and
/// its `value_and_grad` each allocate their outputs and nothing else per
/// steady-state call (the loops' carries, stacked residuals and every
/// product inside them live in the programs' arenas).
#[test]
fn w9_scan_rnn_allocates_only_its_outputs() {
    let _serial = serial();
    let (h, i, b, t) = (128, 64, 32, 50);
    let p: Rnn = (
        normal(&[h, h], 11, 1.0 / (h as f32).sqrt()),
        normal(&[i, h], 12, 1.0 / (i as f32).sqrt()),
        Tensor::zeros(&[h], DType::F32),
    );
    let args = (
        p.clone(),
        normal(&[t, b, i], 13, 1.0),
        Tensor::zeros(&[b, h], DType::F32),
    );
    let step = rune::jit(|(p, xs, h0): &(Rnn, Tensor, Tensor)| {
        rune::value_and_grad(|p: &Rnn| rnn_loss(p, xs, h0), p)
    });
    let forward = rune::jit(|(p, xs, h0): &(Rnn, Tensor, Tensor)| rnn_loss(p, xs, h0));
    let grad_bytes = besides_outputs(|| step.call(&args));
    let fwd_bytes = besides_outputs(|| forward.call(&args));
    eprintln!("W9: value_and_grad {grad_bytes} B besides outputs, forward {fwd_bytes} B");
    let eager = rune::value_and_grad(|p: &Rnn| rnn_loss(p, &args.1, &args.2), &p);
    all_close(&step.call(&args), &eager, 1e-4);
    all_close(&forward.call(&args), &eager.0, 1e-4);
    if !sanitized() {
        assert_eq!(fwd_bytes, 0, "W9 forward: bytes besides its output");
        assert_eq!(
            grad_bytes, 0,
            "W9 value_and_grad: bytes besides its outputs"
        );
    }
}

/// `count` pseudo-random indices below `below` (a linear congruential
/// sequence from `seed`).
fn indices(count: usize, below: usize, seed: u64) -> Vec<i32> {
    let mut s = seed;
    (0..count)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) % below as u64) as i32
        })
        .collect()
}

/// W16's program (256 oscillators coupled through `x[nbr]`, RK4 under a
/// scan; 100 steps here), `jit(grad)`: only the two gradients are new
/// storage per steady-state call.
#[test]
fn w16_gather_coupled_scan_allocates_only_its_outputs() {
    let _serial = serial();
    let n = 256;
    let nbr = Tensor::from_slice(&indices(n * 4, n, 16), &[n, 4]);
    let x0 = (normal(&[n], 17, 1.0), normal(&[n], 18, 0.1));
    let g = move |s: &(Tensor, Tensor)| {
        let f = |x: &Tensor, v: &Tensor| {
            let coupling = x.take(&nbr, 0).sum(&[1], false) - 4.0 * x;
            (v.clone(), -x.sin() - 0.1 * v + 0.25 * coupling)
        };
        let rk4 = |(x, v): &(Tensor, Tensor)| {
            let dt = 0.01;
            let (k1x, k1v) = f(x, v);
            let (k2x, k2v) = f(&(x + dt / 2.0 * &k1x), &(v + dt / 2.0 * &k1v));
            let (k3x, k3v) = f(&(x + dt / 2.0 * &k2x), &(v + dt / 2.0 * &k2v));
            let (k4x, k4v) = f(&(x + dt * &k3x), &(v + dt * &k3v));
            (
                x + dt / 6.0 * (&k1x + 2.0 * &k2x + 2.0 * &k3x + &k4x),
                v + dt / 6.0 * (&k1v + 2.0 * &k2v + 2.0 * &k3v + &k4v),
            )
        };
        rune::grad(
            |s: &(Tensor, Tensor)| {
                let ((x, v), ()) = rune::scan(
                    |c: &(Tensor, Tensor), _: &Tensor| (rk4(c), ()),
                    s,
                    &Tensor::zeros(&[100, 1], DType::F32),
                );
                (&x * &x).sum_all() + 0.1 * (&v * &v).sum_all()
            },
            s,
        )
    };
    let jg = rune::jit(&g);
    let bytes = besides_outputs(|| jg.call(&x0));
    eprintln!("W16: {bytes} B besides outputs");
    all_close(&jg.call(&x0), &g(&x0), 1e-3);
    if !sanitized() {
        assert_eq!(bytes, 0, "W16: bytes besides its outputs");
    }
}

type Gnn = (Tensor, Tensor, Tensor);

/// W17's step (two message-passing layers on 1024 nodes and 8192 edges:
/// `relu(z + segment_sum(z[src], dst) / 8)` with `z = h @ w`, a readout,
/// MSE; `value_and_grad` plus SGD): only the loss and the new parameters
/// are new storage per steady-state call.
#[test]
fn w17_message_passing_step_allocates_only_its_outputs() {
    let _serial = serial();
    let (nodes, edges) = (1024, 8192);
    // Sources, then destinations: one sequence.
    let ends = indices(2 * edges, nodes, 17);
    let src = Tensor::from_slice(&ends[..edges], &[edges]);
    let dst = Tensor::from_slice(&ends[edges..], &[edges]);
    let (x, y) = (normal(&[nodes, 32], 19, 1.0), normal(&[nodes], 20, 1.0));
    let p: Gnn = (
        normal(&[32, 64], 21, 1.0 / 32f32.sqrt()),
        normal(&[64, 64], 22, 1.0 / 8.0),
        normal(&[64, 1], 23, 1.0 / 8.0),
    );
    let layer = |h: &Tensor, w: &Tensor| {
        let z = h.matmul(w);
        let messages = nx::segment_sum(&z.take(&src, 0), &dst, nodes);
        (&z + messages / 8.0).relu()
    };
    let loss = |(w1, w2, w3): &Gnn| {
        let h = layer(&layer(&x, w1), w2);
        (h.matmul(w3).squeeze(1) - &y).square().mean_all()
    };
    let step = |p: &Gnn| {
        let (l, g) = rune::value_and_grad(&loss, p);
        let sgd = |w: &Tensor, g: &Tensor| w - g * 0.01;
        (l, (sgd(&p.0, &g.0), sgd(&p.1, &g.1), sgd(&p.2, &g.2)))
    };
    let js = rune::jit(&step);
    let bytes = besides_outputs(|| js.call(&p));
    eprintln!("W17: {bytes} B besides outputs");
    all_close(&js.call(&p), &step(&p), 1e-4);
    if !sanitized() {
        assert_eq!(bytes, 0, "W17: bytes besides its outputs");
    }
}
