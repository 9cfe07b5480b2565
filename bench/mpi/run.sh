#!/usr/bin/env bash
# rune::distributed's measurements (BENCHMARKS.md, "Distributed"): the
# all-reduce of 1, 16 and 64 MiB across 2 processes, ours against a plain C
# MPI_Allreduce (built here with mpicc) and a memcpy; the data-parallel W4
# step on 2 processes against 1, and the bytes each step sends.
# Needs libopenmpi-dev openmpi-bin libclang-dev. Usage: bench/mpi/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cargo build --release -p rune --features mpi --example bench_distributed
out=target/mpi-bench
mkdir -p "$out"
mpicc -O2 -o "$out/allreduce" bench/mpi/allreduce.c
mpirun --oversubscribe -np 2 "$out/allreduce"
mpirun --oversubscribe -np 2 target/release/examples/bench_distributed --only allreduce
mpirun --oversubscribe -np 1 target/release/examples/bench_distributed --only W4
mpirun --oversubscribe -np 2 target/release/examples/bench_distributed --only W4
