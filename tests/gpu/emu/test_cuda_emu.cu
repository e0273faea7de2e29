/* test_cuda_emu.cu: the kernel emulator (cuda_emu.h) itself, on kernels written for it here (CUDA
 * source, translated by translate.py like the backend's). Checks what the parity tests rely on:
 *  - launches: every block and thread once, 1-D and 2-D blocks and grids, the indices right;
 *  - __syncthreads, __shfl_xor_sync and __any_sync give the GPU's results: every lane of a single
 *    shuffle in a 3-D block, __any_sync per warp, a block reduction;
 *  - a missing barrier shows (a wrong result), the same kernel with it is right: a value one
 *    thread publishes, a shared slot another warp reuses after a shuffle;
 *  - shared memory holds garbage (0xff bytes) in every block, not the previous block's values;
 *  - what is undefined on a GPU aborts with the kernel named: a barrier some threads returned
 *    before, a shuffle in a divergent branch, a full-mask shuffle in a partial warp;
 *  - a bad launch configuration is cudaErrorInvalidConfiguration from cudaGetLastError, once;
 *  - streams: a copy from pinned memory reads it when its stream's queue runs, one from pageable
 *    memory when it is called; a kernel on another stream reads the old bytes unless its stream
 *    waited for an event recorded after the copy; cudaEventSynchronize runs a queue up to the
 *    record and no further; a copy to pinned memory lands at the synchronize, one to pageable
 *    memory before the call returns;
 *  - with EMU_SCHEDULE=lazy or eager, what those schedules change (see other_schedule).
 * Each abort is checked in a child process (its exit by SIGABRT and its message). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures;
#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            failures++;                                                                                                \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                            \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fputc('\n', stderr);                                                                                       \
        }                                                                                                              \
    } while (0)

/* out[0] = in[0] (one thread) */
__global__ void read_kernel(int *out, const int *in) { out[0] = in[0]; }

/* out[linear thread id over the grid] = 1 + block linear index, counted once per visit */
__global__ void visit_kernel(int *out) {
    const int tpb = blockDim.x * blockDim.y;
    const int block = blockIdx.y * gridDim.x + blockIdx.x;
    const int t = threadIdx.y * blockDim.x + threadIdx.x;
    out[block * tpb + t] += 1 + block;
}

/* out[blockIdx.x] = sum of (global thread id + 1) over the block: warps by shuffles, then the
 * warps' sums through shared memory after a barrier; any[blockIdx.x] = whether a lane saw 7. */
__global__ void block_sum_kernel(long long *out, int *any) {
    __shared__ long long sh[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x + 1;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int seen = __any_sync(0xffffffffu, threadIdx.x == 7);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        long long s = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) s += sh[w];
        out[blockIdx.x] = s;
        any[blockIdx.x] = seen;
    }
}

/* Thread 0 publishes a value every thread of the block copies: with or without the barrier
 * between (without it, threads that run before thread 0 read shared memory's garbage). */
template <bool BARRIER> __global__ void publish_kernel(int *out) {
    __shared__ int value;
    if (threadIdx.x == 0) value = 100 + blockIdx.x;
    if (BARRIER) __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = value;
}

/* out[t] = the value of lane (lane ^ m) of t's warp, in a 16 x 4 x 2 block (warps span rows) */
__global__ void shfl_kernel(int *out, int m) {
    const int t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    out[t] = __shfl_xor_sync(0xffffffffu, 1000 + t, m);
}

/* out[t] = __any_sync over t's warp of (t == hit) */
__global__ void any_kernel(int *out, int hit) { out[threadIdx.x] = __any_sync(0xffffffffu, (int)threadIdx.x == hit); }

/* Thread 0 sums the warps' partial sums from shared memory; then every warp reuses its slot after
 * a shuffle. Without the second barrier a warp can overwrite its slot before thread 0 read it. */
