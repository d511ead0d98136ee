/* fileio.h — small file helpers shared by the writers. */
#ifndef UP_FILEIO_H
#define UP_FILEIO_H

#include <stddef.h>

/* Writes len bytes to path atomically: "path.tmp.<pid>", fsync, rename. On failure the temp file
 * is removed, nothing is left at path, and -1 is returned with a one-line message in err. */
int up_write_file_atomic(const char *path, const void *data, size_t len, char *err,
                         size_t errlen);
/* out = dir + "/" + name; a path longer than len stops with a message (up_die). */
void up_path_join(char *out, size_t len, const char *dir, const char *name);
/* 1 when path exists and is readable. */
int up_file_readable(const char *path);

#endif
