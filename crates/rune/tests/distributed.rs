//! `rune::distributed` (feature `mpi`): run as it is (a world of one) and
//! under `mpirun --oversubscribe -np 2` and `-np 4`:
//!
//! ```sh
//! cargo test --release -p rune --features mpi --test distributed
//! cargo build --release -p rune --features mpi --tests
//! mpirun --oversubscribe -np 4 target/release/deps/distributed-<hash>
//! ```
//!
//! The cases run in order on the main thread (every rank makes the same
//! calls in the same order: the harness is this file's `main`), each under
//! a watchdog that aborts the process if it takes longer than
//! `CASE_TIMEOUT` (a hang is a failure, not a stuck CI). Every rank checks
//! every result against values it computes alone: each rank's inputs are a
//! function of its rank, so any rank can compute every rank's.

use rune::distributed::{self, World};
use rune::prelude::*;
use std::sync::mpsc;
use std::time::Duration;

const CASE_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `case` under the watchdog.
fn run(world: &World, name: &str, case: fn(&World)) {
    let (done, wait) = mpsc::channel::<()>();
    let label = name.to_string();
    let rank = world.rank();
    let dog = std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(CASE_TIMEOUT) {
            eprintln!("rank {rank}: test {label} did not finish in {CASE_TIMEOUT:?}: aborting");
            std::process::abort();
        }
    });
    case(world);
    done.send(()).unwrap();
    dog.join().unwrap();
    world.barrier();
    if world.rank() == 0 {
        println!("test {name} ... ok ({} processes)", world.size());
    }
}

fn main() {
    let world = distributed::init();
    let cases: &[(&str, fn(&World))] = &[
        ("world", world_basics),
        ("all_reduce_sum_dtypes", all_reduce_sum_dtypes),
        ("all_reduce_sum_tree", all_reduce_sum_tree),
        ("all_reduce_mean", all_reduce_mean),
        ("broadcast", broadcast),
        ("all_gather", all_gather),
        ("mismatched_shape_is_named", mismatched_shape),
        ("mismatched_dtype_is_named", mismatched_dtype),
        ("mismatched_structure_is_named", mismatched_structure),
        ("unsummable_dtype_refused", unsummable_dtype),
        ("jit_refuses_mpi_devices", jit_refuses_mpi),
        ("pmap_split_outputs", pmap_split_outputs),
        ("pmap_grads_equal_single_process", pmap_grads),
        ("pmap_trajectory_equals_single_process", pmap_trajectory),
    ];
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let mut ran = 0;
    for (name, case) in cases {
        if filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str())) {
            run(&world, name, *case);
            ran += 1;
        }
    }
    if world.rank() == 0 {
        println!(
            "\ntest result: ok. {ran} passed; 0 failed ({} processes)",
            world.size()
        );
    }
}

/// Rank `r`'s values of a leaf: small integers (exact in every dtype, so
/// sums are exact whatever the order).
fn values(r: usize, n: usize, salt: usize) -> Vec<f64> {
    (0..n)
        .map(|i| ((i * 7 + r * 3 + salt) % 11) as f64 - 3.0 * (salt % 2) as f64)
        .collect()
}

fn leaf(r: usize, shape: &[usize], dtype: DType, salt: usize) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_vec(values(r, n, salt), shape).cast(dtype)
}

fn world_basics(world: &World) {
    let expected = std::env::var("OMPI_COMM_WORLD_SIZE")
        .or_else(|_| std::env::var("PMI_SIZE"))
        .map(|s| s.parse().unwrap())
        .unwrap_or(1);
    assert_eq!(world.size(), expected);
    assert!(world.rank() < world.size());
    let devices = world.devices();
    assert_eq!(devices.len(), world.size());
    assert_eq!(devices[0], "MPI:0");
    // init is idempotent.
    let again = distributed::init();
    assert_eq!((again.rank(), again.size()), (world.rank(), world.size()));
}

const DTYPES: [DType; 12] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::U16,
    DType::U32,
    DType::U64,
];

fn all_reduce_sum_dtypes(world: &World) {
    for (k, &d) in DTYPES.iter().enumerate() {
        let shape = [3, 5];
        // Unsigned leaves: non-negative values.
        let salt = if d.is_int() && d.name().starts_with('u') {
            2 * k
        } else {
            k
        };
        let mine = leaf(world.rank(), &shape, d, salt);
        let got = world.all_reduce_sum(&mine);
        let mut want = vec![0.0; 15];
        for r in 0..world.size() {
            for (w, v) in want.iter_mut().zip(values(r, 15, salt)) {
                *w += v;
            }
        }
        assert_eq!(got.dtype(), d, "{d:?}");
        assert_eq!(got.shape(), &shape);
        assert_eq!(got.cast(DType::F64).to_vec::<f64>(), want, "{d:?}");
        // The input is not written.
        assert_eq!(mine.cast(DType::F64).to_vec::<f64>(), {
            let v = values(world.rank(), 15, salt);
            Tensor::from_vec(v, &shape)
                .cast(d)
                .cast(DType::F64)
                .to_vec::<f64>()
        });
    }
}

