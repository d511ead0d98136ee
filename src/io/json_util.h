/* json_util.h — small helpers over jansson's values, for the readers of JSON files (docs.c,
 * train/ckpt_state.c). */
#ifndef UP_JSON_UTIL_H
#define UP_JSON_UTIL_H

#include <jansson.h>

/* The type of v as a message names it: "an object", "an array", "a string", "an integer",
 * "a number" (real), "a boolean" or "null"; "missing" when v is NULL. */
const char *json_type_name(const json_t *v);

#endif
