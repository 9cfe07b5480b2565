//! scan, cond, while_loop (values, gradients, vmap, errors) and with_debug.

use rune::prelude::*;
mod common;
use common::{panic_message, t64};

fn running_sum(xs: &Tensor) -> (Tensor, Tensor) {
    rune::scan(
        |c: &Tensor, x: &Tensor| {
            let c = c + x;
            (c.clone(), c)
        },
        &Tensor::zeros(&xs.shape()[1..], xs.dtype()),
        xs,
    )
}

#[test]
fn scan_running_sum_is_cumsum_with_cumsums_gradient() {
    let xs = t64(&[1.0, -2.0, 3.5, 0.25, 4.0], &[5]);
    let (total, ys) = running_sum(&xs);
    assert_eq!(ys.to_vec::<f64>(), xs.cumsum(0).to_vec::<f64>());
    assert_eq!(total.item::<f64>(), xs.sum_all().item::<f64>());
    let w = t64(&[1.0, 2.0, 3.0, 4.0, 5.0], &[5]);
    let g_scan = rune::grad(|xs: &Tensor| (running_sum(xs).1 * &w).sum_all(), &xs);
    let g_cumsum = rune::grad(|xs: &Tensor| (xs.cumsum(0) * &w).sum_all(), &xs);
    assert_eq!(g_scan.to_vec::<f64>(), g_cumsum.to_vec::<f64>());
    assert_eq!(g_scan.to_vec::<f64>(), vec![15.0, 14.0, 12.0, 9.0, 5.0]);
}

#[test]
fn scan_with_structured_carry_and_no_outputs() {
    // Carry (sum, product); xs two leaves sliced together; Y = ().
    let a = t64(&[1.0, 2.0, 3.0], &[3]);
    let b = t64(&[4.0, 5.0, 6.0], &[3]);
    let ((s, p), ()) = rune::scan(
        |(s, p): &(Tensor, Tensor), (a, b): &(Tensor, Tensor)| ((s + &(a * b), p * a), ()),
        &(Tensor::scalar(0.0f64), Tensor::scalar(1.0f64)),
        &(a, b),
    );
    assert_eq!(s.item::<f64>(), 4.0 + 10.0 + 18.0);
    assert_eq!(p.item::<f64>(), 6.0);
}

#[test]
fn scan_rows_of_a_matrix_and_under_vmap() {
    // An RNN-like recurrence over rows; vmap over a batch of sequences equals the loop.
    let w = t64(&[0.5, -0.3, 0.2, 0.8], &[2, 2]);
    let seqs = t64(
        &(0..12).map(|i| (i as f64) * 0.1 - 0.5).collect::<Vec<_>>(),
        &[2, 3, 2],
    );
    let run = |xs: &Tensor| {
        rune::scan(
            |h: &Tensor, x: &Tensor| {
                let h = (h.matmul(&w) + x).tanh();
                (h.clone(), h.sum_all())
            },
            &Tensor::zeros(&[2], DType::F64),
            xs,
        )
    };
    let (hs, ys) = rune::vmap(run, &seqs);
    assert_eq!(hs.shape(), &[2, 2]);
    assert_eq!(ys.shape(), &[2, 3]);
    for i in 0..2 {
        let (h, y) = run(&seqs.get(i));
        assert_eq!(hs.get(i).to_vec::<f64>(), h.to_vec::<f64>());
        assert_eq!(ys.get(i).to_vec::<f64>(), y.to_vec::<f64>());
    }
    // Differentiable through every step.
    assert!(rune::check_grads(
        |w2: &Tensor| {
            rune::scan(
                |h: &Tensor, x: &Tensor| ((h.matmul(w2) + x).tanh(), ()),
                &Tensor::zeros(&[2], DType::F64),
                &seqs.get(0),
            )
            .0
            .sum_all()
        },
        &w
    )
    .is_ok());
}

#[test]
fn scan_refuses_scalar_and_empty_xs() {
    let m = panic_message(|| {
        rune::scan(
            |c: &Tensor, x: &Tensor| (c + x, ()),
            &Tensor::scalar(0.0f64),
            &Tensor::scalar(1.0f64),
        );
    });
    assert!(m.contains("scan") && m.contains("scalar"), "{m}");
    let m = panic_message(|| {
        rune::scan(
            |c: &Tensor, x: &Tensor| (c + x, ()),
            &Tensor::zeros(&[2], DType::F64),
            &Tensor::zeros(&[0, 2], DType::F64),
        );
    });
    assert!(m.contains("scan") && m.contains("empty"), "{m}");
}

#[test]
fn while_loop_doubles_until_the_sum_reaches_ten_and_differentiates() {
    let x = t64(&[1.0, 0.5], &[2]);
    let run = |x: &Tensor| {
        rune::while_loop(
            |c: &Tensor| c.sum_all().less(&c.scalar_like(10.0)),
            |c: &Tensor| c * 2.0,
            x,
        )
    };
    assert_eq!(run(&x).to_vec::<f64>(), vec![8.0, 4.0]);
    let g = rune::grad(|x: &Tensor| run(x).sum_all(), &x);
    assert_eq!(g.to_vec::<f64>(), vec![8.0, 8.0]);
}

