//! Gathers compiled into kernels (issue 44): `take`, `take_along_axis`,
//! `gather` and indexing by a tensor under `jit` read `x[idx[p]]` inside a
//! fused kernel when the indices are an input or a captured constant (seen
//! through views), fused with what consumes the result. Every program is
//! compared with the same function run eagerly: bit for bit where it is
//! elementwise and movement work, within a bound where a fused reduction
//! sums in f64 (see `jit.rs`).
//!
//! Out-of-range indices raise eager's panic before any kernel runs, on
//! every call, whether the indices are inputs or constants, and inside a
//! staged loop.

use rune::prelude::*;
mod common;
use common::panic_message;
#[path = "common/bits.rs"]
mod bits;
use bits::bits;

/// Deterministic data in [-1, 1) (a 64-bit LCG, top bits).
fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn opts() -> tolk::Options {
    tolk::Options {
        use_cache: false,
        stream_min_bytes: None,
        quick_first: false,
    }
}

/// `f` compiled (no cache), with the names of the steps it runs as
/// library steps (what did not become a kernel).
fn compiled<P: Ptree>(f: impl Fn(&P) -> Vec<Tensor>, p: &P) -> tolk::Compiled {
    tolk::compile_with(rune::make_graph(|p: &P| f(p), p), &opts()).expect("compiles")
}

/// Runs `f` compiled and eagerly on `inputs`; asserts the results' bits
/// equal and that no gather is left as a library step.
fn same_as_eager(what: &str, f: &dyn Fn(&[Tensor]) -> Vec<Tensor>, inputs: &[Tensor]) {
    let c = compiled(|p: &Vec<Tensor>| f(p), &inputs.to_vec());
    let libs = c.program.library_steps();
    assert!(
        !libs.iter().any(|s| s == "gather"),
        "{what}: a gather stayed a library step: {libs:?}"
    );
    let got = c.program.run(inputs);
    let want = f(inputs);
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.shape(), w.shape(), "{what}");
        assert_eq!(bits(g), bits(w), "{what}: compiled differs from eager");
    }
}

#[test]
fn take_by_input_indices_fuses_and_equals_eager() {
    let x = Tensor::from_vec(data(5 * 7, 1), &[5, 7]);
    // Both bounds, negative ones, repeats; i32 and i64.
    let i32s = Tensor::from_slice(&[0i32, 4, -1, -5, 2, 2, 0], &[7]);
    let i64s = Tensor::from_slice(&[6i64, 0, -7, 3, 3, -1], &[2, 3]);
    same_as_eager(
        "take axis 0, consumer fused",
        &|p| vec![(p[0].take(&p[1], 0) * 2.0 + 1.0).tanh()],
        &[x.clone(), i32s.clone()],
    );
    same_as_eager(
        "take axis 1 by a 2-D index",
        &|p| vec![p[0].take(&p[1], 1).exp()],
        &[x.clone(), i64s.clone()],
    );
    same_as_eager(
        "take of a view (transposed, sliced)",
        &|p| {
            let xt = p[0]
                .transpose()
                .slice(&[Slice::new(1, Some(6), 1), Slice::all()]);
            vec![xt.take(&p[1], 1) - &xt.take(&p[1], 1).sin()]
        },
        &[x.clone(), i32s.clone()],
    );
    same_as_eager(
        "take of a computed value (a buffer first)",
        &|p| vec![p[0].sin().take(&p[1], 0) * 3.0],
        &[x.clone(), i32s.clone()],
    );
    same_as_eager(
        "a scalar index",
        &|p| vec![p[0].take(&p[1], 1) + 1.0],
        &[x.clone(), Tensor::scalar(-2i64)],
    );
    same_as_eager(
        "an empty index tensor",
        &|p| vec![p[0].take(&p[1], 0) + 1.0],
        &[x.clone(), Tensor::zeros(&[0], DType::I32)],
    );
    same_as_eager(
        "take_along_axis and torch's gather",
        &|p| vec![p[0].take_along_axis(&p[1], 1), p[0].gather(1, &p[2]) * 0.5],
        &[
            x.clone(),
            Tensor::from_slice(&[0i32, 6, 6, -1, 3, 2, 1, 0, 5, 4], &[5, 2]),
            Tensor::from_slice(&[3i64, -7, 0, 6, 1, 1, 2, 5, 4], &[3, 3]),
        ],
    );
    // f64, an integer dtype and bool through the same kernels.
    let xd = Tensor::from_vec(data(12, 2).iter().map(|&v| v as f64).collect(), &[12]);
    let xi = Tensor::from_vec((0..12).map(|v| v * 7 - 30).collect::<Vec<i32>>(), &[12]);
    let idx = Tensor::from_slice(&[11i32, 0, -12, 5, 5], &[5]);
    same_as_eager(
        "f64, i32 and bool data",
        &|p| {
            vec![
                p[0].take(&p[2], 0).cos(),
                p[1].take(&p[2], 0) * &p[1].take(&p[2], 0),
                p[1].greater(&p[1].scalar_like(0.0)).take(&p[2], 0),
            ]
        },
        &[xd, xi, idx],
    );
}

