//! Checkpoints: `Ptree::leaf_paths`, `nx::save` / `nx::load` / `nx::load_tree`.
//!
//! Round trips of nested derived structs in every dtype (bit for bit), the
//! path of a leaf in each kind of container, mismatches that panic naming
//! the leaf, corrupt files that are errors, and a file built by hand as
//! PyTorch's safetensors writes it (sorted JSON keys, `__metadata__`, data in
//! another order), read independently of nx's writer.

use nx::{DType, Ptree, Tensor, Tree};
use std::collections::BTreeMap;
use std::path::PathBuf;
#[path = "common/panics.rs"]
mod panics;
use panics::panic_message;

/// A fresh path in the temp dir, removed when dropped.
struct TempPath(PathBuf);

impl TempPath {
    fn new(tag: &str) -> TempPath {
        TempPath(std::env::temp_dir().join(format!(
            "nx_checkpoint_test_{}_{tag}.safetensors",
            std::process::id()
        )))
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn bit_patterns(n: usize, seed: u64) -> Vec<u64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        })
        .collect()
}

/// A tensor of `dtype` whose elements are arbitrary bit patterns (NaN
/// payloads, infinities, subnormals and negative zeros included for floats;
/// the extremes for integers).
fn patterned(dtype: DType, shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let mut b = bit_patterns(n, seed);
    let specials: [u64; 6] = [
        0,
        u64::MAX,
        1 << 63,
        0x7FF8_0000_0000_0001,
        0x7FC0_0001,
        0x8000,
    ];
    for (x, s) in b.iter_mut().zip(specials) {
        *x = s;
    }
    use half::{bf16, f16};
    match dtype {
        DType::Bool => Tensor::from_vec(b.iter().map(|x| x & 1 == 1).collect(), shape),
        DType::U8 => Tensor::from_vec(b.iter().map(|&x| x as u8).collect(), shape),
        DType::U16 => Tensor::from_vec(b.iter().map(|&x| x as u16).collect(), shape),
        DType::U32 => Tensor::from_vec(b.iter().map(|&x| x as u32).collect(), shape),
        DType::U64 => Tensor::from_vec(b.to_vec(), shape),
        DType::I8 => Tensor::from_vec(b.iter().map(|&x| x as i8).collect(), shape),
        DType::I16 => Tensor::from_vec(b.iter().map(|&x| x as i16).collect(), shape),
        DType::I32 => Tensor::from_vec(b.iter().map(|&x| x as i32).collect(), shape),
        DType::I64 => Tensor::from_vec(b.iter().map(|&x| x as i64).collect(), shape),
        DType::F16 => {
            Tensor::from_vec(b.iter().map(|&x| f16::from_bits(x as u16)).collect(), shape)
        }
        DType::BF16 => Tensor::from_vec(
            b.iter().map(|&x| bf16::from_bits(x as u16)).collect(),
            shape,
        ),
        DType::F32 => {
            Tensor::from_vec(b.iter().map(|&x| f32::from_bits(x as u32)).collect(), shape)
        }
        DType::F64 => Tensor::from_vec(b.iter().map(|&x| f64::from_bits(x)).collect(), shape),
        d => panic!("checkpoints hold the 13 real dtypes, not {d}"),
    }
}

/// The elements' bits, in row-major order.
fn bits(t: &Tensor) -> Vec<u64> {
    use half::{bf16, f16};
    match t.dtype() {
        DType::Bool => t.to_vec::<bool>().iter().map(|&x| x as u64).collect(),
        DType::U8 => t.to_vec::<u8>().iter().map(|&x| x as u64).collect(),
        DType::U16 => t.to_vec::<u16>().iter().map(|&x| x as u64).collect(),
        DType::U32 => t.to_vec::<u32>().iter().map(|&x| x as u64).collect(),
        DType::U64 => t.to_vec::<u64>(),
        DType::I8 => t.to_vec::<i8>().iter().map(|&x| x as u8 as u64).collect(),
        DType::I16 => t.to_vec::<i16>().iter().map(|&x| x as u16 as u64).collect(),
        DType::I32 => t.to_vec::<i32>().iter().map(|&x| x as u32 as u64).collect(),
        DType::I64 => t.to_vec::<i64>().iter().map(|&x| x as u64).collect(),
        DType::F16 => t
            .to_vec::<f16>()
            .iter()
            .map(|x| x.to_bits() as u64)
            .collect(),
        DType::BF16 => t
            .to_vec::<bf16>()
            .iter()
            .map(|x| x.to_bits() as u64)
            .collect(),
        DType::F32 => t
            .to_vec::<f32>()
            .iter()
            .map(|x| x.to_bits() as u64)
            .collect(),
        DType::F64 => t.to_vec::<f64>().iter().map(|x| x.to_bits()).collect(),
        d => panic!("checkpoints hold the 13 real dtypes, not {d}"),
    }
}

