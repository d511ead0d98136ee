/* upipe — long-sequence Llama training on CPUs (and a GPU, with the CUDA module), in fp32 or
 * bf16 (--dtype). `upipe train ...`, `upipe eval ...`, `upipe plot ...`, `upipe data ...`,
 * `upipe export ...`: each command parses its own flags, from tables (core/flags.h). */
#include "cmd/data_cmd.h"
#include "cmd/eval_cmd.h"
#include "cmd/export_cmd.h"
#include "cmd/plot_cmd.h"
#include "core/check.h"
#include "core/fileio.h"
#include "kernels/kernels.h"
#include "train/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UPIPE_VERSION "0.1.0"

static void print_usage(void) {
    printf(
        "upipe %s — train Llama-style transformers on very long sequences (CPU or GPU, fp32 "
        "or bf16, MPI)\n\n"
        "usage:\n"
        "  upipe train --config config.json --data tokens.bin [flags]   train a model\n"
        "  upipe eval --config C --init W|--ckpt DIR --data D [flags]   evaluate a model\n"
        "  upipe plot --log train.jsonl --svg loss.svg                  loss curves as SVG\n"
        "  upipe data text --input FILE ... --output S.bin [flags]      text -> token shard\n"
        "  upipe data jsonl --input F.jsonl ... --output S.bin [flags]  JSON lines -> shard\n"
        "  upipe data recall --output S.bin --tokens N [flags]          a recall corpus\n"
        "  upipe data decode --tokenizer DIR --input S.bin [flags]      a shard's tokens as text\n"
        "  upipe export --ckpt DIR --output OUT [flags]                 checkpoint -> HF folder\n"
        "  upipe --version\n\n"
        "Run `upipe <command> --help` for the flags of each command (`upipe data text --help`:\n"
        "one subcommand of data).\n"
        "Several ranks: mpiexec -n R upipe train|eval ...\n",
        UPIPE_VERSION);
}

int main(int argc, char **argv) {
    /* the commands that multiply matrices measure OpenBLAS's core first (it may re-execute the
     * program with OPENBLAS_CORETYPE set, so before MPI starts; its probe child runs the
     * program without arguments); data, export and plot do not */
    if (getenv("UPIPE_BLAS_PROBE") ||
        (argc >= 2 &&
         (!strcmp(argv[1], "train") || !strcmp(argv[1], "eval") || !strcmp(argv[1], "--version"))))
        blas_check_core(argv);
    up_tmp_install_signal_cleanup(); /* a signal never leaves a temporary file behind */
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        print_usage();
        return argc < 2 ? 1 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        char err[256];
        if (kernel_path_init(err, sizeof err) != 0) up_die("%s", err);
        printf("upipe %s\nkernels: %s\nblas: %s\n", UPIPE_VERSION, kernel_path_name(),
               blas_describe());
        const backend_ops *cu = backend_load("cuda", err, sizeof err);
        if (cu)
            printf("%s\n", cu->describe());
        else
            printf("cuda: not available (%s)\n", err);
        return 0;
    }
    if (!strcmp(argv[1], "data")) return data_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "train")) return train_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "eval")) return eval_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "export")) return export_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "plot")) return plot_main(argc - 1, argv + 1);
    up_die("unknown command '%s': use `upipe train`, `upipe eval`, `upipe plot`, `upipe data` "
           "or `upipe export` (see upipe --help)",
           argv[1]);
}
