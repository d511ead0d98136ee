#include "core/fileio.h"

#include "core/check.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int up_write_file_atomic(const char *path, const void *data, size_t len, char *err,
                         size_t errlen) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return up_errf(err, errlen, path,
                       "cannot create (%s): check the directory exists and is writable",
                       strerror(errno));
    if (up_write_all(fd, data, len) != 0) {
        up_errf(err, errlen, path, "write failed (%s)", strerror(errno));
        close(fd);
        unlink(tmp);
        return -1;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        up_errf(err, errlen, path, "write failed (%s)", strerror(errno));
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, path) != 0) {
        up_errf(err, errlen, path, "cannot rename into place (%s)", strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

int up_file_readable(const char *path) { return access(path, R_OK) == 0; }

void up_path_join(char *out, size_t len, const char *dir, const char *name) {
    int n = snprintf(out, len, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= len) up_die("the path %s/%s is too long (over %zu bytes)", dir, name,
                                         len - 1);
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

int up_write_all(int fd, const void *buf, size_t len) { return up_pwrite_all(fd, buf, len, UINT64_MAX); }

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
