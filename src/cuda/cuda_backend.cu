/* cuda_backend.cu — the CUDA module's entry: upipe_backend_cuda (backend.h) picks the device,
 * creates the module's stream and cuBLASLt handle, lets each file set up what it caches, and
 * returns the ops table. Also the module's memory (device and pinned, zeroed), the copies in and
 * out (each waits for its stream: correct before clever), the version line, and cu_fail, which
 * stops the run with one line naming the call, the model's op (set_where) and CUDA's message.
 * cuDNN's version is read through dlopen, so this file does not link cuDNN itself. */
#include "cuda/cuda_int.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

cudaStream_t cu_stream;
cublasLtHandle_t cu_lt;
void *cu_lt_ws;
int cu_tf32;

/* Device bytes the other files hold beyond cu_lt_ws. */
extern "C" size_t cu_gemm_scratch_bytes(void);
extern "C" size_t cu_elem_scratch_bytes(void);
extern "C" size_t cu_attention_scratch_bytes(void);

/* ---- errors -----------------------------------------------------------------------------------
 */

static struct {
    char what[64];
    int layer;
    long step;
} cu_where = {"", -1, -1};

/* UPIPE_CUDA_TEST_HANG=S (tests/scripts/gpu.sh only): the backward of step S starts with a kernel
 * that never ends, for the watchdog to find (-1: off). */
static long cu_test_hang = -1;
__global__ void k_hang(volatile int *flag) {
    while (!*flag) {
    }
}

static void cu_set_where(const char *what, int layer, long step) {
    snprintf(cu_where.what, sizeof cu_where.what, "%s", what ? what : "");
    cu_where.layer = layer;
    cu_where.step = step;
    if (cu_test_hang >= 0 && step == cu_test_hang && !strcmp(cu_where.what, "the backward")) {
        cu_test_hang = -1;
        void *flag = NULL; /* zeroed, never set */
        CU_CHECK(cudaMalloc(&flag, sizeof(int)));
        CU_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), cu_stream));
        k_hang<<<1, 1, 0, cu_stream>>>((volatile int *)flag);
        CU_LAUNCHED("k_hang");
    }
}

/* ---- the host's waits, marked for the watchdog ------------------------------------------------
 */

static void (*cu_wait_begin)(const char *what);
static void (*cu_wait_end)(void);
static char cu_wait_what[128];

static void cu_set_wait_hooks(void (*begin)(const char *what), void (*end)(void)) {
    cu_wait_begin = begin;
    cu_wait_end = end;
}

static void wait_mark(void) {
    if (!cu_wait_begin) return;
    if (cu_where.layer >= 0)
        snprintf(cu_wait_what, sizeof cu_wait_what, "%s at layer %d", cu_where.what,
                 cu_where.layer);
    else
        snprintf(cu_wait_what, sizeof cu_wait_what, "%s", cu_where.what[0] ? cu_where.what : "an op");
    cu_wait_begin(cu_wait_what);
}

void cu_wait_stream(cudaStream_t s) {
    wait_mark();
    cudaError_t e;
    if (cu_coll_live()) { /* NCCL's ops may be queued: a lost peer is an error to poll for */
        while ((e = cudaStreamQuery(s)) == cudaErrorNotReady) {
            cu_coll_poll();
            usleep(50);
        }
    } else {
        e = cudaStreamSynchronize(s);
    }
    if (cu_wait_end) cu_wait_end();
    if (e != cudaSuccess) cu_fail("cudaStreamSynchronize", cudaGetErrorString(e), __FILE__, __LINE__);
}

void cu_wait_event(cudaEvent_t ev) {
    wait_mark();
    cudaError_t e = cudaEventSynchronize(ev);
    if (cu_wait_end) cu_wait_end();
    if (e != cudaSuccess) cu_fail("cudaEventSynchronize", cudaGetErrorString(e), __FILE__, __LINE__);
}

void cu_wait_device(void) {
    wait_mark();
    cudaError_t e = cudaDeviceSynchronize();
    if (cu_wait_end) cu_wait_end();
    if (e != cudaSuccess) cu_fail("cudaDeviceSynchronize", cudaGetErrorString(e), __FILE__, __LINE__);
}

