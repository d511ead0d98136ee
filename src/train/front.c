/* front.c — the flags train and eval share: their table (front.h). The help texts are
 * training's; eval words some of them its own way on its help page (cmd/eval_cmd.c). */
#include "train/front.h"

#include "core/check.h"
#include "kernels/kernels.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AT(field) offsetof(front_options, field)

static const flag_spec g_front_flags[] = {
    /* model and data */
    {.name = "config",
     .arg = "FILE",
     .kind = FLAG_STRING,
     .off = AT(config),
     .help = "HF LlamaForCausalLM config.json (required)"},
    {.name = "data",
     .arg = "FILE",
     .kind = FLAG_STRING,
     .off = AT(data),
     .help = "llm.c token shard (required but with --dry-run; make one\n"
             "with `upipe data`)"},
    {.name = "seq-len",
     .arg = "T",
     .kind = FLAG_LONG,
     .off = AT(T),
     .lo = 1,
     .hi = 1L << 30,
     .def = 1024,
     .help = "tokens per sequence (default 1024); step k reads the T+1\n"
             "tokens at k*T, wrapping around at the end of the shard\n"
             "(above the config's max_position_embeddings: a warning)"},
    {.name = "doc-sep",
     .arg = "S",
     .kind = FLAG_LONG,
     .off = AT(doc_sep),
     .lo = 0,
     .hi = INT32_MAX,
     .def = -1,
     .help = "packed documents: every token S opens a document (like a BOS\n"
             "token); a token attends only within its document, RoPE\n"
             "positions restart at its start, targets equal to S are not\n"
             "counted. S must be below vocab_size (absent from --data: a\n"
             "warning)"},
    {.name = "loss-mask",
     .arg = "FILE",
     .kind = FLAG_STRING,
     .off = AT(loss_mask),
     .help = "a loss-mask shard aligned with --data (`upipe data jsonl\n"
             "--mask-output`): target t counts only where its byte is 1 (a\n"
             "step that counts no target: a warning, once)"},
    {.name = "dtype",
     .arg = "f32|bf16",
     .kind = FLAG_DTYPE,
     .off = AT(mopt.dtype),
     .def = MEM_DTYPE_F32,
     .help = "element type of the stored tensors (default f32). bf16: master\n"
             "weights, gradients and AdamW moments fp32, a bf16 copy of the\n"
             "weights for the matmuls (gathered in bf16 under --fsdp),\n"
             "activations, checkpoints, the offload store and the attention's\n"
             "q/k/v/o and exchanges bf16; statistics and loss tiles fp32"},
    /* outputs */
    {.name = "mem-report",
     .arg = "FILE",
     .kind = FLAG_STRING,
     .off = AT(mem_report),
     .help = "JSON memory report: peak_bytes, rss_peak_bytes,\n"
             "offloaded_peak_bytes, categories (max over ranks)"},
    {.name = "trace",
     .arg = "FILE",
     .kind = FLAG_STRING,
     .off = AT(trace),
     .help = "a profiler trace (Chrome / Perfetto JSON: open it in\n"
             "ui.perfetto.dev): spans per rank and thread for the layers,\n"
             "UPipe stages, all-to-alls, FSDP, offload I/O, loss tiles and\n"
             "the optimizer, with bytes (cost: well under 1% of a step);\n"
             "written as the run goes: a killed or failed run leaves the\n"
             "trace so far (a JSON array the viewers open as it is)"},
    {.name = "quiet",
     .kind = FLAG_SET,
     .off = AT(quiet),
     .help = "no summary and no per-step lines on the terminal"},
    /* memory */
    {.name = "checkpoint",
     .kind = FLAG_SET,
     .off = AT(mopt.checkpoint),
     .help = "keep only each layer's input, recompute the layer in backward"},
    {.name = "offload",
     .arg = "DIR",
     .kind = FLAG_STRING,
     .off = AT(mopt.offload_dir),
     .help = "move the layer inputs to a file in DIR (unlinked at once), back\n"
             "one layer ahead of backward; implies --checkpoint. On a GPU\n"
             "they go to pinned host memory instead, copied out and back in\n"
             "while the layers compute (the GPU keeps two)"},
    {.name = "offload-host-limit",
     .arg = "SIZE",
     .kind = FLAG_SIZE,
     .off = AT(mopt.offload_host_limit),
     .help = "with --offload: host memory for the layer inputs (pinned on a\n"
             "GPU; the ones past it go to the file in DIR). On the CPU it\n"
             "sends them through the GPU's path (host memory, then the file)"},
    {.name = "offload-keep",
     .arg = "K",
     .kind = FLAG_INT,
     .off = AT(mopt.offload_keep),
     .lo = 2,
     .hi = 1 << 20,
     .help = "with --offload on that path: the last K layers' inputs stay on\n"
             "the GPU (default 2: the pair the others pass through)"},
    {.name = "tile-mlp",
     .arg = "[N]",
     .kind = FLAG_COUNT_OPT,
     .off = AT(mopt.tile_mlp),
     .help = "run the MLP over tiles of N tokens (default N: hidden_size)"},
    {.name = "tile-loss",
     .arg = "[N]",
     .kind = FLAG_COUNT_OPT,
     .off = AT(mopt.tile_loss),
     .help = "final norm, LM head and loss over tiles of N tokens, the\n"
             "(T, vocab) logits never exist (default N: hidden_size)"},
    {.name = "upipe-heads",
     .arg = "U",
     .kind = FLAG_INT,
     .off = AT(mopt.U),
     .lo = 1,
     .hi = 1 << 20,
     .help = "attention in stages of U query heads (UPipe; U/P per rank);\n"
             "attention memory shrinks by U/num_attention_heads"},
    {.name = "upipe-overlap",
     .kind = FLAG_SET,
     .off = AT(mopt.upipe_overlap),
     .def = MODEL_UPIPE_OVERLAP_DEFAULT,
     .help = "with --upipe-heads, where a context-parallel group spans\n"
             "nodes: exchange the next stage's inputs (q, k, v; o, do) and\n"
             "the last stage's outputs (o; dq, dk, dv) while this stage's\n"
             "attention runs, on more stage buffers (category attention);\n"
             "same results to the bit. Off where a group shares a node (the\n"
             "exchange is a copy there: nothing to hide; default: off)"},
    {.name = "no-upipe-overlap",
     .kind = FLAG_CLEAR,
     .off = AT(mopt.upipe_overlap),
     .help = NULL /* on --upipe-overlap's line */},
    {.name = "upipe-overlap-on-node",
     .kind = FLAG_SET,
     .off = AT(mopt.upipe_overlap_node),
     .help = "the pipe also where a group shares a node (for tests and\n"
             "measurements: it is slower there)"},
    {.name = "dry-run",
     .kind = FLAG_SET,
     .off = AT(dry_run),
     .help = "print the memory plan per category and exit (with\n"
             "--mem-report, write it in the report's JSON schema)"},
    {.name = "mem-limit",
     .arg = "SIZE",
     .kind = FLAG_SIZE,
     .off = AT(mem_limit),
     .help = "refuse, before allocating, a run whose plan exceeds SIZE bytes\n"
             "per rank (suffixes KiB MiB GiB, KB MB GB: e.g. 6GiB)"},
    {.name = "host-mem-limit",
     .arg = "SIZE",
     .kind = FLAG_SIZE,
     .off = AT(host_mem_limit),
     .help = "refuse, before allocating, a run whose host memory (ordinary\n"
             "and pinned: on a GPU run, what --offload-optimizer moves out\n"
             "of the GPU) exceeds SIZE bytes per rank; --dry-run prints the\n"
             "host's line against it (or against this machine's memory)"},
    {.name = "device",
     .arg = "cpu|cuda",
     .kind = FLAG_STRING,
     .off = AT(device),
     .help = "where the step runs (default cpu). cuda: an NVIDIA GPU (the\n"
             "CUDA backend, libupipe_cuda.so beside upipe), the local rank's\n"
             "modulo the node's GPUs; ranks exchange through NCCL where each\n"
             "owns its GPU, else through pinned host memory over MPI\n"
             "(UPIPE_COMM); the model's tensors in GPU memory, --dry-run and\n"
             "--mem-limit plan the GPU's memory (each rank its share of a GPU\n"
             "that ranks share)"},
    {.name = "device-mem",
     .arg = "SIZE",
     .kind = FLAG_SIZE,
     .off = AT(device_mem),
     .help = "with --dry-run --device cuda: plan for a GPU with SIZE of free\n"
             "memory, without one (a job planned before it is queued, on a\n"
             "machine without a GPU; e.g. 139GiB for an H200)"},
    /* parallelism and the machine */
    {.name = "cp",
     .arg = "P",
     .kind = FLAG_INT,
     .off = AT(cp),
     .lo = 1,
     .hi = 1 << 20,
     .help = "context-parallel degree: each sequence is split over P\n"
             "consecutive ranks (Ulysses); R/P replicas train on different\n"
             "sequences (default: P = R, one sequence over all ranks)"},
    {.name = "fsdp",
     .kind = FLAG_SET,
     .off = AT(mopt.fsdp),
     .help = "shard parameters, gradients and AdamW state over all ranks\n"
             "(ZeRO-3): each layer is gathered before its forward and\n"
             "backward and its gradients reduce-scattered after"},
    {.name = "threads",
     .arg = "N",
     .kind = FLAG_INT,
     .off = AT(threads),
     .lo = 1,
     .hi = 1024,
     .help = "OpenMP/OpenBLAS threads per rank (default: OMP_NUM_THREADS,\n"
             "else the cores divided by the ranks on this node); more\n"
             "threads on a node than cores gives a warning"},
};

