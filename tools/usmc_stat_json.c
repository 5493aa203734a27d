// SPDX-License-Identifier: MIT
/* usmc-stat's JSON reader and writer (usmc_stat_json.h). */
#include <stdlib.h>
#include <string.h>

#include "usmc_stat_json.h"

#define JV_MAX_DEPTH 32 /* a snapshot nests 5 deep */

struct jp {
	const char *p, *end;
	int depth;
	size_t values_left;  /* the reader's bound on the DOM it builds */
	enum jv_error error; /* the first one */
};

static void jp_fail(struct jp *p, enum jv_error e)
{
	if (p->error == JV_OK)
		p->error = e;
}

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

/* A string under construction, NUL-terminated once done. */
struct jbuf {
	char *s;
	size_t n, cap;
};

static bool jbuf_put(struct jbuf *b, const char *bytes, size_t n)
{
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap : 16;
		char *ns;

		while (b->n + n > cap)
			cap *= 2;
		ns = realloc(b->s, cap);
		if (!ns)
			return false;
		b->s = ns;
		b->cap = cap;
	}
	memcpy(b->s + b->n, bytes, n);
	b->n += n;
	return true;
}

/* Four hex digits: their value, or -1 (fewer left, or not hex). */
static long jp_hex4(struct jp *p)
{
	long v = 0;

	if (p->end - p->p < 4)
		return -1;
	for (int i = 0; i < 4; i++) {
		int c = (unsigned char)p->p[i] | 0x20; /* lower case; digits keep */

		if (c >= '0' && c <= '9')
			v = v << 4 | (c - '0');
		else if (c >= 'a' && c <= 'f')
			v = v << 4 | (c - 'a' + 10);
		else
			return -1;
	}
	p->p += 4;
	return v;
}

/* After "\u": the code point of the escape, or of a surrogate pair
 * ("\ud83d\ude00"); -1 if malformed or a lone surrogate. */
static long jp_code_point(struct jp *p)
{
	long hi = jp_hex4(p), lo;

	if (hi < 0xd800 || hi > 0xdfff)
		return hi;
	if (hi > 0xdbff || p->end - p->p < 2 || p->p[0] != '\\' || p->p[1] != 'u')
		return -1;
	p->p += 2;
	lo = jp_hex4(p);
	if (lo < 0xdc00 || lo > 0xdfff)
		return -1;
	return 0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00);
}

