//! `nx::segment_sum` and `Tensor::index_add` under the transformations:
//! `check_grads` in f64 (first and second order), the gradients against
//! their closed forms (a gather of the cotangent), `<vjp(ct), t> ==
//! <ct, jvp(t)>`, vmap against a loop (ids captured and ids mapped), jit
//! against eager bit for bit (ids as inputs and as captured constants,
//! gradients, a scan; a fused reduction's value within 8 epsilons);
//! out-of-range ids under jit raise eager's panic (ids as inputs, captured,
//! carried through a scan).

mod common;

#[path = "common/bits.rs"]
mod bits;

use bits::same_bits;
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
    /// `n` ids in `[-s, s)`, repeats likely.
    fn ids(&mut self, n: usize, s: usize) -> Vec<i64> {
        (0..n)
            .map(|_| (self.next() % (2 * s as u64)) as i64 - s as i64)
            .collect()
    }
}

fn t(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_slice(v, shape)
}

fn ids(v: &[i64], dt: DType) -> Tensor {
    Tensor::from_slice(v, &[v.len()]).cast(dt)
}

fn dot(a: &Tensor, b: &Tensor) -> f64 {
    (a * b).sum_all().item::<f64>()
}

/// The segment-sum cases: data shape, number of segments.
const SEG: [(&[usize], usize); 4] = [(&[6], 4), (&[7, 3], 5), (&[5, 2, 3], 2), (&[4, 2], 9)];

/// The index-add cases: self's shape, axis, number of indices.
const IDX: [(&[usize], isize, usize); 4] = [
    (&[5], 0, 7),
    (&[4, 3], 1, 5),
    (&[3, 4, 2], -2, 6),
    (&[3, 2], 0, 2),
];

#[test]
fn segment_sum_gradients() {
    let mut rng = Rng(1);
    for (shape, s) in SEG {
        let n: usize = shape.iter().product();
        let d = t(&rng.vec(n), shape);
        let sid = ids(&rng.ids(shape[0], s), DType::I32);
        let f = |d: &Tensor| nx::segment_sum(d, &sid, s);
        let y = f(&d);
        let w = t(&rng.vec(y.numel()), y.shape());
        let what = format!("segment_sum {shape:?} into {s}");
        rune::check_grads(|d: &Tensor| (f(d) * &w).sum_all(), &d)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        // Closed form: d/d data of sum(segment_sum(d) * w) is w[ids].
        let g = rune::grad(|d: &Tensor| (f(d) * &w).sum_all(), &d);
        assert_eq!(
            g.to_vec::<f64>(),
            w.take(&sid, 0).to_vec::<f64>(),
            "{what}: gradient"
        );
        // jvp/vjp consistency.
        let tan = t(&rng.vec(n), shape);
        let (_, pulled) = rune::vjp(f, &d, &w);
        let (_, pushed) = rune::jvp(f, &d, &tan);
        let (a, b) = (dot(&pulled, &tan), dot(&w, &pushed));
        assert!(
            (a - b).abs() <= 1e-12 * (1.0 + a.abs()),
            "{what}: <vjp(ct), t> = {a} but <ct, jvp(t)> = {b}"
        );
        // Second order, through a nonlinearity.
        let gg = |d: &Tensor| rune::grad(|d: &Tensor| (f(d).sin() * &w).sum_all(), d);
        let v = t(&rng.vec(n), shape);
        rune::check_grads(|d: &Tensor| (gg(d) * &v).sum_all(), &d)
            .unwrap_or_else(|e| panic!("{what} second order: {e}"));
    }
}

