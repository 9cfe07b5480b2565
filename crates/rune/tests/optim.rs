//! `rune::optim` against Optax: every optimizer over six steps and every
//! schedule over thirteen, against the numbers `bench/optax_reference.py`
//! wrote into `tests/fixtures/optax_reference.rs` (Optax 0.2, f32). Then the
//! same step eagerly, under `jit` (one trace for every step), under `vmap`
//! over an ensemble, and under `grad` (`check_grads`); save, load and resume
//! against training without the stop; `masked`, `multi_steps` and the count
//! in closed form; and the panics for a state from another optimizer and
//! for gradients that do not fit.

use rune::optim::{self, OptState, Optimizer};
use rune::prelude::*;

mod common;
use common::panic_message;

mod optax {
    include!("fixtures/optax_reference.rs");
}

#[derive(Ptree, Clone, Debug)]
struct Params {
    w: Tensor,
    b: Tensor,
}

impl Params {
    /// `w`'s six values then `b`'s three.
    fn flat(&self) -> Vec<f32> {
        let mut v = self.w.to_vec::<f32>();
        v.extend(self.b.to_vec::<f32>());
        v
    }

    fn from_flat(flat: &[f32]) -> Params {
        Params {
            w: Tensor::from_slice(&flat[..6], &[2, 3]),
            b: Tensor::from_slice(&flat[6..], &[3]),
        }
    }
}

/// As `initial_params` in bench/optax_reference.py: multiples of 1/8.
fn initial_params() -> Params {
    let flat: Vec<f32> = (0..9).map(|i| ((i * 5) % 9 - 4) as f32 / 8.0).collect();
    Params::from_flat(&flat)
}

/// As `grads_at` in bench/optax_reference.py: multiples of 1/4.
fn grads_at(step: usize) -> Params {
    let flat: Vec<f32> = (0..9)
        .map(|i| ((i * 7 + step * 3) % 11) as f32 - 5.0)
        .map(|x| x / 4.0)
        .collect();
    Params::from_flat(&flat)
}

fn only_w() -> optim::Mask {
    optim::mask(|path: &str| path == "w")
}

/// The optimizer bench/optax_reference.py names `name`, built the same way.
fn rust_optimizer(name: &str) -> Optimizer {
    use optim::*;
    match name {
        "sgd" => sgd(0.1, SgdOpts::default()),
        "sgd_momentum" => sgd(
            0.1,
            SgdOpts {
                momentum: 0.9,
                nesterov: false,
            },
        ),
        "sgd_nesterov" => sgd(
            0.1,
            SgdOpts {
                momentum: 0.9,
                nesterov: true,
            },
        ),
        "adam" => adam(0.1, AdamOpts::default()),
        "adam_b1_b2_eps" => adam(
            0.05,
            AdamOpts {
                b1: 0.8,
                b2: 0.95,
                eps: 1e-3,
            },
        ),
        "adamw" => adamw(
            0.1,
            AdamWOpts {
                weight_decay: 0.1,
                ..Default::default()
            },
        ),
        "adamw_masked" => adamw(
            0.1,
            AdamWOpts {
                weight_decay: 0.5,
                mask: Some(only_w()),
                ..Default::default()
            },
        ),
        "lion" => lion(0.1, LionOpts::default()),
        "lion_wd_masked" => lion(
            0.05,
            LionOpts {
                b1: 0.8,
                b2: 0.9,
                weight_decay: 0.5,
                mask: Some(only_w()),
            },
        ),
        "rmsprop" => rmsprop(0.1, RmsPropOpts::default()),
        "rmsprop_centered" => rmsprop(
            0.1,
            RmsPropOpts {
                centered: true,
                ..Default::default()
            },
        ),
        "rmsprop_momentum" => rmsprop(
            0.1,
            RmsPropOpts {
                momentum: 0.9,
                ..Default::default()
            },
        ),
        "adagrad" => adagrad(0.1, AdagradOpts::default()),
        "adagrad_initial" => adagrad(
            0.2,
            AdagradOpts {
                initial_accumulator_value: 0.0,
                eps: 1e-3,
            },
        ),
        "clip_by_global_norm_adam" => chain(vec![
            clip_by_global_norm(1.0),
            adam(0.1, AdamOpts::default()),
        ]),
        "clip_sgd" => chain(vec![clip(0.5), sgd(0.1, SgdOpts::default())]),
        "adam_warmup_cosine" => adam(
            warmup_cosine_decay(0.0, 0.1, 2, 6, 0.01),
            AdamOpts::default(),
        ),
        "sgd_exponential" => sgd(exponential_decay(0.1, 0.5, 2, true), SgdOpts::default()),
        "sgd_piecewise" => sgd(
            piecewise_constant(0.1, &[(2, 0.5), (4, 0.1)]),
            SgdOpts::default(),
        ),
        "masked_adam" => masked(adam(0.1, AdamOpts::default()), only_w()),
        "multi_steps_adam" => multi_steps(adam(0.1, AdamOpts::default()), 2),
        "multi_steps_sgd_momentum" => multi_steps(
            sgd(
                0.1,
                SgdOpts {
                    momentum: 0.9,
                    nesterov: false,
                },
            ),
            3,
        ),
        "gpt_like" => gpt_like(),
        _ => panic!("no Rust optimizer for {name:?}: add it beside the script's"),
    }
}

