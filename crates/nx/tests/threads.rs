//! Tensors across threads: sending one to another thread, several threads
//! computing eagerly at once, and in-place writes racing with reads.

use nx::{DType, Slice, Tensor};
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

fn assert_send_sync<T: Send + Sync + 'static>() {}

#[test]
fn tensor_is_send_and_sync() {
    assert_send_sync::<Tensor>();
    assert_send_sync::<DType>();
}

/// A deterministic input large enough that kernels split across the thread pool.
fn input(n: usize, seed: u32) -> Tensor {
    let v: Vec<f32> = (0..n)
        .map(|i| {
            ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 2000) as f32 / 1000.0 - 1.0
        })
        .collect();
    Tensor::from_vec(v, &[n / 8, 8])
}

/// A chain of elementwise and movement operations.
fn work(x: &Tensor) -> Tensor {
    let y = (x.exp() * x.sin() + 1.0).sqrt();
    let z = y.transpose().flip(&[1]).contiguous();
    let w = z.slice(&[Slice::all(), Slice::from(..).step(-1)]);
    (&w - &w.tanh()).maximum(&w.zeros_like()) + w.clamp(-0.5, 0.5)
}

#[test]
fn a_tensor_sent_to_another_thread_is_used_there() {
    let x = Tensor::from_slice(&[1.0f64, 2.0, 3.0, 4.0], &[2, 2]);
    let view = x.transpose();
    let h = thread::spawn(move || {
        let y = (&view * 2.0 + 1.0).exp().log();
        assert_eq!(y.shape(), &[2, 2]);
        (y.to_vec::<f64>(), view)
    });
    let (got, view_back) = h.join().unwrap();
    assert_eq!(got.len(), 4);
    for (g, want) in got.iter().zip([3.0, 7.0, 5.0, 9.0]) {
        assert!((g - want).abs() < 1e-12, "{g} vs {want}");
    }
    // The handle came back and still shares storage with the original.
    assert!(view_back.shares_storage_with(&x));
    assert_eq!(view_back.to_vec::<f64>(), vec![1.0, 3.0, 2.0, 4.0]);
    // A clone may be used from another thread while this one holds the original.
    let c = x.clone();
    let s = thread::spawn(move || c.get(1).to_vec::<f64>())
        .join()
        .unwrap();
    assert_eq!(s, vec![3.0, 4.0]);
}

#[test]
fn two_threads_computing_at_once_match_single_threaded_results() {
    let n = 1 << 18; // above the kernels' parallel threshold
    let inputs: Vec<Tensor> = (0..2).map(|s| input(n, s)).collect();
    let expected: Vec<Vec<f32>> = inputs.iter().map(|x| work(x).to_vec::<f32>()).collect();
    let barrier = Arc::new(Barrier::new(2));
    let handles: Vec<_> = inputs
        .iter()
        .cloned()
        .map(|x| {
            let b = Arc::clone(&barrier);
            thread::spawn(move || {
                b.wait();
                (0..5).map(|_| work(&x).to_vec::<f32>()).collect::<Vec<_>>()
            })
        })
        .collect();
    for (h, want) in handles.into_iter().zip(&expected) {
        for got in h.join().unwrap() {
            assert!(
                got == *want,
                "a concurrent result differs from the single-threaded one"
            );
        }
    }
}

#[test]
fn many_threads_sharing_one_input() {
    let x = input(1 << 12, 7);
    let want = work(&x).to_vec::<f32>();
    let handles: Vec<_> = (0..6)
        .map(|_| {
            let x = x.clone();
            thread::spawn(move || work(&x).to_vec::<f32>())
        })
        .collect();
    for h in handles {
        assert!(h.join().unwrap() == want);
    }
}

