//! jit's semantics (issue 10): retracing per leaf signature, captures,
//! writebacks, every `JitError` case, devices, transformations inside and
//! around jit, rng keys as inputs, `jit_stats`, `make_graph`, and a 20-step
//! MLP training trajectory against eager.
//!
//! Every expected value is computed independently: by running the same
//! function eagerly (outside any jit) or from a closed form.
//!
//! Exactness: elementwise and movement primitives compile to C that
//! computes each element with the eager kernel's algorithm, so programs made
//! of them (and the rng samplers, and everything under an enclosing
//! transformation, where jit runs `f` directly) are compared bit for bit
//! (`assert_same`). Reductions compile as kernels that accumulate float sums
//! in f64 (eager accumulates in the dtype, in another order), and matmuls
//! with a strided operand see it copied contiguous (see
//! `assert_matmul_close`): programs with those are compared within a bound
//! (`assert_close`, justified there).
//!
//! The persistent cache across processes is `jit_cache.rs` (its own binary:
//! it spawns child processes).

use rune::prelude::*;
use rune::rng;
use rune::JitError;
mod common;
use common::panic_message;
#[path = "common/bits.rs"]
mod bits;
use bits::bits;

fn f32s(v: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_slice(v, shape)
}

fn f64s(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_slice(v, shape)
}

