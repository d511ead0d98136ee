#include "core/fileio.h"

#include "core/check.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
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
    const char *p = data;
    size_t left = len;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            up_errf(err, errlen, path, "write failed (%s)", w < 0 ? strerror(errno) : "short write");
            close(fd);
            unlink(tmp);
            return -1;
        }
        p += w;
        left -= (size_t)w;
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
