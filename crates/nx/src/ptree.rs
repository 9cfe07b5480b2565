//! Parameter trees: nested containers whose leaves are tensors.
//!
//! A [`Ptree`] can be mapped leaf by leaf (`map_leaves`), zipped with another
//! tree of the same structure (`map2_leaves`), and walked (`for_each_leaf`).
//! Transformations use this to flatten arguments and results into lists of
//! tensors and to rebuild them (`leaves`, `with_leaves`).
//!
//! Traversal order: struct fields in declaration order, tuples, `Vec` and
//! arrays in index order, `BTreeMap` in key order, [`Tree::Dict`] in its
//! vector's order.

use crate::tensor::Tensor;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A structure whose leaves are tensors.
///
/// Traversal order: struct fields in declaration order, tuples, `Vec` and
/// arrays in index order, `BTreeMap` in key order, [`Tree::Dict`] in its
/// vector's order.
///
/// Implement it with `#[derive(Ptree)]` on structs and tuple structs;
/// `#[ptree(ignore)]` on a field keeps it as metadata (cloned by `map_leaves`,
/// taken from `self` by `map2_leaves`, skipped by `for_each_leaf`).
///
/// ```
/// use nx::{Ptree, Tensor, Tree};
/// use std::collections::BTreeMap;
///
/// #[derive(Ptree, Clone)]
/// struct Layer { w: Tensor, b: Tensor, #[ptree(ignore)] name: String }
///
/// let layer = Layer {
///     w: Tensor::from_slice(&[1.0f32, 2.0], &[2]),
///     b: Tensor::scalar(0.5f32),
///     name: "dense".into(),
/// };
/// assert_eq!(layer.num_leaves(), 2);
/// let doubled = layer.map_leaves(&mut |t| t * 2.0);
/// assert_eq!(doubled.w.to_vec::<f32>(), vec![2.0, 4.0]);
/// assert_eq!(doubled.name, "dense");
///
/// let mut params = BTreeMap::new();
/// params.insert("layer".to_string(), (layer.w.clone(), vec![layer.b.clone()]));
/// assert_eq!(params.leaves().len(), 2);
///
/// let tree = Tree::dict([("w", Tree::from(layer.w.clone())), ("b", layer.b.clone().into())]);
/// assert_eq!(tree.get("b").unwrap().as_tensor().unwrap().item::<f32>(), 0.5);
/// ```
pub trait Ptree: Sized {
    /// The same structure with every leaf replaced by `f(leaf)`.
    fn map_leaves(&self, f: &mut dyn FnMut(&Tensor) -> Tensor) -> Self;

    /// The same structure with every leaf replaced by `f(leaf, other_leaf)`.
    ///
    /// Panics if the structures differ (a list length, `Some`/`None`, a dict
    /// key, a [`Tree`] variant, or a leaf dtype), naming what differs and where.
    fn map2_leaves(&self, other: &Self, f: &mut dyn FnMut(&Tensor, &Tensor) -> Tensor) -> Self;

    /// Calls `f` on every leaf once, in the traversal order.
    fn for_each_leaf(&self, f: &mut dyn FnMut(&Tensor));

    /// The leaves in traversal order (cheap handles on the same tensors).
    fn leaves(&self) -> Vec<Tensor> {
        let mut out = Vec::new();
        self.for_each_leaf(&mut |t| out.push(t.clone()));
        out
    }

    /// How many leaves the tree has.
    fn num_leaves(&self) -> usize {
        let mut n = 0;
        self.for_each_leaf(&mut |_| n += 1);
        n
    }

