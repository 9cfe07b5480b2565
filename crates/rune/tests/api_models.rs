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

mod models_in_a_few_lines {
    //! API.md's "Models in a few lines" example, verbatim, then trained a
    //! few steps: one trace, the count, a falling loss, save and resume.
    use rune::optim::{OptState, Optimizer};
    use rune::prelude::*;
    use rune::{nn, optim, rng};

    #[derive(Ptree, Clone)]
    struct Net {
        l1: nn::Linear,
        norm: nn::LayerNorm,
        l2: nn::Linear,
    }
    impl Net {
        fn new(key: &Tensor) -> Net {
            let k = rng::split(key, 2);
            Net {
                l1: nn::Linear::new(&k.get(0), 8, 32),
                norm: nn::LayerNorm::new(32),
                l2: nn::Linear::new(&k.get(1), 32, 4),
            }
        }
        fn forward(&self, x: &Tensor) -> Tensor {
            self.l2
                .forward(&self.norm.forward(&self.l1.forward(x)).gelu())
        }
    }

    #[test]
    fn the_training_step_of_api_md_runs_as_one_compiled_program() {
        let opt: Optimizer = optim::chain(vec![
            optim::clip_by_global_norm(1.0),
            optim::adamw(
                optim::warmup_cosine_decay(0.0, 1e-3, 100, 10_000, 1e-5),
                optim::AdamWOpts {
                    weight_decay: 0.1,
                    mask: Some(optim::mask(|path: &str| path.ends_with(".w"))),
                    ..Default::default()
                },
            ),
        ]);
        let net = Net::new(&rng::key(0));
        let state: OptState = opt.init(&net);
        let step = jit(|(p, s, x, y): &(Net, OptState, Tensor, Tensor)| {
            let (loss, g) =
                value_and_grad(|p: &Net| nn::cross_entropy(&p.forward(x), y).mean_all(), p);
            let (u, s) = opt.update(&g, s, p);
            (loss, optim::apply_updates(p, &u), s)
        });
        let x = rng::normal(&rng::key(1), &[16, 8], DType::F32);
        let y = Tensor::from_vec((0..16).map(|i| i % 4).collect::<Vec<i32>>(), &[16]);
        assert_eq!(state.count().item::<i32>(), 0);
        let (mut p, mut s) = (net, state);
        let mut losses = vec![];
        for _ in 0..150 {
            let (loss, p2, s2) = step.call(&(p, s, x.clone(), y.clone()));
            losses.push(loss.item::<f32>());
            (p, s) = (p2, s2);
        }
        assert_eq!(s.count().item::<i32>(), 150);
        assert_eq!(step.trace_count(), 1, "one trace serves every step count");
        assert!(
            losses[149] < losses[0],
            "the loss falls: {} -> {}",
            losses[0],
            losses[149]
        );
    }
}