flag_table front_table(front_options *o) {
    return (flag_table){g_front_flags, FLAGS_COUNT(g_front_flags), o};
}

void front_finish(front_options *o) {
    o->mopt.docs = o->doc_sep >= 0;
}

/* The ranks on this rank's GPU (those of its node with its device index: the module takes the
 * local rank modulo the node's devices) and the least free memory of the job's GPUs, read after
 * every rank started its backend (the comm_any before) and before any allocates (the collective
 * here), so each reading already lacks the other ranks' contexts and none lacks their plans. */
static void gpu_layout(front_options *o, const backend_ops *be, comm_ctx *c) {
    unsigned long long *dev = calloc((size_t)c->R + 1, sizeof *dev);
    UP_CHECK(dev, "out of memory");
    size_t free_b = 0, total = 0;
    be->mem_info(&free_b, &total);
    dev[c->rank] = (unsigned long long)be->device + 1;
    dev[c->R] = ~(unsigned long long)free_b; /* the max of the complements: the min */
    comm_max_u64(c, dev, c->R + 1);
    o->gpu_free = ~dev[c->R];
    o->gpu_share = 0;
    for (int r = 0; r < c->R; r++)
        o->gpu_share += c->node_of[r] == c->node && dev[r] == dev[c->rank];
    free(dev);
}

