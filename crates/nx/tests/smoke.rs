use nx::{DType, Slice, Tensor};

#[test]
fn elementwise_broadcast_and_views() {
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let b = Tensor::from_slice(&[10.0f32, 20.0, 30.0], &[3]);
    assert_eq!(
        (&x + &b).to_vec::<f32>(),
        vec![11.0, 22.0, 33.0, 14.0, 25.0, 36.0]
    );
    assert_eq!(
        (&x * 2.0).to_vec::<f32>(),
        vec![2.0, 4.0, 6.0, 8.0, 10.0, 12.0]
    );
    assert_eq!((1.0 - &x).get(1).to_vec::<f32>(), vec![-3.0, -4.0, -5.0]);
    let t = x.transpose();
    assert_eq!(t.shape(), &[3, 2]);
    assert_eq!(t.to_vec::<f32>(), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    assert_eq!(
        (&t + 1.0).to_vec::<f32>(),
        vec![2.0, 5.0, 3.0, 6.0, 4.0, 7.0]
    );
    let s = x.slice(&[Slice::from(..), Slice::from(..).step(-2)]);
    assert_eq!(s.to_vec::<f32>(), vec![3.0, 1.0, 6.0, 4.0]);
    assert_eq!(
        Tensor::arange(0.0, 5.0, 1.0, DType::I64).to_vec::<i64>(),
        vec![0, 1, 2, 3, 4]
    );
    assert_eq!(
        Tensor::eye(2, DType::F32).to_vec::<f32>(),
        vec![1.0, 0.0, 0.0, 1.0]
    );
    let y = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3]);
    y.assign(&y.flip(&[0]));
    assert_eq!(y.to_vec::<f32>(), vec![3.0, 2.0, 1.0]);
    let z = Tensor::zeros(&[2, 2], DType::F64);
    z.get(1).assign(&Tensor::scalar(7.0f64));
    assert_eq!(z.to_vec::<f64>(), vec![0.0, 0.0, 7.0, 7.0]);
}
