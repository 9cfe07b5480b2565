//! pmap's host devices: their transfers, resident outputs, donation and
//! worker threads (a binary of its own, its tests one at a time: `jit_stats`
//! is global, so nothing may run pmap or jit beside them).

use rune::prelude::*;
use rune::PmapOpts;
mod common;
use common::panic_message;

/// Held by each test: the counters are global.
static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn opts(devices: &[&str], in_axes: Vec<Option<usize>>, donate: bool) -> PmapOpts {
    PmapOpts {
        devices: devices.iter().map(|d| d.to_string()).collect(),
        in_axes: Some(in_axes),
        donate,
    }
}

/// `CPU:n` devices have memory and a thread of their own: a call copies
/// each device's shards and replicas to it; outputs stay there until first
/// read (shape and dtype known without transfer), then move to the host
/// for good; fed back unread in the same layout they move nothing;
/// `donate` releases them once the call is done and a donated handle
/// panics when read; the host device `CPU:0` moves nothing.
#[test]
fn cpu_n_devices_hold_outputs_until_read_and_count_every_transfer() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let f = |(x, w): &(Tensor, Tensor)| (x * w, (x * w).sum_all());
    let x = Tensor::ones(&[8, 4], DType::F32);
    let w = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[4]);
    let devs = ["CPU:1", "CPU:2"];
    let pf = rune::pmap_with(f, opts(&devs, vec![Some(0), None], false));
    rune::reset_jit_stats();
    let (y, s) = pf.call(&(x.clone(), w.clone()));
    let st = rune::jit_stats();
    // In: two shards of 4x4 f32 (128 B in all) and two 16 B replicas of w.
    assert_eq!(st.bytes_to_device, 128 + 2 * 16);
    assert_eq!(st.bytes_from_device, 0, "nothing is read yet");
    // Held: y's two shards, and the all-reduced sum on both devices.
    assert_eq!(st.resident_bytes, 128 + 2 * 4);
    assert_eq!(y.shape(), &[8, 4]);
    assert_eq!(y.dtype(), DType::F32);
    assert_eq!(
        rune::jit_stats().bytes_from_device,
        0,
        "metadata moves nothing"
    );
    assert_eq!(s.to_vec::<f32>(), vec![80.0]);
    assert_eq!(
        rune::jit_stats().bytes_from_device,
        4,
        "one replica of the sum"
    );
    assert_eq!(rune::jit_stats().resident_bytes, 128);

    // y fed back unread, split along 0 as this program reads it: no transfer.
    let g = rune::pmap_with(
        |(y, w): &(Tensor, Tensor)| y * w,
        opts(&devs, vec![Some(0), None], false),
    );
    let z = g.call(&(y.clone(), w.clone()));
    let st = rune::jit_stats();
    assert_eq!(st.bytes_to_device, 160 + 2 * 16, "only w's replicas move");
    assert_eq!(st.bytes_from_device, 4, "y was not read");
    assert_eq!(st.resident_bytes, 128 + 128, "y and z");
    // Read, y moves to the host for good: an ordinary tensor afterwards.
    assert_eq!(y.to_vec::<f32>(), (&x * &w).to_vec::<f32>());
    assert_eq!(rune::jit_stats().bytes_from_device, 4 + 128);
    assert_eq!(rune::jit_stats().resident_bytes, 128);
    y.to_vec::<f32>();
    assert_eq!(rune::jit_stats().bytes_from_device, 4 + 128, "read once");
    // Fed back now, it uploads its current bytes.
    g.call(&(y.clone(), w.clone()));
    assert_eq!(rune::jit_stats().bytes_to_device, 192 + 128 + 2 * 16);
    // Dropping an unread output releases what the devices hold for it.
    drop(z);
    assert_eq!(rune::jit_stats().resident_bytes, 0);

    // donate: the unread input is consumed once the call is done.
    let d = rune::pmap_with(
        |(y, w): &(Tensor, Tensor)| y * w,
        opts(&devs, vec![Some(0), None], true),
    );
    let (y2, _) = pf.call(&(x.clone(), w.clone()));
    let held = rune::jit_stats().resident_bytes;
    let z2 = d.call(&(y2.clone(), w.clone()));
    assert_eq!(
        rune::jit_stats().resident_bytes,
        held,
        "y2's 128 B released, z2's 128 B held"
    );
    let m = panic_message(|| {
        y2.to_vec::<f32>();
    });
    assert!(m.contains("donate"), "{m}");
    let m = panic_message(|| {
        d.call(&(y2.clone(), w.clone()));
    });
    assert!(m.contains("donate"), "feeding it again reads it: {m}");
    // A handle given as two leaves is donated once: both read it.
    let two = rune::pmap_with(
        |(a, b, w): &(Tensor, Tensor, Tensor)| a + b * w,
        opts(&devs, vec![Some(0), Some(0), None], true),
    );
    let (y3, _) = pf.call(&(x.clone(), w.clone()));
    let want = (&(&x * &w) + &(&(&x * &w) * &w)).to_vec::<f32>();
    assert_eq!(
        two.call(&(y3.clone(), y3.clone(), w.clone()))
            .to_vec::<f32>(),
        want
    );
    assert!(panic_message(|| drop(y3.to_vec::<f32>())).contains("donate"));
    // A view of an unread output is not the output: read and sent again.
    let (y4, _) = pf.call(&(x.clone(), w.clone()));
    let flat = rune::pmap_with(|v: &Tensor| v * 2.0, opts(&devs, vec![Some(0)], false));
    let before = rune::jit_stats();
    let v = flat.call(&y4.reshape(&[32]));
    assert_eq!(
        v.to_vec::<f32>(),
        (&(&x * &w) * 2.0).reshape(&[32]).to_vec::<f32>()
    );
    let after = rune::jit_stats();
    assert_eq!(
        after.bytes_to_device - before.bytes_to_device,
        128,
        "the view is uploaded"
    );
    // Host tensors are not consumed.
    let z3 = d.call(&(x.clone(), w.clone()));
    assert_eq!(x.to_vec::<f32>(), vec![1.0; 32]);
    assert_eq!(z3.to_vec::<f32>(), (&x * &w).to_vec::<f32>());
    assert_eq!(z2.to_vec::<f32>(), (&(&x * &w) * &w).to_vec::<f32>());

    rune::reset_jit_stats();
    assert_eq!(rune::jit_stats().bytes_to_device, 0);
    assert_eq!(rune::jit_stats().bytes_from_device, 0);

    let host = rune::pmap_with(f, opts(&["CPU:0"], vec![Some(0), None], false));
    let (y0, s0) = host.call(&(x.clone(), w.clone()));
    assert_eq!(s0.to_vec::<f32>(), vec![80.0]);
    assert_eq!(y0.to_vec::<f32>(), (&x * &w).to_vec::<f32>());
    let st = rune::jit_stats();
    assert_eq!(
        (st.bytes_to_device, st.bytes_from_device),
        (0, 0),
        "the host device moves nothing"
    );

    // Each `CPU:n` device runs on a worker thread of its own, named for it.
    #[cfg(target_os = "linux")]
    {
        let names: Vec<String> = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .map(|s| s.trim().to_string())
            .collect();
        for d in ["tolk-CPU:1", "tolk-CPU:2"] {
            assert!(names.iter().any(|t| t == d), "{d} among {names:?}");
        }
        assert!(
            !names.iter().any(|t| t == "tolk-CPU:0"),
            "CPU:0 is the calling thread"
        );
    }
}