/* The NCCL communicators of the world and of the CP group (comm_ctx.nccl_world, nccl_cp): each
 * group's first rank makes the id, MPI carries it, every rank joins. A failure on any rank stops
 * every rank with its line. */
static void nccl_start(const backend_ops *be, comm_ctx *c) {
    char id[BACKEND_COLL_ID_BYTES] = {0}, err[512] = "";
    const char *fix = ": UPIPE_COMM=host exchanges through host memory instead";
    for (int g = 0; g < 1 + (c->P > 1); g++) { /* the world, then the CP group */
        int first = g ? c->cp_rank == 0 : c->rank == 0, bad = 0;
        if (!be->coll_unique_id)
            bad = snprintf(err, sizeof err, "this CUDA module has no NCCL") > 0;
        else if (first)
            bad = be->coll_unique_id(id, err, sizeof err) != 0;
        if (comm_any(c, bad))
            up_die_agreed(bad ? strncat(err, fix, sizeof err - strlen(err) - 1) : NULL);
        comm_bcast_bytes(c, g, id, sizeof id);
        void *h = be->coll_init(id, g ? c->P : c->R, g ? c->cp_rank : c->rank, err, sizeof err);
        if (comm_any(c, h == NULL))
            up_die_agreed(h ? NULL : strncat(err, fix, sizeof err - strlen(err) - 1));
        if (g)
            c->nccl_cp = h;
        else
            c->nccl_world = h;
    }
}