/// Global-norm clipping, AdamW with warmup + cosine decay and decay on `w`
/// only: the GPT recipe.
fn gpt_like() -> Optimizer {
    optim::chain(vec![
        optim::clip_by_global_norm(2.0),
        optim::adamw(
            optim::warmup_cosine_decay(0.0, 0.05, 2, 8, 0.001),
            optim::AdamWOpts {
                weight_decay: 0.1,
                mask: Some(only_w()),
                ..Default::default()
            },
        ),
    ])
}

/// The schedule bench/optax_reference.py names `name`.
fn rust_schedule(name: &str) -> optim::Schedule {
    use optim::*;
    match name {
        "constant" => constant(0.3),
        "linear" => linear_schedule(1.0, 0.1, 5),
        "cosine" => cosine_decay(1.0, 8, 0.1),
        "cosine_no_alpha" => cosine_decay(0.5, 10, 0.0),
        "warmup_cosine" => warmup_cosine_decay(0.0, 1.0, 3, 10, 0.05),
        "warmup_cosine_from" => warmup_cosine_decay(0.2, 1.0, 4, 9, 0.0),
        "exponential" => exponential_decay(1.0, 0.5, 3, false),
        "exponential_staircase" => exponential_decay(2.0, 0.1, 4, true),
        "piecewise" => piecewise_constant(1.0, &[(3, 0.5), (6, 0.1), (9, 2.0)]),
        _ => panic!("no Rust schedule for {name:?}"),
    }
}

/// One training step: the update for `grads`, applied.
fn step(opt: &Optimizer, params: &Params, state: &OptState, grads: &Params) -> (Params, OptState) {
    let (updates, state) = opt.update(grads, state, params);
    (optim::apply_updates(params, &updates), state)
}

/// The parameters after each of `steps` eager steps from the start.
fn eager_trajectory(opt: &Optimizer, steps: usize) -> Vec<Params> {
    let mut params = initial_params();
    let mut state = opt.init(&params);
    let mut out = Vec::new();
    for t in 0..steps {
        (params, state) = step(opt, &params, &state, &grads_at(t));
        out.push(params.clone());
    }
    out
}

/// Equal to Optax's f32 numbers up to a few roundings of f32 (bias
/// corrections' powers are computed differently; clipping's factor is
/// rounded once rather than per element).
fn assert_close(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let tol = 2e-6 + 2e-6 * w.abs();
        assert!(
            (g - w).abs() <= tol,
            "{what}: element {i} is {g}, Optax's is {w} (difference {:e})",
            (g - w).abs()
        );
    }
}

fn bits(p: &Params) -> Vec<u32> {
    p.flat().iter().map(|x| x.to_bits()).collect()
}

#[test]
fn every_optimizer_matches_optax_over_six_steps() {
    assert_eq!(optax::OPTAX_STEPS, 6);
    for (name, want) in optax::OPTIMIZERS {
        let got = eager_trajectory(&rust_optimizer(name), optax::OPTAX_STEPS);
        for (t, (p, w)) in got.iter().zip(want.iter()).enumerate() {
            assert_close(&format!("{name}, step {}", t + 1), &p.flat(), w);
        }
    }
}

#[test]
fn every_schedule_matches_optax_on_the_host_and_inside_update() {
    assert_eq!(optax::SCHEDULE_STEPS, 12);
    for (name, want) in optax::SCHEDULES {
        let schedule = rust_schedule(name);
        // On the host, in f64, against Optax's f32.
        for (t, w) in want.iter().enumerate() {
            let got = schedule.at(t as u64);
            assert!(
                (got - *w as f64).abs() <= 1e-6 * (1.0 + w.abs() as f64),
                "{name}.at({t}) = {got}, Optax's is {w}"
            );
        }
        // Inside update, on the count as a tensor: scale_by_learning_rate of
        // a gradient of one is -lr(count).
        let one = Tensor::ones(&[], DType::F32);
        let opt = optim::scale_by_learning_rate(schedule);
        let mut state = opt.init(&one);
        for (t, w) in want.iter().enumerate() {
            let (u, next) = opt.update(&one, &state, &one);
            let got = -u.item::<f32>();
            assert!(
                (got - w).abs() <= 1e-7 * (1.0 + w.abs()),
                "{name} inside update at count {t}: {got}, Optax's is {w}"
            );
            state = next;
        }
    }
}

