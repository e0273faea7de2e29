/* cuda_emu.cc: the emulator's scheduler (see cuda_emu.h) and the CUDA runtime calls of the
 * translated backend (cuda_emu_rt.h): "device" memory is host memory, and work on a stream is
 * done as late as CUDA allows (see "streams" below). */
#include "cuda_emu.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <deque>
#include <functional>
#include <memory>
#include <map>
#include <mutex>
#include <vector>

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

/* EMU_TRACE=1: kernel launches and memsets named on stderr, to count a step's without a GPU. */
static bool emu_tracing() {
    static const bool on = getenv("EMU_TRACE") && *getenv("EMU_TRACE") && strcmp(getenv("EMU_TRACE"), "0") != 0;
    return on;
}

namespace emu {

thread_state *current;
uint3 block_index;
std::recursive_mutex big_lock; /* see "streams" */
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

/* A fiber runs thread after thread: once its thread has returned it waits, DONE, until the
 * scheduler gives it the next (the same thread index in a later block or launch), so a stack is
 * started through setcontext, a system call, once in the process and not once per thread. */
NO_ASAN void fiber_main() {
    ASAN_FINISH(NULL, &sched_bottom, &sched_size);
    for (;;) {
        kernel_body(kernel_arg);
        running->state = DONE;
        yield_to_scheduler();
    }
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
        f.state = RUNNING; /* started stays: a started fiber resumes in fiber_main's loop */
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

void stream_submit(cudaStream_t s, std::function<void()> work);

/* Runs a validated launch: every block of the grid. */
void run_grid(const char *kernel, dim3 grid, dim3 block, void (*body)(void *), void *arg) {
    const uint64_t nthreads = (uint64_t)block.x * block.y * block.z;
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

void launch(const char *kernel, dim3 grid, dim3 block, size_t shared, cudaStream_t stream,
            std::function<void()> *call) {
    std::lock_guard<std::recursive_mutex> g(big_lock);
    const uint64_t nthreads = (uint64_t)block.x * block.y * block.z;
    if (nthreads == 0 || nthreads > (uint64_t)MAX_THREADS || block.z > 64 || grid.x == 0 || grid.x > 0x7fffffffu ||
        grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535) {
        last_error = cudaErrorInvalidConfiguration;
        delete call;
        return;
    }
    if (shared != 0) {
        last_error = cudaErrorInvalidValue; /* no kernel of lockstep uses dynamic shared memory */
        delete call;
        return;
    }
    if (emu_tracing())
        fprintf(stderr, "emu: launch %s <<<%u, %u>>>\n", kernel, grid.x * grid.y * grid.z, (unsigned)nthreads);
    std::shared_ptr<std::function<void()>> owned(call);
    stream_submit(stream, [kernel, grid, block, owned]() {
        run_grid(
            kernel, grid, block, [](void *c) { (*static_cast<std::function<void()> *>(c))(); }, owned.get());
    });
}

} // namespace emu

/* ---- streams ----
 * Work on a stream runs in the stream's order, in one of three schedules CUDA allows (chosen by
 * EMU_SCHEDULE=late|lazy|eager, default late), so that code which reads or reuses memory before
 * waiting for the work shows it:
 *  - late: an asynchronous copy or memset is queued on its stream; the queue runs, in order, when
 *    something needs it: the next kernel or library call on that stream (which then runs at
 *    once), cudaStreamSynchronize, a cudaEventSynchronize or cudaEventQuery of an event recorded
 *    on it, a stream that waits for such an event reaching the wait, cudaFree or cudaFreeHost
 *    (which synchronize the device), a copy to pageable memory, or the stream's destruction. A
 *    kernel on another stream that did not wait for the copy's event reads the old bytes;
 *  - lazy: kernels and library calls are queued too (their arguments taken at the call), so the
 *    host runs as far ahead of the "device" as it can: only those waits make work run;
 *  - eager: kernels and library calls are queued; queueing a copy or memset runs its stream's
 *    queue at once (the earlier work, the events it waits for, then the copy): a copy on one
 *    stream that should wait for another stream's kernels reading its destination, and does not,
 *    overwrites it before they read. (A kernel that should wait for a copy on another stream is
 *    what the late and lazy schedules show.)
 * In all three:
 *  - a copy reads pinned host memory (cudaHostAlloc, cudaMallocHost) and device memory when it
 *    runs, and writes pinned host memory then: a host that overwrites a staging buffer before the
 *    copy out of it has run, or reads a result before waiting, sees the wrong bytes, as on a GPU.
 *    A copy from pageable memory takes its bytes at the call (CUDA stages them before returning)
 *    and writes the device when it runs; a copy to pageable memory, and a copy between host
 *    buffers, waits for its stream and is done before returning (as in CUDA);
 *  - cudaStreamWaitEvent queues a wait: when the queue reaches it, the stream the event was
 *    recorded on runs up to the record. An event never recorded is complete.
 * The legacy stream (0) is a stream of its own (lockstep's streams are non-blocking). One lock
 * serializes every call, so several host threads may use the emulator. */
namespace emu {
namespace {

struct queued_op {
    enum kind_t { COPY, MEMSET, RECORD, WAIT, WORK } kind;
    std::function<void()> work; /* WORK: a kernel or a library call */
    void *dst;
    const void *src;         /* COPY: read when run, unless bytes holds them */
    std::vector<char> bytes; /* COPY from pageable memory: the bytes, taken when queued */
    size_t n;
    int value;          /* MEMSET */
    cudaStream_t other; /* WAIT: run other up to target */
    uint64_t target;
};

struct stream_queue {
    std::deque<queued_op> ops;
    uint64_t queued = 0, done = 0; /* ops ever queued, and run */
};

std::map<cudaStream_t, stream_queue> queues;
unsigned long long work_queued, work_done; /* kernels and library calls (emu_work_counts) */
unsigned long long host_drains;            /* host waits that ran the queued work dry (emu_host_drains) */
unsigned long long memsets;                /* cudaMemsetAsync calls (emu_memset_count) */

/* After a host wait: was work queued before it (pending) and none after? */
void note_wait(bool pending) {
    if (pending && work_done == work_queued) host_drains++;
}

/* An event: the stream and the position in its queue of the last record. */
struct emu_event {
    bool recorded;
    cudaStream_t stream;
    uint64_t target;
};

std::map<uintptr_t, size_t> pinned_blocks; /* start -> bytes */
std::map<uintptr_t, size_t> device_blocks;
size_t device_bytes;

bool is_pinned(const void *p, size_t n) {
    uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = pinned_blocks.upper_bound(a);
    if (it == pinned_blocks.begin()) return false;
    --it;
    return a >= it->first && a - it->first + n <= it->second;
}

void run_until(cudaStream_t s, uint64_t target);

void run_op(queued_op &op) {
    switch (op.kind) {
    case queued_op::COPY: memmove(op.dst, op.bytes.empty() ? op.src : op.bytes.data(), op.n); break;
    case queued_op::MEMSET: memset(op.dst, op.value, op.n); break;
    case queued_op::RECORD: break;
    case queued_op::WAIT: run_until(op.other, op.target); break;
    case queued_op::WORK:
        work_done++;
        op.work();
        break;
    }
}

/* Runs stream s's queue until target of its ops have run. */
void run_until(cudaStream_t s, uint64_t target) {
    auto it = queues.find(s);
    if (it == queues.end()) return;
    stream_queue &q = it->second;
    while (q.done < target && !q.ops.empty()) {
        queued_op op = std::move(q.ops.front());
        q.ops.pop_front();
        q.done++;
        run_op(op);
    }
}

void run_all(cudaStream_t s) {
    auto it = queues.find(s);
    if (it != queues.end()) run_until(s, it->second.queued);
}

void run_every_stream() {
    for (auto &e : queues) run_until(e.first, e.second.queued);
}

/* The schedule (EMU_SCHEDULE): which work waits in the queues. */
enum schedule_t { LATE, LAZY, EAGER };

schedule_t schedule() {
    static int chosen = -1;
    if (chosen < 0) {
        const char *e = getenv("EMU_SCHEDULE");
        chosen = !e || !*e || !strcmp(e, "late") ? LATE : !strcmp(e, "lazy") ? LAZY : !strcmp(e, "eager") ? EAGER : 3;
        if (chosen == 3) {
            fprintf(stderr, "cuda_emu: EMU_SCHEDULE='%s': use late, lazy or eager\n", e);
            abort();
        }
    }
    return static_cast<schedule_t>(chosen);
}

void enqueue(cudaStream_t s, queued_op op) {
    const bool transfer = op.kind == queued_op::COPY || op.kind == queued_op::MEMSET;
    stream_queue &q = queues[s];
    q.ops.push_back(std::move(op));
    q.queued++;
    if (transfer && schedule() == EAGER) run_until(s, q.queued); /* a copy as early as its waits allow */
}

} // namespace

/* A kernel or library call on stream s: at once after the stream's queue (late), or queued. */
void stream_submit(cudaStream_t s, std::function<void()> work) {
    std::lock_guard<std::recursive_mutex> g(big_lock);
    work_queued++;
    if (schedule() == LATE) {
        run_all(s);
        work_done++;
        work();
        return;
    }
    queued_op op{};
    op.kind = queued_op::WORK;
    op.work = std::move(work);
    enqueue(s, std::move(op));
}

} // namespace emu

/* ---- the CUDA runtime calls of the translated sources (cuda_emu_rt.h) ---- */
extern "C" {

using emu::big_lock;
using guard = std::lock_guard<std::recursive_mutex>;

void emu_stream_submit(cudaStream_t s, void (*fn)(void *job), void *job) {
    emu::stream_submit(s, [fn, job]() { fn(job); });
}
void emu_lock(void) { big_lock.lock(); }
void emu_unlock(void) { big_lock.unlock(); }

void emu_work_counts(unsigned long long *queued, unsigned long long *done) {
    guard g(big_lock);
    *queued = emu::work_queued;
    *done = emu::work_done;
}

unsigned long long emu_memset_count(void) {
    guard g(big_lock);
    return emu::memsets;
}

unsigned long long emu_host_drains(void) {
    guard g(big_lock);
    return emu::host_drains;
}

void emu_device_synchronize(void) {
    guard g(big_lock);
    emu::run_every_stream();
}

cudaError_t emu_cudaGetLastError(void) {
    guard g(big_lock);
    cudaError_t e = emu::last_error;
    emu::last_error = cudaSuccess;
    return e;
}

cudaError_t emu_cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
    if (!n) return cudaSuccess;
    if (emu_tracing()) fprintf(stderr, "emu: memset %zu bytes\n", n);
    guard g(big_lock);
    emu::memsets++;
    emu::queued_op op{};
    op.kind = emu::queued_op::MEMSET;
    op.dst = p;
    op.n = n;
    op.value = v;
    emu::enqueue(s, std::move(op));
    return cudaSuccess;
}

cudaError_t emu_cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s) {
    if (!n) return cudaSuccess;
    guard g(big_lock);
    const bool to_host = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost;
    const bool from_host = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost;
    if (kind == cudaMemcpyDefault) return cudaErrorInvalidMemcpyDirection; /* lockstep names the direction */
    if (kind == cudaMemcpyHostToHost || (to_host && !emu::is_pinned(dst, n))) {
        /* host to host (synchronous in CUDA), or to pageable memory: done before returning,
         * after the stream's earlier work */
        const bool pending = emu::work_done < emu::work_queued;
        emu::run_all(s);
        emu::note_wait(pending);
        memmove(dst, src, n);
        return cudaSuccess;
    }
    emu::queued_op op{};
    op.kind = emu::queued_op::COPY;
    op.dst = dst;
    op.src = src;
    op.n = n;
    if (from_host && !emu::is_pinned(src, n))
        op.bytes.assign(static_cast<const char *>(src), static_cast<const char *>(src) + n);
    emu::enqueue(s, std::move(op));
    return cudaSuccess;
}

cudaError_t emu_cudaStreamSynchronize(cudaStream_t s) {
    guard g(big_lock);
    const bool pending = emu::work_done < emu::work_queued;
    emu::run_all(s);
    emu::note_wait(pending);
    return cudaSuccess;
}

cudaError_t emu_cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
    (void)flags;
    *e = reinterpret_cast<cudaEvent_t>(new emu::emu_event{false, nullptr, 0});
    return cudaSuccess;
}

