/* flags.h — a command's flags as tables: one parser and one --help generator (DESIGN.md §6).
 *
 * A row says everything about one flag: its name, its value's name in --help, how the value is
 * validated and where it is stored (a kind and an offset into the options struct the table
 * describes), its default and its help text. A command parses with a list of tables, each with
 * the struct its offsets point into: its own flags first, then the ones it shares with other
 * commands (train/front.h). A name in an earlier table hides the same name in a later one (eval
 * accepts --checkpoint and --offload and ignores them). --help (and -h) is built in.
 *
 * Every bad flag stops every rank with a sentence that names the flag and says what it expects
 * (up_die_all), so call the parser on every rank; without MPI it stops the process alike. The
 * messages: "unknown flag '--x': see upipe CMD --help", "--x needs a value: ...", "--x needs a
 * value but is followed by the flag --y: ...", "unexpected argument 'v': flags are --name value
 * (...)", "--x expects an integer in [lo, hi], got 'v'", "... a number in [lo, hi] ...", "... a
 * size such as 6GiB, 512MiB or 1000000 (bytes) ...", "... f32 or bf16 ...", "... a or b ...". */
#ifndef UP_FLAGS_H
#define UP_FLAGS_H

#include <stddef.h>

typedef enum {
    FLAG_STRING,    /* const char *: the value as given (a path); default NULL */
    FLAG_LONG,      /* long in [lo, hi] */
    FLAG_INT,       /* int in [lo, hi] */
    FLAG_U64,       /* uint64_t in [lo, hi] */
    FLAG_DOUBLE,    /* double in [min, max] */
    FLAG_SIZE,      /* unsigned long long: bytes, with suffixes (6GiB, 512MiB; up_parse_bytes) */
    FLAG_DTYPE,     /* mem_dtype: f32 or bf16 */
    FLAG_CHOICE,    /* int: the index of the value in choices */
    FLAG_SET,       /* int: 1 (a switch) */
    FLAG_CLEAR,     /* int: 0 (the --no- side of a switch; its default is the other side's) */
    FLAG_COUNT_OPT, /* int: --flag N, --flag=N (N in [1, 2^30]), or --flag alone: -1 */
    FLAG_IGNORED,   /* accepted (with a value when arg is set) and ignored */
    FLAG_LIST,      /* flag_list: --flag A B C, the values up to the next flag; repeated
                       flags append (--flag A --flag B) */
    FLAG_HELP       /* --help or -h: the parser returns 1 */
} flag_kind;

/* A FLAG_LIST's values: argv strings, in order; v is malloc'd by the parser (free(v)); an
 * argument that starts with '-' (but "-" itself) ends the list. */
typedef struct {
    const char **v;
    int n;
} flag_list;

typedef struct {
    const char *name; /* without the dashes: "seq-len" */
    const char *arg;  /* the value's name in --help ("T", "f32|bf16", "[N]"); NULL: no value */
    flag_kind kind;
    size_t off;      /* where the value goes: offsetof(the table's struct, field) */
    long lo, hi;     /* FLAG_LONG, FLAG_INT, FLAG_U64: the accepted range */
    double min, max; /* FLAG_DOUBLE: the accepted range */
    double def;      /* the value before any flag (numbers, FLAG_SET, FLAG_CHOICE's index;
                        integers exact in a double); 0 for the rest */
    const char *const *choices; /* FLAG_CHOICE: the accepted values, NULL-terminated */
    const char *help;           /* --help text, lines split by '\n' (without the indentation) */
} flag_spec;

/* One table and the struct its offsets point into. */
typedef struct {
    const flag_spec *flags;
    int n;
    void *base;
} flag_table;

/* One line of a command's --help page, in order. flags: one row's name, or several separated by
 * spaces shown on one line ("beta1 beta2": "--beta1 X, --beta2 X"); text: the help (NULL: the
 * first row's). flags NULL: text printed as it is (a heading, a paragraph, "" a blank line). */
typedef struct {
    const char *flags;
    const char *text;
} flag_help_line;

/* Stores every row's default into its table's struct (the rest of the struct is left as is:
 * zero it first). */
void flags_defaults(const flag_table *tables, int ntables);
/* Parses argv (argv[0] is the command, e.g. "train") against the tables, into their structs
 * (defaults already stored). cmd names the command in the messages ("see upipe train --help").
 * Returns 1 for --help or -h (nothing printed), else 0; a bad flag stops every rank. Uses
 * getopt_long (an unambiguous prefix of a name is accepted) without reordering argv: the first
 * argument that is neither a flag nor a flag's value is refused. */
int flags_parse(const char *cmd, const flag_table *tables, int ntables, int argc, char **argv);
/* Prints a --help page on stdout: "  --name ARG" in a column of 21, the help beside it (on the
 * next line when the name is longer), continuation lines indented to the help's column. Every
 * row of the tables must appear on the page (checked). */
void flags_print_help(const flag_table *tables, int ntables, const flag_help_line *page,
                      int nlines);

#define FLAGS_COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))
/* A number as a string literal, for help texts: FLAGS_STR(TRAIN_VAL_WINDOWS) is "4". */
#define FLAGS_STR_(x) #x
#define FLAGS_STR(x) FLAGS_STR_(x)

#endif
