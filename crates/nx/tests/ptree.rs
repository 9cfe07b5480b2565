//! Parameter trees: every `Ptree` impl (map, map2, traversal order, the
//! provided methods), nesting, and every `map2_leaves` / `with_leaves` panic.

use nx::{DType, Ptree, Tensor, Tree};
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A scalar f32 leaf.
fn s(v: f32) -> Tensor {
    Tensor::scalar(v)
}

/// A scalar f64 leaf.
fn d(v: f64) -> Tensor {
    Tensor::scalar(v)
}

/// The leaves of a tree of f32 scalars, in traversal order (through `for_each_leaf`).
fn vals<P: Ptree>(p: &P) -> Vec<f32> {
    let mut out = Vec::new();
    p.for_each_leaf(&mut |t| out.push(t.item::<f32>()));
    out
}

fn plus(p: &impl Ptree, c: f64) -> Vec<f32> {
    vals(&p.map_leaves(&mut |t| t + c))
}

/// `a*10 + b` leaf by leaf, so that the pairing and the order both show.
fn zip<P: Ptree>(a: &P, b: &P) -> P {
    a.map2_leaves(b, &mut |x, y| &(x * 10.0) + y)
}

/// Every generic check on a tree of f32 scalars whose leaves are `expect`.
fn check_tree<P: Ptree>(p: &P, expect: &[f32]) {
    assert_eq!(vals(p), expect, "for_each_leaf order");
    assert_eq!(p.num_leaves(), expect.len());
    let leaves = p.leaves();
    assert_eq!(leaves.len(), expect.len());
    assert_eq!(
        leaves.iter().map(|t| t.item::<f32>()).collect::<Vec<_>>(),
        expect
    );
    // Leaves are handles on the same tensors.
    let mut originals = Vec::new();
    p.for_each_leaf(&mut |t| originals.push(t.clone()));
    for (a, b) in leaves.iter().zip(&originals) {
        assert!(a.shares_storage_with(b));
    }
    // map_leaves visits in the same order and keeps the structure.
    let mut seen = Vec::new();
    let mapped = p.map_leaves(&mut |t| {
        seen.push(t.item::<f32>());
        t + 1.0
    });
    assert_eq!(seen, expect, "map_leaves order");
    let plus1: Vec<f32> = expect.iter().map(|v| v + 1.0).collect();
    assert_eq!(vals(&mapped), plus1);
    // map2_leaves pairs leaf i with leaf i.
    let mut pairs = Vec::new();
    let zipped = p.map2_leaves(&mapped, &mut |a, b| {
        pairs.push((a.item::<f32>(), b.item::<f32>()));
        &(a * 10.0) + b
    });
    let expect_pairs: Vec<(f32, f32)> = expect.iter().map(|&v| (v, v + 1.0)).collect();
    assert_eq!(pairs, expect_pairs, "map2_leaves order");
    let expect_zip: Vec<f32> = expect.iter().map(|v| v * 10.0 + v + 1.0).collect();
    assert_eq!(vals(&zipped), expect_zip);
    // with_leaves puts new leaves back in order.
    let fresh: Vec<Tensor> = (0..expect.len()).map(|i| s(100.0 + i as f32)).collect();
    let rebuilt = p.with_leaves(&fresh);
    let expect_fresh: Vec<f32> = (0..expect.len()).map(|i| 100.0 + i as f32).collect();
    assert_eq!(vals(&rebuilt), expect_fresh);
    let mut got = Vec::new();
    rebuilt.for_each_leaf(&mut |t| got.push(t.clone()));
    for (a, b) in got.iter().zip(&fresh) {
        assert!(a.shares_storage_with(b));
    }
    // A tree rebuilt from its own leaves is the same tree.
    assert_eq!(vals(&p.with_leaves(&p.leaves())), expect);
}

/// The panic message of `f`.
fn panic_message(f: impl FnOnce()) -> String {
    let err = catch_unwind(AssertUnwindSafe(f)).expect_err("expected a panic");
    if let Some(s) = err.downcast_ref::<String>() {
        s.clone()
    } else if let Some(s) = err.downcast_ref::<&str>() {
        s.to_string()
    } else {
        panic!("panic payload is not a string")
    }
}

// ---------------------------------------------------------------------------
// Tensor and ()
// ---------------------------------------------------------------------------