    /// The name of each leaf, in traversal order: its path in the tree,
    /// segments joined with `.`: struct fields by name, tuple-struct fields,
    /// tuple, `Vec` and array elements by index, `BTreeMap` and
    /// [`Tree::Dict`] entries by key; `Option` and `Box` add no segment, and
    /// a lone tensor's path is `""`. Checkpoints ([`save`](crate::save),
    /// [`load`](crate::load)) name the tensors so.
    ///
    /// Provided: it calls [`visit_paths`](Ptree::visit_paths), which every
    /// impl in nx and `#[derive(Ptree)]` override; a hand-written impl that
    /// does not names its leaves by flat index (`"0"`, `"1"`, ...).
    ///
    /// ```
    /// use nx::{Ptree, Tensor};
    /// use std::collections::BTreeMap;
    ///
    /// #[derive(Ptree, Clone)]
    /// struct Layer { w: Tensor, b: Option<Tensor> }
    /// #[derive(Ptree, Clone)]
    /// struct Model { layers: Vec<Layer>, head: (Tensor, Tensor) }
    ///
    /// let t = || Tensor::scalar(0.0f32);
    /// let m = Model {
    ///     layers: vec![Layer { w: t(), b: Some(t()) }, Layer { w: t(), b: None }],
    ///     head: (t(), t()),
    /// };
    /// assert_eq!(m.leaf_paths(), ["layers.0.w", "layers.0.b", "layers.1.w", "head.0", "head.1"]);
    /// let d = BTreeMap::from([("m".to_string(), vec![t()])]);
    /// assert_eq!(d.leaf_paths(), ["m.0"]);
    /// assert_eq!(t().leaf_paths(), [""]);
    /// ```
    fn leaf_paths(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.visit_paths("", &mut out);
        out
    }

    /// Appends to `out` the path of each leaf, in traversal order, each
    /// under `prefix` (the path of `self`; `""` at the root). Segments are
    /// joined with `.` (see [`leaf_paths`](Ptree::leaf_paths)).
    ///
    /// Provided: the default names the leaves by flat index under `prefix`
    /// (`prefix.0`, `prefix.1`, ...); impls with named parts override it.
    ///
    /// ```
    /// use nx::{Ptree, Tensor};
    /// let mut out = Vec::new();
    /// (Tensor::scalar(1.0f32), vec![Tensor::scalar(2.0f32)]).visit_paths("opt", &mut out);
    /// assert_eq!(out, ["opt.0", "opt.1.0"]);
    /// ```
    fn visit_paths(&self, prefix: &str, out: &mut Vec<String>) {
        for i in 0..self.num_leaves() {
            out.push(__private::join(prefix, &i.to_string()));
        }
    }

    /// The same structure with `leaves` (in traversal order) as its leaves.
    ///
    /// Panics if `leaves.len()` is not [`num_leaves`](Ptree::num_leaves).
    fn with_leaves(&self, leaves: &[Tensor]) -> Self {
        let n = self.num_leaves();
        if leaves.len() != n {
            panic!(
                "with_leaves: the tree has {n} leaves but {} were given",
                leaves.len()
            );
        }
        let mut it = leaves.iter();
        self.map_leaves(&mut |_| {
            it.next()
                .expect("with_leaves: the tree produced more leaves than it counted")
                .clone()
        })
    }
}

// ---------------------------------------------------------------------------
// Paths for map2_leaves messages
// ---------------------------------------------------------------------------

/// Helpers for `#[derive(Ptree)]` and the impls here: they record where
/// `map2_leaves` is in the tree so that a mismatch names its path.
#[doc(hidden)]
pub mod __private {
    use super::*;

    pub(super) enum Seg {
        Field(&'static str),
        Pos(usize),
        Index(usize),
        Key(String),
    }

    thread_local! {
        static PATH: RefCell<Vec<Seg>> = const { RefCell::new(Vec::new()) };
    }

    /// Pops the segment it pushed when dropped (also during unwinding).
    pub struct PathGuard(());

    impl Drop for PathGuard {
        fn drop(&mut self) {
            PATH.with(|p| {
                p.borrow_mut().pop();
            });
        }
    }

    fn push(seg: Seg) -> PathGuard {
        PATH.with(|p| p.borrow_mut().push(seg));
        PathGuard(())
    }

    /// Entering the named field `name` (`.name`).
    pub fn field(name: &'static str) -> PathGuard {
        push(Seg::Field(name))
    }