/// Deterministic test data in [-1, 1) (a 64-bit LCG, top bits).
fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e3779b97f4a7c15).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32) / ((1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn rand_f32(shape: &[usize], seed: u64) -> Tensor {
    Tensor::from_vec(data(shape.iter().product(), seed), shape)
}

fn rand_f64(shape: &[usize], seed: u64) -> Tensor {
    let v: Vec<f64> = data(shape.iter().product(), seed)
        .into_iter()
        .map(|x| x as f64)
        .collect();
    Tensor::from_vec(v, shape)
}

/// `a` and `b` have the same dtype, shape and bits.
#[track_caller]
fn assert_same(a: &Tensor, b: &Tensor) {
    assert_eq!(a.dtype(), b.dtype(), "dtype");
    assert_eq!(a.shape(), b.shape(), "shape");
    assert_eq!(bits(a), bits(b), "values differ:\n jit   {a}\n eager {b}");
}

/// `a` is within a few dozen rounding errors of `b`:
/// `|a - b| <= 64 * eps * (1 + |b|)` elementwise, `eps` the dtype's epsilon.
///
/// The bound: every reduction in these tests sums at most a few dozen terms
/// of magnitude O(1). Eager accumulates in the dtype, with an error of at
/// most n * eps * sum|x_i| (n <= 32 here); the jitted kernel accumulates in
/// f64 and rounds once (half an ulp). The elementwise operations around the
/// reductions (tanh, exp, log_softmax, products) are O(1)-conditioned on
/// these O(1) values, so the two results differ by a few ulp of a unit-scale
/// quantity; 64 eps (7.6e-6 in f32) leaves room for a gradient's backward
/// pass re-using a reduced value a few times, and still catches any real
/// error (a wrong element, a wrong axis, a stale buffer is off by O(1)).
#[track_caller]
fn assert_close(a: &Tensor, b: &Tensor) {
    assert_eq!(a.dtype(), b.dtype(), "dtype");
    assert_eq!(a.shape(), b.shape(), "shape");
    let (av, bv, eps) = match a.dtype() {
        DType::F32 => (
            a.to_vec::<f32>()
                .iter()
                .map(|&x| x as f64)
                .collect::<Vec<_>>(),
            b.to_vec::<f32>()
                .iter()
                .map(|&x| x as f64)
                .collect::<Vec<_>>(),
            f32::EPSILON as f64,
        ),
        DType::F64 => (a.to_vec::<f64>(), b.to_vec::<f64>(), f64::EPSILON),
        _ => return assert_same(a, b),
    };
    for (i, (x, y)) in av.iter().zip(&bv).enumerate() {
        let tol = 64.0 * eps * (1.0 + y.abs());
        assert!(
            (x - y).abs() <= tol,
            "element {i}: jit {x} eager {y} (|diff| {} > {tol})\n jit   {a}\n eager {b}",
            (x - y).abs()
        );
    }
}

/// Every leaf of `a` is `assert_close` to `b`'s.
#[track_caller]
fn assert_close_tree<P: Ptree>(a: &P, b: &P) {
    let (la, lb) = (a.leaves(), b.leaves());
    assert_eq!(la.len(), lb.len(), "leaf count");
    for (x, y) in la.iter().zip(&lb) {
        assert_close(x, y);
    }
}

/// `got` is within the standard floating-point error bound of the matrix
/// product `a @ b` computed eagerly: `|got - a@b| <= k * eps * (|a| @ |b|)`
/// elementwise, `k` the contraction length, `eps` the dtype's epsilon (f32).
///
/// Used where a matmul meets a non-contiguous operand: the jitted program
/// copies such operands contiguous (kernels and constants are contiguous),
/// and nx's eager `dot_general` itself rounds differently for a strided and
/// a contiguous operand of the same values (the GEMM crate packs them along
/// different paths), by an ulp or so; both are within this bound.
#[track_caller]
fn assert_matmul_close(got: &Tensor, a: &Tensor, b: &Tensor) {
    let want = a.matmul(b).to_vec::<f32>();
    let scale = a.abs().matmul(&b.abs()).to_vec::<f32>();
    let k = a.shape()[a.ndim() - 1] as f32;
    for (i, (g, (w, s))) in got
        .to_vec::<f32>()
        .iter()
        .zip(want.iter().zip(&scale))
        .enumerate()
    {
        assert!(
            (g - w).abs() <= k * f32::EPSILON * s,
            "element {i}: jit {g} eager {w} (bound {})",
            k * f32::EPSILON * s
        );
    }
}

/// The `JitError` of `r` (fails if it is `Ok`).
#[track_caller]
fn jit_error<Q>(r: Result<Q, JitError>) -> JitError {
    match r {
        Ok(_) => panic!("expected a JitError"),
        Err(e) => e,
    }
}

/// Checks that `try_call` returns a `JitError` whose message contains every
/// one of `needles`, that `call` panics with exactly that message, and that
/// the failure left no trace behind (eager operations and a fresh jit work).
#[track_caller]
fn check_jit_error<P: Ptree, Q: Ptree>(
    f: &rune::Jit<impl Fn(&P) -> Q, P, Q>,
    p: &P,
    needles: &[&str],
) {
    let e = jit_error(f.try_call(p));
    let m = e.message().to_string();
    assert_eq!(e.to_string(), m, "Display is the message");
    for n in needles {
        assert!(m.contains(n), "message lacks {n:?}: {m}");
    }
    let from_call = panic_message(|| {
        f.call(p);
    });
    assert_eq!(from_call, m, "call panics with the JitError's message");
    // As a std error, Send + Sync (API.md).
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(e);
    assert_eq!(boxed.to_string(), m);
    // Nothing left on the trace stack; eager and jit still work.
    assert_eq!(rune::nx::trace::depth(), 0, "a trace was left on the stack");
    let x = f32s(&[1.0, 2.0], &[2]);
    assert_eq!((&x + 1.0).to_vec::<f32>(), vec![2.0, 3.0]);
    let g = rune::jit(|x: &Tensor| x * 3.0);
    assert_eq!(g.call(&x).to_vec::<f32>(), vec![3.0, 6.0]);
}

// ---------------------------------------------------------------- signatures

#[test]
fn retraces_on_a_new_shape_or_dtype_and_not_on_the_same_signature() {
    let body = |x: &Tensor| (x.exp() * 2.0 + 1.0).sin() - x;
    let f = rune::jit(body);
    assert_eq!(
        f.trace_count(),
        0,
        "nothing is traced before the first call"
    );

    let a = rand_f32(&[3], 1);
    assert_same(&f.call(&a), &body(&a));
    assert_eq!(f.trace_count(), 1);
    // Same signature, new values: replayed, not retraced, and the result
    // follows the new values (the program is not a constant).
    for seed in 2..6 {
        let b = rand_f32(&[3], seed);
        assert_same(&f.call(&b), &body(&b));
    }
    assert_eq!(f.trace_count(), 1);

    // New shape.
    let c = rand_f32(&[2, 3], 7);
    assert_same(&f.call(&c), &body(&c));
    assert_eq!(f.trace_count(), 2);
    // New dtype, same shape as the first.
    let d = rand_f64(&[3], 8);
    assert_same(&f.call(&d), &body(&d));
    assert_eq!(f.trace_count(), 3);
    // Every signature seen stays cached.
    for x in [&a, &c, &d, &rand_f32(&[2, 3], 9), &rand_f64(&[3], 10)] {
        assert_same(&f.call(x), &body(x));
    }
    assert_eq!(f.trace_count(), 3);
}

#[test]
fn retraces_on_a_new_leaf_count() {
    let body = |xs: &Vec<Tensor>| {
        let mut acc = xs[0].clone();
        for (i, x) in xs.iter().enumerate().skip(1) {
            acc = acc * (i as f64 + 1.0) + x;
        }
        acc
    };
    let f = rune::jit(body);
    let two = vec![rand_f32(&[4], 1), rand_f32(&[4], 2)];
    let three = vec![rand_f32(&[4], 3), rand_f32(&[4], 4), rand_f32(&[4], 5)];
    assert_same(&f.call(&two), &body(&two));
    assert_eq!(f.trace_count(), 1);
    assert_same(&f.call(&three), &body(&three));
    assert_eq!(f.trace_count(), 2);
    assert_same(&f.call(&two), &body(&two));
    assert_same(&f.call(&three), &body(&three));
    assert_eq!(f.trace_count(), 2);
}

#[test]
fn leaf_order_matters_to_the_signature() {
    // (F32 [2], F64 [2]) and (F64 [2], F32 [2]) are different signatures.
    let body = |(a, b): &(Tensor, Tensor)| {
        (a.sum_all().cast(DType::F64) + b.sum_all().cast(DType::F64)) * 0.5
    };
    let f = rune::jit(body);
    let p = (f32s(&[1.0, 2.0], &[2]), f64s(&[3.0, 4.0], &[2]));
    let q = (f64s(&[3.0, 4.0], &[2]), f32s(&[1.0, 2.0], &[2]));
    assert_close(&f.call(&p), &body(&p));
    assert_close(&f.call(&q), &body(&q));
    assert_eq!(f.trace_count(), 2);
    assert_eq!(f.call(&p).item::<f64>(), 5.0);
}

#[test]
fn structured_inputs_and_outputs() {
    #[derive(Ptree, Clone)]
    struct State {
        w: Tensor,
        b: Tensor,
        #[ptree(ignore)]
        tag: String,
    }
    let body = |s: &State| State {
        w: s.w.tanh() + &s.b,
        b: s.b.square().sum_all().reshape(&[1]),
        tag: format!("{}'", s.tag),
    };
    let f = rune::jit(body);
    let s = State {
        w: rand_f32(&[2, 3], 1),
        b: rand_f32(&[3], 2),
        tag: "s".into(),
    };
    let (got, want) = (f.call(&s), body(&s));
    assert_close_tree(&got, &want);
    assert_eq!(got.tag, "s'", "metadata comes from the traced output");
}

#[test]
fn inputs_and_captures_returned_directly_and_repeated_outputs() {
    let c = f32s(&[7.0, 8.0], &[2]);
    let body = |x: &Tensor| {
        let y = x * 2.0;
        (x.clone(), c.clone(), y.clone(), y)
    };
    let f = rune::jit(body);
    let x = f32s(&[1.0, -1.0], &[2]);
    let (a, b, y1, y2) = f.call(&x);
    assert_eq!(a.to_vec::<f32>(), vec![1.0, -1.0]);
    assert_eq!(b.to_vec::<f32>(), vec![7.0, 8.0]);
    assert_eq!(y1.to_vec::<f32>(), vec![2.0, -2.0]);
    assert_eq!(y2.to_vec::<f32>(), vec![2.0, -2.0]);
}

#[test]
fn non_contiguous_inputs_are_read_through_their_layout() {
    let body = |(a, b): &(Tensor, Tensor)| (a.exp() * b, a.matmul(b));
    let f = rune::jit(body);
    let t = rand_f32(&[3, 3], 1).transpose(); // strided
    let b = rand_f32(&[6, 3], 2).slice(&[Slice::from(..).step(2)]); // every other row
    let p = (t, b);
    let (e, m) = f.call(&p);
    assert_same(&e, &body(&p).0);
    assert_matmul_close(&m, &p.0, &p.1);
    // The same signature with contiguous inputs replays the same program.
    let q = (rand_f32(&[3, 3], 3), rand_f32(&[3, 3], 4));
    let (e, m) = f.call(&q);
    assert_same(&e, &body(&q).0);
    assert_matmul_close(&m, &q.0, &q.1);
}

// ------------------------------------------------------------------ captures

#[test]
fn captures_are_constants_and_are_read() {
    let w = f32s(&[1.0, 2.0, 3.0], &[3]);
    let m = rand_f32(&[3, 3], 5).transpose(); // a strided capture too
    let mc = m.copy(); // the same values, contiguous
    let pre = |x: &Tensor| x * &w + w.sum_all();
    let body = |x: &Tensor| (pre(x), pre(x).matmul(&m), pre(x).matmul(&mc));
    let f = rune::jit(body);
    let g = rune::make_graph(body, &rand_f32(&[2, 3], 0));
    assert_eq!(g.inputs.len(), 1, "only x is an input");
    assert!(g.consts.len() >= 3, "w, m and mc are constants: {g}");
    assert!(g.to_string().contains("const (strided)"), "{g}");
    for seed in 0..3 {
        let x = rand_f32(&[2, 3], seed);
        let (p, y, yc) = f.call(&x);
        let pe = pre(&x);
        assert_close(&p, &pe); // w.sum_all() is a reduction
        assert_matmul_close(&yc, &pe, &mc);
        assert_matmul_close(&y, &pe, &m);
    }
    // A closed form: with x = 1, (1*w + 6) = [7, 8, 9].
    let f1 = rune::jit(|x: &Tensor| (x * &w + w.sum_all()).sum_all());
    assert_eq!(f1.call(&Tensor::ones(&[3], DType::F32)).item::<f32>(), 24.0);
    assert_eq!(f.trace_count(), 1);
}

#[test]
fn two_jits_with_the_same_structure_but_different_captures_differ() {
    // Their programs may share compiled code (same structure), but each binds
    // its own constants.
    let a = f32s(&[1.0, 2.0], &[2]);
    let b = f32s(&[10.0, 20.0], &[2]);
    let fa = rune::jit(|x: &Tensor| x + &a);
    let fb = rune::jit(|x: &Tensor| x + &b);
    let x = f32s(&[0.5, 0.5], &[2]);
    assert_eq!(fa.call(&x).to_vec::<f32>(), vec![1.5, 2.5]);
    assert_eq!(fb.call(&x).to_vec::<f32>(), vec![10.5, 20.5]);
    assert_eq!(fa.call(&x).to_vec::<f32>(), vec![1.5, 2.5]);
}

// ---------------------------------------------------------------- writebacks

#[test]
fn writeback_on_an_input_leaf_persists_across_calls() {
    // A step counter incremented in place each call, and an output that
    // reads the incremented value.
    let body = |(count, x): &(Tensor, Tensor)| {
        count.assign(&(count + 1.0));
        x * count
    };
    let f = rune::jit(body);
    let count = Tensor::scalar(0.0f32);
    let x = f32s(&[1.0, 2.0], &[2]);
    let p = (count.clone(), x.clone());
    for k in 1..=5 {
        let y = f.call(&p);
        assert_eq!(count.item::<f32>(), k as f32, "the counter after call {k}");
        assert_eq!(y.to_vec::<f32>(), vec![k as f32, 2.0 * k as f32]);
    }
    assert_eq!(f.trace_count(), 1);

    // Eager runs the same function to the same state.
    let eager = (Tensor::scalar(0.0f32), x.clone());
    for _ in 0..5 {
        body(&eager);
    }
    assert_same(&eager.0, &count);

    // A different tensor with the same signature: the writeback goes to it,
    // and leaves the first counter alone.
    let other = (Tensor::scalar(100.0f32), x.clone());
    assert_eq!(f.call(&other).to_vec::<f32>(), vec![101.0, 202.0]);
    assert_eq!(other.0.item::<f32>(), 101.0);
    assert_eq!(count.item::<f32>(), 5.0);
}

#[test]
fn writeback_of_an_integer_state_and_of_several_leaves() {
    // SGD-with-momentum-like state updated in place; the function returns
    // nothing but the loss.
    let body = |(w, v, step): &(Tensor, Tensor, Tensor)| {
        let g = w * 2.0; // d/dw of w^2
        v.assign(&(v * 0.9 + &g));
        w.assign(&(w - v * 0.1));
        step.assign(&(step + 1.0));
        w.square().sum_all()
    };
    let f = rune::jit(body);
    let state = (
        f32s(&[1.0, -2.0, 0.5], &[3]),
        Tensor::zeros(&[3], DType::F32),
        Tensor::scalar(0i32),
    );
    let eager = (state.0.copy(), state.1.copy(), Tensor::scalar(0i32));
    for _ in 0..4 {
        let l = f.call(&state);
        let le = body(&eager);
        assert_close(&l, &le);
        assert_close_tree(&state, &eager);
    }
    assert_eq!(state.2.item::<i32>(), 4);
}

#[test]
fn writeback_with_blit_and_reassignment_keeps_the_last_value() {
    let body = |x: &Tensor| {
        x.blit(&(x * 2.0));
        x.assign(&(x + 1.0)); // reads the blitted value
        x.sum_all()
    };
    let f = rune::jit(body);
    let x = f32s(&[1.0, 2.0], &[2]);
    assert_eq!(f.call(&x).item::<f32>(), 3.0 + 5.0);
    assert_eq!(x.to_vec::<f32>(), vec![3.0, 5.0]);
    assert_eq!(f.call(&x).item::<f32>(), 7.0 + 11.0);
    assert_eq!(x.to_vec::<f32>(), vec![7.0, 11.0]);
}

#[test]
fn writebacks_happen_after_the_outputs_are_computed() {
    // A copy taken before the assign keeps the old value; swapping two
    // leaves through a copy swaps them (a program with no kernels at all).
    let keep_old = rune::jit(|x: &Tensor| {
        let old = x.copy();
        x.assign(&(x + 1.0));
        old
    });
    let x = f32s(&[1.0, 2.0], &[2]);
    assert_eq!(keep_old.call(&x).to_vec::<f32>(), vec![1.0, 2.0]);
    assert_eq!(x.to_vec::<f32>(), vec![2.0, 3.0]);
    assert_eq!(keep_old.call(&x).to_vec::<f32>(), vec![2.0, 3.0]);
    assert_eq!(x.to_vec::<f32>(), vec![3.0, 4.0]);

    let swap = rune::jit(|(a, b): &(Tensor, Tensor)| {
        let t = a.copy();
        a.assign(b);
        b.assign(&t);
    });
    let p = (f32s(&[1.0, 2.0], &[2]), f32s(&[3.0, 4.0], &[2]));
    swap.call(&p);
    assert_eq!(
        (p.0.to_vec::<f32>(), p.1.to_vec::<f32>()),
        (vec![3.0, 4.0], vec![1.0, 2.0])
    );
    swap.call(&p);
    assert_eq!(
        (p.0.to_vec::<f32>(), p.1.to_vec::<f32>()),
        (vec![1.0, 2.0], vec![3.0, 4.0])
    );
}

#[test]
fn writeback_into_a_non_contiguous_input_leaf() {
    // The leaf is a transposed view of `base`: eager assign writes through
    // the view into base; jit must too (non-contiguous inputs are copied in,
    // but the writeback must land in the caller's tensor).
    let body = |x: &Tensor| {
        x.assign(&(x + 1.0));
        x.sum_all()
    };
    let f = rune::jit(body);
    let base = f32s(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], &[2, 3]);
    let view = base.transpose();
    f.call(&view);
    let eager_base = f32s(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], &[2, 3]);
    body(&eager_base.transpose());
    assert_same(&base, &eager_base);
    assert_eq!(base.to_vec::<f32>(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
}

#[test]

fn a_view_taken_before_an_assign_sees_the_update() {
    let body = |x: &Tensor| {
        let r = x.reshape(&[2, 1]);
        x.assign(&(x + 1.0));
        r
    };
    let f = rune::jit(body);
    let x = f32s(&[1.0, 2.0], &[2]);
    let xe = f32s(&[1.0, 2.0], &[2]);
    assert_same(&f.call(&x), &body(&xe)); // eager: [[2], [3]]; jit: [[1], [2]]
}

#[test]

fn the_same_tensor_as_two_leaves_sees_a_writeback_through_either() {
    let body = |(a, b): &(Tensor, Tensor)| {
        a.assign(&(a + 10.0));
        b * 1.0
    };
    let f = rune::jit(body);
    let a = f32s(&[1.0], &[1]);
    let ae = f32s(&[1.0], &[1]);
    assert_same(
        &f.call(&(a.clone(), a.clone())),
        &body(&(ae.clone(), ae.clone())),
    ); // eager 11, jit 1
    assert_same(&a, &ae);
}

#[test]
fn overlapping_views_as_two_leaves_of_a_writing_function_is_a_jit_error() {
    let f = rune::jit(|(a, b): &(Tensor, Tensor)| {
        a.assign(&(a + 1.0));
        b * 2.0
    });
    let x = f32s(&[1.0, 2.0], &[2]);
    check_jit_error(
        &f,
        &(x.clone(), x.narrow(0, 1, 1)),
        &["leaves 0 and 1", "copy"],
    );
    // Without writes, aliasing is harmless and allowed.
    let g = rune::jit(|(a, b): &(Tensor, Tensor)| a + b.sum_all());
    assert_eq!(
        g.call(&(x.clone(), x.narrow(0, 1, 1))).to_vec::<f32>(),
        vec![3.0, 4.0]
    );
}

// ---------------------------------------------------------------- JitErrors

#[test]
fn reading_a_traced_value_with_item_or_to_vec_is_a_jit_error() {
    let f = rune::jit(|x: &Tensor| {
        let s = x.sum_all().item::<f32>();
        x * s as f64
    });
    check_jit_error(
        &f,
        &f32s(&[1.0, 2.0], &[2]),
        &[
            "reads the value of a traced tensor",
            "item",
            "outside the jitted function",
        ],
    );
    let g = rune::jit(|x: &Tensor| {
        let v = x.to_vec::<f32>();
        x * v[0] as f64
    });
    check_jit_error(
        &g,
        &f32s(&[1.0, 2.0], &[2]),
        &["reads the value of a traced tensor", "to_vec"],
    );
    assert_eq!(f.trace_count(), 0, "a failed trace is not counted");
}

#[test]
fn a_data_dependent_cond_or_while_loop_predicate_is_a_jit_error() {
    let f = rune::jit(|x: &Tensor| {
        rune::cond(
            &x.sum_all().greater(&Tensor::scalar(0.0f32)),
            || x * 2.0,
            || x * 3.0,
        )
    });
    check_jit_error(&f, &f32s(&[1.0, 2.0], &[2]), &["cond", "where_"]);
    let g = rune::jit(|x: &Tensor| {
        rune::while_loop(
            |c: &Tensor| c.sum_all().less(&Tensor::scalar(10.0f32)),
            |c: &Tensor| c * 2.0,
            x,
        )
    });
    check_jit_error(&g, &f32s(&[1.0, 2.0], &[2]), &["while_loop"]);
    // The suggested fix works: where_ selects between branches.
    let h = rune::jit(|x: &Tensor| {
        Tensor::where_(
            &x.sum_all().greater(&Tensor::scalar(0.0f32)),
            &(x * 2.0),
            &(x * 3.0),
        )
    });
    assert_eq!(
        h.call(&f32s(&[1.0, 2.0], &[2])).to_vec::<f32>(),
        vec![2.0, 4.0]
    );
    assert_eq!(
        h.call(&f32s(&[-1.0, -2.0], &[2])).to_vec::<f32>(),
        vec![-3.0, -6.0]
    );
}

#[test]
fn a_cond_on_a_concrete_predicate_is_fine() {
    // A predicate that does not depend on traced values is an ordinary host
    // boolean: the branch is chosen at trace time.
    let yes = Tensor::scalar(true);
    let f = rune::jit(|x: &Tensor| rune::cond(&yes, || x * 2.0, || x * 3.0));
    assert_eq!(
        f.call(&f32s(&[1.0, 2.0], &[2])).to_vec::<f32>(),
        vec![2.0, 4.0]
    );
    // A fixed trip count loop over a traced carry is fine too (scan-like).
    let g = rune::jit(|x: &Tensor| {
        let mut c = x.clone();
        for _ in 0..3 {
            c = &c * 2.0;
        }
        c
    });
    assert_eq!(g.call(&f32s(&[1.0], &[1])).to_vec::<f32>(), vec![8.0]);
}

#[test]
fn assigning_to_a_captured_tensor_is_a_jit_error() {
    let captured = Tensor::zeros(&[2], DType::F32);
    let f = rune::jit(|x: &Tensor| {
        captured.assign(&(x * 2.0));
        x + 1.0
    });
    check_jit_error(
        &f,
        &f32s(&[1.0, 2.0], &[2]),
        &[
            "assigns to a tensor it captures",
            "compile-time constants",
            "inputs",
        ],
    );
    assert_eq!(
        captured.to_vec::<f32>(),
        vec![0.0, 0.0],
        "the capture was not written"
    );
}

#[test]
fn assigning_into_a_view_of_an_input_is_a_jit_error() {
    let f = rune::jit(|x: &Tensor| {
        x.slice(&[Slice::from(0..1)])
            .assign(&Tensor::ones(&[1], DType::F32));
        x * 2.0
    });
    let x = f32s(&[5.0, 6.0], &[2]);
    check_jit_error(&f, &x, &["assigns into a view", "input leaf itself"]);
    assert_eq!(
        x.to_vec::<f32>(),
        vec![5.0, 6.0],
        "the input was not written"
    );
    let g = rune::jit(|x: &Tensor| {
        x.transpose().assign(&Tensor::zeros(&[2, 2], DType::F32));
        x.sum_all()
    });
    check_jit_error(
        &g,
        &Tensor::ones(&[2, 2], DType::F32),
        &["assigns into a view"],
    );
}

#[test]
fn implicit_rng_inside_jit_is_a_jit_error() {
    let x = f32s(&[1.0, 2.0], &[2]);
    let f = rune::jit(|x: &Tensor| x + Tensor::rand(&[2], DType::F32));
    check_jit_error(
        &f,
        &x,
        &[
            "implicit random generator",
            "Tensor::rand",
            "rune::rng key as an input",
        ],
    );
    let g = rune::jit(|x: &Tensor| x + Tensor::randn(&[2], DType::F32));
    check_jit_error(&g, &x, &["Tensor::randn", "rune::rng"]);
    let h = rune::jit(|x: &Tensor| x + Tensor::randint(0, 5, &[2], DType::I32).cast(DType::F32));
    check_jit_error(&h, &x, &["Tensor::randint", "rune::rng"]);
}

#[test]
fn a_captured_rng_key_is_a_jit_error() {
    let key = rng::key(42);
    let f = rune::jit(|x: &Tensor| x + rng::uniform(&key, &[2], DType::F32));
    check_jit_error(
        &f,
        &f32s(&[1.0, 2.0], &[2]),
        &[
            "key that does not depend on its inputs",
            "captured rune::rng key",
            "Pass the key as an input",
        ],
    );
    // A key derived from a capture only (split inside jit) is as constant.
    let g = rune::jit(|x: &Tensor| x + rng::normal(&rng::split(&key, 2).get(1), &[2], DType::F32));
    check_jit_error(&g, &f32s(&[1.0, 2.0], &[2]), &["captured rune::rng key"]);
    // The supported form: the key as an input leaf.
    let h = rune::jit(|(k, x): &(Tensor, Tensor)| x + rng::uniform(k, &[2], DType::F32));
    let p = (key.clone(), f32s(&[1.0, 2.0], &[2]));
    assert_same(&h.call(&p), &(&p.1 + rng::uniform(&key, &[2], DType::F32)));
}

#[test]
fn make_graph_raises_the_jit_error_as_a_panic() {
    let m = panic_message(|| {
        rune::make_graph(
            |x: &Tensor| x * x.sum_all().item::<f32>() as f64,
            &f32s(&[1.0], &[1]),
        );
    });
    assert!(m.contains("reads the value of a traced tensor"), "{m}");
}

#[test]
fn other_panics_inside_jit_propagate_unchanged() {
    // A programmer error (shape mismatch) is not a JitError: it propagates
    // as the op's own panic from both call and try_call.
    let f = rune::jit(|x: &Tensor| x + Tensor::ones(&[3], DType::F32));
    let m = panic_message(|| {
        let _ = f.try_call(&f32s(&[1.0, 2.0], &[2]));
    });
    assert!(m.contains("add") || m.contains("broadcast"), "{m}");
    assert_eq!(rune::nx::trace::depth(), 0);
    assert_eq!(
        f.call(&f32s(&[1.0, 2.0, 3.0], &[3])).to_vec::<f32>(),
        vec![2.0, 3.0, 4.0]
    );
}

// ------------------------------------------------------------------ devices

#[test]
fn jit_with_devices() {
    let body = |x: &Tensor| x * 2.0;
    let x = f32s(&[1.0, 2.0], &[2]);
    let cpu = rune::jit_with(body, rune::JitOpts::default());
    assert_eq!(cpu.call(&x).to_vec::<f32>(), vec![2.0, 4.0]);
    let cpu = rune::jit_with(
        body,
        rune::JitOpts {
            device: "CPU".into(),
            donate: true,
        },
    );
    assert_eq!(cpu.call(&x).to_vec::<f32>(), vec![2.0, 4.0]);
    assert_eq!(
        x.to_vec::<f32>(),
        vec![1.0, 2.0],
        "donate on the CPU consumes nothing"
    );
    assert_eq!(rune::JitOpts::default().device, "CPU");
    assert!(!rune::JitOpts::default().donate);

    let opts = |d: &str| rune::JitOpts {
        device: d.into(),
        donate: false,
    };
    let m = panic_message(|| {
        rune::jit_with(body, opts("TPU"));
    });
    assert!(m.contains("\"TPU\""), "names the device: {m}");
    assert!(m.contains("unknown device"), "{m}");
    let m = panic_message(|| {
        rune::jit_with(body, opts("METAL"));
    });
    assert!(m.contains("METAL") && m.contains("macOS only"), "{m}");
    let m = panic_message(|| {
        rune::jit_with(body, opts("CUDA"));
    });
    assert!(m.contains("CUDA") && m.contains("not available"), "{m}");
    let m = panic_message(|| {
        rune::jit_with(body, opts("cpu"));
    });
    assert!(
        m.contains("\"cpu\""),
        "device names are case-sensitive: {m}"
    );
}

// ------------------------------------------------ transformations inside jit

fn loss(w: &Tensor) -> Tensor {
    (w.sin() * w + w.exp() * 0.5).sum_all()
}

#[test]
fn grad_and_value_and_grad_inside_jit_equal_eager() {
    let f = rune::jit(|w: &Tensor| rune::grad(loss, w));
    let g = rune::jit(|w: &Tensor| rune::value_and_grad(loss, w));
    for seed in 0..3 {
        let w = rand_f64(&[5], seed);
        assert_close(&f.call(&w), &rune::grad(loss, &w));
        let (v, dw) = g.call(&w);
        let (ve, dwe) = rune::value_and_grad(loss, &w);
        assert_close(&v, &ve);
        assert_close(&dw, &dwe);
        // And the closed form d/dw = sin w + w cos w + exp(w)/2 (to rounding).
        let wv = w.to_vec::<f64>();
        for (i, d) in dw.to_vec::<f64>().iter().enumerate() {
            let x = wv[i];
            assert!((d - (x.sin() + x * x.cos() + x.exp() * 0.5)).abs() < 1e-12);
        }
    }
    assert_eq!(f.trace_count(), 1);
}

#[test]
fn grad_of_a_structured_loss_with_matmuls_inside_jit_equals_eager() {
    let x = rand_f32(&[8, 4], 11);
    let y = rand_f32(&[8, 2], 12);
    let lossp = |p: &(Tensor, Tensor)| ((x.matmul(&p.0) + &p.1).tanh() - &y).square().mean_all();
    let f = rune::jit(|p: &(Tensor, Tensor)| rune::value_and_grad(lossp, p));
    let p = (rand_f32(&[4, 2], 13), rand_f32(&[2], 14));
    let ((l, g), (le, ge)) = (f.call(&p), rune::value_and_grad(lossp, &p));
    assert_close(&l, &le);
    assert_close_tree(&g, &ge);
}

#[test]
fn hessian_inside_jit_equals_eager() {
    let h = |x: &Tensor| (x.sin() * x.sum_all()).sum_all();
    let f = rune::jit(|x: &Tensor| rune::hessian(h, x));
    let x = rand_f64(&[3], 3);
    assert_close(&f.call(&x), &rune::hessian(h, &x));
    // Closed form for sum(sin x) * sum(x): H_ij = cos x_i + cos x_j - [i=j] sin x_i * S.
    let xv = x.to_vec::<f64>();
    let s: f64 = xv.iter().sum();
    let got = f.call(&x).to_vec::<f64>();
    for i in 0..3 {
        for j in 0..3 {
            let want = xv[i].cos() + xv[j].cos() - if i == j { xv[i].sin() * s } else { 0.0 };
            assert!((got[i * 3 + j] - want).abs() < 1e-12, "H[{i}][{j}]");
        }
    }
}

#[test]
fn vmap_and_jvp_inside_jit_equal_eager() {
    let per_row = |r: &Tensor| (r.exp() / r.exp().sum_all()).square();
    let f = rune::jit(|x: &Tensor| rune::vmap(per_row, x));
    let x = rand_f32(&[4, 5], 21);
    assert_close(&f.call(&x), &rune::vmap(per_row, &x));

    let g = rune::jit(|(x, t): &(Tensor, Tensor)| rune::jvp(|x: &Tensor| x.tanh() * x, x, t));
    let p = (rand_f64(&[6], 22), rand_f64(&[6], 23));
    let ((y, dy), (ye, dye)) = (g.call(&p), rune::jvp(|x: &Tensor| x.tanh() * x, &p.0, &p.1));
    assert_close(&y, &ye);
    assert_close(&dy, &dye);

    // vmap of grad (per-example gradients) inside jit.
    let w = rand_f32(&[5], 24);
    let pe = |(w, x): &(Tensor, Tensor)| {
        rune::vmap_with(
            |(w, r): &(Tensor, Tensor)| rune::grad(|w: &Tensor| (r * w).sin().sum_all(), w),
            &(w.clone(), x.clone()),
            rune::VmapOpts {
                in_axes: Some(vec![None, Some(0)]),
                out_axis: 0,
            },
        )
    };
    let h = rune::jit(pe);
    let q = (w, x);
    assert_close(&h.call(&q), &pe(&q));
}

#[test]
fn scan_inside_jit_equals_eager() {
    let rnn = |(h0, xs, w): &(Tensor, Tensor, Tensor)| {
        rune::scan(
            |h: &Tensor, x: &Tensor| {
                let h = (h.matmul(w) + x).tanh();
                (h.clone(), h.sum_all())
            },
            h0,
            xs,
        )
    };
    let f = rune::jit(rnn);
    let p = (
        rand_f32(&[3], 1),
        rand_f32(&[10, 3], 2),
        rand_f32(&[3, 3], 3),
    );
    let ((h, ys), (he, yse)) = (f.call(&p), rnn(&p));
    assert_close(&h, &he);
    assert_close(&ys, &yse);
    // Gradient through the scan, inside jit.
    let lossf = |p: &(Tensor, Tensor, Tensor)| rnn(p).1.sum_all();
    let g = rune::jit(|p: &(Tensor, Tensor, Tensor)| rune::grad(lossf, p));
    assert_close_tree(&g.call(&p), &rune::grad(lossf, &p));
}

#[test]
fn rng_samplers_inside_jit_equal_eager() {
    type Draws = Vec<Tensor>;
    let draw = |k: &Tensor| -> Draws {
        let ks = rng::split(k, 9);
        let logits = f32s(&[0.1, 2.0, -1.0, 0.5], &[4]);
        vec![
            rng::bits(&ks.get(0), &[7]),
            rng::uniform(&ks.get(1), &[3, 5], DType::F32),
            rng::normal(&ks.get(2), &[33], DType::F32),
            rng::normal(&ks.get(2), &[4], DType::F64),
            rng::bernoulli(&ks.get(3), 0.3, &[10]),
            rng::randint(&ks.get(4), -3, 9, &[12]),
            rng::categorical(&ks.get(5), &logits.broadcast_to(&[6, 4]), -1),
            rng::permutation(&ks.get(6), 10),
            rng::truncated_normal(&ks.get(7), -1.0, 2.0, &[9], DType::F32),
            rng::gumbel(&ks.get(8), &[5], DType::F32),
            rng::fold_in(k, 7),
            rng::shuffle(&ks.get(0), &f32s(&[1.0, 2.0, 3.0, 4.0, 5.0], &[5]), 0),
        ]
    };
    let f = rune::jit(draw);
    let key = rng::key(2024);
    // The first call may run eagerly while the C compiles
    // (`tolk::Options::quick_first`); the second runs the kernels.
    let _ = f.call(&key);
    let got = f.call(&key);
    let want = draw(&key);
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        assert_eq!(a.dtype(), b.dtype(), "draw {i}");
        assert_eq!(bits(a), bits(b), "draw {i}:\n jit   {a}\n eager {b}");
    }
}

// ------------------------------------------------ jit under transformations

#[test]
fn jit_under_grad_vjp_vmap_and_jvp_equals_f() {
    let body = |x: &Tensor| (x.sin() * x).sum_all();
    let f = rune::jit(body);
    let x = rand_f64(&[4], 31);
    assert_same(
        &rune::grad(|x: &Tensor| f.call(x), &x),
        &rune::grad(body, &x),
    );
    let (v, t) = (rand_f64(&[4], 32), rand_f64(&[4], 33));
    let (a, da) = rune::jvp(|x: &Tensor| f.call(x), &v, &t);
    let (b, db) = rune::jvp(body, &v, &t);
    assert_same(&a, &b);
    assert_same(&da, &db);
    let rows = rand_f64(&[3, 4], 34);
    assert_same(
        &rune::vmap(|r: &Tensor| f.call(r), &rows),
        &rune::vmap(body, &rows),
    );
    let ct = Tensor::scalar(2.0f64);
    let (y, vx) = rune::vjp(|x: &Tensor| f.call(x), &x, &ct);
    let (ye, vxe) = rune::vjp(body, &x, &ct);
    assert_same(&y, &ye);
    assert_same(&vx, &vxe);
    // try_call under a transformation works too.
    let g2 = rune::grad(|x: &Tensor| f.try_call(x).unwrap(), &x);
    assert_same(&g2, &rune::grad(body, &x));
    // Under a transformation f runs directly: nothing was traced for jit.
    assert_eq!(f.trace_count(), 0);
    // And the jitted function itself still works afterwards.
    assert_same(&f.call(&x), &body(&x));
    assert_eq!(f.trace_count(), 1);
}

#[test]
fn jit_under_with_debug_sees_the_operations() {
    let body = |x: &Tensor| x.sin().exp() + 1.0;
    let f = rune::jit(body);
    let x = rand_f32(&[3], 41);
    let mut log = Vec::new();
    let y = rune::with_debug_to(&mut log, || f.call(&x));
    assert_same(&y, &body(&x));
    let log = String::from_utf8(log).unwrap();
    assert!(
        log.contains("sin [3] f32") || log.contains("sin [3] F32"),
        "{log}"
    );
    assert!(log.contains("exp"), "{log}");
    assert!(log.contains("add"), "{log}");
}

#[test]
fn jit_under_an_outer_jit_is_inlined() {
    let inner = rune::jit(|x: &Tensor| x.exp() * 2.0);
    let body = |x: &Tensor| inner.call(x) + x.cos();
    let outer = rune::jit(body);
    let x = rand_f32(&[5], 51);
    assert_same(&outer.call(&x), &(x.exp() * 2.0 + x.cos()));
    assert_eq!(
        inner.trace_count(),
        0,
        "the inner jit ran directly under the outer trace"
    );
    assert_eq!(outer.trace_count(), 1);
    let g = rune::make_graph(body, &x);
    assert!(
        g.to_string().contains("exp"),
        "the inner function's ops are staged in the outer graph: {g}"
    );
}

// -------------------------------------------------------- rng keys as inputs

#[test]
fn rng_keys_passed_as_inputs_give_fresh_eager_identical_draws() {
    let body = |k: &Tensor| {
        (
            rng::uniform(k, &[6], DType::F32),
            rng::normal(k, &[6], DType::F32),
        )
    };
    let f = rune::jit(body);
    let base = rng::key(7);
    let mut seen: Vec<Vec<u64>> = Vec::new();
    for i in 0..4 {
        let k = rng::fold_in(&base, i);
        let (u, n) = f.call(&k);
        let (ue, ne) = body(&k);
        assert_same(&u, &ue);
        assert_same(&n, &ne);
        assert!(
            !seen.contains(&bits(&u)),
            "call {i} drew the same values as an earlier call"
        );
        seen.push(bits(&u));
    }
    assert_eq!(
        f.trace_count(),
        1,
        "a new key is a new value, not a new signature"
    );

    // A key threaded through a loop: split inside the jitted step.
    let step = rune::jit(|k: &Tensor| {
        let ks = rng::split(k, 2);
        (ks.get(0), rng::uniform(&ks.get(1), &[3], DType::F64))
    });
    let (mut k, mut ke) = (rng::key(99), rng::key(99));
    let mut draws = Vec::new();
    for _ in 0..3 {
        let (k2, d) = step.call(&k);
        let ks = rng::split(&ke, 2);
        let de = rng::uniform(&ks.get(1), &[3], DType::F64);
        assert_same(&d, &de);
        assert_same(&k2, &ks.get(0));
        draws.push(d.to_vec::<f64>());
        k = k2;
        ke = ks.get(0);
    }
    assert_ne!(draws[0], draws[1]);
    assert_ne!(draws[1], draws[2]);
}

// ------------------------------------------------------ jit_stats, make_graph

#[test]
fn jit_stats_are_zero_on_the_cpu() {
    let f = rune::jit(|(a, b): &(Tensor, Tensor)| a.matmul(b).relu());
    let p = (rand_f32(&[16, 16], 1), rand_f32(&[16, 16], 2));
    for _ in 0..3 {
        f.call(&p);
    }
    let zero = rune::JitStats {
        bytes_to_device: 0,
        bytes_from_device: 0,
        resident_bytes: 0,
    };
    assert_eq!(
        rune::jit_stats(),
        zero,
        "the CPU zero-copy path moves and counts nothing"
    );
    rune::reset_jit_stats();
    assert_eq!(rune::jit_stats(), zero);
    assert_eq!(rune::JitStats::default(), zero);
}

#[test]
fn make_graph_prints_one_primitive_a_line() {
    let c = f32s(&[1.0, 2.0, 3.0], &[3]);
    let body = |(x, y): &(Tensor, Tensor)| {
        x.assign(&(x * 2.0));
        (x.sin() + &c).matmul(y).sum_all()
    };
    let p = (
        Tensor::zeros(&[2, 3], DType::F32),
        Tensor::zeros(&[3, 4], DType::F32),
    );
    let g = rune::make_graph(body, &p);
    assert!(
        p.0.to_vec::<f32>().iter().all(|&v| v == 0.0),
        "make_graph runs nothing"
    );
    let text = g.to_string();
    let lines: Vec<&str> = text.lines().collect();
    // Header with the typed inputs, then one line per constant, one per
    // equation, one per writeback, then the outputs.
    assert!(lines[0].starts_with("{ lambda"), "{text}");
    assert!(
        lines[0].contains("[2, 3]") && lines[0].contains("[3, 4]"),
        "{text}"
    );
    assert!(lines.last().unwrap().contains("in ("), "{text}");
    assert_eq!(
        lines.len(),
        2 + g.consts.len() + g.eqns.len() + g.writebacks.len(),
        "{text}"
    );
    assert_eq!(g.writebacks.len(), 1);
    assert_eq!(g.inputs.len(), 2);
    assert_eq!(g.outputs.len(), 1);
    for (line, e) in lines[1 + g.consts.len()..].iter().zip(&g.eqns) {
        assert!(
            line.contains(&format!("= {}", e.name())),
            "{line} is {}",
            e.name()
        );
    }
    for name in ["sin", "dot_general", "sum"] {
        assert!(
            lines.iter().any(|l| l.contains(name)),
            "{name} missing:\n{text}"
        );
    }
    assert!(text.contains("<-"), "the writeback is printed: {text}");
}

// ------------------------------------------------------ training trajectory

#[derive(Ptree, Clone)]
struct Mlp {
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
}

fn mlp_loss(p: &Mlp, x: &Tensor, labels: &Tensor) -> Tensor {
    let h = (x.matmul(&p.w1) + &p.b1).relu();
    let logits = h.matmul(&p.w2) + &p.b2;
    -(logits.log_softmax(-1) * labels)
        .sum(&[-1], false)
        .mean_all()
}

fn sgd_step((p, x, labels): &(Mlp, Tensor, Tensor)) -> (Mlp, Tensor) {
    let (l, g) = rune::value_and_grad(|p: &Mlp| mlp_loss(p, x, labels), p);
    (p.map2_leaves(&g, &mut |w, g| w - g * 0.1), l)
}

/// The largest `|a - b| / (1 + |b|)` over the elements of two f32 trees.
fn max_rel_diff<P: Ptree>(a: &P, b: &P) -> f64 {
    let mut m = 0.0f64;
    for (x, y) in a.leaves().iter().zip(&b.leaves()) {
        for (u, v) in x.to_vec::<f32>().iter().zip(y.to_vec::<f32>()) {
            m = m.max((*u as f64 - v as f64).abs() / (1.0 + (v as f64).abs()));
        }
    }
    m
}

/// Twenty SGD steps of a 4-16-3 MLP on 32 examples, jitted (grad inside the
/// jitted step) and eager, from the same start: every jitted step from the
/// eager state equals the eager step within `assert_close`'s bound, and the
/// whole jitted trajectory (every parameter and loss after every step)
/// stays within 256 eps (3e-5, relative to 1 + |value|) of the eager one.
///
/// Why not bit for bit: the matmuls run through the same eager GEMM on the
/// same contiguous operands, and every elementwise primitive is bit-exact,
/// but the reductions (the bias gradients, log_softmax's max and sum, the
/// mean loss) compile as kernels that sum f32 in f64, while eager sums in
/// f32: each step differs by a few ulp (`assert_close`: 64 eps). Over the
/// trajectory such a difference is carried forward through the SGD map
/// `p -> p - lr * grad(p)`, whose Lipschitz constant `1 + lr * |H|` is
/// close to 1 for this small, smooth model at lr = 0.1, so 20 steps
/// accumulate at most about 20 per-step differences: 256 eps covers that
/// with room, and a wrong gradient or a stale parameter would be off by
/// orders of magnitude more (the parameters move by ~1e-2 a step).
#[test]
fn mlp_training_trajectory_under_jit_equals_eager() {
    let x = rand_f32(&[32, 4], 61);
    let cls: Vec<i32> = (0..32).map(|i| (i * 7 % 3) as i32).collect();
    let labels = Tensor::from_vec(cls, &[32]).one_hot(3).cast(DType::F32);
    let init = Mlp {
        w1: rand_f32(&[4, 16], 62) * 0.5,
        b1: Tensor::zeros(&[16], DType::F32),
        w2: rand_f32(&[16, 3], 63) * 0.5,
        b2: Tensor::zeros(&[3], DType::F32),
    };
    let step = rune::jit(sgd_step);
    let (mut pj, mut pe) = (init.clone(), init.clone());
    let mut losses = Vec::new();
    let mut worst = 0.0f64;
    let bound = 256.0 * f32::EPSILON as f64;
    for i in 0..20 {
        // One jitted step from the eager state: a per-step comparison.
        let (n1, l1) = step.call(&(pe.clone(), x.clone(), labels.clone()));
        let (ne, le) = sgd_step(&(pe, x.clone(), labels.clone()));
        assert_close(&l1, &le);
        assert_close_tree(&n1, &ne);
        // The jitted trajectory.
        let (nj, lj) = step.call(&(pj, x.clone(), labels.clone()));
        let d = max_rel_diff(&nj, &ne).max(max_rel_diff(&lj, &le));
        assert!(
            d <= bound,
            "step {i}: the jitted trajectory is {d:e} from eager (bound {bound:e})"
        );
        worst = worst.max(d);
        losses.push(le.item::<f32>());
        pj = nj;
        pe = ne;
    }
    eprintln!("mlp trajectory: largest relative difference from eager over 20 steps {worst:e}");
    assert_eq!(step.trace_count(), 1);
    assert!(
        losses[19] < losses[0],
        "training makes progress: {losses:?}"
    );
    // The parameters really moved (the comparison is not of constants).
    assert!(max_rel_diff(&pe, &init) > 1e-3);
}

/// f32 sin and cos compile to the vectorized polynomial with a re-run of
/// the kernel through libm when any input (loaded or computed inside the
/// kernel) is beyond |x| = 32768, inf or NaN: the results equal eager's bit
/// for bit either way, on one thread's range or split across the pool,
/// including a reduction kernel (compared within the reductions' bound).
#[test]
fn sin_cos_beyond_the_polynomial_range_match_eager() {
    let f = |x: &Tensor| {
        let y = &(&x.sin() * 2.0) + &x.cos();
        // The argument of this sin is computed in the kernel: mostly large.
        &y + &(x * 1.0e5).sin()
    };
    let jf = rune::jit(f);
    for n in [37usize, 1000, 200_000] {
        let small = data(n, 7);
        let mut mixed = small.clone();
        for (i, v) in [1e5f32, -4e4, f32::INFINITY, f32::NAN, 32768.5, 1e30]
            .into_iter()
            .enumerate()
        {
            let at = (i * 7919) % n;
            mixed[at] = v;
        }
        for v in [&small, &mixed] {
            let x = f32s(v, &[n]);
            assert_same(&jf.call(&x), &f(&x));
            let g = |x: &Tensor| (&(x * 10.0).sin() + &x.cos()).tanh();
            assert_same(&rune::jit(g).call(&x), &g(&x));
        }
    }
    // A reduction whose summand calls sin (its kernel re-runs too).
    let r = |x: &Tensor| (x * 4.0e4).sin().sum(&[1], false);
    let x = rand_f32(&[8, 33], 3);
    assert_close(&rune::jit(r).call(&x), &r(&x));
}

/// f32 exp (and sigmoid, through it) compiles to a faster form for every
/// input but NaN and x > 68.9, with a re-run through the exact form
/// otherwise: equal to eager bit for bit on both sides of every edge
/// (underflow to subnormals and 0, -inf, overflow, NaN of either sign),
/// loaded or computed in the kernel, on one thread's range or split across
/// the pool.
#[test]
fn exp_on_both_sides_of_its_fast_range_matches_eager() {
    let f = |x: &Tensor| x.exp();
    // The argument of this exp is computed in the kernel.
    let g = |x: &Tensor| &(x * 0.5).exp() * 3.0;
    // sigmoid takes the fast exp of -|x|.
    let h = |x: &Tensor| x.sigmoid();
    let (jf, jg, jh) = (rune::jit(f), rune::jit(g), rune::jit(h));
    let softmax = |x: &Tensor| {
        let e = (x - &x.max(&[1], true)).exp();
        &e / &e.sum(&[1], true)
    };
    let edges = [
        f32::NEG_INFINITY,
        -1e30,
        -105.0,
        -104.0,
        -103.9,
        -100.0,
        -87.5,
        -86.5,
        -1e-40,
        68.9,
        137.8,
        69.0,
        69.5,
        88.7,
        89.0,
        1e30,
        f32::INFINITY,
        f32::NAN,
        -f32::NAN,
    ];
    for n in [37usize, 1000, 200_000] {
        let small = data(n, 11);
        let x = f32s(&small, &[n]);
        assert_same(&jf.call(&x), &f(&x));
        assert_same(&jg.call(&x), &g(&x));
        assert_same(&jh.call(&x), &h(&x));
        // One edge at a time (a NaN would send the whole range to the
        // exact form), twice, far apart.
        for v in edges {
            let mut one = small.clone();
            one[n / 3] = v;
            one[n - 1] = v;
            let x = f32s(&one, &[n]);
            assert_same(&jf.call(&x), &f(&x));
            assert_same(&jg.call(&x), &g(&x));
            assert_same(&jh.call(&x), &h(&x));
        }
    }
    // A masked softmax: -inf on the fast path, in a reduction's kernel too.
    let mut m = data(8 * 40, 5);
    for r in 0..8 {
        for c in (r + 1)..40 {
            m[r * 40 + c] = f32::NEG_INFINITY;
        }
    }
    let x = f32s(&m, &[8, 40]);
    assert_close(&rune::jit(softmax).call(&x), &softmax(&x));
}

// ------------------------------------------------------ invariant values

/// `f` staged and compiled without the disk cache, every map writing an
/// output streamed whatever its size (`stream_min_bytes: Some(0)`).
fn compiled_streaming<P: Ptree, Q: Ptree>(f: impl Fn(&P) -> Q, p: &P) -> tolk::Compiled {
    compiled_uncached(f, p, Some(0))
}

/// `f` compiled for `p` without the disk cache, maps streaming their output
/// from `stream_min_bytes`.
fn compiled_uncached<P: Ptree, Q: Ptree>(
    f: impl Fn(&P) -> Q,
    p: &P,
    stream_min_bytes: Option<usize>,
) -> tolk::Compiled {
    let opts = tolk::Options {
        use_cache: false,
        stream_min_bytes,
        quick_first: false,
    };
    tolk::compile_with(rune::make_graph(f, p), &opts).expect("compiles")
}

/// Values that are the same at every point of a kernel's loops (a scalar
/// input broadcast, then squared twice and put through a sigmoid, in each
/// float dtype; an iota along a length-1 axis) are computed once before the
/// loops and equal eager bit for bit, in maps, reductions and streamed
/// outputs, at lengths from 1 to beyond one thread's part. Broadcasts into
/// an empty shape compute nothing (the hoisted load would read an element
/// the loops never read).
#[test]
fn loop_invariant_values_equal_eager() {
    for dt in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for n in [1usize, 17, 70_001] {
            let f = move |(s, x): &(Tensor, Tensor)| {
                let c = s.broadcast_to(&[n]).cast(dt);
                let chain = (&c * &c * (&c * &c)).sigmoid();
                let sum = (&chain + x.cast(dt)).sum_all();
                (chain.clone(), chain * x.cast(dt), sum)
            };
            let p = (Tensor::from_slice(&[0.3f32], &[1]), f32s(&data(n, 7), &[n]));
            let (a, b, c) = rune::jit(f).call(&p);
            let (ea, eb, ec) = f(&p);
            assert_same(&a, &ea);
            assert_same(&b, &eb);
            assert_close(&c.cast(DType::F64), &ec.cast(DType::F64));
            let compiled = compiled_streaming(f, &p);
            assert!(
                compiled
                    .kernel_sources
                    .iter()
                    .any(|(_, c)| c.contains("if (lo >= hi) return 0;")),
                "{dt} n = {n}: no kernel computes the invariant chain before its loops"
            );
            let got = compiled.program.run(&p.leaves());
            assert_same(&got[0], &ea);
            assert_same(&got[1], &eb);
        }
    }
    // Empty: [1, 0] broadcast to [5, 0].
    let f = |s: &Tensor| (s.broadcast_to(&[5, 0]) * 2.0).exp();
    let s = Tensor::zeros(&[1, 0], DType::F32);
    assert_same(&rune::jit(f).call(&s), &f(&s));
}

