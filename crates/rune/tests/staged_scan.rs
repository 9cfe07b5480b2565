//! `scan` under jit runs as a loop of the compiled program: results against
//! the eager scan (each step traced), for every transformation of it.

mod common;
use common::panic_message;
use rune::prelude::*;

/// Deterministic f64 values of `shape` in about [-1, 1].
fn data(shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|i| {
            let x = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
                ^ seed.wrapping_mul(0xBF58_476D_1CE4_E5B9);
            ((x >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect();
    Tensor::from_slice(&v, shape)
}

#[track_caller]
fn close(a: &Tensor, b: &Tensor, what: &str) {
    assert_eq!(a.shape(), b.shape(), "{what}: shapes");
    assert_eq!(a.dtype(), b.dtype(), "{what}: dtypes");
    let (a, b) = (
        a.cast(DType::F64).to_vec::<f64>(),
        b.cast(DType::F64).to_vec::<f64>(),
    );
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            (x - y).abs() <= 1e-10 * (1.0 + y.abs()),
            "{what}: element {i}: jit {x}, eager {y}"
        );
    }
}

/// One step of a small recurrent map: the carry through tanh of an affine
/// map of itself and the input, a per-step output of both.
fn step(w: &Tensor, c: &Tensor, x: &Tensor) -> (Tensor, Tensor) {
    let next = (c.matmul(w) * 0.9 + x).tanh();
    let y = c.sin() * x;
    (next, y)
}

fn rnn(w: &Tensor, c0: &Tensor, xs: &Tensor) -> (Tensor, Tensor) {
    rune::scan(|c: &Tensor, x: &Tensor| step(w, c, x), c0, xs)
}

fn loss(w: &Tensor, c0: &Tensor, xs: &Tensor) -> Tensor {
    let (c, ys) = rnn(w, c0, xs);
    c.square().sum_all() + ys.sum_all()
}

fn inputs(t: usize) -> (Tensor, Tensor, Tensor) {
    (data(&[4, 4], 1) * 0.5, data(&[4], 2), data(&[t, 4], 3))
}

/// The staged program holds one loop and no per-step equations.
#[test]
fn a_scan_under_jit_stages_one_loop_equal_to_eager() {
    let (w, c0, xs) = inputs(50);
    let f = |(w, c0, xs): &(Tensor, Tensor, Tensor)| rnn(w, c0, xs);
    let p = (w.clone(), c0.clone(), xs.clone());
    let g = rune::make_graph(f, &p);
    let text = format!("{g}");
    assert_eq!(text.matches("scan{length: 50").count(), 1, "{text}");
    assert!(g.eqns.len() < 5, "one loop, not 50 unrolled steps:\n{text}");
    let (c, ys) = jit(f).call(&p);
    let (ce, yse) = rnn(&w, &c0, &xs);
    close(&c, &ce, "carry");
    close(&ys, &yse, "ys");
}

#[test]
fn grad_and_value_and_grad_of_a_staged_scan_equal_eager() {
    let (w, c0, xs) = inputs(30);
    let p = (w.clone(), c0.clone(), xs.clone());
    let l = |p: &(Tensor, Tensor, Tensor)| loss(&p.0, &p.1, &p.2);
    let want = rune::grad(l, &p);
    let got = jit(|p: &(Tensor, Tensor, Tensor)| rune::grad(l, p)).call(&p);
    close(&got.0, &want.0, "d/dw (a capture of the body)");
    close(&got.1, &want.1, "d/dc0");
    close(&got.2, &want.2, "d/dxs");
    let (v, g) = jit(|p: &(Tensor, Tensor, Tensor)| rune::value_and_grad(l, p)).call(&p);
    close(&v, &l(&p), "value");
    close(&g.0, &want.0, "value_and_grad d/dw");
    // A reverse loop, not unrolled steps: the graph stays small.
    let g = rune::make_graph(|p: &(Tensor, Tensor, Tensor)| rune::grad(l, p), &p);
    assert_eq!(format!("{g}").matches("scan{").count() >= 2, true);
    assert!(g.eqns.len() < 40, "{g}");
}

#[test]
fn jvp_and_hvp_of_a_staged_scan_equal_eager() {
    let (w, c0, xs) = inputs(20);
    let p = (w.clone(), c0.clone(), xs.clone());
    let t = (data(&[4, 4], 7), data(&[4], 8), data(&[20, 4], 9));
    let f = |p: &(Tensor, Tensor, Tensor)| rnn(&p.0, &p.1, &p.2);
    let (want_y, want_t) = rune::jvp(f, &p, &t);
    let (got_y, got_t) =
        jit(|(p, t): &((Tensor, Tensor, Tensor), (Tensor, Tensor, Tensor))| rune::jvp(f, p, t))
            .call(&(p.clone(), t.clone()));
    close(&got_y.0, &want_y.0, "primal carry");
    close(&got_t.0, &want_t.0, "carry tangent");
    close(&got_t.1, &want_t.1, "ys tangent");
    // Only c0 has a tangent: the carry's tangent still flows.
    let zero_w = (w.zeros_like(), c0.ones_like(), xs.zeros_like());
    let (_, want) = rune::jvp(f, &p, &zero_w);
    let (_, got) = jit(|p: &(Tensor, Tensor, Tensor)| {
        rune::jvp(|c0: &Tensor| rnn(&p.0, c0, &p.2), &p.1, &p.1.ones_like())
    })
    .call(&p);
    close(&got.0, &want.0, "tangent through the carry only");
    let l = |p: &(Tensor, Tensor, Tensor)| loss(&p.0, &p.1, &p.2);
    let want = rune::hvp(l, &p, &t);
    let got =
        jit(|(p, t): &((Tensor, Tensor, Tensor), (Tensor, Tensor, Tensor))| rune::hvp(l, p, t))
            .call(&(p.clone(), t.clone()));
    close(&got.0, &want.0, "hvp w");
    close(&got.1, &want.1, "hvp c0");
    close(&got.2, &want.2, "hvp xs");
}

#[test]
fn vmap_of_a_staged_scan_equals_the_loop_over_examples() {
    let (w, _, _) = inputs(1);
    let c0s = data(&[3, 4], 11);
    let xss = data(&[3, 12, 4], 12);
    let f = |(c0, xs): &(Tensor, Tensor)| rnn(&w, c0, xs);
    let got = jit(|p: &(Tensor, Tensor)| rune::vmap(f, p)).call(&(c0s.clone(), xss.clone()));
    for b in 0..3 {
        let (c, ys) = rnn(&w, &c0s.get(b), &xss.get(b));
        close(&got.0.get(b), &c, "carry of example");
        close(&got.1.get(b), &ys, "ys of example");
    }
    // Only the xs mapped (the initial carry shared), and vmap of grad.
    let got = jit(|xss: &Tensor| {
        rune::vmap(
            |xs: &Tensor| rune::grad(|xs: &Tensor| loss(&w, &c0s.get(0), xs), xs),
            xss,
        )
    })
    .call(&xss);
    for b in 0..3 {
        let want = rune::grad(|xs: &Tensor| loss(&w, &c0s.get(0), xs), &xss.get(b));
        close(&got.get(b), &want, "vmap of grad");
    }
}

#[test]
fn nested_scans_and_structured_carries_equal_eager() {
    let xs = data(&[6, 5, 3], 21);
    let f = |xs: &Tensor| {
        let init = (
            Tensor::zeros(&[3], DType::F64),
            Tensor::ones(&[3], DType::F64),
        );
        rune::scan(
            |(s, p): &(Tensor, Tensor), row: &Tensor| {
                // An inner scan over the row's entries.
                let (inner, _) =
                    rune::scan(|a: &Tensor, x: &Tensor| (a * 0.5 + x.cos(), ()), s, row);
                ((inner.clone(), p * (inner.tanh() + 1.5)), s.sum_all())
            },
            &init,
            xs,
        )
    };
    let ((s, p), ys) = jit(f).call(&xs);
    let ((se, pe), yse) = f(&xs);
    close(&s, &se, "sum carry");
    close(&p, &pe, "product carry");
    close(&ys, &yse, "ys");
    let g = rune::make_graph(f, &xs);
    assert_eq!(format!("{g}").matches("scan{length: ").count(), 2, "{g}");
    let l = |xs: &Tensor| {
        let ((s, p), ys) = f(xs);
        s.sum_all() + p.sum_all() + ys.sum_all()
    };
    close(
        &jit(|xs: &Tensor| rune::grad(l, xs)).call(&xs),
        &rune::grad(l, &xs),
        "grad of nested",
    );
}

#[test]
fn lengths_one_and_ten_thousand_and_each_unroll_equal_eager() {
    for t in [1usize, 10_000] {
        let (w, c0, xs) = inputs(t);
        let f = |p: &(Tensor, Tensor, Tensor)| rnn(&p.0, &p.1, &p.2);
        let p = (w, c0, xs);
        let (c, ys) = jit(f).call(&p);
        let (ce, yse) = f(&p);
        close(&c, &ce, &format!("carry, length {t}"));
        close(&ys, &yse, &format!("ys, length {t}"));
    }
    let (w, c0, xs) = inputs(10);
    let l = |p: &(Tensor, Tensor, Tensor), unroll: usize| {
        let (c, ys) = rune::scan_with(
            |c: &Tensor, x: &Tensor| step(&p.0, c, x),
            &p.1,
            &p.2,
            ScanOpts { unroll },
        );
        c.square().sum_all() + ys.sum_all()
    };
    let p = (w, c0, xs);
    let want = rune::grad(|p: &(Tensor, Tensor, Tensor)| l(p, 1), &p);
    for unroll in [1usize, 3, 10, 25] {
        let f = move |p: &(Tensor, Tensor, Tensor)| {
            (
                l(p, unroll),
                rune::grad(|p: &(Tensor, Tensor, Tensor)| l(p, unroll), p),
            )
        };
        let (v, g) = jit(f).call(&p);
        close(&v, &l(&p, 1), &format!("value, unroll {unroll}"));
        close(&g.0, &want.0, &format!("grad w, unroll {unroll}"));
        close(&g.2, &want.2, &format!("grad xs, unroll {unroll}"));
        let text = format!(
            "{}",
            rune::make_graph(|p: &(Tensor, Tensor, Tensor)| l(p, unroll), &p)
        );
        match unroll {
            1 => assert!(text.contains("scan{length: 10,"), "{text}"),
            3 => assert!(
                text.contains("scan{length: 3,"),
                "three iterations of three steps, one after: {text}"
            ),
            _ => assert!(!text.contains("scan{"), "fully unrolled: {text}"),
        }
    }
    assert!(panic_message(|| {
        rune::scan_with(
            |c: &Tensor, x: &Tensor| (c + x, ()),
            &Tensor::scalar(0.0f64),
            &data(&[3], 1),
            ScanOpts { unroll: 0 },
        );
    })
    .contains("unroll"));
}

#[test]
fn a_key_threaded_through_the_carry_draws_as_eager() {
    let xs = data(&[8, 5], 31).cast(DType::F32);
    let f = |(key, xs): &(Tensor, Tensor)| {
        rune::scan(
            |k: &Tensor, x: &Tensor| {
                let ks = rune::rng::split(k, 2);
                let noise = rune::rng::normal(&ks.get(1), &[5], DType::F32);
                (ks.get(0), x + noise)
            },
            key,
            xs,
        )
    };
    let p = (rune::rng::key(42), xs);
    let (k, ys) = jit(f).call(&p);
    let (ke, yse) = f(&p);
    assert_eq!(k.to_vec::<u32>(), ke.to_vec::<u32>(), "the final key");
    assert_eq!(
        ys.to_vec::<f32>(),
        yse.to_vec::<f32>(),
        "the draws, bit for bit"
    );
}

#[test]
fn a_scan_inside_pmap_equals_eager() {
    let (w, _, _) = inputs(1);
    // A batch of 4 carries split over two devices; xs [T, B, 4] split on B.
    let c0 = data(&[4, 4], 41);
    let xs = data(&[9, 4, 4], 42);
    let f = |(c0, xs): &(Tensor, Tensor)| {
        let (c, ys) = rnn(&w, c0, xs);
        (c, ys.sum_all())
    };
    let opts = PmapOpts {
        devices: vec!["CPU:1".into(), "CPU:2".into()],
        in_axes: Some(vec![Some(0), Some(1)]),
        donate: false,
    };
    let (c, total) = rune::pmap_with(f, opts).call(&(c0.clone(), xs.clone()));
    let (ce, totale) = f(&(c0, xs));
    close(&c, &ce, "carry");
    assert!((total.item::<f64>() - totale.item::<f64>()).abs() < 1e-9);
}

#[test]
fn a_carry_that_changes_shape_and_a_traced_predicate_raise_jit_error() {
    let xs = data(&[4, 2], 51);
    let grows = jit(|xs: &Tensor| {
        rune::scan(
            |c: &Tensor, x: &Tensor| (Tensor::concatenate(&[c.clone(), x.clone()], 0), ()),
            &Tensor::zeros(&[2], DType::F64),
            xs,
        )
        .0
    });
    let e = grows.try_call(&xs).err().expect("a JitError");
    assert!(e.message().contains("keeps its shape"), "{}", e.message());
    let branches = jit(|xs: &Tensor| {
        rune::scan(
            |c: &Tensor, x: &Tensor| {
                let pred = c.sum_all().greater(&Tensor::scalar(0.0f64));
                (rune::cond(&pred, || c + x, || c - x), ())
            },
            &Tensor::zeros(&[2], DType::F64),
            xs,
        )
        .0
    });
    let e = branches.try_call(&xs).err().expect("a JitError");
    assert!(
        e.message().contains("reads the value of a traced tensor"),
        "{}",
        e.message()
    );
}

/// Bodies of elementwise kernels only run each step on addresses resolved
/// once (no tensor per step): carries swapped, passed through, returned
/// twice, an input returned as an output, odd and even lengths.
#[test]
fn kernel_only_bodies_with_swapped_and_passed_through_carries_equal_eager() {
    type C = (Tensor, Tensor, Tensor);
    let f = |xs: &Tensor| {
        let init = (data(&[5], 62), data(&[5], 63), data(&[5], 64));
        rune::scan(
            |(a, b, c): &C, x: &Tensor| {
                let n = (a.sin() * 0.5 + x).tanh();
                (
                    (b.clone(), n.clone(), c.clone()),
                    (n.clone(), n * 2.0, x.clone(), a.clone()),
                )
            },
            &init,
            xs,
        )
    };
    for t in [1usize, 2, 7, 8] {
        let xs = data(&[t, 5], 61 + t as u64);
        let ((a, b, c), (n, n2, x, a_in)) = jit(f).call(&xs);
        let ((ae, be, ce), (ne, n2e, xe, a_ine)) = f(&xs);
        for (got, want, what) in [
            (&a, &ae, "a"),
            (&b, &be, "b"),
            (&c, &ce, "c (passed through)"),
            (&n, &ne, "n"),
            (&n2, &n2e, "2n"),
            (&x, &xe, "x (an input returned)"),
            (&a_in, &a_ine, "a as received"),
        ] {
            close(got, want, &format!("{what}, length {t}"));
        }
        let l = |xs: &Tensor| {
            let ((a, b, _), (n, _, _, _)) = f(xs);
            a.sum_all() + b.square().sum_all() + n.sum_all()
        };
        close(
            &jit(|xs: &Tensor| rune::grad(l, xs)).call(&xs),
            &rune::grad(l, &xs),
            "grad",
        );
    }
}

/// Issue 44: a loop whose body holds a gather (neighbours by captured
/// indices: repeats, negatives, both bounds) and a matrix product, staged
/// as one loop and differentiated under jit, equals the same steps run as
/// an eager Rust loop, value and gradient (with respect to the product's
/// matrix, a capture of the body; the initial carry; the per-step inputs);
/// `check_grads` holds on the staged scan itself.
#[test]
fn a_loop_with_a_gather_and_a_product_differentiated_under_jit_equals_the_eager_loop() {
    let nbr = Tensor::from_slice(&[5i32, 0, -1, 2, 2, -6], &[6]);
    let step = |w: &Tensor, h: &Tensor, x: &Tensor| {
        let h = (h.take(&nbr, 0).matmul(w) * 0.8 + x + h * 0.1).tanh();
        let y = h.sum(&[1], false);
        (h, y)
    };
    let scanned = |(w, h0, xs): &(Tensor, Tensor, Tensor)| {
        let (h, ys) = rune::scan(|h: &Tensor, x: &Tensor| step(w, h, x), h0, xs);
        h.square().sum_all() + (&ys * ys.sin()).sum_all()
    };
    let looped = |(w, h0, xs): &(Tensor, Tensor, Tensor)| {
        let mut h = h0.clone();
        let mut ys = vec![];
        for t in 0..xs.shape()[0] {
            let (next, y) = step(w, &h, &xs.get(t));
            h = next;
            ys.push(y);
        }
        let ys = Tensor::stack(&ys, 0);
        h.square().sum_all() + (&ys * ys.sin()).sum_all()
    };
    let p = (
        data(&[4, 4], 21) * 0.5,
        data(&[6, 4], 22),
        data(&[9, 6, 4], 23),
    );
    let vg = |p: &(Tensor, Tensor, Tensor)| rune::value_and_grad(scanned, p);
    // Staged: the forward and the reverse pass are loops, not 9 steps.
    let g = rune::make_graph(vg, &p);
    assert!(format!("{g}").matches("scan{").count() >= 2, "{g}");
    assert!(g.eqns.len() < 60, "{g}");
    let (v, (gw, gh, gx)) = jit(vg).call(&p);
    let (ve, (gwe, ghe, gxe)) = rune::value_and_grad(looped, &p);
    close(&v, &ve, "value");
    close(
        &gw,
        &gwe,
        "d/dw (the product's matrix, a capture of the body)",
    );
    close(&gh, &ghe, "d/dh0");
    close(&gx, &gxe, "d/dxs");
    close(&jit(scanned).call(&p), &ve, "forward only");
    rune::check_grads(scanned, &p).unwrap();
}

/// A loop body's products and kernels large enough to split across the
/// pool are timed both ways on the loop's first steps, and then run the
/// faster way: every call, through the trials and after, gives the bits of
/// the eager scan (f32, products of 64x128x128 multiply-adds and tanh over
/// 8192 elements per step, above the split thresholds).
/// (Elementwise per-step outputs: a fused reduction's order is its own.)
#[test]
fn a_loop_whose_steps_may_split_across_the_pool_gives_the_same_bits_every_call() {
    // `w @ c` mixes the carry's rows (no bands of rows), and the per-step
    // output is too little work for a stage of its own: the loop runs on
    // the calling thread, each step's product and kernel split or not.
    let w = (data(&[64, 64], 21) * (1.0 / 64f64.sqrt())).cast(DType::F32);
    let c0 = data(&[64, 128], 22).cast(DType::F32);
    let xs = data(&[40, 64, 128], 23).cast(DType::F32);
    let body = |c: &Tensor, x: &Tensor| {
        let next = (w.matmul(c) + x).tanh();
        (next.clone(), &next * 0.5)
    };
    let eager = rune::scan(body, &c0, &xs);
    let f = rune::jit(|(c0, xs): &(Tensor, Tensor)| rune::scan(body, c0, xs));
    let bits = |t: &Tensor| {
        t.to_vec::<f32>()
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>()
    };
    // The trials take 24 steps of the first call; the later calls run the
    // chosen way only.
    let before = (tolk::sharded_steps(), tolk::pipelined_steps());
    for call in 0..3 {
        let (c, ys) = f.call(&(c0.clone(), xs.clone()));
        assert_eq!(bits(&c), bits(&eager.0), "final carry, call {call}");
        assert_eq!(bits(&ys), bits(&eager.1), "per-step outputs, call {call}");
    }
    assert_eq!(
        (tolk::sharded_steps(), tolk::pipelined_steps()),
        before,
        "the loop ran on the calling thread"
    );
}

/// A recurrent network's loop (the scan RNN of the benchmarks). Its
/// forward step computes each row of the state from the same row alone, so
/// under jit its loops run as one loop per band of rows on two threads
/// (when nx has two); its gradient's weight sums add over the rows, so the
/// backward loop runs in stages instead: the next state's gradient on one
/// thread, the weight sums (carries nothing else reads) on the other, on
/// the calls where the tuner tries it and after if it is faster. Every
/// call computes what the one-thread loop computes, so the results are
/// eager's bits, on every call (the threads interleave differently each
/// time).
#[test]
fn a_recurrent_loop_run_in_bands_and_in_stages_on_two_threads_gives_eager_bits() {
    let (b, i, h, t) = (32, 64, 128, 12);
    let w = (data(&[h, h], 31) * (1.0 / 128f64.sqrt())).cast(DType::F32);
    let u = (data(&[i, h], 32) * 0.125).cast(DType::F32);
    let bias = (data(&[h], 33) * 0.1).cast(DType::F32);
    let xs = data(&[t, b, i], 34).cast(DType::F32);
    let h0 = data(&[b, h], 35).cast(DType::F32);
    let loss = |(w, u, bias): &(Tensor, Tensor, Tensor), xs: &Tensor, h0: &Tensor| {
        let (ht, hs) = rune::scan(
            |h: &Tensor, x: &Tensor| {
                let next = (h.matmul(w) + x.matmul(u) + bias).tanh();
                (next.clone(), next)
            },
            h0,
            xs,
        );
        (ht, hs)
    };
    let p = (w, u, bias);
    let bits = |t: &Tensor| {
        t.to_vec::<f32>()
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>()
    };
    let (eager_ht, eager_hs) = loss(&p, &xs, &h0);
    let sum_sq = |p: &(Tensor, Tensor, Tensor), xs: &Tensor, h0: &Tensor| {
        loss(p, xs, h0).0.square().sum_all()
    };
    let (eager_loss, (ew, eu, eb)) = rune::value_and_grad(|p| sum_sq(p, &xs, &h0), &p);
    let forward =
        rune::jit(|(p, xs, h0): &((Tensor, Tensor, Tensor), Tensor, Tensor)| loss(p, xs, h0));
    let step = rune::jit(|(p, xs, h0): &((Tensor, Tensor, Tensor), Tensor, Tensor)| {
        rune::value_and_grad(|p| sum_sq(p, xs, h0), p)
    });
    let args = (p.clone(), xs.clone(), h0.clone());
    let before = (tolk::sharded_steps(), tolk::pipelined_steps());
    for call in 0..4 {
        let (ht, hs) = forward.call(&args);
        assert_eq!(bits(&ht), bits(&eager_ht), "final state, call {call}");
        assert_eq!(bits(&hs), bits(&eager_hs), "stacked states, call {call}");
        let (l, (gw, gu, gb)) = step.call(&args);
        assert_eq!(bits(&gw), bits(&ew), "dW, call {call}");
        assert_eq!(bits(&gu), bits(&eu), "dU, call {call}");
        // The loss and db are sums over the batch and the features: the
        // compiled reduction's order, not eager's (f32 rounding apart).
        for (a, e, what) in [(&l, &eager_loss, "loss"), (&gb, &eb, "db")] {
            for (x, y) in a.to_vec::<f32>().iter().zip(e.to_vec::<f32>()) {
                assert!(
                    (x - y).abs() <= 1e-5 * (1.0 + y.abs()),
                    "{what}: jit {x}, eager {y}"
                );
            }
        }
    }
    if nx::num_threads() >= 2 {
        // Four calls each of two forward loops in bands (the forward's, the
        // gradient's), twelve steps each. The backward loop in stages: its
        // first calls alternate between one thread and the pipeline (the
        // tuner's trials), so calls 1 and 3 ran pipelined.
        assert_eq!(tolk::sharded_steps() - before.0, 4 * 2 * t as u64);
        assert_eq!(tolk::pipelined_steps() - before.1, 2 * t as u64);
    }
}

/// A loop body whose kernels are long to compile (a simulation's step:
/// sines, cosines, a gathered sum, in four stages) is built twice under
/// jit: first without vectorization, which the first call runs, then as
/// usual in the background, which a later call switches to. Both builds
/// are the same C compiled with no reassociation or contraction, so the
/// results are the same bits before and after the switch.
#[test]
fn a_loop_body_built_in_two_tiers_gives_the_same_bits_before_and_after_the_switch() {
    let n = 64;
    let idx: Vec<i32> = (0..n * 4).map(|i| ((i * 7 + 3) % n) as i32).collect();
    let nbr = Tensor::from_slice(&idx, &[n, 4]);
    let s0 = (
        data(&[n], 41).cast(DType::F32),
        (data(&[n], 42) * 0.1).cast(DType::F32),
    );
    let grad = |s: &(Tensor, Tensor)| {
        let f = |x: &Tensor, v: &Tensor| {
            let coupling = x.take(&nbr, 0).sum(&[1], false) - 4.0 * x;
            (v.clone(), -x.sin() - 0.1 * v + 0.25 * coupling)
        };
        rune::grad(
            |s: &(Tensor, Tensor)| {
                let rk4 = |(x, v): &(Tensor, Tensor), _: &Tensor| {
                    let dt = 0.01;
                    let (k1x, k1v) = f(x, v);
                    let (k2x, k2v) = f(&(x + dt / 2.0 * &k1x), &(v + dt / 2.0 * &k1v));
                    let (k3x, k3v) = f(&(x + dt / 2.0 * &k2x), &(v + dt / 2.0 * &k2v));
                    let (k4x, k4v) = f(&(x + dt * &k3x), &(v + dt * &k3v));
                    let x = x + dt / 6.0 * (k1x + 2.0 * k2x + 2.0 * k3x + k4x);
                    let v = v + dt / 6.0 * (k1v + 2.0 * k2v + 2.0 * k3v + k4v);
                    ((x, v), ())
                };
                let ((x, v), ()) = rune::scan(rk4, s, &Tensor::zeros(&[20, 1], DType::F32));
                (&x * &x).sum_all() + 0.1 * (&v * &v).sum_all()
            },
            s,
        )
    };
    let bits = |(a, b): &(Tensor, Tensor)| {
        [a, b]
            .iter()
            .flat_map(|t| t.to_vec::<f32>())
            .map(f32::to_bits)
            .collect::<Vec<_>>()
    };
    let eager = grad(&s0);
    let jg = rune::jit(grad);
    let before = tolk::tier_switches();
    let first = jg.call(&s0);
    for (a, b) in bits(&first).iter().zip(bits(&eager)) {
        let (a, b) = (f32::from_bits(*a), f32::from_bits(b));
        assert!(
            (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
            "jit {a}, eager {b}"
        );
    }
    // The second builds finish within seconds; each call switches a body
    // whose build has finished.
    let start = std::time::Instant::now();
    while tolk::tier_switches() - before < 2 && start.elapsed().as_secs() < 60 {
        assert_eq!(bits(&jg.call(&s0)), bits(&first), "a call while switching");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // The forward and the backward loop's bodies both switched.
    assert_eq!(tolk::tier_switches() - before, 2);
    assert_eq!(bits(&jg.call(&s0)), bits(&first), "after the switch");
}
