#!/usr/bin/env bash
# The GPU check, one command (issue 45). Two halves:
#
#   1. here (any machine with Rust): build the test binaries that run on a
#      CUDA device (cuda_emulated: the same tests the emulated device passes
#      in CI, run against the real driver with RUNE_TEST_REAL_CUDA=1;
#      jit_fuzz's CUDA programs, the same way; cuda_compile) and the
#      benchmark binary (bench_gpu: W1, W3, W4, W15 and W17 jitted on a
#      device, with the device's copy bandwidth and SGEMM peak beside
#      them), and copy them, stripped of their line tables and gzipped
#      (about 6 MB each instead of 20: the folder stays under the device
#      machine's 64 MiB), into one folder, target/gpu-check/, with JAX's
#      side (bench/gpu_jax.py and the shared workload definitions it
#      imports) and the table (bench/gpu_table.py); the folder travels to
#      the GPU machine (the device image has CUDA 13 and JAX but no Rust);
#   2. there (or here, if this machine has a driver): run the tests, then
#      bench_gpu and gpu_jax.py (jax.jit on the GPU), and print one table:
#      workload, ours, jax.jit, ratio, W1's share of the bandwidth and W3's
#      of the SGEMM peak.
#
# On a machine without the CUDA driver it stops after the build, saying so
# (exit 0: nothing failed; nothing was checked on a GPU either).
# `--device CPU` runs the benchmark half on this machine's CPU instead (jit
# on "CPU" beside jax.jit on JAX's CPU backend; no tests): the table end to
# end without a GPU.
#
#   bench/gpu_check.sh                  # build, then run if a driver is present
#   bench/gpu_check.sh --device CPU     # build, then the benchmark half on the CPU
#   bench/gpu_check.sh --run-only       # on the GPU machine, inside target/gpu-check/
#   bench/gpu_check.sh --run-only --device CPU
#
# Environment: GPU_CHECK_PYTHON, a python with JAX (default python3; on a
# CPU machine with JAX in a virtual environment, its python);
# GPU_CHECK_RESULTS, the folder the JSON lines go to (default results/ in
# the check's folder; on the device machine, $OUT brings them back:
# `GPU_CHECK_RESULTS=$OUT bash target/gpu-check/gpu_check.sh --run-only`).
set -euo pipefail

CHECK_DIR=target/gpu-check

run_only=0
device=CUDA
while [ $# -gt 0 ]; do
    case "$1" in
        --run-only) run_only=1 ;;
        --device) device=${2:?--device needs a name (CUDA, CUDA:n, CPU)}; shift ;;
        *) echo "gpu_check: unknown argument $1 (--run-only, --device CUDA|CPU)"; exit 2 ;;
    esac
    shift
done

BINARIES="cuda_emulated cuda_compile jit_fuzz bench_gpu"

# The check's binaries, gunzipped from folder $1 into a temporary folder
# (removed on exit), whose path goes to $BIN.
unpack() {
    BIN=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
    trap 'rm -rf "$BIN"' EXIT
    local b
    for b in $BINARIES; do
        if command -v gunzip >/dev/null; then
            gunzip -c "$1/$b.gz" >"$BIN/$b"
        else
            python3 -c 'import gzip, shutil, sys; shutil.copyfileobj(gzip.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
                "$1/$b.gz" "$BIN/$b"
        fi
        chmod +x "$BIN/$b"
    done
}

# bench_gpu and gpu_jax.py on $device, then the table. Returns 1 if a side
# failed (its error rows are in the table).
run_benchmarks() {
    local dir=$1 status=0
    local results=${GPU_CHECK_RESULTS:-$dir/results}
    local py=${GPU_CHECK_PYTHON:-python3}
    local backend=gpu jax_env=()
    if [ "$device" = CPU ]; then backend=cpu; jax_env=(JAX_PLATFORMS=cpu); fi
    mkdir -p "$results"
    echo "== benchmarks: W1, W3, W4, W15, W17 on $device beside jax.jit ($py)"
    RUST_BACKTRACE=0 timeout 300 "$BIN/bench_gpu" --device "$device" >"$results/ours.jsonl" || {
        echo "gpu_check: bench_gpu failed (exit $?; its error rows are in the table)"
        status=1
    }
    env ${jax_env[@]+"${jax_env[@]}"} timeout 300 "$py" "$dir/gpu_jax.py" --defs "$dir/jax_defs" \
        --expect-backend "$backend" >"$results/jax.jsonl" || {
        echo "gpu_check: the jax.jit side failed (exit $?; GPU_CHECK_PYTHON names a python with JAX)"
        status=1
    }
    echo "== the table (JSON lines in $results)"
    local table_py=python3
    command -v python3 >/dev/null || table_py=$py
    "$table_py" "$dir/gpu_table.py" "$results/ours.jsonl" "$results/jax.jsonl" || status=1
    return $status
}