template <bool BARRIER> __global__ void reuse_kernel(int *out) {
    __shared__ int sh[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int v = 1;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    int total = 0;
    if (threadIdx.x == 0)
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) total += sh[w];
    if (BARRIER) __syncthreads();
    int u = __shfl_xor_sync(0xffffffffu, warp, 1);
    if (lane == 0) sh[warp] = -1000 - u;
    if (threadIdx.x == 0) out[blockIdx.x] = total;
}

/* Block 0 writes shared memory; every block reads it: block 1 must not see block 0's values. */
__global__ void stale_kernel(int *out) {
    __shared__ int sh[64];
    if (blockIdx.x == 0) sh[threadIdx.x] = 7;
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = sh[threadIdx.x];
}

__global__ void divergent_barrier_kernel(int *out) {
    if (threadIdx.x < 16) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}

__global__ void divergent_shuffle_kernel(int *out) {
    int v = threadIdx.x;
    if (threadIdx.x % 32 < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
    out[threadIdx.x] = v;
}

__global__ void partial_warp_kernel(int *out) {
    int v = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
    out[threadIdx.x] = v;
}

/* Runs launch(kind) in a child; the child must abort, saying what (needle) about which kernel. */
static void expect_abort(int kind, const char *kernel, const char *needle);

static void launch_bad(int kind) {
    static int out[64];
    if (kind == 0) divergent_barrier_kernel<<<1, 64>>>(out);
    if (kind == 1) divergent_shuffle_kernel<<<1, 64>>>(out);
    if (kind == 2) partial_warp_kernel<<<1, 48>>>(out);
}

static void expect_abort(int kind, const char *kernel, const char *needle) {
    int fd[2];
    if (pipe(fd) != 0) abort();
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        launch_bad(kind);
        _exit(0);
    }
    close(fd[1]);
    char msg[2048] = "";
    size_t n = 0;
    ssize_t r;
    while (n + 1 < sizeof msg && (r = read(fd[0], msg + n, sizeof msg - 1 - n)) > 0) n += (size_t)r;
    msg[n] = '\0';
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "%s: the child exited with status %d, output: %s", kernel,
          status, msg);
    CHECK(strstr(msg, kernel) != NULL, "the message does not name %s: %s", kernel, msg);
    CHECK(strstr(msg, needle) != NULL, "the message lacks \"%s\": %s", needle, msg);
    printf("ok   %s aborts: %s", kernel, msg);
}

/* out[0] = v (one thread): v is taken at the launch */
__global__ void write_kernel(int *out, int v) { out[0] = v; }

/* A library call's work (emu_stream_submit, as the cuBLAS and cuDNN stand-ins queue theirs). */
static void set_job(void *job) { *(int *)job = 11; }

/* EMU_SCHEDULE=lazy or eager (the other schedules, cuda_emu.cc): what differs from the late one.
 * Both: a kernel's arguments are taken at the launch, a bad configuration is reported at the
 * launch, kernels and library calls wait in their stream's queue. Lazy: a copy waits too, and a
 * stream waiting for another's event runs that one's queue up to the record. Eager: a copy runs
 * at once, with its stream's earlier work, and overwrites what a kernel queued on another stream
 * (that it did not wait for) has yet to read. */