/* @cp (U+0001..U+10FFFF) as UTF-8 into @out: its length. */
static int utf8_encode(long cp, char out[4])
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xc0 | cp >> 6);
		out[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xe0 | cp >> 12);
		out[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		out[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | cp >> 18);
	out[1] = (char)(0x80 | (cp >> 12 & 0x3f));
	out[2] = (char)(0x80 | (cp >> 6 & 0x3f));
	out[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* After a backslash: the bytes the escape stands for into @out, their
 * number; -1 if it is not a JSON escape, or is "\u0000" (a C string
 * cannot hold it). */
static int jp_escape(struct jp *p, char out[4])
{
	static const char plain[] = "\"\\/bfnrt", meant[] = "\"\\/\b\f\n\r\t";
	const char *k;
	long cp;

	if (p->p >= p->end)
		return -1;
	if (*p->p == 'u') {
		p->p++;
		cp = jp_code_point(p);
		return cp > 0 ? utf8_encode(cp, out) : -1;
	}
	k = memchr(plain, *p->p, sizeof(plain) - 1);
	if (!k)
		return -1;
	p->p++;
	out[0] = meant[k - plain];
	return 1;
}

static char *jp_string(struct jp *p)
{
	struct jbuf b = {0};

	if (p->p >= p->end || *p->p != '"')
		return NULL;
	p->p++;
	while (p->p < p->end && *p->p != '"') {
		unsigned char c = (unsigned char)*p->p++;
		char bytes[4] = {(char)c};
		int n = 1;

		if (c < 0x20)
			goto bad; /* JSON escapes control characters */
		if (c == '\\')
			n = jp_escape(p, bytes);
		if (n < 0)
			goto bad;
		if (!jbuf_put(&b, bytes, (size_t)n))
			goto oom;
	}
	if (p->p >= p->end)
		goto bad;
	if (!jbuf_put(&b, "", 1))
		goto oom;
	p->p++;
	return b.s;
oom:
	jp_fail(p, JV_NO_MEMORY);
bad:
	free(b.s);
	return NULL;
}

/* Append @item (and its @key in an object); the arrays double as they
 * grow, so a long array costs no quadratic copying. */
static bool jv_push(struct jv *v, char *key, struct jv *item)
{
	if (v->n == v->cap) {
		size_t cap = v->cap ? 2 * v->cap : 8;
		struct jv **ni = realloc(v->items, cap * sizeof(*ni));

		if (!ni)
			return false;
		v->items = ni;
		if (v->t == J_OBJ) {
			char **nk = realloc(v->keys, cap * sizeof(*nk));

			if (!nk)
				return false;
			v->keys = nk;
		}
		v->cap = cap;
	}
	if (v->t == J_OBJ)
		v->keys[v->n] = key;
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
		if (item && !jv_push(v, key, item))
			jp_fail(p, JV_NO_MEMORY);
		if (!item || p->error) {
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

/* @word next in the buffer: skipped. */
static bool jp_literal(struct jp *p, const char *word)
{
	size_t n = strlen(word);

	if ((size_t)(p->end - p->p) < n || memcmp(p->p, word, n))
		return false;
	p->p += n;
	return true;
}

/* A number's text into @v (its value is read when printed). */
static bool jp_number(struct jp *p, struct jv *v)
{
	const char *s = p->p;

	while (p->p < p->end && *p->p && strchr("-+0123456789.eE", *p->p))
		p->p++;
	if (p->p == s)
		return false;
	v->t = J_NUM;
	v->s = strndup(s, (size_t)(p->p - s));
	if (!v->s)
		jp_fail(p, JV_NO_MEMORY);
	return v->s != NULL;
}

static struct jv *jp_value(struct jp *p)
{
	struct jv *v;

	jp_ws(p);
	if (p->p >= p->end || p->depth >= JV_MAX_DEPTH)
		return NULL;
	if (!p->values_left) {
		jp_fail(p, JV_TOO_MANY_VALUES); /* before it costs memory */
		return NULL;
	}
	p->values_left--;
	v = calloc(1, sizeof(*v));
	if (!v) {
		jp_fail(p, JV_NO_MEMORY);
		return NULL;
	}
	p->depth++;
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
		if (jp_literal(p, "true")) {
			v->t = J_BOOL;
			v->b = true;
		} else if (jp_literal(p, "false")) {
			v->t = J_BOOL;
		} else if (jp_literal(p, "null")) {
			v->t = J_NULL;
		} else if (!jp_number(p, v)) {
			jv_free(v);
			v = NULL;
		}
	}
	p->depth--;
	return v;
}

struct jv *jv_parse(const char *s, size_t len, size_t max_values, enum jv_error *error)
{
	struct jp p = {.p = s, .end = s + len, .values_left = max_values};
	struct jv *v = jp_value(&p);

	jp_ws(&p);
	if (v && p.p != p.end)
		jp_fail(&p, JV_MALFORMED);
	if (!v || p.error) {
		/* stopped at the end: the reply was cut short */
		jp_fail(&p, p.p >= p.end ? JV_TRUNCATED : JV_MALFORMED);
		jv_free(v);
		v = NULL;
	}
	*error = p.error;
	return v;
}

const char *jv_error_text(enum jv_error e)
{
	static const char *const text[] = {
		[JV_OK] = "no error",
		[JV_MALFORMED] = "malformed snapshot",
		[JV_TRUNCATED] = "snapshot cut short",
		[JV_TOO_MANY_VALUES] = "snapshot of too many values",
		[JV_NO_MEMORY] = "out of memory",
	};

	return (unsigned int)e < sizeof(text) / sizeof(text[0]) ? text[e] : "?";
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

/* The UTF-8 sequence at @s (NUL-terminated): its length and code point,
 * or 0 if it is not a valid one (cut short, overlong, a surrogate, past
 * U+10FFFF). */
static int utf8_decode(const unsigned char *s, long *cp)
{
	long min;
	int n;

	if (s[0] < 0x80) {
		*cp = s[0];
		return 1;
	}
	if ((s[0] & 0xe0) == 0xc0)
		n = 2;
	else if ((s[0] & 0xf0) == 0xe0)
		n = 3;
	else if ((s[0] & 0xf8) == 0xf0)
		n = 4;
	else
		return 0;
	*cp = s[0] & (0x7f >> n); /* the lead byte's payload bits */
	min = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
	for (int i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80) /* the terminating NUL stops it too */
			return 0;
		*cp = *cp << 6 | (s[i] & 0x3f);
	}
	if (*cp < min || *cp > 0x10ffff || (*cp >= 0xd800 && *cp <= 0xdfff))
		return 0;
	return n;
}

/* C0, DEL and C1: what a terminal acts on rather than shows. */
static bool is_control(long cp)
{
	return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f);
}

/* Valid UTF-8 with every control character escaped, whatever the
 * publisher sent: a byte that is not UTF-8 is written as the code point of
 * its value ("\u00ff"). */
static void jv_write_str(FILE *f, const char *s)
{
	const unsigned char *u = (const unsigned char *)s;

	fputc('"', f);
	while (*u) {
		long cp;
		int n = utf8_decode(u, &cp);

		if (*u == '"' || *u == '\\')
			fprintf(f, "\\%c", *u);
		else if (!n)
			fprintf(f, "\\u%04x", *u);
		else if (is_control(cp))
			fprintf(f, "\\u%04lx", cp);
		else
			fwrite(u, 1, (size_t)n, f);
		u += n ? n : 1;
	}
	fputc('"', f);
}

/* @s with every byte outside printable ASCII as "\xHH": a new string. */
static char *printable(const char *s)
{
	const unsigned char *u;
	size_t n = 1;
	char *out, *o;

	for (u = (const unsigned char *)s; *u; u++)
		n += *u >= 0x20 && *u < 0x7f ? 1 : 4;
	out = malloc(n);
	if (!out)
		return NULL;
	o = out;
	for (u = (const unsigned char *)s; *u; u++) {
		if (*u >= 0x20 && *u < 0x7f)
			*o++ = (char)*u;
		else
			o += sprintf(o, "\\x%02x", *u);
	}
	*o = '\0';
	return out;
}

bool jv_make_printable(struct jv *v)
{
	if (v->t == J_STR) {
		char *p = printable(v->s);

		if (!p)
			return false;
		free(v->s);
		v->s = p;
	}
	for (size_t i = 0; i < v->n; i++)
		if (!jv_make_printable(v->items[i]))
			return false;
	return true;
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
