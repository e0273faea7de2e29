/* test_ckpt_async.c: asynchronous checkpoint saves (ls_ckpt_save_async, ls_ckpt_async_wait).
 *  - the files are the synchronous save's, byte for byte (model, optimizer, EMA, state.json,
 *    manifest), though the model, optimizer and EMA change as soon as the call returns (training
 *    goes on): the write is from the snapshot; under mpirun also with a sharded optimizer, whose
 *    states travel from their owners into rank 0's snapshot;
 *  - the wait reports the step, the directory and the times; with nothing in flight, step -1;
 *  - back-to-back saves: each waits for the one before; --keep-last prunes, latest names the last;
 *  - a directory rank 0 cannot write: the snapshot succeeds, the wait fails on every rank naming the
 *    path (the others "(on rank 0)"), and the saver works again afterwards; an EMA of another model
 *    is refused at once, on every rank, with nothing in flight;
 *  - the disk refusing a write midway (RLIMIT_FSIZE): the wait fails naming the file, no step-N nor
 *    step-N.tmp is left, the checkpoint before stays the newest;
 *  - a process killed in the middle of the background write (LOCKSTEP_CKPT_CRASH_AT=mid-write)
 *    while it trains on: the previous checkpoint stays the newest and loads;
 *  - ls_ckpt_async_destroy completes a save in flight;
 *  - savers made, used (saves written, a save that fails, a resume) and destroyed again and again
 *    leave the process's file descriptors and threads as they were (a run saves for days);
 *  - the timeline: the write is a span of its own thread ("checkpoint writer"), after the
 *    snapshot's span on the training thread.
 * Args: [cpu|cuda] (the emulated GPU in test_emu_ckpt_async: the snapshot is copied from the
 * device). Run alone or under mpirun. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../e2e/mlp_run.h"
#include "checkpoint.h"
#include "ckpt_test.h"
#include "ema.h"
#include "timeline.h"

static ls_ctx *ctx;
static ls_comm *comm;
static int rank, world;
static ls_device dev;
static char root[64];

typedef struct run {
    ls_module *m;
    ls_optimizer *o;
    ls_ema *e;
} run;

/* Every tensor of r (those of the optimizer it holds) given the salt's contents. */
static void refill(run *r, int salt) {
    int np = ls_module_num_params(r->m);
    for (int i = 0; i < np; i++) {
        ckpt_test_fill(ctx, ls_module_param(r->m, i), salt + i);
        for (int k = 0; k < 2; k++)
            if (ls_optimizer_state(r->o, i, k))
                ckpt_test_fill(ctx, ls_optimizer_state(r->o, i, k), salt + 50 * (k + 1) + i);
    }
    for (int i = 0; r->e && i < ls_ema_num_tensors(r->e); i++)
        ckpt_test_fill(ctx, ls_ema_tensor(r->e, i), salt + 90 + i);
    ls_optimizer_set_num_steps(r->o, 100 + salt);
}

/* An MLP of the hidden width with AdamW (sharded over the ranks when shard) and an EMA. */
static run make(int64_t hidden, int salt, int shard) {
    run r;
    int64_t sizes[4] = {64, hidden, 32, 10};
    LS_REQUIRE_OK(ls_mlp_create(ctx, LS_F32, 4, sizes, LS_ACT_RELU, 1, &r.m));
    int np = ls_module_num_params(r.m);
    ls_tensor *p[8], *g[8];
    for (int i = 0; i < np; i++) {
        p[i] = ls_module_param(r.m, i);
        g[i] = ls_module_grad(r.m, i);
    }
    ls_optim_config c = ls_optim_defaults(LS_OPTIM_ADAMW);
    LS_REQUIRE_OK(ls_optimizer_create(ctx, np, p, g, &c, &r.o));
    LS_REQUIRE_OK(ls_ema_create(ctx, r.m, 0.99, 0, &r.e));
    refill(&r, salt); /* every state, then the shares: the sharded optimizer is the unsharded one split */
    if (shard) LS_REQUIRE_OK(ls_optimizer_shard(r.o, rank, world));
    return r;
}

static void drop(run *r) {
    ls_ema_destroy(r->e);
    ls_optimizer_destroy(r->o);
    ls_module_destroy(r->m);
}

