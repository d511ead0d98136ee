#include "core/fileio.h"

#include "core/check.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static struct {
    char path[4096];
    volatile sig_atomic_t used, is_dir;
} g_tmp[UP_TMP_SLOTS];

void up_tmp_push(const char *path, int is_dir) {
    for (int i = 0; i < UP_TMP_SLOTS; i++)
        if (!g_tmp[i].used) {
            snprintf(g_tmp[i].path, sizeof g_tmp[i].path, "%s", path);
            g_tmp[i].is_dir = is_dir;
            g_tmp[i].used = 1;
            return;
        }
    UP_CHECK(0, "more than %d temporary files at once", UP_TMP_SLOTS);
}

void up_tmp_pop(const char *path) {
    for (int i = UP_TMP_SLOTS - 1; i >= 0; i--)
        if (g_tmp[i].used && strcmp(g_tmp[i].path, path) == 0) {
            g_tmp[i].used = 0;
            return;
        }
}

int up_remove_flat_dir(const char *path) {
#ifdef SYS_getdents64
    /* system calls only (no opendir, which allocates): a signal handler may call this */
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? 0 : -1;
    for (int pass = 0; pass < 4; pass++) { /* a pass that unlinks as it reads may skip some */
        union {
            char b[4096];
            uint64_t align;
        } buf;
        long n;
        while ((n = syscall(SYS_getdents64, fd, buf.b, sizeof buf.b)) > 0)
            for (long off = 0; off < n;) {
                const char *d = buf.b + off; /* ino (8), off (8), reclen (2), type (1), name */
                unsigned short reclen;
                memcpy(&reclen, d + 16, sizeof reclen);
                const char *name = d + 19;
                if (!(name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2]))))
                    unlinkat(fd, name, 0);
                off += reclen;
            }
        if (rmdir(path) == 0 || errno != ENOTEMPTY) break;
        lseek(fd, 0, SEEK_SET);
    }
    close(fd);
#endif
    if (rmdir(path) == 0 || errno == ENOENT) return 0;
    return -1;
}

/* The pid of a leftover of base in the folder entry name ("base.tmp.<pid>" or
 * ".base.old.<pid>"), or 0 when name is not one. */
static long stale_pid(const char *name, const char *base) {
    size_t nb = strlen(base);
    const char *pid = NULL;
    if (!strncmp(name, base, nb) && !strncmp(name + nb, ".tmp.", 5))
        pid = name + nb + 5;
    else if (name[0] == '.' && !strncmp(name + 1, base, nb) && !strncmp(name + 1 + nb, ".old.", 5))
        pid = name + 1 + nb + 5;
    if (!pid || !*pid || strspn(pid, "0123456789") != strlen(pid) || strlen(pid) > 9) return 0;
    return strtol(pid, NULL, 10);
}

int up_sweep_stale(const char *path) {
    char parent[PATH_MAX], p[PATH_MAX + 256];
    if (snprintf(parent, sizeof parent, "%s", path) >= (int)sizeof parent) return 0;
    size_t n = strlen(parent);
    while (n > 1 && parent[n - 1] == '/')
        parent[--n] = '\0';
    char *slash = strrchr(parent, '/');
    const char *base = slash ? slash + 1 : parent;
    const char *dir = !slash ? "." : slash == parent ? "/" : parent;
    if (slash) *slash = '\0';
    if (!*base) return 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    int removed = 0;
    struct dirent *e;
    struct stat st;
    while ((e = readdir(d)) != NULL) {
        long pid = stale_pid(e->d_name, base);
        if (pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (lstat(p, &st) != 0) continue;
        removed += (S_ISDIR(st.st_mode) ? up_remove_flat_dir(p) : unlink(p)) == 0;
    }
    closedir(d);
    return removed;
}

int up_fsync_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

void up_tmp_remove_all(void) {
    for (int pass = 0; pass < 2; pass++) /* files, then the folders that held them */
        for (int i = UP_TMP_SLOTS - 1; i >= 0; i--)
            if (g_tmp[i].used && (g_tmp[i].is_dir != 0) == pass) {
                if (g_tmp[i].is_dir == UP_TMP_FLAT_DIR)
                    up_remove_flat_dir(g_tmp[i].path);
                else if (pass)
                    rmdir(g_tmp[i].path);
                else
                    unlink(g_tmp[i].path);
            }
}

static void cleanup_and_reraise(int sig) {
    up_tmp_remove_all();
    signal(sig, SIG_DFL);
    raise(sig);
}

void up_catch_signals(void (*handler)(int), const int *sigs, int n) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < n; i++)
        sigaction(sigs[i], &sa, NULL);
}

