// SPDX-License-Identifier: MIT
/*
 * usmc-stat's JSON reader (tools/usmc_stat_json.c): it parses what another
 * process sends, so it must hold any bytes. Every input here lies at the
 * very end of a heap block of its own size, not NUL-terminated: under ASan
 * a read past the reply is a heap-buffer-overflow. And what it writes back
 * (--json, the table) carries no control character raw.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "usmc_stat_json.h"

#define NO_LIMIT ((size_t)-1)

static enum jv_error last_error;

/* @len bytes of @s in a block of exactly @len bytes, parsed into at most
 * @max_values values. */
static struct jv *parse_limited(const char *s, size_t len, size_t max_values)
{
	char *buf = malloc(len ? len : 1);
	struct jv *v;

	assert_non_null(buf);
	memcpy(buf, s, len);
	v = jv_parse(buf, len, max_values, &last_error);
	assert_true((v != NULL) == (last_error == JV_OK));
	free(buf);
	return v;
}

static struct jv *parse_exact(const char *s, size_t len)
{
	return parse_limited(s, len, NO_LIMIT);
}

static struct jv *parse_str(const char *s)
{
	return parse_exact(s, strlen(s));
}

/* A literal cut short at the end of the reply: no read past it. */
static void test_literal_at_end(void **state)
{
	static const char *const cut[] = {"t",	 "tr",	 "tru", "f",  "fa",
					  "fal", "fals", "n",	"nu", "nul"};
	struct jv *v;

	(void)state;
	for (size_t i = 0; i < sizeof(cut) / sizeof(cut[0]); i++)
		assert_null(parse_str(cut[i]));
	v = parse_str("true");
	assert_non_null(v);
	assert_int_equal(v->t, J_BOOL);
	assert_true(v->b);
	jv_free(v);
	v = parse_str("[false,null]");
	assert_non_null(v);
	assert_int_equal(v->n, 2);
	assert_int_equal(v->items[0]->t, J_BOOL);
	assert_int_equal(v->items[1]->t, J_NULL);
	jv_free(v);
}

/* Every prefix of a snapshot-like reply, each at the end of its block:
 * whatever the parser decides, it reads nothing past the end. */
static void test_every_prefix_at_end(void **state)
{
	static const char doc[] = "{\"schema\":1,\"comm\":\"a\\u001bb\\\"\\\\\\/\\n\","
				  "\"kernel_compat\":false,\"cg\":null,\"ok\":true,"
				  "\"n\":-12.5e3,\"arr\":[0,1,[],{}],\"e\":\"\\ud83d\\ude00\"}";
	struct jv *v;

	(void)state;
	for (size_t len = 0; len < sizeof(doc) - 1; len++)
		jv_free(parse_exact(doc, len));
	v = parse_exact(doc, sizeof(doc) - 1);
	assert_non_null(v);
	assert_string_equal(jv_str(v, "comm"), "a\x1b"
					       "b\"\\/\n");
	assert_string_equal(jv_str(v, "e"), "\xf0\x9f\x98\x80");
	jv_free(v);
}

/* "\uXXXX": all four digits count, and the result is UTF-8. */
static void test_unicode_escapes(void **state)
{
	static const struct {
		const char *json, *want;
	} ok[] = {
		{"\"\\u001b\"", "\x1b"},
		{"\"\\u00e9\"", "\xc3\xa9"},
		{"\"\\u009b\"", "\xc2\x9b"},
		{"\"\\u1b1b\"", "\xe1\xac\x9b"},
		{"\"\\uD83D\\uDE00\"", "\xf0\x9f\x98\x80"},
	};
	static const char *const bad[] = {
		"\"\\u0000\"",	      /* NUL: a C string cannot hold it */
		"\"\\u00\"",	      /* short */
		"\"\\u00zz\"",	      /* not hex */
		"\"\\ud83d\"",	      /* a high surrogate alone */
		"\"\\ude00\"",	      /* a low surrogate alone */
		"\"\\ud83d\\u0041\"", /* a high surrogate without its pair */
		"\"\\x41\"",	      /* not a JSON escape */
		"\"a\033b\"",	      /* a raw control character */
		"\"\\u00",
		"\"\\",
		"\"abc",
	};
	struct jv *v;

	(void)state;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		v = parse_str(ok[i].json);
		assert_non_null(v);
		assert_int_equal(v->t, J_STR);
		assert_string_equal(v->s, ok[i].want);
		jv_free(v);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_null(parse_str(bad[i]));
}