/* Rank 0: every file of dir_a/step-S equals dir_b/step-S's, byte for byte. */
static void expect_same_files(const char *dir_a, const char *dir_b, int64_t step, const char *what) {
    static const char *const files[] = {"model.safetensors", "optimizer.safetensors", "ema.safetensors", "state.json",
                                        "manifest.json"};
    if (rank != 0) return;
    for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
        char p[256], q[256];
        size_t n = 0, m = 0;
        snprintf(p, sizeof p, "%s/step-%08lld/%s", dir_a, (long long)step, files[k]);
        snprintf(q, sizeof q, "%s/step-%08lld/%s", dir_b, (long long)step, files[k]);
        unsigned char *a = ckpt_test_slurp(p, &n), *b = ckpt_test_slurp(q, &m);
        if (!a || !b || n != m || memcmp(a, b, n) != 0) {
            fprintf(stderr, "%s: %s differs from %s\n", what, p, q);
            ls_test_failures++;
        }
        free(a);
        free(b);
    }
}

static int exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* The asynchronous save writes the synchronous save's files, from the snapshot it took: the
 * tensors change right after the call. shard: the optimizer split over the ranks, against the
 * unsharded synchronous save. */
static void test_same_files(int shard) {
    char sync_dir[128], async_dir[128], want[256];
    snprintf(sync_dir, sizeof sync_dir, "%s/sync%d", root, shard);
    snprintf(async_dir, sizeof async_dir, "%s/async%d", root, shard);
    run full = make(300, 1, 0), r = make(300, 1, shard);
    ls_ckpt_state st = ckpt_test_state(7, world);
    LS_REQUIRE_OK(ls_ckpt_save_ema(comm, ctx, sync_dir, 0, full.m, full.o, full.e, &st, NULL, 0));

    ls_ckpt_async *sv;
    LS_REQUIRE_OK(ls_ckpt_async_create(&sv));
    LS_REQUIRE_OK(ls_ckpt_save_async(sv, comm, ctx, async_dir, 0, r.m, r.o, r.e, &st));
    refill(&r, 40 + rank); /* training goes on */
    ls_ckpt_saved d;
    LS_REQUIRE_OK(ls_ckpt_async_wait(sv, comm, &d));
    snprintf(want, sizeof want, "%s/step-00000007", async_dir);
    LS_EXPECT(d.step == 7 && strcmp(d.path, want) == 0);
    LS_EXPECT(d.snapshot_s > 0 && d.write_s > 0 && d.wait_s >= 0);
    expect_same_files(sync_dir, async_dir, 7, shard ? "a sharded asynchronous save" : "an asynchronous save");
    /* nothing in flight */
    LS_REQUIRE_OK(ls_ckpt_async_wait(sv, comm, &d));
    LS_EXPECT(d.step == -1 && d.path[0] == 0);

    /* loads back as the tensors were when the save was called */
    run back = make(300, 5, shard);
    ls_ckpt_state got;
    int found = 0;
    LS_REQUIRE_OK(ls_ckpt_load_ema(comm, ctx, async_dir, "auto", back.m, back.o, back.e, &got, &found, NULL, 0));
    LS_EXPECT(found && got.step == 7);
    char p[256];
    snprintf(p, sizeof p, "%s/again", root);
    LS_REQUIRE_OK(ls_ckpt_save_async(sv, comm, ctx, p, 0, back.m, back.o, back.e, &st));
    LS_REQUIRE_OK(ls_ckpt_async_wait(sv, comm, NULL));
    expect_same_files(sync_dir, p, 7, "the loaded checkpoint saved again");
    ls_ckpt_async_destroy(sv);
    drop(&back);
    drop(&r);
    drop(&full);
}