#[test]
fn tensor_is_one_leaf() {
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3]);
    assert_eq!(x.num_leaves(), 1);
    assert!(x.leaves()[0].shares_storage_with(&x));
    let y = x.map_leaves(&mut |t| t * 2.0);
    assert_eq!(y.to_vec::<f32>(), vec![2.0, 4.0, 6.0]);
    let z = x.map2_leaves(&y, &mut |a, b| a + b);
    assert_eq!(z.to_vec::<f32>(), vec![3.0, 6.0, 9.0]);
    let w = x.with_leaves(std::slice::from_ref(&y));
    assert!(w.shares_storage_with(&y));
    check_tree(&s(7.0), &[7.0]);
}

#[test]
fn tensor_leaves_of_any_dtype_and_shape() {
    let i = Tensor::from_slice(&[1i32, 2, 3, 4], &[2, 2]);
    let j = Tensor::from_slice(&[10i32, 20, 30, 40], &[2, 2]);
    let k = i.map2_leaves(&j, &mut |a, b| a + b);
    assert_eq!(k.dtype(), DType::I32);
    assert_eq!(k.shape(), &[2, 2]);
    assert_eq!(k.to_vec::<i32>(), vec![11, 22, 33, 44]);
}

#[test]
fn unit_has_no_leaves() {
    let u = ();
    assert_eq!(u.num_leaves(), 0);
    assert!(u.leaves().is_empty());
    let mut called = false;
    u.map_leaves(&mut |t| {
        called = true;
        t.clone()
    });
    u.map2_leaves(&(), &mut |a, _| {
        called = true;
        a.clone()
    });
    u.for_each_leaf(&mut |_| called = true);
    u.with_leaves(&[]);
    assert!(!called);
    check_tree(&(), &[]);
}

// ---------------------------------------------------------------------------
// Tuples
// ---------------------------------------------------------------------------

#[test]
fn tuples_in_index_order() {
    check_tree(&(s(1.0),), &[1.0]);
    check_tree(&(s(1.0), s(2.0)), &[1.0, 2.0]);
    check_tree(&(s(1.0), s(2.0), s(3.0)), &[1.0, 2.0, 3.0]);
    check_tree(&(s(1.0), s(2.0), s(3.0), s(4.0)), &[1.0, 2.0, 3.0, 4.0]);
    check_tree(
        &(s(1.0), s(2.0), s(3.0), s(4.0), s(5.0)),
        &[1.0, 2.0, 3.0, 4.0, 5.0],
    );
    check_tree(
        &(s(1.0), s(2.0), s(3.0), s(4.0), s(5.0), s(6.0)),
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
    );
    check_tree(
        &(s(1.0), s(2.0), s(3.0), s(4.0), s(5.0), s(6.0), s(7.0)),
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0],
    );
    check_tree(
        &(
            s(1.0),
            s(2.0),
            s(3.0),
            s(4.0),
            s(5.0),
            s(6.0),
            s(7.0),
            s(8.0),
        ),
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
    );
    check_tree(
        &(
            s(1.0),
            s(2.0),
            s(3.0),
            s(4.0),
            s(5.0),
            s(6.0),
            s(7.0),
            s(8.0),
            s(9.0),
        ),
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
    );
    check_tree(
        &(
            s(1.0),
            s(2.0),
            s(3.0),
            s(4.0),
            s(5.0),
            s(6.0),
            s(7.0),
            s(8.0),
            s(9.0),
            s(10.0),
        ),
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0],
    );
    check_tree(
        &(
            s(1.0),
            s(2.0),
            s(3.0),
            s(4.0),
            s(5.0),
            s(6.0),
            s(7.0),
            s(8.0),
            s(9.0),
            s(10.0),
            s(11.0),
        ),
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0],
    );
    let twelve = (
        s(1.0),
        s(2.0),
        s(3.0),
        s(4.0),
        s(5.0),
        s(6.0),
        s(7.0),
        s(8.0),
        s(9.0),
        s(10.0),
        s(11.0),
        s(12.0),
    );
    check_tree(
        &twelve,
        &[
            1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0,
        ],
    );
    // The positions are kept, not just the flat order.
    let m = twelve.map_leaves(&mut |t| t * 2.0);
    assert_eq!(m.0.item::<f32>(), 2.0);
    assert_eq!(m.11.item::<f32>(), 24.0);
}

#[test]
fn tuples_of_mixed_containers() {
    let p = (
        s(1.0),
        vec![s(2.0), s(3.0)],
        (),
        Some(s(4.0)),
        None::<Tensor>,
    );
    check_tree(&p, &[1.0, 2.0, 3.0, 4.0]);
    let q = p.map_leaves(&mut |t| t + 1.0);
    assert_eq!(q.1.len(), 2);
    assert!(q.3.is_some());
    assert!(q.4.is_none());
}

