//! `#[derive(Ptree)]` from a crate that uses rune's prelude only.

use rune::prelude::*;
mod common;
use common::panic_message;
use std::collections::BTreeMap;

fn s(v: f32) -> Tensor {
    Tensor::scalar(v)
}

fn vals<P: Ptree>(p: &P) -> Vec<f32> {
    let mut out = Vec::new();
    p.for_each_leaf(&mut |t| out.push(t.item::<f32>()));
    out
}

/// The struct of API.md, verbatim.
#[derive(Ptree, Clone)]
struct Mlp {
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
    #[ptree(ignore)]
    name: String,
}

fn mlp(base: f32, name: &str) -> Mlp {
    Mlp {
        w1: s(base + 1.0),
        b1: s(base + 2.0),
        w2: s(base + 3.0),
        b2: s(base + 4.0),
        name: name.into(),
    }
}

#[derive(Ptree, Clone)]
struct Affine(Tensor, Tensor);

#[derive(Ptree, Clone)]
struct Scaled(Tensor, #[ptree(ignore)] f64, Vec<Tensor>);

#[derive(Ptree, Clone)]
struct Pair<T> {
    a: T,
    b: T,
}

#[derive(Ptree, Clone)]
struct Empty;

#[derive(Ptree, Clone)]
struct AllIgnored {
    #[ptree(ignore)]
    step: usize,
}

/// Lifetimes, const generics, where clauses, and a type parameter that only
/// appears in an ignored field (it gets no `Ptree` bound: `M = Vec<u8>` works).
#[derive(Ptree, Clone)]
struct Stack<'a, T, M, const N: usize>
where
    M: Clone,
{
    items: [T; N],
    #[ptree(ignore)]
    tag: &'a str,
    #[ptree(ignore)]
    meta: M,
}

#[derive(Ptree, Clone)]
struct Model {
    #[ptree(ignore)]
    step: usize,
    layers: Vec<Mlp>,
    head: Pair<Tensor>,
    extra: Pair<Affine>,
    table: BTreeMap<String, Scaled>,
    dynamic: Tree,
    skip: Option<Box<Mlp>>,
}

fn model() -> Model {
    let mut table = BTreeMap::new();
    table.insert("t".to_string(), Scaled(s(30.0), 0.25, vec![s(31.0)]));
    Model {
        step: 7,
        layers: vec![mlp(0.0, "first"), mlp(10.0, "second")],
        head: Pair {
            a: s(21.0),
            b: s(22.0),
        },
        extra: Pair {
            a: Affine(s(23.0), s(24.0)),
            b: Affine(s(25.0), s(26.0)),
        },
        table,
        dynamic: Tree::dict([("z", Tree::from(s(32.0))), ("y", Tree::from(s(33.0)))]),
        skip: None,
    }
}

#[test]
fn mlp_fields_in_declaration_order() {
    let m = mlp(0.0, "mlp");
    assert_eq!(m.num_leaves(), 4);
    assert_eq!(vals(&m), vec![1.0, 2.0, 3.0, 4.0]);
    let leaves = m.leaves();
    assert!(leaves[0].shares_storage_with(&m.w1));
    assert!(leaves[3].shares_storage_with(&m.b2));
    let mut seen = Vec::new();
    let doubled = m.map_leaves(&mut |t| {
        seen.push(t.item::<f32>());
        t * 2.0
    });
    assert_eq!(seen, vec![1.0, 2.0, 3.0, 4.0]);
    assert_eq!(vals(&doubled), vec![2.0, 4.0, 6.0, 8.0]);
    assert_eq!(doubled.w2.item::<f32>(), 6.0);
    // The ignored field is cloned.
    assert_eq!(doubled.name, "mlp");
    let rebuilt = m.with_leaves(&[s(9.0), s(8.0), s(7.0), s(6.0)]);
    assert_eq!(rebuilt.b1.item::<f32>(), 8.0);
    assert_eq!(rebuilt.name, "mlp");
}

#[test]
fn map2_pairs_fields_and_takes_ignored_from_the_left() {
    let left = mlp(0.0, "left");
    let right = mlp(10.0, "right");
    let mut pairs = Vec::new();
    let z = left.map2_leaves(&right, &mut |a, b| {
        pairs.push((a.item::<f32>(), b.item::<f32>()));
        a + b
    });
    assert_eq!(
        pairs,
        vec![(1.0, 11.0), (2.0, 12.0), (3.0, 13.0), (4.0, 14.0)]
    );
    assert_eq!(vals(&z), vec![12.0, 14.0, 16.0, 18.0]);
    assert_eq!(z.name, "left");
    let z = right.map2_leaves(&left, &mut |a, _| a.clone());
    assert_eq!(z.name, "right");
}

#[test]
fn tuple_structs() {
    let a = Affine(s(1.0), s(2.0));
    assert_eq!(vals(&a), vec![1.0, 2.0]);
    let m = a.map_leaves(&mut |t| t + 1.0);
    assert_eq!((m.0.item::<f32>(), m.1.item::<f32>()), (2.0, 3.0));
    let sc = Scaled(s(1.0), 0.5, vec![s(2.0), s(3.0)]);
    assert_eq!(sc.num_leaves(), 3);
    assert_eq!(vals(&sc), vec![1.0, 2.0, 3.0]);
    let other = Scaled(s(4.0), 9.0, vec![s(5.0), s(6.0)]);
    let z = sc.map2_leaves(&other, &mut |x, y| x + y);
    assert_eq!(vals(&z), vec![5.0, 7.0, 9.0]);
    assert_eq!(z.1, 0.5);
    assert_eq!(sc.with_leaves(&[s(0.0), s(0.0), s(0.0)]).1, 0.5);
}

#[test]
fn generic_structs() {
    let p = Pair {
        a: s(1.0),
        b: s(2.0),
    };
    assert_eq!(vals(&p), vec![1.0, 2.0]);
    let q = Pair {
        a: vec![s(1.0), s(2.0)],
        b: vec![s(3.0)],
    };
    assert_eq!(vals(&q), vec![1.0, 2.0, 3.0]);
    let r = q.map_leaves(&mut |t| t * 10.0);
    assert_eq!(vals(&r.a), vec![10.0, 20.0]);
    let pm = Pair {
        a: mlp(0.0, "a"),
        b: mlp(4.0, "b"),
    };
    assert_eq!(vals(&pm), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    assert_eq!(pm.map_leaves(&mut |t| t.clone()).b.name, "b");

    let st: Stack<'_, Tensor, Vec<u8>, 3> = Stack {
        items: [s(1.0), s(2.0), s(3.0)],
        tag: "stack",
        meta: vec![1, 2],
    };
    assert_eq!(vals(&st), vec![1.0, 2.0, 3.0]);
    let st2 = st.map2_leaves(&st, &mut |a, b| a + b);
    assert_eq!(vals(&st2), vec![2.0, 4.0, 6.0]);
    assert_eq!(st2.tag, "stack");
    assert_eq!(st2.meta, vec![1, 2]);
}

#[test]
fn structs_without_leaves() {
    assert_eq!(Empty.num_leaves(), 0);
    let _: Empty = Empty.map2_leaves(&Empty, &mut |a, _| a.clone());
    let a = AllIgnored { step: 3 };
    assert_eq!(a.num_leaves(), 0);
    assert_eq!(a.with_leaves(&[]).step, 3);
    assert_eq!(
        a.map2_leaves(&AllIgnored { step: 4 }, &mut |x, _| x.clone())
            .step,
        3
    );
}

#[test]
fn nested_derived_structs() {
    let m = model();
    let expect = vec![
        1.0, 2.0, 3.0, 4.0, 11.0, 12.0, 13.0, 14.0, // layers
        21.0, 22.0, // head
        23.0, 24.0, 25.0, 26.0, // extra
        30.0, 31.0, // table
        32.0, 33.0, // dynamic, in the Dict's order
    ];
    assert_eq!(vals(&m), expect);
    assert_eq!(m.num_leaves(), expect.len());
    let m2 = m.map_leaves(&mut |t| t + 1.0);
    assert_eq!(m2.step, 7);
    assert_eq!(m2.layers[1].name, "second");
    assert_eq!(m2.table["t"].1, 0.25);
    assert_eq!(
        vals(&m2),
        expect.iter().map(|v| v + 1.0).collect::<Vec<_>>()
    );
    let mut other = m2.clone();
    other.step = 100;
    let z = m.map2_leaves(&other, &mut |a, b| b - a);
    assert_eq!(z.step, 7);
    assert!(vals(&z).iter().all(|&v| v == 1.0));
    let rebuilt = m.with_leaves(&m2.leaves());
    assert_eq!(vals(&rebuilt), vals(&m2));
    assert_eq!(rebuilt.layers[0].name, "first");
}

#[test]
fn through_the_nx_reexport() {
    // `rune::nx` is the same crate: its trait is the prelude's.
    fn count<P: rune::nx::Ptree>(p: &P) -> usize {
        p.num_leaves()
    }
    assert_eq!(count(&mlp(0.0, "x")), 4);
    let t: rune::nx::Tree = Tree::leaf(s(1.0));
    assert_eq!(count(&t), 1);
}

#[test]
#[should_panic(expected = "map2_leaves: list lengths differ: 2 vs 1 (at .layers)")]
fn map2_list_length_in_a_field() {
    let a = model();
    let mut b = model();
    b.layers.pop();
    a.map2_leaves(&b, &mut |x, _| x.clone());
}

#[test]
#[should_panic(expected = "map2_leaves: leaf dtypes differ: f32 vs f64 (at .layers[1].b1)")]
fn map2_dtype_in_a_nested_field() {
    let a = model();
    let mut b = model();
    b.layers[1].b1 = Tensor::scalar(2.0f64);
    a.map2_leaves(&b, &mut |x, _| x.clone());
}

#[test]
#[should_panic(expected = "map2_leaves: options differ: None vs Some (at .skip)")]
fn map2_option_in_a_field() {
    let a = model();
    let mut b = model();
    b.skip = Some(Box::new(mlp(0.0, "x")));
    a.map2_leaves(&b, &mut |x, _| x.clone());
}

#[test]
#[should_panic(expected = "map2_leaves: dict keys differ: \"t\" vs \"u\" (at .table)")]
fn map2_dict_key_in_a_field() {
    let a = model();
    let mut b = model();
    let v = b.table.remove("t").unwrap();
    b.table.insert("u".to_string(), v);
    a.map2_leaves(&b, &mut |x, _| x.clone());
}

#[test]
#[should_panic(expected = "map2_leaves: Tree variants differ: Dict vs List (at .dynamic)")]
fn map2_tree_variant_in_a_field() {
    let a = model();
    let mut b = model();
    b.dynamic = Tree::list([]);
    a.map2_leaves(&b, &mut |x, _| x.clone());
}

#[test]
#[should_panic(expected = "map2_leaves: list lengths differ: 1 vs 2 (at .table[\"t\"].2)")]
fn map2_in_a_tuple_struct_field() {
    let a = model();
    let mut b = model();
    b.table.get_mut("t").unwrap().2.push(s(0.0));
    a.map2_leaves(&b, &mut |x, _| x.clone());
}

#[test]
#[should_panic(expected = "with_leaves: the tree has 4 leaves but 5 were given")]
fn with_leaves_wrong_count() {
    mlp(0.0, "x").with_leaves(&[s(0.0), s(0.0), s(0.0), s(0.0), s(0.0)]);
}

#[test]
fn map2_path_inside_generic_and_tuple_structs() {
    let a = Pair {
        a: Affine(s(1.0), s(2.0)),
        b: Affine(s(3.0), s(4.0)),
    };
    let b = Pair {
        a: Affine(s(1.0), s(2.0)),
        b: Affine(s(3.0), Tensor::scalar(4i32)),
    };
    let msg = panic_message(|| {
        a.map2_leaves(&b, &mut |x, _| x.clone());
    });
    assert_eq!(msg, "map2_leaves: leaf dtypes differ: f32 vs i32 (at .b.1)");
}