    /// Entering the positional field `i` of a tuple or tuple struct (`.i`).
    pub fn pos(i: usize) -> PathGuard {
        push(Seg::Pos(i))
    }

    /// `prefix.seg`, or `seg` when `prefix` is empty (the root): how leaf
    /// paths are built.
    pub fn join(prefix: &str, seg: &str) -> String {
        if prefix.is_empty() {
            seg.to_string()
        } else {
            let mut s = String::with_capacity(prefix.len() + 1 + seg.len());
            s.push_str(prefix);
            s.push('.');
            s.push_str(seg);
            s
        }
    }

    pub(super) fn index(i: usize) -> PathGuard {
        push(Seg::Index(i))
    }

    pub(super) fn key(k: &str) -> PathGuard {
        push(Seg::Key(k.to_string()))
    }

    /// Restores the saved path when dropped.
    pub(super) struct Suspended(Vec<Seg>);

    impl Drop for Suspended {
        fn drop(&mut self) {
            let saved = std::mem::take(&mut self.0);
            PATH.with(|p| *p.borrow_mut() = saved);
        }
    }

    /// Clears the path while a user closure runs (it may zip other trees),
    /// and restores it afterwards.
    pub(super) fn suspend() -> Suspended {
        Suspended(PATH.with(|p| std::mem::take(&mut *p.borrow_mut())))
    }

    /// ` (at .layers[1].w)`, or nothing at the root.
    pub(super) fn location() -> String {
        PATH.with(|p| {
            let p = p.borrow();
            if p.is_empty() {
                return String::new();
            }
            let mut s = String::from(" (at ");
            for seg in p.iter() {
                let _ = match seg {
                    Seg::Field(name) => write!(s, ".{name}"),
                    Seg::Pos(i) => write!(s, ".{i}"),
                    Seg::Index(i) => write!(s, "[{i}]"),
                    Seg::Key(k) => write!(s, "[{k:?}]"),
                };
            }
            s.push(')');
            s
        })
    }
}

use __private::{index, join, key, location, pos, suspend};

#[cold]
fn mismatch(what: std::fmt::Arguments<'_>) -> ! {
    panic!("map2_leaves: {what}{}", location())
}

fn check_len(left: usize, right: usize) {
    if left != right {
        mismatch(format_args!("list lengths differ: {left} vs {right}"));
    }
}

/// Panics naming the first key that differs between two ordered key lists.
fn check_keys<'a>(
    left: impl ExactSizeIterator<Item = &'a String>,
    right: impl ExactSizeIterator<Item = &'a String>,
) {
    let (mut l, mut r) = (left, right);
    loop {
        match (l.next(), r.next()) {
            (None, None) => return,
            (Some(a), Some(b)) if a == b => continue,
            (Some(a), Some(b)) => mismatch(format_args!("dict keys differ: {a:?} vs {b:?}")),
            (Some(a), None) => mismatch(format_args!(
                "dict keys differ: {a:?} vs no key (the right dict is shorter)"
            )),
            (None, Some(b)) => mismatch(format_args!(
                "dict keys differ: no key vs {b:?} (the left dict is shorter)"
            )),
        }
    }
}

// ---------------------------------------------------------------------------
// Leaves and containers
// ---------------------------------------------------------------------------

impl Ptree for Tensor {
    fn map_leaves(&self, f: &mut dyn FnMut(&Tensor) -> Tensor) -> Self {
        f(self)
    }

    fn map2_leaves(&self, other: &Self, f: &mut dyn FnMut(&Tensor, &Tensor) -> Tensor) -> Self {
        let (a, b) = (self.dtype(), other.dtype());
        if a != b {
            mismatch(format_args!("leaf dtypes differ: {a} vs {b}"));
        }
        let _s = suspend();
        f(self, other)
    }

    fn for_each_leaf(&self, f: &mut dyn FnMut(&Tensor)) {
        f(self)
    }

    fn num_leaves(&self) -> usize {
        1
    }

