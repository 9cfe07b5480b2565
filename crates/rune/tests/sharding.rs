//! `rune::sharding`: meshes, specs, `shard_map` and each collective against
//! plain loops over the devices' blocks; the tensor-parallel MLP against
//! one device (values and `grad` outside, eagerly and under `jit`);
//! replication checking; per-device keys.

use rune::prelude::*;
use rune::rng;
use rune::sharding::{self, Mesh, ShardMapOpts, Spec};

mod common;
use common::panic_message;

fn mesh1(n: usize) -> Mesh {
    let devices: Vec<String> = (1..=n).map(|i| format!("CPU:{i}")).collect();
    Mesh::new(&devices, &[("i", n)])
}

fn mesh22() -> Mesh {
    Mesh::new(
        &["CPU:1", "CPU:2", "CPU:3", "CPU:4"],
        &[("data", 2), ("model", 2)],
    )
}

fn opts(ins: Vec<Spec>, outs: Vec<Spec>) -> ShardMapOpts {
    ShardMapOpts {
        in_specs: ins,
        out_specs: outs,
        ..Default::default()
    }
}

fn split(name: &str) -> Spec {
    Spec::new(&[Some(name)])
}

fn arange(n: usize) -> Vec<f32> {
    (0..n).map(|i| (i * 7 % 11) as f32 - 3.0).collect()
}

#[test]
fn a_mesh_checks_its_devices_and_axes() {
    let m = mesh22();
    assert_eq!(m.shape(), vec![2, 2]);
    assert_eq!(m.axis_names(), vec!["data", "model"]);
    assert_eq!(m.size(), 4);
    let msg = panic_message(|| drop(Mesh::new(&["CPU:1", "CPU:2", "CPU:3"], &[("i", 2)])));
    assert!(
        msg.contains("2 devices") && msg.contains("3 are given"),
        "{msg}"
    );
    let msg = panic_message(|| {
        drop(Mesh::new(
            &["CPU:1", "CPU:2", "CPU:3", "CPU:4"],
            &[("a", 2), ("a", 2)],
        ))
    });
    assert!(msg.contains("\"a\" is named twice"), "{msg}");
    let msg = panic_message(|| drop(Mesh::new(&["CPU:1", "CUDA:0"], &[("i", 2)])));
    assert!(msg.contains("mix backends"), "{msg}");
}

#[test]
fn psum_pmean_pmax_pmin_on_meshes_of_2_and_4_equal_loops_over_the_blocks() {
    for n in [2, 4] {
        let x = arange(4 * n);
        let xt = Tensor::from_slice(&x, &[4 * n]);
        let blocks: Vec<&[f32]> = x.chunks(4).collect();
        let want = |f: &dyn Fn(&[f32]) -> f32| -> Vec<f32> {
            (0..4)
                .map(|e| f(&blocks.iter().map(|b| b[e]).collect::<Vec<_>>()))
                .collect()
        };
        let run = |c: fn(&Tensor) -> Tensor| {
            sharding::shard_map(
                c,
                &mesh1(n),
                opts(vec![split("i")], vec![Spec::replicated()]),
            )
            .call(&xt)
            .to_vec::<f32>()
        };
        assert_eq!(run(|b| sharding::psum(b, "i")), want(&|v| v.iter().sum()));
        assert_eq!(
            run(|b| sharding::pmax(b, "i")),
            want(&|v| v.iter().cloned().fold(f32::MIN, f32::max))
        );
        assert_eq!(
            run(|b| sharding::pmin(b, "i")),
            want(&|v| v.iter().cloned().fold(f32::MAX, f32::min))
        );
        let mean = run(|b| sharding::pmean(b, "i"));
        for (m, w) in mean
            .iter()
            .zip(want(&|v| v.iter().sum::<f32>() / v.len() as f32))
        {
            assert!((m - w).abs() < 1e-6, "{m} vs {w}");
        }
    }
}

