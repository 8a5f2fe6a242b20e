#include "core/common.h"
#include "core/redact.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "core/util.h"

#include <cjson/cJSON.h>

#define MASK "***"

enum charset {
	CS_ALNUM,       /* A-Z a-z 0-9 */
	CS_WORD,        /* and _ */
	CS_KEY,         /* and _ - */
	CS_UPPER        /* A-Z 0-9 */
};

/* A credential recognised by its prefix and the characters after it. */
static const struct shape {
	const char *prefix;     /* case-sensitive */
	enum charset cs;
	size_t min;             /* characters after the prefix */
} shapes[] = {
	{ "ghp_", CS_ALNUM, 20 },      /* GitHub: personal, OAuth, app installation, */
	{ "gho_", CS_ALNUM, 20 },      /* user-to-server and refresh tokens */
	{ "ghs_", CS_ALNUM, 20 },
	{ "ghu_", CS_ALNUM, 20 },
	{ "ghr_", CS_ALNUM, 20 },
	{ "github_pat_", CS_WORD, 20 },
	{ "sk-", CS_KEY, 20 },         /* OpenAI sk-, sk-proj-; Anthropic sk-ant- */
	{ "glpat-", CS_KEY, 20 },
	{ "AKIA", CS_UPPER, 16 },      /* AWS access key ids */
	{ "ASIA", CS_UPPER, 16 },
};

static bool in_set(enum charset cs, unsigned char c)
{
	bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');

	switch (cs) {
	case CS_ALNUM: return alnum;
	case CS_WORD: return alnum || c == '_';
	case CS_KEY: return alnum || c == '_' || c == '-';
	case CS_UPPER: return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
	}
	return false;
}

/* A token may start here: the byte before is not a letter or digit. */
static bool at_boundary(const char *s, size_t i)
{
	return !i || !in_set(CS_ALNUM, (unsigned char)s[i - 1]);
}

static bool starts(const char *s, size_t len, size_t i, const char *lit)
{
	size_t n = strlen(lit);

	return len - i >= n && !memcmp(s + i, lit, n);
}

/* Length of the credential that starts at s[i], 0 when none does. */
static size_t match_shape(const char *s, size_t len, size_t i)
{
	if (!at_boundary(s, i))
		return 0;
	for (size_t k = 0; k < ARRAY_SIZE(shapes); k++) {
		size_t p = strlen(shapes[k].prefix), j;

		if (!starts(s, len, i, shapes[k].prefix))
			continue;
		for (j = i + p; j < len && in_set(shapes[k].cs, (unsigned char)s[j]); j++)
			;
		if (j - i - p >= shapes[k].min)
			return j - i;
	}
	return 0;
}

static bool bearer_char(unsigned char c)
{
	return in_set(CS_KEY, c) || c == '.' || c == '~' || c == '+' || c == '/' || c == '=';
}

/*
 * "Bearer <credential>" (any case) at s[i]: *keep gets the length of the
 * scheme and its blanks, which stay; returns the whole length, 0 if none.
 */
static size_t match_bearer(const char *s, size_t len, size_t i, size_t *keep)
{
	size_t j = i + 6, t;

	if (len - i < 7 || strncasecmp(s + i, "bearer", 6) || !at_boundary(s, i) ||
	    (s[j] != ' ' && s[j] != '\t'))
		return 0;
	while (j < len && (s[j] == ' ' || s[j] == '\t'))
		j++;
	for (t = j; t < len && bearer_char((unsigned char)s[t]); t++)
		;
	if (t - j < 8)
		return 0;
	*keep = j - i;
	return t - i;
}

/*
 * Whether the PEM marker head ("-----BEGIN " or "-----END ") at s[i] names
 * a private key; *end is then just past its closing dashes.
 */
static bool private_key_marker(const char *s, size_t len, size_t i, const char *head, size_t *end)
{
	size_t j = i + strlen(head), close;
	const char *dashes;

	if (!starts(s, len, i, head))
		return false;
	dashes = memmem(s + j, len - j < 80 ? len - j : 80, "-----", 5);
	if (!dashes)
		return false;
	close = (size_t)(dashes - s);
	if (!memmem(s + j, close - j, "PRIVATE KEY", 11))
		return false;
	*end = close + 5;
	return true;
}

