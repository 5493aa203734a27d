/* SPDX-License-Identifier: MIT */
/*
 * usmc-stat's JSON reader: a small DOM for the snapshots a libusmc context
 * publishes (docs/usmc-stat.md), and its writer for --json. The reply comes
 * from another process: the reader must hold whatever bytes it is given.
 */
#ifndef USMC_STAT_JSON_H
#define USMC_STAT_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jv {
	enum jtype t;
	bool b;
	char *s;	   /* J_STR: the string; J_NUM: its text */
	struct jv **items; /* J_ARR, J_OBJ */
	char **keys;	   /* J_OBJ */
	size_t n, cap;	   /* items (and keys) held, and room for */
};

enum jv_error { JV_OK, JV_MALFORMED, JV_TRUNCATED, JV_TOO_MANY_VALUES, JV_NO_MEMORY };

/*
 * The value in @s[0..@len) (not NUL-terminated), or NULL and why in
 * *@error if it is not one JSON value (whitespace around it aside). At
 * most @max_values values (each string, number, literal, array and object
 * counts one) are built: the memory a reply can cost is bounded by that,
 * not by how densely it packs them.
 */
struct jv *jv_parse(const char *s, size_t len, size_t max_values, enum jv_error *error);
const char *jv_error_text(enum jv_error e);
void jv_free(struct jv *v);

/* Member @key of object @o, or NULL (@o NULL or not an object too). */
struct jv *jv_get(const struct jv *o, const char *key);
/* Member @key as a string ("" if absent or not one), a number (0), a bool
 * (false). */
const char *jv_str(const struct jv *o, const char *key);
uint64_t jv_u64(const struct jv *o, const char *key);
bool jv_bool(const struct jv *o, const char *key);

/* @v as JSON text: valid UTF-8, every control character escaped (C0, DEL,
 * C1), a byte that is not UTF-8 written as the code point of its value. */
void jv_write(FILE *f, const struct jv *v);

/* For a terminal: every string value of @v in printable ASCII, each other
 * byte (control characters, escape sequences, anything not ASCII) shown
 * as "\xHH". false: out of memory (some strings may be done). */
bool jv_make_printable(struct jv *v);

#endif