/* A NUL byte in the reply is no part of a number. */
static void test_nul_byte(void **state)
{
	(void)state;
	assert_null(parse_exact("[1\0]", 4));
	assert_null(parse_exact("1\0", 2));
}

/* jv_write() of what a publisher sent: valid UTF-8, every control
 * character escaped; jv_make_printable(): printable ASCII. */
static void test_output_escapes(void **state)
{
	static const char in[] = "\"a\\u001b[2J\x7f\xc2\x9b\xff\xc3\xa9\\u0007\"";
	struct jv *v = parse_str(in);
	char *out = NULL;
	size_t len = 0;
	FILE *f;

	(void)state;
	assert_non_null(v);
	f = open_memstream(&out, &len);
	assert_non_null(f);
	jv_write(f, v);
	fclose(f);
	assert_string_equal(out, "\"a\\u001b[2J\\u007f\\u009b\\u00ff\xc3\xa9\\u0007\"");
	free(out);
	assert_true(jv_make_printable(v));
	assert_string_equal(v->s, "a\\x1b[2J\\x7f\\xc2\\x9b\\xff\\xc3\\xa9\\x07");
	jv_free(v);
}

/* The values a reply may build are bounded: one more is refused before it
 * is allocated, whatever the reply's size. */
static void test_value_cap(void **state)
{
	static const char doc[] = "{\"a\":[1,2,\"x\"],\"b\":null}"; /* 6 values */
	struct jv *v;

	(void)state;
	v = parse_limited(doc, strlen(doc), 6);
	assert_non_null(v);
	jv_free(v);
	assert_null(parse_limited(doc, strlen(doc), 5));
	assert_int_equal(last_error, JV_TOO_MANY_VALUES);
	assert_null(parse_limited(doc, strlen(doc), 0));
	assert_int_equal(last_error, JV_TOO_MANY_VALUES);
}

/* A long array grows by doubling (no copy per element) and keeps order. */
static void test_long_array(void **state)
{
	enum { N = 100000 };
	char *doc = malloc(2 * N + 2), *p = doc;
	struct jv *v;

	(void)state;
	assert_non_null(doc);
	*p++ = '[';
	for (int i = 0; i < N; i++) {
		*p++ = (char)('0' + i % 10);
		*p++ = i + 1 < N ? ',' : ']';
	}
	v = parse_exact(doc, (size_t)(p - doc));
	free(doc);
	assert_non_null(v);
	assert_int_equal(v->n, N);
	assert_true(v->cap >= N && v->cap < 2 * N);
	assert_string_equal(v->items[N - 1]->s, "9");
	jv_free(v);
}

/* Why a reply is refused: cut short, or malformed. */
static void test_errors(void **state)
{
	(void)state;
	assert_null(parse_str("{\"schema\":1,\"comm\":\"ab"));
	assert_int_equal(last_error, JV_TRUNCATED);
	assert_null(parse_str("{\"schema\":1,"));
	assert_int_equal(last_error, JV_TRUNCATED);
	assert_null(parse_str("{\"schema\":1}}"));
	assert_int_equal(last_error, JV_MALFORMED);
	assert_null(parse_str("{\"schema\" 1}"));
	assert_int_equal(last_error, JV_MALFORMED);
	assert_null(parse_str(""));
	assert_int_equal(last_error, JV_TRUNCATED);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_literal_at_end),	cmocka_unit_test(test_every_prefix_at_end),
		cmocka_unit_test(test_unicode_escapes), cmocka_unit_test(test_nul_byte),
		cmocka_unit_test(test_output_escapes),	cmocka_unit_test(test_value_cap),
		cmocka_unit_test(test_long_array),	cmocka_unit_test(test_errors),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
