//! New storage per steady-state call of a jitted program (issue 44, item
//! 3): products write into the program's arena like kernels, and a staged
//! loop's steps allocate nothing, so a call allocates its outputs and the
//! few values the plan keeps out of the arena, the same at any loop length.

use rune::prelude::*;

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

/// Within 1e-5 of eager's largest magnitude, element by element.
fn close(a: &Tensor, b: &Tensor) {
    assert_eq!(a.shape(), b.shape());
    let (a, b) = (a.to_vec::<f32>(), b.to_vec::<f32>());
    let scale = b.iter().fold(1e-6f32, |m, x| m.max(x.abs()));
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() <= 1e-5 * scale, "{x} vs eager {y}");
    }
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
    if std::env::var_os("TOLK_SANITIZE").is_some() {
        // Sanitized builds give every value its own buffer (no arena).
        return;
    }
    // No step of the forward loop allocates: the same bytes at 10 and 40
    // steps.
    assert_eq!(fwd[0], fwd[1], "the forward scan allocates per step");
    // The differentiated one grows by the residuals its forward loop
    // stacks for the backward loop (each step's h and tanh output, [8, 32]
    // f32 each), nothing more: its products and kernels write in place.
    let residuals = 2 * 8 * 32 * 4;
    assert!(
        grads[1] - grads[0] <= 30 * residuals,
        "the differentiated scan allocates {} bytes per step beyond its residuals",
        (grads[1] - grads[0]) / 30 - residuals
    );
}

type Mlp = (Tensor, Tensor, Tensor, Tensor);

fn mlp_loss((w1, b1, w2, b2): &Mlp, x: &Tensor, y: &Tensor) -> Tensor {
    let h = (x.matmul(w1) + b1).relu();
    (h.matmul(w2) + b2 - y).square().mean_all()
}

#[test]
fn an_mlp_step_allocates_only_its_outputs() {
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
    if std::env::var_os("TOLK_SANITIZE").is_some() {
        // Sanitized builds give every value its own buffer (no arena).
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
    // A size no other buffer in this process has: nx's cache cannot give
    // it, so the system allocator does (the counter only grows, so other
    // tests running meanwhile cannot make this fail).
    let n = 3_000_017;
    let before = nx::storage::system_bytes();
    let t = Tensor::zeros(&[n], DType::F32);
    assert!(nx::storage::system_bytes() - before >= (n * 4) as u64);
    drop(t);
}
