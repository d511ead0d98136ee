/* crc32c.h — CRC-32C (Castagnoli, the iSCSI / ext4 / gRPC checksum) of checkpoint files, with the
 * arithmetic that combines the checksums of pieces written by different ranks in any order.
 *
 * A raw CRC (no initial or final inversion) is linear over GF(2): the raw CRC of a file is the
 * XOR over its pieces of crc32c_shift(raw CRC of the piece, bytes after the piece). So each rank
 * sums (XOR) the placed CRCs of the ranges it writes or reads, one XOR reduction gives the file's,
 * and crc32c_finish turns that into the standard CRC-32C of the whole file (what `crc32c FILE`
 * tools print). Nothing depends on how the file was cut into pieces. */
#ifndef UP_CRC32C_H
#define UP_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Raw CRC: the state crc after the len bytes of buf (no inversions; raw(0, zeros) = 0). Uses the
 * SSE4.2 crc32 instruction where the CPU has it (three interleaved streams), else a table; both
 * give the same bits (test_crc32c). */
uint32_t crc32c_raw(uint32_t crc, const void *buf, size_t len);
/* The table-driven twin of crc32c_raw, byte by byte (the oracle in tests). */
uint32_t crc32c_raw_ref(uint32_t crc, const void *buf, size_t len);
/* The raw state crc followed by n zero bytes: crc * x^(8n) mod P, O(log n). */
uint32_t crc32c_shift(uint32_t crc, uint64_t n);
/* The raw CRC of a piece of len bytes at byte off of a file of total bytes, placed: XOR the
 * placed CRCs of disjoint pieces that cover the file to get the file's raw CRC. */
uint32_t crc32c_place(const void *buf, size_t len, uint64_t off, uint64_t total);
/* The standard CRC-32C of a file of total bytes from its raw CRC. */
uint32_t crc32c_finish(uint32_t raw, uint64_t total);
/* The standard CRC-32C of buf ("123456789" -> 0xe3069283). */
uint32_t crc32c(const void *buf, size_t len);

#endif