/* A whole private key block at s[i] (to the end of the text when its END was cut off). */
static size_t match_pem(const char *s, size_t len, size_t i)
{
	const char *endm;
	size_t after, stop;

	if (!private_key_marker(s, len, i, "-----BEGIN ", &after))
		return 0;
	endm = memmem(s + after, len - after, "-----END ", 9);
	if (!endm || !private_key_marker(s, len, (size_t)(endm - s), "-----END ", &stop))
		return len - i;
	return stop - i;
}

/* A non-empty run of base64 characters. */
static bool base64_line(const char *s, size_t len)
{
	for (size_t k = 0; k < len; k++)
		if (!in_set(CS_ALNUM, (unsigned char)s[k]) && s[k] != '+' && s[k] != '/' && s[k] != '=')
			return false;
	return len > 0;
}

/*
 * An END marker whose BEGIN is not in the text (a tail that starts inside
 * a key): the whole base64 lines right before it, already copied to out,
 * are taken back out.
 */
static size_t match_orphan_pem_end(const char *s, size_t len, size_t i, struct strbuf *out)
{
	size_t stop, n = out->len, start;

	if (!private_key_marker(s, len, i, "-----END ", &stop))
		return 0;
	while (n && out->buf[n - 1] == '\n') {
		for (start = n - 1; start && out->buf[start - 1] != '\n'; start--)
			;
		if (!base64_line(out->buf + start, n - 1 - start))
			break;
		n = start;
	}
	strbuf_setlen(out, n);
	return stop - i;
}

/*
 * The length of the UTF-8 sequence at s (1-4), 0 when it is not valid
 * (overlong forms and surrogates included); *cp gets the code point.
 */
static size_t utf8_seq(const unsigned char *s, size_t left, uint32_t *cp)
{
	size_t n;
	unsigned char lo = 0x80, hi = 0xBF;

	if (s[0] < 0x80) {
		*cp = s[0];
		return 1;
	}
	if (s[0] >= 0xC2 && s[0] <= 0xDF) {
		n = 2;
		*cp = s[0] & 0x1F;
	} else if (s[0] >= 0xE0 && s[0] <= 0xEF) {
		n = 3;
		*cp = s[0] & 0x0F;
		lo = s[0] == 0xE0 ? 0xA0 : 0x80;
		hi = s[0] == 0xED ? 0x9F : 0xBF;
	} else if (s[0] >= 0xF0 && s[0] <= 0xF4) {
		n = 4;
		*cp = s[0] & 0x07;
		lo = s[0] == 0xF0 ? 0x90 : 0x80;
		hi = s[0] == 0xF4 ? 0x8F : 0xBF;
	} else {
		return 0;
	}
	if (left < n || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t k = 1; k < n; k++) {
		if (k > 1 && (s[k] < 0x80 || s[k] > 0xBF))
			return 0;
		*cp = (*cp << 6) | (s[k] & 0x3F);
	}
	return n;
}