#[derive(Ptree, Clone)]
struct Params {
    w: Tensor,
    b: Tensor,
    steps: Tensor,
    layers: Vec<Tensor>,
}

fn params(r: usize) -> Params {
    Params {
        w: leaf(r, &[4, 3], DType::F32, 1),
        b: leaf(r, &[3], DType::F64, 2),
        steps: leaf(r, &[2], DType::I64, 3),
        layers: vec![
            leaf(r, &[2, 2, 2], DType::F32, 4),
            leaf(r, &[5], DType::F32, 5).narrow(0, 1, 3), // a view
            leaf(r, &[], DType::I32, 6),
        ],
    }
}

fn sum_over_ranks(size: usize) -> Vec<Vec<f64>> {
    let mut acc: Vec<Vec<f64>> = params(0)
        .leaves()
        .iter()
        .map(|t| vec![0.0; t.numel()])
        .collect();
    for r in 0..size {
        for (a, t) in acc.iter_mut().zip(params(r).leaves()) {
            for (x, v) in a.iter_mut().zip(t.cast(DType::F64).to_vec::<f64>()) {
                *x += v;
            }
        }
    }
    acc
}

fn all_reduce_sum_tree(world: &World) {
    let got = world.all_reduce_sum(&params(world.rank()));
    let want = sum_over_ranks(world.size());
    for ((g, w), p) in got.leaves().iter().zip(&want).zip(params(0).leaves()) {
        assert_eq!(g.dtype(), p.dtype());
        assert_eq!(g.shape(), p.shape());
        assert_eq!(&g.cast(DType::F64).to_vec::<f64>(), w);
    }
}