void cu_fail(const char *op, const char *what, const char *file, int line) {
    const char *base = file ? strrchr(file, '/') : NULL;
    base = base ? base + 1 : file ? file : "?";
    char at[160] = "";
    size_t n = 0;
    if (cu_where.layer >= 0)
        n += (size_t)snprintf(at + n, sizeof at - n, " at layer %d", cu_where.layer);
    if (cu_where.step >= 0 && n < sizeof at)
        n += (size_t)snprintf(at + n, sizeof at - n, "%s step %ld", n ? "," : " at", cu_where.step);
    if (cu_where.what[0] && n < sizeof at)
        snprintf(at + n, sizeof at - n, " during %s", cu_where.what);
    fprintf(stderr, "upipe: CUDA error in %s (%s:%d)%s: %s\n", op ? op : "?", base, line, at,
            what ? what : "unknown error");
    fflush(stderr);
    exit(1);
}

void *cu_scratch_grow(void **buf, size_t *have, size_t bytes) {
    if (bytes <= *have) return *buf;
    size_t mib = (size_t)1 << 20, want = (bytes + mib - 1) / mib * mib;
    if (*buf) {
        cu_wait_stream(cu_stream);
        CU_CHECK(cudaFree(*buf));
        *buf = NULL;
        *have = 0;
    }
    CU_CHECK(cudaMalloc(buf, want));
    *have = want;
    return *buf;
}

const char *cublasLt_status_name(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS:
        return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "CUBLAS_STATUS_NOT_INITIALIZED (no cuBLASLt handle)";
    case CUBLAS_STATUS_ALLOC_FAILED:
        return "CUBLAS_STATUS_ALLOC_FAILED (out of memory)";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "CUBLAS_STATUS_INVALID_VALUE (a bad shape or argument)";
    case CUBLAS_STATUS_ARCH_MISMATCH:
        return "CUBLAS_STATUS_ARCH_MISMATCH (not on this GPU)";
    case CUBLAS_STATUS_MAPPING_ERROR:
        return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
        return "CUBLAS_STATUS_EXECUTION_FAILED (a kernel failed)";
    case CUBLAS_STATUS_INTERNAL_ERROR:
        return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return "CUBLAS_STATUS_NOT_SUPPORTED (types or layout)";
    case CUBLAS_STATUS_LICENSE_ERROR:
        return "CUBLAS_STATUS_LICENSE_ERROR";
    default:
        return "an unknown cuBLAS status";
    }
}

/* ---- memory and copies ------------------------------------------------------------------------
 */

static void *cu_alloc(size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError(); // not sticky: clear it so a later check does not see it
        return NULL;
    }
    CU_CHECK(cudaMemsetAsync(p, 0, bytes, cu_stream));
    cu_wait_stream(cu_stream);
    return p;
}

static void cu_free(void *p) {
    if (!p) return;
    cu_wait_stream(cu_stream);
    CU_CHECK(cudaFree(p));
}

static void *cu_alloc_pinned(size_t bytes) {
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    memset(p, 0, bytes);
    return p;
}

static void cu_free_pinned(void *p) {
    if (p) CU_CHECK(cudaFreeHost(p));
}

/* The host side may be pageable: the copy is staged by the driver; waiting makes it complete. */
static void cu_to_dev(void *dst, const void *host_src, size_t bytes) {
    if (!bytes) return;
    CU_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, cu_stream));
    cu_wait_stream(cu_stream);
}

static void cu_to_host(void *host_dst, const void *src, size_t bytes) {
    if (!bytes) return;
    CU_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, cu_stream));
    cu_wait_stream(cu_stream);
}

/* ---- the copy queue: its own stream, an event per tag -------------------------------------- */

static cudaStream_t cu_copy_stream;
static cudaEvent_t cu_issued;   /* the compute stream's position when a copy is issued */
static cudaEvent_t *cu_tag_ev;  /* (cu_ntags) each tag's latest copy's completion */
static int cu_ntags;