static int other_schedule(const char *sch) {
    const int lazy = !strcmp(sch, "lazy");
    cudaStream_t st, other;
    cudaEvent_t ev;
    int *pin = NULL, *dev = NULL;
    static int seen[4], job;
    CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) == cudaSuccess &&
              cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking) == cudaSuccess &&
              cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess &&
              cudaMallocHost((void **)&pin, sizeof(int)) == cudaSuccess &&
              cudaMalloc((void **)&dev, sizeof(int)) == cudaSuccess,
          "streams, an event and memory");
    int v = 5;
    write_kernel<<<1, 1, 0, st>>>(&seen[1], v);
    v = 6; /* after the launch: the kernel has its 5 */
    emu_stream_submit(st, set_job, &job);
    CHECK(seen[1] == 0 && job == 0, "%s: a kernel (%d) or a library call (%d) ran when called", sch, seen[1], job);
    write_kernel<<<1, 2048, 0, st>>>(&seen[1], v);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "%s: a bad configuration was not reported at once", sch);
    *dev = 4;
    read_kernel<<<1, 1, 0, st>>>(&seen[0], dev);
    *pin = 7;
    cudaMemcpyAsync(dev, pin, sizeof(int), cudaMemcpyHostToDevice, st);
    CHECK(lazy ? *dev == 4 && seen[0] == 0 && job == 0 : *dev == 7 && seen[0] == 4 && job == 11,
          "%s: after a copy was queued behind them, the kernel read %d, the library call gave %d, the copy %d", sch,
          seen[0], job, *dev);
    cudaStreamSynchronize(st);
    CHECK(*dev == 7 && seen[0] == 4 && seen[1] == 5 && job == 11,
          "%s: after the synchronize, the kernels gave %d and %d (want 4 and 5), the library call %d, the copy %d", sch,
          seen[0], seen[1], job, *dev);
    /* another stream: a kernel queued on st reads dev; other then copies into dev */
    read_kernel<<<1, 1, 0, st>>>(&seen[2], dev);
    cudaEventRecord(ev, st);
    *pin = 8;
    cudaMemcpyAsync(dev, pin, sizeof(int), cudaMemcpyHostToDevice, other); /* no wait for ev */
    cudaStreamSynchronize(other); /* lazy: the copy runs here, before the kernel (late: the kernel ran first) */
    cudaStreamSynchronize(st);
    CHECK(seen[2] == 8, "%s: a kernel queued before a copy on another stream that did not wait read %d, not 8", sch,
          seen[2]);
    read_kernel<<<1, 1, 0, st>>>(&seen[3], dev);
    cudaEventRecord(ev, st);
    *pin = 9;
    cudaStreamWaitEvent(other, ev, 0);
    cudaMemcpyAsync(dev, pin, sizeof(int), cudaMemcpyHostToDevice, other);
    CHECK(lazy ? seen[3] == 0 : seen[3] == 8, "%s: with the wait, the kernel read %d before the copy ran", sch,
          seen[3]);
    cudaStreamSynchronize(other);
    CHECK(seen[3] == 8 && *dev == 9, "%s: with the wait, the kernel read %d (want 8), the copy gave %d", sch, seen[3],
          *dev);
    cudaEventDestroy(ev);
    cudaStreamDestroy(st);
    cudaStreamDestroy(other);
    cudaFree(dev);
    cudaFreeHost(pin);
    if (failures) {
        printf("FAILED (%d)\n", failures);
        return 1;
    }
    printf("ok   %s schedule: kernels and library calls queued, copies %s\n", sch,
           lazy ? "too" : "run at once with their stream's earlier work");
    return 0;
}