// --------------------------------------------------- multi-output maps

/// Maps over one shape where one reads another's output at its own element
/// run as one loop storing every value the rest of the program reads: a
/// chain whose intermediate values are also outputs, and an optimizer
/// update (moments, then the parameter from them), compile to one kernel
/// each and equal eager bit for bit, at lengths on both sides of a thread's
/// part and with f32 exp beyond its fast form's range (the exact re-run
/// rewrites every output).
#[test]
fn maps_that_read_each_other_run_as_one_kernel_equal_to_eager() {
    let chain = |x: &Tensor| {
        let a = x.sin();
        let b = &a * 2.0 + 1.0;
        let c = b.exp();
        let d = (&c * &a).tanh();
        (a, c, d)
    };
    let adam = |(p, m, v, g): &(Tensor, Tensor, Tensor, Tensor)| {
        let m = m * 0.9 + g * 0.1;
        let v = v * 0.999 + g.square() * 0.001;
        let p = p - &m / (v.sqrt() + 1e-8) * 0.01;
        (p, m, v)
    };
    for n in [1usize, 17, 70_001] {
        let mut xs = data(n, 5);
        if n > 17 {
            xs[n / 3] = 60.0; // exp(2 sin(60) + 1) is in range; sin's guard is not hit
            xs[n - 1] = 1e30; // beyond sin's fast range: the exact form re-runs
        }
        let x = f32s(&xs, &[n]);
        let compiled = compiled_uncached(chain, &x, None);
        assert_eq!(
            compiled.program.num_kernels(),
            1,
            "n = {n}: the chain is one loop"
        );
        let got = compiled.program.run(&[x.clone()]);
        let (a, c, d) = chain(&x);
        for (g, e) in got.iter().zip([&a, &c, &d]) {
            assert_same(g, e);
        }
        let (ja, jc, jd) = rune::jit(chain).call(&x);
        assert_same(&ja, &a);
        assert_same(&jc, &c);
        assert_same(&jd, &d);

        let q = (
            f32s(&data(n, 1), &[n]),
            f32s(&data(n, 2), &[n]),
            f32s(&data(n, 3), &[n]).abs(),
            f32s(&data(n, 4), &[n]),
        );
        let compiled = compiled_uncached(adam, &q, None);
        assert_eq!(
            compiled.program.num_kernels(),
            1,
            "n = {n}: the update is one loop"
        );
        let got = compiled.program.run(&q.leaves());
        for (g, e) in got.iter().zip(adam(&q).leaves()) {
            assert_same(g, &e);
        }
    }
}