#[test]
fn index_add_gradients() {
    let mut rng = Rng(2);
    for (shape, axis, k) in IDX {
        let a = axis.rem_euclid(shape.len() as isize) as usize;
        let n: usize = shape.iter().product();
        let mut ss = shape.to_vec();
        ss[a] = k;
        let m: usize = ss.iter().product();
        let x = t(&rng.vec(n), shape);
        let src = t(&rng.vec(m), &ss);
        let idx = ids(&rng.ids(k, shape[a]), DType::I64);
        let f = |(x, s): &(Tensor, Tensor)| x.index_add(axis, &idx, s);
        let p = (x, src);
        let w = t(&rng.vec(n), shape);
        let what = format!("index_add {shape:?} axis {axis}, {k} indices");
        rune::check_grads(|p: &(Tensor, Tensor)| (f(p) * &w).sum_all(), &p)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        // Closed forms: w for self, w gathered at idx along axis for src.
        let (gx, gs) = rune::grad(|p: &(Tensor, Tensor)| (f(p) * &w).sum_all(), &p);
        assert_eq!(gx.to_vec::<f64>(), w.to_vec::<f64>(), "{what}: d/dself");
        assert_eq!(
            gs.to_vec::<f64>(),
            w.take(&idx, axis).to_vec::<f64>(),
            "{what}: d/dsrc"
        );
        // jvp/vjp consistency.
        let tan = (t(&rng.vec(n), shape), t(&rng.vec(m), &ss));
        let (_, (px, ps)) = rune::vjp(f, &p, &w);
        let (_, pushed) = rune::jvp(f, &p, &tan);
        let (l, r) = (dot(&px, &tan.0) + dot(&ps, &tan.1), dot(&w, &pushed));
        assert!(
            (l - r).abs() <= 1e-12 * (1.0 + l.abs()),
            "{what}: <vjp(ct), t> = {l} but <ct, jvp(t)> = {r}"
        );
        // Second order.
        let v = (t(&rng.vec(n), shape), t(&rng.vec(m), &ss));
        rune::check_grads(
            |p: &(Tensor, Tensor)| {
                let (gx, gs) = rune::grad(|p: &(Tensor, Tensor)| (f(p).tanh() * &w).sum_all(), p);
                (gx * &v.0).sum_all() + (gs * &v.1).sum_all()
            },
            &p,
        )
        .unwrap_or_else(|e| panic!("{what} second order: {e}"));
    }
}

fn assert_close(got: &Tensor, want: &Tensor, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shapes");
    let (g, w) = (got.to_vec::<f64>(), want.to_vec::<f64>());
    for (a, e) in g.iter().zip(&w) {
        assert!(
            a == e || (a - e).abs() <= 1e-12 * (1.0 + e.abs()),
            "{what}: {a} vs {e}"
        );
    }
}

#[test]
fn vmap_matches_a_loop() {
    let mut rng = Rng(3);
    let b = 3;
    for (shape, s) in SEG {
        let mut bs = vec![b];
        bs.extend_from_slice(shape);
        let n: usize = bs.iter().product();
        let ds = t(&rng.vec(n), &bs);
        let idv: Vec<i64> = rng.ids(b * shape[0], s);
        let is = Tensor::from_slice(&idv, &[b, shape[0]]);
        let lane = |x: &Tensor, i: usize| x.narrow(0, i, 1).squeeze(0);
        let what = format!("segment_sum {shape:?} into {s}");
        // Ids captured: one set for every lane.
        let sid = lane(&is, 0);
        let f = |d: &Tensor| nx::segment_sum(d, &sid, s);
        let got = rune::vmap(f, &ds);
        let want = Tensor::stack(&(0..b).map(|i| f(&lane(&ds, i))).collect::<Vec<_>>(), 0);
        assert_close(&got, &want, &format!("{what}, ids captured"));
        // Ids mapped too.
        let f = |(d, i): &(Tensor, Tensor)| nx::segment_sum(d, i, s);
        let got = rune::vmap(f, &(ds.clone(), is.clone()));
        let want = Tensor::stack(
            &(0..b)
                .map(|i| f(&(lane(&ds, i), lane(&is, i))))
                .collect::<Vec<_>>(),
            0,
        );
        assert_close(&got, &want, &format!("{what}, ids mapped"));
        // The gradient under vmap (a gather of the cotangent, batched).
        let g = |(d, i): &(Tensor, Tensor)| {
            rune::grad(|d: &Tensor| nx::segment_sum(d, i, s).square().sum_all(), d)
        };
        let got = rune::vmap(g, &(ds.clone(), is.clone()));
        let want = Tensor::stack(
            &(0..b)
                .map(|i| g(&(lane(&ds, i), lane(&is, i))))
                .collect::<Vec<_>>(),
            0,
        );
        assert_close(&got, &want, &format!("{what}, grad"));
    }
    for (shape, axis, k) in IDX {
        let a = axis.rem_euclid(shape.len() as isize) as usize;
        let mut ss = shape.to_vec();
        ss[a] = k;
        let mut bx = vec![b];
        bx.extend_from_slice(shape);
        let mut bsrc = vec![b];
        bsrc.extend_from_slice(&ss);
        let xs = t(&rng.vec(bx.iter().product()), &bx);
        let srcs = t(&rng.vec(bsrc.iter().product()), &bsrc);
        let is = Tensor::from_slice(&rng.ids(b * k, shape[a]), &[b, k]).cast(DType::I32);
        let lane = |x: &Tensor, i: usize| x.narrow(0, i, 1).squeeze(0);
        let what = format!("index_add {shape:?} axis {axis}");
        let f = |(x, s, i): &(Tensor, Tensor, Tensor)| x.index_add(axis, i, s);
        let got = rune::vmap(f, &(xs.clone(), srcs.clone(), is.clone()));
        let want = Tensor::stack(
            &(0..b)
                .map(|i| f(&(lane(&xs, i), lane(&srcs, i), lane(&is, i))))
                .collect::<Vec<_>>(),
            0,
        );
        assert_close(&got, &want, &format!("{what}, all mapped"));
        // Self shared (not mapped), src mapped, indices captured.
        let x0 = lane(&xs, 0);
        let i0 = lane(&is, 0);
        let f = |s: &Tensor| x0.index_add(axis, &i0, s);
        let got = rune::vmap(f, &srcs);
        let want = Tensor::stack(&(0..b).map(|i| f(&lane(&srcs, i))).collect::<Vec<_>>(), 0);
        assert_close(&got, &want, &format!("{what}, src mapped"));
    }
}

