/* fuzz_st_index.c — an HF index: the input is model.safetensors.index.json in a folder that also
 * holds one small valid shard (model-00001-of-00001.safetensors: tensors "a" (2, 3) and "b" (4)),
 * which the index may name; st_set_open on the folder, then every tensor read. */
#include "io/st_set.h"

#include "fuzz_util.h"

static void make_shard(void) {
    static const float a[6] = {1, 2, 3, 4, 5, 6}, b[4] = {-1, 0.5f, 7, 8};
    st_entry e[2] = {{"a", a, 2, {2, 3}}, {"b", b, 1, {4}}};
    char err[512];
    if (st_write_f32(fuzz_path("model-00001-of-00001.safetensors"), e, 2, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int ready;
    if (!ready) {
        make_shard();
        ready = 1;
    }
    fuzz_write("model.safetensors.index.json", data, size);
    fuzz_path("");
    st_set s;
    char err[512];
    if (st_set_open(&s, g_fuzz_dir, err, sizeof err) != 0) return 0;
    float buf[16];
    for (int k = 0; k < s.nfiles; k++)
        for (int i = 0; i < s.files[k].n; i++) {
            const st_tensor *t = &s.files[k].tensors[i];
            const st_file *f = NULL;
            if (st_set_find(&s, t->name, &f) == NULL || f == NULL) abort();
            size_t n = st_numel(t);
            if (n <= 16) st_read_f32(f, t, 0, n, buf, err, sizeof err);
        }
    (void)st_set_count(&s);
    st_set_close(&s);
    return 0;
}
