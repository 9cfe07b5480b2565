//! A short tour of nx: creating tensors, broadcasting, views that share
//! storage, reductions, matrix products and printing.
//!
//! Run with `cargo run --release --example tour`.

use nx::{DType, Slice, Tensor};

fn main() {
    println!("== creating tensors ==");
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    println!("x =\n{x}");
    println!(
        "arange(0, 10, 2) = {}",
        Tensor::arange(0.0, 10.0, 2.0, DType::I32)
    );
    println!(
        "linspace(0, 1, 5) = {}",
        Tensor::linspace(0.0, 1.0, 5, DType::F64)
    );
    println!("eye(3) =\n{}", Tensor::eye(3, DType::F32));

    println!("\n== broadcasting ==");
    let row = Tensor::from_slice(&[10.0f32, 20.0, 30.0], &[3]);
    let col = Tensor::from_slice(&[100.0f32, 200.0], &[2, 1]);
    println!("x + row =\n{}", &x + &row);
    println!("x + col =\n{}", &x + &col);
    println!("2 * x - 1 =\n{}", 2.0 * &x - 1.0);

    println!("\n== views share storage ==");
    let t = x.transpose();
    println!(
        "x.transpose() (shape {:?}, strides {:?}) =\n{t}",
        t.shape(),
        t.strides().unwrap()
    );
    let rev = x.slice(&[Slice::all(), Slice::from(..).step(-1)]);
    println!("x[:, ::-1] =\n{rev}");
    x.get(0).assign(&Tensor::zeros(&[3], DType::F32));
    println!("after x[0] = 0, the transposed view sees it too:\n{t}");

    println!("\n== reductions and math ==");
    let y = Tensor::from_slice(&[0.5f64, -1.0, 2.0, 3.5, 0.0, -2.5], &[2, 3]);
    println!("y =\n{y}");
    println!("sum over axis 1 = {}", y.sum(&[1], false));
    println!("max over axis 0 (keepdims) = {}", y.max(&[0], true));
    println!("softmax over axis 1 =\n{}", y.softmax(1));
    println!("argmax over axis 1 = {}", y.argmax(1, false));

    println!("\n== matrix products ==");
    let a = Tensor::arange(0.0, 6.0, 1.0, DType::F32).reshape(&[2, 3]);
    let b = Tensor::ones(&[3, 2], DType::F32);
    println!("a @ b =\n{}", a.matmul(&b));

    println!("\n== large tensors print elided ==");
    nx::seed(0);
    println!("{}", Tensor::randn(&[100, 100], DType::F32));
}