static cudaEvent_t tag_event(int tag) {
    if (tag < 0) cu_fail("copy queue", "a negative tag", __FILE__, __LINE__);
    if (tag >= cu_ntags) {
        int n = tag + 1 > 2 * cu_ntags ? tag + 1 : 2 * cu_ntags;
        cudaEvent_t *ev = (cudaEvent_t *)realloc(cu_tag_ev, sizeof *ev * (size_t)n);
        if (!ev) cu_fail("copy queue", "out of host memory", __FILE__, __LINE__);
        for (int i = cu_ntags; i < n; i++)
            CU_CHECK(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming));
        cu_tag_ev = ev;
        cu_ntags = n;
    }
    return cu_tag_ev[tag];
}

/* The copy stream waits for what the compute stream holds now (after < 0) or held at mark
 * `after`, copies, and tags the end. */
static void queue_copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, int tag,
                       int after) {
    cudaEvent_t done = tag_event(tag), start = after >= 0 ? tag_event(after) : NULL;
    if (!cu_copy_stream)
        CU_CHECK(cudaStreamCreateWithFlags(&cu_copy_stream, cudaStreamNonBlocking));
    if (!start) {
        if (!cu_issued) CU_CHECK(cudaEventCreateWithFlags(&cu_issued, cudaEventDisableTiming));
        CU_CHECK(cudaEventRecord(cu_issued, cu_stream));
        start = cu_issued;
    }
    CU_CHECK(cudaStreamWaitEvent(cu_copy_stream, start, 0));
    if (bytes) CU_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, cu_copy_stream));
    CU_CHECK(cudaEventRecord(done, cu_copy_stream));
}

static void cu_copy_out(void *host_dst, const void *src, size_t bytes, int tag, int after) {
    queue_copy(host_dst, src, bytes, cudaMemcpyDeviceToHost, tag, after);
}
static void cu_copy_in(void *dst, const void *host_src, size_t bytes, int tag, int after) {
    queue_copy(dst, host_src, bytes, cudaMemcpyHostToDevice, tag, after);
}
static void cu_copy_mark(int tag) {
    CU_CHECK(cudaEventRecord(tag_event(tag), cu_stream));
}
static void cu_copy_wait(int tag) {
    CU_CHECK(cudaStreamWaitEvent(cu_stream, tag_event(tag), 0));
}
static void cu_copy_sync(int tag) {
    cu_wait_event(tag_event(tag));
}

static void cu_sync(void) {
    cu_wait_device();
}

static void cu_mem_info(size_t *free_b, size_t *total) {
    size_t f = 0, t = 0;
    CU_CHECK(cudaMemGetInfo(&f, &t));
    if (free_b) *free_b = f;
    if (total) *total = t;
}

static size_t cu_module_bytes(void) {
    return CU_LT_WS + cu_gemm_scratch_bytes() + cu_elem_scratch_bytes() +
           cu_attention_scratch_bytes() + cu_attention_tc_scratch_bytes();
}

static size_t cu_workspace_floats(mem_dtype dt, size_t maxw, size_t C) {
    (void)dt, (void)maxw, (void)C;
    return 0;
}

static size_t cu_attention_workspace_floats(mem_dtype dt, int T, int NH, int NKV, int HS) {
    (void)dt, (void)T, (void)NH, (void)NKV, (void)HS;
    return 0;
}

/* ---- the version line -------------------------------------------------------------------------
 */

static char cu_line[384];

static const char *cu_describe(void) {
    return cu_line;
}

/* cuDNN's version (major * 10000 + minor * 100 + patch for 9.x), 0 when it cannot be loaded. */
static size_t cudnn_version(void) {
    void *h = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!h) return 0;
    size_t (*get)(void) = (size_t(*)(void))dlsym(h, "cudnnGetVersion");
    size_t v = get ? get() : 0;
    dlclose(h);
    return v;
}

static double cu_peak;

/* The dense bf16 tensor rate of the datasheet: tensor FLOPs per SM and clock (Hopper 4096,
 * Ampere and Ada 2048 with fp32 accumulation... per the whitepapers) times the SMs and the boost
 * clock the datasheet uses: H100 and H200 SXM (132 SMs) are quoted at 1.83 GHz (989.4 TFLOP/s);
 * other parts at the clock the driver reports. */
static double peak_bf16(const cudaDeviceProp *p, int dev) {
    int khz = 0;
    cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev);
    double per_sm = p->major >= 9 ? 4096 : p->major == 8 ? (p->minor == 0 ? 2048 : 1024) : 512;
    double hz = p->major == 9 && p->multiProcessorCount == 132 ? 1.83e9 : khz * 1e3;
    return per_sm * p->multiProcessorCount * hz;
}