/// 20 steps of data-parallel SGD (the batch split across two devices, the
/// parameters replicated and fed back unread): the trajectory equals the
/// single-device jitted one, and once the parameters are resident each
/// step moves the batch shards and nothing else.
#[test]
fn a_data_parallel_training_trajectory_equals_one_device_and_moves_only_the_batch() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    type P = (Tensor, Tensor, Tensor, Tensor);
    let step = |(params, x, y): &(P, Tensor, Tensor)| {
        let (loss, g) = rune::value_and_grad(
            |(w1, b1, w2, b2): &P| {
                let h = (x.matmul(w1) + b1).tanh();
                (h.matmul(w2) + b2 - y).square().mean_all()
            },
            params,
        );
        let upd = |p: &Tensor, g: &Tensor| p - g * 0.1;
        (
            loss,
            (
                upd(&params.0, &g.0),
                upd(&params.1, &g.1),
                upd(&params.2, &g.2),
                upd(&params.3, &g.3),
            ),
        )
    };
    let init = |seed: u64, shape: &[usize]| {
        let n: usize = shape.iter().product();
        let v: Vec<f64> = (0..n)
            .map(|i| (((i as u64 + 1) * (seed * 2654435761 + 7)) % 1000) as f64 / 1000.0 - 0.5)
            .collect();
        Tensor::from_slice(&v, shape)
    };
    let params: P = (
        init(1, &[3, 16]),
        init(2, &[16]),
        init(3, &[16, 2]),
        init(4, &[2]),
    );
    let batch = |k: u64| (init(10 + k, &[8, 3]), init(50 + k, &[8, 2]));
    let one = rune::jit(step);
    let dp = rune::pmap_with(
        step,
        opts(
            &["CPU:1", "CPU:2"],
            vec![None, None, None, None, Some(0), Some(0)],
            false,
        ),
    );
    let (mut p1, mut p2) = (params.clone(), params);
    for k in 0..20 {
        let (x, y) = batch(k);
        let (l1, n1) = one.call(&(p1.clone(), x.clone(), y.clone()));
        rune::reset_jit_stats();
        let (l2, n2) = dp.call(&(p2.clone(), x, y));
        let moved = rune::jit_stats().bytes_to_device;
        let batch_bytes = (8 * 3 + 8 * 2) * 8;
        if k > 0 {
            assert_eq!(moved, batch_bytes, "step {k}: only the batch shards move");
        } else {
            assert!(moved > batch_bytes, "the first step uploads the parameters");
        }
        let (a, b) = (l1.to_vec::<f64>()[0], l2.to_vec::<f64>()[0]);
        assert!(
            (a - b).abs() <= 1e-12 * (1.0 + a.abs()),
            "step {k}: loss {a} vs {b}"
        );
        p1 = n1;
        p2 = n2;
    }
    for (a, b) in p1.leaves().iter().zip(p2.leaves()) {
        for (x, y) in a.to_vec::<f64>().iter().zip(b.to_vec::<f64>()) {
            assert!((x - y).abs() <= 1e-11 * (1.0 + x.abs()), "{x} vs {y}");
        }
    }
}