#[test]
fn take_by_captured_indices_fuses_and_equals_eager() {
    let x = Tensor::from_vec(data(64, 3), &[64]);
    let right = Tensor::from_vec((0..64).map(|i| (i + 1) % 64).collect::<Vec<i32>>(), &[64]);
    let left = Tensor::from_vec((0..64).map(|i| i as i64 - 1).collect::<Vec<i64>>(), &[64]);
    let lap = |x: &Tensor| x.take(&right, 0) - x * 2.0 + x.take(&left, 0);
    let c = compiled(|x: &Tensor| vec![lap(x)], &x);
    assert!(
        c.program.library_steps().is_empty(),
        "{:?}",
        c.program.library_steps()
    );
    // One kernel: the two gathers and the arithmetic fused.
    assert_eq!(c.program.num_kernels(), 1);
    let got = c.program.run(&[x.clone()]);
    assert_eq!(bits(&got[0]), bits(&lap(&x)));
    // The same through rune::jit, called twice.
    let f = jit(|x: &Tensor| lap(x));
    for _ in 0..2 {
        assert_eq!(bits(&f.call(&x)), bits(&lap(&x)));
    }
}

#[test]
fn reduction_over_gathered_neighbours_is_one_kernel() {
    // W16's coupling: sum_j x[nbr[:, j]] - 4x, with nbr an input.
    let n = 256;
    let x = Tensor::from_vec(data(n, 4), &[n]);
    let nbr: Vec<i32> = (0..n * 4).map(|k| ((k * 37 + 11) % n) as i32).collect();
    let nbr = Tensor::from_vec(nbr, &[n, 4]);
    let f = |p: &Vec<Tensor>| vec![p[0].take(&p[1], 0).sum(&[1], false) - &p[0] * 4.0];
    let c = compiled(f, &vec![x.clone(), nbr.clone()]);
    assert!(
        c.program.library_steps().is_empty(),
        "{:?}",
        c.program.library_steps()
    );
    let got = &c.program.run(&[x.clone(), nbr.clone()])[0];
    // The fused sum accumulates in f64: within a rounding of the eager sum.
    let want = &f(&vec![x, nbr])[0];
    for (g, w) in got.to_vec::<f32>().iter().zip(want.to_vec::<f32>()) {
        assert!(
            (g - w).abs() <= 4.0 * f32::EPSILON * (1.0 + w.abs()),
            "{g} vs {w}"
        );
    }
}

#[test]
fn computed_indices_stay_a_library_gather() {
    // argmax's result is computed by the program: checked by nx's kernel.
    let x = Tensor::from_vec(data(6 * 5, 5), &[6, 5]);
    let f = |x: &Tensor| {
        let i = x.argmax(1, true);
        vec![x.take_along_axis(&i, 1) * 2.0]
    };
    let c = compiled(f, &x);
    assert!(c.program.library_steps().iter().any(|s| s == "gather"));
    assert_eq!(bits(&c.program.run(&[x.clone()])[0]), bits(&f(&x)[0]));
}

