/* backend.c — finding a backend by name (backend.h): the CPU's is built in; the CUDA one is a
 * shared module loaded at run time, so a binary without CUDA libraries starts everywhere. The
 * module is libupipe_cuda.so beside the program, or the file UPIPE_CUDA_MODULE names. */
#include "kernels/backend.h"

#include "core/watchdog.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The folder of the running program, with a trailing '/', or "" when unknown. */
static void exe_dir(char *dir, size_t len) {
    ssize_t n = readlink("/proc/self/exe", dir, len - 1);
    dir[n > 0 ? n : 0] = 0;
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[1] = 0;
    else
        dir[0] = 0;
}

static const backend_ops *load_cuda(char *err, size_t errlen) {
    static const backend_ops *loaded;
    if (loaded) return loaded;
    char path[4096];
    const char *env = getenv("UPIPE_CUDA_MODULE"); /* a module elsewhere (tests, benchmarks) */
    if (env && env[0]) {
        snprintf(path, sizeof path, "%s", env);
    } else {
        exe_dir(path, sizeof path - 32);
        strcat(path, "libupipe_cuda.so");
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    char first[512] = "";
    if (!h) {
        snprintf(first, sizeof first, "%s", dlerror());
        h = dlopen("libupipe_cuda.so", RTLD_NOW | RTLD_LOCAL);
    }
    if (!h) {
        /* the first message names the module or a library it needs that is missing */
        snprintf(err, errlen,
                 "--device cuda: cannot load the CUDA backend (%s); build upipe where nvcc is "
                 "found (CUDA 13) and put CUDA's libraries on LD_LIBRARY_PATH",
                 first);
        return NULL;
    }
    typedef const backend_ops *(*entry_fn)(char *, size_t);
    entry_fn entry = (entry_fn)dlsym(h, "upipe_backend_cuda");
    if (!entry) {
        snprintf(err, errlen, "--device cuda: %s is not upipe's CUDA backend: rebuild upipe", path);
        return NULL;
    }
    char why[256] = "";
    const backend_ops *be = entry(why, sizeof why);
    if (!be) {
        snprintf(err, errlen, "--device cuda: %s", why);
        return NULL;
    }
    if (be->abi != BACKEND_ABI) {
        snprintf(err, errlen,
                 "--device cuda: the CUDA backend has interface %d, this upipe %d: rebuild both",
                 be->abi, BACKEND_ABI);
        return NULL;
    }
    if (be->set_wait_hooks) be->set_wait_hooks(watchdog_enter_device, watchdog_leave);
    mem_set_space(MEM_SPACE_DEVICE, be->alloc, be->free);
    mem_set_space(MEM_SPACE_PINNED, be->alloc_pinned, be->free_pinned);
    return loaded = be;
}

static size_t g_plan_free;
static void plan_mem_info(size_t *free_b, size_t *total) {
    if (free_b) *free_b = g_plan_free;
    if (total) *total = g_plan_free;
}
static const char *plan_describe(void) {
    return "no GPU: planned with --device-mem";
}
static size_t plan_module_bytes(void) {
    return BACKEND_CUDA_LT_WORKSPACE + BACKEND_CUDA_GEMM_PANEL;
}
static size_t plan_workspace_floats(mem_dtype dt, size_t maxw, size_t C) {
    (void)dt, (void)maxw, (void)C;
    return 0;
}
static size_t plan_attention_workspace_floats(mem_dtype dt, int T, int NH, int NKV, int HS) {
    (void)dt, (void)T, (void)NH, (void)NKV, (void)HS;
    return 0;
}

const backend_ops *backend_plan_cuda(size_t free_bytes) {
    static backend_ops be = {
        .abi = BACKEND_ABI,
        .name = "cuda",
        .space = MEM_SPACE_DEVICE,
        .mem_info = plan_mem_info,
        .describe = plan_describe,
        .module_bytes = plan_module_bytes,
        .devices = 1, /* the one GPU --device-mem describes */
        .workspace_floats = plan_workspace_floats,
        .attention_workspace_floats = plan_attention_workspace_floats,
    };
    g_plan_free = free_bytes;
    return &be;
}

const backend_ops *backend_load(const char *name, char *err, size_t errlen) {
    if (!name || !strcmp(name, "cpu")) return &backend_cpu;
    if (!strcmp(name, "cuda")) return load_cuda(err, errlen);
    snprintf(err, errlen, "--device %s: unknown device; use cpu or cuda", name);
    return NULL;
}
