/* hosts.c: reads the host list of a multi-host run, from an Open MPI hostfile ("host slots=N" per
 * line) or from --hosts "h1:2,h2:2", and validates it so that mistakes are reported here, naming
 * the file and line, rather than by mpirun after it has started daemons. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launch.h"

#define LSR_MAX_SLOTS 1000000

int lsr_parse_int(const char *s, long lo, long hi, long *out) {
    if (!s || (!isdigit((unsigned char)*s) && *s != '-')) return -1; /* no space, no '+' */
    errno = 0;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (errno || *end != '\0' || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int host_name_ok(const char *s, size_t len, int allow_colon) {
    if (len == 0) return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!(isalnum(c) || c == '.' || c == '-' || c == '_' || c == '@' || (allow_colon && c == ':'))) return 0;
    }
    return s[0] != '-';
}

/* Whether a host name is this machine to Open MPI: localhost, a loopback address, or this host's
 * name (full or short). */
static int is_this_host(const char *name, size_t len) {
    static const char *const local[] = {"localhost", "127.0.0.1", "::1"};
    for (size_t i = 0; i < sizeof local / sizeof *local; i++)
        if (len == strlen(local[i]) && !memcmp(name, local[i], len)) return 1;
    char me[256] = "";
    if (gethostname(me, sizeof me - 1) != 0 || !*me) return 0;
    size_t mlen = strlen(me), mshort = strcspn(me, "."), nshort = strcspn(name, ".");
    if (nshort > len) nshort = len;
    if (len == mlen && !memcmp(name, me, len)) return 1;
    /* "node1" and "node1.cluster": the same host when one of them is the short name */
    return (nshort == len || mshort == mlen) && nshort == mshort && !memcmp(name, me, mshort);
}

/* Open MPI's view: the same name, or two names of this machine (it merges them into one node). */
static int same_host(const char *a, size_t alen, const char *b, size_t blen) {
    if (alen == blen && !memcmp(a, b, alen)) return 1;
    return is_this_host(a, alen) && is_this_host(b, blen);
}

static void hostlist_add(lsr_hostlist *hl, const char *name, size_t len, int slots) {
    lsr_host *v = realloc(hl->v, (hl->n + 1) * sizeof *v);
    char *copy = malloc(len + 1);
    if (!v || !copy) {
        fprintf(stderr, "lockstep-run: out of memory\n");
        exit(1);
    }
    memcpy(copy, name, len);
    copy[len] = '\0';
    hl->v = v;
    hl->v[hl->n].name = copy;
    hl->v[hl->n].slots = slots;
    hl->v[hl->n].max_slots = 0;
    hl->v[hl->n].line = 0;
    hl->n++;
}

void lsr_hostlist_free(lsr_hostlist *hl) {
    for (size_t i = 0; i < hl->n; i++) free(hl->v[i].name);
    free(hl->v);
    hl->v = NULL;
    hl->n = 0;
}

/* One "key=value" (spaces allowed around '=') starting at *pp; advances *pp past it. */
static int parse_attr(char **pp, const char *path, int lineno, int *slots, int *max_slots, char *err, size_t errlen) {
    char *p = *pp;
    char *key = p;
    while (*p && (isalnum((unsigned char)*p) || *p == '_' || *p == '-')) p++;
    size_t klen = (size_t)(p - key);
    while (*p == ' ' || *p == '\t') p++;
    if (klen == 0 || *p != '=') {
        char *tok_end = key;
        while (*tok_end && !isspace((unsigned char)*tok_end)) tok_end++;
        snprintf(err, errlen, "%s:%d: expected 'slots=N' after the host name, got '%.*s'", path, lineno,
                 (int)(tok_end - key), key);
        return -1;
    }
    p++;
    while (*p == ' ' || *p == '\t') p++;
    char *val = p;
    while (*p && !isspace((unsigned char)*p)) p++;
    char saved = *p;
    *p = '\0';
    if (klen == 8 && !strncmp(key, "username", 8)) { /* Open MPI's, for ssh: any non-empty name */
        *p = saved;
        if (!*val || isspace((unsigned char)*val)) {
            snprintf(err, errlen, "%s:%d: username= has no value", path, lineno);
            return -1;
        }
        *pp = p;
        return 0;
    }
    long v = 0;
    int bad = lsr_parse_int(val, 1, LSR_MAX_SLOTS, &v);
    int *dst = NULL;
    if ((klen == 5 && !strncmp(key, "slots", 5)) || (klen == 5 && !strncmp(key, "count", 5)) ||
        (klen == 3 && !strncmp(key, "cpu", 3)))
        dst = slots;
    else if ((klen == 9 && (!strncmp(key, "max_slots", 9) || !strncmp(key, "max-slots", 9))))
        dst = max_slots;
    if (!dst) {
        snprintf(err, errlen, "%s:%d: unknown attribute '%.*s' (expected slots=N, max_slots=N or username=U)", path,
                 lineno, (int)klen, key);
        *p = saved;
        return -1;
    }
    if (bad) {
        snprintf(err, errlen, "%s:%d: %.*s must be a positive integer, got '%s'", path, lineno, (int)klen, key, val);
        *p = saved;
        return -1;
    }
    if (*dst) { /* "slots=2 slots=3": which one was meant? */
        snprintf(err, errlen, "%s:%d: %s given twice", path, lineno, dst == slots ? "the slot count" : "max_slots");
        *p = saved;
        return -1;
    }
    *dst = (int)v;
    *p = saved;
    *pp = p;
    return 0;
}

