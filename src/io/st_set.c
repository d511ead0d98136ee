/* st_set.c — one safetensors file, or HF shards with their index, opened and cross-checked. */
#include "io/st_set.h"

#include "core/check.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    UP_CHECK(p, "out of memory");
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

void st_set_close(st_set *s) {
    for (int i = 0; i < s->nfiles; i++)
        st_close(&s->files[i]);
    free(s->files);
    free(s->origin);
    memset(s, 0, sizeof *s);
}

static int open_single(st_set *s, const char *path, char *err, size_t errlen) {
    s->files = calloc(1, sizeof *s->files);
    UP_CHECK(s->files, "out of memory");
    if (st_open(&s->files[0], path, err, errlen) != 0) return -1;
    s->nfiles = 1;
    return 0;
}

/* The index: weight_map's files opened once each, then both directions checked. */
static int open_index(st_set *s, const char *index, char *err, size_t errlen) {
    json_error_t jerr;
    json_t *root = json_load_file(index, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return up_errf(err, errlen, index, "not a valid JSON index (line %d: %s)", jerr.line,
                       jerr.text);
    int rc = -1;
    json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(map) || json_object_size(map) == 0) {
        up_errf(err, errlen, index,
                "no \"weight_map\" object naming the shards: not an HF "
                "safetensors index");
        goto done;
    }
    char *dir = strdup(index);
    UP_CHECK(dir, "out of memory");
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        strcpy(dir, ".");
    /* distinct files, in order of first mention */
    const char **names = calloc(json_object_size(map), sizeof *names);
    s->files = calloc(json_object_size(map), sizeof *s->files);
    UP_CHECK(names && s->files, "out of memory");
    const char *key;
    json_t *val;
    json_object_foreach(map, key, val) {
        const char *f = json_string_value(val);
        if (!f || !f[0] || strchr(f, '/') || strcmp(f, "..") == 0) {
            up_errf(err, errlen, index,
                    "weight_map entry \"%s\" does not name a file in the "
                    "index's folder",
                    key);
            goto fail;
        }
        int k = 0;
        while (k < s->nfiles && strcmp(names[k], f) != 0)
            k++;
        if (k < s->nfiles) continue;
        char *p = join(dir, f);
        if (!exists(p)) {
            up_errf(err, errlen, index,
                    "names shard %s, which does not exist: the download is "
                    "incomplete",
                    f);
            free(p);
            goto fail;
        }
        int r = st_open(&s->files[s->nfiles], p, err, errlen);
        free(p);
        if (r != 0) goto fail;
        names[s->nfiles++] = f;
    }
    json_object_foreach(map, key, val) {
        const char *f = json_string_value(val);
        int k = 0;
        while (strcmp(names[k], f) != 0)
            k++;
        if (!st_find(&s->files[k], key)) {
            up_errf(err, errlen, index, "lists tensor %s in %s, but that shard does not hold it",
                    key, f);
            goto fail;
        }
    }
    for (int k = 0; k < s->nfiles; k++)
        for (int t = 0; t < s->files[k].n; t++) {
            const char *name = s->files[k].tensors[t].name;
            const char *f = json_string_value(json_object_get(map, name));
            if (!f || strcmp(f, names[k]) != 0) {
                up_errf(err, errlen, index, "shard %s holds tensor %s, which the index %s",
                        names[k], name, f ? "places in another shard" : "does not list");
                goto fail;
            }
        }
    rc = 0;
fail:
    free(names);
    free(dir);
done:
    json_decref(root);
    return rc;
}

int st_set_open(st_set *s, const char *path, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    s->origin = strdup(path);
    UP_CHECK(s->origin, "out of memory");
    int rc;
    if (is_dir(path)) {
        char *index = join(path, "model.safetensors.index.json");
        char *single = join(path, "model.safetensors");
        if (exists(index))
            rc = open_index(s, index, err, errlen);
        else if (exists(single))
            rc = open_single(s, single, err, errlen);
        else
            rc = up_errf(err, errlen, path,
                         "the folder holds neither "
                         "model.safetensors.index.json nor model.safetensors");
        free(index);
        free(single);
    } else if (ends_with(path, ".json")) {
        rc = open_index(s, path, err, errlen);
    } else {
        rc = open_single(s, path, err, errlen);
    }
    if (rc != 0) st_set_close(s);
    return rc;
}

const st_tensor *st_set_find(const st_set *s, const char *name, const st_file **file) {
    for (int k = 0; k < s->nfiles; k++) {
        const st_tensor *t = st_find(&s->files[k], name);
        if (t) {
            if (file) *file = &s->files[k];
            return t;
        }
    }
    return NULL;
}

int st_set_count(const st_set *s) {
    int n = 0;
    for (int k = 0; k < s->nfiles; k++)
        n += s->files[k].n;
    return n;
}
