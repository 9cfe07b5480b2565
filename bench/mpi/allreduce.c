/* Reference for rune::distributed's all-reduce: MPI_Allreduce (sum, f32,
 * out of place) of 1, 16 and 64 MiB, timed as bench_distributed times
 * World::all_reduce_sum (rank 0's time of each call after a barrier; the
 * median; bandwidth = buffer bytes / time). Built and run by run.sh:
 *   mpicc -O2 -o allreduce allreduce.c && mpirun -np 2 ./allreduce
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int mibs[3] = {1, 16, 64};
    for (int m = 0; m < 3; m++) {
        size_t n = ((size_t)mibs[m] << 20) / 4;
        float *send = malloc(n * 4), *recv = malloc(n * 4);
        for (size_t i = 0; i < n; i++) send[i] = 1.0f;
        int runs = mibs[m] == 64 ? 20 : 50;
        double *t = malloc(sizeof(double) * runs);
        for (int i = 0; i < runs + 3; i++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double s = MPI_Wtime();
            MPI_Allreduce(send, recv, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            double dt = MPI_Wtime() - s;
            if (i >= 3) t[i - 3] = dt;
        }
        if (recv[n - 1] != (float)size) { fprintf(stderr, "wrong sum\n"); return 1; }
        qsort(t, runs, sizeof(double), cmp);
        if (rank == 0)
            printf("{\"id\": \"allreduce_c\", \"mib\": %d, \"procs\": %d, \"min_ms\": %.3f, "
                   "\"median_ms\": %.3f, \"gb_s\": %.2f}\n",
                   mibs[m], size, 1e3 * t[0], 1e3 * t[runs / 2],
                   (double)((size_t)mibs[m] << 20) / t[runs / 2] / 1e9);
        free(send); free(recv); free(t);
    }
    MPI_Finalize();
    return 0;
}
