/* registry.c: picks and creates the communicator backend. The only file in collectives/ that tests
 * the build flags (LOCKSTEP_HAVE_MPI_BACKEND, LOCKSTEP_HAVE_NCCL_BACKEND, set by CMake on this
 * source alone). Order: explicit name, LOCKSTEP_COMM, then automatic (see comm.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_impl.h"
#include "log.h"

#ifndef LOCKSTEP_HAVE_MPI_BACKEND
#define LOCKSTEP_HAVE_MPI_BACKEND 0
#endif
#ifndef LOCKSTEP_HAVE_NCCL_BACKEND
#define LOCKSTEP_HAVE_NCCL_BACKEND 0
#endif

typedef enum { LS_BACKEND_AUTO, LS_BACKEND_SELF, LS_BACKEND_MPI, LS_BACKEND_NCCL } ls_backend_kind;

static ls_status ls_parse_backend(const char *arg, ls_backend_kind *out, const char **source) {
    const char *name = arg;
    *source = "backend argument";
    if (!name || !*name) {
        name = getenv("LOCKSTEP_COMM");
        *source = "LOCKSTEP_COMM";
    }
    if (!name || !*name || !strcmp(name, "auto"))
        *out = LS_BACKEND_AUTO;
    else if (!strcmp(name, "self"))
        *out = LS_BACKEND_SELF;
    else if (!strcmp(name, "mpi"))
        *out = LS_BACKEND_MPI;
    else if (!strcmp(name, "nccl"))
        *out = LS_BACKEND_NCCL;
    else
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s%s'%s' is not a communicator backend: use self, mpi, nccl or auto",
                        *source, !strcmp(*source, "LOCKSTEP_COMM") ? "=" : " ", name);
    if (*out == LS_BACKEND_MPI && !LOCKSTEP_HAVE_MPI_BACKEND)
        return ls_error(LS_ERR_UNSUPPORTED,
                        "%s asks for the mpi communicator, but this build of lockstep has no MPI "
                        "(configure with -DLOCKSTEP_MPI=ON where MPI is installed)",
                        *source);
    if (*out == LS_BACKEND_NCCL && !LOCKSTEP_HAVE_NCCL_BACKEND)
        return ls_error(LS_ERR_UNSUPPORTED,
                        "%s asks for the nccl communicator, but this build of lockstep has no NCCL "
                        "(configure with CUDA and NCCL; several ranks also need MPI)",
                        *source);
    return LS_OK;
}

static ls_status ls_shell(ls_ctx *ctx, const ls_rank_info *info, ls_comm **out) {
    ls_comm *c = calloc(1, sizeof *c);
    if (!c) return ls_error(LS_ERR_OUT_OF_MEMORY, "communicator: out of host memory");
    c->ctx = ctx;
    c->info = *info;
    c->rank = 0;
    c->world = 1;
    if (ctx) {
        c->env.device = ctx->device;
        c->env.ctx = ctx;
        c->env.dev = ctx->alloc;
        c->env.host = ctx->host ? ctx->host : ctx->alloc;
    } else {
        ls_status s = ls_host_allocator_create(0, &c->own_host);
        if (s != LS_OK) {
            free(c);
            return s;
        }
        c->env.device = ls_device_cpu();
        c->env.dev = c->own_host;
        c->env.host = c->own_host;
    }
    ls_status s = ls_comm_timeout_from_env(&c->env.timeout_s);
    if (s != LS_OK) {
        ls_comm_free_shell(c);
        return s;
    }
    *out = c;
    return LS_OK;
}

#if LOCKSTEP_HAVE_NCCL_BACKEND
/* A self communicator sharing c's environment: the bootstrap of a one-rank NCCL communicator
 * (its unique id needs no exchange), so NCCL works in a build or a job without MPI. */
