//! The programs `jit_fuzz` found differing under jit, shrunk by hand to
//! what shows each cause (`JIT_FUZZ_SHRINK=seed` prints the shrunk
//! program), each compared with eager and with a closed form where one
//! exists.

use rune::prelude::*;

/// Seed 1007244: a view of a kernel's buffer that is both a loop's initial
/// carry and a scatter-add's base. Fusion made the view a kernel output
/// (the scatter needs its base as a buffer) and also an eager view step for
/// the loop; kernels then addressed it by its arena slot, which the view's
/// readers did not keep alive, and the loop's per-step outputs reused the
/// slot before the scatter read it.
#[test]
fn a_view_read_by_a_loop_and_a_scatter_keeps_its_buffer() {
    let f = |x: &Tensor| {
        let p = x.permute(&[1, 2, 3, 0]); // [1, 4, 4, 4]
                                          // A reshape no view of the permuted layout expresses: `p` becomes
                                          // a kernel's buffer.
        let q = p.reshape(&[64]).reshape(&[4, 1, 4, 4]).maximum(x);
        // One row into one segment: simplified to a view of `p`.
        let base = nx::segment_sum(&p, &Tensor::from_slice(&[-1i64], &[1]), 1);
        let (_, ys) = rune::scan(
            |c: &Tensor, _r: &Tensor| {
                let y = c.bitwise_not();
                (y.clone(), y)
            },
            &base,
            &Tensor::zeros(&[4, 1], DType::U8),
        );
        let one = x.reshape(&[64]).narrow(0, 0, 1).reshape(&[]);
        let added = base.index_add(
            0,
            &Tensor::from_slice(&[0i32, 0, -1], &[3]),
            &one.broadcast_to(&[3, 4, 4, 4]),
        );
        (ys.add(&added), q)
    };
    let x = Tensor::arange(0.0, 64.0, 1.0, DType::U8)
        .mul(&Tensor::scalar(37u8))
        .reshape(&[4, 1, 4, 4]);
    let want = f(&x);
    let got = rune::jit(f).call(&x);
    assert_eq!(got.0.to_vec::<u8>(), want.0.to_vec::<u8>());
    assert_eq!(got.1.to_vec::<u8>(), want.1.to_vec::<u8>());
}

/// `x` with an infinity in it, as the fuzzer's inputs have.
fn with_inf(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let mut v: Vec<f32> = (0..n).map(|i| (i % 7) as f32 * 0.25 - 0.75).collect();
    v[n / 2] = f32::INFINITY;
    Tensor::from_slice(&v, shape)
}

/// Seed 9107446: grad through a scan whose body never reads its xs, the xs
/// a product with infinite weights. The reverse loop gave the xs a stacked
/// zero cotangent, and the product's rule multiplied it by the weights
/// (0 * inf = NaN); the xs get no cotangent at all (as in JAX, whose
/// `jit(grad)` gives the closed form here), so the gradient is the carry's.
#[test]
fn grad_through_a_scan_ignoring_its_xs_has_no_term_from_them() {
    let g = |x: &Tensor| {
        rune::grad(
            |x: &Tensor| {
                let w = x.reshape(&[x.numel()]).narrow(0, 0, 6).reshape(&[3, 2]);
                let xs = x.matmul(&w); // [4, 5, 2, 2]: 4 steps
                let (_, ys) = rune::scan(
                    |c: &Tensor, _r: &Tensor| (c.clone(), c.reshape(&[15, 2, 4])),
                    x,
                    &xs,
                );
                ys.sum_all()
            },
            x,
        )
    };
    let x = with_inf(&[4, 5, 2, 3]);
    // sum(ys) = 4 * sum(x): the gradient is 4 everywhere.
    let want = vec![4.0f32; 120];
    assert_eq!(g(&x).to_vec::<f32>(), want, "eager");
    assert_eq!(rune::jit(g).call(&x).to_vec::<f32>(), want, "jit");
}

