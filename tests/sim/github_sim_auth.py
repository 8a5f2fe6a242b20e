"""Who is calling: the Authorization header, personal access tokens,
installation tokens, and GitHub App JWTs (RS256, checked with the openssl
command line because the standard library has no RSA)."""

import base64
import binascii
import json
import os
import subprocess
import tempfile

from github_sim_store import SimError

# GitHub's messages for refused JWTs (all 401)
JWT_UNDECODABLE = "A JSON web token could not be decoded"
JWT_EXPIRED = ("'Expiration time' claim ('exp') must be a numeric value representing "
               "the future time at which the assertion expires")
JWT_TOO_LONG = "'Expiration time' claim ('exp') is too far in the future"
JWT_IAT = ("'Issued at' claim ('iat') must be an Integer representing the time that "
           "the assertion was issued")
JWT_ISS = "'Issuer' claim ('iss') must be an Integer"
JWT_MAX_LIFETIME = 600 + 60  # ten minutes plus GitHub's allowance for clock drift


class Identity:
    """kind: 'pat', 'installation', 'app' (a verified JWT) or None (anonymous)."""

    def __init__(self, kind=None, login=None, token=None, installation_id=None):
        self.kind = kind
        self.login = login
        self.token = token
        self.installation_id = installation_id


def parse_authorization(value):
    """-> (scheme, credential); scheme is 'token', 'bearer', 'basic' or None."""
    if not value:
        return None, None
    scheme, _, cred = value.strip().partition(" ")
    scheme = scheme.lower()
    cred = cred.strip()
    if scheme == "basic":
        try:
            user_pass = base64.b64decode(cred).decode()
        except (binascii.Error, UnicodeDecodeError):
            return "basic", ""
        return "basic", user_pass.partition(":")[2]
    if scheme in ("token", "bearer"):
        return scheme, cred
    return scheme or None, cred


def b64url_decode(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


class AppKey:
    """The App's public key, kept in a file for `openssl dgst -verify`."""

    def __init__(self, app_id, public_pem, slug="kernelbot", owner="kernelbot-org",
                 client_id=None):
        self.app_id = int(app_id)
        self.client_id = client_id      # GitHub accepts it as iss too
        self.slug = slug
        self.owner = owner
        self.pem = public_pem if isinstance(public_pem, str) else public_pem.decode()
        fd, self.path = tempfile.mkstemp(prefix="github_sim_app_", suffix=".pem")
        with os.fdopen(fd, "w") as f:
            f.write(self.pem)
        self.verified = set()  # JWTs whose signature already checked out

    def close(self):
        if os.path.exists(self.path):
            os.unlink(self.path)

    def as_dict(self):
        return {"app_id": self.app_id, "slug": self.slug, "owner": self.owner}

    def _signature_ok(self, signing_input, sig):
        with tempfile.TemporaryDirectory(prefix="github_sim_jwt_") as d:
            data_p = os.path.join(d, "data")
            sig_p = os.path.join(d, "sig")
            with open(data_p, "wb") as f:
                f.write(signing_input)
            with open(sig_p, "wb") as f:
                f.write(sig)
            p = subprocess.run(["openssl", "dgst", "-sha256", "-verify", self.path,
                                "-signature", sig_p, data_p],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
            return p.returncode == 0

    def verify(self, jwt, now):
        """Checks a JWT as GitHub does; raises SimError(401) when refused."""
        parts = jwt.split(".")
        if len(parts) != 3:
            raise SimError(401, JWT_UNDECODABLE)
        try:
            header = json.loads(b64url_decode(parts[0]))
            claims = json.loads(b64url_decode(parts[1]))
            sig = b64url_decode(parts[2])
        except (ValueError, binascii.Error):
            raise SimError(401, JWT_UNDECODABLE) from None
        if not isinstance(header, dict) or header.get("alg") != "RS256" \
                or not isinstance(claims, dict):
            raise SimError(401, JWT_UNDECODABLE)
        if jwt not in self.verified:
            if not self._signature_ok((parts[0] + "." + parts[1]).encode(), sig):
                raise SimError(401, JWT_UNDECODABLE)
            self.verified.add(jwt)
        iat, exp, iss = claims.get("iat"), claims.get("exp"), claims.get("iss")
        if not isinstance(iat, int) or isinstance(iat, bool) or iat > now + 60:
            raise SimError(401, JWT_IAT)
        if not isinstance(exp, int) or isinstance(exp, bool) or exp <= now:
            raise SimError(401, JWT_EXPIRED)
        if exp - iat > JWT_MAX_LIFETIME or exp > now + JWT_MAX_LIFETIME:
            raise SimError(401, JWT_TOO_LONG)
        if str(iss) != str(self.app_id) and not (self.client_id and iss == self.client_id):
            raise SimError(401, JWT_ISS if not str(iss).isdigit() else "Integration not found")
        return claims


def identify(store, app, header):
    """Maps the Authorization header to an Identity or raises SimError."""
    scheme, cred = parse_authorization(header)
    if scheme is None:
        return Identity()
    if scheme == "bearer" and cred.count(".") == 2:
        if app is None:
            raise SimError(401, JWT_UNDECODABLE)
        app.verify(cred, int(store.now()))
        return Identity("app", login=app.slug + "[bot]")
    tok = store.data["tokens"].get(cred) if cred else None
    if tok is None:
        raise SimError(401, "Bad credentials")
    if tok.get("expires_at") is not None and store.now() >= tok["expires_at"]:
        raise SimError(401, "Bad credentials")
    return Identity(tok["kind"], tok["login"], cred, tok.get("installation_id"))
