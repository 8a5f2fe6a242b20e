#include "core/common.h"
#include "core/hash.h"
#include "core/strbuf.h"
#include "core/util.h"

#include <openssl/evp.h>

static void hex_of(const unsigned char *md, unsigned int n, char hex[65])
{
	static const char digits[] = "0123456789abcdef";

	for (unsigned int i = 0; i < n && i < 32; i++) {
		hex[2 * i] = digits[md[i] >> 4];
		hex[2 * i + 1] = digits[md[i] & 15];
	}
	hex[64] = '\0';
}

void kb_sha256_hex(const void *data, size_t len, char hex[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;

	if (EVP_Digest(data, len, md, &n, EVP_sha256(), NULL) != 1 || n != 32)
		die("could not compute a sha256 digest");
	hex_of(md, n, hex);
}

int kb_sha256_file(const char *path, char hex[65])
{
	struct strbuf sb = STRBUF_INIT;

	if (strbuf_read_file(&sb, path, 0) < 0) {
		strbuf_release(&sb);
		return -1;
	}
	kb_sha256_hex(sb.buf, sb.len, hex);
	strbuf_release(&sb);
	return 0;
}

void kb_sha256_init(struct kb_sha256 *h)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();

	if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1)
		die("could not start a sha256 digest");
	h->ctx = ctx;
}

void kb_sha256_update(struct kb_sha256 *h, const void *data, size_t len)
{
	if (EVP_DigestUpdate(h->ctx, data, len) != 1)
		die("could not compute a sha256 digest");
}

void kb_sha256_final_hex(struct kb_sha256 *h, char hex[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;

	if (EVP_DigestFinal_ex(h->ctx, md, &n) != 1 || n != 32)
		die("could not compute a sha256 digest");
	EVP_MD_CTX_free(h->ctx);
	h->ctx = NULL;
	hex_of(md, n, hex);
}

void kb_sha256_release(struct kb_sha256 *h)
{
	EVP_MD_CTX_free(h->ctx);
	h->ctx = NULL;
}

uint64_t kb_fnv1a64(uint64_t h, const void *data, size_t len)
{
	const unsigned char *p = data;

	for (size_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ULL;
	return h;
}

uint64_t kb_fnv1a64_str(uint64_t h, const char *s)
{
	return kb_fnv1a64(h, s, strlen(s));
}

uint32_t kb_fnv1a32(const void *data, size_t len)
{
	const unsigned char *p = data;
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 16777619u;
	return h;
}
