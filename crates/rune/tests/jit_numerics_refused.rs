//! jit and pmap refuse complex and 4-bit tensors at trace time, naming the
//! dtype and saying that such work runs eagerly outside jit; the same
//! functions run eagerly.

use nx::{Complex, DType, Tensor, I4};
use rune::{jit, JitError};

fn message(r: Result<Tensor, JitError>) -> String {
    match r {
        Ok(_) => panic!("expected a JitError"),
        Err(e) => e.message().to_string(),
    }
}

#[test]
fn a_complex_input_leaf_is_refused() {
    let z = Tensor::from_slice(&[Complex::new(1.0f32, 2.0)], &[1]);
    let f = jit(|z: &Tensor| z.mul(z));
    let m = message(f.try_call(&z));
    assert!(
        m.contains("c64") && m.contains("runs eagerly outside jit"),
        "{m}"
    );
    // eagerly the same function runs
    assert_eq!(
        z.mul(&z).to_vec::<Complex<f32>>(),
        vec![Complex::new(-3.0, 4.0)]
    );
}

#[test]
fn a_complex_value_made_inside_is_refused() {
    let x = Tensor::from_slice(&[1.0f64, 2.0], &[2]);
    let f = jit(|x: &Tensor| Tensor::complex(x, x).real());
    let m = message(f.try_call(&x));
    assert!(m.contains("c128") && m.contains("complex"), "{m}");
    let g = jit(|x: &Tensor| x.cast(DType::C64).abs().cast(DType::F64));
    let m = message(g.try_call(&x));
    assert!(m.contains("c64"), "{m}");
}

#[test]
fn four_bit_tensors_are_refused() {
    let q = Tensor::from_slice(&[I4(3), I4(-2)], &[2]);
    let f = jit(|q: &Tensor| q.add(q));
    let m = message(f.try_call(&q));
    assert!(
        m.contains("i4") && m.contains("4-bit") && m.contains("runs eagerly outside jit"),
        "{m}"
    );
    let x = Tensor::from_slice(&[1.0f32, 9.0], &[2]);
    let g = jit(|x: &Tensor| x.cast(DType::U4).cast(DType::F32));
    let m = message(g.try_call(&x));
    assert!(m.contains("u4"), "{m}");
    // eagerly it runs (9 fits in u4)
    assert_eq!(
        x.cast(DType::U4).cast(DType::F32).to_vec::<f32>(),
        vec![1.0, 9.0]
    );
}

#[test]
fn pmap_refuses_them_too() {
    let z = Tensor::from_slice(&[Complex::new(1.0f32, 0.0), Complex::new(2.0, 0.0)], &[2]);
    let f = rune::pmap_with(
        |z: &Tensor| z.add(z),
        rune::PmapOpts {
            devices: vec!["CPU:1".into(), "CPU:2".into()],
            ..Default::default()
        },
    );
    let m = match f.try_call(&z) {
        Ok(_) => panic!("expected a JitError"),
        Err(e) => e.message().to_string(),
    };
    assert!(m.contains("c64"), "{m}");
}
