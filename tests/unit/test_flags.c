/* test_flags.c — the flag tables (core/flags.h): defaults, every kind of value parsed into its
 * field, a command's row hiding a shared one, prefixes, --help and -h, lists, and the --help
 * page's layout; then train's tables (train/options.h): its defaults and the values derived after
 * parsing, and that train's and eval's help pages print (their check that every flag is on the page
 * runs). Bad values stop the process, so they are tested by tests/scripts/bad_input.sh instead. */
#include "cmd/eval_cmd.h"
#include "core/flags.h"
#include "core/mem.h"
#include "train/options.h"

#include "harness.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const char *path;
    long n;
    int k, on, count, ignored;
    uint64_t seed;
    double x;
    unsigned long long size;
    mem_dtype dt;
    int mode;
} cmd_opts;

typedef struct {
    int shared_on; /* set by the shared "on2" row, hidden in the command */
    long shared_n;
} shared_opts;

static const char *const g_modes[] = {"stop", "skip", "retry", NULL};

#define C(field) offsetof(cmd_opts, field)
static const flag_spec g_cmd[] = {
    {.name = "path", .arg = "FILE", .kind = FLAG_STRING, .off = C(path), .help = "a path"},
    {.name = "n",
     .arg = "N",
     .kind = FLAG_LONG,
     .off = C(n),
     .lo = -5,
     .hi = 5,
     .def = -1,
     .help = "a long"},
    {.name = "k",
     .arg = "K",
     .kind = FLAG_INT,
     .off = C(k),
     .lo = 1,
     .hi = 9,
     .def = 3,
     .help = "an int"},
    {.name = "seed",
     .arg = "S",
     .kind = FLAG_U64,
     .off = C(seed),
     .lo = 0,
     .hi = 0x7fffffffffffffffL,
     .def = 1234,
     .help = "a seed"},
    {.name = "x",
     .arg = "X",
     .kind = FLAG_DOUBLE,
     .off = C(x),
     .min = 0,
     .max = 1,
     .def = 0.25,
     .help = "a number"},
    {.name = "size",
     .arg = "SIZE",
     .kind = FLAG_SIZE,
     .off = C(size),
     .def = 5e9,
     .help = "a size"},
    {.name = "dt",
     .arg = "f32|bf16",
     .kind = FLAG_DTYPE,
     .off = C(dt),
     .def = MEM_DTYPE_F32,
     .help = "a type"},
    {.name = "mode",
     .arg = "MODE",
     .kind = FLAG_CHOICE,
     .off = C(mode),
     .choices = g_modes,
     .def = 1,
     .help = "a choice"},
    {.name = "on",
     .kind = FLAG_SET,
     .off = C(on),
     .def = 1,
     .help = "a switch with a very long help text\nover two lines"},
    {.name = "no-on", .kind = FLAG_CLEAR, .off = C(on)},
    {.name = "count", .arg = "[N]", .kind = FLAG_COUNT_OPT, .off = C(count), .help = "a count"},
    {.name = "on2", .kind = FLAG_IGNORED, .help = "ignored here"},
};
static const flag_spec g_shared[] = {
    {.name = "on2",
     .kind = FLAG_SET,
     .off = offsetof(shared_opts, shared_on),
     .help = "shared switch"},
    {.name = "shared-n",
     .arg = "N",
     .kind = FLAG_LONG,
     .off = offsetof(shared_opts, shared_n),
     .lo = 0,
     .hi = 100,
     .def = 7,
     .help = "a shared long"},
};

typedef struct {
    flag_list in;
    const char *out;
} list_opts;

static const flag_spec g_list[] = {
    {.name = "in",
     .arg = "FILE ...",
     .kind = FLAG_LIST,
     .off = offsetof(list_opts, in),
     .help = "a list"},
    {.name = "out", .arg = "FILE", .kind = FLAG_STRING, .off = offsetof(list_opts, out)},
};

static int parse(cmd_opts *o, shared_opts *sh, int argc, const char **argv) {
    memset(o, 0, sizeof *o);
    memset(sh, 0, sizeof *sh);
    flag_table t[] = {{g_cmd, FLAGS_COUNT(g_cmd), o}, {g_shared, FLAGS_COUNT(g_shared), sh}};
    flags_defaults(t, 2);
    return flags_parse("test", t, 2, argc, (char **)argv);
}