    fn visit_paths(&self, prefix: &str, out: &mut Vec<String>) {
        out.push(prefix.to_string());
    }
}

impl Ptree for () {
    fn map_leaves(&self, _f: &mut dyn FnMut(&Tensor) -> Tensor) -> Self {}

    fn map2_leaves(&self, _other: &Self, _f: &mut dyn FnMut(&Tensor, &Tensor) -> Tensor) -> Self {}

    fn for_each_leaf(&self, _f: &mut dyn FnMut(&Tensor)) {}

    fn num_leaves(&self) -> usize {
        0
    }

    fn visit_paths(&self, _prefix: &str, _out: &mut Vec<String>) {}
}

macro_rules! tuple_impl {
    ($($T:ident $i:tt),+) => {
        impl<$($T: Ptree),+> Ptree for ($($T,)+) {
            fn map_leaves(&self, f: &mut dyn FnMut(&Tensor) -> Tensor) -> Self {
                ($(self.$i.map_leaves(f),)+)
            }

            fn map2_leaves(
                &self,
                other: &Self,
                f: &mut dyn FnMut(&Tensor, &Tensor) -> Tensor,
            ) -> Self {
                ($({
                    let _g = pos($i);
                    self.$i.map2_leaves(&other.$i, f)
                },)+)
            }

            fn for_each_leaf(&self, f: &mut dyn FnMut(&Tensor)) {
                $(self.$i.for_each_leaf(f);)+
            }

            fn visit_paths(&self, prefix: &str, out: &mut Vec<String>) {
                $(self.$i.visit_paths(&join(prefix, stringify!($i)), out);)+
            }
        }
    };
}

tuple_impl!(A 0);
tuple_impl!(A 0, B 1);
tuple_impl!(A 0, B 1, C 2);
tuple_impl!(A 0, B 1, C 2, D 3);
tuple_impl!(A 0, B 1, C 2, D 3, E 4);
tuple_impl!(A 0, B 1, C 2, D 3, E 4, F 5);
tuple_impl!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_impl!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
tuple_impl!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
tuple_impl!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
tuple_impl!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
tuple_impl!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);

impl<T: Ptree> Ptree for Vec<T> {
    fn map_leaves(&self, f: &mut dyn FnMut(&Tensor) -> Tensor) -> Self {
        self.iter().map(|x| x.map_leaves(f)).collect()
    }

    fn map2_leaves(&self, other: &Self, f: &mut dyn FnMut(&Tensor, &Tensor) -> Tensor) -> Self {
        check_len(self.len(), other.len());
        self.iter()
            .zip(other)
            .enumerate()
            .map(|(i, (a, b))| {
                let _g = index(i);
                a.map2_leaves(b, f)
            })
            .collect()
    }

    fn for_each_leaf(&self, f: &mut dyn FnMut(&Tensor)) {
        for x in self {
            x.for_each_leaf(f);
        }
    }

    fn visit_paths(&self, prefix: &str, out: &mut Vec<String>) {
        for (i, x) in self.iter().enumerate() {
            x.visit_paths(&join(prefix, &i.to_string()), out);
        }
    }
}

impl<T: Ptree, const N: usize> Ptree for [T; N] {
    fn map_leaves(&self, f: &mut dyn FnMut(&Tensor) -> Tensor) -> Self {
        std::array::from_fn(|i| self[i].map_leaves(f))
    }

    fn map2_leaves(&self, other: &Self, f: &mut dyn FnMut(&Tensor, &Tensor) -> Tensor) -> Self {
        std::array::from_fn(|i| {
            let _g = index(i);
            self[i].map2_leaves(&other[i], f)
        })
    }

    fn for_each_leaf(&self, f: &mut dyn FnMut(&Tensor)) {
        for x in self {
            x.for_each_leaf(f);
        }
    }

    fn visit_paths(&self, prefix: &str, out: &mut Vec<String>) {
        for (i, x) in self.iter().enumerate() {
            x.visit_paths(&join(prefix, &i.to_string()), out);
        }
    }
}