fn assert_same_leaves<P: Ptree>(a: &P, b: &P) {
    assert_eq!(a.leaf_paths(), b.leaf_paths());
    for ((x, y), name) in a.leaves().iter().zip(b.leaves()).zip(a.leaf_paths()) {
        assert_eq!(x.dtype(), y.dtype(), "leaf {name:?}: dtype");
        assert_eq!(x.shape(), y.shape(), "leaf {name:?}: shape");
        assert_eq!(bits(x), bits(&y), "leaf {name:?}: bits");
    }
}

#[derive(Ptree, Clone)]
struct Dense {
    w: Tensor,
    b: Option<Tensor>,
    #[ptree(ignore)]
    name: String,
}

#[derive(Ptree, Clone)]
struct Pair(Tensor, #[ptree(ignore)] u32, Tensor);

#[derive(Ptree, Clone)]
struct Model {
    layers: Vec<Dense>,
    head: (Tensor, Pair),
    opt: BTreeMap<String, Tensor>,
    extra: Option<Box<Tensor>>,
    #[ptree(ignore)]
    step: usize,
    arr: [Tensor; 2],
}

#[derive(Ptree, Clone)]
struct Adam<T> {
    m: T,
    v: T,
    #[ptree(ignore)]
    t: u32,
}

#[derive(Ptree, Clone)]
struct TrainState {
    params: Model,
    opt: Adam<BTreeMap<String, Tensor>>,
}

const MODEL_PATHS: [&str; 11] = [
    "layers.0.w",
    "layers.0.b",
    "layers.1.w",
    "head.0",
    "head.1.0",
    "head.1.2",
    "opt.m",
    "opt.v",
    "extra",
    "arr.0",
    "arr.1",
];

/// A model whose leaves all have `dtype`, with a different bit pattern each.
fn model(dtype: DType, seed: u64) -> Model {
    let t = |shape: &[usize], k: u64| patterned(dtype, shape, seed * 100 + k);
    Model {
        layers: vec![
            Dense {
                w: t(&[3, 4], 1),
                b: Some(t(&[4], 2)),
                name: "first".into(),
            },
            Dense {
                w: t(&[4, 2], 3),
                b: None,
                name: "second".into(),
            },
        ],
        head: (t(&[], 4), Pair(t(&[2, 1, 3], 5), 99, t(&[0, 3], 6))),
        // Inserted out of order: traversal is key order.
        opt: BTreeMap::from([("v".to_string(), t(&[5], 8)), ("m".to_string(), t(&[5], 7))]),
        extra: Some(Box::new(t(&[2, 2], 9))),
        step: 1234,
        arr: [t(&[1], 10), t(&[7], 11)],
    }
}

#[test]
fn leaf_paths_of_nested_derived_structs() {
    assert_eq!(model(DType::F32, 1).leaf_paths(), MODEL_PATHS);
    let s = TrainState {
        params: model(DType::F32, 1),
        opt: Adam {
            m: BTreeMap::from([("b2".to_string(), Tensor::scalar(0.0f32))]),
            v: BTreeMap::from([("b2".to_string(), Tensor::scalar(0.0f32))]),
            t: 3,
        },
    };
    let paths = s.leaf_paths();
    assert_eq!(paths.len(), 13);
    assert_eq!(paths[0], "params.layers.0.w");
    assert_eq!(paths[10], "params.arr.1");
    assert_eq!(&paths[11..], ["opt.m.b2", "opt.v.b2"]);
    // A generic struct over a derived one.
    let a = Adam {
        m: Dense {
            w: Tensor::scalar(1.0f32),
            b: Some(Tensor::scalar(1.0f32)),
            name: String::new(),
        },
        v: Dense {
            w: Tensor::scalar(1.0f32),
            b: None,
            name: String::new(),
        },
        t: 0,
    };
    assert_eq!(a.leaf_paths(), ["m.w", "m.b", "v.w"]);
}

/// A hand-written impl without `visit_paths`: its leaves are named by index.
#[derive(Clone)]
struct Hand {
    a: Tensor,
    b: Tensor,
}

impl Ptree for Hand {
    fn map_leaves(&self, f: &mut dyn FnMut(&Tensor) -> Tensor) -> Self {
        Hand {
            a: f(&self.a),
            b: f(&self.b),
        }
    }
    fn map2_leaves(&self, other: &Self, f: &mut dyn FnMut(&Tensor, &Tensor) -> Tensor) -> Self {
        Hand {
            a: f(&self.a, &other.a),
            b: f(&self.b, &other.b),
        }
    }
    fn for_each_leaf(&self, f: &mut dyn FnMut(&Tensor)) {
        f(&self.a);
        f(&self.b);
    }
}

#[derive(Ptree, Clone)]
struct WithHand {
    h: Hand,
    z: Tensor,
}

#[test]
fn leaf_paths_of_each_container() {
    let t = || Tensor::scalar(1.0f32);
    assert_eq!(t().leaf_paths(), [""]);
    assert!(().leaf_paths().is_empty());
    assert_eq!((t(), t(), (t(),)).leaf_paths(), ["0", "1", "2.0"]);
    assert_eq!(vec![t(), t()].leaf_paths(), ["0", "1"]);
    assert_eq!(
        [vec![t()], vec![t(), t()]].leaf_paths(),
        ["0.0", "1.0", "1.1"]
    );
    assert_eq!(Some(t()).leaf_paths(), [""]);
    assert!(None::<Tensor>.leaf_paths().is_empty());
    assert_eq!(vec![Some(t()), None, Some(t())].leaf_paths(), ["0", "2"]);
    assert_eq!(Box::new((t(), t())).leaf_paths(), ["0", "1"]);
    let m = BTreeMap::from([
        ("w".to_string(), vec![t()]),
        ("b".to_string(), vec![t(), t()]),
    ]);
    assert_eq!(m.leaf_paths(), ["b.0", "b.1", "w.0"]);
    let tree = Tree::dict([
        ("z", Tree::from(t())),
        (
            "a",
            Tree::list([t().into(), Tree::dict([("k", Tree::from(t()))])]),
        ),
        ("x.y", Tree::from(t())),
    ]);
    assert_eq!(tree.leaf_paths(), ["z", "a.0", "a.1.k", "x.y"]);
    assert_eq!(Tree::from(t()).leaf_paths(), [""]);
    assert_eq!(Pair(t(), 0, t()).leaf_paths(), ["0", "2"]);
    assert_eq!(Hand { a: t(), b: t() }.leaf_paths(), ["0", "1"]);
    let w = WithHand {
        h: Hand { a: t(), b: t() },
        z: t(),
    };
    assert_eq!(w.leaf_paths(), ["h.0", "h.1", "z"]);
    let mut out = vec!["x".to_string()];
    (t(), vec![t()]).visit_paths("opt", &mut out);
    assert_eq!(out, ["x", "opt.0", "opt.1.0"]);
}

#[test]
fn round_trip_every_dtype() {
    for (k, &dtype) in DType::ALL.iter().enumerate() {
        let p = TempPath::new(&format!("dtype_{k}"));
        let m = model(dtype, k as u64 + 1);
        nx::save(&m, &p.0).unwrap();
        // The template: other values, same structure, shapes and dtypes.
        let mut template = model(dtype, 77);
        template.layers[0].name = "from the template".into();
        template.step = 5;
        template.head.1 .1 = 7;
        let back = nx::load::<Model>(&p.0, &template).unwrap();
        assert_same_leaves(&m, &back);
        assert_eq!(back.layers[0].name, "from the template");
        assert_eq!(back.step, 5);
        assert_eq!(back.head.1 .1, 7);
        // load_tree sees the same tensors under the same names.
        let tree = nx::load_tree(&p.0).unwrap();
        let entries = tree.as_dict().unwrap();
        assert_eq!(entries.len(), MODEL_PATHS.len());
        for (name, leaf) in MODEL_PATHS.iter().zip(m.leaves()) {
            let t = tree.get(name).unwrap().as_tensor().unwrap();
            assert_eq!(t.dtype(), dtype);
            assert_eq!(t.shape(), leaf.shape());
            assert_eq!(bits(t), bits(&leaf), "{name} ({dtype})");
        }
    }
}

#[test]
fn round_trip_mixed_dtypes_and_views() {
    let p = TempPath::new("mixed");
    let base = patterned(DType::F32, &[3, 4], 5);
    let tree = Tree::dict([
        ("t", Tree::from(base.transpose())), // strided
        ("s", Tree::from(base.slice(&[nx::Slice::from(..).step(-2)]))), // reversed rows
        ("b", Tree::from(patterned(DType::Bool, &[6], 1))),
        (
            "h",
            Tree::list([
                patterned(DType::BF16, &[2], 2).into(),
                patterned(DType::I8, &[3], 3).into(),
            ]),
        ),
        (
            "bc",
            Tree::from(Tensor::scalar(2.5f64).broadcast_to(&[2, 3])),
        ),
    ]);
    nx::save(&tree, &p.0).unwrap();
    let back = nx::load(&p.0, &tree).unwrap();
    assert_same_leaves(&tree, &back);
    let t = back.get("t").unwrap().as_tensor().unwrap();
    assert!(t.is_contiguous());
    // Row-major order of the transposed view.
    let want: Vec<f32> = base.to_vec::<f32>();
    let got = t.to_vec::<f32>();
    for i in 0..4 {
        for j in 0..3 {
            assert_eq!(got[i * 3 + j].to_bits(), want[j * 4 + i].to_bits());
        }
    }
    assert_eq!(
        back.get("bc").unwrap().as_tensor().unwrap().to_vec::<f64>(),
        vec![2.5; 6]
    );
    // The derived generic struct round trip.
    let s = TrainState {
        params: model(DType::F64, 3),
        opt: Adam {
            m: BTreeMap::from([("b2".to_string(), patterned(DType::F32, &[2], 8))]),
            v: BTreeMap::from([("b2".to_string(), patterned(DType::F16, &[2], 9))]),
            t: 42,
        },
    };
    let p2 = TempPath::new("train_state");
    nx::save(&s, &p2.0).unwrap();
    let back = nx::load(&p2.0, &s).unwrap();
    assert_same_leaves(&s, &back);
    assert_eq!(back.opt.t, 42);
}

#[test]
fn mismatches_panic_naming_the_leaf() {
    let p = TempPath::new("mismatch");
    let m = model(DType::F32, 2);
    nx::save(&m, &p.0).unwrap();

    let mut wrong_shape = model(DType::F32, 2);
    wrong_shape.layers[1].w = Tensor::zeros(&[2, 4], DType::F32);
    let msg = panic_message(|| {
        let _ = nx::load(&p.0, &wrong_shape);
    });
    assert!(
        msg.starts_with("load: leaf \"layers.1.w\": the template's shape is [2, 4]"),
        "{msg}"
    );
    assert!(msg.contains("holds shape [4, 2]"), "{msg}");

    let mut wrong_dtype = model(DType::F32, 2);
    wrong_dtype
        .opt
        .insert("v".into(), Tensor::zeros(&[5], DType::F64));
    let msg = panic_message(|| {
        let _ = nx::load(&p.0, &wrong_dtype);
    });
    assert!(
        msg.starts_with("load: leaf \"opt.v\": the template's dtype is f64"),
        "{msg}"
    );
    assert!(msg.contains("holds f32"), "{msg}");

    let mut missing = model(DType::F32, 2);
    missing.layers[1].b = Some(Tensor::zeros(&[2], DType::F32));
    let msg = panic_message(|| {
        let _ = nx::load(&p.0, &missing);
    });
    assert!(msg.starts_with("load: leaf \"layers.1.b\":"), "{msg}");
    assert!(msg.contains("has no tensor of that name"), "{msg}");

    let msg = panic_message(|| {
        let _ = nx::load(&p.0, &Tensor::zeros(&[3, 4], DType::F32));
    });
    assert!(msg.starts_with("load: leaf \"\":"), "{msg}");
}

#[test]
fn extra_tensors_are_ignored() {
    let p = TempPath::new("extra");
    let m = model(DType::I32, 4);
    nx::save(&m, &p.0).unwrap();
    // Only the optimizer's entries, through a dict of the same names.
    let template = BTreeMap::from([(
        "opt".to_string(),
        BTreeMap::from([("m".to_string(), Tensor::zeros(&[5], DType::I32))]),
    )]);
    let back = nx::load(&p.0, &template).unwrap();
    assert_eq!(bits(&back["opt"]["m"]), bits(&m.opt["m"]));
    let layer0 = Dense {
        w: Tensor::zeros(&[3, 4], DType::I32),
        b: None,
        name: "x".into(),
    };
    let back = nx::load(
        &p.0,
        &BTreeMap::from([("layers".to_string(), vec![layer0])]),
    )
    .unwrap();
    assert_eq!(bits(&back["layers"][0].w), bits(&m.layers[0].w));
}

#[test]
fn corrupt_files_are_errors() {
    let p = TempPath::new("corrupt");
    let template = model(DType::F32, 5);
    nx::save(&template, &p.0).unwrap();
    let good = std::fs::read(&p.0).unwrap();
    let n = u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", vec![]),
        ("four bytes", good[..4].to_vec()),
        ("header only in part", good[..8 + n / 2].to_vec()),
        ("no data", good[..8 + n].to_vec()),
        ("one byte short", good[..good.len() - 1].to_vec()),
        ("one byte long", [good.as_slice(), &[0]].concat()),
        (
            "garbage",
            (0..300u32).map(|i| (i * 7919 % 251) as u8).collect(),
        ),
        (
            "huge header length",
            [&u64::MAX.to_le_bytes()[..], &good[8..]].concat(),
        ),
        ("text", b"this is not a safetensors file at all".to_vec()),
    ];
    let mut not_json = good.clone();
    not_json[8] = b'[';
    cases.push(("header not a JSON object", not_json));
    for (what, bytes) in cases {
        std::fs::write(&p.0, &bytes).unwrap();
        let e = nx::load_tree(&p.0).expect_err(what);
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{what}: {e}");
        let e = nx::load(&p.0, &template).err().expect(what);
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{what}: {e}");
    }
    let missing = std::env::temp_dir().join("nx_checkpoint_test_no_such_file.safetensors");
    assert_eq!(
        nx::load_tree(&missing).unwrap_err().kind(),
        std::io::ErrorKind::NotFound
    );
}