/// Every leaf of `got` has `want`'s bits.
fn same_leaves<T: Ptree>(got: &T, want: &T, what: &str) {
    let (g, w) = (got.leaves(), want.leaves());
    assert_eq!(g.len(), w.len(), "{what}: leaf counts");
    for (k, (a, b)) in g.iter().zip(&w).enumerate() {
        same_bits(a, b).unwrap_or_else(|e| panic!("{what}: output {k}: {e}"));
    }
}

#[test]
fn jit_matches_eager_bit_for_bit() {
    let mut rng = Rng(4);
    // f32 values of mixed magnitudes: the order of each sum shows in its bits.
    let mixed = |rng: &mut Rng, n: usize, shape: &[usize]| {
        let v: Vec<f64> = (0..n)
            .map(|i| rng.unit() * 10f64.powi((i % 7) as i32 - 3))
            .collect();
        t(&v, shape).cast(DType::F32)
    };
    let d = mixed(&mut rng, 40 * 6, &[40, 6]);
    let sid = ids(&rng.ids(40, 5), DType::I32);
    let x = mixed(&mut rng, 5 * 6, &[5, 6]);
    let src = mixed(&mut rng, 5 * 9, &[5, 9]);
    let cols = ids(&rng.ids(9, 6), DType::I64);

    // Ids as inputs.
    let f = |(d, sid, x, src, cols): &(Tensor, Tensor, Tensor, Tensor, Tensor)| {
        let s = nx::segment_sum(d, sid, 5);
        let y = x.index_add(1, cols, src);
        let z = nx::segment_sum(&(d.exp() * 0.5), sid, 7); // fused producer
        (s, y, z)
    };
    let p = (d.clone(), sid.clone(), x.clone(), src.clone(), cols.clone());
    same_leaves(&rune::jit(f).call(&p), &f(&p), "ids as inputs");

    // Ids captured (constants of the program), and gradients.
    let g = |(d, x, src): &(Tensor, Tensor, Tensor)| {
        let loss = |(d, x, src): &(Tensor, Tensor, Tensor)| {
            let s = nx::segment_sum(&d.tanh(), &sid, 5);
            let y = x.index_add(1, &cols, &(src * 1.5));
            (s.square() * 0.3).sum_all() + (y.sin() * (&s + 0.25)).sum_all()
        };
        rune::value_and_grad(loss, &(d.clone(), x.clone(), src.clone()))
    };
    let p = (d.clone(), x.clone(), src.clone());
    let ((jl, jg), (el, eg)) = (rune::jit(g).call(&p), g(&p));
    same_leaves(&jg, &eg, "ids captured, gradients");
    // The loss is a fused reduction, which tolk accumulates in f64 (eager:
    // f32 lanes into f64 block totals): a few ulp apart, as jit_op_table
    // states.
    let (a, b) = (jl.item::<f32>() as f64, el.item::<f32>() as f64);
    assert!(
        (a - b).abs() <= 8.0 * f32::EPSILON as f64 * (1.0 + b.abs()),
        "loss: jit {a} eager {b}"
    );

    // Inside a scan: a neighbour gather and a segment sum at every step.
    let nbr = ids(&rng.ids(40, 40), DType::I32);
    let h = |x0: &Tensor| {
        let steps = Tensor::zeros(&[6, 1], DType::F32);
        let (x, ()) = rune::scan(
            |x: &Tensor, _: &Tensor| {
                let m = nx::segment_sum(&x.take(&nbr, 0), &sid, 5);
                (x * 0.9 + m.take(&sid, 0) * 0.01, ())
            },
            x0,
            &steps,
        );
        x
    };
    let hg = |x0: &Tensor| rune::grad(|x0: &Tensor| h(x0).square().sum_all(), x0);
    same_leaves(&rune::jit(h).call(&d), &h(&d), "scan");
    same_leaves(&rune::jit(hg).call(&d), &hg(&d), "grad of scan");
}