/* Saves back to back without a wait between: each waits for the one before; --keep-last 2. */
static void test_back_to_back(void) {
    char dir[128], p[256];
    snprintf(dir, sizeof dir, "%s/b2b", root);
    run r = make(100, 3, 0);
    ls_ckpt_async *sv;
    LS_REQUIRE_OK(ls_ckpt_async_create(&sv));
    for (int64_t step = 1; step <= 3; step++) {
        ls_ckpt_state st = ckpt_test_state(step, world);
        LS_REQUIRE_OK(ls_ckpt_save_async(sv, comm, ctx, dir, 2, r.m, r.o, r.e, &st));
        refill(&r, 3 + (int)step);
    }
    ls_ckpt_saved d;
    LS_REQUIRE_OK(ls_ckpt_async_wait(sv, comm, &d));
    LS_EXPECT(d.step == 3);
    if (rank == 0) {
        snprintf(p, sizeof p, "%s/step-00000001", dir);
        LS_EXPECT(!exists(p));
        for (int64_t step = 2; step <= 3; step++) {
            int64_t got = -1;
            snprintf(p, sizeof p, "%s/step-%08lld", dir, (long long)step);
            LS_EXPECT(ls_ckpt_verify(p, &got) == LS_OK);
            LS_EXPECT(got == step);
        }
        size_t n = 0;
        snprintf(p, sizeof p, "%s/latest", dir);
        unsigned char *t = ckpt_test_slurp(p, &n);
        LS_EXPECT(t && strcmp((char *)t, "step-00000003\n") == 0);
        free(t);
    }
    ls_ckpt_async_destroy(sv);
    drop(&r);
}

/* Errors: of the write, at the wait, on every rank; of the snapshot, at once. */
static void test_errors(void) {
    char file[128], dir[160], good[128];
    snprintf(file, sizeof file, "%s/a-file", root);
    snprintf(dir, sizeof dir, "%s/sub", file);
    snprintf(good, sizeof good, "%s/good", root);
    if (rank == 0) {
        FILE *f = fopen(file, "w");
        LS_REQUIRE(f && fclose(f) == 0);
    }
    run r = make(100, 2, 0), other = make(120, 2, 0);
    ls_ckpt_async *sv;
    LS_REQUIRE_OK(ls_ckpt_async_create(&sv));
    ls_ckpt_state st = ckpt_test_state(4, world);
    LS_REQUIRE_OK(ls_ckpt_save_async(sv, comm, ctx, dir, 0, r.m, r.o, r.e, &st));
    ls_ckpt_saved d;
    ls_status s = ls_ckpt_async_wait(sv, comm, &d);
    LS_EXPECT(s == LS_ERR_IO && d.step == -1);
    LS_EXPECT(strstr(ls_last_error(), "the checkpoint of step 4, written in the background: ") &&
              strstr(ls_last_error(), file) && (rank == 0 || strstr(ls_last_error(), "(on rank 0)")));
    LS_EXPECT(ls_ckpt_async_wait(sv, comm, &d) == LS_OK); /* reported once */
    LS_EXPECT(d.step == -1);
    /* an EMA of another model: refused before anything is written, on every rank */
    LS_EXPECT_ERR(ls_ckpt_save_async(sv, comm, ctx, good, 0, r.m, r.o, other.e, &st), LS_ERR_INVALID_ARGUMENT,
                  "not an EMA of this model");
    LS_EXPECT(rank == 0 || strstr(ls_last_error(), "(on rank 0)"));
    LS_EXPECT(ls_ckpt_async_wait(sv, comm, &d) == LS_OK);
    LS_EXPECT(d.step == -1);
    /* the saver goes on */
    LS_REQUIRE_OK(ls_ckpt_save_async(sv, comm, ctx, good, 0, r.m, r.o, r.e, &st));
    LS_REQUIRE_OK(ls_ckpt_async_wait(sv, comm, &d));
    LS_EXPECT(d.step == 4 && strstr(d.path, "/good/step-00000004"));
    /* bad arguments */
    LS_EXPECT_ERR(ls_ckpt_save_async(NULL, comm, ctx, good, 0, r.m, r.o, r.e, &st), LS_ERR_INVALID_ARGUMENT,
                  "ls_ckpt_save_async: the saver is NULL");
    LS_EXPECT_ERR(ls_ckpt_save_async(sv, comm, ctx, good, 0, NULL, r.o, r.e, &st), LS_ERR_INVALID_ARGUMENT,
                  "ls_ckpt_save_async: the model is NULL");
    LS_EXPECT_ERR(ls_ckpt_async_wait(NULL, comm, &d), LS_ERR_INVALID_ARGUMENT, "ls_ckpt_async_wait: the saver is NULL");
    LS_EXPECT_ERR(ls_ckpt_async_create(NULL), LS_ERR_INVALID_ARGUMENT, "ls_ckpt_async_create: out is NULL");
    /* a state its load would refuse, named by the call that was made (it said "ls_ckpt_save: ") */
    st.dropout = 1.5;
    LS_EXPECT_ERR(ls_ckpt_save_async(sv, comm, ctx, good, 0, r.m, r.o, r.e, &st), LS_ERR_INVALID_ARGUMENT,
                  "ls_ckpt_save_async: state.dropout 1.5 is not in [0, 1)");
    st.dropout = 0;
    st.n_loss_scaler = 2;
    snprintf(st.loss_scaler[0].key, sizeof st.loss_scaler[0].key, "scale");
    st.loss_scaler[0].value = 65536; /* a scale in range: the key twice is what is refused */
    st.loss_scaler[1] = st.loss_scaler[0];
    LS_EXPECT_ERR(ls_ckpt_save_async(sv, comm, ctx, good, 0, r.m, r.o, r.e, &st), LS_ERR_INVALID_ARGUMENT,
                  "ls_ckpt_save_async: the state would not load back: 'state.json': loss-scaler key 'scale' appears "
                  "twice");
    LS_EXPECT(ls_ckpt_async_wait(sv, comm, &d) == LS_OK && d.step == -1); /* none started */
    ls_ckpt_async_destroy(sv);
    ls_ckpt_async_destroy(NULL);
    drop(&other);
    drop(&r);
}