run_on_device() {
    local dir=$1
    if [ "$device" = CPU ]; then
        echo "== the benchmark half on this machine's CPU (no tests: they need the driver)"
        unpack "$dir"
        local status=0
        run_benchmarks "$dir" || status=1
        return $status
    fi
    echo "== GPU check on this machine's driver"
    if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then
        echo "gpu_check: no CUDA driver here (libcuda.so.1 not found by ldconfig):"
        echo "gpu_check: the binaries are built in $dir; the device run needs a GPU machine."
        echo "gpu_check: stopping before the device run (--device CPU runs the benchmark half here)."
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
    unpack "$dir"
    local status=0
    echo "== tests against the real driver (the emulated device's tests)"
    RUNE_TEST_REAL_CUDA=1 RUST_BACKTRACE=0 timeout 300 "$BIN/cuda_emulated" --test-threads=1 || status=1
    echo "== random programs on the device equal eager (jit_fuzz's CUDA seeds)"
    RUNE_TEST_REAL_CUDA=1 RUST_BACKTRACE=0 timeout 300 "$BIN/jit_fuzz" --test-threads=1 \
        random_programs_on_the_emulated_cuda_device_equal_eager --nocapture || status=1
    echo "== the CUDA kernels compile (NVRTC)"
    RUST_BACKTRACE=0 timeout 200 "$BIN/cuda_compile" --test-threads=2 || status=1
    run_benchmarks "$dir" || status=1
    return $status
}

if [ $run_only = 1 ]; then
    run_on_device "$(cd "$(dirname "$0")" && pwd)"
    exit $?
fi

cd "$(dirname "$0")/.."
echo "== building the test binaries and the benchmark binary"
binary_of() { # cargo's JSON messages -> the executable of test $1
    sed -n "s/.*\"executable\":\"\([^\"]*\/$1-[^\"]*\)\".*/\1/p" | tail -1
}
example_of() { # cargo's JSON messages -> the executable of example $1
    sed -n "s/.*\"executable\":\"\([^\"]*\/examples\/$1\)\".*/\1/p" | tail -1
}
rm -rf "$CHECK_DIR"
mkdir -p "$CHECK_DIR"
for t in cuda_emulated cuda_compile jit_fuzz; do
    exe=$(cargo test --release -p rune --test "$t" --no-run --message-format=json 2>/dev/null | binary_of "$t")
    [ -n "$exe" ] || { echo "gpu_check: building test $t failed"; exit 1; }
    cp "$exe" "$CHECK_DIR/$t"
done
exe=$(cargo build --release -p rune --example bench_gpu --message-format=json 2>/dev/null | example_of bench_gpu)
[ -n "$exe" ] || { echo "gpu_check: building example bench_gpu failed"; exit 1; }
cp "$exe" "$CHECK_DIR/bench_gpu"
# Line tables are most of each binary, and the rest compresses to a third:
# stripped and gzipped, the folder fits the device machine's carry limit
# (64 MiB; the four binaries are about 80 MB stripped, 23 MB gzipped).
for b in $BINARIES; do
    strip --strip-debug "$CHECK_DIR/$b" 2>/dev/null || true
    gzip -9 -n -f "$CHECK_DIR/$b"
done
cp bench/gpu_check.sh bench/gpu_jax.py bench/gpu_table.py "$CHECK_DIR/"
# JAX's workload definitions, imported by gpu_jax.py: the shared benchmark
# folder beside the repository, which the GPU machine does not have.
shared=../shared/bench
mkdir -p "$CHECK_DIR/jax_defs"
if [ -e "$shared/anchors/jax_bench.py" ] && [ -e "$shared/generality/jax_generality.py" ]; then
    cp "$shared/anchors/jax_bench.py" "$shared/anchors/benchutil.py" \
        "$shared/generality/jax_generality.py" "$CHECK_DIR/jax_defs/"
else
    echo "gpu_check: $shared not found: the jax.jit side will have no workload definitions"
fi
ls -la "$CHECK_DIR"
du -sh "$CHECK_DIR"
run_on_device "$PWD/$CHECK_DIR"
