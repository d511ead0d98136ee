/* flags.c — the flag tables' parser and --help generator (flags.h). */
#include "core/flags.h"

#include "core/check.h"
#include "core/mem.h"

#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    FLAGS_MAX = 128,     /* rows of one command, all tables */
    FLAGS_FIRST = 256,   /* getopt_long's value of row i: FLAGS_FIRST + i */
    FLAGS_NAME_COL = 21, /* the width of "--name ARG" on the help page */
    FLAGS_HELP_COL = 25, /* where the help text starts: "  ", the name, "  " */
};

static const flag_spec g_help_row = {.name = "help", .kind = FLAG_HELP, .help = "this text"};
static const char g_optstring[] = "+:h"; /* no reordering; ':' for a missing value; -h */

/* ---- values --------------------------------------------------------------------------------- */

static long parse_long(const char *flag, const char *s, long lo, long hi) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        up_die_all("%s expects an integer in [%ld, %ld], got '%s'", flag, lo, hi, s);
    return v;
}

static double parse_double(const char *flag, const char *s, double lo, double hi) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        up_die_all("%s expects a number in [%g, %g], got '%s'", flag, lo, hi, s);
    return v;
}

static unsigned long long parse_size(const char *flag, const char *s) {
    unsigned long long v;
    if (up_parse_bytes(s, &v) != 0)
        up_die_all("%s expects a size such as 6GiB, 512MiB or 1000000 (bytes), got '%s'", flag, s);
    return v;
}

static mem_dtype parse_dtype(const char *flag, const char *s) {
    for (int dt = 0; dt < MEM_DTYPE_COUNT; dt++)
        if (strcmp(s, mem_dtype_name((mem_dtype)dt)) == 0) return (mem_dtype)dt;
    up_die_all("%s expects f32 or bf16, got '%s'", flag, s);
}

static int parse_choice(const char *flag, const char *s, const char *const *choices) {
    char list[256] = "";
    size_t n = 0;
    for (int i = 0; choices[i]; i++) {
        if (strcmp(s, choices[i]) == 0) return i;
        const char *sep = i == 0 ? "" : choices[i + 1] ? ", " : " or ";
        n += (size_t)snprintf(list + n, n < sizeof list ? sizeof list - n : 0, "%s%s", sep,
                              choices[i]);
        if (n >= sizeof list) n = sizeof list - 1;
    }
    up_die_all("%s expects %s, got '%s'", flag, list, s);
}

/* A size that may be left out (getopt_long optional_argument): --flag=N, --flag N, or --flag
 * alone (-1: the default). */
static int parse_optional_count(const char *flag, int argc, char **argv) {
    if (optarg) return (int)parse_long(flag, optarg, 1, 1 << 30);
    if (optind < argc && argv[optind][0] >= '0' && argv[optind][0] <= '9')
        return (int)parse_long(flag, argv[optind++], 1, 1 << 30);
    return -1;
}

/* A FLAG_LIST's values: optarg and the arguments after it up to the next flag. */
static void parse_list(flag_list *l, int argc, char **argv) {
    int more = 0;
    while (optind + more < argc && !(argv[optind + more][0] == '-' && argv[optind + more][1]))
        more++;
    const char **v = realloc(l->v, (size_t)(l->n + 1 + more) * sizeof *v);
    UP_CHECK(v, "out of memory");
    l->v = v;
    l->v[l->n++] = optarg;
    while (more-- > 0)
        l->v[l->n++] = argv[optind++];
}

/* After getopt_long returned a flag with a value: the flag's name when that value is itself a
 * flag ("--offload --tile-mlp" would take --tile-mlp as the directory), else NULL. */
static const char *flag_as_value(char **argv) {
    if (!optarg || strncmp(optarg, "--", 2) != 0) return NULL;
    return argv[optind - 1] == optarg ? argv[optind - 2] : argv[optind - 1]; /* --f v, --f=v */
}