// ---------------------------------------------------------------------------
// Vec, arrays, Option, Box
// ---------------------------------------------------------------------------

#[test]
fn vec_in_index_order() {
    check_tree(&Vec::<Tensor>::new(), &[]);
    check_tree(&vec![s(3.0), s(1.0), s(2.0)], &[3.0, 1.0, 2.0]);
    check_tree(
        &vec![vec![s(1.0)], vec![], vec![s(2.0), s(3.0)]],
        &[1.0, 2.0, 3.0],
    );
    let v = vec![s(1.0), s(2.0)];
    let w = vec![s(5.0), s(6.0)];
    assert_eq!(vals(&zip(&v, &w)), vec![15.0, 26.0]);
    assert_eq!(plus(&v, 0.5), vec![1.5, 2.5]);
}

#[test]
fn arrays_in_index_order() {
    check_tree(&[s(3.0), s(1.0), s(2.0)], &[3.0, 1.0, 2.0]);
    check_tree(&[(s(1.0), s(2.0)), (s(3.0), s(4.0))], &[1.0, 2.0, 3.0, 4.0]);
    check_tree(&[] as &[Tensor; 0], &[]);
    let a = [s(1.0), s(2.0)];
    let m: [Tensor; 2] = a.map_leaves(&mut |t| t * 3.0);
    assert_eq!(m[1].item::<f32>(), 6.0);
}

#[test]
fn option_some_and_none() {
    check_tree(&Some(s(1.0)), &[1.0]);
    check_tree(&None::<Tensor>, &[]);
    check_tree(&vec![Some(s(1.0)), None, Some(s(2.0))], &[1.0, 2.0]);
    let n: Option<Tensor> = None;
    assert!(n.map2_leaves(&None, &mut |a, _| a.clone()).is_none());
    assert_eq!(
        zip(&Some(s(1.0)), &Some(s(2.0))).unwrap().item::<f32>(),
        12.0
    );
}

#[test]
fn box_is_transparent() {
    check_tree(&Box::new(s(1.0)), &[1.0]);
    check_tree(&Box::new((s(1.0), vec![s(2.0)])), &[1.0, 2.0]);
    let b = Box::new(vec![s(1.0), s(2.0)]);
    let z: Box<Vec<Tensor>> = zip(&b, &b);
    assert_eq!(vals(&*z), vec![11.0, 22.0]);
}

// ---------------------------------------------------------------------------
// BTreeMap
// ---------------------------------------------------------------------------

fn map_of(entries: &[(&str, f32)]) -> BTreeMap<String, Tensor> {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), s(*v)))
        .collect()
}

#[test]
fn btreemap_in_key_order() {
    // Inserted out of order: traversal follows the keys.
    let m = map_of(&[("b", 2.0), ("c", 3.0), ("a", 1.0)]);
    check_tree(&m, &[1.0, 2.0, 3.0]);
    check_tree(&BTreeMap::<String, Tensor>::new(), &[]);
    let z = zip(&m, &map_of(&[("a", 4.0), ("b", 5.0), ("c", 6.0)]));
    assert_eq!(z["a"].item::<f32>(), 14.0);
    assert_eq!(z["c"].item::<f32>(), 36.0);
    let mapped = m.map_leaves(&mut |t| t + 1.0);
    assert_eq!(
        mapped.keys().cloned().collect::<Vec<_>>(),
        vec!["a", "b", "c"]
    );
    assert_eq!(mapped["b"].item::<f32>(), 3.0);
}

#[test]
fn btreemap_of_containers() {
    let mut m = BTreeMap::new();
    m.insert("z".to_string(), vec![s(3.0), s(4.0)]);
    m.insert("y".to_string(), vec![s(1.0), s(2.0)]);
    check_tree(&m, &[1.0, 2.0, 3.0, 4.0]);
}

// ---------------------------------------------------------------------------
// Tree
// ---------------------------------------------------------------------------

fn sample_tree() -> Tree {
    // Dict keys deliberately not sorted: Dict keeps its vector's order.
    Tree::dict([
        ("w", Tree::from(s(1.0))),
        (
            "layers",
            Tree::list([
                Tree::leaf(s(2.0)),
                Tree::List(vec![]),
                Tree::dict([("b", s(3.0).into()), ("a", s(4.0).into())]),
            ]),
        ),
        ("empty", Tree::Dict(vec![])),
        ("bias", Tree::Tensor(s(5.0))),
    ])
}

