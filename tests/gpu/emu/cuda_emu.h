/* cuda_emu.h: a CPU emulator for lockstep's CUDA kernels, so their source runs (and is tested
 * against the CPU ops) on a machine without a GPU. Included first in every .cu file that
 * translate.py rewrote for a host C++ compiler. Nothing here is used by the library itself; the
 * real kernels still run only on a GPU (tests/gpu/device-check.sh).
 *
 * What it emulates, and checks:
 *  - a launch runs every block in turn, and each thread of a block as a fiber (ucontext) on its own
 *    stack; threads switch only at __syncthreads() and the warp operations;
 *  - the threads of a block run a warp at a time, from one barrier to the next: a warp's lanes run
 *    until each waits at a warp operation, which then resolves, and on, so no warp waits for
 *    another except at __syncthreads() (shared memory a warp writes after a barrier can be
 *    overwritten by another warp before it is read, unless a barrier separates them);
 *  - __syncthreads() releases when every thread of the block waits there; a thread that returned
 *    while others wait (a divergent barrier, undefined on a GPU) aborts with the kernel's name;
 *  - __shfl_xor_sync and __any_sync with the full mask need all 32 lanes of a full warp there at
 *    once, else they abort (divergence); results are taken from every lane's value at that point;
 *  - the warps, and the lanes within a warp, run in order or in reverse, alternating between the
 *    turns of a block (barrier to barrier) and between blocks; the blocks run in order or in
 *    reverse, alternating between launches. Code that relies on one order without a barrier
 *    shows it (not every such race: the order is one of two, never interleaved within a turn);
 *  - __shared__ variables are static (blocks run one at a time), filled with 0xff bytes when a
 *    block first reaches them (translate.py adds the call), so a read of shared memory no thread
 *    of the block wrote gives NaN or -1, not the previous block's value;
 *  - launch limits: at most 1024 threads a block, grid.x below 2^31, grid.y and grid.z at most
 *    65535, no dynamic shared memory; a bad configuration is reported by cudaGetLastError as on a
 *    GPU.
 * Atomics are plain operations (threads never run at the same time). Arithmetic is the host's:
 * the sources are built with -ffp-contract=off, so no multiply-add is fused, where nvcc fuses
 * them by default, and expf, erff and the like are glibc's, not CUDA's; results can differ from a
 * GPU's in the last bits, as the parity tolerances allow. */
#ifndef LOCKSTEP_CUDA_EMU_H
#define LOCKSTEP_CUDA_EMU_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda_emu_rt.h"

/* The CUDA qualifiers mean nothing on the host. */
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __forceinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __forceinline__ inline
#define __launch_bounds__(...)

namespace emu {

struct thread_state {
    uint3 tid;
};
extern thread_state *current;
extern uint3 block_index;
extern dim3 block_dims, grid_dims;

void sync_threads();
/* translate.py calls this after each __shared__ declaration (see shared_decl in cuda_emu.cc). */
void shared_decl(void *p, size_t n);
/* A warp operation: every lane gives 8 bytes; SHFL returns lane src's, ANY returns whether any
 * lane's value is nonzero. */
enum warp_op { WARP_SHFL, WARP_ANY };
uint64_t warp_exchange(warp_op op, unsigned mask, uint64_t value, int src_lane, const char *what);

/* Runs body once per thread of every block of the grid (see the file comment). */
/* Validates a launch, then runs call once per thread of every block of the grid (see the file
 * comment) when its stream gets to it; takes call. */
void launch(const char *kernel, dim3 grid, dim3 block, size_t shared, cudaStream_t stream, std::function<void()> *call);

/* KERNEL<<<grid, block, shared, stream>>>(args), as translate.py writes it. */
struct config {
    dim3 grid, block;
    size_t shared;
    cudaStream_t stream;
    config(dim3 g, dim3 b, size_t s = 0, cudaStream_t st = 0) : grid(g), block(b), shared(s), stream(st) {}
    template <typename... P, typename... A> void run(const char *name, void (*kernel)(P...), A &&...args) {
        /* the arguments are taken at the launch, converted to the parameter types (a kernel may
         * run later: see EMU_SCHEDULE); each thread gets its own copies of them */
        const std::tuple<std::decay_t<P>...> taken(static_cast<P>(args)...);
        launch(name, grid, block, shared, stream,
               new std::function<void()>([kernel, taken]() { std::apply(kernel, taken); }));
    }
};

template <typename T> T shfl_xor(unsigned mask, T v, int lane_mask, int width) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "__shfl_xor_sync of this type");
    if (width != 32) warp_exchange(WARP_SHFL, 0, 0, -1, "__shfl_xor_sync with a width other than 32");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    const int lane =
        (int)((current->tid.x + current->tid.y * block_dims.x + current->tid.z * block_dims.x * block_dims.y) & 31);
    bits = warp_exchange(WARP_SHFL, mask, bits, lane ^ (lane_mask & 31), "__shfl_xor_sync");
    T r;
    memcpy(&r, &bits, sizeof r);
    return r;
}

} // namespace emu

#define threadIdx (::emu::current->tid)
#define blockIdx (::emu::block_index)
#define blockDim (::emu::block_dims)
#define gridDim (::emu::grid_dims)

inline void __syncthreads() { ::emu::sync_threads(); }
template <typename T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    return ::emu::shfl_xor(mask, v, lane_mask, width);
}
inline int __any_sync(unsigned mask, int pred) {
    return (int)::emu::warp_exchange(::emu::WARP_ANY, mask, pred != 0, -1, "__any_sync");
}
template <typename T> inline T atomicAdd(T *p, T v) {
    T old = *p;
    *p = old + v;
    return old;
}

/* a kernel's attributes, given the kernel (cuda_runtime.h's overload for nvcc) */
template <typename T> inline cudaError_t emu_cudaFuncGetAttributes(struct cudaFuncAttributes *attr, T *entry) {
    return ::emu_cudaFuncGetAttributes(attr, reinterpret_cast<const void *>(entry));
}

/* One IEEE operation each, rounded to nearest even, as on the GPU (where they are never fused). */
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }

#endif
