/* fuzz_safetensors.c — st_open on any bytes, then every tensor read back in chunks. */
#include "io/safetensors.h"

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = fuzz_write("x.safetensors", data, size);
    st_file f;
    char err[512];
    if (st_open(&f, p, err, sizeof err) != 0) return 0;
    float buf[1024];
    for (int i = 0; i < f.n; i++) {
        const st_tensor *t = &f.tensors[i];
        if (st_find(&f, t->name) == NULL) abort(); /* names are unique and findable */
        size_t n = st_numel(t);
        for (size_t first = 0; first < n; first += 1024) {
            size_t c = n - first < 1024 ? n - first : 1024;
            if (st_read_f32(&f, t, first, c, buf, err, sizeof err) != 0) break;
        }
    }
    st_close(&f);
    return 0;
}
