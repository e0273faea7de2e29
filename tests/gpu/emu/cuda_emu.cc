/* cuda_emu.cc: the emulator's scheduler (see cuda_emu.h) and the CUDA runtime calls of the
 * translated backend (cuda_emu_rt.h). "Device" memory is host memory; the stream is ignored
 * (every launch is done when it returns). */
#include "cuda_emu.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
/* AddressSanitizer follows the switches between the threads' stacks (it must know which stack
 * is live to check accesses on it). */
#define ASAN_START(save, bottom, size) __sanitizer_start_switch_fiber(save, bottom, size)
#define ASAN_FINISH(save, bottom, size) __sanitizer_finish_switch_fiber(save, bottom, size)
#define NO_ASAN __attribute__((no_sanitize_address))
#else
#define NO_ASAN
#define ASAN_START(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#define ASAN_FINISH(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#endif

namespace emu {

thread_state *current;
uint3 block_index;
dim3 block_dims, grid_dims;

namespace {

enum fiber_state { RUNNING, AT_BARRIER, AT_WARP, DONE };

/* A thread: started once through its ucontext, switched with __builtin_setjmp/__builtin_longjmp
 * afterwards: no system call on a switch (swapcontext sets the signal mask, and the sanitizer's
 * interceptor of longjmp looks up the signal stack, every time). */
struct fiber {
    thread_state ts;
    ucontext_t ctx;
    void *jb[5];
    void *asan_save; /* AddressSanitizer's fake stack while the thread is switched out */
    bool started;
    fiber_state state;
    warp_op op;
    unsigned mask;
    uint64_t value, result;
    int src_lane;
    const char *what;
};

const size_t STACK_BYTES = 256 * 1024;
const int MAX_THREADS = 1024;

fiber *fibers;  /* MAX_THREADS of them */
char *stacks;   /* MAX_THREADS stacks */
fiber *running; /* the fiber on the CPU, or NULL in the scheduler */
void *sched_jb[5];
void *sched_asan_save;
const void *sched_bottom; /* the scheduler's stack, for AddressSanitizer */
size_t sched_size;
ucontext_t start_template; /* getcontext'ed once */
const char *kernel_name;
void (*kernel_body)(void *);
void *kernel_arg;
cudaError_t last_error = cudaSuccess;
void *shared_seen[64]; /* the __shared__ variables the block has reached */
int n_shared_seen;

[[noreturn]] void die(const char *fmt, const char *a, int b) {
    fprintf(stderr, "cuda_emu: kernel %s, block (%u,%u,%u), thread (%u,%u,%u): ", kernel_name, block_index.x,
            block_index.y, block_index.z, running ? running->ts.tid.x : 0u, running ? running->ts.tid.y : 0u,
            running ? running->ts.tid.z : 0u);
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    abort();
}

/* A function of its own: __builtin_longjmp may not share one with its __builtin_setjmp. The
 * switching functions are not instrumented (NO_ASAN): the sanitizer would unpoison the whole
 * stack before every jump, a system call each time; the switch annotations keep it right. */
NO_ASAN __attribute__((noinline)) void jump_to(void **jb) { __builtin_longjmp(jb, 1); }

NO_ASAN void yield_to_scheduler() {
    fiber *f = running;
    if (!__builtin_setjmp(f->jb)) {
        ASAN_START(&f->asan_save, sched_bottom, sched_size);
        jump_to(sched_jb);
    }
    ASAN_FINISH(f->asan_save, &sched_bottom, &sched_size);
    running = f;
    current = &f->ts;
}

NO_ASAN void fiber_main() {
    ASAN_FINISH(NULL, &sched_bottom, &sched_size);
    kernel_body(kernel_arg);
    running->state = DONE;
    ASAN_START(NULL, sched_bottom, sched_size); /* this stack's thread is over */
    jump_to(sched_jb);
}

void setup() {
    if (fibers) return;
    fibers = static_cast<fiber *>(calloc(MAX_THREADS, sizeof(fiber)));
    void *m = mmap(NULL, STACK_BYTES * MAX_THREADS, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (!fibers || m == MAP_FAILED) {
        fprintf(stderr, "cuda_emu: cannot allocate the thread stacks\n");
        abort();
    }
    stacks = static_cast<char *>(m);
    /* a page at the low end of each stack faults, so an overflow cannot run into the next one */
    for (int i = 0; i < MAX_THREADS; i++) mprotect(stacks + (size_t)i * STACK_BYTES, 4096, PROT_NONE);
    getcontext(&start_template);
}

/* Every thread of a warp waits at a warp operation: check they agree, give each its result. */
void resolve_warp(fiber *w, int lanes) {
    fiber &first = w[0];
    for (int l = 0; l < lanes; l++) {
        running = &w[l];
        if (w[l].state != AT_WARP) die("%s reached by only part of a warp (divergence)%.0d", first.what, 0);
        if (w[l].op != first.op || w[l].what != first.what)
            die("lanes of one warp wait at different warp operations (%s)%.0d", first.what, 0);
        if (w[l].mask != 0xffffffffu) die("%s with a mask other than 0xffffffff (lane %d)", w[l].what, l);
        if (lanes != 32) die("%s with the full mask in a warp of %d threads", w[l].what, lanes);
        if (w[l].src_lane >= lanes && w[l].op == WARP_SHFL)
            die("%s from lane %d, outside the warp", w[l].what, w[l].src_lane);
    }
    running = NULL;
    uint64_t any = 0;
    for (int l = 0; l < lanes; l++) any |= w[l].value;
    for (int l = 0; l < lanes; l++) w[l].result = w[l].op == WARP_ANY ? (any != 0) : w[w[l].src_lane].value;
    for (int l = 0; l < lanes; l++) w[l].state = RUNNING;
}

/* Runs f (thread i of the block) until it waits or returns. A function of its own, so the
 * scheduler's loop variables never live in the frame that _setjmp returns to twice. */
NO_ASAN __attribute__((noinline)) void switch_to(fiber &f, int i) {
    if (__builtin_setjmp(sched_jb)) {
        ASAN_FINISH(sched_asan_save, NULL, NULL);
        return;
    }
    ASAN_START(&sched_asan_save, stacks + (size_t)i * STACK_BYTES, STACK_BYTES);
    if (f.started) jump_to(f.jb);
    f.started = true;
    f.ctx = start_template;
    f.ctx.uc_stack.ss_sp = stacks + (size_t)i * STACK_BYTES;
    f.ctx.uc_stack.ss_size = STACK_BYTES;
    f.ctx.uc_link = NULL;
    makecontext(&f.ctx, fiber_main, 0);
    setcontext(&f.ctx);
}

/* block_parity: 0 or 1, alternating over the blocks of a launch and over launches. */
void run_block(int nthreads, unsigned block_parity) {
    n_shared_seen = 0;
    for (int i = 0; i < nthreads; i++) {
        fiber &f = fibers[i];
        f.ts.tid = make_uint3((unsigned)(i % block_dims.x), (unsigned)(i / block_dims.x % block_dims.y),
                              (unsigned)(i / (block_dims.x * block_dims.y)));
        f.state = RUNNING;
        f.started = false;
        f.asan_save = NULL;
    }
    const int nwarps = (nthreads + 31) / 32;
    for (int round = 0;; round++) {
        const bool fwd = (round + block_parity) % 2 == 0;
        /* a warp at a time, from one barrier to the next (its warp operations resolve as its lanes
         * reach them, so no warp waits for another except at a barrier); the order alternates */
        for (int kw = 0; kw < nwarps; kw++) {
            const int w = fwd ? kw : nwarps - 1 - kw, base = w * 32;
            const int lanes = nthreads - base < 32 ? nthreads - base : 32;
            for (;;) {
                for (int k = 0; k < lanes; k++) {
                    int i = base + (fwd ? k : lanes - 1 - k);
                    fiber &f = fibers[i];
                    if (f.state != RUNNING) continue;
                    running = &f;
                    current = &f.ts;
                    switch_to(f, i);
                    running = NULL;
                }
                int waiting = 0;
                for (int l = 0; l < lanes; l++) waiting += fibers[base + l].state == AT_WARP;
                if (!waiting) break;
                resolve_warp(&fibers[base], lanes);
            }
        }
        int done = 0, at_barrier = 0;
        for (int i = 0; i < nthreads; i++) {
            done += fibers[i].state == DONE;
            at_barrier += fibers[i].state == AT_BARRIER;
        }
        if (done == nthreads) return;
        /* the barrier: every thread must be there */
        if (at_barrier + done != nthreads) die("internal: a thread neither waits nor ran%s%d", "", 0);
        if (done) {
            for (int i = 0; i < nthreads; i++)
                if (fibers[i].state == AT_BARRIER) running = &fibers[i];
            die("__syncthreads() waits for %s%d threads that have returned (a divergent barrier)", "", done);
        }
        for (int i = 0; i < nthreads; i++) fibers[i].state = RUNNING;
    }
}

} // namespace

/* A __shared__ variable is filled with 0xff bytes (NaN for floats, -1 for integers) when the
 * first thread of a block reaches its declaration, as a GPU leaves garbage there. */
void shared_decl(void *p, size_t n) {
    for (int i = 0; i < n_shared_seen; i++)
        if (shared_seen[i] == p) return;
    if (n_shared_seen == 64) die("more than 64 __shared__ variables%s%d", "", 0);
    shared_seen[n_shared_seen++] = p;
    memset(p, 0xff, n);
}

void sync_threads() {
    if (!running) die("__syncthreads() outside a kernel%s%d", "", 0);
    running->state = AT_BARRIER;
    yield_to_scheduler();
}

uint64_t warp_exchange(warp_op op, unsigned mask, uint64_t value, int src_lane, const char *what) {
    if (!running) die("%s outside a kernel%.0d", what, 0);
    if (src_lane < 0 && op == WARP_SHFL) die("%s: not emulated%.0d", what, 0);
    fiber *f = running;
    f->state = AT_WARP;
    f->op = op;
    f->mask = mask;
    f->value = value;
    f->src_lane = src_lane;
    f->what = what;
    yield_to_scheduler();
    return f->result;
}

void launch(const char *kernel, dim3 grid, dim3 block, size_t shared, void (*body)(void *), void *arg) {
    const uint64_t nthreads = (uint64_t)block.x * block.y * block.z;
    if (nthreads == 0 || nthreads > (uint64_t)MAX_THREADS || block.z > 64 || grid.x == 0 || grid.x > 0x7fffffffu ||
        grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535) {
        last_error = cudaErrorInvalidConfiguration;
        return;
    }
    if (shared != 0) {
        last_error = cudaErrorInvalidValue; /* no kernel of lockstep uses dynamic shared memory */
        return;
    }
    setup();
    kernel_name = kernel;
    kernel_body = body;
    kernel_arg = arg;
    grid_dims = grid;
    block_dims = block;
    /* the blocks in order, or in reverse on every other launch; the thread order alternates too */
    static unsigned launches;
    const unsigned launch_parity = launches++ % 2;
    const uint64_t nblocks = (uint64_t)grid.x * grid.y * grid.z;
    for (uint64_t k = 0; k < nblocks; k++) {
        const uint64_t b = launch_parity ? nblocks - 1 - k : k;
        block_index = make_uint3((unsigned)(b % grid.x), (unsigned)(b / grid.x % grid.y),
                                 (unsigned)(b / ((uint64_t)grid.x * grid.y)));
        run_block((int)nthreads, (unsigned)((k + launch_parity) % 2));
    }
    current = NULL;
}

} // namespace emu

/* ---- the CUDA runtime calls of the translated sources (cuda_emu_rt.h) ---- */
extern "C" {

cudaError_t emu_cudaGetLastError(void) {
    cudaError_t e = emu::last_error;
    emu::last_error = cudaSuccess;
    return e;
}

cudaError_t emu_cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t) {
    if (n) memset(p, v, n);
    return cudaSuccess;
}

/* A copy to the host lands there only when the host waits for its stream, as on a GPU, where the
 * host buffer holds its old bytes until the copy has run: the bytes are taken when the copy is
 * enqueued (in stream order) and written at cudaStreamSynchronize. So a missing synchronize shows
 * as stale host data. Other copies are done at once. */
struct pending_copy {
    void *dst;
    void *bytes;
    size_t n;
    cudaStream_t stream;
};
static pending_copy pending[64];
static int n_pending;

cudaError_t emu_cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s) {
    if (!n) return cudaSuccess;
    if (kind != cudaMemcpyDeviceToHost) {
        memmove(dst, src, n);
        return cudaSuccess;
    }
    void *bytes = malloc(n);
    if (!bytes || n_pending == 64) {
        fprintf(stderr, "cuda_emu: more than 64 copies to the host outstanding (no synchronize?)\n");
        abort();
    }
    memcpy(bytes, src, n);
    pending[n_pending++] = pending_copy{dst, bytes, n, s};
    return cudaSuccess;
}