static ls_status ls_make_self(ls_comm *c, ls_comm **out) {
    ls_comm *b = calloc(1, sizeof *b);
    if (!b) return ls_error(LS_ERR_OUT_OF_MEMORY, "communicator: out of host memory");
    *b = *c;
    b->own_host = NULL;
    b->rank = 0;
    b->world = 1;
    ls_status s = ls_comm_self_create(&b->env, &b->iface, &b->state);
    if (s != LS_OK) {
        free(b);
        return s;
    }
    *out = b;
    return LS_OK;
}
#endif

#if LOCKSTEP_HAVE_MPI_BACKEND
/* An mpi communicator sharing c's environment (no allocator of its own). */
static ls_status ls_make_mpi(ls_comm *c, ls_comm **out) {
    ls_comm *m = calloc(1, sizeof *m);
    if (!m) return ls_error(LS_ERR_OUT_OF_MEMORY, "communicator: out of host memory");
    *m = *c;
    m->own_host = NULL;
    ls_status s = ls_comm_mpi_create(&m->env, &m->iface, &m->state, &m->rank, &m->world);
    if (s != LS_OK) {
        free(m);
        return s;
    }
    /* A launcher that says N ranks while MPI sees another count cannot work. */
    if (strcmp(c->info.launcher, "none") && c->info.world != m->world) {
        s = ls_error(LS_ERR_COMM,
                     "the %s launcher started %d ranks but MPI sees %d (rank %d): this MPI cannot "
                     "bootstrap from %s; launch with mpirun (or srun --mpi=pmix)",
                     c->info.launcher, c->info.world, m->world, m->rank, c->info.launcher);
        ls_comm_destroy(m);
        return s;
    }
    m->info.rank = m->rank;
    m->info.world = m->world;
    *out = m;
    return LS_OK;
}

/* Move backend b's function table and state into the shell c (b's shell is freed). */
static void ls_adopt(ls_comm *c, ls_comm *b) {
    c->iface = b->iface;
    c->state = b->state;
    c->rank = b->rank;
    c->world = b->world;
    c->info = b->info;
    free(b);
}
#endif