#[test]
fn psum_over_one_axis_and_both_of_a_2x2_mesh() {
    // x [4, 4]: device (i, j) holds x[2i..2i+2, 2j..2j+2].
    let x = arange(16);
    let xt = Tensor::from_slice(&x, &[4, 4]);
    let spec = Spec::new(&[Some("data"), Some("model")]);
    let block = |i: usize, j: usize, r: usize, c: usize| x[(2 * i + r) * 4 + 2 * j + c];
    let over_model = sharding::shard_map(
        |b: &Tensor| sharding::psum(b, "model"),
        &mesh22(),
        opts(vec![spec.clone()], vec![spec.clone()]),
    )
    .call(&xt)
    .to_vec::<f32>();
    for i in 0..2 {
        for j in 0..2 {
            for r in 0..2 {
                for c in 0..2 {
                    let want = block(i, 0, r, c) + block(i, 1, r, c);
                    assert_eq!(over_model[(2 * i + r) * 4 + 2 * j + c], want);
                }
            }
        }
    }
    let both = sharding::shard_map(
        |b: &Tensor| sharding::psum(b, &["data", "model"]),
        &mesh22(),
        opts(vec![spec], vec![Spec::replicated()]),
    )
    .call(&xt)
    .to_vec::<f32>();
    for r in 0..2 {
        for c in 0..2 {
            let want: f32 = (0..2)
                .flat_map(|i| (0..2).map(move |j| (i, j)))
                .map(|(i, j)| block(i, j, r, c))
                .sum();
            assert_eq!(both[r * 2 + c], want);
        }
    }
}

#[test]
fn all_gather_both_ways_and_psum_scatter_both_ways() {
    let x = arange(8);
    let xt = Tensor::from_slice(&x, &[8]);
    let m = mesh1(4);
    let tiled = sharding::shard_map(
        |b: &Tensor| sharding::all_gather(b, "i", 0, true),
        &m,
        opts(vec![split("i")], vec![Spec::replicated()]),
    )
    .call(&xt);
    assert_eq!(tiled.shape(), &[8]);
    assert_eq!(tiled.to_vec::<f32>(), x);
    let stacked = sharding::shard_map(
        |b: &Tensor| sharding::all_gather(b, "i", 0, false),
        &m,
        opts(vec![split("i")], vec![Spec::replicated()]),
    )
    .call(&xt);
    assert_eq!(stacked.shape(), &[4, 2]);
    assert_eq!(stacked.to_vec::<f32>(), x);

    // y [4, 8]: device d holds row d; the scattered sum keeps columns
    // 2k..2k+2 of the column sums on device k.
    let y = arange(32);
    let yt = Tensor::from_slice(&y, &[4, 8]);
    let col_sums: Vec<f32> = (0..8).map(|c| (0..4).map(|r| y[r * 8 + c]).sum()).collect();
    let scattered = sharding::shard_map(
        |b: &Tensor| sharding::psum_scatter(&b.reshape(&[8]), "i", 0, true),
        &m,
        opts(vec![split("i")], vec![split("i")]),
    )
    .call(&yt);
    assert_eq!(scattered.to_vec::<f32>(), col_sums);
    let untiled = sharding::shard_map(
        |b: &Tensor| sharding::psum_scatter(&b.reshape(&[4, 2]), "i", 0, false),
        &m,
        opts(vec![split("i")], vec![split("i")]),
    )
    .call(&yt);
    assert_eq!(untiled.shape(), &[8]);
    assert_eq!(untiled.to_vec::<f32>(), col_sums);
}

#[test]
fn ppermute_moves_blocks_and_non_receivers_get_zeros() {
    let xt = Tensor::from_slice(&[5.0f32, 6.0, 7.0, 8.0], &[4]);
    let shifted = sharding::shard_map(
        |b: &Tensor| sharding::ppermute(b, "i", &[(0, 1), (1, 2), (2, 3)]),
        &mesh1(4),
        opts(vec![split("i")], vec![split("i")]),
    )
    .call(&xt);
    assert_eq!(shifted.to_vec::<f32>(), vec![0.0, 5.0, 6.0, 7.0]);
    let ring = sharding::shard_map(
        |b: &Tensor| sharding::ppermute(b, "i", &[(0, 1), (1, 2), (2, 3), (3, 0)]),
        &mesh1(4),
        opts(vec![split("i")], vec![split("i")]),
    )
    .call(&xt);
    assert_eq!(ring.to_vec::<f32>(), vec![8.0, 5.0, 6.0, 7.0]);
}