cudaError_t emu_cudaEventDestroy(cudaEvent_t e) {
    delete reinterpret_cast<emu::emu_event *>(e);
    return cudaSuccess;
}

cudaError_t emu_cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    guard g(big_lock);
    emu::queued_op op{};
    op.kind = emu::queued_op::RECORD;
    emu::enqueue(s, std::move(op));
    *reinterpret_cast<emu::emu_event *>(e) = emu::emu_event{true, s, emu::queues[s].queued};
    return cudaSuccess;
}

cudaError_t emu_cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
    if (flags != 0) return cudaErrorInvalidValue;
    guard g(big_lock);
    const emu::emu_event *ev = reinterpret_cast<emu::emu_event *>(e);
    if (!ev->recorded) return cudaSuccess;
    emu::queued_op op{};
    op.kind = emu::queued_op::WAIT;
    op.other = ev->stream;
    op.target = ev->target;
    emu::enqueue(s, std::move(op));
    return cudaSuccess;
}

cudaError_t emu_cudaEventSynchronize(cudaEvent_t e) {
    guard g(big_lock);
    const emu::emu_event *ev = reinterpret_cast<emu::emu_event *>(e);
    const bool pending = emu::work_done < emu::work_queued;
    if (ev->recorded) emu::run_until(ev->stream, ev->target);
    emu::note_wait(pending);
    return cudaSuccess;
}

