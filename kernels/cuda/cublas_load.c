/* cublas_load.c: cuBLAS and cuBLASLt loaded when the CUDA backend first starts, not when the
 * library loads. Linking them made every process of a CUDA build pay for cuBLASLt's start (about
 * 0.35 s and 210 MB of resident memory on the build machine, measured by an empty program linked
 * against it) before main: lockstep-ckpt, a run that falls back to the CPU and each rank of a CPU
 * job paid it without ever using a GPU. The backend calls the cuBLAS functions by their names as
 * before; the definitions below (hidden: liblockstep exports none of them, so a program's own
 * cuBLAS calls still reach cuBLAS) forward to the ones ls_cublas_load resolved with dlsym. Their
 * prototypes come from the cuBLAS headers, so the compiler checks each signature. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cuda_backend.h"

#define LS_STR_(x) #x
#define LS_STR(x) LS_STR_(x)
#define LS_HIDDEN __attribute__((visibility("hidden")))

/* cublas_v2.h maps some names to their _v2 symbols (cublasCreate is cublasCreate_v2): FN(name)
 * expands the macro, so the pointer is looked up under the symbol the header declares. */
#define LS_CUBLAS_FUNCS(X)                                                                                             \
    X(cublas, cublasCreate)                                                                                            \
    X(cublas, cublasDestroy)                                                                                           \
    X(cublas, cublasSetStream)                                                                                         \
    X(cublas, cublasSetWorkspace)                                                                                      \
    X(cublas, cublasGemmEx)                                                                                            \
    X(cublas, cublasGetStatusName)                                                                                     \
    X(cublas, cublasGetStatusString)                                                                                   \
    X(lt, cublasLtCreate)                                                                                              \
    X(lt, cublasLtDestroy)                                                                                             \
    X(lt, cublasLtMatmulDescCreate)                                                                                    \
    X(lt, cublasLtMatmulDescSetAttribute)                                                                              \
    X(lt, cublasLtMatmulDescDestroy)                                                                                   \
    X(lt, cublasLtMatrixLayoutCreate)                                                                                  \
    X(lt, cublasLtMatrixLayoutDestroy)                                                                                 \
    X(lt, cublasLtMatmulPreferenceCreate)                                                                              \
    X(lt, cublasLtMatmulPreferenceSetAttribute)                                                                        \
    X(lt, cublasLtMatmulPreferenceDestroy)                                                                             \
    X(lt, cublasLtMatmulAlgoGetHeuristic)                                                                              \
    X(lt, cublasLtMatmul)

#define LS_PTR(lib, f) static __typeof__(f) *p_##f;
LS_CUBLAS_FUNCS(LS_PTR)

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[768];

#define LS_LIBCUBLAS "libcublas.so." LS_STR(CUBLAS_VER_MAJOR)
#define LS_LIBCUBLASLT "libcublasLt.so." LS_STR(CUBLAS_VER_MAJOR)

/* name opened as the loader finds it (LD_LIBRARY_PATH, liblockstep's RUNPATH, the cache), else
 * from the directory of the CUDA runtime this process loaded: the toolkit's, where the runtime
 * was found some other way (CMake leaves nvcc's own library folder out of RUNPATHs). */