/// Seed 9103882: the same cause through a padded max pool of the carry
/// (the pool's gradient inside the reverse loop), the xs a product of `x`
/// with its own first element.
#[test]
fn grad_through_a_scan_pooling_its_carry_ignores_the_xs() {
    let g = |x: &Tensor| {
        rune::grad(
            |x: &Tensor| {
                let first = x.reshape(&[x.numel()]).narrow(0, 0, 1);
                let xs = x.mul(&first); // [4, 7, 4, 1]: 4 steps
                let (_, ys) = rune::scan(
                    |c: &Tensor, _r: &Tensor| {
                        let y = c.max_pool(
                            &[2, 1],
                            &[3, 3],
                            nx::Padding::Explicit(vec![(1, 1), (0, 1)]),
                        ); // [4, 7, 2, 1]
                        (c.clone(), y)
                    },
                    x,
                    &xs,
                );
                ys.sum_all()
            },
            x,
        )
    };
    let x = with_inf(&[4, 7, 4, 1]);
    let want = g(&x);
    let got = rune::jit(g).call(&x);
    assert!(
        want.to_vec::<f32>().iter().all(|v| v.is_finite()),
        "eager is finite"
    );
    assert_eq!(got.to_vec::<f32>(), want.to_vec::<f32>());
    // Each step's pool sends a 1 to the maximum of each window (rows 0
    // and 3 of the padded 6: input rows 0 and 2 with row -1 padding):
    // 4 steps, so every gradient entry is 0 or a multiple of 4.
    assert!(got.to_vec::<f32>().iter().all(|v| v % 4.0 == 0.0));
}

/// The same class through `remat`: an input the checkpointed function
/// never reads gets no cotangent from its recomputation (JAX's
/// `checkpoint` gives the closed form here), so a product with infinite
/// weights that made it is not multiplied by a zero.
#[test]
fn grad_through_remat_gives_no_cotangent_to_an_unread_input() {
    let g = |x: &Tensor| {
        rune::grad(
            |x: &Tensor| {
                let w = x.reshape(&[6]).reshape(&[3, 2]);
                let b = x.matmul(&w); // [2, 2], from the infinite entry
                rune::remat(
                    |(a, _b): &(Tensor, Tensor)| a.mul(&Tensor::scalar(2.0f32)),
                    &(x.clone(), b),
                )
                .sum_all()
            },
            x,
        )
    };
    let x = with_inf(&[2, 3]);
    let want = vec![2.0f32; 6];
    assert_eq!(g(&x).to_vec::<f32>(), want, "eager");
    assert_eq!(rune::jit(g).call(&x).to_vec::<f32>(), want, "jit");
}

/// Seed 100019191: `x + f64(i16(-r))`, `r` the first row of `x` broadcast
/// over its rows: where `x` is -0.0 and `i16(-r)` is 0, `-0 + 0 = +0`.
/// Built with gcc's `-fno-trapping-math` (tried for vectorizing selects),
/// the kernel gave -0 there: a flag that changes values is not allowed, and
/// this holds the line (the prelude's selects use bit masks instead).
#[test]
fn adding_a_converted_zero_to_minus_zero_gives_plus_zero() {
    let f = |x: &Tensor| {
        let row = x.narrow(0, 0, 1);
        x + &row.neg().cast(DType::I16).cast(DType::F64)
    };
    let mut v: Vec<f64> = (0..18)
        .map(|i| if i % 3 == 0 { -0.0 } else { 0.25 * i as f64 })
        .collect();
    (v[0], v[5], v[11]) = (0.0, 0.0, -0.0);
    let x = Tensor::from_slice(&v, &[3, 6]);
    let want = f(&x);
    let got = rune::jit(f).call(&x);
    let bits = |t: &Tensor| {
        t.to_vec::<f64>()
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>()
    };
    assert_eq!(bits(&got), bits(&want));
    assert_eq!(want.to_vec::<f64>()[6].to_bits(), 0, "-0 + 0 is +0");
}