/* Whether s[0..len) is an IPv6 address (inet_pton's forms: no brackets, no zone); *addr gets it. */
static int parse_ipv6(const char *s, size_t len, struct in6_addr *addr) {
    char buf[64];
    if (len >= sizeof buf) return 0;
    memcpy(buf, s, len);
    buf[len] = '\0';
    return inet_pton(AF_INET6, buf, addr) == 1;
}

/* Whether s[0..len) is an IPv6 address, alone or as "[address]" with anything after. */
static int is_ipv6(const char *s, size_t len) {
    struct in6_addr addr;
    if (len && *s == '[') {
        const char *close = memchr(s, ']', len);
        if (!close) return 0;
        len = (size_t)(close - s - 1);
        s++;
    }
    return parse_ipv6(s, len, &addr);
}

/* Checks a hostfile line's name (name[0..nlen), "user@" allowed before the host) as Open MPI's
 * hostfile parser would take it: its lexer passes a run of letters, digits and ':' on as a node
 * name (so "a::b" reached ssh), stops on '[', ']', '%' and on a '.' among colons (a parse error),
 * and took "::" for this machine. A ':' belongs to an IPv6 address (checked with inet_pton), or
 * to --hosts' "host:N". Returns -1 with the reason in err. */
static int hostfile_name_check(const char *path, int lineno, const char *name, size_t nlen, char *err, size_t errlen) {
    const char *host = name;
    size_t hlen = nlen;
    for (const char *q = name; q < name + nlen; q++)
        if (*q == '@') {
            host = q + 1;
            hlen = nlen - (size_t)(host - name);
        }
    struct in6_addr addr;
    const char *addr_s = host; /* an address in brackets, with a zone: the address alone */
    size_t addr_len = hlen;
    const int bracket = hlen && *host == '[';
    if (bracket) {
        const char *close = memchr(host, ']', hlen);
        addr_s = host + 1;
        addr_len = close ? (size_t)(close - addr_s) : hlen - 1;
    }
    const char *zone = memchr(addr_s, '%', addr_len);
    if (parse_ipv6(addr_s, zone ? (size_t)(zone - addr_s) : addr_len, &addr)) {
        if (zone) {
            snprintf(err, errlen,
                     "%s:%d: '%.*s': an IPv6 address with a zone ('%.*s'), which Open MPI's mpirun cannot parse; give "
                     "the host's name or a global address",
                     path, lineno, (int)nlen, name, (int)(addr_len - (size_t)(zone - addr_s)), zone);
            return -1;
        }
        if (bracket) {
            snprintf(err, errlen,
                     "%s:%d: '%.*s': an IPv6 address goes in a hostfile without brackets ('%.*s%.*s'), which Open "
                     "MPI's mpirun cannot parse",
                     path, lineno, (int)nlen, name, (int)(host - name), name, (int)addr_len, addr_s);
            return -1;
        }
    }
    if (!host_name_ok(name, nlen, 1)) {
        snprintf(err, errlen, "%s:%d: '%.*s' is not a host name", path, lineno, (int)nlen, name);
        return -1;
    }
    const char *colon = memchr(host, ':', hlen);
    if (!colon) return 0;
    if (!memchr(colon + 1, ':', hlen - (size_t)(colon + 1 - host))) {
        /* one colon: --hosts' "host:N", which mpirun reads as a host named "host:N" */
        char num[16] = "";
        size_t slen = hlen - (size_t)(colon + 1 - host);
        long v = 0;
        if (slen < sizeof num) memcpy(num, colon + 1, slen);
        if (colon == host || slen >= sizeof num || lsr_parse_int(num, 1, LSR_MAX_SLOTS, &v)) {
            snprintf(err, errlen,
                     "%s:%d: '%.*s' is not a host name (a ':' belongs to an IPv6 address, or to --hosts' host:N)", path,
                     lineno, (int)nlen, name);
            return -1;
        }
        snprintf(err, errlen, "%s:%d: '%.*s': a hostfile gives slots as '%.*s slots=%s' (host:N is --hosts' form)",
                 path, lineno, (int)nlen, name, (int)(colon - name), name, num);
        return -1;
    }
    if (!parse_ipv6(host, hlen, &addr)) {
        snprintf(err, errlen, "%s:%d: '%.*s' is neither a host name nor an IPv6 address (a name with ':' must be one)",
                 path, lineno, (int)nlen, name);
        return -1;
    }
    if (IN6_IS_ADDR_UNSPECIFIED(&addr)) {
        snprintf(err, errlen,
                 "%s:%d: '%.*s' is the unspecified IPv6 address, not a host's (this machine is 'localhost')", path,
                 lineno, (int)nlen, name);
        return -1;
    }
    if (memchr(host, '.', hlen)) { /* "::ffff:10.0.0.1": the lexer's IPv6 rule has no '.' */
        char hex[48];
        size_t used = 0;
        for (int g = 0; g < 8; g++)
            used += (size_t)snprintf(hex + used, sizeof hex - used, "%s%x", g ? ":" : "",
                                     (unsigned)addr.s6_addr[2 * g] << 8 | addr.s6_addr[2 * g + 1]);
        snprintf(err, errlen,
                 "%s:%d: '%.*s': an IPv6 address with an IPv4 part, which Open MPI's mpirun cannot parse; write it in "
                 "hexadecimal ('%.*s%s')",
                 path, lineno, (int)nlen, name, (int)(host - name), name, hex);
        return -1;
    }
    return 0;
}