/* Whether the event's point in its stream has run; runs nothing (a query is not a wait). */
cudaError_t emu_cudaEventQuery(cudaEvent_t e) {
    guard g(big_lock);
    const emu::emu_event *ev = reinterpret_cast<emu::emu_event *>(e);
    if (!ev->recorded) return cudaSuccess;
    auto it = emu::queues.find(ev->stream);
    return it == emu::queues.end() || it->second.done >= ev->target ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t emu_cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *) {
    memset(attr, 0, sizeof *attr);
    attr->maxThreadsPerBlock = emu::MAX_THREADS;
    return cudaSuccess;
}

int emu_sm_count = 2;

/* One device, cuda:0, of emu_sm_count SMs and 16 GiB. */
cudaError_t emu_cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }

cudaError_t emu_cudaGetDevice(int *device) {
    *device = 0;
    return cudaSuccess;
}

static const size_t emu_total_mem = (size_t)16 << 30;

cudaError_t emu_cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
    if (device != 0) return cudaErrorInvalidDevice;
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "lockstep's CUDA emulator");
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = emu_sm_count;
    prop->totalGlobalMem = emu_total_mem;
    prop->maxThreadsPerBlock = emu::MAX_THREADS;
    prop->warpSize = 32;
    return cudaSuccess;
}

