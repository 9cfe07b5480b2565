//! Pooling and sorting under the transformations: `check_grads` in f64,
//! `<vjp(ct), t> == <ct, jvp(t)>`, max-pool ties (the gradient goes to the
//! first maximum, against a naive reference), second derivatives, vmap
//! against a loop over the batch, jit against eager.

mod common;

use common::panic_message;
#[path = "common/bits.rs"]
mod bits;
use rune::nx::Padding;
use rune::prelude::*;

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.unit()).collect()
    }
    /// A shuffled `0..n` scaled by `gap`, plus a little noise: distinct
    /// values at least `gap / 2` apart (no ties anywhere near a kink).
    fn distinct(&mut self, n: usize, gap: f64) -> Vec<f64> {
        let mut v: Vec<f64> = (0..n).map(|i| i as f64 * gap).collect();
        for i in (1..n).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
        v.iter()
            .map(|x| x - 1.0 + self.unit() * gap * 0.2)
            .collect()
    }
}

fn t(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_slice(v, shape)
}

struct Cfg {
    shape: &'static [usize],
    window: &'static [usize],
    strides: &'static [usize],
    padding: Padding,
}

fn cfgs() -> Vec<Cfg> {
    use Padding::*;
    let c = |shape, window, strides, padding| Cfg {
        shape,
        window,
        strides,
        padding,
    };
    vec![
        c(&[2, 2, 7], &[3], &[2], Same),
        c(&[1, 2, 6], &[3], &[1], Explicit(vec![(2, 1)])),
        c(&[2, 1, 4, 4], &[2, 2], &[2, 2], Valid),
        c(&[1, 2, 5, 4], &[2, 2], &[2, 2], Valid), // uncovered last row
        c(&[1, 2, 5, 5], &[3, 2], &[2, 1], Same),
        c(
            &[1, 1, 4, 5],
            &[2, 3],
            &[1, 2],
            Explicit(vec![(0, 1), (2, 0)]),
        ),
        c(&[1, 1, 3, 4, 3], &[2, 2, 2], &[1, 2, 1], Same),
        // Windows that tile the input (the masks' rule, no argmax).
        c(&[2, 3, 7], &[3], &[3], Valid), // uncovered last element
        c(&[1, 2, 6, 7], &[3, 2], &[3, 2], Valid), // uncovered last column
        c(&[2, 1, 4, 4, 2], &[2, 2, 2], &[2, 2, 2], Valid),
    ]
}

fn max_pool(c: &Cfg) -> impl Fn(&Tensor) -> Tensor + '_ {
    move |x| x.max_pool(c.window, c.strides, c.padding.clone())
}

fn avg_pool(c: &Cfg) -> impl Fn(&Tensor) -> Tensor + '_ {
    move |x| x.avg_pool(c.window, c.strides, c.padding.clone())
}

/// `sum(f(x) * w)` for a fixed weight `w` of the output's shape.
fn weighted<'a>(f: impl Fn(&Tensor) -> Tensor + 'a, w: Tensor) -> impl Fn(&Tensor) -> Tensor + 'a {
    move |x| (f(x) * &w).sum_all()
}

fn dot(a: &Tensor, b: &Tensor) -> f64 {
    (a * b).sum_all().item::<f64>()
}

/// `<vjp(ct), t> == <ct, jvp(t)>` for pseudo-random `t` and `ct`.
fn check_consistency(f: &dyn Fn(&Tensor) -> Tensor, x: &Tensor, rng: &mut Rng, what: &str) {
    let y = f(x);
    let tan = t(&rng.vec(x.numel()), x.shape());
    let ct = t(&rng.vec(y.numel()), y.shape());
    let (_, pulled) = rune::vjp(|x: &Tensor| f(x), x, &ct);
    let (_, pushed) = rune::jvp(|x: &Tensor| f(x), x, &tan);
    let (a, b) = (dot(&pulled, &tan), dot(&ct, &pushed));
    assert!(
        (a - b).abs() <= 1e-12 * (1.0 + a.abs()),
        "{what}: <vjp(ct), t> = {a} but <ct, jvp(t)> = {b}"
    );
}