static void *open_lib(const char *name) {
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
    char first[512];
    const char *e = dlerror();
    snprintf(first, sizeof first, "%s", e ? e : "dlopen failed");
    Dl_info info;
    if (dladdr((void *)cudaGetDeviceCount, &info) && info.dli_fname) {
        char path[1024];
        const char *slash = strrchr(info.dli_fname, '/');
        if (slash && snprintf(path, sizeof path, "%.*s/%s", (int)(slash - info.dli_fname), info.dli_fname, name) <
                         (int)sizeof path)
            h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    if (!h) snprintf(load_error, sizeof load_error, "%s", first);
    return h;
}

static void load(void) {
    /* cuBLASLt first: libcublas needs it */
    void *lt = open_lib(LS_LIBCUBLASLT);
    void *cublas = lt ? open_lib(LS_LIBCUBLAS) : NULL;
    if (!cublas) return; /* open_lib said why */
#define LS_SYM(lib, f)                                                                                                 \
    p_##f = (__typeof__(f) *)dlsym(lib, LS_STR(f));                                                                    \
    if (!p_##f) {                                                                                                      \
        snprintf(load_error, sizeof load_error, "%s has no %s", lib == lt ? LS_LIBCUBLASLT : LS_LIBCUBLAS, LS_STR(f)); \
        return;                                                                                                        \
    }
    LS_CUBLAS_FUNCS(LS_SYM)
#undef LS_SYM
}

ls_status ls_cublas_load(void) {
    pthread_once(&load_once, load);
    if (load_error[0])
        return ls_error(LS_ERR_DEVICE,
                        "cannot load cuBLAS: %s; it comes with the CUDA toolkit (add its lib directory to "
                        "LD_LIBRARY_PATH), or run on the CPU with --device cpu or LOCKSTEP_DEVICE=cpu",
                        load_error);
    return LS_OK;
}

/* ---- the forwarding definitions: reached only after ls_cublas_load succeeded (the backend's
 * start calls it before its first cuBLAS call), except the status names, which an error message
 * may ask for at any time ---- */
LS_HIDDEN cublasStatus_t cublasCreate(cublasHandle_t *h) { return p_cublasCreate(h); }
LS_HIDDEN cublasStatus_t cublasDestroy(cublasHandle_t h) { return p_cublasDestroy(h); }
LS_HIDDEN cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) { return p_cublasSetStream(h, s); }
LS_HIDDEN cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *w, size_t n) {
    return p_cublasSetWorkspace(h, w, n);
}
LS_HIDDEN cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                      const void *alpha, const void *a, cudaDataType at, int lda, const void *b,
                                      cudaDataType bt, int ldb, const void *beta, void *c, cudaDataType ct, int ldc,
                                      cublasComputeType_t comp, cublasGemmAlgo_t algo) {
    return p_cublasGemmEx(h, ta, tb, m, n, k, alpha, a, at, lda, b, bt, ldb, beta, c, ct, ldc, comp, algo);
}
LS_HIDDEN const char *cublasGetStatusName(cublasStatus_t s) {
    return p_cublasGetStatusName ? p_cublasGetStatusName(s) : "(cuBLAS not loaded)";
}
LS_HIDDEN const char *cublasGetStatusString(cublasStatus_t s) {
    return p_cublasGetStatusString ? p_cublasGetStatusString(s) : "cuBLAS is not loaded";
}
LS_HIDDEN cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) { return p_cublasLtCreate(h); }
LS_HIDDEN cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { return p_cublasLtDestroy(h); }
LS_HIDDEN cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t ct, cudaDataType_t st) {
    return p_cublasLtMatmulDescCreate(d, ct, st);
}
LS_HIDDEN cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                                        const void *v, size_t n) {
    return p_cublasLtMatmulDescSetAttribute(d, a, v, n);
}
LS_HIDDEN cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { return p_cublasLtMatmulDescDestroy(d); }
LS_HIDDEN cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t rows,
                                                    uint64_t cols, int64_t ld) {
    return p_cublasLtMatrixLayoutCreate(l, t, rows, cols, ld);
}
LS_HIDDEN cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    return p_cublasLtMatrixLayoutDestroy(l);
}
LS_HIDDEN cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    return p_cublasLtMatmulPreferenceCreate(p);
}
LS_HIDDEN cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                              cublasLtMatmulPreferenceAttributes_t a, const void *v,
                                                              size_t n) {
    return p_cublasLtMatmulPreferenceSetAttribute(p, a, v, n);
}
LS_HIDDEN cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    return p_cublasLtMatmulPreferenceDestroy(p);
}
LS_HIDDEN cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                                        cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                        cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dl,
                                                        cublasLtMatmulPreference_t p, int req,
                                                        cublasLtMatmulHeuristicResult_t res[], int *n) {
    return p_cublasLtMatmulAlgoGetHeuristic(h, d, a, b, c, dl, p, req, res, n);
}
LS_HIDDEN cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *a,
                                        cublasLtMatrixLayout_t al, const void *b, cublasLtMatrixLayout_t bl,
                                        const void *beta, const void *c, cublasLtMatrixLayout_t cl, void *dd,
                                        cublasLtMatrixLayout_t dl, const cublasLtMatmulAlgo_t *algo, void *ws,
                                        size_t wsn, cudaStream_t s) {
    return p_cublasLtMatmul(h, d, alpha, a, al, b, bl, beta, c, cl, dd, dl, algo, ws, wsn, s);
}