#[test]
fn out_of_range_indices_raise_eagers_error_on_every_call() {
    let x = Tensor::from_vec(data(10, 6), &[10]);
    let f = jit(|(x, i): &(Tensor, Tensor)| x.take(i, 0) * 2.0);
    let ok = Tensor::from_slice(&[9i32, -10, 0], &[3]);
    assert_eq!(
        bits(&f.call(&(x.clone(), ok.clone()))),
        bits(&(x.take(&ok, 0) * 2.0))
    );
    for bad in [[1i32, 10, 11], [0, 3, -11]] {
        let bad = Tensor::from_slice(&bad, &[3]);
        let eager = panic_message(|| {
            let _ = x.take(&bad, 0) * 2.0;
        });
        let compiled = panic_message(|| {
            let _ = f.call(&(x.clone(), bad.clone()));
        });
        assert_eq!(compiled, eager);
        assert!(compiled.contains("out of bounds"), "{compiled}");
    }
    // Still fine afterwards.
    assert_eq!(
        bits(&f.call(&(x.clone(), ok.clone()))),
        bits(&(x.take(&ok, 0) * 2.0))
    );

    // Captured indices: checked when compiled, raised at every call.
    let bad = Tensor::from_slice(&[2i64, -11], &[2]);
    let eager = panic_message(|| {
        let _ = x.take(&bad, 0);
    });
    let g = jit(|x: &Tensor| x.take(&bad, 0) + 1.0);
    for _ in 0..2 {
        assert_eq!(panic_message(|| drop(g.call(&x))), eager);
    }
}

#[test]
fn gathers_in_a_staged_loop_equal_the_eager_loop() {
    // W16's class: oscillators coupled through x[nbr] under scan, with the
    // indices captured (a loop const) and, second, carried in the state.
    let n = 32;
    let nbr: Vec<i32> = (0..n * 3)
        .map(|k| ((k * 13 + 5) % n) as i32 - (k % 2) as i32 * n as i32)
        .collect();
    let nbr = Tensor::from_vec(nbr, &[n, 3]);
    let x0 = Tensor::from_vec(data(n, 7), &[n]);
    let steps = Tensor::zeros(&[20, 1], DType::F32);
    let step = |x: &Tensor, nbr: &Tensor| {
        let coupling = x.take(nbr, 0).sum(&[1], false) - x * 3.0;
        x + (x.sin() * -0.1 + coupling * 0.05) * 0.5
    };
    let run = |x0: &Tensor| {
        let (x, ()) = rune::scan(|x: &Tensor, _: &Tensor| (step(x, &nbr), ()), x0, &steps);
        x.square().sum_all()
    };
    let close = |a: &Tensor, b: &Tensor, what: &str| {
        for (g, w) in a.to_vec::<f32>().iter().zip(b.to_vec::<f32>()) {
            assert!(
                (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                "{what}: {g} vs {w}"
            );
        }
    };
    close(&jit(run).call(&x0), &run(&x0), "forward");
    let g = |x0: &Tensor| grad(run, x0);
    close(&jit(g).call(&x0), &g(&x0), "grad");

    // Indices carried (a per-step input): checked at every step.
    let carried = |(x0, nbr): &(Tensor, Tensor)| {
        let ((x, _), ()) = rune::scan(
            |(x, i): &(Tensor, Tensor), _: &Tensor| ((step(x, i), i.clone()), ()),
            &(x0.clone(), nbr.clone()),
            &steps,
        );
        x
    };
    close(
        &jit(carried).call(&(x0.clone(), nbr.clone())),
        &carried(&(x0.clone(), nbr.clone())),
        "carried indices",
    );
    let bad = &nbr + (n * 2) as f64;
    let eager = panic_message(|| drop(carried(&(x0.clone(), bad.clone()))));
    let compiled = panic_message(|| drop(jit(carried).call(&(x0.clone(), bad.clone()))));
    assert_eq!(compiled, eager);
}

#[test]
fn gathers_under_vmap_and_grad_under_jit_equal_eager() {
    let x = Tensor::from_vec(data(4 * 9, 8), &[4, 9]);
    let idx = Tensor::from_slice(&[8i32, 0, 3, 3, -1], &[5]);
    let per_row = |r: &Tensor| r.take(&idx, 0).tanh();
    let v = |x: &Tensor| vmap(per_row, x);
    assert_eq!(bits(&jit(v).call(&x)), bits(&v(&x)));
    let loss = |x: &Tensor| (x.take(&idx, 1) * x.take(&idx, 1).cos()).sum_all();
    let g = |x: &Tensor| grad(loss, x);
    let (got, want) = (jit(g).call(&x), g(&x));
    for (a, b) in got.to_vec::<f32>().iter().zip(want.to_vec::<f32>()) {
        assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} vs {b}");
    }
}