void up_tmp_install_signal_cleanup(void) {
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    up_catch_signals(cleanup_and_reraise, sigs, 3);
}

int up_write_file_atomic(const char *path, const void *data, size_t len, char *err, size_t errlen) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    up_tmp_push(tmp, 0); /* a signal from here on removes it */
    int rc = 0, fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        rc = up_errf(err, errlen, path,
                     "cannot create (%s): check the directory exists and is writable",
                     strerror(errno));
    else if (up_write_all(fd, data, len) != 0 || fsync(fd) != 0)
        rc = up_errf(err, errlen, path, "write failed (%s)", strerror(errno));
    if (fd >= 0 && close(fd) != 0 && rc == 0)
        rc = up_errf(err, errlen, path, "write failed (%s)", strerror(errno));
    if (rc == 0 && rename(tmp, path) != 0)
        rc = up_errf(err, errlen, path, "cannot rename into place (%s)", strerror(errno));
    if (rc != 0) unlink(tmp);
    up_tmp_pop(tmp);
    return rc;
}

int up_atomic_open(up_atomic_file *a, const char *path, char *err, size_t errlen) {
    memset(a, 0, sizeof *a);
    if (strlen(path) >= sizeof a->path)
        return up_errf(err, errlen, NULL, "the path %s is too long: use a shorter one", path);
    snprintf(a->path, sizeof a->path, "%s", path);
    snprintf(a->tmp, sizeof a->tmp, "%s.tmp.%d", path, (int)getpid());
    up_tmp_push(a->tmp, 0); /* a signal from here on removes it */
    a->f = fopen(a->tmp, "w");
    if (a->f) return 0;
    int e = errno;
    up_tmp_pop(a->tmp);
    return up_errf(err, errlen, path,
                   "cannot create (%s): check the directory exists and is "
                   "writable",
                   strerror(e));
}

int up_atomic_commit(up_atomic_file *a, char *err, size_t errlen) {
    errno = 0;
    int ok = fflush(a->f) == 0 && !ferror(a->f);
    int e = errno ? errno : EIO; /* an earlier failed write left no errno behind */
    if (ok && fsync(fileno(a->f)) != 0) ok = 0, e = errno;
    if (fclose(a->f) != 0 && ok) ok = 0, e = errno;
    a->f = NULL;
    if (ok && rename(a->tmp, a->path) != 0) ok = 0, e = errno;
    if (!ok) unlink(a->tmp);
    up_tmp_pop(a->tmp);
    if (ok) return 0;
    return up_errf(err, errlen, a->path,
                   "write failed (%s): check free disk space and "
                   "permissions",
                   strerror(e));
}

void up_atomic_abort(up_atomic_file *a) {
    if (!a->f) return;
    fclose(a->f);
    a->f = NULL;
    unlink(a->tmp);
    up_tmp_pop(a->tmp);
}

int up_file_readable(const char *path) {
    return access(path, R_OK) == 0;
}