#[test]
fn cond_runs_one_branch_and_refuses_mapped_predicates() {
    let x = Tensor::scalar(-2.0f64);
    let ran_else = std::cell::Cell::new(false);
    let y = rune::cond(
        &x.greater(&x.scalar_like(0.0)),
        || x.sqrt(),
        || {
            ran_else.set(true);
            x.neg()
        },
    );
    assert!(ran_else.get());
    assert_eq!(y.item::<f64>(), 2.0);
    // Differentiates through the branch taken.
    let g = rune::grad(
        |x: &Tensor| rune::cond(&x.greater(&x.scalar_like(0.0)), || x.square(), || x * 3.0),
        &x,
    );
    assert_eq!(g.item::<f64>(), 3.0);
    // A predicate that depends on the mapped input cannot be read.
    let xs = t64(&[1.0, -1.0], &[2]);
    let m = panic_message(|| {
        rune::vmap(
            |x: &Tensor| rune::cond(&x.greater(&x.scalar_like(0.0)), || x.clone(), || x.neg()),
            &xs,
        );
    });
    assert!(m.contains("cond") && m.contains("vmap"), "{m}");
    let m = panic_message(|| {
        rune::vmap(
            |x: &Tensor| {
                rune::while_loop(
                    |c: &Tensor| c.less(&c.scalar_like(5.0)),
                    |c: &Tensor| c + 1.0,
                    x,
                )
            },
            &xs,
        );
    });
    assert!(m.contains("while_loop") && m.contains("vmap"), "{m}");
    // A predicate that does not depend on the mapped input is fine.
    let flag = Tensor::scalar(true);
    let out = rune::vmap(
        |x: &Tensor| rune::cond(&flag, || x * 2.0, || x.clone()),
        &xs,
    );
    assert_eq!(out.to_vec::<f64>(), vec![2.0, -2.0]);
    let m = panic_message(|| {
        rune::cond(&Tensor::scalar(1.0f32), || (), || ());
    });
    assert!(m.contains("cond") && m.contains("bool"), "{m}");
}

#[test]
fn with_debug_logs_each_operation_with_its_shape() {
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let mut log = Vec::new();
    let y = rune::with_debug_to(&mut log, || x.exp().sum(&[1], false));
    assert_eq!(y.shape(), &[2]);
    let log = String::from_utf8(log).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines, vec!["exp [2, 3] f32", "reduce_sum [2] f32"]);
}

#[test]
fn with_debug_outermost_shows_what_transformations_emit() {
    let x = Tensor::scalar(2.0f64);
    let mut outer = Vec::new();
    let g = rune::with_debug_to(&mut outer, || rune::grad(|x: &Tensor| x.sin(), &x));
    assert_eq!(g.item::<f64>(), 2.0f64.cos());
    let outer = String::from_utf8(outer).unwrap();
    // The forward sin, its derivative cos (computed by the rule) and the
    // backward multiplication all appear.
    assert!(outer.contains("sin [] f64"), "{outer}");
    assert!(outer.contains("cos [] f64"), "{outer}");
    assert!(outer.contains("mul [] f64"), "{outer}");
    // Inside grad, it sees the function's own operations.
    let inner = std::cell::RefCell::new(Vec::new());
    let g2 = rune::grad(
        |x: &Tensor| rune::with_debug_to(&mut *inner.borrow_mut(), || x.sin()),
        &x,
    );
    assert_eq!(g2.item::<f64>(), g.item::<f64>());
    assert_eq!(
        String::from_utf8(inner.into_inner()).unwrap(),
        "sin [] f64\n"
    );
}

#[test]
fn scan_refuses_xs_leaves_of_different_lengths_and_changing_outputs() {
    let a = Tensor::zeros(&[3], DType::F64);
    let b = Tensor::zeros(&[2], DType::F64);
    let m = panic_message(|| {
        rune::scan(
            |c: &Tensor, _: &(Tensor, Tensor)| (c.clone(), ()),
            &Tensor::scalar(0.0f64),
            &(a.clone(), b.clone()),
        );
    });
    assert!(
        m.contains("scan") && m.contains("disagree") && m.contains('3') && m.contains('2'),
        "{m}"
    );
    let m = panic_message(|| {
        rune::scan(
            |c: &Tensor, _: &()| (c.clone(), ()),
            &Tensor::scalar(0.0f64),
            &(),
        );
    });
    assert!(m.contains("scan") && m.contains("no tensor leaves"), "{m}");
    let m = panic_message(|| {
        let step = std::cell::Cell::new(0);
        rune::scan(
            |c: &Tensor, x: &Tensor| {
                step.set(step.get() + 1);
                (c.clone(), vec![x.clone(); step.get()])
            },
            &Tensor::scalar(0.0f64),
            &a,
        );
    });
    assert!(
        m.contains("scan") && m.contains("step 1") && m.contains("2 output leaves"),
        "{m}"
    );
}
