/* st_set.h — weights as HF ships them: one safetensors file, or shards named by an index
 * (model.safetensors.index.json: {"metadata": {...}, "weight_map": {tensor: file}}), or a folder
 * holding either (the index first). Every file is validated by st_open; the index must name
 * files that exist, every tensor it lists must be in the file it names, and every tensor of
 * every shard must be listed once, for that shard. */
#ifndef UP_ST_SET_H
#define UP_ST_SET_H

#include "io/safetensors.h"

typedef struct {
    st_file *files;
    int nfiles;
    char *origin; /* what was opened (for messages) */
} st_set;

/* Opens path (a .safetensors file, an index .json, or a folder). 0, or -1 with a one-line
 * message in err (nothing to close then). */
int st_set_open(st_set *s, const char *path, char *err, size_t errlen);
void st_set_close(st_set *s);
/* The tensor called name and the file holding it; NULL when absent. */
const st_tensor *st_set_find(const st_set *s, const char *name, const st_file **file);
/* Number of tensors over all files. */
int st_set_count(const st_set *s);

#endif
