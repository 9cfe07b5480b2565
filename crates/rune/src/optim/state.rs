//! The optimizer's state, [`OptState`]: a parameter tree holding the step
//! count and each transformation's tensors, and the helpers the
//! transformations use to lay their tensors out in it (one tensor per
//! parameter leaf, keyed by the leaf's path) and to read them back,
//! panicking with "optimizer" when the state is not theirs.

use nx::{Ptree, Tensor, Tree};
use std::sync::Arc;

/// The state of an [`Optimizer`](super::Optimizer): an `I32` step count and
/// each transformation's tensors, as a parameter tree.
///
/// Being a [`Ptree`], it passes through `jit`, `vmap` and `grad` with the
/// parameters, and saves and loads with `nx::save` / `nx::load`. Its leaf
/// paths are `count` and `transforms.…`: the transformations' states in
/// their order (a `chain`'s as a list), each moment a dict keyed by the
/// parameters' leaf paths, e.g. `transforms.0.mu.l1.w` for Adam's first
/// moment of the parameter `l1.w`.
///
/// ```
/// use rune::prelude::*;
/// use rune::optim;
/// let params = vec![Tensor::ones(&[2], DType::F32)];
/// let opt = optim::adam(0.1, optim::AdamOpts::default());
/// let state = opt.init(&params);
/// assert_eq!(state.count().item::<i32>(), 0);
/// assert_eq!(state.leaf_paths(), ["count", "transforms.0.mu.0", "transforms.0.nu.0"]);
/// ```
#[derive(Ptree, Clone, Debug)]
pub struct OptState {
    count: Tensor,
    transforms: Tree,
    /// The structure of the optimizer that made it (`Transform::kind`),
    /// checked by `update`.
    #[ptree(ignore)]
    made_by: Arc<str>,
    /// The leaf paths of the parameters it was made for, checked against
    /// the gradients' by `update`.
    #[ptree(ignore)]
    param_paths: Arc<[String]>,
}

impl OptState {
    pub(crate) fn new(
        count: Tensor,
        transforms: Tree,
        made_by: Arc<str>,
        param_paths: Arc<[String]>,
    ) -> OptState {
        OptState {
            count,
            transforms,
            made_by,
            param_paths,
        }
    }

    /// The number of `update`s that led to this state: a 0-d `I32` tensor
    /// (with a leading axis when the state is batched, as under `vmap`).
    ///
    /// ```
    /// use rune::prelude::*;
    /// use rune::optim;
    /// let p = Tensor::ones(&[3], DType::F32);
    /// let opt = optim::sgd(0.1, optim::SgdOpts::default());
    /// let s0 = opt.init(&p);
    /// let (_, s1) = opt.update(&p, &s0, &p);
    /// assert_eq!((s0.count().item::<i32>(), s1.count().item::<i32>()), (0, 1));
    /// ```
    pub fn count(&self) -> Tensor {
        self.count.clone()
    }

    /// The transformations' tensors (see the type's docs for the layout).
    ///
    /// ```
    /// use rune::prelude::*;
    /// use rune::optim;
    /// let p = Tensor::ones(&[2], DType::F32);
    /// let opt = optim::chain(vec![optim::clip(1.0), optim::trace(0.9, false)]);
    /// let s = opt.init(&p);
    /// // The chain's list: clip has no tensors, trace one per parameter.
    /// assert_eq!(s.transforms().at(1).unwrap().get("trace").unwrap().as_tensor().unwrap().to_vec::<f32>(), vec![0.0, 0.0]);
    /// ```
    pub fn transforms(&self) -> &Tree {
        &self.transforms
    }

    pub(crate) fn made_by(&self) -> &str {
        &self.made_by
    }

    pub(crate) fn param_paths(&self) -> &[String] {
        &self.param_paths
    }
}

/// The parameter leaves a transformation works on: their paths (which
/// name them in the state and select them in `masked`) and their values.
pub(crate) struct Leaves<'a> {
    pub paths: &'a [String],
    pub tensors: &'a [Tensor],
}

/// A state with no tensors (a stateless transformation's).
pub(crate) fn empty() -> Tree {
    Tree::List(Vec::new())
}

/// Named parts of a transformation's state (`mu`, `nu`).
pub(crate) fn fields(parts: Vec<(&str, Tree)>) -> Tree {
    Tree::dict(parts)
}

/// Part `name` of a transformation's state made by [`fields`]; panics with
/// "optimizer" when there is none (a state from another optimizer).
pub(crate) fn field<'a>(state: &'a Tree, name: &str, owner: &str) -> &'a Tree {
    state.get(name).unwrap_or_else(|| {
        panic!(
            "optim: {owner} found no {name:?} in its part of the state ({} state): the state \
             was made by another optimizer",
            describe(state)
        )
    })
}

/// One tensor per parameter leaf as a state tree: a dict keyed by the
/// leaves' paths, so a checkpoint names each moment after its parameter.
/// A lone tensor (whose path is `""`) is the tensor itself.
pub(crate) fn per_leaf(paths: &[String], tensors: Vec<Tensor>) -> Tree {
    if let [only] = paths {
        if only.is_empty() {
            let t = tensors.into_iter().next().expect("one tensor per path");
            return Tree::Tensor(t);
        }
    }
    Tree::Dict(
        paths
            .iter()
            .cloned()
            .zip(tensors.into_iter().map(Tree::Tensor))
            .collect(),
    )
}

/// The tensors of a [`per_leaf`] tree, in the order of `paths`; panics with
/// "optimizer" when the tree was made for other leaves.
pub(crate) fn per_leaf_tensors(tree: &Tree, paths: &[String], owner: &str) -> Vec<Tensor> {
    if let (Tree::Tensor(t), [only]) = (tree, paths) {
        if only.is_empty() {
            return vec![t.clone()];
        }
    }
    let mismatch = |detail: String| -> ! {
        panic!(
            "optim: {owner}'s part of the state does not fit these parameters ({detail}): it was \
             made by another optimizer or for other parameters"
        )
    };
    let Tree::Dict(entries) = tree else {
        mismatch(format!("it holds a {} state", describe(tree)))
    };
    if entries.len() != paths.len() {
        mismatch(format!(
            "{} leaves in the state, {} parameters",
            entries.len(),
            paths.len()
        ));
    }
    entries
        .iter()
        .zip(paths)
        .map(|((key, value), path)| match value {
            Tree::Tensor(t) if key == path => t.clone(),
            _ if key != path => mismatch(format!(
                "the state has {key:?} where the parameters have {path:?}"
            )),
            _ => mismatch(format!(
                "{key:?} is a {} state, not a tensor",
                describe(value)
            )),
        })
        .collect()
}

/// A state tree's kind, for messages.
fn describe(tree: &Tree) -> String {
    match tree {
        Tree::Tensor(_) => "tensor".into(),
        Tree::List(items) => format!("list of {}", items.len()),
        Tree::Dict(entries) => {
            let keys: Vec<&str> = entries.iter().take(4).map(|(k, _)| k.as_str()).collect();
            format!("dict {{{}}}", keys.join(", "))
        }
    }
}
