#!/usr/bin/env bash
# The GPU check, one command (issue 45). Two halves:
#
#   1. here (any machine with Rust): build the test binaries that run on a
#      CUDA device (cuda_emulated: the same tests the emulated device passes
#      in CI, run against the real driver with RUNE_TEST_REAL_CUDA=1;
#      jit_fuzz's CUDA programs, the same way; cuda_compile) and a benchmark binary (bench_jit), and copy them into
#      one folder, target/gpu-check/, that travels to the GPU machine (the
#      device image has CUDA 13 and JAX but no Rust);
#   2. there (or here, if this machine has a driver): run them.
#
# On a machine without the CUDA driver it stops after the build, saying so
# (exit 0: nothing failed; nothing was checked on a GPU either).
#
#   bench/gpu_check.sh            # build, then run if a driver is present
#   bench/gpu_check.sh --run-only # on the GPU machine, inside target/gpu-check/
#
# Not built yet (printed when reached): W1, W3, W4, W15 and W17 on the GPU
# beside jax.jit, as one table (the benchmark binary runs; the table and
# the JAX side are the next step of issue 45).
set -euo pipefail

OUT=target/gpu-check

run_on_device() {
    local dir=$1
    echo "== GPU check on this machine's driver"
    if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then
        echo "gpu_check: no CUDA driver here (libcuda.so.1 not found by ldconfig):"
        echo "gpu_check: the binaries are built in $dir; the device run needs a GPU machine."
        echo "gpu_check: stopping before the device run."
        return 0
    fi
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    # NVRTC: the toolkit's, else the pip wheel's (the image has CUDA 13).
    if [ -z "${TOLK_NVRTC:-}" ]; then
        for cand in /usr/local/cuda/lib64/libnvrtc.so.13 /usr/local/cuda/lib64/libnvrtc.so.12 \
            $(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__file__))' 2>/dev/null)/cuda_nvrtc/lib/libnvrtc.so.*; do
            if [ -e "$cand" ]; then export TOLK_NVRTC=$cand; break; fi
        done
    fi
    echo "TOLK_NVRTC=${TOLK_NVRTC:-(system search)}"
    local status=0
    echo "== tests against the real driver (the emulated device's tests)"
    RUNE_TEST_REAL_CUDA=1 RUST_BACKTRACE=0 timeout 300 "$dir/cuda_emulated" --test-threads=1 || status=1
    echo "== random programs on the device equal eager (jit_fuzz's CUDA seeds)"
    RUNE_TEST_REAL_CUDA=1 RUST_BACKTRACE=0 timeout 300 "$dir/jit_fuzz" --test-threads=1 \
        random_programs_on_the_emulated_cuda_device_equal_eager --nocapture || status=1
    echo "== the CUDA kernels compile (NVRTC)"
    RUST_BACKTRACE=0 timeout 200 "$dir/cuda_compile" --test-threads=2 || status=1
    echo "== benchmarks"
    echo "gpu_check: W1, W3, W4, W15, W17 on CUDA beside jax.jit: not built yet (issue 45)"
    return $status
}

if [ "${1:-}" = "--run-only" ]; then
    run_on_device "$(cd "$(dirname "$0")" && pwd)"
    exit $?
fi

cd "$(dirname "$0")/.."
echo "== building the test binaries and the benchmark binary"
binary_of() { # cargo's JSON messages -> the executable of test/example $1
    sed -n "s/.*\"executable\":\"\([^\"]*\/$1-[^\"]*\)\".*/\1/p" | tail -1
}
mkdir -p "$OUT"
for t in cuda_emulated cuda_compile jit_fuzz; do
    exe=$(cargo test --release -p rune --test "$t" --no-run --message-format=json 2>/dev/null | binary_of "$t")
    [ -n "$exe" ] || { echo "gpu_check: building test $t failed"; exit 1; }
    cp "$exe" "$OUT/$t"
done
cargo build --release -p rune --example bench_jit
cp target/release/examples/bench_jit "$OUT/bench_jit"
# Line tables are most of each binary: without them the folder fits the
# device machine's carry limit (64 MiB).
for b in "$OUT"/cuda_emulated "$OUT"/cuda_compile "$OUT"/jit_fuzz "$OUT"/bench_jit; do
    strip --strip-debug "$b" 2>/dev/null || true
done
cp "$0" "$OUT/gpu_check.sh"
ls -la "$OUT"
run_on_device "$PWD/$OUT"