#[test]
fn concurrent_assign_and_reads_do_not_corrupt() {
    // One writer fills the whole tensor with k, k = 1, 2, ...; readers must
    // always see one k everywhere (never a mix), and k never goes back.
    let n = 1 << 17;
    let x = Tensor::zeros(&[n], DType::F64);
    let rounds = 60;
    let writer = {
        let x = x.clone();
        thread::spawn(move || {
            for k in 1..=rounds {
                x.assign(&Tensor::full(&[n], k as f64, DType::F64));
            }
        })
    };
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let x = x.clone();
            thread::spawn(move || {
                let mut last = 0.0;
                for i in 0..40 {
                    let v = if (i + r) % 2 == 0 {
                        x.to_vec::<f64>()
                    } else {
                        (&x * 1.0).to_vec::<f64>()
                    };
                    let k = v[0];
                    assert!(
                        v.iter().all(|&e| e == k),
                        "a read saw a partly written tensor"
                    );
                    assert!(k >= last, "values went back from {last} to {k}");
                    last = k;
                }
            })
        })
        .collect();
    writer.join().unwrap();
    for r in readers {
        r.join().unwrap();
    }
    assert!(x.to_vec::<f64>().iter().all(|&e| e == rounds as f64));
}

#[test]
fn concurrent_assigns_into_disjoint_views() {
    // Several threads write disjoint rows of one tensor through views.
    let x = Tensor::zeros(&[8, 1000], DType::I32);
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let row = x.get(i);
            thread::spawn(move || {
                for k in 0..20 {
                    row.assign(&Tensor::full(&[1000], (i * 100 + k) as f64, DType::I32));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let v = x.to_vec::<i32>();
    for i in 0..8 {
        assert!(v[i * 1000..(i + 1) * 1000]
            .iter()
            .all(|&e| e == (i * 100 + 19) as i32));
    }
}

/// Runs `f` on a thread and fails if it has not finished within `secs`.
fn within(secs: u64, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .expect("did not finish in time (deadlock?)");
}

// `assign` takes the source's read lock and the destination's write lock;
// taken in a fixed order, so that `a.assign(&b)` and `b.assign(&a)` on two
// threads cannot each hold one and wait for the other (this deadlocked about
// one run in two before the locks were ordered by storage address).
#[test]
fn cross_assignments_between_two_tensors_do_not_deadlock() {
    // a <- b on one thread while b <- a on another: each assign reads its
    // source and writes its destination; lock order must not deadlock.
    within(60, || {
        let a = Tensor::ones(&[1 << 14], DType::F32);
        let b = Tensor::zeros(&[1 << 14], DType::F32);
        let t1 = {
            let (a, b) = (a.clone(), b.clone());
            thread::spawn(move || {
                for _ in 0..3000 {
                    a.assign(&b);
                }
            })
        };
        let t2 = {
            let (a, b) = (a.clone(), b.clone());
            thread::spawn(move || {
                for _ in 0..3000 {
                    b.assign(&a);
                }
            })
        };
        t1.join().unwrap();
        t2.join().unwrap();
        // Each element is 0 or 1, and every tensor is uniform.
        for t in [&a, &b] {
            let v = t.to_vec::<f32>();
            assert!(v.iter().all(|&e| e == v[0]) && (v[0] == 0.0 || v[0] == 1.0));
        }
    });
}

/// `NX_NUM_THREADS` sets the pool's size. It is read once per process, so
/// the check runs in a child process of this test binary.
#[test]
fn nx_num_threads_sets_the_thread_count() {
    if let Ok(want) = std::env::var("NX_THREADS_TEST_CHILD") {
        assert_eq!(nx::num_threads().to_string(), want);
        // A parallel kernel with that many threads: 2^20 ones sum exactly.
        let ones = Tensor::ones(&[1 << 20], DType::F32);
        assert_eq!(ones.sum_all().item::<f32>(), (1 << 20) as f32);
        return;
    }
    for n in ["1", "3"] {
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "nx_num_threads_sets_the_thread_count",
                "--test-threads=1",
            ])
            .env("NX_NUM_THREADS", n)
            .env("NX_THREADS_TEST_CHILD", n)
            .status()
            .unwrap();
        assert!(status.success(), "child with NX_NUM_THREADS={n} failed");
    }
}
