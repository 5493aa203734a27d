// SPDX-License-Identifier: MIT
/* usmc-stat's JSON reader and writer (usmc_stat_json.h). */
#include <stdlib.h>
#include <string.h>

#include "usmc_stat_json.h"

struct jp {
	const char *p, *end;
	int depth;
};

void jv_free(struct jv *v)
{
	if (!v)
		return;
	for (size_t i = 0; i < v->n; i++) {
		jv_free(v->items[i]);
		if (v->keys)
			free(v->keys[i]);
	}
	free(v->items);
	free(v->keys);
	free(v->s);
	free(v);
}

static void jp_ws(struct jp *p)
{
	while (p->p < p->end && (*p->p == ' ' || *p->p == '\n' || *p->p == '\t' || *p->p == '\r'))
		p->p++;
}

static struct jv *jp_value(struct jp *p);

static char *jp_string(struct jp *p)
{
	size_t cap = 16, n = 0;
	char *s;

	if (p->p >= p->end || *p->p != '"')
		return NULL;
	p->p++;
	s = malloc(cap);
	while (s && p->p < p->end && *p->p != '"') {
		char c = *p->p++;

		if (c == '\\') {
			if (p->p >= p->end)
				break;
			c = *p->p++;
			switch (c) {
			case 'n':
				c = '\n';
				break;
			case 't':
				c = '\t';
				break;
			case 'r':
				c = '\r';
				break;
			case 'b':
				c = '\b';
				break;
			case 'f':
				c = '\f';
				break;
			case 'u': /* control characters only come this way: keep ASCII */
				if (p->end - p->p < 4)
					goto bad;
				c = (char)strtol((char[]){p->p[2], p->p[3], 0}, NULL, 16);
				p->p += 4;
				break;
			default: /* '"', '\\', '/' */
				break;
			}
		}
		if (n + 2 > cap) {
			char *ns = realloc(s, cap *= 2);

			if (!ns)
				goto bad;
			s = ns;
		}
		s[n++] = c;
	}
	if (!s || p->p >= p->end)
		goto bad;
	p->p++;
	s[n] = '\0';
	return s;
bad:
	free(s);
	return NULL;
}

static bool jv_push(struct jv *v, char *key, struct jv *item)
{
	struct jv **ni = realloc(v->items, (v->n + 1) * sizeof(*ni));

	if (!ni)
		return false;
	v->items = ni;
	if (v->t == J_OBJ) {
		char **nk = realloc(v->keys, (v->n + 1) * sizeof(*nk));

		if (!nk)
			return false;
		v->keys = nk;
		v->keys[v->n] = key;
	}
	v->items[v->n++] = item;
	return true;
}

static struct jv *jp_container(struct jp *p, struct jv *v, char close)
{
	p->p++;
	jp_ws(p);
	if (p->p < p->end && *p->p == close) {
		p->p++;
		return v;
	}
	for (;;) {
		char *key = NULL;
		struct jv *item;

		jp_ws(p);
		if (v->t == J_OBJ) {
			key = jp_string(p);
			jp_ws(p);
			if (!key || p->p >= p->end || *p->p != ':') {
				free(key);
				goto bad;
			}
			p->p++;
		}
		item = jp_value(p);
		if (!item || !jv_push(v, key, item)) {
			free(key);
			jv_free(item);
			goto bad;
		}
		jp_ws(p);
		if (p->p < p->end && *p->p == ',') {
			p->p++;
			continue;
		}
		if (p->p < p->end && *p->p == close) {
			p->p++;
			return v;
		}
		goto bad;
	}
bad:
	jv_free(v);
	return NULL;
}

static struct jv *jp_value(struct jp *p)
{
	struct jv *v;

	jp_ws(p);
	if (p->p >= p->end || ++p->depth > 32)
		return NULL;
	v = calloc(1, sizeof(*v));
	if (!v)
		return NULL;
	switch (*p->p) {
	case '{':
		v->t = J_OBJ;
		v = jp_container(p, v, '}');
		break;
	case '[':
		v->t = J_ARR;
		v = jp_container(p, v, ']');
		break;
	case '"':
		v->t = J_STR;
		v->s = jp_string(p);
		if (!v->s) {
			jv_free(v);
			v = NULL;
		}
		break;
	default:
		if (!strncmp(p->p, "true", 4) || !strncmp(p->p, "false", 5)) {
			v->t = J_BOOL;
			v->b = *p->p == 't';
			p->p += v->b ? 4 : 5;
		} else if (!strncmp(p->p, "null", 4)) {
			v->t = J_NULL;
			p->p += 4;
		} else {
			const char *s = p->p;

			while (p->p < p->end && strchr("-+0123456789.eE", *p->p))
				p->p++;
			if (p->p == s) {
				jv_free(v);
				v = NULL;
				break;
			}
			v->t = J_NUM;
			v->s = strndup(s, (size_t)(p->p - s));
		}
	}
	p->depth--;
	return v;
}

struct jv *jv_parse(const char *s, size_t len)
{
	struct jp p = {.p = s, .end = s + len};
	struct jv *v = jp_value(&p);

	jp_ws(&p);
	if (v && p.p != p.end) {
		jv_free(v);
		return NULL;
	}
	return v;
}

struct jv *jv_get(const struct jv *o, const char *key)
{
	if (!o || o->t != J_OBJ)
		return NULL;
	for (size_t i = 0; i < o->n; i++)
		if (!strcmp(o->keys[i], key))
			return o->items[i];
	return NULL;
}

const char *jv_str(const struct jv *o, const char *key)
{
	const struct jv *v = jv_get(o, key);

	return v && v->t == J_STR ? v->s : "";
}

uint64_t jv_u64(const struct jv *o, const char *key)
{
	const struct jv *v = jv_get(o, key);

	return v && v->t == J_NUM ? strtoull(v->s, NULL, 10) : 0;
}

bool jv_bool(const struct jv *o, const char *key)
{
	const struct jv *v = jv_get(o, key);

	return v && v->t == J_BOOL && v->b;
}

static void jv_write_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

void jv_write(FILE *f, const struct jv *v)
{
	switch (v->t) {
	case J_NULL:
		fputs("null", f);
		break;
	case J_BOOL:
		fputs(v->b ? "true" : "false", f);
		break;
	case J_NUM:
		fputs(v->s, f);
		break;
	case J_STR:
		jv_write_str(f, v->s);
		break;
	case J_ARR:
	case J_OBJ:
		fputc(v->t == J_ARR ? '[' : '{', f);
		for (size_t i = 0; i < v->n; i++) {
			if (i)
				fputc(',', f);
			if (v->t == J_OBJ) {
				jv_write_str(f, v->keys[i]);
				fputc(':', f);
			}
			jv_write(f, v->items[i]);
		}
		fputc(v->t == J_ARR ? ']' : '}', f);
		break;
	}
}
