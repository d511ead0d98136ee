/* dtype.c — sizes and names of the element types (dtype.h). */
#include "core/dtype.h"

#include "core/check.h"

static const size_t g_dtype_size[MEM_DTYPE_COUNT] = {4, 2};
static const char *g_dtype_names[MEM_DTYPE_COUNT] = {"f32", "bf16"};

size_t mem_dtype_size(mem_dtype dt) {
    UP_CHECK(dt >= 0 && dt < MEM_DTYPE_COUNT, "bad element type %d", (int)dt);
    return g_dtype_size[dt];
}

const char *mem_dtype_name(mem_dtype dt) {
    return (dt >= 0 && dt < MEM_DTYPE_COUNT) ? g_dtype_names[dt] : "?";
}

size_t mem_dtype_bytes(mem_dtype dt, size_t n) {
    return up_mul(n, mem_dtype_size(dt));
}