cudaError_t emu_cudaMemGetInfo(size_t *free_bytes, size_t *total) {
    guard g(big_lock);
    *total = emu_total_mem;
    *free_bytes = emu_total_mem - emu::device_bytes;
    return cudaSuccess;
}

/* A stream is a token never reused (an event may still name a destroyed stream): its number. */
cudaError_t emu_cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    (void)flags;
    guard g(big_lock);
    static uintptr_t streams_made;
    *s = reinterpret_cast<cudaStream_t>(++streams_made);
    return cudaSuccess;
}

cudaError_t emu_cudaStreamDestroy(cudaStream_t s) {
    guard g(big_lock);
    emu::run_all(s); /* CUDA finishes a destroyed stream's work */
    emu::queues.erase(s);
    return cudaSuccess;
}

/* Device and pinned memory: host memory of exactly the size asked, 256-byte aligned as
 * cudaMalloc's (AddressSanitizer sees the first byte past it), within the 16 GiB. */
cudaError_t emu_cudaMalloc(void **p, size_t n) {
    guard g(big_lock);
    *p = NULL;
    if (n > emu_total_mem - emu::device_bytes || posix_memalign(p, 256, n ? n : 1) != 0) {
        *p = NULL;
        return emu::last_error = cudaErrorMemoryAllocation; /* recorded, as CUDA does */
    }
    emu::device_blocks[reinterpret_cast<uintptr_t>(*p)] = n;
    emu::device_bytes += n;
    return cudaSuccess;
}

cudaError_t emu_cudaFree(void *p) {
    if (!p) return cudaSuccess;
    guard g(big_lock);
    auto it = emu::device_blocks.find(reinterpret_cast<uintptr_t>(p));
    if (it == emu::device_blocks.end()) return cudaErrorInvalidValue;
    const bool pending = emu::work_done < emu::work_queued;
    emu::run_every_stream(); /* cudaFree synchronizes the device */
    emu::note_wait(pending);
    emu::device_bytes -= it->second;
    emu::device_blocks.erase(it);
    free(p);
    return cudaSuccess;
}

cudaError_t emu_cudaHostAlloc(void **p, size_t n, unsigned int flags) {
    (void)flags;
    guard g(big_lock);
    *p = NULL;
    if (posix_memalign(p, 256, n ? n : 1) != 0) {
        *p = NULL;
        return emu::last_error = cudaErrorMemoryAllocation;
    }
    emu::pinned_blocks[reinterpret_cast<uintptr_t>(*p)] = n ? n : 1;
    return cudaSuccess;
}

cudaError_t emu_cudaMallocHost(void **p, size_t n) { return emu_cudaHostAlloc(p, n, 0); }

cudaError_t emu_cudaFreeHost(void *p) {
    if (!p) return cudaSuccess;
    guard g(big_lock);
    auto it = emu::pinned_blocks.find(reinterpret_cast<uintptr_t>(p));
    if (it == emu::pinned_blocks.end()) return cudaErrorInvalidValue;
    const bool pending = emu::work_done < emu::work_queued;
    emu::run_every_stream(); /* so does cudaFreeHost */
    emu::note_wait(pending);
    emu::pinned_blocks.erase(it);
    free(p);
    return cudaSuccess;
}

} // extern "C"
