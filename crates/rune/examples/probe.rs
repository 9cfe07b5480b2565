use rune::prelude::*;
use std::time::Instant;
fn t(name: &str, mut f: impl FnMut()) {
    for _ in 0..20 {
        f();
    }
    let mut v: Vec<f64> = (0..300)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("{name:<30} min {:.3} med {:.3}", v[0], v[v.len() / 2]);
}
fn main() {
    let sizes = [784, 512, 512, 10];
    let p: Vec<(Tensor, Tensor)> = sizes
        .windows(2)
        .map(|s| {
            (
                Tensor::ones(&[s[0], s[1]], DType::F32) * 0.01,
                Tensor::zeros(&[s[1]], DType::F32),
            )
        })
        .collect();
    let x = Tensor::ones(&[128, 784], DType::F32);
    let y = Tensor::from_vec(
        (0..128).map(|i| (i % 10) as i32).collect::<Vec<_>>(),
        &[128, 1],
    );
    let loss = |p: &Vec<(Tensor, Tensor)>| {
        let mut h = x.clone();
        for l in &p[..p.len() - 1] {
            h = (h.matmul(&l.0) + &l.1).relu();
        }
        let last = &p[p.len() - 1];
        let logits = h.matmul(&last.0) + &last.1;
        -logits.log_softmax(-1).take_along_axis(&y, 1).mean_all()
    };
    if std::env::args().count() > 1 {
        for _ in 0..1500 {
            rune::value_and_grad(loss, &p);
        }
        return;
    }
    t("forward", || {
        loss(&p);
    });
    t("matmuls fwd only", || {
        let mut h = x.clone();
        for l in &p {
            h = h.matmul(&l.0);
        }
    });
    t("value_and_grad", || {
        rune::value_and_grad(loss, &p);
    });
    let (_, g) = rune::value_and_grad(loss, &p);
    t("sgd", || {
        p.map2_leaves(&g, &mut |w, g| w - g * 0.01);
    });
    t("sgd one pass (w*1 - g?)", || {
        for (a, b) in p.iter().zip(&g) {
            let _ = &a.0 - &b.0;
            let _ = &a.1 - &b.1;
        }
    });
    rune::with_debug(|| rune::value_and_grad(loss, &p));
}