cudaError_t emu_cudaStreamSynchronize(cudaStream_t s) {
    int kept = 0;
    for (int i = 0; i < n_pending; i++) {
        if (pending[i].stream != s) {
            pending[kept++] = pending[i];
            continue;
        }
        memcpy(pending[i].dst, pending[i].bytes, pending[i].n);
        free(pending[i].bytes);
    }
    n_pending = kept;
    return cudaSuccess;
}

cudaError_t emu_cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *) {
    memset(attr, 0, sizeof *attr);
    attr->maxThreadsPerBlock = emu::MAX_THREADS;
    return cudaSuccess;
}

int emu_sm_count = 2;

/* One device, cuda:0, of emu_sm_count SMs. */
cudaError_t emu_cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }

cudaError_t emu_cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
    if (device != 0) return cudaErrorInvalidDevice;
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "lockstep's CUDA emulator");
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = emu_sm_count;
    prop->totalGlobalMem = (size_t)16 << 30;
    prop->maxThreadsPerBlock = emu::MAX_THREADS;
    prop->warpSize = 32;
    return cudaSuccess;
}

/* A stream is a token (work is done when it is enqueued). */
cudaError_t emu_cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    (void)flags;
    *s = static_cast<cudaStream_t>(malloc(1));
    return *s ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t emu_cudaStreamDestroy(cudaStream_t s) {
    free(s);
    return cudaSuccess;
}

/* Device and pinned memory: host memory of exactly the size asked, 256-byte aligned as
 * cudaMalloc's (AddressSanitizer sees the first byte past it). */
cudaError_t emu_cudaMalloc(void **p, size_t n) {
    *p = NULL;
    return posix_memalign(p, 256, n ? n : 1) == 0 ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t emu_cudaFree(void *p) {
    free(p);
    return cudaSuccess;
}

cudaError_t emu_cudaMallocHost(void **p, size_t n) { return emu_cudaMalloc(p, n); }

cudaError_t emu_cudaFreeHost(void *p) {
    free(p);
    return cudaSuccess;
}

} // extern "C"
