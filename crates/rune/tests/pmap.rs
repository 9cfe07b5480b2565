//! `pmap`'s interface, its checks (each "Raises" of the seed), and its
//! results: `f` observes global shapes, so pmap must compute what `f`
//! computes eagerly, a reduction over a sharded axis included.

use rune::prelude::*;
use rune::PmapOpts;
mod common;
use common::{panic_message, t64};

fn data(shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let mut s = seed.wrapping_mul(0x9e3779b97f4a7c15) | 1;
    let v: Vec<f64> = (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        })
        .collect();
    Tensor::from_slice(&v, shape)
}

fn opts(devices: &[&str], in_axes: Option<Vec<Option<usize>>>) -> PmapOpts {
    PmapOpts {
        devices: devices.iter().map(|d| d.to_string()).collect(),
        in_axes,
        donate: false,
    }
}

/// A mean loss over a batch sharded across two devices, the parameters
/// replicated: pmap's loss and gradients are the global ones (the
/// all-reduced values), equal to eager within float reassociation.
#[test]
fn data_parallel_grad_of_a_mean_loss_equals_eager() {
    type In = ((Tensor, Tensor), Tensor, Tensor);
    let step = |((w, b), x, y): &In| {
        rune::value_and_grad(
            |(w, b): &(Tensor, Tensor)| {
                let pred = (x.matmul(w) + b).tanh();
                (pred - y).square().mean_all()
            },
            &(w.clone(), b.clone()),
        )
    };
    let p: In = (
        (data(&[5, 3], 1), data(&[3], 2)),
        data(&[8, 5], 3),
        data(&[8, 3], 4),
    );
    let f = rune::pmap_with(
        step,
        opts(
            &["CPU:1", "CPU:2"],
            Some(vec![None, None, Some(0), Some(0)]),
        ),
    );
    let (loss, (gw, gb)) = f.call(&p);
    let (el, (ew, eb)) = step(&p);
    for (a, e) in [(&loss, &el), (&gw, &ew), (&gb, &eb)] {
        assert_eq!(a.shape(), e.shape());
        let (a, e) = (a.to_vec::<f64>(), e.to_vec::<f64>());
        for (x, y) in a.iter().zip(&e) {
            assert!((x - y).abs() <= 1e-12 * (1.0 + y.abs()), "{x} vs {y}");
        }
    }
    // The same signature replays; a new batch size traces again.
    f.call(&p);
    assert_eq!(f.trace_count(), 1);
    let p2: In = (p.0.clone(), data(&[4, 5], 5), data(&[4, 3], 6));
    f.call(&p2);
    assert_eq!(f.trace_count(), 2);
}

