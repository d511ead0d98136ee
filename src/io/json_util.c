/* json_util.c — small helpers over jansson's values (json_util.h). */
#include "io/json_util.h"

const char *json_type_name(const json_t *v) {
    if (v == NULL) return "missing";
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    default:
        return "null";
    }
}
