/* A minimal JSON reader for the simulated libnvidia-ml (test code only).
 * Objects, arrays, strings (\" \\ \/ \n \t escapes; \u is kept verbatim), numbers, true,
 * false, null. The whole document is one allocation-per-node tree, freed with jm_free.
 */
#ifndef JSON_MINI_H
#define JSON_MINI_H

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

enum jm_type { JM_NULL, JM_BOOL, JM_NUM, JM_STR, JM_ARR, JM_OBJ };

typedef struct jm_node {
    enum jm_type type;
    double num;
    char *str;            /* JM_STR value */
    char *key;            /* member name when inside an object */
    struct jm_node *child; /* first element / member */
    struct jm_node *next;
} jm_node;

static void jm_free(jm_node *n) {
    while (n) {
        jm_node *next = n->next;
        jm_free(n->child);
        free(n->str);
        free(n->key);
        free(n);
        n = next;
    }
}

static void jm_ws(const char **p) {
    while (**p && isspace((unsigned char)**p)) (*p)++;
}

static char *jm_string(const char **p) {
    /* **p == '"' */
    const char *s = ++(*p);
    size_t cap = 16, len = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    while (*s && *s != '"') {
        char c = *s++;
        if (c == '\\' && *s) {
            char e = *s++;
            c = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
        }
        if (len + 2 > cap) {
            cap *= 2;
            char *grown = realloc(out, cap);
            if (!grown) { free(out); return NULL; }
            out = grown;
        }
        out[len++] = c;
    }
    out[len] = 0;
    if (*s != '"') { free(out); return NULL; }
    *p = s + 1;
    return out;
}

static jm_node *jm_value(const char **p, int depth);

static jm_node *jm_new(enum jm_type t) {
    jm_node *n = calloc(1, sizeof *n);
    if (n) n->type = t;
    return n;
}

static jm_node *jm_container(const char **p, int depth, int is_obj) {
    jm_node *n = jm_new(is_obj ? JM_OBJ : JM_ARR), *last = NULL;
    if (!n) return NULL;
    (*p)++;
    jm_ws(p);
    if (**p == (is_obj ? '}' : ']')) { (*p)++; return n; }
    for (;;) {
        char *key = NULL;
        jm_ws(p);
        if (is_obj) {
            if (**p != '"' || !(key = jm_string(p))) goto fail;
            jm_ws(p);
            if (**p != ':') { free(key); goto fail; }
            (*p)++;
        }
        jm_node *v = jm_value(p, depth + 1);
        if (!v) { free(key); goto fail; }
        v->key = key;
        if (last) last->next = v; else n->child = v;
        last = v;
        jm_ws(p);
        if (**p == ',') { (*p)++; continue; }
        if (**p == (is_obj ? '}' : ']')) { (*p)++; return n; }
        goto fail;
    }
fail:
    jm_free(n);
    return NULL;
}

static jm_node *jm_value(const char **p, int depth) {
    jm_ws(p);
    if (depth > 64) return NULL;
    char c = **p;
    if (c == '{' || c == '[') return jm_container(p, depth, c == '{');
    if (c == '"') {
        jm_node *n = jm_new(JM_STR);
        if (n && !(n->str = jm_string(p))) { free(n); return NULL; }
        return n;
    }
    if (!strncmp(*p, "true", 4) || !strncmp(*p, "false", 5)) {
        jm_node *n = jm_new(JM_BOOL);
        if (n) n->num = (c == 't');
        *p += (c == 't') ? 4 : 5;
        return n;
    }
    if (!strncmp(*p, "null", 4)) { *p += 4; return jm_new(JM_NULL); }
    char *end;
    double d = strtod(*p, &end);
    if (end == *p) return NULL;
    *p = end;
    jm_node *n = jm_new(JM_NUM);
    if (n) n->num = d;
    return n;
}

static jm_node *jm_parse(const char *text) {
    const char *p = text;
    jm_node *n = jm_value(&p, 0);
    jm_ws(&p);
    if (n && *p) { jm_free(n); return NULL; }
    return n;
}

static jm_node *jm_get(const jm_node *obj, const char *key) {
    if (!obj || obj->type != JM_OBJ) return NULL;
    for (jm_node *m = obj->child; m; m = m->next)
        if (m->key && !strcmp(m->key, key)) return m;
    return NULL;
}

static jm_node *jm_at(const jm_node *arr, int i) {
    if (!arr || arr->type != JM_ARR) return NULL;
    jm_node *m = arr->child;
    while (m && i-- > 0) m = m->next;
    return m;
}

static int jm_len(const jm_node *arr) {
    int n = 0;
    if (!arr || arr->type != JM_ARR) return 0;
    for (jm_node *m = arr->child; m; m = m->next) n++;
    return n;
}

#endif
