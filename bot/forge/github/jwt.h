#ifndef KB_GH_JWT_H
#define KB_GH_JWT_H
/*
 * The GitHub App JSON Web Token: header {"alg":"RS256","typ":"JWT"},
 * claims {"iat": now - 60, "exp": now + 540, "iss": "<app id>"} (iat in
 * the past against clock drift, exp inside GitHub's ten minutes), signed
 * with RSASSA-PKCS1-v1_5 SHA-256 through OpenSSL's EVP interface.
 */
#include "core/common.h"
#include "core/strbuf.h"

#include <openssl/evp.h>

#define GH_JWT_IAT_SKEW_S 60
#define GH_JWT_LIFETIME_S 540

/* Append base64url (RFC 4648 section 5) of data, without padding. */
void gh_base64url(struct strbuf *out, const void *data, size_t len);

/* Load an RSA private key from a PEM file; error names the file, never the key. */
int gh_jwt_load_key(EVP_PKEY **out, const char *path);

/* Replace out with a signed JWT for issuer iss at wall time now_s. */
int gh_jwt_sign(struct strbuf *out, EVP_PKEY *key, const char *iss, int64_t now_s);

#endif
