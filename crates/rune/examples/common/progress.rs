//! What the training examples share around their loops: the progress bar
//! and the median time of a step.
#![allow(dead_code)] // each example uses a subset

use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

/// A bar of `steps` steps showing elapsed time, eta and a message.
pub fn bar(steps: usize) -> ProgressBar {
    let bar = ProgressBar::new(steps as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} steps (eta {eta})  {msg}",
        )
        .expect("progress bar template")
        .progress_chars("=> "),
    );
    bar
}

/// The median time of `runs` calls of `f`, in seconds, after `warmup` calls.
pub fn median_time(warmup: usize, runs: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..warmup {
        f();
    }
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}