fn all_reduce_mean(world: &World) {
    let n = world.size() as f64;
    let got = world.all_reduce_mean(&params(world.rank()));
    let want = sum_over_ranks(world.size());
    for ((g, w), p) in got.leaves().iter().zip(&want).zip(params(0).leaves()) {
        assert_eq!(g.dtype(), p.dtype());
        let mean: Vec<f64> = if p.dtype().is_int() {
            w.iter().map(|x| (x / n).trunc()).collect()
        } else {
            w.iter().map(|x| x / n).collect()
        };
        let g = g.cast(DType::F64).to_vec::<f64>();
        for (a, b) in g.iter().zip(&mean) {
            assert!(
                (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                "{g:?} vs {mean:?}"
            );
        }
    }
}

fn broadcast(world: &World) {
    for root in [0, world.size() - 1] {
        let got = world.broadcast(&params(world.rank()), root);
        for (g, w) in got.leaves().iter().zip(params(root).leaves()) {
            assert_eq!(g.dtype(), w.dtype());
            assert_eq!(g.shape(), w.shape());
            assert_eq!(
                g.cast(DType::F64).to_vec::<f64>(),
                w.cast(DType::F64).to_vec::<f64>()
            );
        }
    }
}

fn all_gather(world: &World) {
    for (axis, d) in [(0, DType::F32), (1, DType::I32), (2, DType::F64)] {
        let shape = [2, 3, 2];
        let got = world.all_gather(&leaf(world.rank(), &shape, d, axis), axis);
        let parts: Vec<Tensor> = (0..world.size())
            .map(|r| leaf(r, &shape, d, axis))
            .collect();
        let want = Tensor::concatenate(&parts, axis as isize);
        assert_eq!(got.shape(), want.shape());
        assert_eq!(got.dtype(), d);
        assert_eq!(
            got.cast(DType::F64).to_vec::<f64>(),
            want.cast(DType::F64).to_vec::<f64>()
        );
    }
}

/// Runs `f`, which must panic on every rank (when there are several) with
/// a message containing each of `needles`.
fn panics_with(world: &World, f: impl FnOnce(), needles: &[&str]) {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(hook);
    if world.size() == 1 && needles.iter().any(|n| n.contains("rank")) {
        // One rank cannot disagree with itself.
        assert!(r.is_ok());
        return;
    }
    let payload = r.expect_err("expected a panic");
    let msg = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    for n in needles {
        assert!(msg.contains(n), "{msg:?} does not name {n:?}");
    }
}

fn mismatched_shape(world: &World) {
    let r = world.rank();
    let tree = (
        Tensor::ones(&[3], DType::F32),
        Tensor::ones(&[2, if r == 1 { 5 } else { 4 }], DType::F32),
    );
    panics_with(
        world,
        || {
            world.all_reduce_sum(&tree);
        },
        &[
            "all_reduce_sum",
            "leaf 1",
            "rank 1: leaf 1 (1): f32 [2, 5]",
            "[2, 4]",
        ],
    );
    // all_gather and broadcast too; and afterwards the world still works.
    panics_with(
        world,
        || {
            world.all_gather(&tree.1, 0);
        },
        &["all_gather", "leaf 0", "rank 1: leaf 0: f32 [2, 5]"],
    );
    let ok = world.all_reduce_sum(&Tensor::ones(&[2], DType::F32));
    assert_eq!(ok.to_vec::<f32>(), vec![world.size() as f32; 2]);
}

fn mismatched_dtype(world: &World) {
    let last = world.size() - 1;
    let d = if world.rank() == last {
        DType::F64
    } else {
        DType::F32
    };
    let tree = vec![Tensor::ones(&[2], DType::I32), Tensor::ones(&[4], d)];
    panics_with(
        world,
        || {
            world.broadcast(&tree, 0);
        },
        &[
            "broadcast",
            "leaf 1",
            "f32 [4]",
            &format!("rank {last}: leaf 1 (1): f64 [4]"),
        ],
    );
}

fn mismatched_structure(world: &World) {
    let n = if world.rank() == 0 { 3 } else { 2 };
    let tree: Vec<Tensor> = (0..n).map(|_| Tensor::ones(&[2], DType::F32)).collect();
    panics_with(
        world,
        || {
            world.all_reduce_mean(&tree);
        },
        &[
            "all_reduce_mean",
            "structure",
            "rank 0: 3 leaves",
            "2 leaves",
        ],
    );
}

fn unsummable_dtype(world: &World) {
    panics_with(
        world,
        || {
            world.all_reduce_sum(&Tensor::ones(&[2], DType::Bool));
        },
        &["all_reduce_sum", "leaf 0", "bool", "cannot be summed"],
    );
}

fn jit_refuses_mpi(world: &World) {
    panics_with(
        world,
        || {
            rune::jit_with(
                |x: &Tensor| x * 2.0,
                JitOpts {
                    device: "MPI:0".into(),
                    ..JitOpts::default()
                },
            );
        },
        &["jit", "MPI:0", "pmap"],
    );
    let devices = vec!["MPI:0".to_string(); world.size() + 1];
    panics_with(
        world,
        || {
            rune::pmap_with(
                |x: &Tensor| x * 2.0,
                PmapOpts {
                    devices,
                    ..PmapOpts::default()
                },
            );
        },
        &["pmap", "world.devices()"],
    );
}

fn pmap_split_outputs(world: &World) {
    let (r, n) = (world.rank(), world.size());
    // Global x: [4n, 3]; this rank's rows 4r..4r+4.
    let global = leaf(0, &[4 * n, 3], DType::F32, 7)
        + Tensor::arange(0.0, (4 * n) as f64, 1.0, DType::F32).reshape(&[4 * n, 1]);
    let mine = global.narrow(0, 4 * r, 4).copy();
    let f = rune::pmap_with(
        |x: &Tensor| {
            (
                x * 2.0,
                x.sum(&[0], false),
                Tensor::scalar(x.shape()[0] as f32),
            )
        },
        PmapOpts {
            devices: world.devices(),
            ..PmapOpts::default()
        },
    );
    let before = distributed::bytes_sent();
    let (doubled, col_sums, rows) = f.call(&mine);
    assert_eq!(
        rows.item::<f32>(),
        (4 * n) as f32,
        "f sees the global shape"
    );
    // Split output: global shape, local shard without communication.
    assert_eq!(doubled.shape(), &[4 * n, 3]);
    let local = world.local_shard(&doubled);
    assert_eq!(local.to_vec::<f32>(), (&mine * 2.0).to_vec::<f32>());
    assert_eq!(distributed::bytes_sent() - before, 3 * 4 * (n > 1) as u64);
    // Replicated output: the all-reduced column sums.
    let want = global.sum(&[0], false).to_vec::<f32>();
    assert_eq!(col_sums.to_vec::<f32>(), want);
    // Fed back unread, split the same way: used in place (moves nothing).
    let g = rune::pmap_with(
        |y: &Tensor| y + 1.0,
        PmapOpts {
            devices: world.devices(),
            ..PmapOpts::default()
        },
    );
    let before = distributed::bytes_sent();
    let plus = g.call(&doubled);
    assert_eq!(distributed::bytes_sent(), before);
    assert_eq!(
        world.local_shard(&plus).to_vec::<f32>(),
        (&mine * 2.0 + 1.0).to_vec::<f32>()
    );
    // Reading a split output gathers it (every rank reads).
    assert_eq!(plus.to_vec::<f32>(), (&global * 2.0 + 1.0).to_vec::<f32>());
}

/// A small MLP and its data: 2-16-3, tanh, softmax cross-entropy.
#[derive(Ptree, Clone)]
struct Mlp {
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
}

const BATCH: usize = 64;

fn mlp() -> Mlp {
    let w = |shape: &[usize], salt: usize| {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|i| (((i * 37 + salt * 11) % 23) as f32 - 11.0) / 20.0)
            .collect();
        Tensor::from_vec(v, shape)
    };
    Mlp {
        w1: w(&[2, 16], 1),
        b1: w(&[16], 2),
        w2: w(&[16, 3], 3),
        b2: w(&[3], 4),
    }
}

