//! Optimizers made of optimizers: `chain` (one after another), `masked`
//! (an optimizer on the leaves a [`Mask`] selects by path) and
//! `multi_steps` (gradient accumulation over k calls), as Optax's.

use super::state::{field, fields, per_leaf, per_leaf_tensors, Leaves};
use super::transform::Transform;
use super::Optimizer;
use nx::{Ptree, Tensor, Tree};
use std::fmt;
use std::sync::Arc;

#[derive(Debug)]
struct Chain {
    parts: Vec<Optimizer>,
}

impl Transform for Chain {
    fn kind(&self) -> String {
        let kinds: Vec<String> = self.parts.iter().map(|p| p.transform.kind()).collect();
        format!("chain({})", kinds.join(", "))
    }

    fn init(&self, params: &Leaves<'_>) -> Tree {
        Tree::List(
            self.parts
                .iter()
                .map(|p| p.transform.init(params))
                .collect(),
        )
    }

    fn step_values(&self, count: &Tensor) -> Tree {
        Tree::List(
            self.parts
                .iter()
                .map(|p| p.transform.step_values(count))
                .collect(),
        )
    }

    fn update(
        &self,
        mut updates: Vec<Tensor>,
        state: &Tree,
        params: &Leaves<'_>,
        step_values: &Tree,
    ) -> (Vec<Tensor>, Tree) {
        let parts = match state.as_list() {
            Some(parts) if parts.len() == self.parts.len() => parts,
            _ => panic!(
                "optim: a chain of {} transformations got a state that is not a list of {}: it \
                 was made by another optimizer",
                self.parts.len(),
                self.parts.len()
            ),
        };
        let part_values = step_values
            .as_list()
            .expect("optim: a chain's step values are a list");
        let mut next = Vec::with_capacity(parts.len());
        for ((part, part_state), values) in self.parts.iter().zip(parts).zip(part_values) {
            let (u, s) = part.transform.update(updates, part_state, params, values);
            updates = u;
            next.push(s);
        }
        (updates, Tree::List(next))
    }
}

/// The optimizers applied one after another, each to the previous one's
/// updates (Optax's `chain`); the state holds each one's state in order.
///
/// ```
/// use rune::prelude::*;
/// use rune::optim;
/// let g = Tensor::from_slice(&[30.0f32, -40.0], &[2]);
/// let opt = optim::chain(vec![optim::clip_by_global_norm(5.0), optim::scale(-0.1)]);
/// let (u, _) = opt.update(&g, &opt.init(&g), &g);
/// let u = u.to_vec::<f32>();
/// assert!((u[0] + 0.3).abs() < 1e-6 && (u[1] - 0.4).abs() < 1e-6);
/// ```
pub fn chain(parts: Vec<Optimizer>) -> Optimizer {
    Optimizer::new(Chain { parts })
}

/// Which leaves an optimizer applies to, by leaf path
/// ([`Ptree::leaf_paths`](nx::Ptree::leaf_paths): `"l1.w"`, `"layers.0.b"`).
/// Made by [`mask`].
#[derive(Clone)]
pub struct Mask {
    selects: Arc<dyn Fn(&str) -> bool + Send + Sync>,
}

impl Mask {
    /// Whether the leaf at `path` is selected.
    pub fn selects(&self, path: &str) -> bool {
        (self.selects)(path)
    }
}

impl fmt::Debug for Mask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Mask(..)")
    }
}

/// A [`Mask`] selecting the leaves whose path `selects` accepts.
///
/// ```
/// let weights_only = rune::optim::mask(|path: &str| path.ends_with(".w"));
/// assert!(weights_only.selects("l1.w") && !weights_only.selects("l1.b"));
/// ```
pub fn mask(selects: impl Fn(&str) -> bool + Send + Sync + 'static) -> Mask {
    Mask {
        selects: Arc::new(selects),
    }
}

#[derive(Debug)]
struct Masked {
    inner: Optimizer,
    mask: Mask,
}

impl Masked {
    /// The indices of the leaves the mask selects, and their paths and values.
    fn select(&self, params: &Leaves<'_>) -> (Vec<usize>, Vec<String>, Vec<Tensor>) {
        let chosen: Vec<usize> = (0..params.paths.len())
            .filter(|&i| self.mask.selects(&params.paths[i]))
            .collect();
        let paths = chosen.iter().map(|&i| params.paths[i].clone()).collect();
        let tensors = chosen.iter().map(|&i| params.tensors[i].clone()).collect();
        (chosen, paths, tensors)
    }
}

impl Transform for Masked {
    fn kind(&self) -> String {
        format!("masked({})", self.inner.transform.kind())
    }

    fn init(&self, params: &Leaves<'_>) -> Tree {
        let (_, paths, tensors) = self.select(params);
        self.inner.transform.init(&Leaves {
            paths: &paths,
            tensors: &tensors,
        })
    }

    fn step_values(&self, count: &Tensor) -> Tree {
        self.inner.transform.step_values(count)
    }

    fn update(
        &self,
        mut updates: Vec<Tensor>,
        state: &Tree,
        params: &Leaves<'_>,
        step_values: &Tree,
    ) -> (Vec<Tensor>, Tree) {
        let (chosen, paths, tensors) = self.select(params);
        let selected = chosen.iter().map(|&i| updates[i].clone()).collect();
        let inner_params = Leaves {
            paths: &paths,
            tensors: &tensors,
        };
        let (inner_updates, inner_state) =
            self.inner
                .transform
                .update(selected, state, &inner_params, step_values);
        for (i, u) in chosen.into_iter().zip(inner_updates) {
            updates[i] = u;
        }
        (updates, inner_state)
    }
}

