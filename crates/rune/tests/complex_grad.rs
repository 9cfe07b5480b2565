//! Autodiff of complex values with JAX's conventions: grad of a real
//! function of complex inputs is the conjugate Wirtinger form
//! `∂f/∂x - i ∂f/∂y` (closed forms below), holomorphic JVPs are `f'(z) t`,
//! check_grads works on complex leaves (and fails on a wrong rule), vmap of
//! complex operations equals the loop.

use nx::Complex;
use rune::prelude::*;

type C = Complex<f64>;

fn c(re: f64, im: f64) -> C {
    Complex::new(re, im)
}

fn z1(v: C) -> Tensor {
    Tensor::from_slice(&[v], &[1])
}

fn zs(v: &[C]) -> Tensor {
    Tensor::from_slice(v, &[v.len()])
}

fn close(a: C, b: C, tol: f64) -> bool {
    (a - b).norm() <= tol * (1.0 + b.norm())
}

fn assert_all_close(got: &Tensor, want: &[C], tol: f64, what: &str) {
    let got = got.to_vec::<C>();
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(close(*g, *w, tol), "{what}[{k}]: {g} vs {w}");
    }
}

/// Deterministic complex samples away from 0 and from branch cuts.
fn samples(n: usize, seed: u64) -> Vec<C> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| c(0.3 + next() * 1.5, next() * 2.0 - 1.0))
        .collect()
}

#[test]
fn grad_of_squared_modulus_is_twice_the_conjugate() {
    let z = z1(c(3.0, 4.0));
    // JAX's documented example: grad(|z|^2)(3+4j) = 6-8j
    let g = rune::grad(|z: &Tensor| (z * z.conj()).real().sum_all(), &z);
    assert_all_close(&g, &[c(6.0, -8.0)], 1e-15, "z conj(z)");
    let g = rune::grad(|z: &Tensor| z.abs().square().sum_all(), &z);
    assert_all_close(&g, &[c(6.0, -8.0)], 1e-15, "abs^2");
    let g = rune::grad(
        |z: &Tensor| (z.real().square() + z.imag().square()).sum_all(),
        &z,
    );
    assert_all_close(&g, &[c(6.0, -8.0)], 1e-15, "re^2 + im^2");
}

#[test]
fn grad_of_parts_abs_and_angle() {
    let z = z1(c(3.0, 4.0));
    let g = rune::grad(|z: &Tensor| z.real().sum_all(), &z);
    assert_all_close(&g, &[c(1.0, 0.0)], 0.0, "real");
    // ∂imag/∂y = 1, so the conjugate form is -i
    let g = rune::grad(|z: &Tensor| z.imag().sum_all(), &z);
    assert_all_close(&g, &[c(0.0, -1.0)], 0.0, "imag");
    // |z|: (x - i y) / |z|
    let g = rune::grad(|z: &Tensor| z.abs().sum_all(), &z);
    assert_all_close(&g, &[c(0.6, -0.8)], 1e-15, "abs");
    // abs at 0: 0 (JAX's _replace_zero)
    let g = rune::grad(|z: &Tensor| z.abs().sum_all(), &z1(c(0.0, 0.0)));
    assert_all_close(&g, &[c(0.0, 0.0)], 0.0, "abs at 0");
    // angle = atan2(y, x): ∂/∂x = -y/r², ∂/∂y = x/r²
    let g = rune::grad(|z: &Tensor| z.angle().sum_all(), &z);
    assert_all_close(&g, &[c(-4.0 / 25.0, -3.0 / 25.0)], 1e-15, "angle");
    // conj: real(conj(z) * w) = x wr + y wi  ->  wr - i wi
    let w = z1(c(0.5, -2.0));
    let g = rune::grad(|z: &Tensor| (z.conj() * &w).real().sum_all(), &z);
    assert_all_close(&g, &[c(0.5, 2.0)], 1e-15, "conj");
    // Tensor::complex from real leaves: the cotangent's parts
    let (x, y) = (Tensor::scalar(3.0f64), Tensor::scalar(4.0f64));
    let (gx, gy) = rune::grad(
        |(x, y): &(Tensor, Tensor)| (Tensor::complex(x, y) * Tensor::complex(x, y).conj()).real(),
        &(x, y),
    );
    assert_eq!((gx.item::<f64>(), gy.item::<f64>()), (6.0, 8.0));
    // a real leaf cast to complex: real(cast(x) * w) = x wr
    let x = Tensor::from_slice(&[1.5f64], &[1]);
    let g = rune::grad(|x: &Tensor| (x.cast(DType::C128) * &w).real().sum_all(), &x);
    assert_eq!(g.to_vec::<f64>(), vec![0.5]);
}

