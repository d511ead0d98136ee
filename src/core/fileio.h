/* fileio.h — small file helpers shared by the writers. */
#ifndef UP_FILEIO_H
#define UP_FILEIO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Writes len bytes to path atomically: "path.tmp.<pid>", fsync, rename. On failure the temp file
 * is removed, nothing is left at path, and -1 is returned with a one-line message in err. */
int up_write_file_atomic(const char *path, const void *data, size_t len, char *err, size_t errlen);
/* A streamed atomic write, for an output written piece by piece (too large to build in memory):
 * up_atomic_open creates "path.tmp.<pid>" (registered with up_tmp_push: a signal removes it) and
 * opens it in a->f; up_atomic_commit flushes, fsyncs, closes and renames it to path; any write
 * error on a->f since the open, or a failure here, removes the temporary file, leaves nothing at
 * path and returns -1 with a one-line message; up_atomic_abort closes and removes it. */
typedef struct {
    FILE *f;
    char path[4064], tmp[4096]; /* tmp: path.tmp.<pid> (up_tmp_push keeps 4096) */
} up_atomic_file;
int up_atomic_open(up_atomic_file *a, const char *path, char *err, size_t errlen);
int up_atomic_commit(up_atomic_file *a, char *err, size_t errlen);
void up_atomic_abort(up_atomic_file *a);
/* Writes all len bytes (write / pwrite at off, EINTR retried, at most 1 GiB per call). 0, or -1
 * with errno (EIO for a write that makes no progress). */
int up_write_all(int fd, const void *buf, size_t len);
int up_pwrite_all(int fd, const void *buf, size_t len, uint64_t off);
/* up_write_file_atomic of text and a final newline (JSON documents). */
int up_write_line_atomic(const char *path, const char *text, char *err, size_t errlen);
/* A read-only mapping of a data file (token shard, loss mask): path must be a regular file of at
 * least header bytes. kind names the header in messages ("shard", "mask"), format the file
 * ("an llm.c token shard"), make how to make one ("make a shard with `upipe data`"). Returns 0
 * with *map and *size, and the open descriptor in *fd (closed when fd is NULL; the mapping keeps
 * the file), or -1 with err. */
int up_map_file(const char *path, size_t header, const char *kind, const char *format,
                const char *make, const void **map, size_t *size, int *fd, char *err,
                size_t errlen);
/* Takes the pages of [p, p + len) of a mapping from up_map_file out of the process (they stay
 * in the page cache; a later read maps them again), so that reading a data file does not grow
 * the resident set by the file: the memory plan bounds RSS (DESIGN.md §5). Whole pages only. */
void up_map_drop(const void *map, size_t map_bytes, const void *p, size_t len);
/* Bytes a validation pass over a mapped file reads before it drops them (up_map_drop). */
enum { MAP_SCAN_BYTES = 16 << 20 };
/* out = dir + "/" + name; a path longer than len stops with a message (up_die). */
void up_path_join(char *out, size_t len, const char *dir, const char *name);
/* Temporary files and folders of writes in progress, so that a signal that ends the process
 * leaves none behind: up_tmp_push before creating one, up_tmp_pop once it is renamed or removed.
 * is_dir: 0 a file, 1 an empty folder (its files are registered themselves), UP_TMP_FLAT_DIR a
 * folder of files removed with whatever files it holds (up_remove_flat_dir).
 * up_tmp_remove_all is async-signal-safe (unlink, rmdir, getdents): signal handlers call it,
 * files first, newest first. At most UP_TMP_SLOTS at once. */
enum { UP_TMP_SLOTS = 8, UP_TMP_FLAT_DIR = 2 };
/* Removes a folder of files (no subfolder) and its files, with system calls only, so that a
 * signal handler may call it. 0 (also when path does not exist), or -1 with errno. */
int up_remove_flat_dir(const char *path);
/* Removes what writes of path killed before their end (SIGKILL, a crash) left beside it:
 * "path.tmp.<pid>" (a file, or a folder of files) and ".NAME.old.<pid>" (NAME: path's last
 * component; a folder of files an output was set aside as) whose process no longer runs
 * (kill(pid, 0) fails with ESRCH). Never path itself, nor what a running process writes.
 * Returns how many were removed; what cannot be removed is left. */
int up_sweep_stale(const char *path);
/* fsync of a folder (its entries: a rename into it is durable). 0, or -1 with errno. */
int up_fsync_dir(const char *path);
void up_tmp_push(const char *path, int is_dir);
void up_tmp_pop(const char *path);
void up_tmp_remove_all(void);
/* Installs handler (sigaction, no flags) for the n signals in sigs. */
void up_catch_signals(void (*handler)(int), const int *sigs, int n);
/* Installs handlers for SIGINT, SIGTERM and SIGHUP that remove the temporary files and then end
 * the process as the signal would have. */
void up_tmp_install_signal_cleanup(void);
/* 1 when path exists and is readable. */
int up_file_readable(const char *path);
/* path as an absolute one without symbolic links or "..": realpath of its longest existing
 * prefix, then the missing rest as written (an output that does not exist yet resolves through
 * its existing parent). 0, or -1 with errno (a path that cannot be resolved). */
int up_path_resolve(const char *path, char *out, size_t len);
/* 1 when a and b name the same file: the same st_dev and st_ino when both exist (hard and
 * symbolic links included), else the same up_path_resolve; 0 otherwise. */
int up_same_file(const char *a, const char *b);

#endif
