/* io_util.h — the scratch directory shared by the io unit tests (test_config.c,
 * test_safetensors.c, test_io.c). Each test program makes its own mkdtemp directory under /tmp,
 * writes its files there and removes it at the end.
 *
 *   tmp_dir_make(prog)        creates /tmp/upipe_<prog>.XXXXXX; returns -1 (with a message)
 *   tmp_path(name)            g_dir/name, in one of 8 rotating static buffers
 *   write_bytes / read_bytes  whole files (read_bytes leaves one spare byte for a '\0')
 *   count_files_with(s)       files in g_dir whose name contains s (to find stray temp files)
 *   run_data_to(argc, argv, path)  `upipe data` (data_main) in a forked child, its stdout and
 *                             stderr into path (NULL: /dev/null); returns the exit status
 *   run_data_quiet(argc, argv)     the same, output discarded
 *   cleanup_dir()             removes the files and the directory */
#ifndef UP_TEST_IO_UTIL_H
#define UP_TEST_IO_UTIL_H

#include "cmd/data_cmd.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_dir[256];

static inline int tmp_dir_make(const char *prog) {
    snprintf(g_dir, sizeof g_dir, "/tmp/upipe_%s.XXXXXX", prog);
    if (mkdtemp(g_dir) == NULL) {
        printf("%s: cannot create a temp directory\n", prog);
        return -1;
    }
    return 0;
}

static inline const char *tmp_path(const char *name) {
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", g_dir, name);
    return p;
}

static inline void write_bytes(const char *path, const void *data, size_t len) {
    FILE *fp = fopen(path, "wb");
    if (fp == NULL) {
        printf("cannot create %s\n", path);
        exit(1);
    }
    if (len > 0 && fwrite(data, 1, len, fp) != len) exit(1);
    fclose(fp);
}

static inline unsigned char *read_bytes(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    if (fread(b, 1, (size_t)n, fp) != (size_t)n) n = 0;
    fclose(fp);
    *len = (size_t)n;
    return b;
}

static inline void cleanup_dir(void) {
    DIR *d = opendir(g_dir);
    if (d == NULL) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        unlink(tmp_path(e->d_name));
    }
    closedir(d);
    rmdir(g_dir);
}

/* Counts files in the temp dir whose name contains s (to find stray temp files). */
static inline int count_files_with(const char *s) {
    DIR *d = opendir(g_dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        n += strstr(e->d_name, s) != NULL;
    if (d) closedir(d);
    return n;
}

/* Runs `upipe data` in a child with stdout and stderr sent to path (NULL: silenced; a refusal
 * stops the process with up_die); returns the child's exit status. */
static inline int run_data_to(int argc, char **argv, const char *path) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int fd =
            path ? open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644) : open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        dup2(fd, 2);
        int rc = data_main(argc, argv);
        fflush(stdout);
        _exit(rc);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static inline int run_data_quiet(int argc, char **argv) {
    return run_data_to(argc, argv, NULL);
}

#endif