#[test]
fn the_step_under_jit_traces_once_and_matches_eager() {
    let opt = gpt_like();
    let jitted = jit(|(p, s, g): &(Params, OptState, Params)| step(&opt, p, s, g));
    let eager = eager_trajectory(&opt, 6);
    let mut params = initial_params();
    let mut state = opt.init(&params);
    for t in 0..6 {
        (params, state) = jitted.call(&(params, state, grads_at(t)));
        // Elementwise work is eager's bit for bit; the global norm's sum
        // may be ordered differently.
        assert_close(
            &format!("jit step {}", t + 1),
            &params.flat(),
            &eager[t].flat(),
        );
        let want = optax::OPTIMIZERS
            .iter()
            .find(|(n, _)| *n == "gpt_like")
            .unwrap()
            .1;
        assert_close(
            &format!("jit step {} vs Optax", t + 1),
            &params.flat(),
            &want[t],
        );
    }
    assert_eq!(jitted.trace_count(), 1, "one trace serves every step count");
    assert_eq!(state.count().item::<i32>(), 6);
    assert_eq!(state.count().dtype(), DType::I32);
}

#[test]
fn vmap_over_an_ensemble_of_models_and_states_matches_each_member() {
    let opt = optim::chain(vec![
        optim::clip_by_global_norm(1.5),
        optim::adam(optim::cosine_decay(0.1, 5, 0.1), optim::AdamOpts::default()),
    ]);
    let members = 3;
    // Member k starts from the common parameters times (k + 1) and sees the
    // gradients times (k + 1) / 2, so that clipping acts on some members.
    let scaled = |p: &Params, s: f64| p.map_leaves(&mut |t| t * s);
    let stack = |ps: Vec<Params>| Params {
        w: Tensor::stack(&ps.iter().map(|p| p.w.clone()).collect::<Vec<_>>(), 0),
        b: Tensor::stack(&ps.iter().map(|p| p.b.clone()).collect::<Vec<_>>(), 0),
    };
    let member_params = |k: usize| scaled(&initial_params(), (k + 1) as f64);
    let member_grads = |k: usize, t: usize| scaled(&grads_at(t), (k + 1) as f64 / 2.0);

    let mut params = stack((0..members).map(member_params).collect());
    let mut state = vmap(|p: &Params| opt.init(p), &params);
    assert_eq!(state.count().shape(), &[members]);
    let vstep = |(p, s, g): &(Params, OptState, Params)| step(&opt, p, s, g);
    for t in 0..5 {
        let grads = stack((0..members).map(|k| member_grads(k, t)).collect());
        (params, state) = vmap(vstep, &(params, state, grads));
    }
    assert_eq!(state.count().to_vec::<i32>(), vec![5; members]);
    for k in 0..members {
        let mut p = member_params(k);
        let mut s = opt.init(&p);
        for t in 0..5 {
            (p, s) = step(&opt, &p, &s, &member_grads(k, t));
        }
        let got = Params {
            w: params.w.get(k),
            b: params.b.get(k),
        };
        assert_close(&format!("ensemble member {k}"), &got.flat(), &p.flat());
    }
}

#[test]
fn grad_through_an_update_passes_check_grads() {
    // Meta-learning's shape: a loss after one update, differentiated with
    // respect to the parameters and the gradients fed to the update, from a
    // state with non-zero moments. f64 for the finite differences.
    let to_f64 = |p: &Params| p.map_leaves(&mut |t| t.cast(DType::F64));
    let opt = optim::chain(vec![
        optim::clip_by_global_norm(100.0),
        optim::adamw(
            optim::warmup_cosine_decay(0.0, 0.1, 2, 10, 0.01),
            optim::AdamWOpts {
                weight_decay: 0.1,
                ..Default::default()
            },
        ),
    ]);
    let params = to_f64(&initial_params());
    let mut state = opt.init(&params);
    for t in 0..3 {
        (_, state) = opt.update(&to_f64(&grads_at(t)), &state, &params);
    }
    let target = to_f64(&grads_at(7));
    let loss = |(p, g): &(Params, Params)| {
        let (u, _) = opt.update(g, &state, p);
        let next = optim::apply_updates(p, &u);
        (&next.w - &target.w).square().sum_all() + (&next.b - &target.b).square().sum_all()
    };
    let at = (params.clone(), to_f64(&grads_at(3)));
    check_grads(loss, &at).unwrap();
    // The clipped branch too: a norm above the maximum.
    let clipping = optim::chain(vec![
        optim::clip_by_global_norm(0.5),
        optim::sgd(0.3, Default::default()),
    ]);
    let s0 = clipping.init(&params);
    let clipped_loss = |(p, g): &(Params, Params)| {
        let (u, _) = clipping.update(g, &s0, p);
        optim::apply_updates(p, &u).w.square().sum_all()
    };
    check_grads(clipped_loss, &at).unwrap();
}