/// Runs `f` compiled and eagerly; asserts equal bits and that no
/// scatter-add is left as a library step.
fn scatter_same_as_eager(what: &str, f: &dyn Fn(&[Tensor]) -> Vec<Tensor>, inputs: &[Tensor]) {
    let c = compiled(|p: &Vec<Tensor>| f(p), &inputs.to_vec());
    let libs = c.program.library_steps();
    assert!(
        !libs.iter().any(|s| s == "scatter_add" || s == "gather"),
        "{what}: left as library steps: {libs:?}"
    );
    for _ in 0..2 {
        let got = c.program.run(inputs);
        for (g, w) in got.iter().zip(&f(inputs)) {
            assert_eq!(g.shape(), w.shape(), "{what}");
            assert_eq!(bits(g), bits(w), "{what}: compiled differs from eager");
        }
    }
}

#[test]
fn scatter_add_compiles_to_a_kernel_equal_to_eager() {
    let x = Tensor::from_vec(data(6 * 4, 9), &[6, 4]);
    // Repeated destinations (added in order), both bounds, negatives.
    let idx = Tensor::from_slice(&[0i32, 5, -1, 2, 2, -6, 0, 0], &[8]);
    let u = Tensor::from_vec(data(8 * 4, 10), &[8, 4]);
    let rows = |i: &Tensor| i.reshape(&[8, 1]).broadcast_to(&[8, 4]);
    scatter_same_as_eager(
        "rows into a copy of x, updates computed",
        &|p| vec![p[0].scatter_add(0, &rows(&p[1]), &(p[2].sin() * 3.0))],
        &[x.clone(), idx.clone(), u.clone()],
    );
    scatter_same_as_eager(
        "segment sums into zeros (f32, f64, i32)",
        &|p| {
            let z = Tensor::zeros(&[6, 4], DType::F32);
            let z64 = Tensor::zeros(&[6, 4], DType::F64);
            let zi = Tensor::zeros(&[6, 4], DType::I32);
            vec![
                z.scatter_add(0, &rows(&p[1]), &p[2]),
                z64.scatter_add(0, &rows(&p[1]), &p[2].cast(DType::F64).exp()),
                zi.scatter_add(0, &rows(&p[1]), &(&p[2] * 100.0).cast(DType::I32)),
            ]
        },
        &[x.clone(), idx.clone(), u.clone()],
    );
    scatter_same_as_eager(
        "along axis 1, f16 and bf16",
        &|p| {
            let i = p[1].reshape(&[1, 8]).broadcast_to(&[6, 8]);
            let upd = p[0].take(&Tensor::from_slice(&[0i32, 1, 2, 3, 3, 2, 1, 0], &[8]), 1);
            vec![
                p[0].cast(DType::F16)
                    .scatter_add(1, &i, &upd.cast(DType::F16)),
                p[0].cast(DType::BF16)
                    .scatter_add(1, &i, &upd.cast(DType::BF16)),
            ]
        },
        &[
            x.clone(),
            Tensor::from_slice(&[0i32, 3, 1, 2, 2, 1, -4, 3], &[8]),
        ],
    );
    scatter_same_as_eager(
        "gather then scatter (message passing), no library step",
        &|p| {
            let src = p[1].reshape(&[8, 1]).broadcast_to(&[8, 4]);
            let msgs = p[0].take_along_axis(&src, 0) * 0.5;
            let z = Tensor::zeros(&[6, 4], DType::F32);
            vec![z.scatter_add(0, &rows(&p[2]), &msgs).tanh()]
        },
        &[
            x.clone(),
            idx.clone(),
            Tensor::from_slice(&[5i64, 4, 3, 2, 1, 0, -1, -1], &[8]),
        ],
    );
    scatter_same_as_eager(
        "empty updates",
        &|p| vec![p[0].scatter_add(0, &p[1], &p[2]) + 1.0],
        &[
            x.clone(),
            Tensor::zeros(&[0, 4], DType::I32),
            Tensor::zeros(&[0, 4], DType::F32),
        ],
    );
    // Empty captured indices: no update lands anywhere (a copy of x; it
    // once became a gather reading the empty updates at index 0).
    let none = Tensor::zeros(&[0, 4], DType::I32);
    scatter_same_as_eager(
        "empty captured indices",
        &|p| vec![p[0].scatter_add(0, &none, &p[1]) * 2.0],
        &[x.clone(), Tensor::zeros(&[0, 4], DType::F32)],
    );
    // Out of range: eager's message, before anything runs.
    let f = jit(|(x, i, u): &(Tensor, Tensor, Tensor)| x.scatter_add(0, i, u));
    let bad = Tensor::from_slice(&[0i32, 6, 1, 1], &[4, 1]).broadcast_to(&[4, 4]);
    let u4 = Tensor::ones(&[4, 4], DType::F32);
    let eager = panic_message(|| drop(x.scatter_add(0, &bad, &u4)));
    assert!(eager.contains("scatter_add"), "{eager}");
    assert_eq!(
        panic_message(|| drop(f.call(&(x.clone(), bad.clone(), u4.clone())))),
        eager
    );
}

