/* ckpt_lock.c — the lock of a checkpoint folder (ckpt_lock.h). */
#include "train/ckpt_lock.h"

#include "core/check.h"
#include "core/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

static int g_lock_fd = -1; /* held until the process ends */

/* "pid P on host H" from a holder's lock file, or a placeholder when it is not written yet (the
 * holder writes it right after taking the lock). */
static void read_holder(int fd, char *who, size_t len) {
    char buf[300] = "";
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    long pid = 0;
    char host[256] = "";
    if (sscanf(buf, "%ld %255s", &pid, host) == 2)
        snprintf(who, len, "pid %ld on host %s", pid, host);
    else
        snprintf(who, len, "pid and host not written yet");
}

int ckpt_lock_take(const char *dir, char *err, size_t errlen) {
    if (g_lock_fd >= 0) return 0;
    char path[4096];
    up_path_join(path, sizeof path, dir, CKPT_LOCK_NAME);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return up_errf(err, errlen, NULL, "--ckpt-dir %s: cannot create %s (%s): check the folder",
                       dir, path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        if (e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS) {
            fprintf(stderr,
                    "upipe: warning: --ckpt-dir %s: the file system does not support flock "
                    "(%s): two jobs on this folder would not be told apart\n",
                    dir, strerror(e));
            fflush(stderr);
            g_lock_fd = fd; /* warned once: a second call returns at once */
            return 0;
        }
        char who[320];
        read_holder(fd, who, sizeof who);
        close(fd);
        if (e == EWOULDBLOCK)
            return up_errf(err, errlen, NULL,
                           "--ckpt-dir %s is in use by another upipe job (%s): wait for it, or "
                           "use another folder",
                           dir, who);
        return up_errf(err, errlen, NULL, "--ckpt-dir %s: cannot lock %s (%s)", dir, path,
                       strerror(e));
    }
    char host[256] = "", text[320];
    if (gethostname(host, sizeof host) != 0 || !host[0]) snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = '\0';
    int n = snprintf(text, sizeof text, "%ld %s\n", (long)getpid(), host);
    /* who holds it, for the message of a refused job; the lock itself does not depend on it */
    if (ftruncate(fd, 0) != 0 || up_pwrite_all(fd, text, (size_t)n, 0) != 0)
        fprintf(stderr, "upipe: warning: --ckpt-dir %s: cannot write %s (%s)\n", dir, path,
                strerror(errno));
    g_lock_fd = fd;
    return 0;
}
