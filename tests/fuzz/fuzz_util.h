/* fuzz_util.h — shared by the libFuzzer harnesses (one per reader): a scratch folder made once
 * per process under /tmp and removed at exit, and the fuzzer's input written to a file in it,
 * since the readers take paths. */
#ifndef UP_FUZZ_UTIL_H
#define UP_FUZZ_UTIL_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_fuzz_dir[256];

static void fuzz_dir_remove(void) {
    DIR *d = opendir(g_fuzz_dir);
    if (!d) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(p, sizeof p, "%s/%s", g_fuzz_dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(g_fuzz_dir);
}

/* g_fuzz_dir/name in one of 4 rotating buffers; the folder is made on first use. */
static const char *fuzz_path(const char *name) {
    static char buf[4][512];
    static int k;
    if (!g_fuzz_dir[0]) {
        snprintf(g_fuzz_dir, sizeof g_fuzz_dir, "/tmp/upipe_fuzz.XXXXXX");
        if (!mkdtemp(g_fuzz_dir)) {
            perror("mkdtemp");
            abort();
        }
        atexit(fuzz_dir_remove);
    }
    char *p = buf[k++ % 4];
    snprintf(p, 512, "%s/%s", g_fuzz_dir, name);
    return p;
}

/* Writes size bytes to g_fuzz_dir/name (replacing it); returns the path. Aborts on I/O errors:
 * those are the harness's, not the reader's. */
static const char *fuzz_write(const char *name, const uint8_t *data, size_t size) {
    const char *p = fuzz_path(name);
    FILE *f = fopen(p, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(p);
        abort();
    }
    return p;
}

#endif
