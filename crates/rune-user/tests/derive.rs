use rune::prelude::*;
use rune_user::Mlp;

#[test]
fn derive_works_with_rune_alone() {
    let p = Mlp {
        w1: Tensor::from_slice(&[1.0f32, 2.0], &[2]),
        b1: Tensor::scalar(3.0f32),
        name: "mlp".into(),
    };
    assert_eq!(p.num_leaves(), 2);
    let q = p.map_leaves(&mut |t| t * 2.0);
    assert_eq!(q.w1.to_vec::<f32>(), vec![2.0, 4.0]);
    assert_eq!(q.b1.item::<f32>(), 6.0);
    assert_eq!(q.name, "mlp");
    let s = p.map2_leaves(&q, &mut |a, b| a + b);
    assert_eq!(s.w1.to_vec::<f32>(), vec![3.0, 6.0]);
}