#[test]
fn pooling_gradients_check() {
    let mut rng = Rng(11);
    for (i, c) in cfgs().iter().enumerate() {
        let n: usize = c.shape.iter().product();
        let x = t(&rng.distinct(n, 0.05), c.shape);
        for (name, f) in [
            (
                "max_pool",
                Box::new(max_pool(c)) as Box<dyn Fn(&Tensor) -> Tensor>,
            ),
            ("avg_pool", Box::new(avg_pool(c))),
        ] {
            let y = f(&x);
            let w = t(&rng.vec(y.numel()), y.shape());
            let what = format!("{name} case {i}");
            rune::check_grads(weighted(&f, w.clone()), &x)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            check_consistency(&f, &x, &mut rng, &what);
            // Second order: the gradient (a scatter / transposed window sum)
            // differentiates again.
            let g = |x: &Tensor| rune::grad(|x: &Tensor| (f(x) * f(x) * &w).sum_all(), x);
            let v = t(&rng.vec(n), c.shape);
            rune::check_grads(|x: &Tensor| (g(x) * &v).sum_all(), &x)
                .unwrap_or_else(|e| panic!("{what} second order: {e}"));
        }
    }
}

/// The gradient of `sum(max_pool(x) * ct)` by loops: each window's
/// cotangent goes to its first maximum in row-major window order, padding
/// counting as -inf (lost when padding wins).
fn ref_max_pool_grad(
    x: &[f64],
    shape: &[usize],
    window: &[usize],
    strides: &[usize],
    pads: &[(usize, usize)],
    ct: &[f64],
) -> Vec<f64> {
    let sp = shape.len() - 2;
    let ins = &shape[2..];
    let outs: Vec<usize> = (0..sp)
        .map(|d| (ins[d] + pads[d].0 + pads[d].1 - window[d]) / strides[d] + 1)
        .collect();
    let (pin, pout): (usize, usize) = (ins.iter().product(), outs.iter().product());
    let wn: usize = window.iter().product();
    let mut g = vec![0.0; x.len()];
    for p in 0..shape[0] * shape[1] {
        for oi in 0..pout {
            let mut o = vec![0; sp];
            let mut r = oi;
            for d in (0..sp).rev() {
                o[d] = r % outs[d];
                r /= outs[d];
            }
            let mut best: Option<(f64, Option<usize>)> = None;
            for wi in 0..wn {
                let mut w = vec![0; sp];
                let mut r = wi;
                for d in (0..sp).rev() {
                    w[d] = r % window[d];
                    r /= window[d];
                }
                let mut flat = Some(0usize);
                for d in 0..sp {
                    let i = (o[d] * strides[d] + w[d]) as i64 - pads[d].0 as i64;
                    flat = if i < 0 || i >= ins[d] as i64 {
                        None
                    } else {
                        flat.map(|f| f * ins[d] + i as usize)
                    };
                }
                let v = flat.map_or(f64::NEG_INFINITY, |f| x[p * pin + f]);
                if best.is_none_or(|(b, _)| v > b) {
                    best = Some((v, flat));
                }
            }
            if let Some((_, Some(f))) = best {
                g[p * pin + f] += ct[p * pout + oi];
            }
        }
    }
    g
}

#[test]
fn max_pool_ties_send_the_gradient_to_the_first_maximum() {
    let mut rng = Rng(12);
    for (i, c) in cfgs().iter().enumerate() {
        let n: usize = c.shape.iter().product();
        // Few distinct values: many ties in every window; -inf too.
        let x: Vec<f64> = (0..n)
            .map(|_| match rng.next() % 7 {
                0 => f64::NEG_INFINITY,
                k => (k % 3) as f64,
            })
            .collect();
        let xt = t(&x, c.shape);
        let y = max_pool(c)(&xt);
        let ct = rng.vec(y.numel());
        let pads = c.padding.resolve("t", &c.shape[2..], c.window, c.strides);
        let want = ref_max_pool_grad(&x, c.shape, c.window, c.strides, &pads, &ct);
        let g = rune::grad(weighted(max_pool(c), t(&ct, y.shape())), &xt);
        let got = g.to_vec::<f64>();
        for (j, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!(
                (a - b).abs() < 1e-12,
                "case {i} element {j}: got {a}, want {b}"
            );
        }
        // Forward mode picks the same element.
        let tan = rng.vec(n);
        let (_, jv) = rune::jvp(max_pool(c), &xt, &t(&tan, c.shape));
        let want_jv = dot(&t(&want, c.shape), &t(&tan, c.shape));
        let got_jv = dot(&jv, &t(&ct, y.shape()));
        assert!(
            (got_jv - want_jv).abs() < 1e-12,
            "case {i} jvp: {got_jv} vs {want_jv}"
        );
    }
    // Padding first in a window with a real -inf after it: the padding wins.
    let x = t(&[f64::NEG_INFINITY, 1.0], &[1, 1, 2]);
    let f = |x: &Tensor| {
        x.max_pool(&[2], &[1], Padding::Explicit(vec![(1, 0)]))
            .sum_all()
    };
    assert_eq!(rune::grad(f, &x).to_vec::<f64>(), vec![0.0, 1.0]);
}

