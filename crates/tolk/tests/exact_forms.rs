//! A kernel with guarded fast forms (f32 sin, exp) recomputes its results
//! with its exact forms, built on first need, when an input is beyond the
//! fast forms' range: compiled now or loaded from the disk cache, the
//! results equal eager's bit for bit.

use nx::{Aval, DType, Prim, Tensor, UnaryOp};
use tolk::{Eqn, Graph, Origin};

fn graph() -> Graph {
    // y = exp(sin(x)), x: f32[8]
    let mut g = Graph::default();
    let x = g.new_var(Aval::new(&[8], DType::F32));
    let s = g.new_var(Aval::new(&[8], DType::F32));
    let y = g.new_var(Aval::new(&[8], DType::F32));
    g.inputs.push(x);
    g.eqns
        .push(Eqn::prim(Prim::Unary(UnaryOp::Sin), vec![x], s));
    g.eqns
        .push(Eqn::prim(Prim::Unary(UnaryOp::Exp), vec![s], y));
    g.outputs.push(y);
    g
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec::<f32>().iter().map(|v| v.to_bits()).collect()
}

#[test]
fn guarded_kernels_fall_back_to_their_exact_forms_compiled_or_cached() {
    let dir = std::env::temp_dir().join(format!("tolk-exact-{}", std::process::id()));
    std::env::set_var("XDG_CACHE_HOME", &dir);
    let inside = Tensor::from_slice(&[0.5f32, -1.0, 2.0, 3.0, -4.0, 0.0, 1e-3, 100.0], &[8]);
    let beyond = Tensor::from_slice(
        &[1e5f32, -4e4, f32::NAN, 32768.5, 1e30, 0.25, -0.0, 7.0],
        &[8],
    );
    let first = tolk::compile(graph(), true).expect("needs a C compiler (cc)");
    assert_eq!(first.origin, Origin::Compiled);
    let again = tolk::compile(graph(), true).expect("loads");
    assert_eq!(again.origin, Origin::Disk);
    for p in [&first.program, &again.program] {
        for x in [&inside, &beyond, &inside] {
            let got = p.run(&[x.clone()]);
            assert_eq!(
                bits(&got[0]),
                bits(&x.sin().exp()),
                "x = {:?}",
                x.to_vec::<f32>()
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