/// A map that reads another's output away from its own element (a roll,
/// a reversal) does not merge with it: the merged loop would read an
/// element it has not written yet. Results equal eager.
#[test]
fn maps_reading_another_map_elsewhere_stay_correct() {
    let f = |x: &Tensor| {
        let a = x.sin() * 3.0;
        let rolled = a.roll(1, 0);
        let flipped = a.flip(&[0]);
        (&a + rolled * &a, (flipped + 1.0).exp(), a)
    };
    for n in [2usize, 33, 70_001] {
        let x = f32s(&data(n, 9), &[n]);
        let (a, b, c) = rune::jit(f).call(&x);
        let (ea, eb, ec) = f(&x);
        assert_same(&a, &ea);
        assert_same(&b, &eb);
        assert_same(&c, &ec);
    }
}

// ------------------------------------------------ eager first calls

/// A long chain of transcendentals over a short vector and its gradient:
/// C that takes long to compile, kernels that take little to run, every
/// kernel a map. Such a program is returned while its C compiles, its first
/// call runs eagerly and every later one the compiled kernels (waiting for
/// them): all equal eager bit for bit. With a reduction among its kernels,
/// over a long vector, or short, a program compiles before its first call.
#[test]
fn a_long_cheap_program_runs_its_first_call_eagerly_with_eagers_bits() {
    fn chain(x: &Tensor, n: usize) -> Tensor {
        (0..n).fold(x.clone(), |h, i| match i % 6 {
            0 => h.sin(),
            1 => &h * 0.9 + 0.05,
            2 => h.tanh(),
            3 => (-&h * &h).exp(),
            4 => (&h * &h).log1p(),
            _ => h.sigmoid(),
        })
    }
    let grad_of_chain = |x: &Tensor| grad(|x: &Tensor| chain(x, 120).sum_all(), x);
    let compile = |g| {
        let opts = tolk::Options {
            use_cache: false,
            stream_min_bytes: None,
            quick_first: true,
        };
        tolk::compile_with(g, &opts).expect("compiles")
    };
    let x = f32s(&data(256, 13), &[256]);
    let want = grad_of_chain(&x);
    let c = compile(rune::make_graph(grad_of_chain, &x));
    assert!(c.eager_first);
    let first = c.program.run(std::slice::from_ref(&x));
    let second = c.program.run(std::slice::from_ref(&x));
    assert_eq!(bits(&first[0]), bits(&want));
    assert_eq!(bits(&second[0]), bits(&want));
    // Through jit: the same, call after call.
    let jg = jit(grad_of_chain);
    for _ in 0..3 {
        assert_eq!(bits(&jg.call(&x)), bits(&want));
    }
    // A reduction among the kernels (the chain's sum is an output), too
    // much work for its C (a million elements) or a short chain: compiled
    // first.
    let with_sum = |x: &Tensor| {
        let y = chain(x, 120);
        (y.sum_all(), y)
    };
    assert!(!compile(rune::make_graph(with_sum, &x)).eager_first);
    let long = Tensor::zeros(&[1 << 20], DType::F32);
    assert!(!compile(rune::make_graph(grad_of_chain, &long)).eager_first);
    let short = |x: &Tensor| grad(|x: &Tensor| chain(x, 6).sum_all(), x);
    assert!(!compile(rune::make_graph(short, &x)).eager_first);
}