/* The value of row f (named flag on the command line) into its place in base. */
static void store(const flag_spec *f, void *base, const char *flag, int argc, char **argv) {
    void *p = (char *)base + f->off;
    switch (f->kind) {
    case FLAG_STRING:
        *(const char **)p = optarg;
        break;
    case FLAG_LONG:
        *(long *)p = parse_long(flag, optarg, f->lo, f->hi);
        break;
    case FLAG_INT:
        *(int *)p = (int)parse_long(flag, optarg, f->lo, f->hi);
        break;
    case FLAG_U64:
        *(uint64_t *)p = (uint64_t)parse_long(flag, optarg, f->lo, f->hi);
        break;
    case FLAG_DOUBLE:
        *(double *)p = parse_double(flag, optarg, f->min, f->max);
        break;
    case FLAG_SIZE:
        *(unsigned long long *)p = parse_size(flag, optarg);
        break;
    case FLAG_DTYPE:
        *(mem_dtype *)p = parse_dtype(flag, optarg);
        break;
    case FLAG_CHOICE:
        *(int *)p = parse_choice(flag, optarg, f->choices);
        break;
    case FLAG_SET:
        *(int *)p = 1;
        break;
    case FLAG_CLEAR:
        *(int *)p = 0;
        break;
    case FLAG_COUNT_OPT:
        *(int *)p = parse_optional_count(flag, argc, argv);
        break;
    case FLAG_LIST:
        parse_list(p, argc, argv);
        break;
    case FLAG_IGNORED:
    case FLAG_HELP:
        break;
    }
}

void flags_defaults(const flag_table *tables, int ntables) {
    for (int t = 0; t < ntables; t++)
        for (int i = 0; i < tables[t].n; i++) {
            const flag_spec *f = &tables[t].flags[i];
            void *p = (char *)tables[t].base + f->off;
            switch (f->kind) {
            case FLAG_STRING:
                *(const char **)p = NULL;
                break;
            case FLAG_LONG:
                *(long *)p = (long)f->def;
                break;
            case FLAG_INT:
            case FLAG_CHOICE:
            case FLAG_SET:
            case FLAG_COUNT_OPT:
                *(int *)p = (int)f->def;
                break;
            case FLAG_U64:
                *(uint64_t *)p = (uint64_t)f->def;
                break;
            case FLAG_DOUBLE:
                *(double *)p = f->def;
                break;
            case FLAG_SIZE:
                *(unsigned long long *)p = (unsigned long long)f->def;
                break;
            case FLAG_DTYPE:
                *(mem_dtype *)p = (mem_dtype)(int)f->def;
                break;
            case FLAG_LIST:
                *(flag_list *)p = (flag_list){NULL, 0};
                break;
            case FLAG_CLEAR: /* the default is the FLAG_SET row's */
            case FLAG_IGNORED:
            case FLAG_HELP:
                break;
            }
        }
}

/* ---- parsing -------------------------------------------------------------------------------- */

/* The rows of the tables in order, a name hidden by an earlier table's left out, and --help. */
typedef struct {
    const flag_spec *spec[FLAGS_MAX];
    void *base[FLAGS_MAX];
    struct option opt[FLAGS_MAX + 1];
    int n;
} flag_set;

/* The row that name means: the first table's that has it, or --help; NULL: none. */
static const flag_spec *find_row(const flag_table *tables, int ntables, const char *name) {
    for (int t = 0; t < ntables; t++)
        for (int i = 0; i < tables[t].n; i++)
            if (strcmp(tables[t].flags[i].name, name) == 0) return &tables[t].flags[i];
    return strcmp(name, g_help_row.name) == 0 ? &g_help_row : NULL;
}

static void add_row(flag_set *s, const flag_spec *f, void *base) {
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->spec[i]->name, f->name) == 0) return; /* hidden by an earlier table */
    UP_CHECK(s->n < FLAGS_MAX, "flags: more than %d flags", FLAGS_MAX);
    int has = !f->arg                     ? no_argument
              : f->kind == FLAG_COUNT_OPT ? optional_argument
                                          : required_argument;
    s->spec[s->n] = f;
    s->base[s->n] = base;
    s->opt[s->n] = (struct option){f->name, has, NULL, FLAGS_FIRST + s->n};
    s->n++;
}

static void build_set(flag_set *s, const flag_table *tables, int ntables) {
    memset(s, 0, sizeof *s);
    for (int t = 0; t < ntables; t++)
        for (int i = 0; i < tables[t].n; i++)
            add_row(s, &tables[t].flags[i], tables[t].base);
    add_row(s, &g_help_row, NULL);
}