/// A ring all-reduce written with `ppermute`: n - 1 shifts, each device
/// adding what arrives, equals `psum`.
#[test]
fn a_ring_all_reduce_with_ppermute_equals_psum() {
    let n = 4;
    let xt = Tensor::from_slice(&arange(4 * n), &[4 * n]);
    let ring = |b: &Tensor| {
        let perm: Vec<(usize, usize)> = (0..n).map(|i| (i, (i + 1) % n)).collect();
        let (mut acc, mut msg) = (b.clone(), b.clone());
        for _ in 1..n {
            msg = sharding::ppermute(&msg, "i", &perm);
            acc = &acc + &msg;
        }
        acc
    };
    // Every device ends with the whole sum (the ring's result is not
    // known to be replicated, so its spec names the axis: all blocks).
    let o = opts(vec![split("i")], vec![split("i")]);
    let by_ring = sharding::shard_map(ring, &mesh1(n), o.clone()).call(&xt);
    let by_psum = sharding::shard_map(|b: &Tensor| sharding::psum(b, "i"), &mesh1(n), o).call(&xt);
    assert_eq!(by_ring.to_vec::<f32>(), by_psum.to_vec::<f32>());
}

#[test]
fn all_to_all_exchanges_blocks() {
    // x [2, 2, 3]: device c holds x[c] ([2, 3]); device j receives row j
    // of every device's block, stacked in device order.
    let x = arange(12);
    let xt = Tensor::from_slice(&x, &[2, 2, 3]);
    let out = sharding::shard_map(
        |b: &Tensor| sharding::all_to_all(&b.reshape(&[2, 3]), "i", 0, 0),
        &mesh1(2),
        opts(vec![split("i")], vec![split("i")]),
    )
    .call(&xt);
    assert_eq!(out.shape(), &[4, 3]);
    let got = out.to_vec::<f32>();
    for j in 0..2 {
        for c in 0..2 {
            for k in 0..3 {
                assert_eq!(got[(j * 2 + c) * 3 + k], x[(c * 2 + j) * 3 + k]);
            }
        }
    }
}

#[test]
fn axis_index_and_axis_size_on_a_2x2_mesh() {
    let xt = Tensor::zeros(&[2, 2], DType::F32);
    let spec = Spec::new(&[Some("data"), Some("model")]);
    let f = |b: &Tensor| {
        assert_eq!(sharding::axis_size("data"), 2);
        let i = sharding::axis_index("data").cast(DType::F32);
        let j = sharding::axis_index("model").cast(DType::F32);
        b + &(&i * 10.0 + &j).reshape(&[1, 1])
    };
    let out = sharding::shard_map(f, &mesh22(), opts(vec![spec.clone()], vec![spec])).call(&xt);
    assert_eq!(out.to_vec::<f32>(), vec![0.0, 1.0, 10.0, 11.0]);
}

/// API.md's tensor-parallel MLP: columns of w1 and rows of w2 over
/// "model", the batch over "data".
fn tp_mlp(w1: &Tensor, w2: &Tensor, x: &Tensor) -> Tensor {
    let mlp = sharding::shard_map(
        |(w1, w2, x): &(Tensor, Tensor, Tensor)| {
            let h = x.matmul(w1).relu();
            sharding::psum(&h.matmul(w2), "model")
        },
        &mesh22(),
        opts(
            vec![
                Spec::new(&[None, Some("model")]),
                Spec::new(&[Some("model"), None]),
                Spec::new(&[Some("data"), None]),
            ],
            vec![Spec::new(&[Some("data"), None])],
        ),
    );
    mlp.call(&(w1.clone(), w2.clone(), x.clone()))
}

fn close(a: &Tensor, b: &Tensor, tol: f32) {
    assert_eq!(a.shape(), b.shape());
    for (x, y) in a.to_vec::<f32>().iter().zip(b.to_vec::<f32>()) {
        assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{x} vs {y}");
    }
}