// ------------------------------------------------------ streamed outputs

/// Maps that write a program output in a pass larger than the last-level
/// cache store it past the cache (`tk_stream`, from a tile in L1). Forced
/// on here for every size (`stream_min_bytes: Some(0)`), the outputs equal
/// eager bit for bit: every dtype's element size, lengths that leave ragged
/// tiles and lines, outputs split across threads at unaligned part
/// boundaries, an output at an offset in no line (a length-3 prefix before
/// it would be one if outputs shared storage; they do not, but the kernel
/// must not care), and f32 exp on both sides of its fast form's range
/// (the exact re-run streams too).
#[test]
fn streamed_outputs_equal_eager_bit_for_bit() {
    let f = |(x, y): &(Tensor, Tensor)| {
        let e = x.exp() * y + 1.0;
        let d = x.cast(DType::F64) * 3.0 - y.cast(DType::F64);
        let h = (x.cast(DType::F16) + y.cast(DType::F16)).cast(DType::F16);
        let i = (x * 1000.0).cast(DType::I32).neg();
        let b = x.greater(y);
        let u = (x * 100.0 + 100.0).cast(DType::U8);
        (e, d, h, i, b, u)
    };
    for n in [1usize, 15, 1000, 1025, 70_001, 300_007] {
        let mut xs = data(n, 3);
        let ys = data(n, 4);
        if n > 1000 {
            // Beyond exp's fast range: that part re-runs exactly.
            xs[n / 2] = 80.0;
            xs[n - 1] = f32::NAN;
        }
        let p = (f32s(&xs, &[n]), f32s(&ys, &[n]));
        let compiled = compiled_streaming(f, &p);
        let streams = compiled
            .kernel_sources
            .iter()
            .filter(|(_, c)| c.contains("tk_stream("))
            .count();
        assert!(streams >= 1, "n = {n}: no kernel streams its output");
        let eager = f(&p).leaves();
        for _ in 0..2 {
            let got = compiled.program.run(&p.leaves());
            assert_eq!(got.len(), eager.len());
            for (a, b) in got.iter().zip(&eager) {
                assert_same(a, b);
            }
        }
    }
}

