/*
 * X-Hub-Signature-256 (daemon/webhook.c), checked before anything reads a
 * delivery. Input: secret %% header %% body. The header passes exactly
 * when it is "sha256=" and the HMAC in hex (either case); the right
 * header, computed here, always passes.
 */
#include "core/common.h"
#include "core/util.h"
#include "daemon/webhook.h"
#include "fuzz.h"

#include <ctype.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

int kb_fuzz_webhook_signature(const uint8_t *data, size_t size)
{
	struct kb_fuzz_parts p;
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;
	char right[7 + 64 + 1];
	const char *secret, *header, *body;
	bool ok, want;

	kb_fuzz_init();
	kb_fuzz_split(&p, data, size, 3);
	secret = p.v[0];
	header = p.v[1];
	body = p.v[2];
	ok = kb_webhook_signature_ok(secret, body, p.len[2], header);
	if (!*secret) {
		FUZZ_CHECK(!ok); /* no secret: nothing is accepted */
		goto out;
	}
	FUZZ_CHECK(HMAC(EVP_sha256(), secret, (int)strlen(secret), (const unsigned char *)body,
			p.len[2], md, &n) && n == 32);
	memcpy(right, "sha256=", 7);
	for (unsigned int i = 0; i < 32; i++)
		xsnprintf(right + 7 + 2 * i, 3, "%02x", md[i]);
	want = strlen(header) == 71 && !strncmp(header, "sha256=", 7) &&
	       !strcasecmp(header + 7, right + 7);
	FUZZ_CHECK(ok == want);
	FUZZ_CHECK(kb_webhook_signature_ok(secret, body, p.len[2], right));
	for (char *q = right + 7; *q; q++)
		*q = (char)toupper((unsigned char)*q);
	FUZZ_CHECK(kb_webhook_signature_ok(secret, body, p.len[2], right));
out:
	kb_fuzz_parts_release(&p);
	return 0;
}

KB_FUZZ_ENTRY(webhook_signature)