fn data(step: usize) -> (Tensor, Tensor) {
    let x: Vec<f32> = (0..BATCH * 2)
        .map(|i| ((i * 13 + step * 7) as f32 * 0.37).sin())
        .collect();
    let y: Vec<i32> = (0..BATCH).map(|i| ((i + step) % 3) as i32).collect();
    (
        Tensor::from_vec(x, &[BATCH, 2]),
        Tensor::from_vec(y, &[BATCH]),
    )
}

fn loss(p: &Mlp, x: &Tensor, y: &Tensor) -> Tensor {
    let h = (x.matmul(&p.w1) + &p.b1).tanh();
    let logits = h.matmul(&p.w2) + &p.b2;
    let logp = &logits - logits.logsumexp(&[1], true);
    let picked = logp.take_along_axis(&y.reshape(&[BATCH, 1]), 1);
    -picked.mean_all()
}

fn shard(t: &Tensor, world: &World) -> Tensor {
    let rows = t.shape()[0] / world.size();
    t.narrow(0, world.rank() * rows, rows).copy()
}

fn close(a: &[f32], b: &[f32], tol: f32, what: &str) {
    for (x, y) in a.iter().zip(b) {
        assert!(
            (x - y).abs() <= tol * y.abs().max(1.0),
            "{what}: {a:?} vs {b:?}"
        );
    }
}

fn pmap_grads(world: &World) {
    let p = mlp();
    let (x, y) = data(0);
    let (l_one, g_one) = rune::value_and_grad(|p: &Mlp| loss(p, &x, &y), &p);
    let mut in_axes = vec![None; 4];
    in_axes.extend([Some(0), Some(0)]);
    let f = rune::pmap_with(
        |(p, x, y): &(Mlp, Tensor, Tensor)| rune::value_and_grad(|p: &Mlp| loss(p, x, y), p),
        PmapOpts {
            devices: world.devices(),
            in_axes: Some(in_axes),
            donate: false,
        },
    );
    let (l, g) = f.call(&(p.clone(), shard(&x, world), shard(&y, world)));
    close(&[l.item::<f32>()], &[l_one.item::<f32>()], 1e-6, "loss");
    for ((a, b), name) in g.leaves().iter().zip(g_one.leaves()).zip(p.leaf_paths()) {
        assert_eq!(a.shape(), b.shape());
        close(&a.to_vec::<f32>(), &b.to_vec::<f32>(), 1e-5, &name);
    }
}

fn pmap_trajectory(world: &World) {
    let step = |(p, x, y): &(Mlp, Tensor, Tensor)| {
        let (l, g) = rune::value_and_grad(|p: &Mlp| loss(p, x, y), p);
        (l, p.map2_leaves(&g, &mut |w, g| w - g * 0.5))
    };
    let mut in_axes = vec![None; 4];
    in_axes.extend([Some(0), Some(0)]);
    let parallel = rune::pmap_with(
        step,
        PmapOpts {
            devices: world.devices(),
            in_axes: Some(in_axes),
            donate: true,
        },
    );
    let single = rune::jit(step);
    let (mut p_dp, mut p_one) = (mlp(), mlp());
    let param_bytes: u64 = mlp().leaves().iter().map(|t| 4 * t.numel() as u64).sum();
    for s in 0..30 {
        let (x, y) = data(s);
        let before = distributed::bytes_sent();
        let (l_dp, next) = parallel.call(&(p_dp, shard(&x, world), shard(&y, world)));
        let sent = distributed::bytes_sent() - before;
        p_dp = next;
        if world.size() > 1 {
            // The gradients' all-reduce and the loss's, nothing else.
            assert_eq!(sent, param_bytes + 4, "step {s}");
        }
        let (l_one, next) = single.call(&(p_one, x, y));
        p_one = next;
        close(
            &[l_dp.item::<f32>()],
            &[l_one.item::<f32>()],
            1e-4,
            &format!("loss at step {s}"),
        );
    }
    for (a, b) in p_dp.leaves().iter().zip(p_one.leaves()) {
        close(
            &a.to_vec::<f32>(),
            &b.to_vec::<f32>(),
            1e-3,
            "trained parameters",
        );
    }
}