// ------------------------------------------------------ compiled programs

/// `f` staged and compiled without the disk cache.
fn compiled<P: Ptree, Q: Ptree>(f: impl Fn(&P) -> Q, p: &P) -> tolk::Program {
    compiled_with_sources(f, p).program
}

/// [`compiled`], with the kernels' sources and what each fused.
fn compiled_with_sources<P: Ptree, Q: Ptree>(f: impl Fn(&P) -> Q, p: &P) -> tolk::Compiled {
    let g = rune::make_graph(f, p);
    let opts = tolk::Options {
        use_cache: false,
        stream_min_bytes: None,
        quick_first: false,
    };
    tolk::compile_with(g, &opts).expect("compiles")
}

#[test]
fn iota_through_movement_ops_equals_eager() {
    // Coordinates stay affine in the loop indices through permutes,
    // slices, flips, broadcasts and reshapes that split or merge dims
    // (rendered without division); a reshape that mixes the iota's axis
    // with another falls back to the linear-index form. The identity
    // matrix (jacfwd's basis) and bool/f16/u8 casts of the mask too.
    let x = Tensor::zeros(&[1], DType::F32);
    let f = |_: &Tensor| {
        let a = Tensor::iota(&[6, 10], 0, DType::I32);
        let b = Tensor::iota(&[6, 10], 1, DType::I64);
        vec![
            a.permute(&[1, 0]).cast(DType::F32) * 1.0,
            a.slice(&[Slice::from(1..6).step(2), Slice::from(..).step(3)]) + 1.0,
            b.flip(&[0, 1]) * 2.0,
            b.reshape(&[6, 2, 5]) + 0.0,
            b.reshape(&[60]) + 0.0,
            a.reshape(&[3, 20]) + 0.0,
            a.reshape(&[2, 3, 10]).flip(&[1]) + 0.0,
            Tensor::iota(&[7], 0, DType::F64).broadcast_to(&[3, 7]) * 0.5,
            Tensor::iota(&[4, 1, 3], 2, DType::U8).broadcast_to(&[4, 5, 3]) + 1.0,
            Tensor::eye(37, DType::F32) + 0.0,
            Tensor::eye(9, DType::F16) * 3.0,
            Tensor::eye(9, DType::U8) + 1.0,
        ]
    };
    let got = rune::jit(f).call(&x);
    let want = f(&x);
    for (a, b) in got.iter().zip(&want) {
        assert_same(a, b);
    }
}

