use nx::{ConvOpts, Padding};
use rune::prelude::*;
fn cpu() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap();
    let f: Vec<&str> = s.rsplit(')').next().unwrap().split_whitespace().collect();
    (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) / 100.0
}
fn time(name: &str, f: impl Fn() -> Tensor) {
    for _ in 0..2 { f(); }
    let t = std::time::Instant::now();
    let c = cpu();
    for _ in 0..10 { f(); }
    println!("{name}: wall {:?} cpu {:.1} ms", t.elapsed() / 10, (cpu() - c) * 100.0);
}
fn main() {
    nx::seed(0);
    let x = Tensor::randn(&[32, 64, 32, 32], DType::F32);
    let ct = Tensor::randn(&[32, 64, 32, 32], DType::F32);
    let ones = Tensor::ones(&[], DType::F32).reshape(&[1,1,1,1]).broadcast_to(&[32, 64, 32, 32]);
    let w = Tensor::randn(&[64, 64, 3, 3], DType::F32);
    let wt = w.permute(&[1, 0, 2, 3]).flip(&[2, 3]);
    let o = || ConvOpts { padding: Padding::Explicit(vec![(1, 1), (1, 1)]), ..Default::default() };
    time("fwd dense", || x.conv(&w, o()));
    time("dx dense ct", || ct.conv(&wt, o()));
    time("dx broadcast ct", || ones.conv(&wt, o()));
    let xt = x.permute(&[1, 0, 2, 3]);
    time("dw dense ct", || xt.conv(&ct.permute(&[1, 0, 2, 3]), o()));
    time("dw broadcast ct", || xt.conv(&ones.permute(&[1, 0, 2, 3]), o()));
}