#[test]
fn tree_in_vector_order() {
    let t = sample_tree();
    check_tree(&t, &[1.0, 2.0, 3.0, 4.0, 5.0]);
    check_tree(&Tree::leaf(s(9.0)), &[9.0]);
    check_tree(&Tree::list([]), &[]);
    let z = zip(&t, &t.map_leaves(&mut |x| x + 1.0));
    assert_eq!(vals(&z), vec![12.0, 23.0, 34.0, 45.0, 56.0]);
    // The structure (kinds and keys) is kept.
    let keys: Vec<&str> = z
        .as_dict()
        .unwrap()
        .iter()
        .map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(keys, vec!["w", "layers", "empty", "bias"]);
    let inner = z.get("layers").unwrap().at(2).unwrap();
    let keys: Vec<&str> = inner
        .as_dict()
        .unwrap()
        .iter()
        .map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(keys, vec!["b", "a"]);
    assert_eq!(
        z.get("layers")
            .unwrap()
            .at(1)
            .unwrap()
            .as_list()
            .unwrap()
            .len(),
        0
    );
}

#[test]
fn tree_accessors() {
    let t = sample_tree();
    assert_eq!(t.kind(), "Dict");
    assert_eq!(t.get("layers").unwrap().kind(), "List");
    assert_eq!(t.get("w").unwrap().kind(), "Tensor");
    assert!(t.get("w").unwrap().is_tensor());
    assert!(!t.is_tensor());
    assert!(t.get("missing").is_none());
    assert!(t.at(0).is_none());
    assert!(t.as_tensor().is_none());
    assert!(t.as_list().is_none());
    let layers = t.get("layers").unwrap();
    assert!(layers.get("w").is_none());
    assert!(layers.at(3).is_none());
    assert_eq!(
        layers.at(0).unwrap().as_tensor().unwrap().item::<f32>(),
        2.0
    );
    assert_eq!(
        t.get("bias")
            .cloned()
            .unwrap()
            .into_tensor()
            .unwrap()
            .item::<f32>(),
        5.0
    );
    assert!(Tree::list([]).into_tensor().is_none());
    let x = s(1.0);
    assert!(Tree::from(&x).as_tensor().unwrap().shares_storage_with(&x));
    assert_eq!(Tree::from(vec![Tree::from(s(1.0))]).kind(), "List");
    assert_eq!(
        Tree::from(vec![("k".to_string(), Tree::from(s(1.0)))]).kind(),
        "Dict"
    );
    // Debug prints the structure.
    let dbg = format!("{:?}", Tree::dict([("k", Tree::from(s(1.0)))]));
    assert!(dbg.contains("Dict") && dbg.contains("\"k\""), "{dbg}");
}