void front_load_device(front_options *o, comm_ctx *c) {
    char err[512] = "";
    const backend_ops *be = NULL;
    if (!o->device_mem)
        be = backend_load(o->device, err, sizeof err);
    else if (o->dry_run && o->device && !strcmp(o->device, "cuda"))
        be = backend_plan_cuda((size_t)o->device_mem);
    else
        snprintf(err, sizeof err,
                 "--device-mem plans a GPU without one: it goes with --dry-run --device cuda (a "
                 "run on a GPU reads the GPU's free memory; --mem-limit lowers it)");
    if (be && be != &backend_cpu && err[0]) be = NULL;
    if (comm_any(c, be == NULL)) up_die_agreed(be ? NULL : err);
    o->mopt.be = be;
    const char *tr = getenv("UPIPE_COMM");
    if (tr && strcmp(tr, "nccl") && strcmp(tr, "host"))
        up_die_all("UPIPE_COMM=%s: use nccl (the GPUs' own collectives) or host (through host "
                   "memory over MPI)",
                   tr);
    if (tr && !strcmp(tr, "nccl") && be->space != MEM_SPACE_DEVICE)
        up_die_all("UPIPE_COMM=nccl exchanges between GPUs: it goes with --device cuda");
    if (be->space == MEM_SPACE_DEVICE) {
        gpu_layout(o, be, c);
        /* NCCL where every rank owns its GPU (it refuses two ranks on one), unless told */
        int own = !comm_any(c, o->gpu_share > 1);
        if (tr ? !strcmp(tr, "nccl") : c->R > 1 && own && be->coll_init) nccl_start(be, c);
    }
    const char *st = getenv("UPIPE_COMM_STAGE");
    c->staged =
        c->R > 1 && !c->nccl_world && (be->space != MEM_SPACE_HOST || (st && !strcmp(st, "1")));
}

void front_release_device(front_options *o, comm_ctx *c) {
    const backend_ops *be = o->mopt.be;
    if (c->nccl_cp) be->coll_destroy(c->nccl_cp);
    if (c->nccl_world) be->coll_destroy(c->nccl_world);
    c->nccl_cp = c->nccl_world = NULL;
}

void front_require_data(const front_options *o) {
    if (!o->data)
        up_die_all("--data FILE is required (make a shard with `upipe data text --input FILE "
                   "--output data.bin`)");
}

void front_check_kernels(comm_ctx *c) {
    /* FNV-1a of the line without digits and dots (the measured ratios; the names keep their
     * letters), and its complement: the maximum of both equals a rank's own only if all agree */
    /* oneDNN's sgemm against OpenBLAS is a close call on some hosts (measured 0.8-1.8x with 4
     * ranks starting at once on 2 cores): every rank takes oneDNN only if every rank measured it
     * faster, so that the ranks agree (a choice that can be changed in the process; the OpenBLAS
     * core cannot, so it is compared below) */
    if (!getenv("UPIPE_SGEMM")) sgemm_agree(comm_min_int(c, sgemm_uses_onednn()));
    /* the same for the row that must win a measurement (VDPBF16PS against FMA): a close call
     * measured on loaded cores may fall either way on each rank */
    kernel_path_agree(!comm_any(c, !kernel_path_won()));
    const char *line = kernel_path_name();
    unsigned long long h[2] = {1469598103934665603ull, 0};
    for (const char *p = line; *p; p++)
        if ((*p < '0' || *p > '9') && *p != '.')
            h[0] = (h[0] ^ (unsigned char)*p) * 1099511628211ull;
    h[1] = ~h[0];
    unsigned long long m[2] = {h[0], h[1]};
    comm_max_u64(c, m, 2);
    if (m[0] != h[0] || m[1] != h[1])
        up_die_all("the ranks chose different kernels (they measure their CPU at start; one rank "
                   "has: %s): force the same on every rank with UPIPE_KERNEL, UPIPE_BLAS_CORE and "
                   "UPIPE_SGEMM (upipe train --help)",
                   line);
}
