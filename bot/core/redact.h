#ifndef KB_REDACT_H
#define KB_REDACT_H
/*
 * Redaction of untrusted text: whatever a candidate kernel, an operator
 * file, a compiler or a model wrote. It runs before such text is stored
 * (evidence, state database, operator logs) or shown to anyone (pull
 * request, comments, step summary, prompts), so that a secret a hostile
 * kernel managed to read and print goes no further.
 *
 *  - every secret registered with log_add_secret (core/log.h) becomes
 *    "***" (the log's own filter, reused);
 *  - so do well-known credential shapes, registered or not: GitHub tokens
 *    (ghp_, gho_, ghs_, ghu_, ghr_, github_pat_), `sk-` API keys (OpenAI,
 *    `sk-ant-` Anthropic), GitLab `glpat-` tokens, AWS access key ids
 *    (AKIA/ASIA), the credential of `Bearer <credential>`, and PEM private
 *    key blocks (BEGIN ... PRIVATE KEY through END; a block cut short by a
 *    size cap is removed to the end, or from its first base64 line);
 *  - control characters other than newline and tab are dropped (CR, ESC,
 *    C1 controls, bidirectional overrides), invalid UTF-8 bytes become '?';
 *  - the result is cut to a size (after redaction, so a cut never splits a
 *    secret into a part that no longer matches), on a character boundary,
 *    ending "...".
 *
 * Not a proof of absence: a secret split or encoded by its printer passes.
 * The sandbox (no secret is readable inside) is the first line; this is
 * the second.
 */
#include "core/common.h"

struct strbuf;
struct cJSON;

/* Caps callers use: one reason's message, and any other string of an evidence tree. */
#define KB_REDACT_MESSAGE_MAX 2048
#define KB_REDACT_FIELD_MAX 8192

/* Redact sb in place and cut it to at most max bytes (0: no cap). */
void kb_redact(struct strbuf *sb, size_t max);

/* A redacted copy of s (NULL: ""), at most max bytes (0: no cap); the caller frees it. */
char *kb_redact_str(const char *s, size_t max);

/*
 * Redact every string of a JSON tree in place, object keys included, each
 * cut to max bytes (0: no cap). NULL is a no-op.
 */
void kb_redact_json(struct cJSON *item, size_t max);

#endif