impl<T: Ptree> Ptree for Option<T> {
    fn map_leaves(&self, f: &mut dyn FnMut(&Tensor) -> Tensor) -> Self {
        self.as_ref().map(|x| x.map_leaves(f))
    }

    fn map2_leaves(&self, other: &Self, f: &mut dyn FnMut(&Tensor, &Tensor) -> Tensor) -> Self {
        match (self, other) {
            (Some(a), Some(b)) => Some(a.map2_leaves(b, f)),
            (None, None) => None,
            (Some(_), None) => mismatch(format_args!("options differ: Some vs None")),
            (None, Some(_)) => mismatch(format_args!("options differ: None vs Some")),
        }
    }

    fn for_each_leaf(&self, f: &mut dyn FnMut(&Tensor)) {
        if let Some(x) = self {
            x.for_each_leaf(f);
        }
    }

    fn visit_paths(&self, prefix: &str, out: &mut Vec<String>) {
        if let Some(x) = self {
            x.visit_paths(prefix, out);
        }
    }
}

impl<T: Ptree> Ptree for Box<T> {
    fn map_leaves(&self, f: &mut dyn FnMut(&Tensor) -> Tensor) -> Self {
        Box::new((**self).map_leaves(f))
    }

    fn map2_leaves(&self, other: &Self, f: &mut dyn FnMut(&Tensor, &Tensor) -> Tensor) -> Self {
        Box::new((**self).map2_leaves(other, f))
    }

    fn for_each_leaf(&self, f: &mut dyn FnMut(&Tensor)) {
        (**self).for_each_leaf(f)
    }

    fn visit_paths(&self, prefix: &str, out: &mut Vec<String>) {
        (**self).visit_paths(prefix, out)
    }
}

impl<T: Ptree> Ptree for BTreeMap<String, T> {
    fn map_leaves(&self, f: &mut dyn FnMut(&Tensor) -> Tensor) -> Self {
        self.iter()
            .map(|(k, v)| (k.clone(), v.map_leaves(f)))
            .collect()
    }

    fn map2_leaves(&self, other: &Self, f: &mut dyn FnMut(&Tensor, &Tensor) -> Tensor) -> Self {
        check_keys(self.keys(), other.keys());
        self.iter()
            .zip(other.values())
            .map(|((k, a), b)| {
                let _g = key(k);
                (k.clone(), a.map2_leaves(b, f))
            })
            .collect()
    }

    fn for_each_leaf(&self, f: &mut dyn FnMut(&Tensor)) {
        for v in self.values() {
            v.for_each_leaf(f);
        }
    }

    fn visit_paths(&self, prefix: &str, out: &mut Vec<String>) {
        for (k, v) in self {
            v.visit_paths(&join(prefix, k), out);
        }
    }
}

// ---------------------------------------------------------------------------
// The dynamic tree
// ---------------------------------------------------------------------------

/// A parameter tree whose structure is only known at run time: a tensor, a
/// list of trees, or an ordered dict of named trees (traversed in its
/// vector's order; keys are expected to be distinct).
#[derive(Clone, Debug)]
pub enum Tree {
    /// A leaf.
    Tensor(Tensor),
    /// A list of subtrees, in order.
    List(Vec<Tree>),
    /// Named subtrees, in the vector's order.
    Dict(Vec<(String, Tree)>),
}

impl Tree {
    /// A leaf.
    pub fn leaf(t: Tensor) -> Tree {
        Tree::Tensor(t)
    }

    /// A list of trees.
    pub fn list(items: impl IntoIterator<Item = Tree>) -> Tree {
        Tree::List(items.into_iter().collect())
    }

    /// A dict, in the iterator's order.
    pub fn dict<K: Into<String>>(items: impl IntoIterator<Item = (K, Tree)>) -> Tree {
        Tree::Dict(items.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    /// `"Tensor"`, `"List"` or `"Dict"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Tree::Tensor(_) => "Tensor",
            Tree::List(_) => "List",
            Tree::Dict(_) => "Dict",
        }
    }