int lsr_hostfile_parse(const char *path, lsr_hostlist *out, char *err, size_t errlen) {
    /* mpirun opens its hostfile more than once: a pipe (a process substitution, <(...)) read here
     * would be empty for it ("No nodes are available") */
    struct stat st;
    if (stat(path, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) {
        snprintf(err, errlen,
                 "hostfile '%s' is a pipe, not a file: mpirun reads its hostfile more than once and would find it "
                 "empty; write the hosts to a file",
                 path);
        return -1;
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot read hostfile '%s': %s", path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0, rc = 0;
    ssize_t got;
    while ((got = getline(&line, &cap, f)) >= 0) {
        lineno++;
        /* A NUL byte (a binary file, a corrupted copy) ended the line here without a word (the name
         * cut at it, the rest dropped); mpirun's lexer stops on it but in a comment */
        const char *nul = memchr(line, '\0', (size_t)got);
        const char *hash0 = memchr(line, '#', (size_t)got);
        if (nul && (!hash0 || nul < hash0)) {
            snprintf(err, errlen,
                     "%s:%d: a NUL byte at column %ld, which Open MPI's mpirun cannot parse (is it a text file?)", path,
                     lineno, (long)(nul - line) + 1);
            rc = -1;
            break;
        }
        /* an editor's "UTF-8 with BOM": mpirun's lexer stops at it ("parse error ... on token 1"),
         * before a comment too, and here it read as a host name of invisible characters */
        if (lineno == 1 && !strncmp(line, "\xEF\xBB\xBF", 3)) {
            snprintf(err, errlen,
                     "%s:1: the file starts with a UTF-8 byte-order mark, which Open MPI's mpirun cannot parse; "
                     "remove it with sed -i '1s/^\\xEF\\xBB\\xBF//'",
                     path);
            rc = -1;
            break;
        }
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char *p = line;
        while (isspace((unsigned char)*p)) p++;
        if (!*p) continue;
        /* Open MPI's hostfile lexer takes a '\r' (a file saved with Windows line endings) for a
         * bad token in a host's line, not for a blank: "parse error in the hostfile" */
        if (strchr(p, '\r')) {
            snprintf(err, errlen,
                     "%s:%d: the line ends in a carriage return (Windows line endings), which Open MPI's mpirun "
                     "cannot parse; convert the file with dos2unix or sed -i 's/\\r$//'",
                     path, lineno);
            rc = -1;
            break;
        }
        char *name = p;
        while (*p && !isspace((unsigned char)*p)) p++;
        size_t nlen = (size_t)(p - name);
        if (hostfile_name_check(path, lineno, name, nlen, err, errlen)) {
            rc = -1;
            break;
        }
        int slots = 0, max_slots = 0;
        for (;;) {
            while (isspace((unsigned char)*p)) p++;
            if (!*p) break;
            if (parse_attr(&p, path, lineno, &slots, &max_slots, err, errlen)) {
                rc = -1;
                break;
            }
        }
        if (rc) break;
        if (max_slots && slots > max_slots) {
            snprintf(err, errlen, "%s:%d: slots=%d exceeds max_slots=%d", path, lineno, slots, max_slots);
            rc = -1;
            break;
        }
        /* Open MPI refuses a line with slots= for a host listed before ("multiple definitions of the
         * slot count"); bare repeats add one slot each */
        size_t k = 0;
        while (k < out->n && !same_host(out->v[k].name, strlen(out->v[k].name), name, nlen)) k++;
        if (k < out->n && slots) {
            const int alias = strlen(out->v[k].name) != nlen || memcmp(out->v[k].name, name, nlen);
            snprintf(err, errlen,
                     "%s:%d: '%.*s' is listed again with slots=%d (first on line %d%s%s%s): Open MPI refuses a "
                     "second slot count for a host; give its total on one line",
                     path, lineno, (int)nlen, name, slots, out->v[k].line, alias ? " as '" : "",
                     alias ? out->v[k].name : "", alias ? "', both this machine" : "");
            rc = -1;
            break;
        }
        hostlist_add(out, name, nlen, slots);
        out->v[out->n - 1].max_slots = max_slots;
        out->v[out->n - 1].line = k < out->n - 1 ? out->v[k].line : lineno;
    }
    if (!rc && ferror(f)) {
        snprintf(err, errlen, "cannot read hostfile '%s': %s", path, strerror(errno));
        rc = -1;
    }
    if (!rc && out->n == 0) {
        snprintf(err, errlen, "hostfile '%s' names no hosts", path);
        rc = -1;
    }
    free(line);
    fclose(f);
    if (rc) lsr_hostlist_free(out);
    return rc;
}

int lsr_hosts_parse(const char *spec, lsr_hostlist *out, char *err, size_t errlen) {
    const char *p = spec;
    if (!*spec) {
        snprintf(err, errlen, "--hosts: empty host list (expected host[:slots],...)");
        return -1;
    }
    if (strlen(spec) > INT_MAX / 2) {
        snprintf(err, errlen, "--hosts: host list too long");
        return -1;
    }
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        size_t nlen = colon ? (size_t)(colon - p) : len;
        int slots = 0;
        /* "fd00::1", "[::1]:2": an IPv6 address, whose colons read as host:slots */
        if (is_ipv6(p, len)) {
            snprintf(err, errlen,
                     "--hosts: '%.*s' is an IPv6 address, which mpirun's --host cannot take (its colons read as "
                     "host:slots); give the host's name or IPv4 address (in '%s')",
                     (int)len, p, spec);
            lsr_hostlist_free(out);
            return -1;
        }
        if (!host_name_ok(p, nlen, 0)) {
            snprintf(err, errlen, "--hosts: '%.*s' is not host[:slots] (in '%s')", (int)len, p, spec);
            lsr_hostlist_free(out);
            return -1;
        }
        if (colon) {
            char num[32] = "";
            size_t slen = len - nlen - 1;
            long v = 0;
            if (slen < sizeof num) {
                memcpy(num, colon + 1, slen);
                num[slen] = '\0';
            }
            if (slen >= sizeof num || lsr_parse_int(num, 1, LSR_MAX_SLOTS, &v)) {
                snprintf(err, errlen, "--hosts: slots in '%.*s' must be a positive integer (in '%s')", (int)len, p,
                         spec);
                lsr_hostlist_free(out);
                return -1;
            }
            slots = (int)v;
        }
        hostlist_add(out, p, nlen, slots);
        if (!end) break;
        p = end + 1;
    }
    return 0;
}
