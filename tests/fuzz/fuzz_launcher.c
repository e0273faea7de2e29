/* fuzz_launcher.c: libFuzzer target for what lockstep-run parses of text it is given or finds: the
 * first input byte picks (mod 8) which parser gets the rest:
 * 0 lsr_hostfile_parse (the rest written to a file in a private directory);
 * 1 lsr_hosts_parse (--hosts, NUL-terminated);
 * 2 SLURM_TASKS_PER_NODE's compressed list ("2(x3),1"), set in the environment;
 * 3 scontrol show config's "KEY = value" lines (config_value, key MpiDefault);
 * 4 srun --mpi=list's output (mpi_list_has, type pmix);
 * 5 an Open MPI parameter file (file_sets_mca, name regx);
 * 6 CUDA_VISIBLE_DEVICES (count_visible);
 * 7 the seconds of --restart-delay (parse_seconds) and a count (lsr_parse_int).
 * What parses must be what the launcher then relies on: every host a valid name with slots in
 * range, listed once with a slot count; a refusal leaves no hosts and says why. lockstep_run.c
 * (its main renamed), hosts.c and probe.c are included so their static parsers are reachable. Built with
 * clang -fsanitize=fuzzer,address,undefined by tests/fuzz/CMakeLists.txt. */
#define main lsr_main
#include "lockstep_run.c"
#undef main
#include "hosts.c"
#include "probe.c"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64], file[128];

static void remove_dir(void) {
    unlink(file);
    rmdir(dir);
}

static void write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0) abort();
}

/* A host list that parsed: hosts with valid names, slots and max_slots in range. */
static void check_hosts(const lsr_hostlist *hl, int from_file) {
    if (hl->n < 1 || !hl->v) abort();
    for (size_t i = 0; i < hl->n; i++) {
        const lsr_host *h = &hl->v[i];
        if (!h->name || !host_name_ok(h->name, strlen(h->name), from_file)) abort();
        if (h->slots < 0 || h->slots > LSR_MAX_SLOTS || h->max_slots < 0 || h->max_slots > LSR_MAX_SLOTS) abort();
        if (h->max_slots && h->slots > h->max_slots) abort();
        if (from_file ? h->line < 1 : h->line != 0) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/lockstep-fuzz-launcher-%ld", (long)getpid());
        if (mkdir(dir, 0700) != 0) abort();
        snprintf(file, sizeof file, "%s/input", dir);
        atexit(remove_dir);
    }
    if (size < 1) return 0;
    const int mode = data[0] % 8;
    const size_t n = size - 1;
    char *s = malloc(n + 1); /* the rest, NUL-terminated (a NUL inside ends it early) */
    if (!s) abort();
    memcpy(s, data + 1, n);
    s[n] = '\0';
    char err[LSR_ERRLEN] = "";
    lsr_hostlist hl = {NULL, 0};
    switch (mode) {
    case 0:
    case 1: {
        int rc;
        if (mode == 0) {
            write_file(file, data + 1, n);
            rc = lsr_hostfile_parse(file, &hl, err, sizeof err);
        } else {
            rc = lsr_hosts_parse(s, &hl, err, sizeof err);
        }
        if (rc == 0)
            check_hosts(&hl, mode == 0);
        else if (rc != -1 || hl.n || hl.v || !err[0])
            abort(); /* a refusal leaves no hosts and says why */
        lsr_hostlist_free(&hl);
        break;
    }
    case 2: {
        if (setenv("SLURM_TASKS_PER_NODE", s, 1) != 0) abort();
        const long most = slurm_most_tasks_per_node();
        if (most < 0 || most > MAX_RANKS) abort();
        break;
    }
    case 3: {
        char v[64];
        if (config_value(s, "MpiDefault", v, sizeof v) == 0 && (!v[0] || strlen(v) >= sizeof v || strpbrk(v, " \r\n")))
            abort();
        break;
    }
    case 4: (void)mpi_list_has(s, "pmix"); break;
    case 5:
        write_file(file, data + 1, n);
        (void)file_sets_mca(file, "regx");
        break;
    case 6: {
        const int k = count_visible(s);
        if (k < 0 || (size_t)k > n / 2 + 1) abort();
        break;
    }
    default: {
        double d = -1;
        long v = -1;
        if (parse_seconds(s, 3600, &d) == 0 && !(d >= 0 && d <= 3600)) abort();
        if (lsr_parse_int(s, 1, MAX_RANKS, &v) == 0 && !(v >= 1 && v <= MAX_RANKS)) abort();
        break;
    }
    }
    free(s);
    return 0;
}