#[test]
fn sort_and_top_k_gradients_check() {
    let mut rng = Rng(13);
    for (shape, axis) in [
        (vec![7], 0isize),
        (vec![3, 5], 0),
        (vec![3, 5], -1),
        (vec![2, 3, 4], 1),
    ] {
        let n: usize = shape.iter().product();
        let x = t(&rng.distinct(n, 0.1), &shape);
        for descending in [false, true] {
            let f = move |x: &Tensor| x.sort(axis, descending);
            let w = t(&rng.vec(n), &shape);
            let what = format!("sort {shape:?} axis {axis} desc {descending}");
            rune::check_grads(weighted(f, w), &x).unwrap_or_else(|e| panic!("{what}: {e}"));
            check_consistency(&f, &x, &mut rng, &what);
        }
        let last = *shape.last().unwrap();
        for k in [1, last / 2 + 1, last] {
            let f = move |x: &Tensor| x.top_k(k).0;
            let y = f(&x);
            let w = t(&rng.vec(y.numel()), y.shape());
            let what = format!("top_k {shape:?} k {k}");
            rune::check_grads(weighted(f, w), &x).unwrap_or_else(|e| panic!("{what}: {e}"));
            check_consistency(&f, &x, &mut rng, &what);
        }
    }
    // The sort's gradient is the cotangent permuted back (closed form).
    let x = t(&[3.0, 1.0, 2.0], &[3]);
    let ct = t(&[10.0, 20.0, 30.0], &[3]);
    let (_, g) = rune::vjp(|x: &Tensor| x.sort(0, false), &x, &ct);
    assert_eq!(g.to_vec::<f64>(), vec![30.0, 10.0, 20.0]);
    // top_k: only the selected elements receive a gradient.
    let g = rune::grad(
        |x: &Tensor| x.top_k(2).0.sum_all(),
        &t(&[1.0, 4.0, 2.0, 4.0], &[4]),
    );
    assert_eq!(g.to_vec::<f64>(), vec![0.0, 1.0, 0.0, 1.0]);
}

fn stack(parts: &[Tensor]) -> Tensor {
    Tensor::stack(parts, 0)
}

#[test]
fn vmap_matches_a_loop() {
    let mut rng = Rng(14);
    let b = 3;
    for c in cfgs() {
        let n: usize = c.shape.iter().product();
        let mut shape = vec![b];
        shape.extend_from_slice(c.shape);
        let xs = t(&rng.distinct(b * n, 0.05), &shape);
        let lanes: Vec<Tensor> = (0..b).map(|i| xs.narrow(0, i, 1).squeeze(0)).collect();
        let fs: Vec<Box<dyn Fn(&Tensor) -> Tensor>> = vec![
            Box::new(max_pool(&c)),
            Box::new(avg_pool(&c)),
            // grad under vmap: WindowArgmax, gather/scatter and the
            // transposed window sum batched.
            Box::new(|x: &Tensor| {
                rune::grad(
                    |x: &Tensor| (max_pool(&c)(x) * max_pool(&c)(x)).sum_all(),
                    x,
                )
            }),
            Box::new(|x: &Tensor| {
                rune::grad(
                    |x: &Tensor| (avg_pool(&c)(x) * avg_pool(&c)(x)).sum_all(),
                    x,
                )
            }),
        ];
        for (k, f) in fs.iter().enumerate() {
            let got = rune::vmap(|x: &Tensor| f(x), &xs);
            let want = stack(&lanes.iter().map(|x| f(x)).collect::<Vec<_>>());
            assert_eq!(got.shape(), want.shape());
            let (g, w) = (got.to_vec::<f64>(), want.to_vec::<f64>());
            for (a, e) in g.iter().zip(&w) {
                assert!(
                    a == e || (a - e).abs() <= 1e-12 * (1.0 + e.abs()),
                    "fn {k} {:?}: {a} vs {e}",
                    c.shape
                );
            }
        }
    }
    // Sorting: axis shifted past the batch axis; batch axis mapped from the end.
    let xs = t(&rng.vec(4 * 3 * 6), &[4, 3, 6]);
    for axis in [0isize, 1, -1] {
        for descending in [false, true] {
            let f = |x: &Tensor| (x.sort(axis, descending), x.argsort(axis, descending));
            let (s, a) = rune::vmap(f, &xs);
            for i in 0..4 {
                let (s1, a1) = f(&xs.narrow(0, i, 1).squeeze(0));
                assert_eq!(
                    s.narrow(0, i, 1).squeeze(0).to_vec::<f64>(),
                    s1.to_vec::<f64>()
                );
                assert_eq!(
                    a.narrow(0, i, 1).squeeze(0).to_vec::<i32>(),
                    a1.to_vec::<i32>()
                );
            }
        }
    }
    let f = |x: &Tensor| x.top_k(2);
    let opts = rune::VmapOpts {
        in_axes: Some(vec![Some(-1)]),
        out_axis: 0,
    };
    let (v, i) = rune::vmap_with(f, &xs, opts);
    for j in 0..6 {
        let (v1, i1) = f(&xs.narrow(2, j, 1).squeeze(2));
        assert_eq!(
            v.narrow(0, j, 1).squeeze(0).to_vec::<f64>(),
            v1.to_vec::<f64>()
        );
        assert_eq!(
            i.narrow(0, j, 1).squeeze(0).to_vec::<i32>(),
            i1.to_vec::<i32>()
        );
    }
    // Per-lane gradient of top_k values.
    let g = rune::vmap(
        |x: &Tensor| rune::grad(|x: &Tensor| x.top_k(3).0.sum_all(), x),
        &xs,
    );
    for i in 0..4 {
        let x1 = xs.narrow(0, i, 1).squeeze(0);
        let g1 = rune::grad(|x: &Tensor| x.top_k(3).0.sum_all(), &x1);
        assert_eq!(
            g.narrow(0, i, 1).squeeze(0).to_vec::<f64>(),
            g1.to_vec::<f64>()
        );
    }
}