/// The f32 result of a fused sum kernel over `terms` (one output's terms,
/// outer reduced dims first, the innermost reduced dim of length `inner`
/// last): f64 accumulators, element `r` of each run of the innermost dim
/// into accumulator `r % 8` while a full group of 8 remains, the rest into
/// accumulator 0, then the pairwise merge (render.rs's order).
fn kernel_sum(terms: &[f32], inner: usize) -> f32 {
    let mut accs = [0f64; 8];
    for run in terms.chunks(inner) {
        let full = run.len() / 8 * 8;
        for (r, &v) in run.iter().enumerate() {
            let u = if r < full { r % 8 } else { 0 };
            accs[u] += v as f64;
        }
    }
    let mut w = 8;
    while w > 1 {
        w /= 2;
        for u in 0..w {
            accs[u] += accs[u + w];
        }
    }
    accs[0] as f32
}

/// Data whose f64 sums depend on the order: a fifth of the values are
/// +-2^40 (cancelling in pairs within a column, but absorbing the low bits
/// of whatever small values share their accumulator first).
fn order_sensitive(shape: &[usize], seed: u64) -> Tensor {
    let v: Vec<f32> = data(shape.iter().product(), seed)
        .into_iter()
        .map(|x| {
            let big = 2f32.powi(40);
            match ((x + 1.0) * 10.0) as i32 {
                0 => big,
                1 => -big,
                _ => x,
            }
        })
        .collect();
    Tensor::from_vec(v, shape)
}

#[test]
fn column_reductions_sum_in_the_kernel_order_bit_for_bit() {
    // Sums over leading axes of row-major data (their kernels accumulate a
    // tile of neighbouring outputs at once): every output equals the
    // one-output-at-a-time order exactly, on data where another order
    // would round differently. Lengths with a tail (37 = 4 * 8 + 5) and
    // widths that are not a multiple of the tile (70, 131).
    let x = order_sensitive(&[37, 131], 31);
    let got = rune::jit(|x: &Tensor| (x * 3.0).sum(&[0], false)).call(&x);
    let xv = (&x * 3.0).to_vec::<f32>();
    let col = |j: usize| -> Vec<f32> { (0..37).map(|i| xv[i * 131 + j]).collect() };
    let want: Vec<f32> = (0..131).map(|j| kernel_sum(&col(j), 37)).collect();
    assert_eq!(bits(&got), bits(&Tensor::from_vec(want, &[131])));
    // The check has teeth: groups of 8 restarting at row 16 differ somewhere.
    let other: Vec<f32> = (0..131)
        .map(|j| {
            let c = col(j);
            let mut t = c[..16].to_vec();
            t.extend(&c[16..]);
            kernel_sum(&t[..16], 16) + kernel_sum(&t[16..], 21)
        })
        .collect();
    assert_ne!(bits(&got), bits(&Tensor::from_vec(other, &[131])));

    // Two reduced dims that do not merge (the innermost restarts its groups
    // of 8 for each index of the outer one), kept dims [6, 70].
    let y = order_sensitive(&[5, 6, 19, 70], 32);
    let got = rune::jit(|y: &Tensor| (y * 3.0).sum(&[0, 2], false)).call(&y);
    let yv = (&y * 3.0).to_vec::<f32>();
    let mut want = Vec::new();
    for a in 0..6 {
        for j in 0..70 {
            let terms: Vec<f32> = (0..5)
                .flat_map(|b| (0..19).map(move |c| (b, c)))
                .map(|(b, c)| yv[((b * 6 + a) * 19 + c) * 70 + j])
                .collect();
            want.push(kernel_sum(&terms, 19));
        }
    }
    assert_eq!(bits(&got), bits(&Tensor::from_vec(want, &[6, 70])));

    // max over a leading axis equals eager's exactly (order-free).
    let f = |x: &Tensor| (x * 3.0).max(&[0], true);
    assert_same(&rune::jit(f).call(&x), &f(&x));
}

/// Small kernels beside a large product compile without vectorization
/// (`TK_SMALL`, gcc's `-O1`) and still equal eager bit for bit; the same
/// elementwise chain alone (no product to be small beside) is vectorized.
#[test]
fn small_kernels_beside_a_large_product_equal_eager() {
    let f = |(a, b, v): &(Tensor, Tensor, Tensor)| {
        let small = ((v.exp() * 0.5).tanh() + v.sin()).sqrt() / (v * v + 1.0);
        (a.matmul(b), small.log(), -v.cos())
    };
    let p = (
        rand_f32(&[256, 256], 1),
        rand_f32(&[256, 256], 2),
        rand_f32(&[96], 3) * 40.0 - 20.0,
    );
    let g = rune::make_graph(f, &p);
    let c = tolk::compile(g, false).expect("compiles");
    let small = |c: &tolk::Compiled| {
        c.kernel_sources
            .iter()
            .filter(|(_, src)| src.contains("TK_SMALL int"))
            .count()
    };
    assert!(small(&c) >= 2, "the elementwise kernels are small");
    let eager = f(&p).leaves();
    for _ in 0..2 {
        let out = c.program.run(&p.leaves());
        // The product is the same GEMM call as eager's: bits too.
        for (x, e) in out.iter().zip(&eager) {
            assert_same(x, e);
        }
    }
    let alone = |v: &Tensor| ((v.exp() * 0.5).tanh() + v.sin()).sqrt() / (v * v + 1.0);
    let c = tolk::compile(rune::make_graph(alone, &p.2), false).expect("compiles");
    assert_eq!(small(&c), 0, "nothing is small beside nothing");
    assert_same(&c.program.run(&[p.2.clone()])[0], &alone(&p.2));
}

/// Traced with one tensor as two leaves (Adam's m and v both starting as
/// one zeros tensor), the program reads that one input for both: a later
/// call with two different tensors there must not reuse it (it did, and
/// the flagship example's Adam took sqrt of m's negative values).
#[test]
fn a_trace_with_aliased_leaves_is_not_reused_for_distinct_ones() {
    let f = |(m, v): &(Tensor, Tensor)| m * 2.0 + v.sqrt();
    let j = rune::jit(f);
    let z = f32s(&[0.0, 0.0], &[2]);
    assert_eq!(
        j.call(&(z.clone(), z.clone())).to_vec::<f32>(),
        vec![0.0, 0.0]
    );
    let (m, v) = (f32s(&[-1.0, 1.0], &[2]), f32s(&[4.0, 9.0], &[2]));
    assert_eq!(
        j.call(&(m.clone(), v.clone())).to_vec::<f32>(),
        f(&(m, v)).to_vec::<f32>()
    );
    assert_eq!(j.trace_count(), 2, "distinct leaves trace again");
}

// ------------------------------------------------------ shared transposes