#[test]
fn every_leaf_splits_along_axis_0_by_default() {
    let f = rune::pmap(
        |(a, b): &(Tensor, Tensor)| (a * b).sum(&[0], false),
        &["CPU:1", "CPU:2"],
    );
    let a = t64(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let b = t64(&[6.0, 5.0, 4.0, 3.0, 2.0, 1.0], &[2, 3]);
    assert_eq!(f.call(&(a, b)).to_vec::<f64>(), vec![18.0, 20.0, 18.0]);
    let d = PmapOpts::default();
    assert!(d.devices.is_empty() && d.in_axes.is_none() && !d.donate);
    // A leaf of 3 rows does not split across 2 devices.
    let m = panic_message(|| {
        f.call(&(data(&[3, 2], 1), data(&[3, 2], 2)));
    });
    assert!(
        m.contains("leaf 0") && m.contains("evenly") && m.contains("axis 0"),
        "{m}"
    );
}

#[test]
fn bad_devices_panic_naming_them() {
    let f = |x: &Tensor| x * 2.0;
    let m = panic_message(|| {
        rune::pmap(f, &[]);
    });
    assert!(m.contains("devices is empty"), "{m}");
    let m = panic_message(|| {
        rune::pmap(f, &["CPU:1", "CUDA:0"]);
    });
    assert!(m.contains("CUDA:0") && m.contains("not available"), "{m}");
    let m = panic_message(|| {
        rune::pmap(f, &["CUDA:0", "CUDA:1"]);
    });
    assert!(
        m.contains("\"CUDA:0\"") && m.contains("not available"),
        "{m}"
    );
    let m = panic_message(|| {
        rune::pmap(f, &["METAL:0"]);
    });
    assert!(m.contains("macOS only"), "{m}");
    let m = panic_message(|| {
        rune::pmap(f, &["CPU:1", "TPU:0"]);
    });
    assert!(
        m.contains("\"TPU:0\"") && m.contains("unknown device"),
        "{m}"
    );
    let m = panic_message(|| {
        rune::pmap(f, &["CPU:x"]);
    });
    assert!(m.contains("\"CPU:x\""), "{m}");
}

#[test]
fn in_axes_must_fit_the_leaves() {
    let f = |(a, b): &(Tensor, Tensor)| a + b;
    let p = (data(&[4, 2], 1), data(&[4, 2], 2));
    let missing = rune::pmap_with(f, opts(&["CPU:1", "CPU:2"], Some(vec![Some(0)])));
    let m = panic_message(|| {
        missing.call(&p);
    });
    assert!(
        m.contains("in_axes has 1 entries") && m.contains("2 leaves"),
        "{m}"
    );
    let excess = rune::pmap_with(f, opts(&["CPU:1", "CPU:2"], Some(vec![None, None, None])));
    let m = panic_message(|| {
        excess.call(&p);
    });
    assert!(m.contains("in_axes has 3 entries"), "{m}");
    let out_of_range = rune::pmap_with(f, opts(&["CPU:1", "CPU:2"], Some(vec![Some(2), None])));
    let m = panic_message(|| {
        out_of_range.call(&p);
    });
    assert!(m.contains("no axis 2"), "{m}");
    // Axis 1 (2 columns) splits across 2 devices; replicated leaves need not.
    let ok = rune::pmap_with(f, opts(&["CPU:1", "CPU:2"], Some(vec![Some(1), None])));
    assert_eq!(ok.call(&p).to_vec::<f64>(), (&p.0 + &p.1).to_vec::<f64>());
}

/// A sharded leaf assigned in place is a JitError at trace time; a
/// replicated one is written back, as under jit.
#[test]
fn writebacks_of_sharded_leaves_are_refused_replicated_ones_honoured() {
    let f = |(state, x): &(Tensor, Tensor)| {
        state.assign(&(state + x.sum(&[0], false)));
        x * 2.0
    };
    let sharded = rune::pmap(f, &["CPU:1", "CPU:2"]);
    let p = (data(&[2, 3], 1), data(&[4, 3], 2));
    let e = sharded.try_call(&p).expect_err("a sharded writeback");
    assert!(
        e.message().contains("leaf 0") && e.message().contains("sharded"),
        "{}",
        e.message()
    );
    let m = panic_message(|| {
        sharded.call(&p);
    });
    assert!(m.contains("sharded"), "{m}");

    let replicated = rune::pmap_with(f, opts(&["CPU:1", "CPU:2"], Some(vec![None, Some(0)])));
    let state = Tensor::zeros(&[3], DType::F64);
    let x = data(&[4, 3], 2);
    let want = x.sum(&[0], false);
    for k in 1..=2 {
        let y = replicated.call(&(state.clone(), x.clone()));
        assert_eq!(y.to_vec::<f64>(), (&x * 2.0).to_vec::<f64>());
        let expect: Vec<f64> = want.to_vec::<f64>().iter().map(|v| v * k as f64).collect();
        let got = state.to_vec::<f64>();
        for (g, e) in got.iter().zip(&expect) {
            assert!((g - e).abs() < 1e-12, "call {k}: {got:?} vs {expect:?}");
        }
    }
}

/// Under an enclosing transformation pmap runs `f` directly, so grad sees
/// its operations.
#[test]
fn grad_of_a_pmapped_function_is_grad_of_the_function() {
    let f = |x: &Tensor| (x.sin() * x).sum_all();
    let pf = rune::pmap(f, &["CPU:1", "CPU:2"]);
    let x = data(&[6], 7);
    let g = rune::grad(|x: &Tensor| pf.call(x), &x);
    let e = rune::grad(f, &x);
    assert_eq!(g.to_vec::<f64>(), e.to_vec::<f64>());
}

/// The collectives sharding propagation plans: the data-parallel gradient
/// all-reduces (the loss, the gradients) and gathers nothing.
#[test]
fn a_data_parallel_step_all_reduces_and_gathers_nothing() {
    let step = |(w, x, y): &(Tensor, Tensor, Tensor)| {
        rune::value_and_grad(|w: &Tensor| (x.matmul(w) - y).square().mean_all(), w)
    };
    let p = (data(&[5, 3], 1), data(&[8, 5], 2), data(&[8, 3], 3));
    let g = rune::make_graph(step, &p);
    let plan = tolk::shard::shard(g, 2, &[None, Some(0), Some(0)], false).expect("shards");
    let d = plan.describe();
    assert!(d.contains("all-reduce"), "{d}");
    assert!(!d.contains("all-gather") && !d.contains("slice"), "{d}");
    let out = plan.run(&p.leaves());
    let (l, gw) = step(&p);
    assert!((out[0].to_vec::<f64>()[0] - l.to_vec::<f64>()[0]).abs() < 1e-12);
    for (a, b) in out[1].to_vec::<f64>().iter().zip(gw.to_vec::<f64>()) {
        assert!((a - b).abs() < 1e-12, "{a} vs {b}");
    }
}

/// Programs exercising each rule (elementwise with replicated operands,
/// broadcasts, reductions over and beside the split axis, reshapes that
/// keep or merge it, permutes, slices and flips along it or not, cumsum,
/// argmax, take_along_axis, concat, products with the split axis free,
/// contracted or batched), split along each axis of the input, over 2 and
/// 4 devices: pmap equals eager.
#[test]
fn every_sharding_rule_equals_eager() {
    use rune::prelude::Slice;
    type F = fn(&(Tensor, Tensor)) -> Tensor;
    let progs: Vec<(&str, F)> = vec![
        ("elementwise with a replicated operand", |(x, r)| {
            (x * r).sin() + 1.0
        }),
        ("reduce over every axis", |(x, r)| (x * r).sum_all()),
        ("reduce over axis 0", |(x, r)| {
            (x.exp() + r).max(&[0], false)
        }),
        ("reduce over axis 1", |(x, r)| (x - r).sum(&[1], true) * 2.0),
        ("softmax along 1", |(x, _)| x.softmax(1)),
        ("log_softmax along 0", |(x, _)| x.log_softmax(0)),
        ("reshape to 1-D", |(x, _)| x.reshape(&[24]).cumsum(0)),
        ("reshape splitting axis 1", |(x, _)| {
            x.reshape(&[4, 3, 2]).sum(&[2], false)
        }),
        ("transpose", |(x, r)| (x + r).transpose().tanh()),
        ("slice rows", |(x, _)| x.slice(&[Slice::from(1..3)]) * 3.0),
        ("slice columns", |(x, _)| {
            x.slice(&[Slice::from(..), Slice::from(0..6).step(2)])
        }),
        ("flip", |(x, _)| x.flip(&[0, 1]) - x),
        ("pad", |(x, _)| {
            x.pad(&[(1, 0), (0, 2)], 0.5).sum(&[1], false)
        }),
        ("cumsum along 0 and 1", |(x, _)| x.cumsum(0) + x.cumsum(1)),
        ("argmax", |(x, _)| {
            x.argmax(1, false).cast(DType::F64) + x.argmax(0, true).cast(DType::F64).sum_all()
        }),
        ("take_along_axis", |(x, _)| {
            x.take_along_axis(&x.argmax(1, true), 1)
        }),
        ("concat", |(x, r)| {
            Tensor::concatenate(&[x.clone(), r.clone()], 1).exp()
        }),
        ("x @ x^T", |(x, _)| x.matmul(&x.transpose())),
        ("x^T @ x", |(x, _)| x.transpose().matmul(x)),
        ("batched", |(x, r)| {
            x.reshape(&[2, 2, 6]).matmul(&r.reshape(&[2, 6, 2]))
        }),
    ];
    let x = data(&[4, 6], 11);
    let r = data(&[4, 6], 12);
    for (name, f) in progs {
        let eager = f(&(x.clone(), r.clone()));
        for devices in [
            &["CPU:1", "CPU:2"][..],
            &["CPU:1", "CPU:2", "CPU:3", "CPU:4"][..],
        ] {
            let axes: &[usize] = if devices.len() == 4 { &[0] } else { &[0, 1] };
            for &axis in axes {
                for r_axis in [None, Some(axis)] {
                    let pf = rune::pmap_with(f, opts(devices, Some(vec![Some(axis), r_axis])));
                    let got = pf.call(&(x.clone(), r.clone()));
                    assert_eq!(got.shape(), eager.shape(), "{name}");
                    assert_eq!(got.dtype(), eager.dtype(), "{name}");
                    let (g, e) = (
                        got.cast(DType::F64).to_vec::<f64>(),
                        eager.cast(DType::F64).to_vec::<f64>(),
                    );
                    for (a, b) in g.iter().zip(&e) {
                        assert!(
                            (a - b).abs() <= 1e-12 * (1.0 + b.abs()),
                            "{name}, {} devices, split axis {axis}, r {r_axis:?}: {a} vs {b}",
                            devices.len()
                        );
                    }
                }
            }
        }
    }
}

/// Edge cases of the plan: an input returned as it is, a captured constant,
/// a replicated scalar, integer reductions across the split axis (max and
/// sum all-reduce exactly), a bool result.
#[test]
fn inputs_constants_scalars_and_integer_reductions_pass_through_pmap() {
    let c = t64(&[10.0, 20.0], &[2]);
    let f = |(x, s, k): &(Tensor, Tensor, Tensor)| {
        (
            x.clone(),
            c.clone(),
            x * s,
            k.max(&[0], false),
            k.sum_all(),
            x.greater(&x.zeros_like()),
        )
    };
    let x = data(&[4, 2], 3);
    let s = t64(&[3.0], &[]);
    let k = Tensor::from_slice(&[5i32, -2, 9, 4, 1, 7, 0, 3], &[4, 2]);
    let pf = rune::pmap_with(
        f,
        opts(&["CPU:1", "CPU:2"], Some(vec![Some(0), None, Some(0)])),
    );
    let got = pf.call(&(x.clone(), s.clone(), k.clone()));
    let want = f(&(x, s, k));
    assert_eq!(got.0.to_vec::<f64>(), want.0.to_vec::<f64>());
    assert_eq!(got.1.to_vec::<f64>(), want.1.to_vec::<f64>());
    assert_eq!(got.2.to_vec::<f64>(), want.2.to_vec::<f64>());
    assert_eq!(got.3.to_vec::<i32>(), vec![9, 7]);
    assert_eq!(got.4.to_vec::<i32>(), want.4.to_vec::<i32>());
    assert_eq!(got.5.dtype(), DType::Bool);
    assert_eq!(
        got.5.cast(DType::I32).to_vec::<i32>(),
        want.5.cast(DType::I32).to_vec::<i32>()
    );
}

/// A data-parallel SGD step of a 3-layer MLP: the whole forward and
/// backward pass is one stage, the gradients are all-reduced together,
/// and the updates are a second stage (not a stage per layer).
#[test]
fn a_data_parallel_sgd_step_is_two_stages_around_the_all_reduces() {
    type P = Vec<Tensor>;
    let step = |(ws, x, y): &(P, Tensor, Tensor)| {
        let g = rune::grad(
            |ws: &P| {
                let mut h = x.clone();
                for w in ws {
                    h = h.matmul(w).tanh();
                }
                (h - y).square().mean_all()
            },
            ws,
        );
        ws.iter()
            .zip(&g)
            .map(|(w, g)| w - g * 0.1)
            .collect::<Vec<_>>()
    };
    let p = (
        vec![data(&[4, 6], 1), data(&[6, 6], 2), data(&[6, 3], 3)],
        data(&[8, 4], 4),
        data(&[8, 3], 5),
    );
    let g = rune::make_graph(step, &p);
    let plan =
        tolk::shard::shard(g, 2, &[None, None, None, Some(0), Some(0)], false).expect("shards");
    let d = plan.describe();
    assert_eq!(d.matches("stage of").count(), 2, "{d}");
    assert_eq!(d.matches("all-reduce").count(), 3, "one per gradient: {d}");
    let out = plan.run(&p.leaves());
    for (a, e) in out.iter().zip(step(&p)) {
        for (x, y) in a.to_vec::<f64>().iter().zip(e.to_vec::<f64>()) {
            assert!((x - y).abs() < 1e-12, "{x} vs {y}");
        }
    }
}

/// A value split across the devices written into a replicated leaf is a
/// JitError too (it would gather on every call), found by sharding
/// propagation; reduced first, it is honoured.
#[test]
fn a_split_value_written_into_a_replicated_leaf_is_refused() {
    let f = |(state, x): &(Tensor, Tensor)| {
        state.assign(&(x * 2.0));
        x.sum_all()
    };
    let pf = rune::pmap_with(f, opts(&["CPU:1", "CPU:2"], Some(vec![None, Some(0)])));
    let p = (data(&[4, 3], 1), data(&[4, 3], 2));
    let e = pf.try_call(&p).expect_err("a split value written back");
    assert!(
        e.message().contains("leaf 0") && e.message().contains("split across the devices"),
        "{}",
        e.message()
    );
}