int up_path_resolve(const char *path, char *out, size_t len) {
    char head[PATH_MAX], tail[PATH_MAX] = "", real[PATH_MAX];
    if (snprintf(head, sizeof head, "%s", path) >= (int)sizeof head)
        return errno = ENAMETOOLONG, -1;
    for (;;) { /* the longest existing prefix, through realpath; the missing rest as written */
        if (realpath(head[0] ? head : ".", real)) {
            int n =
                snprintf(out, len, "%s%s%s", real, tail[0] && strcmp(real, "/") ? "/" : "", tail);
            if (n < 0 || (size_t)n >= len) return errno = ENAMETOOLONG, -1;
            return 0;
        }
        if (errno != ENOENT) return -1;
        size_t n = strlen(head);
        while (n > 1 && head[n - 1] == '/')
            head[--n] = '\0';
        char *slash = strrchr(head, '/');
        const char *base = slash ? slash + 1 : head;
        if (!*base || !strcmp(base, ".") || !strcmp(base, "..")) return errno = ENOENT, -1;
        char t[PATH_MAX];
        if (snprintf(t, sizeof t, "%s%s%s", base, tail[0] ? "/" : "", tail) >= (int)sizeof t)
            return errno = ENAMETOOLONG, -1;
        memcpy(tail, t, sizeof tail);
        if (!slash)
            head[0] = '\0';
        else if (slash == head)
            head[1] = '\0';
        else
            *slash = '\0';
    }
}

int up_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    char ra[PATH_MAX], rb[PATH_MAX];
    if (up_path_resolve(a, ra, sizeof ra) != 0 || up_path_resolve(b, rb, sizeof rb) != 0)
        return strcmp(a, b) == 0;
    return strcmp(ra, rb) == 0;
}

void up_path_join(char *out, size_t len, const char *dir, const char *name) {
    int n = snprintf(out, len, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= len)
        up_die("the path %s/%s is too long (over %zu bytes)", dir, name, len - 1);
}

int up_pwrite_all(int fd, const void *buf, size_t len, uint64_t off) {
    const char *p = buf;
    while (len > 0) {
        size_t n = len < ((size_t)1 << 30) ? len : ((size_t)1 << 30);
        ssize_t w = off == UINT64_MAX ? write(fd, p, n) : pwrite(fd, p, n, (off_t)off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EIO;
            return -1;
        }
        p += w;
        len -= (size_t)w;
        if (off != UINT64_MAX) off += (uint64_t)w;
    }
    return 0;
}

int up_write_all(int fd, const void *buf, size_t len) {
    return up_pwrite_all(fd, buf, len, UINT64_MAX);
}

int up_write_line_atomic(const char *path, const char *text, char *err, size_t errlen) {
    size_t n = strlen(text);
    char *line = malloc(n + 1);
    UP_CHECK(line, "out of memory");
    memcpy(line, text, n);
    line[n] = '\n';
    int rc = up_write_file_atomic(path, line, n + 1, err, errlen);
    free(line);
    return rc;
}

void up_map_drop(const void *map, size_t map_bytes, const void *p, size_t len) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t a = (size_t)((const char *)p - (const char *)map), b = a + len;
    a -= a % page;
    b = b > map_bytes ? map_bytes : b;
    if (b <= a) return;
    /* advice only: a failure leaves the pages resident, which is harmless */
    (void)madvise((char *)(uintptr_t)map + a, b - a, MADV_DONTNEED);
}

int up_map_file(const char *path, size_t header, const char *kind, const char *format,
                const char *make, const void **map, size_t *size, int *fd_out, char *err,
                size_t errlen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return up_errf(err, errlen, path, "cannot open (%s): check the path, or %s",
                       strerror(errno), make);
    struct stat sb;
    int rc = 0;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
        rc = up_errf(err, errlen, path, "not a regular file");
    else if ((size_t)sb.st_size < header)
        rc = up_errf(err, errlen, path,
                     "file is %zu bytes, smaller than the %zu-byte %s header: the file is "
                     "truncated or not %s",
                     (size_t)sb.st_size, header, kind, format);
    void *p = rc == 0 ? mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    if (rc == 0 && p == MAP_FAILED)
        rc = up_errf(err, errlen, path, "mmap failed (%s)", strerror(errno));
    if (rc != 0 || !fd_out) close(fd);
    if (rc != 0) return -1;
    *map = p;
    *size = (size_t)sb.st_size;
    if (fd_out) *fd_out = fd;
    return 0;
}