/// Out-of-range ids and indices (past either bound) under jit raise eager's
/// panic, on every call, before any kernel runs: ids as inputs, as captured
/// constants, and inside a staged loop; an in-range call afterwards still
/// equals eager.
#[test]
fn out_of_range_ids_under_jit_raise_eagers_error() {
    let d = t(
        &(0..12).map(|i| i as f64 * 0.5).collect::<Vec<_>>(),
        &[4, 3],
    );
    let seg = |(d, i): &(Tensor, Tensor)| nx::segment_sum(&(d * 2.0), i, 3);
    let add = |(d, i): &(Tensor, Tensor)| d.index_add(1, i, &d.narrow(1, 0, 2));
    let (jseg, jadd) = (rune::jit(seg), rune::jit(add));
    for bad in [[0i64, 3, 1, 1], [-4, 0, 2, -1]] {
        let bad = ids(&bad, DType::I64);
        let eager = common::panic_message(|| drop(seg(&(d.clone(), bad.clone()))));
        assert!(eager.contains("scatter_add"), "{eager}");
        for _ in 0..2 {
            let m = common::panic_message(|| drop(jseg.call(&(d.clone(), bad.clone()))));
            assert_eq!(m, eager, "segment_sum, ids as inputs");
        }
        // Captured.
        let cap = bad.clone();
        let g = rune::jit(move |d: &Tensor| nx::segment_sum(d, &cap, 3).exp());
        let m = common::panic_message(|| drop(g.call(&d)));
        assert_eq!(
            m,
            common::panic_message(|| drop(nx::segment_sum(&d, &bad, 3)))
        );
    }
    for bad in [[2i32, 3], [0, -4]] {
        let bad = ids(&bad.map(i64::from), DType::I32);
        let eager = common::panic_message(|| drop(add(&(d.clone(), bad.clone()))));
        let m = common::panic_message(|| drop(jadd.call(&(d.clone(), bad.clone()))));
        assert_eq!(m, eager, "index_add");
    }
    let ok = ids(&[2, -3, 0, 2], DType::I64);
    same_bits(&jseg.call(&(d.clone(), ok.clone())), &seg(&(d.clone(), ok))).unwrap();
    // Inside a scan: the ids carried through the loop, one out of range.
    let looped = |(d, i): &(Tensor, Tensor)| {
        let steps = Tensor::zeros(&[3, 1], DType::F64);
        let ((x, _), ()) = rune::scan(
            |(x, i): &(Tensor, Tensor), _: &Tensor| {
                (
                    (
                        nx::segment_sum(x, i, 4) * 0.5 + x.narrow(0, 0, 4),
                        i.clone(),
                    ),
                    (),
                )
            },
            &(d.clone(), i.clone()),
            &steps,
        );
        x
    };
    let bad = ids(&[0, 1, 4, 2], DType::I32);
    let eager = common::panic_message(|| drop(looped(&(d.clone(), bad.clone()))));
    let m = common::panic_message(|| drop(rune::jit(looped).call(&(d.clone(), bad.clone()))));
    assert_eq!(m, eager, "inside a scan");
}