#[test]
fn the_gradient_of_a_gather_is_a_scatter_kernel() {
    let x = Tensor::from_vec(data(10 * 3, 11), &[10, 3]);
    let idx = Tensor::from_slice(&[9i32, 0, 3, 3, -1, 3, 7], &[7]);
    let w = Tensor::from_vec(data(7 * 3, 12), &[7, 3]);
    let g = |(x, i): &(Tensor, Tensor)| grad(|x: &Tensor| (x.take(i, 0) * &w).sum_all(), x);
    let p = (x.clone(), idx.clone());
    let c = compiled(|p: &(Tensor, Tensor)| vec![g(p)], &p);
    let libs = c.program.library_steps();
    assert!(!libs.iter().any(|s| s == "scatter_add"), "{libs:?}");
    assert_eq!(
        bits(&c.program.run(&[x.clone(), idx.clone()])[0]),
        bits(&g(&p))
    );
    assert_eq!(bits(&jit(g).call(&p)), bits(&g(&p)));
}

#[test]
fn scatters_by_captured_injective_indices_become_gathers() {
    let has_scatter = |c: &tolk::Compiled| {
        c.program
            .graph()
            .eqns
            .iter()
            .any(|e| e.name() == "scatter_add")
    };
    // x holds -0.0 where no update lands (-0.0 + 0.0 would be +0.0).
    let mut xv = data(6 * 3, 13);
    xv[4] = -0.0;
    xv[16] = -0.0;
    let x = Tensor::from_vec(xv, &[6, 3]);
    let u = Tensor::from_vec(data(4 * 3, 14), &[4, 3]);
    let cases: [(&str, Vec<i32>, bool); 3] = [
        (
            "a partial injective map, negatives",
            vec![2, -1, 0, 3],
            false,
        ),
        (
            "repeated destinations stay a scatter",
            vec![2, 5, 2, 0],
            true,
        ),
        ("a full permutation", vec![5, 0, 4, 1], false),
    ];
    for (what, idx, scatter) in cases {
        let (u, n) = if what == "a full permutation" {
            let u6 = Tensor::from_vec(data(6 * 3, 15), &[6, 3]);
            (u6, 6)
        } else {
            (u.clone(), 4)
        };
        let idx: Vec<i32> = if n == 6 { vec![5, 0, 4, 1, 3, 2] } else { idx };
        let i = Tensor::from_vec(idx, &[n, 1]).broadcast_to(&[n, 3]);
        let f = |(x, u): &(Tensor, Tensor)| vec![x.scatter_add(0, &i, &(u * 2.0))];
        let p = (x.clone(), u.clone());
        let c = compiled(f, &p);
        assert_eq!(has_scatter(&c), scatter, "{what}");
        assert_eq!(
            bits(&c.program.run(&[x.clone(), u.clone()])[0]),
            bits(&f(&p)[0]),
            "{what}"
        );
    }
    // W12's ring written with `take`: the gradient's scatters are gathers.
    let m = 16;
    let right = Tensor::from_vec(
        (0..m).map(|i| ((i + 1) % m) as i32).collect::<Vec<_>>(),
        &[m],
    );
    let left = Tensor::from_vec(
        (0..m).map(|i| ((i + m - 1) % m) as i32).collect::<Vec<_>>(),
        &[m],
    );
    let xs = Tensor::from_vec(data(m, 16), &[m]);
    let g = |x: &Tensor| {
        grad(
            |x: &Tensor| (x.take(&right, 0) * x - x.take(&left, 0).sin()).sum_all(),
            x,
        )
    };
    let c = compiled(|x: &Tensor| vec![g(x)], &xs);
    assert!(!has_scatter(&c));
    assert_eq!(bits(&c.program.run(&[xs.clone()])[0]), bits(&g(&xs)));
}