#[test]
fn tree_inside_static_containers() {
    let mut m = BTreeMap::new();
    m.insert("t".to_string(), sample_tree());
    let p = (
        vec![Tree::leaf(s(0.0))],
        m,
        Some(Box::new(Tree::leaf(s(6.0)))),
    );
    check_tree(&p, &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
}

// ---------------------------------------------------------------------------
// Deep nesting and the derive inside nx's own tests
// ---------------------------------------------------------------------------

#[derive(Ptree, Clone)]
struct Layer {
    w: Tensor,
    b: Option<Tensor>,
    #[ptree(ignore)]
    name: String,
}

#[test]
fn deeply_nested() {
    let layers = vec![
        Layer {
            w: s(1.0),
            b: Some(s(2.0)),
            name: "l0".into(),
        },
        Layer {
            w: s(3.0),
            b: None,
            name: "l1".into(),
        },
    ];
    let mut heads = BTreeMap::new();
    heads.insert("out".to_string(), [s(5.0), s(6.0)]);
    heads.insert("aux".to_string(), [s(4.0), s(4.5)]);
    let model = (layers, Box::new(heads), Tree::list([Tree::leaf(s(7.0))]));
    check_tree(&model, &[1.0, 2.0, 3.0, 4.0, 4.5, 5.0, 6.0, 7.0]);
    let m = model.map_leaves(&mut |t| t * 2.0);
    assert_eq!(m.0[1].name, "l1");
    assert!(m.0[1].b.is_none());
    assert_eq!(m.1["out"][1].item::<f32>(), 12.0);
}

// ---------------------------------------------------------------------------
// Panics
// ---------------------------------------------------------------------------

#[test]
#[should_panic(expected = "map2_leaves: list lengths differ: 3 vs 2")]
fn map2_vec_length_mismatch() {
    zip(&vec![s(1.0), s(2.0), s(3.0)], &vec![s(1.0), s(2.0)]);
}

#[test]
#[should_panic(expected = "map2_leaves: list lengths differ: 1 vs 2")]
fn map2_tree_list_length_mismatch() {
    zip(
        &Tree::list([Tree::leaf(s(1.0))]),
        &Tree::list([Tree::leaf(s(1.0)), Tree::leaf(s(2.0))]),
    );
}

#[test]
#[should_panic(expected = "map2_leaves: options differ: Some vs None")]
fn map2_some_vs_none() {
    zip(&Some(s(1.0)), &None);
}

#[test]
#[should_panic(expected = "map2_leaves: options differ: None vs Some")]
fn map2_none_vs_some() {
    zip(&None, &Some(s(1.0)));
}

#[test]
#[should_panic(expected = "map2_leaves: dict keys differ: \"b\" vs \"c\"")]
fn map2_btreemap_key_mismatch() {
    zip(
        &map_of(&[("a", 1.0), ("b", 2.0)]),
        &map_of(&[("a", 1.0), ("c", 2.0)]),
    );
}

#[test]
#[should_panic(
    expected = "map2_leaves: dict keys differ: \"c\" vs no key (the right dict is shorter)"
)]
fn map2_btreemap_extra_key_left() {
    zip(
        &map_of(&[("a", 1.0), ("b", 2.0), ("c", 3.0)]),
        &map_of(&[("a", 1.0), ("b", 2.0)]),
    );
}

#[test]
#[should_panic(
    expected = "map2_leaves: dict keys differ: no key vs \"b\" (the left dict is shorter)"
)]
fn map2_btreemap_extra_key_right() {
    zip(&map_of(&[("a", 1.0)]), &map_of(&[("a", 1.0), ("b", 2.0)]));
}

#[test]
#[should_panic(expected = "map2_leaves: dict keys differ: \"x\" vs \"y\"")]
fn map2_tree_dict_key_mismatch() {
    zip(
        &Tree::dict([("x", Tree::from(s(1.0)))]),
        &Tree::dict([("y", Tree::from(s(1.0)))]),
    );
}

#[test]
#[should_panic(expected = "map2_leaves: dict keys differ: \"b\" vs \"a\"")]
fn map2_tree_dict_order_matters() {
    // Same keys, another order: Tree::Dict is ordered.
    zip(
        &Tree::dict([("b", Tree::from(s(1.0))), ("a", Tree::from(s(2.0)))]),
        &Tree::dict([("a", Tree::from(s(1.0))), ("b", Tree::from(s(2.0)))]),
    );
}

#[test]
#[should_panic(
    expected = "map2_leaves: dict keys differ: \"k\" vs no key (the right dict is shorter)"
)]
fn map2_tree_dict_size_mismatch() {
    zip(
        &Tree::dict([("k", Tree::from(s(1.0)))]),
        &Tree::Dict(vec![]),
    );
}

#[test]
#[should_panic(expected = "map2_leaves: Tree variants differ: List vs Dict")]
fn map2_tree_variant_list_vs_dict() {
    zip(&Tree::list([]), &Tree::Dict(vec![]));
}

#[test]
#[should_panic(expected = "map2_leaves: Tree variants differ: Tensor vs List")]
fn map2_tree_variant_tensor_vs_list() {
    zip(&Tree::leaf(s(1.0)), &Tree::list([Tree::leaf(s(1.0))]));
}

#[test]
#[should_panic(expected = "map2_leaves: Tree variants differ: Dict vs Tensor")]
fn map2_tree_variant_dict_vs_tensor() {
    zip(&Tree::Dict(vec![]), &Tree::leaf(s(1.0)));
}

#[test]
#[should_panic(expected = "map2_leaves: leaf dtypes differ: f32 vs f64")]
fn map2_leaf_dtype_mismatch() {
    s(1.0).map2_leaves(&d(1.0), &mut |a, _| a.clone());
}

#[test]
#[should_panic(expected = "map2_leaves: leaf dtypes differ: i32 vs f32 (at .1[1])")]
fn map2_leaf_dtype_mismatch_nested() {
    let a = (s(0.0), vec![s(1.0), Tensor::scalar(2i32)]);
    let b = (s(0.0), vec![s(1.0), s(2.0)]);
    a.map2_leaves(&b, &mut |x, _| x.clone());
}

