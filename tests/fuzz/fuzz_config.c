/* fuzz_config.c — config_parse on any text (NUL-terminated copy of the input). */
#include "io/config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    model_config cfg;
    char err[512];
    config_parse(&cfg, text, err, sizeof err);
    free(text);
    return 0;
}