#[test]
fn wide_scatters_split_across_threads_with_eagers_bits() {
    // Segment sums of 2,000 rows of 64 features into 300 segments (every
    // segment hit several times): the kernel loops over blocks of
    // features outermost, one block range per thread, each setting the
    // elements its blocks add into.
    let (e, f, n) = (2000, 64, 300);
    let ids: Vec<i32> = (0..e)
        .map(|k| ((k * 7919) % n) as i32 - (k % 3 == 0) as i32 * n as i32)
        .collect();
    let ids = Tensor::from_vec(ids, &[e, 1]);
    let data_t = Tensor::from_vec(data(e * f, 17), &[e, f]);
    let x = Tensor::from_vec(data(n * f, 18), &[n, f]);
    let seg = |(x, ids, d): &(Tensor, Tensor, Tensor)| {
        let i = ids.broadcast_to(&[e, f]);
        vec![
            Tensor::zeros(&[n, f], DType::F32).scatter_add(0, &i, &d.exp()),
            x.scatter_add(0, &i, d),
        ]
    };
    let p = (x, ids, data_t);
    let c = compiled(seg, &p);
    assert!(c
        .kernel_sources
        .iter()
        .any(|(_, src)| src.contains("const int64_t j = i0 * (")));
    for _ in 0..3 {
        let got = c.program.run(&[p.0.clone(), p.1.clone(), p.2.clone()]);
        for (g, w) in got.iter().zip(seg(&p)) {
            assert_eq!(bits(g), bits(&w));
        }
    }
}

#[test]
fn gathers_of_captured_runs_become_slices_and_rotations() {
    let names = |c: &tolk::Compiled| -> Vec<String> {
        c.program.graph().eqns.iter().map(|e| e.name()).collect()
    };
    let x = Tensor::from_vec(data(4 * 10, 19), &[4, 10]);
    let cases: [(&str, Vec<i64>, bool); 4] = [
        ("a run inside the axis", vec![3, 4, 5, 6], false),
        (
            "a rotation (wraps, a negative index)",
            vec![7, 8, -1, 0, 1, 2],
            false,
        ),
        (
            "a whole rotation",
            (0..10).map(|i| (i + 4) % 10).collect(),
            false,
        ),
        ("not a run: stays a gather", vec![3, 5, 4], true),
    ];
    for (what, idx, gather) in cases {
        let i = Tensor::from_vec(idx.clone(), &[idx.len()]);
        let f = |x: &Tensor| {
            vec![
                x.take(&i, 1) * 2.0,
                x.take(&i.reshape(&[1, idx.len()]), 1).exp(),
            ]
        };
        let c = compiled(f, &x);
        assert_eq!(
            names(&c).iter().any(|n| n == "gather"),
            gather,
            "{what}: {:?}",
            names(&c)
        );
        for (g, w) in c.program.run(&[x.clone()]).iter().zip(f(&x)) {
            assert_eq!(g.shape(), w.shape(), "{what}");
            assert_eq!(bits(g), bits(&w), "{what}");
        }
    }
}
