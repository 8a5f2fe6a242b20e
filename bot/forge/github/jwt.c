#include "core/common.h"
#include "core/util.h"
#include "forge/github/jwt.h"

#include <inttypes.h>
#include <openssl/err.h>
#include <openssl/pem.h>

void gh_base64url(struct strbuf *out, const void *data, size_t len)
{
	static const char tbl[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	const unsigned char *p = data;
	size_t i;

	for (i = 0; i + 3 <= len; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];

		strbuf_addch(out, tbl[v >> 18 & 63]);
		strbuf_addch(out, tbl[v >> 12 & 63]);
		strbuf_addch(out, tbl[v >> 6 & 63]);
		strbuf_addch(out, tbl[v & 63]);
	}
	if (len - i == 1) {
		uint32_t v = (uint32_t)p[i] << 16;

		strbuf_addch(out, tbl[v >> 18 & 63]);
		strbuf_addch(out, tbl[v >> 12 & 63]);
	} else if (len - i == 2) {
		uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;

		strbuf_addch(out, tbl[v >> 18 & 63]);
		strbuf_addch(out, tbl[v >> 12 & 63]);
		strbuf_addch(out, tbl[v >> 6 & 63]);
	}
}

/* OpenSSL's first queued reason, for an error message; clears the queue. */
static const char *ssl_reason(void)
{
	unsigned long e = ERR_get_error();
	const char *r = e ? ERR_reason_error_string(e) : NULL;

	ERR_clear_error();
	return r ? r : "unknown reason";
}

int gh_jwt_load_key(EVP_PKEY **out, const char *path)
{
	FILE *fp;
	EVP_PKEY *key;

	*out = NULL;
	fp = fopen(path, "re");
	if (!fp)
		return error_errno("could not open private key '%s'", path);
	key = PEM_read_PrivateKey(fp, NULL, NULL, NULL);
	fclose(fp);
	if (!key)
		return error("could not read private key '%s': %s", path, ssl_reason());
	if (EVP_PKEY_get_base_id(key) != EVP_PKEY_RSA) {
		EVP_PKEY_free(key);
		return error("private key '%s' is not an RSA key", path);
	}
	*out = key;
	return 0;
}

static const char jwt_header[] = "{\"alg\":\"RS256\",\"typ\":\"JWT\"}";

int gh_jwt_sign(struct strbuf *out, EVP_PKEY *key, const char *iss, int64_t now_s)
{
	struct strbuf claims = STRBUF_INIT;
	EVP_MD_CTX *ctx = NULL;
	unsigned char *sig = NULL;
	size_t siglen = 0;
	int rc = -1;

	strbuf_reset(out);
	gh_base64url(out, jwt_header, strlen(jwt_header));
	strbuf_addch(out, '.');
	strbuf_addf(&claims, "{\"iat\":%" PRId64 ",\"exp\":%" PRId64 ",\"iss\":\"",
		    now_s - GH_JWT_IAT_SKEW_S, now_s + GH_JWT_LIFETIME_S);
	strbuf_add_json_escaped(&claims, iss);
	strbuf_addstr(&claims, "\"}");
	gh_base64url(out, claims.buf, claims.len);

	ctx = EVP_MD_CTX_new();
	if (!ctx || EVP_DigestSignInit(ctx, NULL, EVP_sha256(), NULL, key) != 1 ||
	    EVP_DigestSign(ctx, NULL, &siglen, (const unsigned char *)out->buf, out->len) != 1) {
		error("could not sign the app token: %s", ssl_reason());
		goto out;
	}
	sig = xmalloc(siglen);
	if (EVP_DigestSign(ctx, sig, &siglen, (const unsigned char *)out->buf, out->len) != 1) {
		error("could not sign the app token: %s", ssl_reason());
		goto out;
	}
	strbuf_addch(out, '.');
	gh_base64url(out, sig, siglen);
	rc = 0;
out:
	if (rc)
		strbuf_reset(out);
	EVP_MD_CTX_free(ctx);
	free(sig);
	strbuf_release(&claims);
	return rc;
}