#[test]
fn save_load_and_resume_gives_the_bits_of_training_without_the_stop() {
    let opt = gpt_like();
    let uninterrupted = eager_trajectory(&opt, 6);

    let mut params = initial_params();
    let mut state = opt.init(&params);
    for t in 0..3 {
        (params, state) = step(&opt, &params, &state, &grads_at(t));
    }
    let path = std::env::temp_dir().join(format!(
        "rune_optim_resume_{}.safetensors",
        std::process::id()
    ));
    nx::save(&(params, state), &path).unwrap();
    let template = Params {
        w: Tensor::zeros(&[2, 3], DType::F32),
        b: Tensor::zeros(&[3], DType::F32),
    };
    let (mut params, mut state) =
        nx::load(&path, &(template.clone(), opt.init(&template))).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(state.count().item::<i32>(), 3);
    for t in 3..6 {
        (params, state) = step(&opt, &params, &state, &grads_at(t));
    }
    assert_eq!(bits(&params), bits(&uninterrupted[5]));
}

#[test]
fn the_state_is_a_tree_named_after_the_parameters() {
    let opt = gpt_like();
    let state = opt.init(&initial_params());
    assert_eq!(
        state.leaf_paths(),
        [
            "count",
            "transforms.1.0.mu.w",
            "transforms.1.0.mu.b",
            "transforms.1.0.nu.w",
            "transforms.1.0.nu.b",
        ]
    );
    assert_eq!(state.count().dtype(), DType::I32);
    assert_eq!(state.count().shape(), &[] as &[usize]);
}

#[test]
fn count_starts_at_zero_and_update_leaves_its_input_state_unchanged() {
    let opt = optim::adam(0.1, optim::AdamOpts::default());
    let params = initial_params();
    let s0 = opt.init(&params);
    let before: Vec<Vec<f32>> = s0.leaves()[1..].iter().map(|t| t.to_vec::<f32>()).collect();
    let (_, s1) = opt.update(&grads_at(0), &s0, &params);
    let (_, s2) = opt.update(&grads_at(1), &s1, &params);
    assert_eq!(
        [s0.count(), s1.count(), s2.count()].map(|c| c.item::<i32>()),
        [0, 1, 2]
    );
    let after: Vec<Vec<f32>> = s0.leaves()[1..].iter().map(|t| t.to_vec::<f32>()).collect();
    assert_eq!(before, after);
    assert!(after.iter().all(|v| v.iter().all(|x| *x == 0.0)));
}

#[test]
fn masked_applies_inner_to_the_selected_leaves_and_passes_the_others() {
    let params = initial_params();
    let grads = Params {
        w: Tensor::from_slice(&[3.0f32, 0.0, 0.0, 0.0, 4.0, 0.0], &[2, 3]), // norm 5
        b: Tensor::from_slice(&[100.0f32, -7.0, 0.5], &[3]),
    };
    // The norm inside `masked` spans only w: w is scaled by 1/5, b passes.
    let opt = optim::masked(optim::clip_by_global_norm(1.0), only_w());
    let (u, _) = opt.update(&grads, &opt.init(&params), &params);
    assert_close(
        "masked clip, w",
        &u.w.to_vec::<f32>(),
        &[0.6, 0.0, 0.0, 0.0, 0.8, 0.0],
    );
    assert_eq!(u.b.to_vec::<f32>(), vec![100.0, -7.0, 0.5]);
    // The inner state holds the selected leaves alone.
    let opt = optim::masked(optim::trace(0.9, false), only_w());
    assert_eq!(
        opt.init(&params).leaf_paths(),
        ["count", "transforms.trace.w"]
    );
}