#[test]
fn jit_matches_eager() {
    let mut rng = Rng(15);
    let x = t(&rng.vec(2 * 3 * 6 * 5), &[2, 3, 6, 5]).cast(DType::F32);
    let f = |x: &Tensor| {
        let m = x.max_pool(&[2, 2], &[2, 1], Padding::Same);
        let a = x.avg_pool(&[3, 2], &[1, 2], Padding::Explicit(vec![(1, 2), (0, 1)]));
        let s = x.sort(1, true);
        let (v, i) = x.reshape(&[6, 30]).top_k(4);
        let g = rune::grad(
            |x: &Tensor| (x.max_pool(&[2, 2], &[1, 1], Padding::Valid).exp()).sum_all(),
            x,
        );
        // Tiling windows (2x2/2 and 3x2/3x2 over 6x5): the masks' rule,
        // compiled into kernels.
        let gt = rune::grad(
            |x: &Tensor| {
                let a = x.max_pool(&[2, 2], &[2, 2], Padding::Valid).exp().sum_all();
                a + x.max_pool(&[3, 2], &[3, 2], Padding::Valid).sin().sum_all()
            },
            x,
        );
        let g = g + gt;
        let ga = rune::grad(
            |x: &Tensor| (x.avg_pool(&[2, 3], &[2, 1], Padding::Same) * 3.0).sum_all(),
            x,
        );
        (m, a, s, x.argsort(-1, false), v, i, g, ga)
    };
    let jf = rune::jit(f);
    let got = jf.call(&x);
    let want = f(&x);
    let (gl, wl) = (got.leaves(), want.leaves());
    assert_eq!(gl.len(), wl.len());
    for (k, (a, b)) in gl.iter().zip(&wl).enumerate() {
        assert_eq!(a.shape(), b.shape(), "output {k}");
        assert_eq!(a.dtype(), b.dtype(), "output {k}");
        let (av, bv) = (
            a.cast(DType::F64).to_vec::<f64>(),
            b.cast(DType::F64).to_vec::<f64>(),
        );
        for (p, q) in av.iter().zip(&bv) {
            assert!(
                (p - q).abs() <= 1e-6 * (1.0 + q.abs()),
                "output {k}: jit {p} vs eager {q}"
            );
        }
    }
    // A second call reuses the program.
    let again = jf.call(&x);
    assert_eq!(again.0.to_vec::<f32>(), want.0.to_vec::<f32>());
    assert_eq!(jf.trace_count(), 1);
}