/// jit on a host device `CPU:n` follows the same residency rules: inputs
/// copied to it, outputs held there until read, fed back unread with no
/// transfer, donated on request; results equal jit on the host.
#[test]
fn jit_on_a_cpu_n_device_keeps_its_outputs_resident() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let f = |(s, x): &(Tensor, Tensor)| s * 0.5 + x.exp();
    let dev = rune::jit_with(
        f,
        rune::JitOpts {
            device: "CPU:3".into(),
            donate: true,
        },
    );
    let host = rune::jit(f);
    let x = Tensor::from_slice(&[0.0f32, 1.0, 2.0, 3.0], &[4]);
    let mut s_dev = Tensor::zeros(&[4], DType::F32);
    let mut s_host = s_dev.clone();
    rune::reset_jit_stats();
    for k in 0..5 {
        let next = dev.call(&(s_dev.clone(), x.clone()));
        let st = rune::jit_stats();
        assert_eq!(
            st.bytes_to_device,
            16 * (k + 1) + 16,
            "call {k}: x every call, the state once"
        );
        assert_eq!(st.bytes_from_device, 0, "nothing read yet");
        s_host = host.call(&(s_host.clone(), x.clone()));
        s_dev = next;
    }
    assert_eq!(
        rune::jit_stats().resident_bytes,
        16,
        "the last state; donated ones released"
    );
    assert_eq!(s_dev.to_vec::<f32>(), s_host.to_vec::<f32>());
    assert_eq!(rune::jit_stats().bytes_from_device, 16);
    assert_eq!(dev.trace_count(), 1);
}