static void describe_build(int dev) {
    cudaDeviceProp p;
    CU_CHECK(cudaGetDeviceProperties(&p, dev));
    int rt = 0, drv = 0;
    CU_CHECK(cudaRuntimeGetVersion(&rt));
    CU_CHECK(cudaDriverGetVersion(&drv));
    size_t lt = cublasLtGetVersion(), dnn = cudnn_version();
    char dnn_s[32] = "not found";
    if (dnn) snprintf(dnn_s, sizeof dnn_s, "%zu.%zu.%zu", dnn / 10000, dnn / 100 % 100, dnn % 100);
    cu_peak = peak_bf16(&p, dev);
    snprintf(
        cu_line, sizeof cu_line,
        "cuda: %.120s, sm_%d%d, %d SMs, %.1f GiB; runtime %d.%d, driver %d.%d, cuBLAS %zu.%zu.%zu, "
        "cuDNN %s",
        p.name, p.major, p.minor, p.multiProcessorCount,
        (double)p.totalGlobalMem / (double)(1u << 30), rt / 1000, rt % 1000 / 10, drv / 1000,
        drv % 1000 / 10, lt / 10000, lt / 100 % 100, lt % 100, dnn_s);
}

/* ---- the entry --------------------------------------------------------------------------------
 */

static backend_ops cu_ops;

static void table_fill(backend_ops *o) {
    memset(o, 0, sizeof *o);
    o->abi = BACKEND_ABI, o->name = "cuda", o->space = MEM_SPACE_DEVICE;
    o->alloc = cu_alloc, o->free = cu_free;
    o->alloc_pinned = cu_alloc_pinned, o->free_pinned = cu_free_pinned;
    o->to_dev = cu_to_dev, o->to_host = cu_to_host, o->sync = cu_sync;
    o->copy_out = cu_copy_out, o->copy_in = cu_copy_in, o->copy_wait = cu_copy_wait;
    o->copy_mark = cu_copy_mark;
    o->copy_sync = cu_copy_sync;
    o->mem_info = cu_mem_info, o->describe = cu_describe, o->module_bytes = cu_module_bytes;
    o->set_where = cu_set_where, o->set_wait_hooks = cu_set_wait_hooks;
    o->coll_unique_id = cu_coll_unique_id, o->coll_init = cu_coll_init;
    o->coll_destroy = cu_coll_destroy, o->coll_alltoall = cu_coll_alltoall;
    o->coll_allgather = cu_coll_allgather, o->coll_reduce_scatter = cu_coll_reduce_scatter;
    o->coll_allreduce = cu_coll_allreduce;
    o->workspace_floats = cu_workspace_floats;
    o->zero = cu_zero, o->copy = cu_copy, o->add = cu_add, o->copy_rows = cu_copy_rows;
    o->matmul_forward = cu_matmul_forward, o->matmul_backward = cu_matmul_backward;
    o->matmul_forward_f32 = cu_matmul_forward_f32;
    o->matmul_backward_f32 = cu_matmul_backward_f32;
    o->embedding_forward = cu_embedding_forward, o->embedding_backward = cu_embedding_backward;
    o->rmsnorm_forward = cu_rmsnorm_forward, o->rmsnorm_backward = cu_rmsnorm_backward;
    o->rope_forward = cu_rope_forward, o->rope_backward = cu_rope_backward;
    o->swiglu_forward = cu_swiglu_forward, o->swiglu_backward = cu_swiglu_backward;
    o->attention_workspace_floats = cu_attention_workspace_floats;
    o->attention_forward = cu_attention_forward, o->attention_backward = cu_attention_backward;
    o->convert = cu_convert;
    o->cross_entropy_fused = cu_cross_entropy_fused, o->cross_entropy_rows = cu_cross_entropy_rows;
    o->zero_f32 = cu_zero_f32, o->sum_squares = cu_sum_squares;
    o->first_nonfinite = cu_first_nonfinite, o->adamw_update = cu_adamw_update;
}

