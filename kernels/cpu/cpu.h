/* cpu.h (internal): pieces of the CPU backend shared between its files, and the scalar
 * f16/bf16 conversions that the CUDA backend's tests use as the reference. */
#ifndef LOCKSTEP_CPU_H
#define LOCKSTEP_CPU_H

#include <stdint.h>

#include "ops.h"

/* LS_ERR_UNSUPPORTED: "the CPU backend's OP does not compute in T (use SUPPORTED)". */
ls_status ls_cpu_bad_dtype(const char *op, ls_dtype t, const char *supported);
ls_status ls_cpu_convert(int64_t n, ls_dtype src_t, const void *src, ls_dtype dst_t, void *dst);
uint16_t ls_f32_to_f16(float f);
float ls_f16_to_f32(uint16_t h);
uint16_t ls_f32_to_bf16(float f);
float ls_bf16_to_f32(uint16_t h);

#endif
