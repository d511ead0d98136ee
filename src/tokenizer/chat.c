/* chat.c — chat templates over message lists, and the provenance of the rendered bytes
 * (chat.h). Each message's strings carry the tag JINJA_TAG_USER + index (its role the data tag)
 * and each message dict its index as turn mark (jinja.h), so the render's runs say where each
 * byte came from and in which message's loop iteration it was written. */
#include "tokenizer/chat.h"

#include "core/check.h"
#include "template/jinja.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct chat_template {
    jinja_template *t;
    json_t *tokens; /* name -> string or list of strings: the special-token variables */
};

static const char *const token_keys[] = {"bos_token", "eos_token", "unk_token",  "sep_token",
                                         "pad_token", "cls_token", "mask_token", NULL};

/* a string, or an AddedToken object's content; NULL for null or absent */
static const char *token_text(const json_t *v) {
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v)) {
        const json_t *c = json_object_get(v, "content");
        if (json_is_string(c)) return json_string_value(c);
    }
    return NULL;
}

chat_template *chat_template_new(const char *source, size_t len, const json_t *config, char *err,
                                 size_t errlen) {
    char perr[512];
    jinja_template *t = jinja_parse(source, len, perr, sizeof perr);
    if (!t) {
        up_errf(err, errlen, "chat template", "%s", perr);
        return NULL;
    }
    chat_template *ct = calloc(1, sizeof *ct);
    UP_CHECK(ct, "out of memory");
    ct->t = t;
    ct->tokens = json_object();
    UP_CHECK(ct->tokens, "out of memory");
    if (json_is_object(config)) {
        for (int i = 0; token_keys[i]; i++) {
            const char *s = token_text(json_object_get(config, token_keys[i]));
            if (s && s[0]) json_object_set_new(ct->tokens, token_keys[i], json_string(s));
        }
        const json_t *add = json_object_get(config, "additional_special_tokens");
        if (json_is_array(add) && json_array_size(add) > 0) {
            json_t *l = json_array();
            size_t k;
            const json_t *v;
            json_array_foreach(add, k, v) {
                const char *s = token_text(v);
                if (s) json_array_append_new(l, json_string(s));
            }
            json_object_set_new(ct->tokens, "additional_special_tokens", l);
        }
    }
    return ct;
}