#[test]
fn grad_of_real_part_of_holomorphic_functions_is_the_derivative() {
    // For holomorphic h, grad(real(h))(z) = h'(z) in JAX's convention.
    let v = samples(5, 1);
    let z = zs(&v);
    type H = fn(&Tensor) -> Tensor;
    type D = fn(C) -> C;
    let cases: [(&str, H, D); 9] = [
        ("exp", |z| z.exp(), |z| z.exp()),
        ("log", |z| z.log(), |z| c(1.0, 0.0) / z),
        ("sin", |z| z.sin(), |z| z.cos()),
        ("cos", |z| z.cos(), |z| -z.sin()),
        ("tanh", |z| z.tanh(), |z| c(1.0, 0.0) - z.tanh() * z.tanh()),
        ("sqrt", |z| z.sqrt(), |z| c(0.5, 0.0) / z.sqrt()),
        ("recip", |z| z.recip(), |z| -c(1.0, 0.0) / (z * z)),
        ("square", |z| z.square(), |z| z * 2.0),
        (
            "z^2.5",
            |z| z.pow(&z.scalar_like(2.5)),
            |z| z.powf(1.5) * 2.5,
        ),
    ];
    for (name, h, d) in cases {
        let g = rune::grad(|z: &Tensor| h(z).real().sum_all(), &z);
        let want: Vec<C> = v.iter().map(|&z| d(z)).collect();
        assert_all_close(&g, &want, 1e-12, name);
        // jvp: h'(z) t for a complex tangent
        let t = zs(&samples(5, 2));
        let (p, tan) = rune::jvp(h, &z, &t);
        assert_all_close(
            &p,
            &v.iter().map(|&z| h_ref(name, z)).collect::<Vec<_>>(),
            1e-13,
            name,
        );
        let tv = t.to_vec::<C>();
        let want: Vec<C> = v.iter().zip(&tv).map(|(&z, &t)| d(z) * t).collect();
        assert_all_close(&tan, &want, 1e-12, &format!("jvp {name}"));
    }
}

fn h_ref(name: &str, z: C) -> C {
    match name {
        "exp" => z.exp(),
        "log" => z.ln(),
        "sin" => z.sin(),
        "cos" => z.cos(),
        "tanh" => z.tanh(),
        "sqrt" => z.sqrt(),
        "recip" => c(1.0, 0.0) / z,
        "square" => z * z,
        "z^2.5" => z.powc(c(2.5, 0.0)),
        _ => unreachable!(),
    }
}