#[test]
fn the_tensor_parallel_mlp_and_its_gradient_equal_one_device() {
    let k = rng::split(&rng::key(7), 3);
    let w1 = rng::normal(&k.get(0), &[8, 16], DType::F32);
    let w2 = rng::normal(&k.get(1), &[16, 8], DType::F32);
    let x = rng::normal(&k.get(2), &[6, 8], DType::F32);
    let one = |w1: &Tensor, w2: &Tensor| x.matmul(w1).relu().matmul(w2);
    close(&tp_mlp(&w1, &w2, &x), &one(&w1, &w2), 1e-5);
    let loss_tp = |w: &(Tensor, Tensor)| tp_mlp(&w.0, &w.1, &x).square().mean_all();
    let loss_one = |w: &(Tensor, Tensor)| one(&w.0, &w.1).square().mean_all();
    let w = (w1.clone(), w2.clone());
    let (g_tp, g_one) = (grad(loss_tp, &w), grad(loss_one, &w));
    close(&g_tp.0, &g_one.0, 1e-5);
    close(&g_tp.1, &g_one.1, 1e-5);
    // The same under jit, compiled once for several calls.
    let step = jit(|w: &(Tensor, Tensor)| grad(loss_tp, w));
    for _ in 0..2 {
        let g = step.call(&w);
        close(&g.0, &g_one.0, 1e-5);
        close(&g.1, &g_one.1, 1e-5);
    }
}

#[test]
fn an_output_that_varies_over_an_axis_its_spec_does_not_name_is_a_jit_error() {
    let xt = Tensor::from_slice(&[1.0f32, 2.0], &[2]);
    let sm = sharding::shard_map(
        |(x,): &(Tensor,)| x.clone(),
        &mesh1(2),
        opts(vec![split("i")], vec![Spec::replicated()]),
    );
    let e = sm.try_call(&(xt.clone(),)).err().expect("a JitError");
    assert!(
        e.message().contains("output") && e.message().contains("\"i\""),
        "{}",
        e.message()
    );
    // psum makes it the same on every device: accepted.
    let summed = sharding::shard_map(
        |x: &Tensor| sharding::psum(x, "i"),
        &mesh1(2),
        opts(vec![split("i")], vec![Spec::replicated()]),
    );
    assert_eq!(summed.call(&xt).to_vec::<f32>(), vec![3.0]);
    // check_vma false: the first device's value.
    let first = sharding::shard_map(
        |x: &Tensor| x.clone(),
        &mesh1(2),
        ShardMapOpts {
            in_specs: vec![split("i")],
            out_specs: vec![Spec::replicated()],
            check_vma: false,
        },
    );
    assert_eq!(first.call(&xt).to_vec::<f32>(), vec![1.0]);
}

#[test]
fn collectives_outside_shard_map_panic_and_unknown_axes_are_jit_errors() {
    let x = Tensor::from_slice(&[1.0f32, 2.0], &[2]);
    let msg = panic_message(|| drop(sharding::psum(&x, "i")));
    assert!(msg.contains("\"i\"") && msg.contains("shard_map"), "{msg}");
    let sm = sharding::shard_map(
        |x: &Tensor| sharding::psum(x, "model"),
        &mesh1(2),
        opts(vec![split("i")], vec![]),
    );
    let e = sm.try_call(&x).err().expect("a JitError");
    assert!(e.message().contains("model"), "{}", e.message());
}

#[test]
fn bad_specs_panic_naming_the_leaf() {
    let x = Tensor::zeros(&[3, 2], DType::F32);
    let sm = sharding::shard_map(
        |x: &Tensor| x.clone(),
        &mesh1(2),
        opts(vec![split("i")], vec![split("i")]),
    );
    let msg = panic_message(|| drop(sm.call(&x)));
    assert!(
        msg.contains("does not split") && msg.contains("dimension 0"),
        "{msg}"
    );
    let sm = sharding::shard_map(
        |x: &Tensor| x.clone(),
        &mesh1(2),
        opts(vec![split("j")], vec![]),
    );
    assert!(panic_message(|| drop(sm.call(&x))).contains("\"j\""));
    let sm = sharding::shard_map(
        |x: &Tensor| x.clone(),
        &mesh1(2),
        opts(vec![split("i"), split("i")], vec![]),
    );
    assert!(panic_message(|| drop(sm.call(&x))).contains("2 specs"));
}

#[test]
fn fold_in_index_gives_each_device_fold_in_of_its_index() {
    let key = rng::key(42);
    let keys = sharding::shard_map(
        |k: &Tensor| rng::fold_in_index(k, &sharding::axis_index("i")).reshape(&[1, 2]),
        &mesh1(4),
        opts(vec![Spec::replicated()], vec![split("i")]),
    )
    .call(&key);
    for i in 0..4 {
        assert_eq!(
            keys.get(i).to_vec::<u32>(),
            rng::fold_in(&key, i as u32).to_vec::<u32>()
        );
    }
}

