/* safetensors.h — read (F32, BF16, F16) and write (F32) safetensors files.
 *
 * Format: 8-byte little-endian header length N, N bytes of JSON header {name: {dtype, shape,
 * data_offsets: [begin, end]}, "__metadata__": {...}}, then the data. st_open validates before
 * any use: header length within the file, JSON valid, every dtype known, shape entries
 * non-negative and their product times the dtype size equal to end - begin without overflow,
 * offsets in bounds, the tensors' byte ranges contiguous and covering the data exactly (no gaps,
 * no overlaps), names unique. A bad file gives -1 and a one-line message, never a crash. */
#ifndef UP_SAFETENSORS_H
#define UP_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

enum { ST_F32 = 0, ST_BF16 = 1, ST_F16 = 2 };

typedef struct {
    char *name;
    int dtype;
    int ndim;
    int64_t shape[8];
    size_t begin, end; /* byte offsets relative to the start of the data section */
} st_tensor;

typedef struct {
    char *path;
    int fd;
    size_t file_size;
    size_t data_start; /* 8 + header length */
    st_tensor *tensors;
    int n;
} st_file;

int st_open(st_file *f, const char *path, char *err, size_t errlen);
void st_close(st_file *f);
/* NULL when absent. */
const st_tensor *st_find(const st_file *f, const char *name);
/* Number of elements (product of shape). */
size_t st_numel(const st_tensor *t);
/* Reads elements [first, first + count) of t converted to fp32 into dst. 0 or -1 with err
 * (short read, I/O error). */
int st_read_f32(const st_file *f, const st_tensor *t, size_t first, size_t count, float *dst,
                char *err, size_t errlen);

/* Writer: one F32 tensor per entry, written in the given order. The file appears atomically
 * (written to "path.tmp.<pid>", fsync'd, renamed), so a failure never leaves a half file. */
typedef struct {
    const char *name;
    const float *data;
    int ndim;
    int64_t shape[4];
} st_entry;
int st_write_f32(const char *path, const st_entry *entries, int n, char *err, size_t errlen);
/* Streaming variant: the entries give names and shapes (data ignored); the data comes from next(),
 * called until every tensor's elements are written, in entry order and as one stream (a chunk may
 * span tensors). next returns 0 and a chunk, or -1 when exhausted. Same atomicity. */
typedef int (*st_chunk_fn)(void *ctx, const float **chunk, size_t *count);
int st_write_f32_stream(const char *path, const st_entry *entries, int n, st_chunk_fn next,
                        void *ctx, char *err, size_t errlen);
/* The same with the file's dtype ST_F32 or ST_BF16 (the fp32 stream rounded to nearest even). */
int st_write_stream(const char *path, const st_entry *entries, int n, int dtype, st_chunk_fn next,
                    void *ctx, char *err, size_t errlen);
/* The first bytes of a file of these entries (8-byte length, JSON header padded with spaces so
 * that the data starts at a multiple of align, a power of two >= 8), for writers that place the
 * data themselves (several processes writing ranges of one file, O_DIRECT): the data section
 * starts at *len and holds the tensors in entry order, contiguous. malloc'd; NULL with err. */
char *st_header(const st_entry *entries, int n, int dtype, size_t align, size_t *len, char *err,
                size_t errlen);

#endif
