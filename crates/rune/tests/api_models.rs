//! API.md's "Models" example, verbatim where it can be, so that the
//! contract's calls keep compiling; shapes and a few values checked.

use nx::{ConvOpts, Padding};
use rune::prelude::*;

#[test]
fn the_models_example_of_api_md_compiles_and_gives_the_documented_shapes() {
    let x = Tensor::from_vec(
        (0..256).map(|i| (i % 7) as f32 - 3.0).collect(),
        &[1, 4, 8, 8],
    );
    let w = Tensor::from_vec(
        (0..144).map(|i| (i % 5) as f32 * 0.1).collect(),
        &[4, 4, 3, 3],
    );
    let y = x.conv(
        &w,
        ConvOpts {
            strides: vec![2, 2],
            padding: Padding::Same,
            ..Default::default()
        },
    );
    assert_eq!(y.shape(), &[1, 4, 4, 4]); // SAME: ceil(8 / 2)
    let z = x.conv_transpose(&w, ConvOpts::default());
    assert_eq!(z.shape(), &[1, 4, 10, 10]); // VALID: (in - 1) * s + k
    let m = x.max_pool(&[2, 2], &[2, 2], Padding::Valid);
    assert_eq!(m.shape(), &[1, 4, 4, 4]);
    let a = x.avg_pool(&[3, 3], &[1, 1], Padding::Same);
    assert_eq!(a.shape(), &[1, 4, 8, 8]);
    // A corner of a SAME 3x3 average counts its 4 in-bounds elements only.
    let xv = x.to_vec::<f32>();
    let corner = (xv[0] + xv[1] + xv[8] + xv[9]) / 4.0;
    assert!((a.to_vec::<f32>()[0] - corner).abs() < 1e-6);
    let s = x.sort(-1, false);
    let i = x.argsort(-1, false);
    assert_eq!(i.dtype(), DType::I32);
    assert_eq!(s.to_vec::<f32>(), x.take_along_axis(&i, -1).to_vec::<f32>());
    let (vals, idx) = x.top_k(5);
    assert_eq!(
        (vals.shape(), idx.dtype()),
        (&[1usize, 4, 8, 5][..], DType::I32)
    );
    let (a, b) = (x.reshape(&[4, 8, 8]), x.reshape(&[4, 8, 8]));
    let c = nx::einsum("bij,bjk->bik", &[&a, &b]);
    assert_eq!(c.to_vec::<f32>(), a.matmul(&b).to_vec::<f32>());
}