int main(void) {
    const char *sch = getenv("EMU_SCHEDULE");
    if (sch && (!strcmp(sch, "lazy") || !strcmp(sch, "eager"))) return other_schedule(sch);
    /* every thread once: 1-D, and 2-D blocks in a 2-D grid */
    static int visits[3 * 2 * 32 * 8];
    visit_kernel<<<dim3(3, 2), dim3(32, 8)>>>(visits);
    CHECK(cudaGetLastError() == cudaSuccess, "visit launch");
    int bad = 0;
    for (int i = 0; i < 3 * 2 * 256; i++) bad += visits[i] != 1 + i / 256;
    CHECK(bad == 0, "%d threads of the 2-D launch were not visited exactly once with their indices", bad);
    printf("ok   a 3x2 grid of 32x8 blocks: every thread once, with its indices\n");

    /* a block reduction: shuffles, __any_sync, shared memory and a barrier */
    long long sums[5];
    int any[5];
    block_sum_kernel<<<5, 256>>>(sums, any);
    for (int b = 0; b < 5; b++) {
        long long lo = (long long)b * 256, want = (lo + 256) * (lo + 257) / 2 - lo * (lo + 1) / 2;
        CHECK(sums[b] == want, "block %d sums to %lld, not %lld", b, sums[b], want);
        CHECK(any[b] == 1, "block %d: __any_sync gave %d", b, any[b]);
    }
    printf("ok   block reduction over 5 blocks of 256: shuffles, __any_sync, a barrier\n");

    /* a single shuffle, every lane of every warp of a 3-D block */
    for (int m = 1; m < 32; m += 5) {
        static int got[128];
        shfl_kernel<<<1, dim3(16, 4, 2)>>>(got, m);
        int wrong_lanes = 0;
        for (int t = 0; t < 128; t++) wrong_lanes += got[t] != 1000 + ((t & ~31) | ((t & 31) ^ m));
        CHECK(wrong_lanes == 0, "__shfl_xor_sync(.., %d): %d of 128 lanes got another lane's value", m, wrong_lanes);
    }
    printf("ok   __shfl_xor_sync in a 16x4x2 block: every lane gets lane ^ m of its warp\n");
    static int anyv[96];
    any_kernel<<<1, 96>>>(anyv, 40);
    int wrong_any = 0;
    for (int t = 0; t < 96; t++) wrong_any += anyv[t] != (t / 32 == 1);
    CHECK(wrong_any == 0, "__any_sync: %d of 96 lanes wrong (only warp 1 holds the predicate)", wrong_any);
    printf("ok   __any_sync: true in the warp that holds the predicate only\n");

    /* a barrier missing between a read of shared memory and another warp's write after a shuffle */
    static int reuse[2][4];
    reuse_kernel<false><<<4, 64>>>(reuse[0]);
    reuse_kernel<true><<<4, 64>>>(reuse[1]);
    int wrong_reuse[2] = {0, 0};
    for (int k = 0; k < 2; k++)
        for (int b = 0; b < 4; b++) wrong_reuse[k] += reuse[k][b] != 64;
    CHECK(wrong_reuse[0] > 0, "a slot overwritten by another warp before it was read went unseen");
    CHECK(wrong_reuse[1] == 0, "%d blocks wrong with the barrier", wrong_reuse[1]);
    printf("ok   without its second barrier %d of 4 blocks read a slot another warp overwrote; with it, none\n",
           wrong_reuse[0]);

    /* shared memory starts as garbage in every block, not as the last block left it */
    static int stale[3 * 64];
    stale_kernel<<<3, 64>>>(stale);
    int wrong_stale = 0;
    for (int i = 0; i < 3 * 64; i++) wrong_stale += stale[i] != (i < 64 ? 7 : -1);
    CHECK(wrong_stale == 0, "%d threads read shared memory another block wrote (or not the poison)", wrong_stale);
    printf("ok   shared memory another block wrote reads as the 0xff poison\n");

    /* a missing barrier shows; with the barrier the result is right */
    static int pub[2][4 * 64];
    publish_kernel<false><<<4, 64>>>(pub[0]);
    publish_kernel<true><<<4, 64>>>(pub[1]);
    int wrong[2] = {0, 0};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 4 * 64; i++) wrong[k] += pub[k][i] != 100 + i / 64;
    CHECK(wrong[0] > 0, "the kernel without its barrier gave the right result: the emulator hides the race");
    CHECK(wrong[1] == 0, "%d threads read a wrong value with the barrier", wrong[1]);
    printf("ok   without its barrier %d of 256 threads read a stale value; with it, none\n", wrong[0]);

    /* a bad configuration: reported once */
    static int out[8];
    visit_kernel<<<1, 2048>>>(out);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "2048 threads a block were accepted");
    CHECK(cudaGetLastError() == cudaSuccess, "the launch error stayed after it was read");
    visit_kernel<<<dim3(1, 70000), 32>>>(out);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "a grid.y of 70000 was accepted");
    printf("ok   1x2048 threads and a grid.y of 70000: cudaErrorInvalidConfiguration, once\n");

    /* streams: work is done as late as CUDA allows ("device" memory is host memory, read here
     * directly to see when) */
    cudaStream_t sa, sb;
    cudaEvent_t ev;
    int *pin = NULL, *dev = NULL, pageable[4] = {0, 0, 0, 0};
    static int seen[2];
    CHECK(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking) == cudaSuccess &&
              cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking) == cudaSuccess &&
              cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess &&
              cudaMallocHost((void **)&pin, 4 * sizeof(int)) == cudaSuccess &&
              cudaMalloc((void **)&dev, 4 * sizeof(int)) == cudaSuccess,
          "streams, an event and memory");
    memset(dev, 0, 4 * sizeof(int));
    pin[0] = 1;
    cudaMemcpyAsync(dev, pin, sizeof(int), cudaMemcpyHostToDevice, sa);
    pin[0] = 2; /* before the copy ran: it reads this */
    CHECK(dev[0] == 0, "a queued copy ran before its stream was waited for");
    cudaStreamSynchronize(sa);
    CHECK(dev[0] == 2, "a copy from pinned memory read it when called (%d), not when it ran", dev[0]);
    pageable[0] = 3;
    cudaMemcpyAsync(dev, pageable, sizeof(int), cudaMemcpyHostToDevice, sa);
    pageable[0] = 4; /* CUDA has taken the bytes already */
    cudaStreamSynchronize(sa);
    CHECK(dev[0] == 3, "a copy from pageable memory gave %d, not the bytes at the call", dev[0]);
    pin[0] = 5;
    cudaMemcpyAsync(dev, pin, sizeof(int), cudaMemcpyHostToDevice, sa);
    cudaEventRecord(ev, sa);
    read_kernel<<<1, 1, 0, sb>>>(&seen[0], dev); /* no wait: the old bytes */
    cudaStreamWaitEvent(sb, ev, 0);
    read_kernel<<<1, 1, 0, sb>>>(&seen[1], dev);
    CHECK(seen[0] == 3 && seen[1] == 5,
          "a kernel on another stream read %d without the event wait (want 3) and %d "
          "with it (want 5)",
          seen[0], seen[1]);
    pin[1] = 6;
    cudaMemcpyAsync(dev + 1, pin + 1, sizeof(int), cudaMemcpyHostToDevice, sa);
    cudaEventRecord(ev, sa);
    cudaMemsetAsync(dev + 2, 0xff, sizeof(int), sa);
    cudaEventSynchronize(ev);
    CHECK(dev[1] == 6 && dev[2] == 0,
          "cudaEventSynchronize: the copy before the record gave %d (want 6), the "
          "memset after it %d (want 0: not run yet)",
          dev[1], dev[2]);
    cudaStreamSynchronize(sa);
    CHECK(dev[2] == -1, "the memset did not run at the synchronize");
    dev[3] = 9;
    pin[3] = 0;
    cudaMemcpyAsync(pin + 3, dev + 3, sizeof(int), cudaMemcpyDeviceToHost, sa);
    CHECK(pin[3] == 0, "a copy to pinned memory landed before the synchronize");
    cudaStreamSynchronize(sa);
    CHECK(pin[3] == 9, "a copy to pinned memory did not land at the synchronize");
    cudaMemcpyAsync(pageable + 3, dev + 3, sizeof(int), cudaMemcpyDeviceToHost, sa);
    CHECK(pageable[3] == 9, "a copy to pageable memory had not landed when the call returned");
    cudaEventDestroy(ev);
    cudaStreamDestroy(sa);
    cudaStreamDestroy(sb);
    cudaFree(dev);
    cudaFreeHost(pin);
    printf("ok   streams: copies run as late as CUDA allows, a kernel without the event wait reads the old bytes\n");

    /* undefined on a GPU: aborts naming the kernel */
    expect_abort(0, "divergent_barrier_kernel", "threads that have returned");
    expect_abort(1, "divergent_shuffle_kernel", "only part of a warp");
    expect_abort(2, "partial_warp_kernel", "in a warp of 16 threads");

    printf(failures ? "FAILED (%d)\n" : "ok\n", failures);
    return failures ? 1 : 0;
}