#[test]
fn multi_steps_emits_every_kth_call_the_inner_update_of_the_mean() {
    let params = initial_params();
    // Inner SGD with momentum 0.5: its trace moves only on emitting calls.
    let inner = optim::sgd(
        1.0,
        optim::SgdOpts {
            momentum: 0.5,
            nesterov: false,
        },
    );
    let opt = optim::multi_steps(inner, 3);
    let mut state = opt.init(&params);
    let g = |x: f32| Params {
        w: Tensor::full(&[2, 3], x as f64, DType::F32),
        b: Tensor::full(&[3], -(x as f64), DType::F32),
    };
    // Calls 1-3 see gradients 1, 2, 6 (mean 3); calls 4-6 see 0, 0, 3 (mean 1).
    let mut outs = Vec::new();
    for x in [1.0, 2.0, 6.0, 0.0, 0.0, 3.0] {
        let (u, next) = opt.update(&g(x), &state, &params);
        outs.push(u.w.to_vec::<f32>()[0]);
        assert_eq!(u.b.to_vec::<f32>()[0], -outs.last().unwrap());
        state = next;
    }
    // Inner trace: 3, then 1 + 0.5 * 3 = 2.5; updates -lr * trace.
    assert_eq!(outs, vec![0.0, 0.0, -3.0, 0.0, 0.0, -2.5]);
    assert_eq!(state.count().item::<i32>(), 6);
}

#[test]
fn a_state_from_another_optimizer_panics_saying_so() {
    let params = initial_params();
    let grads = grads_at(0);
    let adam = optim::adam(0.1, optim::AdamOpts::default());
    let sgd = optim::sgd(
        0.1,
        optim::SgdOpts {
            momentum: 0.9,
            nesterov: false,
        },
    );
    let msg = panic_message(|| {
        adam.update(&grads, &sgd.init(&params), &params);
    });
    assert!(msg.contains("optimizer"), "{msg}");
    let lion = optim::lion(0.1, optim::LionOpts::default());
    let msg = panic_message(|| {
        lion.update(&grads, &adam.init(&params), &params);
    });
    assert!(msg.contains("optimizer"), "{msg}");
    // The same kind with other hyper-parameters is the same optimizer (a
    // run resumed with a new learning rate).
    let adam2 = optim::adam(
        0.01,
        optim::AdamOpts {
            b1: 0.8,
            ..Default::default()
        },
    );
    adam2.update(&grads, &adam.init(&params), &params);
}

#[test]
fn grads_that_do_not_fit_panic_naming_the_leaf_path() {
    let opt = optim::adam(0.1, optim::AdamOpts::default());
    let params = initial_params();
    let state = opt.init(&params);
    // A shape that differs from the parameter's.
    let wrong_shape = Params {
        w: Tensor::zeros(&[3, 2], DType::F32),
        b: Tensor::zeros(&[3], DType::F32),
    };
    let msg = panic_message(|| {
        opt.update(&wrong_shape, &state, &params);
    });
    assert!(msg.contains("\"w\"") && msg.contains("[3, 2]"), "{msg}");
    // A tree with another structure than the one the state was made for.
    let tree = |names: &[&str]| {
        Tree::dict(
            names
                .iter()
                .map(|n| (*n, Tree::from(Tensor::zeros(&[2], DType::F32)))),
        )
    };
    let dict_state = opt.init(&tree(&["enc", "dec"]));
    let msg = panic_message(|| {
        opt.update(
            &tree(&["enc", "head"]),
            &dict_state,
            &tree(&["enc", "head"]),
        );
    });
    assert!(msg.contains("\"head\"") && msg.contains("\"dec\""), "{msg}");
    let msg = panic_message(|| {
        opt.update(&tree(&["enc"]), &dict_state, &tree(&["enc"]));
    });
    assert!(msg.contains("\"dec\""), "{msg}");
    // apply_updates names the leaf too.
    let msg = panic_message(|| {
        optim::apply_updates(&params, &wrong_shape);
    });
    assert!(msg.contains("\"w\""), "{msg}");
}

#[test]
fn optimizers_schedules_masks_and_states_are_values_to_share() {
    fn shareable<T: Clone + std::fmt::Debug + Send + Sync>() {}
    shareable::<Optimizer>();
    shareable::<optim::Schedule>();
    shareable::<optim::Mask>();
    fn tree<T: Ptree + Clone + std::fmt::Debug>() {}
    tree::<OptState>();
    // One optimizer serves threads at once.
    let opt = gpt_like();
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let opt = opt.clone();
            std::thread::spawn(move || {
                let p = initial_params();
                let (_, s) = step(&opt, &p, &opt.init(&p), &grads_at(0));
                s.count().item::<i32>()
            })
        })
        .collect();
    assert!(handles.into_iter().all(|h| h.join().unwrap() == 1));
}
