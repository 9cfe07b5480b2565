//! pmap's host devices: their transfer counters and worker threads (one
//! test in a binary of its own: `jit_stats` is global, so nothing may run
//! pmap or jit beside it).

use rune::prelude::*;
use rune::PmapOpts;

/// `CPU:n` devices have memory and a thread of their own: a call copies
/// each device's shards and replicas to it and reads the outputs back; the
/// host device `CPU:0` moves nothing; `reset_jit_stats` zeroes the counters.
#[test]
fn cpu_n_devices_have_threads_and_memory_of_their_own_the_host_device_neither() {
    let f = |(x, w): &(Tensor, Tensor)| (x * w, (x * w).sum_all());
    let x = Tensor::ones(&[8, 4], DType::F32);
    let w = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[4]);
    let opts = |devices: &[&str]| PmapOpts {
        devices: devices.iter().map(|d| d.to_string()).collect(),
        in_axes: Some(vec![Some(0), None]),
        donate: false,
    };
    let pf = rune::pmap_with(f, opts(&["CPU:1", "CPU:2"]));
    rune::reset_jit_stats();
    let (y, s) = pf.call(&(x.clone(), w.clone()));
    assert_eq!(s.to_vec::<f32>(), vec![80.0]);
    assert_eq!(y.shape(), &[8, 4]);
    let st = rune::jit_stats();
    // In: two shards of 4x4 f32 (128 B in all) and two 16 B replicas of w.
    assert_eq!(st.bytes_to_device, 128 + 2 * 16);
    // Out: both shards of x * w (128 B) and one replica of the all-reduced sum.
    assert_eq!(st.bytes_from_device, 128 + 4);
    assert_eq!(st.resident_bytes, 0, "outputs are read back when the call returns");
    pf.call(&(x.clone(), w.clone()));
    assert_eq!(rune::jit_stats().bytes_to_device, 2 * (128 + 2 * 16));
    rune::reset_jit_stats();
    assert_eq!(rune::jit_stats().bytes_to_device, 0);

    let host = rune::pmap_with(f, opts(&["CPU:0"]));
    let (y0, s0) = host.call(&(x.clone(), w.clone()));
    assert_eq!(s0.to_vec::<f32>(), vec![80.0]);
    assert_eq!(y0.to_vec::<f32>(), y.to_vec::<f32>());
    assert_eq!(rune::jit_stats(), rune::JitStats::default(), "the host device moves nothing");

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
        assert!(!names.iter().any(|t| t == "tolk-CPU:0"), "CPU:0 is the calling thread");
    }
}

