/* cuda_copy.cu — strided row copies on the device (backend.h's copy_rows: UPipe's stage gathers
 * and scatters between a stage buffer and the model-order tensor). One 2-D copy on the stream. */
#include "cuda/cuda_int.h"

extern "C" void cu_copy_rows(const typed_ctx *t, void *dst, size_t ldd, const void *src,
                             size_t lds, size_t rows, size_t width) {
    if (rows == 0 || width == 0) return;
    size_t es = t->dt == MEM_DTYPE_BF16 ? 2 : 4;
    CU_CHECK(cudaMemcpy2DAsync(dst, ldd * es, src, lds * es, width * es, rows,
                               cudaMemcpyDeviceToDevice, cu_stream));
}