/* Characters that hide or reorder what a reader sees (terminal escapes, Trojan Source). */
static bool dropped(uint32_t cp)
{
	return (cp < 0x20 && cp != '\n' && cp != '\t') || (cp >= 0x7F && cp <= 0x9F) ||
		(cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

/* Pass 1: drop control characters, replace invalid UTF-8 bytes with '?'. */
static void clean_chars(const struct strbuf *in, struct strbuf *out)
{
	const unsigned char *s = (const unsigned char *)in->buf;
	size_t i = 0;

	while (i < in->len) {
		uint32_t cp;
		size_t n = utf8_seq(s + i, in->len - i, &cp);

		if (!n) {
			strbuf_addch(out, '?');
			i++;
			continue;
		}
		if (!dropped(cp))
			strbuf_add(out, s + i, n);
		i += n;
	}
}

static bool starts_some_shape(char c)
{
	for (size_t k = 0; k < ARRAY_SIZE(shapes); k++)
		if (shapes[k].prefix[0] == c)
			return true;
	return false;
}

/*
 * The credential at s[i] masked into out; its length, 0 when none starts
 * there. The first byte picks what to try: most bytes start nothing, and
 * a flood of output is scanned in one pass.
 */
static size_t mask_at(const char *s, size_t len, size_t i, struct strbuf *out)
{
	size_t n = 0, keep = 0;

	if (s[i] == '-') {
		if ((n = match_pem(s, len, i)) || (n = match_orphan_pem_end(s, len, i, out)))
			strbuf_addstr(out, MASK);
	} else if (s[i] == 'b' || s[i] == 'B') {
		if ((n = match_bearer(s, len, i, &keep))) {
			strbuf_add(out, s + i, keep);
			strbuf_addstr(out, MASK);
		}
	} else if (starts_some_shape(s[i]) && (n = match_shape(s, len, i))) {
		strbuf_addstr(out, MASK);
	}
	return n;
}

/* Pass 3: credential shapes to MASK. */
static void mask_shapes(const struct strbuf *in, struct strbuf *out)
{
	size_t i = 0;

	while (i < in->len) {
		size_t n = mask_at(in->buf, in->len, i, out);

		if (!n) {
			strbuf_addch(out, in->buf[i]);
			n = 1;
		}
		i += n;
	}
}

/* Cut to max bytes on a character boundary, "..." included. */
static void cut(struct strbuf *sb, size_t max)
{
	size_t keep;

	if (!max || sb->len <= max)
		return;
	keep = max > 3 ? max - 3 : max;
	while (keep && ((unsigned char)sb->buf[keep] & 0xC0) == 0x80)
		keep--;
	strbuf_setlen(sb, keep);
	if (max > 3)
		strbuf_addstr(sb, "...");
}

/* Move tmp's contents into sb (keeping sb's cap); tmp is left empty. */
static void take(struct strbuf *sb, struct strbuf *tmp)
{
	size_t cap = sb->cap;

	strbuf_release(sb);
	*sb = *tmp;
	sb->cap = cap;
	strbuf_init(tmp, 0);
}

void kb_redact(struct strbuf *sb, size_t max)
{
	struct strbuf tmp = STRBUF_INIT;

	/* controls first: a NUL would hide what follows from the secret search */
	clean_chars(sb, &tmp);
	take(sb, &tmp);
	log_redact(sb);
	mask_shapes(sb, &tmp);
	take(sb, &tmp);
	cut(sb, max);
	strbuf_release(&tmp);
}

char *kb_redact_str(const char *s, size_t max)
{
	struct strbuf sb = STRBUF_INIT;

	strbuf_addstr(&sb, s ? s : "");
	kb_redact(&sb, max);
	return strbuf_detach(&sb, NULL);
}

/* The redacted text of s in tmp; true when it differs from s. */
static bool redacted(const char *s, size_t max, struct strbuf *tmp)
{
	strbuf_reset(tmp);
	strbuf_addstr(tmp, s);
	kb_redact(tmp, max);
	return strcmp(tmp->buf, s) != 0;
}

static void redact_node(cJSON *it, size_t max, struct strbuf *tmp)
{
	if (it->string && !(it->type & cJSON_StringIsConst) && redacted(it->string, max, tmp)) {
		char *key = cJSON_malloc(tmp->len + 1);

		if (!key)
			die("out of memory");
		memcpy(key, tmp->buf, tmp->len + 1);
		cJSON_free(it->string);
		it->string = key;
	}
	if (cJSON_IsString(it) && it->valuestring && !(it->type & cJSON_IsReference) &&
	    redacted(it->valuestring, max, tmp) && !cJSON_SetValuestring(it, tmp->buf))
		die("out of memory");
	for (cJSON *child = it->child; child; child = child->next)
		redact_node(child, max, tmp);
}

void kb_redact_json(cJSON *item, size_t max)
{
	struct strbuf tmp = STRBUF_INIT;

	if (item)
		redact_node(item, max, &tmp);
	strbuf_release(&tmp);
}