/// Pools over small windows of every geometry (overlapping, padded, 1-D,
/// 3-D) compile to maps with eager's bits: max and avg pools, their
/// derivatives where the rule is a window sum, f32/f64/f16/bf16 and
/// integer windows, over values with ties, signed zeros, infinities and
/// NaN; only the max pools padded or overlapping along the last axis at
/// a stride above 1 stay library steps (see
/// `tolk::simplify`'s `windows_as_maps`), with eager's bits all the same.
#[test]
fn small_windows_compile_to_maps_with_eagers_bits() {
    let mut rng = Rng(21);
    let special = [
        0.0,
        -0.0,
        1.0,
        1.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        -2.5,
    ];
    let vals: Vec<f64> = (0..2 * 3 * 7 * 6)
        .map(|i| {
            if i % 5 == 0 {
                special[(i / 5) % 8]
            } else {
                (rng.unit() * 8.0).round() / 4.0 - 1.0
            }
        })
        .collect();
    let x = t(&vals, &[2, 3, 7, 6]);
    let pools = |x: &Tensor| {
        vec![
            x.max_pool(&[3, 3], &[2, 2], Padding::Same),
            x.max_pool(&[3, 3], &[2, 2], Padding::Valid),
            x.max_pool(&[3, 3], &[1, 1], Padding::Valid),
            x.max_pool(&[2, 3], &[1, 2], Padding::Explicit(vec![(1, 0), (2, 1)])),
            x.avg_pool(&[3, 3], &[2, 2], Padding::Same),
            x.avg_pool(&[2, 2], &[1, 1], Padding::Valid),
            x.reshape(&[6, 1, 42]).max_pool(&[4], &[3], Padding::Same),
            x.reshape(&[1, 2, 3, 7, 6])
                .max_pool(&[2, 2, 2], &[1, 2, 2], Padding::Valid),
        ]
    };
    let sum_grad = |x: &Tensor| {
        rune::grad(
            |x: &Tensor| (x.avg_pool(&[3, 2], &[2, 1], Padding::Same).square()).sum_all(),
            x,
        )
    };
    for dt in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let xd = x.cast(dt);
        let c = tolk::compile_with(rune::make_graph(pools, &xd), &opts()).expect("compiles");
        let libs = c.program.library_steps();
        let windows: Vec<&String> = libs
            .iter()
            .filter(|s| s.starts_with("reduce_window"))
            .collect();
        assert!(windows == ["reduce_window_max"; 4], "{dt}: {libs:?}");
        let got = c.program.run(&[xd.clone()]);
        for (k, (g, w)) in got.iter().zip(pools(&xd)).enumerate() {
            bits::same_bits(g, &w).unwrap_or_else(|e| panic!("{dt} pool {k}: {e}"));
        }
        let finite = Tensor::where_(&xd.isfinite(), &xd, &xd.zeros_like());
        let got = rune::jit(sum_grad).call(&finite);
        bits::same_bits(&got, &sum_grad(&finite))
            .unwrap_or_else(|e| panic!("{dt} avg_pool grad: {e}"));
    }
    // Integer windows: sums (wrapping) with padding, maxes without.
    let xi = (Tensor::where_(&x.isfinite(), &x, &x.zeros_like()) * 40.0).cast(DType::I8);
    let ints = |x: &Tensor| {
        let s = nx::trace::bind(
            nx::Prim::ReduceWindow {
                op: nx::ReduceOp::Sum,
                window: vec![1, 1, 3, 2],
                strides: vec![1, 1, 2, 1],
                padding: vec![(0, 0), (0, 0), (1, 1), (0, 1)],
            },
            &[x],
        );
        vec![s, x.max_pool(&[3, 2], &[1, 2], Padding::Valid)]
    };
    let c = tolk::compile_with(rune::make_graph(ints, &xi), &opts()).expect("compiles");
    assert!(
        c.program.library_steps().is_empty(),
        "{:?}",
        c.program.library_steps()
    );
    for (g, w) in c.program.run(&[xi.clone()]).iter().zip(ints(&xi)) {
        bits::same_bits(g, &w).unwrap();
    }
}

fn opts() -> tolk::Options {
    tolk::Options {
        use_cache: false,
        stream_min_bytes: None,
        quick_first: false,
    }
}

#[test]
fn errors_under_transformations_name_the_op() {
    let x = Tensor::zeros(&[2, 1, 3, 3], DType::F64);
    let m = panic_message(|| {
        rune::grad(
            |x: &Tensor| x.max_pool(&[4, 1], &[1, 1], Padding::Valid).sum_all(),
            &x,
        );
    });
    assert!(
        m.contains("max_pool") && m.contains("larger than the padded input"),
        "{m}"
    );
    let m = panic_message(|| {
        rune::vmap(
            |x: &Tensor| x.top_k(4).0,
            &x.reshape(&[2, 9]).narrow(1, 0, 3),
        );
    });
    assert!(m.contains("top_k") && m.contains("k = 4"), "{m}");
}