#[test]
fn grad_through_binary_ops_reductions_and_products() {
    let a = samples(4, 3);
    let b = samples(4, 4);
    let (ta, tb) = (zs(&a), zs(&b));
    // real(sum(a * b)): ga = b, gb = a
    let (ga, gb) = rune::grad(
        |(x, y): &(Tensor, Tensor)| (x * y).sum_all().real(),
        &(ta.clone(), tb.clone()),
    );
    assert_all_close(&ga, &b, 0.0, "mul lhs");
    assert_all_close(&gb, &a, 0.0, "mul rhs");
    // real(sum(a / b)): ga = 1/b, gb = -a/b²
    let (ga, gb) = rune::grad(
        |(x, y): &(Tensor, Tensor)| (x / y).sum_all().real(),
        &(ta.clone(), tb.clone()),
    );
    let one = c(1.0, 0.0);
    assert_all_close(
        &ga,
        &b.iter().map(|&y| one / y).collect::<Vec<_>>(),
        1e-14,
        "div lhs",
    );
    assert_all_close(
        &gb,
        &a.iter()
            .zip(&b)
            .map(|(&x, &y)| -x / (y * y))
            .collect::<Vec<_>>(),
        1e-14,
        "div rhs",
    );
    // real(sum(a ^ b)), complex exponent: ga = b a^(b-1), gb = a^b log a
    let (ga, gb) = rune::grad(
        |(x, y): &(Tensor, Tensor)| x.pow(y).sum_all().real(),
        &(ta.clone(), tb.clone()),
    );
    assert_all_close(
        &ga,
        &a.iter()
            .zip(&b)
            .map(|(&x, &y)| y * x.powc(y - one))
            .collect::<Vec<_>>(),
        1e-12,
        "pow base",
    );
    assert_all_close(
        &gb,
        &a.iter()
            .zip(&b)
            .map(|(&x, &y)| x.powc(y) * x.ln())
            .collect::<Vec<_>>(),
        1e-12,
        "pow exponent",
    );
    // prod: the product of the others
    let g = rune::grad(|x: &Tensor| x.prod(&[0], false).real(), &ta);
    let want: Vec<C> = (0..4)
        .map(|k| (0..4).filter(|&j| j != k).fold(one, |p, j| p * a[j]))
        .collect();
    assert_all_close(&g, &want, 1e-14, "prod");
    // mean: w / n
    let w = c(0.25, -1.5);
    let g = rune::grad(
        |x: &Tensor| (x.mean_all() * zs(&[w]).reshape(&[])).real(),
        &ta,
    );
    assert_all_close(&g, &[w / 4.0; 4], 1e-15, "mean");
    // cumsum: real(sum(cumsum(x) * w)) -> reverse cumulative sums of w
    let wv = samples(4, 5);
    let g = rune::grad(|x: &Tensor| (x.cumsum(0) * zs(&wv)).sum_all().real(), &ta);
    let want: Vec<C> = (0..4).map(|k| wv[k..].iter().sum()).collect();
    assert_all_close(&g, &want, 1e-14, "cumsum");
    // where: the chosen branch's cotangent
    let cond = Tensor::from_slice(&[true, false, true, false], &[4]);
    let g = rune::grad(
        |x: &Tensor| {
            Tensor::where_(&cond, x, &x.conj()).real().sum_all()
                + Tensor::where_(&cond, x, &x.conj()).imag().sum_all()
        },
        &ta,
    );
    // real + imag of x: 1 - i; of conj(x): 1 + i
    assert_all_close(
        &g,
        &[c(1.0, -1.0), c(1.0, 1.0), c(1.0, -1.0), c(1.0, 1.0)],
        0.0,
        "where",
    );
    // take (gather): the cotangent scattered back, repeated indices adding
    let idx = Tensor::from_slice(&[3i32, 0, 3], &[3]);
    let wt = samples(3, 6);
    let g = rune::grad(
        |x: &Tensor| (x.take(&idx, 0) * zs(&wt)).sum_all().real(),
        &ta,
    );
    assert_all_close(
        &g,
        &[wt[1], c(0.0, 0.0), c(0.0, 0.0), wt[0] + wt[2]],
        1e-15,
        "take",
    );
}

#[test]
fn grad_through_matmul_has_no_conjugation() {
    // f(A) = sum |A x|² with y = A x: grad_A[i, j] = 2 conj(y_i) x_j
    let (m, n) = (3, 4);
    let av = samples(m * n, 7);
    let xv = samples(n, 8);
    let a = Tensor::from_slice(&av, &[m, n]);
    let x = zs(&xv);
    let g = rune::grad(|a: &Tensor| a.matmul(&x).abs().square().sum_all(), &a);
    let y: Vec<C> = (0..m)
        .map(|i| (0..n).map(|j| av[i * n + j] * xv[j]).sum())
        .collect();
    let want: Vec<C> = (0..m * n)
        .map(|k| y[k / n].conj() * 2.0 * xv[k % n])
        .collect();
    assert_all_close(&g, &want, 1e-13, "matmul");
    // and with respect to x: grad_x[j] = sum_i 2 conj(y_i) A[i, j]
    let g = rune::grad(|x: &Tensor| a.matmul(x).abs().square().sum_all(), &x);
    let want: Vec<C> = (0..n)
        .map(|j| (0..m).map(|i| y[i].conj() * 2.0 * av[i * n + j]).sum())
        .collect();
    assert_all_close(&g, &want, 1e-13, "matmul rhs");
}