/// Products that read the same weight transposed (`g @ w^T`, as a scan's
/// backward pass does at every step) read one contiguous copy of `w^T`
/// made once, and equal eager within `assert_close`'s bound: the product
/// of a contiguous operand may sum in another order than the GEMM's
/// strided path (each output sums 24 O(1) terms here, and `tanh` is
/// 1-Lipschitz, so the bound's few dozen ulp cover it).
#[test]
fn products_sharing_a_transposed_weight_read_one_copy_and_equal_eager() {
    let w = rand_f32(&[16, 24], 1);
    let xs: Vec<Tensor> = (0..5).map(|i| rand_f32(&[8, 24], 10 + i)).collect();
    let f = |(w, xs): &(Tensor, Vec<Tensor>)| {
        // x_i @ w^T, as dot_general contracting both last axes.
        let mut acc = xs[0].matmul(&w.transpose());
        for x in &xs[1..] {
            acc = (acc + x.matmul(&w.transpose())).tanh();
        }
        acc
    };
    let p = (w, xs);
    let program = compiled(f, &p);
    let simplified = program.graph();
    let copies = simplified
        .eqns
        .iter()
        .filter(|e| matches!(e.as_prim(), Some(nx::Prim::Copy)))
        .count();
    assert_eq!(copies, 1, "one transposed copy:\n{simplified}");
    let contiguous_rhs = simplified
        .eqns
        .iter()
        .filter(
            |e| matches!(e.as_prim(), Some(nx::Prim::DotGeneral { rhs_contract, .. }) if rhs_contract == &[0]),
        )
        .count();
    assert_eq!(
        contiguous_rhs, 5,
        "every product reads the copy:\n{simplified}"
    );
    let out = program.run(&p.leaves());
    assert_close(&out[0], &f(&p));
    assert_close(&rune::jit(f).call(&p), &f(&p));
}

/// A small reduction run at every step of a product-heavy loop is compiled
/// vectorized, not at gcc's `-O1`: the rule weighs a product's
/// multiply-adds at 1/32 of a kernel's work point (counted at par, the
/// eight large products here made the reductions look negligible).
#[test]
fn a_reduction_run_every_step_beside_large_products_is_not_built_at_o1() {
    let f = |(x, w, x2, v): &(Tensor, Tensor, Tensor, Tensor)| {
        let mut outs = Vec::new();
        for i in 0..8 {
            let s = x.scalar_like((i + 1) as f64);
            outs.push((x * &s).matmul(w).sum_all());
            outs.push((x2 * &s).matmul(v).tanh().sum(&[0], false));
        }
        outs
    };
    let p = (
        rand_f32(&[16, 512], 1),
        rand_f32(&[512, 512], 2),
        rand_f32(&[16, 128], 3),
        rand_f32(&[128, 128], 4),
    );
    let compiled = compiled_with_sources(f, &p);
    let reductions: Vec<&String> = compiled
        .kernel_sources
        .iter()
        .filter(|(fused, _)| fused.iter().any(|p| p == "reduce_sum"))
        .map(|(_, src)| src)
        .collect();
    assert!(
        !reductions.is_empty(),
        "the tanh sums fuse into reduction kernels"
    );
    for src in reductions {
        assert!(!src.contains("TK_SMALL"), "built at -O1:\n{src}");
    }
    let got = compiled.program.run(&p.leaves());
    for (a, b) in got.iter().zip(f(&p)) {
        assert_close(a, &b);
    }
}

/// Kernels whose values are long chains of transcendentals compute two
/// elements at a time (`render.rs`'s lanes: a map's innermost loop in two
/// halves, a reduction's blocks of 64 in two halves of 32) and reductions
/// compute their values in blocks before folding them: every shape that
/// reaches those paths — odd extents (the lone last element), a 2-D map
/// (lanes on the inner dim), several outputs, a padded (masked) load, a
/// long row reduction (blocks, then groups of eight, then the tail), a full
/// sum — equals eager bit for bit, and the lanes are really used.
#[test]
fn two_lane_kernels_and_blocked_reductions_equal_eager_bit_for_bit() {
    fn chain(x: &Tensor) -> Tensor {
        let h = x.sin().tanh();
        let h = (&h * 1.5).exp().log1p();
        (&h * 0.7).erf().atan().sigmoid()
    }
    // A compiled f32 sum's order: element r into accumulator r % 8 (f64)
    // while a group of eight remains, the rest into accumulator 0, then
    // pairwise; per row of `len` elements.
    fn ordered_sums(vals: &Tensor, len: usize) -> Tensor {
        let v = vals.to_vec::<f32>();
        let sums: Vec<f32> = v
            .chunks(len)
            .map(|row| {
                let mut a = [0f64; 8];
                let full = row.len() / 8 * 8;
                for (r, &x) in row.iter().enumerate() {
                    a[if r < full { r % 8 } else { 0 }] += x as f64;
                }
                (((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))) as f32
            })
            .collect();
        let n = sums.len();
        Tensor::from_vec(sums, &[n])
    }
    type F<'a> = &'a dyn Fn(&Tensor) -> Vec<Tensor>;
    // `f` compiled, against `want` (eager's values, or a sum in the
    // compiled order); `lanes`: whether a kernel computes two at a time.
    let check = |what: &str, f: F, want: F, x: &Tensor, lanes: bool| {
        let opts = tolk::Options {
            use_cache: false,
            stream_min_bytes: None,
            quick_first: false,
        };
        let c =
            tolk::compile_with(rune::make_graph(|x: &Tensor| f(x), x), &opts).expect("compiles");
        let uses_lanes = c
            .kernel_sources
            .iter()
            .any(|(_, src)| src.contains("a = from + j") || src.contains("a = r + j"));
        assert_eq!(uses_lanes, lanes, "{what}: two lanes expected: {lanes}");
        let got = c.program.run(std::slice::from_ref(x));
        let want = want(x);
        assert_eq!(got.len(), want.len(), "{what}");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.shape(), w.shape(), "{what}");
            let flat = |t: &Tensor| t.reshape(&[t.numel()]);
            assert_eq!(bits(&flat(g)), bits(&flat(w)), "{what}");
        }
    };
    let sums = |len: usize| move |x: &Tensor| vec![ordered_sums(&chain(x), len)];
    for n in [65, 257, 4099] {
        let x = f32s(&data(n, 3), &[n]);
        let map = |x: &Tensor| vec![chain(x)];
        check(&format!("map [{n}]"), &map, &map, &x, true);
        let three = |x: &Tensor| {
            let y = chain(x);
            vec![y.exp(), y.clone(), (&y * 2.0).tanh()]
        };
        check(&format!("three outputs [{n}]"), &three, &three, &x, true);
        let sum = |x: &Tensor| vec![chain(x).sum_all().reshape(&[1])];
        check(&format!("full sum [{n}]"), &sum, &sums(n), &x, true);
    }
    let x = f32s(&data(3 * 129, 5), &[3, 129]);
    let map = |x: &Tensor| vec![chain(x)];
    check("map [3, 129]", &map, &map, &x, true);
    let rows = |x: &Tensor| vec![chain(x).sum(&[-1], false)];
    check("row sums [3, 129]", &rows, &sums(129), &x, true);
    let padded = |x: &Tensor| vec![chain(&x.pad(&[(0, 0), (1, 2)], 0.5))];
    check("padded [3, 129]", &padded, &padded, &x, true);
    let x = f32s(&data(5 * 300, 7), &[5, 300]);
    check("row sums [5, 300]", &rows, &sums(300), &x, true);
    let maxima = |x: &Tensor| vec![chain(x).max(&[-1], false)];
    check("row maxima [5, 300]", &maxima, &maxima, &x, true);
    // Other float dtypes (libm's calls, f16/bf16 through f32): the same
    // lanes, eager's bits.
    for dtype in [DType::F64, DType::F16, DType::BF16] {
        let x = f32s(&data(257, 11), &[257]).cast(dtype);
        let map = |x: &Tensor| vec![chain(x)];
        check(&format!("map [257] {dtype}"), &map, &map, &x, true);
    }
    // A short chain: one lane.
    let x = f32s(&data(4099, 9), &[4099]);
    let short = |x: &Tensor| vec![x.sin() * 2.0];
    check("short chain", &short, &short, &x, false);
}

/// Products whose contracted axes all have size 1 (outer products, batched
/// or not: what vmap of a dense layer's gradient makes) compile to a fused
/// elementwise multiply; the bits are eager's product's, signed zeros,
/// infinities and NaNs included, through nx's tiny-product loops and the
/// GEMM alike (tile edges too), f32 and f64, with the contracted axis last
/// on the left or first (a transposed operand).
#[test]
fn outer_products_under_jit_give_eager_products_bits() {
    let specials = [
        0.0,
        -0.0,
        1.5,
        -2.25,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    let vals = |n: usize, seed: usize| -> Vec<f64> {
        (0..n)
            .map(|i| {
                let j = i * 7 + seed * 13;
                if j % 5 == 0 {
                    specials[(j / 5) % specials.len()]
                } else {
                    ((j % 23) as f64 - 11.0) * 0.37
                }
            })
            .collect()
    };
    for dtype in [DType::F32, DType::F64] {
        // (m, n, batch): 0 is no batch axis.
        for (m, n, batch) in [(3, 4, 0), (32, 64, 0), (33, 70, 0), (5, 6, 7), (32, 64, 16)] {
            let (ls, rs): (Vec<usize>, Vec<usize>) = if batch == 0 {
                (vec![m, 1], vec![1, n])
            } else {
                (vec![batch, m, 1], vec![batch, 1, n])
            };
            let l = Tensor::from_slice(&vals(ls.iter().product(), 1), &ls).cast(dtype);
            let r = Tensor::from_slice(&vals(rs.iter().product(), 2), &rs).cast(dtype);
            let f = |(a, b): &(Tensor, Tensor)| (a.matmul(b), (a * 2.0).matmul(&(b + 1.0)));
            let eager = f(&(l.clone(), r.clone()));
            let jitted = rune::jit(f).call(&(l.clone(), r.clone()));
            assert_same(&jitted.0, &eager.0);
            assert_same(&jitted.1, &eager.1);
            // The contracted axis first on the left: x^T y.
            let lt = (&l * 1.0).swapaxes(-1, -2);
            let g = |(a, b): &(Tensor, Tensor)| (a * 3.0).swapaxes(-1, -2).matmul(b);
            assert_same(
                &rune::jit(g).call(&(lt.clone(), r.clone())),
                &g(&(lt, r.clone())),
            );
        }
    }
}
