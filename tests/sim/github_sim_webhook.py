"""Webhook deliveries for tests: payloads built from the real octokit
examples in shared/github-fixtures/webhooks with the simulator's repository,
pull request and sender put in, signed and POSTed like GitHub does.

    python3 github_sim_webhook.py sign --secret S FILE
    python3 github_sim_webhook.py send --url URL --event E [--secret S]
                                       [--delivery ID] FILE|-
"""

import argparse
import copy
import hashlib
import hmac
import http.client
import json
import os
import sys
import uuid
from urllib.parse import urlsplit

import github_sim_shapes as S
from github_sim_store import SimError, Store

HERE = os.path.dirname(os.path.abspath(__file__))


def default_fixtures_dir():
    env = os.environ.get("KB_GITHUB_FIXTURES")
    if env:
        return env
    return os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared", "github-fixtures"))


def load_fixture(rel, fixtures=None):
    path = os.path.join(fixtures or default_fixtures_dir(), rel)
    if not os.path.exists(path):
        raise SimError(404, "fixture '%s' not found" % path)
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def signature(secret, body):
    """X-Hub-Signature-256 value: sha256=<hex HMAC-SHA256 of the raw body>."""
    if isinstance(secret, str):
        secret = secret.encode()
    if isinstance(body, str):
        body = body.encode()
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def deliver(url, event, payload, secret=None, delivery=None, sig=None, timeout=10,
            extra_headers=None):
    """POSTs a delivery; -> (status, response headers dict, response body bytes).
    sig overrides the computed signature (to send a bad one)."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    headers = {"Content-Type": "application/json", "Accept": "*/*",
               "User-Agent": "GitHub-Hookshot/sim", "X-GitHub-Event": event,
               "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
               "X-GitHub-Hook-ID": "1"}
    if secret is not None:
        headers["X-Hub-Signature-256"] = signature(secret, body)
        headers["X-Hub-Signature"] = "sha1=" + hmac.new(
            secret.encode() if isinstance(secret, str) else secret, body,
            hashlib.sha1).hexdigest()
    if sig is not None:
        headers["X-Hub-Signature-256"] = sig
    headers.update(extra_headers or {})
    u = urlsplit(url)
    cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    conn = cls(u.hostname, u.port, timeout=timeout)
    try:   # http.client keeps header names as GitHub spells them
        conn.request("POST", (u.path or "/") + ("?" + u.query if u.query else ""),
                     body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def _view(state):
    """A private Store over a copy of state (builders may add missing users)."""
    st = Store()
    st.data = copy.deepcopy(state.data if isinstance(state, Store) else state)
    return st


def _common(st, base, fx, repo, sender, installation_id):
    r = st.repo(repo)
    out = copy.deepcopy(fx)
    out.pop("organization", None)
    rj = S.repo_json(base, st, r)
    rj["custom_properties"] = {}
    out["repository"] = rj
    out["sender"] = S.user_by_login(base, st, sender or r["owner"])
    inst = installation_id if installation_id is not None else r.get("installation_id")
    if inst is not None:
        out["installation"] = {"id": int(inst),
                               "node_id": S.node_id("Installation", int(inst))}
    else:
        out.pop("installation", None)
    return r, out


def pull_request_payload(state, base, repo, number, action="labeled", label=None,
                         sender=None, installation_id=None, fixtures=None):
    """pull_request event (labeled, unlabeled, synchronize, ...)."""
    name = {"unlabeled": "pull_request.unlabeled.json",
            "synchronize": "pull_request.synchronize.json"}.get(action,
                                                                "pull_request.labeled.json")
    st = _view(state)
    r, out = _common(st, base, load_fixture("webhooks/" + name, fixtures), repo, sender,
                     installation_id)
    it = st.issue(r, int(number))
    if not it["pr"]:
        raise SimError(422, "#%s is not a pull request" % number)
    out["action"] = action
    out["number"] = it["number"]
    out["pull_request"] = S.pull_json(base, st, r, it)
    if label is not None:
        out["label"] = S.label_json(base, r, st.ensure_label(r, label))
    else:
        out.pop("label", None)
    if action == "synchronize":
        out.setdefault("before", "0" * 40)
        out["after"] = it["pr"]["head"]["sha"]
    return out


def issue_comment_payload(state, base, repo, number, comment_id, sender=None,
                          installation_id=None, fixtures=None):
    """issue_comment created, for a comment already in the state."""
    st = _view(state)
    fx = load_fixture("webhooks/issue_comment.created.with-installation.json", fixtures)
    r = st.repo(repo)
    c = r["comments"].get(str(comment_id))
    if c is None:
        raise SimError(404, "comment %s not found" % comment_id)
    r, out = _common(st, base, fx, repo, sender or c["user"], installation_id)
    out["action"] = "created"
    out["issue"] = S.issue_json(base, st, r, st.issue(r, int(number)))
    out["comment"] = S.comment_json(base, st, r, c)
    return out


def ping_payload(state, base, repo, sender=None, fixtures=None):
    st = _view(state)
    r, out = _common(st, base, load_fixture("webhooks/ping.with-app_id.json", fixtures),
                     repo, sender, None)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sign")
    s.add_argument("--secret", required=True)
    s.add_argument("file")
    d = sub.add_parser("send")
    d.add_argument("--url", required=True)
    d.add_argument("--event", required=True)
    d.add_argument("--secret")
    d.add_argument("--delivery")
    d.add_argument("--signature", help="send this X-Hub-Signature-256 instead")
    d.add_argument("file")
    a = ap.parse_args(argv)
    if a.file == "-":
        body = sys.stdin.buffer.read()
    else:
        with open(a.file, "rb") as f:
            body = f.read()
    if a.cmd == "sign":
        print(signature(a.secret, body))
        return 0
    status, _, resp = deliver(a.url, a.event, body, a.secret, a.delivery, a.signature)
    print(status)
    sys.stdout.flush()
    sys.stdout.buffer.write(resp)
    return 0 if 200 <= status < 300 else 1


if __name__ == "__main__":
    sys.exit(main())