/// A safetensors file as PyTorch's writer lays it out: the header's keys
/// sorted, `__metadata__` first, padded with spaces to a multiple of 8.
fn handmade(entries: &[(&str, &str, &[usize], &[u8])], data_order: &[usize]) -> Vec<u8> {
    let mut offsets = vec![(0, 0); entries.len()];
    let mut data = Vec::new();
    for &i in data_order {
        let start = data.len();
        data.extend_from_slice(entries[i].3);
        offsets[i] = (start, data.len());
    }
    let mut keys: Vec<usize> = (0..entries.len()).collect();
    keys.sort_by_key(|&i| entries[i].0);
    let mut header = String::from("{\"__metadata__\":{\"format\":\"pt\"}");
    for i in keys {
        let (name, dtype, shape, _) = entries[i];
        let shape: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        header += &format!(
            ",\"{name}\":{{\"dtype\":\"{dtype}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
            shape.join(","),
            offsets[i].0,
            offsets[i].1
        );
    }
    header.push('}');
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&data);
    out
}

fn le_f32(xs: &[f32]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[derive(Ptree, Clone)]
struct Linear {
    weight: Tensor,
    bias: Tensor,
}

#[test]
fn a_file_written_elsewhere_loads() {
    let w = le_f32(&[1.0, -2.0, 3.5, 0.25, -0.0, 6.0]);
    let b = le_f32(&[0.5, -1.5]);
    let steps: Vec<u8> = 1234567890123i64.to_le_bytes().to_vec();
    let half: Vec<u8> = [0x3F80u16, 0xC000]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect(); // bf16 1, -2
    let mask = vec![1u8, 0, 1];
    let entries: [(&str, &str, &[usize], &[u8]); 5] = [
        ("fc.weight", "F32", &[2, 3], &w),
        ("fc.bias", "F32", &[2], &b),
        ("step", "I64", &[], &steps),
        ("emb.scale", "BF16", &[2], &half),
        ("mask", "BOOL", &[3], &mask),
    ];
    // Data order: not the key order, not the entry order.
    let order = [2, 0, 3, 4, 1];
    let p = TempPath::new("handmade");
    std::fs::write(&p.0, handmade(&entries, &order)).unwrap();

    let tree = nx::load_tree(&p.0).unwrap();
    let names: Vec<&str> = tree
        .as_dict()
        .unwrap()
        .iter()
        .map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(names, ["step", "fc.weight", "emb.scale", "mask", "fc.bias"]);
    let get = |k: &str| tree.get(k).unwrap().as_tensor().unwrap().clone();
    assert_eq!(get("step").shape(), &[] as &[usize]);
    assert_eq!(get("step").item::<i64>(), 1234567890123);
    assert_eq!(get("fc.weight").shape(), &[2, 3]);
    assert_eq!(
        get("fc.weight").to_vec::<f32>(),
        vec![1.0, -2.0, 3.5, 0.25, -0.0, 6.0]
    );
    assert!(get("fc.weight").to_vec::<f32>()[4].is_sign_negative());
    assert_eq!(get("fc.bias").to_vec::<f32>(), vec![0.5, -1.5]);
    assert_eq!(get("emb.scale").dtype(), DType::BF16);
    assert_eq!(
        get("emb.scale").cast(DType::F32).to_vec::<f32>(),
        vec![1.0, -2.0]
    );
    assert_eq!(get("mask").to_vec::<bool>(), vec![true, false, true]);

    // The same file into a derived struct by name (PyTorch's state-dict names).
    let template = BTreeMap::from([(
        "fc".to_string(),
        Linear {
            weight: Tensor::zeros(&[2, 3], DType::F32),
            bias: Tensor::zeros(&[2], DType::F32),
        },
    )]);
    let back = nx::load(&p.0, &template).unwrap();
    assert_eq!(back["fc"].bias.to_vec::<f32>(), vec![0.5, -1.5]);
    assert_eq!(back["fc"].weight.to_vec::<f32>()[2], 3.5);

    // Without __metadata__ and with no tensors at all: an empty dict.
    let mut empty = b"{}      ".to_vec();
    empty.splice(0..0, 8u64.to_le_bytes());
    std::fs::write(&p.0, &empty).unwrap();
    assert!(nx::load_tree(&p.0).unwrap().as_dict().unwrap().is_empty());

    // Headers that lie: a range not matching the shape, a dtype nx lacks,
    // a bool byte other than 0 and 1, overlapping ranges.
    let bad: Vec<Vec<u8>> = vec![
        handmade(&[("x", "F32", &[3], &w)], &[0]), // 24 bytes for 3 f32
        handmade(&[("x", "F8_E4M3", &[2], &[1, 2])], &[0]),
        handmade(&[("x", "BOOL", &[2], &[1, 2])], &[0]),
        handmade(&[("x", "C64", &[1], &[0; 8])], &[0]),
    ];
    for (i, bytes) in bad.iter().enumerate() {
        std::fs::write(&p.0, bytes).unwrap();
        let e = nx::load_tree(&p.0).expect_err(&format!("bad header {i}"));
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{i}: {e}");
    }
    let overlap = {
        let h = "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]}}";
        let mut h = h.to_string();
        while h.len() % 8 != 0 {
            h.push(' ');
        }
        let mut out = (h.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(&[1, 2, 3]);
        out
    };
    std::fs::write(&p.0, &overlap).unwrap();
    assert!(nx::load_tree(&p.0).is_err());
}

#[test]
fn duplicate_names_are_refused_on_save() {
    let p = TempPath::new("dup");
    let t = Tensor::scalar(1.0f32);
    let tree = Tree::dict([("a.0", Tree::from(&t)), ("a", Tree::list([Tree::from(&t)]))]);
    let e = nx::save(&tree, &p.0).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("\"a.0\""), "{e}");
}

#[test]
fn complex_and_4bit_tensors_are_refused_by_save() {
    for (k, t) in [
        Tensor::from_slice(&[nx::Complex::new(1.0f32, 2.0)], &[1]),
        Tensor::from_slice(&[nx::I4(3)], &[1]),
        Tensor::from_slice(&[nx::U4(9)], &[1]),
    ]
    .into_iter()
    .enumerate()
    {
        let p = TempPath::new(&format!("refused_{k}"));
        let err = nx::save(&t, &p.0).expect_err("save must refuse the dtype");
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("cannot be saved"), "{err}");
        assert!(!p.0.exists(), "nothing is written");
    }
}