#[test]
#[should_panic(expected = "with_leaves: the tree has 3 leaves but 2 were given")]
fn with_leaves_too_few() {
    (s(1.0), s(2.0), s(3.0)).with_leaves(&[s(1.0), s(2.0)]);
}

#[test]
#[should_panic(expected = "with_leaves: the tree has 0 leaves but 1 were given")]
fn with_leaves_too_many() {
    ().with_leaves(&[s(1.0)]);
}

#[test]
#[should_panic(expected = "with_leaves: the tree has 2 leaves but 3 were given")]
fn with_leaves_tree_too_many() {
    Tree::list([Tree::leaf(s(1.0)), Tree::leaf(s(2.0))]).with_leaves(&[s(1.0), s(2.0), s(3.0)]);
}

// ---------------------------------------------------------------------------
// Paths in map2_leaves messages
// ---------------------------------------------------------------------------

#[test]
fn map2_messages_name_the_path() {
    type P = Vec<BTreeMap<String, (Tensor, Option<Tensor>)>>;
    let entry = |b: Option<Tensor>| {
        let mut m = BTreeMap::new();
        m.insert("w".to_string(), (s(1.0), b));
        m
    };
    let a: P = vec![entry(None), entry(Some(s(2.0)))];
    let b: P = vec![entry(None), entry(None)];
    let msg = panic_message(|| {
        zip(&a, &b);
    });
    assert_eq!(
        msg,
        "map2_leaves: options differ: Some vs None (at [1][\"w\"].1)"
    );

    let t1 = Tree::dict([("layers", Tree::list([Tree::leaf(s(1.0)), Tree::list([])]))]);
    let t2 = Tree::dict([(
        "layers",
        Tree::list([Tree::leaf(s(1.0)), Tree::Dict(vec![])]),
    )]);
    let msg = panic_message(|| {
        zip(&t1, &t2);
    });
    assert_eq!(
        msg,
        "map2_leaves: Tree variants differ: List vs Dict (at [\"layers\"][1])"
    );

    let l1 = vec![Layer {
        w: s(1.0),
        b: None,
        name: "a".into(),
    }];
    let l2 = vec![Layer {
        w: d(1.0),
        b: None,
        name: "b".into(),
    }];
    let msg = panic_message(|| {
        zip(&l1, &l2);
    });
    assert_eq!(
        msg,
        "map2_leaves: leaf dtypes differ: f32 vs f64 (at [0].w)"
    );

    // At the root there is no path.
    let msg = panic_message(|| {
        zip(&vec![s(1.0)], &vec![]);
    });
    assert_eq!(msg, "map2_leaves: list lengths differ: 1 vs 0");
}

#[test]
fn path_is_reset_after_a_caught_panic() {
    let a = vec![vec![s(1.0)], vec![s(1.0)]];
    let b = vec![vec![s(1.0)], vec![s(1.0), s(2.0)]];
    let msg = panic_message(|| {
        zip(&a, &b);
    });
    assert_eq!(msg, "map2_leaves: list lengths differ: 1 vs 2 (at [1])");
    // The unwinding popped every segment: a root mismatch names no stale path.
    let msg = panic_message(|| {
        zip(&Some(s(1.0)), &None);
    });
    assert_eq!(msg, "map2_leaves: options differ: Some vs None");
    // And a correct zip still works.
    assert_eq!(vals(&zip(&a, &a)), vec![11.0, 11.0]);
}

#[test]
fn zips_inside_the_closure_have_their_own_paths() {
    let outer = vec![s(1.0), s(2.0)];
    let msg = panic_message(|| {
        outer.map2_leaves(&outer, &mut |x, _| {
            // A mismatch inside the closure is reported relative to its own trees.
            zip(&(x.clone(), Some(s(0.0))), &(x.clone(), None));
            x.clone()
        });
    });
    assert_eq!(msg, "map2_leaves: options differ: Some vs None (at .1)");
    // A closure that zips correctly leaves the outer path intact.
    let a = vec![s(1.0), s(2.0)];
    let b = vec![s(1.0)];
    let msg = panic_message(|| {
        vec![a.clone(), a.clone()].map2_leaves(&vec![a.clone(), b.clone()], &mut |x, y| {
            zip(&vec![x.clone()], &vec![y.clone()]);
            x.clone()
        });
    });
    assert_eq!(msg, "map2_leaves: list lengths differ: 2 vs 1 (at [1])");
}