/* The entries of /proc/self/<what> (fd, task): this process's open files, its threads. */
static int proc_entries(const char *what) {
    char p[64];
    snprintf(p, sizeof p, "/proc/self/%s", what);
    DIR *d = opendir(p);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Savers made, used and destroyed in turn: each round two saves in the background (the second
 * pruning the first), one whose directory cannot be made (its failure at the wait) and a resume.
 * After the first round (whatever MPI or a device opens once), the file descriptors and threads
 * are those of before: no writer thread, snapshot or file kept per save or per saver. */
static void test_no_growth(void) {
    char good[128], file[128], bad[160];
    snprintf(good, sizeof good, "%s/rounds", root);
    snprintf(file, sizeof file, "%s/rounds-file", root);
    snprintf(bad, sizeof bad, "%s/sub", file);
    if (rank == 0) {
        FILE *f = fopen(file, "w");
        LS_REQUIRE(f && fclose(f) == 0);
    }
    run r = make(100, 5, 0);
    int fds = -1, threads = -1;
    enum { ROUNDS = 8 };
    for (int round = 0; round <= ROUNDS; round++) {
        if (round == 1) {
            fds = proc_entries("fd");
            threads = proc_entries("task");
        }
        ls_ckpt_async *sv;
        LS_REQUIRE_OK(ls_ckpt_async_create(&sv));
        for (int k = 1; k <= 2; k++) {
            ls_ckpt_state st = ckpt_test_state(2 * round + k, world);
            LS_REQUIRE_OK(ls_ckpt_save_async(sv, comm, ctx, good, 1, r.m, r.o, r.e, &st));
        }
        LS_REQUIRE_OK(ls_ckpt_async_wait(sv, comm, NULL));
        ls_ckpt_state st = ckpt_test_state(99, world);
        LS_REQUIRE_OK(ls_ckpt_save_async(sv, comm, ctx, bad, 1, r.m, r.o, r.e, &st));
        LS_EXPECT(ls_ckpt_async_wait(sv, comm, NULL) == LS_ERR_IO);
        ls_ckpt_async_destroy(sv);
        int found = 0;
        LS_REQUIRE_OK(ls_ckpt_load_ema(comm, ctx, good, "auto", r.m, r.o, r.e, &st, &found, NULL, 0));
        LS_EXPECT(found && st.step == 2 * round + 2);
    }
    const int fds_now = proc_entries("fd"), threads_now = proc_entries("task");
    if (fds_now != fds || threads_now != threads) {
        fprintf(stderr,
                "rank %d: after %d rounds of savers: %d file descriptors (%d after the first), %d threads (%d)\n", rank,
                ROUNDS, fds_now, fds, threads_now, threads);
        ls_test_failures++;
    }
    drop(&r);
}

/* One process: the disk refuses the write midway. */
static void test_write_refused(void) {
    char dir[128], p[256];
    snprintf(dir, sizeof dir, "%s/full", root);
    run r = make(2000, 4, 0); /* model.safetensors: 0.6 MB */
    ls_ckpt_async *sv;
    LS_REQUIRE_OK(ls_ckpt_async_create(&sv));
    ls_ckpt_state st = ckpt_test_state(5, world);
    LS_REQUIRE_OK(ls_ckpt_save_async(sv, comm, ctx, dir, 0, r.m, r.o, r.e, &st));
    LS_REQUIRE_OK(ls_ckpt_async_wait(sv, comm, NULL));
    struct rlimit old;
    ckpt_test_cap_files(200 << 10, &old);
    st = ckpt_test_state(7, world);
    LS_REQUIRE_OK(ls_ckpt_save_async(sv, comm, ctx, dir, 0, r.m, r.o, r.e, &st));
    ls_status s = ls_ckpt_async_wait(sv, comm, NULL);
    ckpt_test_uncap_files(&old);
    LS_EXPECT(s == LS_ERR_IO && strstr(ls_last_error(), "step-00000007.tmp/model.safetensors.tmp': write failed") &&
              strstr(ls_last_error(), "File too large"));
    snprintf(p, sizeof p, "%s/step-00000007", dir);
    LS_EXPECT(!exists(p));
    snprintf(p, sizeof p, "%s/step-00000007.tmp", dir);
    LS_EXPECT(!exists(p));
    int found = 0;
    LS_REQUIRE_OK(ls_ckpt_find_latest(dir, p, sizeof p, &found));
    LS_EXPECT(found && strstr(p, "/full/step-00000005"));
    ls_ckpt_async_destroy(sv);
    drop(&r);
}

/* One process on the CPU (it forks): killed while its writer is halfway through model.safetensors
 * and its training thread goes on. */
static void test_killed_mid_write(void) {
    char dir[128], p[256];
    snprintf(dir, sizeof dir, "%s/killed", root);
    run r = make(2000, 6, 0);
    ls_ckpt_state first = ckpt_test_state(1, world);
    LS_REQUIRE_OK(ls_ckpt_save_ema(NULL, ctx, dir, 0, r.m, r.o, r.e, &first, NULL, 0));
    fflush(NULL);
    pid_t pid = fork();
    LS_REQUIRE(pid >= 0);
    if (pid == 0) {
        setenv("LOCKSTEP_CKPT_CRASH_AT", "mid-write", 1);
        ls_ckpt_async *sv;
        ls_ckpt_state st = ckpt_test_state(2, world);
        if (ls_ckpt_async_create(&sv) != LS_OK || ls_ckpt_save_async(sv, NULL, ctx, dir, 0, r.m, r.o, r.e, &st))
            _exit(4);
        for (int k = 0; k < 3000; k++) { /* training on, until the writer's crash point kills the process */
            refill(&r, 7 + k);
            usleep(10000);
        }
        _exit(3); /* not reached */
    }
    int ws;
    LS_REQUIRE(waitpid(pid, &ws, 0) == pid);
    LS_EXPECT(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL);
    int found = 0;
    LS_REQUIRE_OK(ls_ckpt_find_latest(dir, p, sizeof p, &found));
    LS_EXPECT(found && strstr(p, "/killed/step-00000001"));
    snprintf(p, sizeof p, "%s/step-00000002.tmp", dir);
    LS_EXPECT(exists(p));
    run back = make(2000, 9, 0);
    ls_ckpt_state got;
    LS_REQUIRE_OK(ls_ckpt_load_ema(NULL, ctx, dir, "auto", back.m, back.o, back.e, &got, &found, NULL, 0));
    LS_EXPECT(found && got.step == 1);
    drop(&back);
    drop(&r);
}

/* destroy waits for the save in flight: its checkpoint is complete after, though the model,
 * optimizer and EMA were destroyed first (the writer holds copies of all it needs). */
static void test_destroy_completes(void) {
    char dir[128], p[256];
    snprintf(dir, sizeof dir, "%s/destroy", root);
    run r = make(1000, 8, 0);
    ls_ckpt_async *sv;
    LS_REQUIRE_OK(ls_ckpt_async_create(&sv));
    ls_ckpt_state st = ckpt_test_state(11, world);
    LS_REQUIRE_OK(ls_ckpt_save_async(sv, comm, ctx, dir, 0, r.m, r.o, r.e, &st));
    drop(&r);
    ls_ckpt_async_destroy(sv);
    LS_REQUIRE_OK(ls_comm_barrier(comm));
    if (rank == 0) {
        int64_t got = -1;
        snprintf(p, sizeof p, "%s/step-00000011", dir);
        LS_EXPECT(ls_ckpt_verify(p, &got) == LS_OK);
        LS_EXPECT(got == 11);
        ls_safetensors *f;
        snprintf(p, sizeof p, "%s/step-00000011/model.safetensors", dir);
        LS_REQUIRE_OK(ls_safetensors_open(p, &f));
        LS_EXPECT(ls_safetensors_count(f) == 6 && ls_safetensors_find(f, "0.weight") &&
                  ls_safetensors_find(f, "4.bias"));
        ls_safetensors_close(f);
    }
}

/* The "tid" of the first complete event named name in a timeline's text; -1 if none. */
static int event_tid(const char *text, const char *name, double *ts, double *dur) {
    char key[96];
    snprintf(key, sizeof key, "{\"name\":\"%s\",\"cat\":\"io\",\"ph\":\"X\"", name);
    const char *e = strstr(text, key), *t;
    int tid;
    if (!e || !(t = strstr(e, "\"tid\":")) || sscanf(t, "\"tid\":%d,\"ts\":%lf,\"dur\":%lf", &tid, ts, dur) != 3)
        return -1;
    return tid;
}

/* One process: the write runs on a thread of its own, named in the timeline. */
static void test_timeline(void) {
    char dir[128], path[128];
    snprintf(dir, sizeof dir, "%s/tl", root);
    snprintf(path, sizeof path, "%s/timeline.json", root);
    run r = make(1000, 9, 0);
    ls_ckpt_async *sv;
    LS_REQUIRE_OK(ls_ckpt_async_create(&sv));
    LS_REQUIRE_OK(ls_timeline_open(path, 0));
    ls_ckpt_state st = ckpt_test_state(3, world);
    LS_REQUIRE_OK(ls_ckpt_save_async(sv, comm, ctx, dir, 0, r.m, r.o, r.e, &st));
    LS_REQUIRE_OK(ls_ckpt_async_wait(sv, comm, NULL));
    LS_REQUIRE_OK(ls_timeline_close());
    size_t n;
    char *text = (char *)ckpt_test_slurp(path, &n);
    LS_REQUIRE(text);
    double ts_snap = 0, dur_snap = 0, ts_write = 0, dur_write = 0;
    int t_snap = event_tid(text, "checkpoint snapshot", &ts_snap, &dur_snap);
    int t_write = event_tid(text, "checkpoint write", &ts_write, &dur_write);
    if (t_snap < 0 || t_write < 0 || t_snap == t_write || ts_write < ts_snap + dur_snap - 1 ||
        !strstr(text, "\"args\":{\"name\":\"checkpoint writer\"}")) {
        fprintf(stderr, "the timeline should show the write on the writer's thread after the snapshot:\n%s\n", text);
        ls_test_failures++;
    }
    free(text);
    ls_ckpt_async_destroy(sv);
    drop(&r);
}

int main(int argc, char **argv) {
    dev = mlp_device_arg(argc, argv);
    LS_REQUIRE_OK(ls_ctx_create(dev, NULL, &ctx));
    LS_REQUIRE_OK(ls_comm_create(ctx, NULL, &comm));
    rank = ls_comm_rank(comm);
    world = ls_comm_world(comm);
    snprintf(root, sizeof root, "/tmp/ls_ckpt_async_XXXXXX");
    if (rank == 0) LS_REQUIRE(mkdtemp(root) != NULL);
    LS_REQUIRE_OK(ls_comm_broadcast_host(comm, root, (int64_t)sizeof root, LS_U8, 0));

    test_same_files(0);
    if (world > 1) test_same_files(1);
    test_back_to_back();
    test_errors();
    test_destroy_completes();
    test_no_growth();
    if (world == 1) {
        test_write_refused();
        test_timeline();
        if (dev.type == LS_DEVICE_CPU) test_killed_mid_write();
    }
    LS_REQUIRE_OK(ls_comm_barrier(comm));
    if (rank == 0) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", root);
        LS_EXPECT(system(cmd) == 0);
    }
    ls_comm_destroy(comm);
    ls_ctx_destroy(ctx);
    LS_TEST_END();
}