/* What fn prints on stdout, as a malloc'd string. */
static char *capture(void (*fn)(void)) {
    char path[] = "/tmp/upipe-test-flags.XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return NULL;
    fflush(stdout);
    int saved = dup(STDOUT_FILENO);
    dup2(fd, STDOUT_FILENO);
    fn();
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    long n = lseek(fd, 0, SEEK_END);
    char *text = calloc((size_t)(n > 0 ? n : 0) + 1, 1);
    if (text && n > 0 && pread(fd, text, (size_t)n, 0) != n) text[0] = '\0';
    close(fd);
    unlink(path);
    return text;
}

static void print_test_page(void) {
    cmd_opts o;
    shared_opts sh;
    flag_table t[] = {{g_cmd, FLAGS_COUNT(g_cmd), &o}, {g_shared, FLAGS_COUNT(g_shared), &sh}};
    static const flag_help_line page[] = {
        {NULL, "usage: test\n"},
        {"path", NULL},
        {"n k", NULL},
        {"seed", "worded here\non two lines"},
        {"x", NULL},
        {"size", NULL},
        {"dt", NULL},
        {"mode", NULL},
        {"on no-on", NULL},
        {"count", NULL},
        {"on2", NULL},
        {"shared-n", NULL},
        {"help", NULL},
    };
    flags_print_help(t, 2, page, FLAGS_COUNT(page));
}

static void test_parse(void) {
    cmd_opts o;
    shared_opts sh;
    const char *none[] = {"test"};
    CHECK(parse(&o, &sh, 1, none) == 0, "no flags");
    CHECK(!o.path && o.n == -1 && o.k == 3 && o.seed == 1234 && o.x == 0.25 &&
              o.size == 5000000000ull && o.dt == MEM_DTYPE_F32 && o.mode == 1 && o.on == 1 &&
              o.count == 0 && sh.shared_n == 7 && !sh.shared_on,
          "defaults");
    const char *all[] = {"test",    "--path",  "p.bin",  "--n",
                         "-5",      "--k=9",   "--seed", "9223372036854775807",
                         "--x",     "1",       "--size", "6GiB",
                         "--dt",    "bf16",    "--mode", "retry",
                         "--no-on", "--count", "--on2",  "--shared-n",
                         "100"};
    CHECK(parse(&o, &sh, FLAGS_COUNT(all), all) == 0, "every kind");
    CHECK(o.path && !strcmp(o.path, "p.bin"), "string");
    CHECK(o.n == -5 && o.k == 9, "long, int (=value): %ld %d", o.n, o.k);
    CHECK(o.seed == 0x7fffffffffffffffull, "u64 at its bound");
    CHECK(o.x == 1.0 && o.size == 6ull << 30, "double, size");
    CHECK(o.dt == MEM_DTYPE_BF16 && o.mode == 2 && o.on == 0, "dtype, choice, clear");
    CHECK(o.count == -1, "count without a value: -1 (%d)", o.count);
    CHECK(!sh.shared_on, "a hidden shared row is not the one parsed");
    CHECK(sh.shared_n == 100, "shared long");
    const char *counts[] = {"test", "--count", "4", "--on"};
    CHECK(parse(&o, &sh, 4, counts) == 0 && o.count == 4 && o.on == 1, "count with a value");
    const char *eq[] = {"test", "--count=2", "--pa", "x"};
    CHECK(parse(&o, &sh, 4, eq) == 0 && o.count == 2 && o.path && !strcmp(o.path, "x"),
          "count=N, and a unique prefix");
    const char *help[] = {"test", "--n", "1", "--help", "--n", "bad"};
    CHECK(parse(&o, &sh, 6, help) == 1 && o.n == 1, "--help returns 1 at once");
}

/* A list's values up to the next flag, appended by a repeated flag; -h as --help. */
static void test_list(void) {
    list_opts o = {0};
    flag_table t = {g_list, FLAGS_COUNT(g_list), &o};
    const char *argv[] = {"test", "--in", "a", "b", "--out", "o", "--in=c", "d", "-"};
    flags_defaults(&t, 1);
    CHECK(flags_parse("test", &t, 1, FLAGS_COUNT(argv), (char **)argv) == 0, "lists parse");
    CHECK(o.in.n == 5 && !strcmp(o.in.v[0], "a") && !strcmp(o.in.v[1], "b") &&
              !strcmp(o.in.v[2], "c") && !strcmp(o.in.v[3], "d") && !strcmp(o.in.v[4], "-") &&
              o.out && !strcmp(o.out, "o"),
          "--in a b --in=c d -: %d values", o.in.n);
    free(o.in.v);
    flags_defaults(&t, 1);
    CHECK(o.in.n == 0 && !o.in.v, "a list's default: empty");
    const char *h[] = {"test", "--in", "a", "-h", "--bad"};
    CHECK(flags_parse("test", &t, 1, FLAGS_COUNT(h), (char **)h) == 1 && o.in.n == 1,
          "-h ends the list and returns 1 at once");
    free(o.in.v);
}