ls_status ls_comm_create(ls_ctx *ctx, const char *backend, ls_comm **out) {
    if (!out) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_comm_create: out is NULL");
    *out = NULL;
    ls_backend_kind kind = LS_BACKEND_AUTO;
    const char *source;
    LS_CHECK(ls_parse_backend(backend, &kind, &source));
    ls_rank_info info;
    LS_CHECK(ls_rank_discover(&info));
    const int on_gpu = ctx && ctx->device.type == LS_DEVICE_CUDA;
    const int launched = strcmp(info.launcher, "none") != 0;

    if (kind == LS_BACKEND_SELF && info.world > 1)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "%s asks for the self communicator, but the %s launcher started %d ranks: they "
                        "would train independently; use mpi or nccl",
                        source, info.launcher, info.world);
    if (kind == LS_BACKEND_NCCL && !on_gpu && info.world == 1)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "%s asks for the nccl communicator, but this rank computes on the cpu: nccl "
                        "needs a CUDA context (LOCKSTEP_DEVICE=cuda)",
                        source);
    if (kind == LS_BACKEND_AUTO && !strcmp(info.launcher, "torchrun") && info.world > 1)
        return ls_error(LS_ERR_UNSUPPORTED,
                        "launched by torchrun with WORLD_SIZE=%d, but lockstep's communicators "
                        "bootstrap over MPI: launch with mpirun or srun (lockstep-run does)",
                        info.world);
    if (kind == LS_BACKEND_AUTO) {
        int use_mpi = LOCKSTEP_HAVE_MPI_BACKEND && (info.world > 1 || launched);
#if LOCKSTEP_HAVE_MPI_BACKEND
        if (!use_mpi && ls_comm_mpi_initialized()) use_mpi = 1;
#endif
        if (info.world > 1 && !LOCKSTEP_HAVE_MPI_BACKEND)
            return ls_error(LS_ERR_UNSUPPORTED,
                            "the %s launcher started %d ranks, but this build of lockstep has no MPI "
                            "communicator (configure with -DLOCKSTEP_MPI=ON)",
                            info.launcher, info.world);
        kind = use_mpi ? LS_BACKEND_MPI : LS_BACKEND_SELF;
        if (use_mpi && LOCKSTEP_HAVE_NCCL_BACKEND) kind = LS_BACKEND_AUTO; /* decided below */
    }

    ls_comm *c = NULL;
    LS_CHECK(ls_shell(ctx, &info, &c));
    ls_status s = LS_OK;
    int one_rank_nccl = kind == LS_BACKEND_NCCL && info.world == 1;
    if (one_rank_nccl) {
#if LOCKSTEP_HAVE_NCCL_BACKEND
        ls_comm *b = NULL;
        s = ls_make_self(c, &b);
        if (s != LS_OK) goto fail;
        s = ls_comm_nccl_create(&c->env, b, &c->iface, &c->state);
        if (s != LS_OK) {
            ls_comm_destroy(b);
            goto fail;
        }
#endif
    } else if (kind == LS_BACKEND_SELF) {
        s = ls_comm_self_create(&c->env, &c->iface, &c->state);
        if (s != LS_OK) goto fail;
    } else {
#if LOCKSTEP_HAVE_MPI_BACKEND
        ls_comm *m = NULL;
        s = ls_make_mpi(c, &m);
        if (s != LS_OK) goto fail;
        if (kind == LS_BACKEND_MPI) {
            ls_adopt(c, m);
        } else {
            /* nccl, asked for or automatic: every rank must compute on a GPU. The first rank
             * that does not is found by a min-allreduce so that all ranks agree. */
            int32_t first_cpu = on_gpu ? m->world : m->rank;
            s = ls_comm_allreduce_host(m, &first_cpu, 1, LS_I32, LS_REDUCE_MIN);
            if (s != LS_OK) {
                ls_comm_destroy(m);
                goto fail;
            }
            if (first_cpu < m->world && kind == LS_BACKEND_NCCL) {
                s = ls_error(LS_ERR_INVALID_ARGUMENT,
                             "%s asks for the nccl communicator, but rank %d computes on the cpu: nccl "
                             "needs a CUDA context on every rank",
                             source, (int)first_cpu);
                ls_comm_destroy(m);
                goto fail;
            }
            if (first_cpu < m->world) {
                if (on_gpu) LS_LOG_W("rank %d has no GPU: all ranks communicate over MPI", (int)first_cpu);
                ls_adopt(c, m);
            } else {
#if LOCKSTEP_HAVE_NCCL_BACKEND
                c->rank = m->rank;
                c->world = m->world;
                c->info = m->info;
                s = ls_comm_nccl_create(&c->env, m, &c->iface, &c->state);
                if (s != LS_OK) {
                    ls_comm_destroy(m);
                    goto fail;
                }
#else
                ls_adopt(c, m);
#endif
            }
        }
#else
        s = ls_error(LS_ERR_UNSUPPORTED,
                     "%s asks for the nccl communicator across %d ranks, but this build of lockstep has "
                     "no MPI to bootstrap it (configure with -DLOCKSTEP_MPI=ON where MPI is installed)",
                     source, info.world);
        goto fail;
#endif
    }
    if (ctx) {
        /* NCCL orders its collectives after the compute stream's work (no-op elsewhere) */
        s = ls_comm_set_compute_stream(c, ls_ctx_compute_stream(ctx));
        if (s != LS_OK) goto fail;
    }
    if (c->world > 1) ls_log_set_rank(c->rank);
    LS_LOG_I("communicator: %s, rank %d of %d (launcher %s, local rank %d of %d)", c->iface->name, c->rank, c->world,
             c->info.launcher, c->info.local_rank, c->info.local_world);
    *out = c;
    return LS_OK;
fail:
    ls_comm_free_shell(c);
    return s;
}