int flags_parse(const char *cmd, const flag_table *tables, int ntables, int argc, char **argv) {
    static flag_set s; /* 10 KiB: not on the stack; front ends parse once, on the main thread */
    build_set(&s, tables, ntables);
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, g_optstring, s.opt, NULL)) != -1) {
        if (c == 'h') return 1;
        const char *given = flag_as_value(argv);
        if (given)
            up_die_all("%s needs a value but is followed by the flag %s: see upipe %s --help",
                       given, optarg, cmd);
        if (c == ':') up_die_all("%s needs a value: see upipe %s --help", argv[optind - 1], cmd);
        if (c < FLAGS_FIRST || c >= FLAGS_FIRST + s.n)
            up_die_all("unknown flag '%s': see upipe %s --help", argv[optind - 1], cmd);
        const flag_spec *f = s.spec[c - FLAGS_FIRST];
        if (f->kind == FLAG_HELP) return 1;
        char flag[80];
        snprintf(flag, sizeof flag, "--%s", f->name);
        store(f, s.base[c - FLAGS_FIRST], flag, argc, argv);
    }
    if (optind < argc)
        up_die_all("unexpected argument '%s': flags are --name value (see upipe %s --help)",
                   argv[optind], cmd);
    return 0;
}

/* ---- --help --------------------------------------------------------------------------------- */

/* "--a X, --b Y" of the rows named in names (space-separated) into label; the first row. */
static const flag_spec *help_label(const flag_table *tables, int ntables, const char *names,
                                   char *label, size_t len, unsigned char *shown) {
    const flag_spec *first = NULL;
    size_t n = 0;
    label[0] = '\0';
    for (const char *p = names; *p;) {
        size_t k = strcspn(p, " ");
        char name[64];
        UP_CHECK(k < sizeof name, "flags: help line names '%s'", names);
        memcpy(name, p, k);
        name[k] = '\0';
        const flag_spec *f = find_row(tables, ntables, name);
        UP_CHECK(f, "flags: the help page names --%s, which no table has", name);
        if (!first) first = f;
        for (int t = 0, base = 0; t < ntables; base += tables[t].n, t++)
            if (f >= tables[t].flags && f < tables[t].flags + tables[t].n)
                shown[base + (f - tables[t].flags)] = 1;
        n += (size_t)snprintf(label + n, n < len ? len - n : 0, "%s--%s%s%s", n ? ", " : "",
                              f->name, f->arg ? " " : "", f->arg ? f->arg : "");
        p += k;
        p += strspn(p, " ");
    }
    return first;
}

/* One flag line: the label, then the text's lines at the help column. */
static void help_line(const char *label, const char *text) {
    if ((int)strlen(label) > FLAGS_NAME_COL)
        printf("  %s\n%*s", label, FLAGS_HELP_COL, "");
    else
        printf("  %-*s  ", FLAGS_NAME_COL, label);
    for (const char *p = text;;) {
        size_t k = strcspn(p, "\n");
        printf("%.*s\n", (int)k, p);
        if (!p[k]) break;
        p += k + 1;
        printf("%*s", FLAGS_HELP_COL, "");
    }
}

void flags_print_help(const flag_table *tables, int ntables, const flag_help_line *page,
                      int nlines) {
    unsigned char shown[FLAGS_MAX] = {0};
    int total = 0;
    for (int t = 0; t < ntables; t++)
        total += tables[t].n;
    UP_CHECK(total <= FLAGS_MAX, "flags: more than %d flags", FLAGS_MAX);
    for (int i = 0; i < nlines; i++) {
        if (!page[i].flags) {
            printf("%s\n", page[i].text);
            continue;
        }
        char label[256];
        const flag_spec *f = help_label(tables, ntables, page[i].flags, label, sizeof label, shown);
        const char *text = page[i].text ? page[i].text : f->help;
        UP_CHECK(text, "flags: --%s has no help text", f->name);
        help_line(label, text);
    }
    /* every flag is on the page, or hidden by an earlier table's row of the same name */
    for (int t = 0, base = 0; t < ntables; base += tables[t].n, t++)
        for (int i = 0; i < tables[t].n; i++)
            UP_CHECK(shown[base + i] ||
                         find_row(tables, ntables, tables[t].flags[i].name) != &tables[t].flags[i],
                     "flags: --%s is missing from the help page", tables[t].flags[i].name);
}