/// Each collective's derivatives (forward and reverse, against finite
/// differences) through `shard_map`, and all_gather / psum_scatter as each
/// other's transposes: the vjp of one is the other.
#[test]
fn collectives_differentiate_and_all_gather_transposes_to_psum_scatter() {
    let x = Tensor::from_slice(&[0.3f64, -1.2, 2.0, 0.7, -0.4, 1.1, 0.9, -2.2], &[8]);
    let w = Tensor::from_slice(&[1.0f64, -2.0, 0.5, 3.0, -1.5, 2.5, 0.25, -0.75], &[8]);
    let m = mesh1(4);
    let through = |c: fn(&Tensor) -> Tensor, out: Spec| {
        let sm = sharding::shard_map(c, &m, opts(vec![split("i")], vec![out]));
        let w = w.clone();
        move |x: &Tensor| {
            let y = sm.call(x);
            (&y * &w.narrow(0, 0, y.numel()).reshape(y.shape())).sum_all()
        }
    };
    let cases: Vec<(&str, fn(&Tensor) -> Tensor, Spec)> = vec![
        (
            "psum",
            |b| sharding::psum(&b.square(), "i"),
            Spec::replicated(),
        ),
        (
            "pmean",
            |b| sharding::pmean(&b.sin(), "i"),
            Spec::replicated(),
        ),
        ("pmax", |b| sharding::pmax(b, "i"), Spec::replicated()),
        (
            "all_gather",
            |b| sharding::all_gather(&b.square(), "i", 0, true),
            Spec::replicated(),
        ),
        (
            "psum_scatter",
            |b| sharding::psum_scatter(&b.tile(&[2]), "i", 0, true),
            split("i"),
        ),
        (
            "ppermute",
            |b| sharding::ppermute(&b.exp(), "i", &[(0, 2), (1, 0), (3, 1)]),
            split("i"),
        ),
        (
            "all_to_all",
            |b| sharding::all_to_all(&b.reshape(&[2, 1]).square(), "i", 0, 0),
            split("i"),
        ),
    ];
    for (name, c, out) in cases {
        if name == "all_to_all" {
            continue; // its block's split dimension must have the axis's size (2 != 4): below
        }
        rune::check_grads(through(c, out), &x).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let a2a = sharding::shard_map(
        |b: &Tensor| sharding::all_to_all(&b.reshape(&[2, 2]).square(), "i", 0, 1),
        &mesh1(2),
        opts(vec![split("i")], vec![split("i")]),
    );
    rune::check_grads(
        |x: &Tensor| (&a2a.call(&x.narrow(0, 0, 8)) * &w.reshape(&[4, 2])).sum_all(),
        &x,
    )
    .unwrap_or_else(|e| panic!("all_to_all: {e}"));

    // vjp(all_gather) = psum_scatter of the cotangent, and back.
    let gather = sharding::shard_map(
        |b: &Tensor| sharding::all_gather(b, "i", 0, true),
        &m,
        opts(vec![split("i")], vec![split("i")]),
    );
    let scatter = sharding::shard_map(
        |b: &Tensor| sharding::psum_scatter(b, "i", 0, true),
        &m,
        opts(vec![split("i")], vec![split("i")]),
    );
    let ct = rng::normal(&rng::key(3), &[32], DType::F64);
    let near = |a: &Tensor, b: &Tensor| {
        assert_eq!(a.shape(), b.shape());
        for (p, q) in a.to_vec::<f64>().iter().zip(b.to_vec::<f64>()) {
            assert!((p - q).abs() < 1e-12, "{p} vs {q}");
        }
    };
    let (_, g) = rune::vjp(|x: &Tensor| gather.call(x), &x, &ct);
    near(&g, &scatter.call(&ct));
    let (_, g) = rune::vjp(|y: &Tensor| scatter.call(y), &ct, &x);
    near(&g, &gather.call(&x));
}

/// `vmap` and `jvp` outside `shard_map`: per example, and the tangent of
/// the one-device function.
#[test]
fn vmap_and_jvp_outside_shard_map() {
    let sm = sharding::shard_map(
        |b: &Tensor| sharding::psum(&b.square(), "i"),
        &mesh1(2),
        opts(vec![split("i")], vec![Spec::replicated()]),
    );
    let xs = Tensor::from_slice(&arange(12), &[3, 4]);
    let mapped = vmap(|x: &Tensor| sm.call(x), &xs);
    assert_eq!(mapped.shape(), &[3, 2]);
    for r in 0..3 {
        let row = xs.get(r).to_vec::<f32>();
        let want = [
            row[0] * row[0] + row[2] * row[2],
            row[1] * row[1] + row[3] * row[3],
        ];
        assert_eq!(mapped.get(r).to_vec::<f32>(), want);
    }
    let x = xs.get(0);
    let t = Tensor::from_slice(&[1.0f32, 0.5, -1.0, 2.0], &[4]);
    let (_, tangent) = rune::jvp(|x: &Tensor| sm.call(x), &x, &t);
    let (xv, tv) = (x.to_vec::<f32>(), t.to_vec::<f32>());
    let want = [
        2.0 * (xv[0] * tv[0] + xv[2] * tv[2]),
        2.0 * (xv[1] * tv[1] + xv[3] * tv[3]),
    ];
    assert_eq!(tangent.to_vec::<f32>(), want);
}

/// `jit(shard_map)` equals the uncompiled result; a `scan` whose body
/// passes a block around the ring with `ppermute` equals the plain loop.
#[test]
fn jit_of_shard_map_and_a_scan_with_a_ppermute_ring() {
    let n = 4;
    let xt = Tensor::from_slice(&arange(4 * n), &[4 * n]);
    let sm = sharding::shard_map(
        |b: &Tensor| sharding::psum(&(b.sin() * 2.0), "i") + b,
        &mesh1(n),
        opts(vec![split("i")], vec![split("i")]),
    );
    let eager = sm.call(&xt);
    let compiled = jit(|x: &Tensor| sm.call(x)).call(&xt);
    close(&compiled, &eager, 1e-6);

    let perm: Vec<(usize, usize)> = (0..n).map(|i| (i, (i + 1) % n)).collect();
    let ring = sharding::shard_map(
        move |b: &Tensor| {
            let (acc, _) = rune::scan(
                |(acc, msg): &(Tensor, Tensor), _: &Tensor| {
                    let msg = sharding::ppermute(msg, "i", &perm);
                    ((acc + &msg, msg), Tensor::scalar(0.0f32))
                },
                &(b.clone(), b.clone()),
                &Tensor::zeros(&[n - 1], DType::F32),
            )
            .0;
            acc
        },
        &mesh1(n),
        opts(vec![split("i")], vec![split("i")]),
    );
    let by_psum = sharding::shard_map(
        |b: &Tensor| sharding::psum(b, "i"),
        &mesh1(n),
        opts(vec![split("i")], vec![split("i")]),
    );
    close(&ring.call(&xt), &by_psum.call(&xt), 1e-6);
}

/// The remaining "panics if" of meshes, collectives and `fold_in_index`,
/// each with its message.
#[test]
fn bad_meshes_and_bad_collective_arguments_panic_naming_what_is_wrong() {
    let two = ["CPU:1", "CPU:2"];
    assert!(panic_message(|| drop(Mesh::new(&two, &[]))).contains("no axes"));
    assert!(panic_message(|| drop(Mesh::new(&two, &[("i", 2), ("j", 0)]))).contains("size 0"));
    assert!(
        panic_message(|| drop(Mesh::new(&["CPU:1", "CPU:1"], &[("i", 2)])))
            .contains("listed twice")
    );
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[4]);
    let run = |f: fn(&Tensor) -> Tensor| {
        let sm = sharding::shard_map(f, &mesh1(2), opts(vec![split("i")], vec![split("i")]));
        panic_message(|| drop(sm.call(&x)))
    };
    assert!(run(|b| sharding::ppermute(b, "i", &[(0, 1), (0, 0)])).contains("not a permutation"));
    assert!(run(|b| sharding::ppermute(b, "i", &[(0, 2)])).contains("out of range"));
    assert!(run(|b| sharding::all_gather(b, "i", 1, true)).contains("dim 1 is out of range"));
    assert!(run(|b| sharding::psum_scatter(&b.tile(&[2]), "i", 0, false)).contains("must equal"));
    assert!(run(|b| sharding::all_to_all(&b.tile(&[2]), "i", 0, 0)).contains("split_dim 0"));
    let msg = panic_message(|| drop(rng::fold_in_index(&rng::key(0), &Tensor::scalar(1.0f32))));
    assert!(msg.contains("0-d I32 or U32"), "{msg}");
}