static char *read_file(const char *path, size_t *len, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        up_errf(err, errlen, path, "cannot open: %s", strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    UP_CHECK(buf, "out of memory");
    for (;;) {
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            UP_CHECK(buf, "out of memory");
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        up_errf(err, errlen, path, "read error");
        return NULL;
    }
    *len = n;
    return buf;
}

chat_template *chat_template_load(const char *path, char *err, size_t errlen) {
    char cfg_path[4096], jinja_path[4096];
    struct stat st;
    int is_dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    if (is_dir) {
        snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", path);
        snprintf(jinja_path, sizeof jinja_path, "%s/chat_template.jinja", path);
    } else {
        snprintf(cfg_path, sizeof cfg_path, "%s", path);
        jinja_path[0] = 0;
    }
    json_error_t je;
    /* ints as reals: model_max_length is often 1e30, beyond jansson's integers */
    json_t *cfg = json_load_file(cfg_path, JSON_DECODE_INT_AS_REAL, &je);
    if (!cfg) {
        up_errf(err, errlen, cfg_path, "not valid JSON (line %d: %s)", je.line, je.text);
        return NULL;
    }
    if (!json_is_object(cfg)) {
        json_decref(cfg);
        up_errf(err, errlen, cfg_path, "not a JSON object");
        return NULL;
    }
    chat_template *ct = NULL;
    if (jinja_path[0] && stat(jinja_path, &st) == 0) {
        size_t n;
        char *src = read_file(jinja_path, &n, err, errlen);
        if (src) ct = chat_template_new(src, n, cfg, err, errlen);
        free(src);
        json_decref(cfg);
        return ct;
    }
    const json_t *t = json_object_get(cfg, "chat_template");
    const char *src = NULL;
    if (json_is_string(t)) {
        src = json_string_value(t);
    } else if (json_is_array(t)) {
        size_t i;
        const json_t *v;
        json_array_foreach(t, i, v) {
            const json_t *nm = json_object_get(v, "name");
            if (json_is_string(nm) && !strcmp(json_string_value(nm), "default"))
                src = json_string_value(json_object_get(v, "template"));
        }
        if (!src) {
            json_decref(cfg);
            up_errf(err, errlen, cfg_path,
                    "chat_template is a list without a template named \"default\"");
            return NULL;
        }
    } else {
        json_decref(cfg);
        up_errf(err, errlen, cfg_path,
                "has no chat_template (a base model?): give a model folder whose "
                "tokenizer_config.json has one, or a chat_template.jinja");
        return NULL;
    }
    ct = chat_template_new(src, strlen(src), cfg, err, errlen);
    json_decref(cfg);
    return ct;
}

void chat_template_free(chat_template *ct) {
    if (!ct) return;
    jinja_template_free(ct->t);
    json_decref(ct->tokens);
    free(ct);
}

void chat_rendered_free(chat_rendered *r) {
    free(r->text);
    free(r->segs);
    free(r->spans);
    memset(r, 0, sizeof *r);
}

static void push_seg(chat_rendered *o, size_t *cap, size_t start, size_t len, chat_seg_kind k,
                     int msg, int train) {
    if (len == 0) return;
    if (o->nsegs) {
        chat_segment *l = &o->segs[o->nsegs - 1];
        if (l->kind == k && l->message == msg && l->train == train && l->start + l->len == start) {
            l->len += len;
            return;
        }
    }
    if (o->nsegs == *cap) {
        *cap = *cap ? 2 * *cap : 16;
        o->segs = realloc(o->segs, *cap * sizeof *o->segs);
        UP_CHECK(o->segs, "out of memory");
    }
    o->segs[o->nsegs++] = (chat_segment){start, len, k, msg, train};
}

/* what a run of the render is to training */
enum { RUN_OUTSIDE, RUN_SPAN, RUN_END_OF_TURN };

/* A template with {% generation %} blocks says itself what is trained (transformers' assistant
 * mask): each stretch written inside them is a span, its runs marked RUN_SPAN. */
static void generation_spans(const jinja_run *run, size_t nr, unsigned char *mark,
                             chat_rendered *o) {
    free(o->spans);
    o->spans = calloc(nr, sizeof *o->spans);
    UP_CHECK(o->spans, "out of memory");
    for (size_t i = 0; i < nr;) {
        if (!run[i].gen || run[i].len == 0) {
            i++;
            continue;
        }
        size_t j = i;
        int msg = -1;
        while (j < nr && (run[j].gen || run[j].len == 0)) {
            if (run[j].len) mark[j] = RUN_SPAN;
            if (msg < 0 && run[j].len) msg = run[j].turn;
            j++;
        }
        while (j > i && run[j - 1].len == 0)
            j--;
        o->spans[o->nspans++] = (chat_span){run[i].start, run[j - 1].start + run[j - 1].len, msg};
        i = j;
    }
}

/* the segments: one per run, merged where kind, message and training agree */
static void push_segments(const jinja_run *run, size_t nr, const unsigned char *mark,
                          const json_t *msgs, chat_rendered *o) {
    size_t cap = 0;
    for (size_t i = 0; i < nr; i++) {
        int t = run[i].tag, msg = t >= JINJA_TAG_USER ? t - JINJA_TAG_USER : -1;
        chat_seg_kind kind = CHAT_SEG_CONTENT;
        if (t == JINJA_TAG_TEMPLATE)
            kind = mark[i] == RUN_END_OF_TURN ? CHAT_SEG_END_OF_TURN : CHAT_SEG_TEMPLATE;
        if (msg >= 0) {
            const char *role =
                json_string_value(json_object_get(json_array_get(msgs, (size_t)msg), "role"));
            if (!strcmp(role, "assistant")) kind = CHAT_SEG_ASSISTANT;
        }
        if (msg < 0 && mark[i] != RUN_OUTSIDE) msg = run[i].turn;
        push_seg(o, &cap, run[i].start, run[i].len, kind, msg, mark[i] != RUN_OUTSIDE);
    }
}

/* The spans and segments of a render (see chat.h). */
static int find_spans(const jinja_output *jo, const json_t *msgs, chat_rendered *o, char *err,
                      size_t errlen) {
    size_t nm = json_array_size(msgs);
    const jinja_run *run = jo->runs;
    size_t nr = jo->nruns;
    unsigned char *mark = calloc(nr ? nr : 1, 1); /* per run: RUN_* */
    UP_CHECK(mark, "out of memory");
    o->spans = calloc(nm ? nm : 1, sizeof *o->spans);
    UP_CHECK(o->spans, "out of memory");
    /* each message's first and last run, in one pass (nr: none) */
    size_t *first_run = malloc((nm ? nm : 1) * sizeof *first_run);
    size_t *last_run = malloc((nm ? nm : 1) * sizeof *last_run);
    UP_CHECK(first_run && last_run, "out of memory");
    for (size_t k = 0; k < nm; k++)
        first_run[k] = last_run[k] = nr;
    for (size_t i = 0; i < nr; i++) {
        if (run[i].tag < JINJA_TAG_USER) continue;
        size_t k = (size_t)(run[i].tag - JINJA_TAG_USER);
        if (k >= nm) continue;
        if (first_run[k] == nr) first_run[k] = i;
        last_run[k] = i;
    }
    int rc = 0;
    int gen_mode = 0;
    for (size_t i = 0; i < nr; i++)
        if (run[i].gen && run[i].len) gen_mode = 1;
    if (gen_mode) generation_spans(run, nr, mark, o);
    for (size_t k = 0; k < nm && rc == 0 && !gen_mode; k++) {
        const char *role = json_string_value(json_object_get(json_array_get(msgs, k), "role"));
        if (strcmp(role, "assistant") != 0) continue;
        int tag = JINJA_TAG_USER + (int)k;
        size_t first = first_run[k], last = last_run[k];
        if (first == nr) continue; /* not written (GLM drops blank replies): nothing to train */
        /* the turn its bytes were written in: k inside the loop over the messages; -1 outside
         * it, accepted for the last content written (templates that write the final reply
         * after the loop, as Nemotron's: its end of turn is the template text after it) */
        int turn = run[first].turn;
        for (size_t i = first; i <= last; i++)
            if (run[i].len > 0) {
                turn = run[i].turn;
                break;
            }
        int later = 0;
        for (size_t i = last + 1; i < nr && turn < 0; i++)
            if (run[i].tag >= JINJA_TAG_USER && run[i].len > 0) later = 1;
        if (turn != (int)k && (turn != -1 || later)) {
            rc = up_errf(err, errlen, NULL,
                         "message %zu (assistant): its content is written outside the "
                         "template's loop over the messages, before other messages; its end of "
                         "turn cannot be found",
                         k);
            break;
        }
        for (size_t i = first; i <= last; i++) {
            if (run[i].tag >= JINJA_TAG_USER && run[i].tag != tag && run[i].len > 0) {
                rc = up_errf(err, errlen, NULL,
                             "message %zu (assistant): its content is interleaved with message "
                             "%d's in the rendered text; no span to train on",
                             k, run[i].tag - JINJA_TAG_USER);
                break;
            }
            if (run[i].turn != turn && run[i].len > 0) {
                rc = up_errf(err, errlen, NULL,
                             "message %zu (assistant): its content is written outside the "
                             "template's loop over the messages; its end of turn cannot be found",
                             k);
                break;
            }
            mark[i] = RUN_SPAN;
        }
        if (rc) break;
        size_t end = last + 1;
        while (end < nr && run[end].turn == turn && run[end].tag < JINJA_TAG_USER) {
            mark[end] = RUN_END_OF_TURN;
            end++;
        }
        size_t sb = run[first].start;
        size_t se = end > 0 ? run[end - 1].start + run[end - 1].len : 0;
        o->spans[o->nspans++] = (chat_span){sb, se, (int)k};
    }
    if (rc == 0) push_segments(run, nr, mark, msgs, o);
    free(mark);
    free(first_run);
    free(last_run);
    return rc;
}

int chat_render(const chat_template *ct, const json_t *messages, const chat_opts *opts,
                chat_rendered *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    chat_opts o = {0};
    if (opts) o = *opts;
    if (json_is_object(messages)) messages = json_object_get(messages, "messages");
    if (!json_is_array(messages))
        return up_errf(err, errlen, NULL, "\"messages\" must be a list of {\"role\", \"content\"}");
    size_t i;
    const json_t *m;
    json_array_foreach(messages, i, m) {
        if (!json_is_object(m) || !json_is_string(json_object_get(m, "role")))
            return up_errf(err, errlen, NULL, "message %zu is not an object with a string \"role\"",
                           i);
    }
    if (json_array_size(messages) > 1000000)
        return up_errf(err, errlen, NULL, "more than a million messages in one conversation");

    jinja_arena *a = jinja_arena_new();
    jinja_value *vars = jinja_new_dict(a);
    jinja_value *list = jinja_new_list(a);
    json_array_foreach(messages, i, m) {
        jinja_value *d = jinja_new_dict(a);
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)m, k, v) {
            int tag = strcmp(k, "role") == 0 ? JINJA_TAG_DATA : JINJA_TAG_USER + (int)i;
            jinja_dict_set(a, d, k, jinja_from_json(a, v, tag));
        }
        jinja_dict_set_turn(d, (int)i);
        jinja_list_push(a, list, d);
    }
    jinja_dict_set(a, vars, "messages", list);
    jinja_dict_set(a, vars, "tools", jinja_new_none(a));
    jinja_dict_set(a, vars, "documents", jinja_new_none(a));
    jinja_dict_set(a, vars, "add_generation_prompt", jinja_new_bool(a, o.add_generation_prompt));
    const char *k;
    const json_t *v;
    json_object_foreach(ct->tokens, k, v) {
        jinja_dict_set(a, vars, k, jinja_from_json(a, v, JINJA_TAG_TEMPLATE));
    }
    if (json_is_object(o.kwargs)) {
        json_object_foreach((json_t *)o.kwargs, k, v) {
            jinja_dict_set(a, vars, k, jinja_from_json(a, v, JINJA_TAG_DATA));
        }
    }
    jinja_opts jopt = {.now = o.now};
    jinja_output jo;
    char jerr[512];
    int rc = jinja_render(ct->t, vars, &jopt, &jo, jerr, sizeof jerr);
    jinja_arena_free(a);
    if (rc) return up_errf(err, errlen, "chat template", "%s", jerr);
    out->text = jo.text;
    out->len = jo.len;
    jo.text = NULL;
    rc = find_spans(&jo, messages, out, err, errlen);
    jinja_output_free(&jo);
    if (rc) chat_rendered_free(out);
    return rc;
}

/* the index of the segment holding byte pos (segments cover the text in order) */
static size_t seg_at(const chat_rendered *r, size_t pos) {
    size_t lo = 0, hi = r->nsegs;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->segs[mid].start <= pos)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

int chat_trained(const chat_rendered *r, size_t start, size_t end) {
    size_t lo = 0, hi = r->nspans;
    while (lo < hi) { /* the first span ending after start */
        size_t mid = lo + (hi - lo) / 2;
        if (r->spans[mid].end <= start)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < r->nspans && r->spans[lo].start < end && r->spans[lo].end > r->spans[lo].start;
}

int chat_template_text(const chat_rendered *r, size_t start, size_t end) {
    if (r->nsegs == 0 || end > r->len || start >= end) return 0;
    for (size_t i = seg_at(r, start); i < r->nsegs && r->segs[i].start < end; i++)
        if (r->segs[i].kind != CHAT_SEG_TEMPLATE && r->segs[i].kind != CHAT_SEG_END_OF_TURN)
            return 0;
    return 1;
}
