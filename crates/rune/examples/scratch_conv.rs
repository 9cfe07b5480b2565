use nx::{ConvOpts, Padding};
use rune::prelude::*;
fn main() {
    let (n, c, o, hw, k) = (32, 64, 64, 32, 3);
    nx::seed(0);
    let x = Tensor::randn(&[n, c, hw, hw], DType::F32);
    let w = Tensor::randn(&[o, c, k, k], DType::F32) * (1.0 / ((c * k * k) as f64).sqrt());
    let opts = || ConvOpts { padding: Padding::Same, ..Default::default() };
    let loss = move |p: &(Tensor, Tensor)| p.0.conv(&p.1, opts()).sum_all();
    let jg = rune::jit(move |p: &(Tensor, Tensor)| rune::grad(loss, p));
    let p = (x, w);
    for _ in 0..3 { jg.call(&p); }
    let t = std::time::Instant::now();
    for _ in 0..10 { jg.call(&p); }
    println!("{:?}", t.elapsed() / 10);
}
