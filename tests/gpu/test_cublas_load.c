/* test_cublas_load.c: cuBLAS and cuBLASLt are loaded when the CUDA backend starts, not with
 * liblockstep (kernels/cuda/cublas_load.c), and runs without a GPU:
 * - before ls_cublas_load, neither library is mapped into the process (linked, they cost every
 *   process about 0.35 s and 210 MB at load, GPU or not);
 * - ls_cublas_load finds both and every function the backend calls (it fails naming the one
 *   missing), and a second call is a no-op;
 * - liblockstep exports none of the cuBLAS names it forwards, so a program's own cuBLAS calls
 *   cannot bind to its forwarding definitions. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "status.h"
#include "testutil.h"

ls_status ls_cublas_load(void); /* kernels/cuda/cuda_backend.h, which needs the CUDA headers */

/* 1 when a mapping of the process names a file whose name contains lib */
static int mapped(const char *lib) {
    FILE *f = fopen("/proc/self/maps", "r");
    LS_REQUIRE(f != NULL);
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) found = strstr(line, lib) != NULL;
    fclose(f);
    return found;
}

int main(void) {
    LS_EXPECT(!mapped("libcublasLt.so"));
    LS_EXPECT(!mapped("libcublas.so"));
    LS_REQUIRE_OK(ls_cublas_load());
    LS_EXPECT(mapped("libcublasLt.so"));
    LS_EXPECT(mapped("libcublas.so"));
    LS_REQUIRE_OK(ls_cublas_load());
    void *self = dlopen(NULL, RTLD_NOW);
    LS_REQUIRE(self != NULL);
    const char *names[] = {"cublasCreate_v2", "cublasGemmEx", "cublasLtCreate", "cublasLtMatmul",
                           "cublasGetStatusName"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (dlsym(self, names[i]) != NULL) {
            fprintf(stderr, "FAIL: %s is visible to the program\n", names[i]);
            LS_EXPECT(0);
        }
    }
    dlclose(self);
    LS_TEST_END();
}