/// `inner` on the leaves `mask` selects; the other leaves' updates pass
/// unchanged (Optax's `masked`). `inner` sees only the selected leaves: its
/// state holds tensors for them alone, and a global norm inside it spans
/// only them.
///
/// ```
/// use rune::prelude::*;
/// use rune::optim;
/// #[derive(Ptree, Clone)]
/// struct Lin { w: Tensor, b: Tensor }
/// let p = Lin { w: Tensor::ones(&[2], DType::F32), b: Tensor::ones(&[2], DType::F32) };
/// let opt = optim::masked(optim::scale(0.0), optim::mask(|path| path == "b"));
/// let (u, _) = opt.update(&p, &opt.init(&p), &p);
/// assert_eq!((u.w.to_vec::<f32>(), u.b.to_vec::<f32>()), (vec![1.0, 1.0], vec![0.0, 0.0]));
/// ```
pub fn masked(inner: Optimizer, mask: Mask) -> Optimizer {
    Optimizer::new(Masked { inner, mask })
}

#[derive(Debug)]
struct MultiSteps {
    inner: Optimizer,
    every_k: usize,
}

impl Transform for MultiSteps {
    fn kind(&self) -> String {
        format!("multi_steps({})", self.inner.transform.kind())
    }

    fn init(&self, params: &Leaves<'_>) -> Tree {
        let acc = per_leaf(
            params.paths,
            params.tensors.iter().map(Tensor::zeros_like).collect(),
        );
        fields(vec![
            ("acc_grads", acc),
            ("inner", self.inner.transform.init(params)),
        ])
    }

    fn step_values(&self, count: &Tensor) -> Tree {
        // The count says where this call is: the mini-step within the k
        // calls, and how many inner updates came before (Optax keeps both
        // as counters of their own; they are these quotients).
        let k = self.every_k as f64;
        let mini_step = count.rem(&count.scalar_like(k));
        let inner_count = count / k;
        let emit = mini_step.equal(&mini_step.scalar_like(k - 1.0));
        let seen = &mini_step + 1.0;
        fields(vec![
            ("emit", Tree::Tensor(emit)),
            ("seen", Tree::Tensor(seen)),
            ("inner", self.inner.transform.step_values(&inner_count)),
        ])
    }

    fn update(
        &self,
        updates: Vec<Tensor>,
        state: &Tree,
        params: &Leaves<'_>,
        step_values: &Tree,
    ) -> (Vec<Tensor>, Tree) {
        let owner = "multi_steps";
        let acc = per_leaf_tensors(field(state, "acc_grads", owner), params.paths, owner);
        let inner_state = field(state, "inner", owner);
        let value = |name: &str| {
            step_values
                .get(name)
                .expect("optim: multi_steps made its step values")
        };
        let emit = value("emit").as_tensor().expect("a tensor");
        // Optax's running mean: acc + (g - acc) / (mini_step + 1).
        let seen = value("seen").as_tensor().expect("a tensor");
        let mean: Vec<Tensor> = updates
            .iter()
            .zip(&acc)
            .map(|(g, a)| a + (g - a) / seen.cast(g.dtype()))
            .collect();
        let (inner_updates, next_inner) =
            self.inner
                .transform
                .update(mean.clone(), inner_state, params, value("inner"));
        // The inner state moves only on the k-th call; selected, not
        // branched on, so the step traces once (as Optax's jnp.where).
        let next_inner =
            inner_state.map2_leaves(&next_inner, &mut |old, new| Tensor::where_(emit, new, old));
        let out = inner_updates
            .iter()
            .map(|u| Tensor::where_(emit, u, &u.zeros_like()))
            .collect();
        let next_acc = mean
            .iter()
            .map(|m| Tensor::where_(emit, &m.zeros_like(), m))
            .collect();
        let state = fields(vec![
            ("acc_grads", per_leaf(params.paths, next_acc)),
            ("inner", next_inner),
        ]);
        (out, state)
    }
}

/// Gradient accumulation (Optax's `MultiSteps`): on k−1 calls out of k the
/// updates are zero and the gradients are averaged into the state; on the
/// k-th, `inner` is applied to the mean of the k gradients (and its state
/// moves). `inner`'s step count counts its own updates. Panics when `k` is 0.
///
/// ```
/// use rune::prelude::*;
/// use rune::optim;
/// let p = Tensor::zeros(&[1], DType::F32);
/// let opt = optim::multi_steps(optim::sgd(1.0, optim::SgdOpts::default()), 2);
/// let (u0, s) = opt.update(&Tensor::from_slice(&[1.0f32], &[1]), &opt.init(&p), &p);
/// let (u1, _) = opt.update(&Tensor::from_slice(&[3.0f32], &[1]), &s, &p);
/// assert_eq!((u0.to_vec::<f32>(), u1.to_vec::<f32>()), (vec![0.0], vec![-2.0]));
/// ```
pub fn multi_steps(inner: Optimizer, k: usize) -> Optimizer {
    assert!(k > 0, "optim::multi_steps: k must be at least 1, got 0");
    Optimizer::new(MultiSteps { inner, every_k: k })
}
