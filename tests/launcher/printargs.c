/* printargs.c: test helper for lockstep-run. Writes its arguments (argv[1..], each followed by a
 * NUL byte) to $LOCKSTEP_TEST_OUT/rank<R>.args and a few forwarded variables to rank<R>.env, R
 * being the MPI rank from the launcher's environment (0 when run directly), so a test can check
 * that arguments arrive byte for byte and variables arrive at every rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *rank_of_env(void) {
    const char *names[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const char *v = getenv(names[i]);
        if (v && *v) return v;
    }
    return "0";
}

int main(int argc, char **argv) {
    const char *dir = getenv("LOCKSTEP_TEST_OUT");
    const char *rank = rank_of_env();
    if (!dir) {
        fprintf(stderr, "printargs: LOCKSTEP_TEST_OUT is not set\n");
        return 3;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/rank%s.args", dir, rank);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return 3;
    }
    for (int i = 1; i < argc; i++) fwrite(argv[i], 1, strlen(argv[i]) + 1, f);
    if (fclose(f)) {
        perror(path);
        return 3;
    }
    snprintf(path, sizeof path, "%s/rank%s.env", dir, rank);
    f = fopen(path, "w");
    if (!f) {
        perror(path);
        return 3;
    }
    const char *vars[] = {"LOCKSTEP_LOG", "NCCL_DEBUG", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "LS_TEST_EXTRA"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        fprintf(f, "%s=%s\n", vars[i], v ? v : "<unset>");
    }
    if (fclose(f)) {
        perror(path);
        return 3;
    }
    printf("rank %s argc %d\n", rank, argc);
    return 0;
}