/* A non-negative integer from the environment, or -1 (unset or not a number). */
static long env_index(const char *name) {
    const char *s = getenv(name);
    if (!s || !*s) return -1;
    char *end;
    long v = strtol(s, &end, 10);
    return *end || v < 0 ? -1 : v;
}

/* The device count, or 0 with err set. */
static int device_count(char *err, size_t errlen) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorInsufficientDriver) {
        int rt = 0, drv = 0;
        cudaRuntimeGetVersion(&rt);
        cudaDriverGetVersion(&drv);
        if (drv == 0) // no libcuda.so.1 at all: the runtime reports it as too old a driver
            snprintf(err, errlen, "no NVIDIA driver found (libcuda.so.1): no CUDA GPU here");
        else
            snprintf(err, errlen,
                     "the NVIDIA driver is older than CUDA runtime %d.%d (it supports CUDA %d.%d)",
                     rt / 1000, rt % 1000 / 10, drv / 1000, drv % 1000 / 10);
        return 0;
    }
    if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0)) {
        snprintf(err, errlen, "no CUDA GPU found");
        return 0;
    }
    if (e != cudaSuccess) {
        snprintf(err, errlen, "CUDA cannot start: %s (%s)", cudaGetErrorString(e),
                 cudaGetErrorName(e));
        return 0;
    }
    return n;
}

/* UPIPE_CUDA_DEVICE, else the local rank modulo the device count, else 0; -1 with err set. */
static int device_pick(int count, char *err, size_t errlen) {
    long d = env_index("UPIPE_CUDA_DEVICE");
    if (getenv("UPIPE_CUDA_DEVICE") && (d < 0 || d >= count)) {
        snprintf(err, errlen, "UPIPE_CUDA_DEVICE=%s is not a device of this machine (0..%d)",
                 getenv("UPIPE_CUDA_DEVICE"), count - 1);
        return -1;
    }
    if (d >= 0) return (int)d;
    long r = env_index("MPI_LOCALRANKID");
    if (r < 0) r = env_index("OMPI_COMM_WORLD_LOCAL_RANK");
    return r < 0 ? 0 : (int)(r % count);
}

__global__ void cu_probe(void) {}

/* Device dev made current, with the stream, the handle and the workspace; 0 with err set. */
static int module_start(int dev, char *err, size_t errlen) {
    cudaError_t e = cudaSetDevice(dev);
    cudaFuncAttributes fa;
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, cu_probe); // a kernel image for it?
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&cu_stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaMalloc(&cu_lt_ws, CU_LT_WS);
    if (e != cudaSuccess) {
        cudaDeviceProp p;
        int ok = cudaGetDeviceProperties(&p, dev) == cudaSuccess;
        snprintf(err, errlen, "CUDA device %d (%s, sm_%d%d) cannot start: %s", dev,
                 ok ? p.name : "?", ok ? p.major : 0, ok ? p.minor : 0, cudaGetErrorString(e));
        (void)cudaGetLastError();
        return 0;
    }
    cublasStatus_t s = cublasLtCreate(&cu_lt);
    if (s != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "cuBLASLt cannot start: %s", cublasLt_status_name(s));
        return 0;
    }
    return 1;
}

extern "C" __attribute__((visibility("default"))) const backend_ops *
upipe_backend_cuda(char *err, size_t errlen) {
    static int ready;
    char none[8];
    if (!err || !errlen) err = none, errlen = sizeof none;
    err[0] = 0;
    if (ready) return &cu_ops;
    int count = device_count(err, errlen);
    if (count <= 0) return NULL;
    int dev = device_pick(count, err, errlen);
    if (dev < 0 || !module_start(dev, err, errlen)) return NULL;
    long hang = env_index("UPIPE_CUDA_TEST_HANG");
    if (hang >= 0) cu_test_hang = hang;
    const char *tf = getenv("UPIPE_TF32");
    cu_tf32 = tf && strcmp(tf, "1") == 0;
    describe_build(dev);
    cu_gemm_init();
    cu_elem_init();
    cu_attention_init();
    cu_wait_stream(cu_stream);
    table_fill(&cu_ops);
    cu_ops.peak_flops = cu_peak;
    cu_ops.device = dev;
    cu_ops.devices = count;
    ready = 1;
    return &cu_ops;
}