static void test_help_page(void) {
    char *text = capture(print_test_page);
    const char *want = "usage: test\n\n"
                       "  --path FILE            a path\n"
                       "  --n N, --k K           a long\n"
                       "  --seed S               worded here\n"
                       "                         on two lines\n"
                       "  --x X                  a number\n"
                       "  --size SIZE            a size\n"
                       "  --dt f32|bf16          a type\n"
                       "  --mode MODE            a choice\n"
                       "  --on, --no-on          a switch with a very long help text\n"
                       "                         over two lines\n"
                       "  --count [N]            a count\n"
                       "  --on2                  ignored here\n"
                       "  --shared-n N           a shared long\n"
                       "  --help                 this text\n";
    CHECK(text && !strcmp(text, want), "the help page:\n%s", text ? text : "(none)");
    free(text);
}

static void print_train_help(void) {
    train_print_help();
}

static void print_eval_help(void) {
    const char *argv[] = {"eval", "--help"};
    eval_main(2, (char **)argv); /* MPI up and down, then the page */
}

static void test_train(void) {
    train_options o;
    const char *argv[] = {"train", "--config", "c.json", "--data", "d.bin", "--steps", "2000"};
    CHECK(train_parse_args(&o, FLAGS_COUNT(argv), (char **)argv) == 0, "train parses");
    CHECK(o.front.T == 1024 && o.steps == 2000 && o.lr == 3e-4 && o.min_lr_frac == 0.1 &&
              o.weight_decay == 0.1 && o.beta1 == 0.9 && o.beta2 == 0.95 && o.adam_eps == 1e-8 &&
              o.grad_clip == 1.0 && o.seed == 1234 && o.accum == 1 && o.ckpt_keep == 2 &&
              o.front.doc_sep == -1 && o.watchdog == 600 && o.on_nonfinite == NONFINITE_STOP &&
              o.max_skips == 5 && o.front.mopt.upipe_overlap == MODEL_UPIPE_OVERLAP_DEFAULT &&
              o.front.mopt.dtype == MEM_DTYPE_F32 && o.save_dtype == MEM_DTYPE_F32 &&
              !o.front.mopt.docs,
          "train's defaults (as its --help says)");
    CHECK(o.warmup == 100, "warm-up: 10%% of --steps, at most 100 (%ld)", o.warmup);
    CHECK(!strcmp(o.front.config, "c.json") && o.front.T == o.front.T,
          "the shared fields, both views");
    const char *more[] = {"train",  "--config",       "c",    "--data",      "d", "--doc-sep",
                          "0",      "--on-nonfinite", "skip", "--max-skips", "3", "--tile-mlp",
                          "--fsdp", "--dtype",        "bf16"};
    CHECK(train_parse_args(&o, FLAGS_COUNT(more), (char **)more) == 0, "train parses more");
    CHECK(o.front.mopt.docs && o.on_nonfinite == NONFINITE_SKIP && o.max_skips == 3 &&
              o.front.mopt.tile_mlp == -1 && o.front.mopt.fsdp &&
              o.front.mopt.dtype == MEM_DTYPE_BF16 && o.warmup == 1,
          "documents, skip, tiles, fsdp, bf16, warm-up of 10 steps");
    char *text = capture(print_train_help);
    CHECK(text && !strncmp(text, "usage: upipe train", 18) && strstr(text, "  --seq-len T  ") &&
              strstr(text, "  --help                 this text\n"),
          "train's help page");
    free(text);
    text = capture(print_eval_help);
    CHECK(text && !strncmp(text, "usage: upipe eval", 17) &&
              strstr(
                  text,
                  "  --checkpoint, --offload DIR, --offload-host-limit SIZE, --offload-keep K\n") &&
              strstr(text, "--windows N"),
          "eval's help page");
    free(text);
}

int main(void) {
    test_parse();
    test_list();
    test_help_page();
    test_train();
    return harness_finish("test_flags");
}