    /// Whether this is a leaf.
    pub fn is_tensor(&self) -> bool {
        matches!(self, Tree::Tensor(_))
    }

    /// The tensor of a leaf.
    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            Tree::Tensor(t) => Some(t),
            _ => None,
        }
    }

    /// The items of a list.
    pub fn as_list(&self) -> Option<&[Tree]> {
        match self {
            Tree::List(items) => Some(items),
            _ => None,
        }
    }

    /// The entries of a dict.
    pub fn as_dict(&self) -> Option<&[(String, Tree)]> {
        match self {
            Tree::Dict(entries) => Some(entries),
            _ => None,
        }
    }

    /// The entry `key` of a dict (the first one if repeated); `None` if
    /// absent or if this is not a dict.
    pub fn get(&self, key: &str) -> Option<&Tree> {
        self.as_dict()?
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// Item `i` of a list; `None` if out of range or if this is not a list.
    pub fn at(&self, i: usize) -> Option<&Tree> {
        self.as_list()?.get(i)
    }

    /// Consumes a leaf into its tensor.
    pub fn into_tensor(self) -> Option<Tensor> {
        match self {
            Tree::Tensor(t) => Some(t),
            _ => None,
        }
    }
}

impl From<Tensor> for Tree {
    fn from(t: Tensor) -> Tree {
        Tree::Tensor(t)
    }
}

impl From<&Tensor> for Tree {
    fn from(t: &Tensor) -> Tree {
        Tree::Tensor(t.clone())
    }
}

impl From<Vec<Tree>> for Tree {
    fn from(items: Vec<Tree>) -> Tree {
        Tree::List(items)
    }
}

impl From<Vec<(String, Tree)>> for Tree {
    fn from(entries: Vec<(String, Tree)>) -> Tree {
        Tree::Dict(entries)
    }
}

impl Ptree for Tree {
    fn map_leaves(&self, f: &mut dyn FnMut(&Tensor) -> Tensor) -> Self {
        match self {
            Tree::Tensor(t) => Tree::Tensor(t.map_leaves(f)),
            Tree::List(items) => Tree::List(items.map_leaves(f)),
            Tree::Dict(entries) => Tree::Dict(
                entries
                    .iter()
                    .map(|(k, v)| (k.clone(), v.map_leaves(f)))
                    .collect(),
            ),
        }
    }

    fn map2_leaves(&self, other: &Self, f: &mut dyn FnMut(&Tensor, &Tensor) -> Tensor) -> Self {
        match (self, other) {
            (Tree::Tensor(a), Tree::Tensor(b)) => Tree::Tensor(a.map2_leaves(b, f)),
            (Tree::List(a), Tree::List(b)) => Tree::List(a.map2_leaves(b, f)),
            (Tree::Dict(a), Tree::Dict(b)) => {
                check_keys(a.iter().map(|(k, _)| k), b.iter().map(|(k, _)| k));
                Tree::Dict(
                    a.iter()
                        .zip(b)
                        .map(|((k, x), (_, y))| {
                            let _g = key(k);
                            (k.clone(), x.map2_leaves(y, f))
                        })
                        .collect(),
                )
            }
            _ => mismatch(format_args!(
                "Tree variants differ: {} vs {}",
                self.kind(),
                other.kind()
            )),
        }
    }

    fn for_each_leaf(&self, f: &mut dyn FnMut(&Tensor)) {
        match self {
            Tree::Tensor(t) => f(t),
            Tree::List(items) => items.for_each_leaf(f),
            Tree::Dict(entries) => {
                for (_, v) in entries {
                    v.for_each_leaf(f);
                }
            }
        }
    }

    fn visit_paths(&self, prefix: &str, out: &mut Vec<String>) {
        match self {
            Tree::Tensor(_) => out.push(prefix.to_string()),
            Tree::List(items) => items.visit_paths(prefix, out),
            Tree::Dict(entries) => {
                for (k, v) in entries {
                    v.visit_paths(&join(prefix, k), out);
                }
            }
        }
    }
}
