#ifndef KB_CORE_HASH_H
#define KB_CORE_HASH_H
/*
 * Hashes the bot keeps: SHA-256 as 64 lower-case hex characters (content
 * addresses, evidence, resume keys, body hashes) and FNV-1a (cheap,
 * stable, non-secret keys such as seeds and change stamps).
 *
 * A struct kb_sha256 holds an OpenSSL digest context: kb_sha256_init
 * creates it, kb_sha256_final_hex writes the digest and frees it (so a
 * context serves one digest), kb_sha256_release frees one abandoned on an
 * error path. Out of memory dies, as xmalloc does.
 */
#include "core/common.h"

#define KB_SHA256_HEX_LEN 64

/* SHA-256 of len bytes as 64 hex characters and a NUL (hex has 65 bytes). */
void kb_sha256_hex(const void *data, size_t len, char hex[65]);
/* SHA-256 of a file's bytes as 64 hex characters. 0 or -1 (not readable). */
int kb_sha256_file(const char *path, char hex[65]);

/* A digest fed in pieces: init, update as often as needed, final_hex once. */
struct kb_sha256 {
	void *ctx; /* EVP_MD_CTX, owned until kb_sha256_final_hex */
};
void kb_sha256_init(struct kb_sha256 *h);
void kb_sha256_update(struct kb_sha256 *h, const void *data, size_t len);
/* Writes 64 hex characters and a NUL and frees the context. */
void kb_sha256_final_hex(struct kb_sha256 *h, char hex[65]);
/* Frees a context left unfinished (an error path); a no-op after final_hex. */
void kb_sha256_release(struct kb_sha256 *h);

/* FNV-1a, 64 bits: start from KB_FNV1A64_INIT, then feed bytes or a C string. */
#define KB_FNV1A64_INIT 0xcbf29ce484222325ULL
uint64_t kb_fnv1a64(uint64_t h, const void *data, size_t len);
uint64_t kb_fnv1a64_str(uint64_t h, const char *s);
/* FNV-1a, 32 bits, over len bytes from the standard offset basis. */
uint32_t kb_fnv1a32(const void *data, size_t len);

#endif