#[test]
fn check_grads_passes_on_complex_leaves() {
    let z = zs(&samples(4, 9));
    let w = zs(&samples(4, 10));
    type F = fn(&Tensor) -> Tensor;
    let fs: [(&str, F); 12] = [
        ("exp", |z| z.exp().real().sum_all()),
        ("log", |z| z.log().imag().sum_all()),
        ("sin", |z| (z.sin() * z).real().sum_all()),
        ("abs", |z| z.abs().sum_all()),
        ("angle", |z| z.angle().sum_all()),
        ("sqrt", |z| z.sqrt().abs().sum_all()),
        ("mix", |z| {
            (z.real() * z.imag() + z.conj().exp().imag()).sum_all()
        }),
        ("pow", |z| z.pow(&(z * 0.5)).real().sum_all()),
        ("prod", |z| z.prod(&[0], false).abs()),
        ("mean", |z| z.mean_all().abs()),
        ("tanh", |z| z.tanh().abs().square().sum_all()),
        // a complex objective: checked as its real and imaginary parts
        ("complex out", |z| (z.exp() * z).sum_all()),
    ];
    for (name, f) in fs {
        rune::check_grads(f, &z).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    rune::check_grads(
        |(a, b): &(Tensor, Tensor)| (a / b).abs().sum_all() + (a * b).real().sum_all(),
        &(z.clone(), w.clone()),
    )
    .unwrap();
    let m = Tensor::from_slice(&samples(6, 11), &[2, 3]);
    rune::check_grads(
        |(m, v): &(Tensor, Tensor)| m.matmul(v).abs().square().sum_all(),
        &(m.clone(), Tensor::from_slice(&samples(3, 12), &[3, 1])),
    )
    .unwrap();
    // a real leaf feeding complex operations
    let x = Tensor::from_slice(&[0.4f64, -1.1, 2.0], &[3]);
    rune::check_grads(
        |x: &Tensor| Tensor::complex(x, &x.sin()).exp().abs().sum_all(),
        &x,
    )
    .unwrap();
}

#[test]
fn check_grads_fails_for_a_wrong_complex_rule() {
    let z = zs(&samples(3, 13));
    // The correct rule for h(z) = z * z: ct * 2 z (passes).
    let good = |z: &Tensor| {
        rune::custom_vjp(
            |z: &Tensor| (z * z, z.clone()),
            |z: &Tensor, ct: &Tensor| ct * z * 2.0,
            z,
        )
        .real()
        .sum_all()
    };
    rune::check_grads(good, &z).unwrap();
    // Conjugating (the other convention) is wrong for JAX's check.
    let wrong = |z: &Tensor| {
        rune::custom_vjp(
            |z: &Tensor| (z * z, z.clone()),
            |z: &Tensor, ct: &Tensor| (ct * z * 2.0).conj(),
            z,
        )
        .real()
        .sum_all()
    };
    let err = rune::check_grads(wrong, &z).expect_err("a conjugated rule must fail");
    assert!(err.contains("check_grads"), "{err}");
}

#[test]
fn vmap_of_complex_operations_equals_the_loop() {
    let (b, n) = (3, 4);
    let zv = samples(b * n, 14);
    let z = Tensor::from_slice(&zv, &[b, n]);
    let m = Tensor::from_slice(&samples(n * 2, 15), &[n, 2]);
    let f = |z: &Tensor| {
        let p = Tensor::complex(&z.real().exp(), &z.imag());
        let q = (p * z.conj()).matmul(&m);
        q.sum(&[0], false)
            + z.abs().sum_all().cast(DType::C128)
            + z.angle().mean_all().cast(DType::C128)
    };
    let batched = rune::vmap(f, &z);
    for i in 0..b {
        let want = f(&z.get(i)).to_vec::<C>();
        assert_all_close(&batched.get(i), &want, 1e-13, &format!("lane {i}"));
    }
    // vmap of grad over complex points: per-lane 2 conj(z)
    let g = rune::vmap(
        |z: &Tensor| rune::grad(|z: &Tensor| z.abs().square().sum_all(), z),
        &z,
    );
    let want: Vec<C> = zv.iter().map(|z| z.conj() * 2.0).collect();
    assert_all_close(&g.reshape(&[b * n]), &want, 1e-14, "vmap grad");
    // vmap of a complex product with the rhs batched only
    let ms = Tensor::from_slice(&samples(b * n * 2, 16), &[b, n, 2]);
    let out = rune::vmap_with(
        |(z, m): &(Tensor, Tensor)| z.matmul(m),
        &(z.get(0), ms.clone()),
        rune::VmapOpts {
            in_axes: Some(vec![None, Some(0)]),
            out_axis: 0,
        },
    );
    for i in 0..b {
        assert_all_close(
            &out.get(i),
            &z.get(0).matmul(&ms.get(i)).to_vec::<C>(),
            1e-14,
            "rhs batched",
        );
    }
}
