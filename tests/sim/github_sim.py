#!/usr/bin/env python3
"""A stateful GitHub REST simulator on loopback, for kernelbot's tests.

    python3 tests/sim/github_sim.py --port 0 [--state-file PATH] [--fixtures DIR]
        [--token T[:LOGIN] ...] [--app-id N --app-key-pub PEM] [--verbose]

prints one line "listening http://127.0.0.1:PORT" and serves until SIGTERM.
From Python: GitHubSim (below) runs it in-process, or talks to a running
one by url. Control API and behaviour: tests/sim/README.md.
Standard library only (plus the openssl command for App JWTs).
"""

import argparse
import http.client
import json
import os
import signal
import sys
import threading
from urllib.parse import urlencode, urlsplit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import github_sim_webhook as webhook  # noqa: E402
from github_sim_server import Core, Server  # noqa: E402


class SimControlError(Exception):
    def __init__(self, status, body):
        super().__init__("github_sim control: %d %s" % (status, body))
        self.status = status
        self.body = body


class GitHubSim:
    """The simulator for pytest: GitHubSim(...).start() serves in a thread;
    GitHubSim(url=...) drives one started elsewhere (a subprocess)."""

    def __init__(self, state_file=None, fixtures=None, tokens=("test-token",), app_id=None,
                 app_key_pub=None, app_slug="kernelbot", token_ttl=3600, app_client_id=None,
                 url=None, verbose=False):
        self.args = dict(state_file=state_file, fixtures=fixtures, tokens=tokens,
                         app_id=app_id, app_key_pub=app_key_pub, app_slug=app_slug,
                         token_ttl=token_ttl, app_client_id=app_client_id)
        self.verbose = verbose
        self.url = url
        self.core = None
        self.server = None
        self.thread = None

    # --- lifecycle ---

    def start(self):
        self.core = Core(**self.args)
        self.server = Server(self.core, "127.0.0.1", 0, self.verbose)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       name="github_sim", daemon=True)
        self.thread.start()
        return self

    def stop(self):
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.thread.join(5)
            self.core.close()
            self.server = None

    def __enter__(self):
        return self.start() if self.url is None else self

    def __exit__(self, *exc):
        self.stop()

    @property
    def port(self):
        return urlsplit(self.url).port

    # --- raw HTTP ---

    def http(self, method, path, body=None, headers=None, timeout=30):
        """One request -> (status, headers dict with lower-case names, body bytes)."""
        u = urlsplit(self.url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
        try:
            data = body
            hdrs = dict(headers or {})
            if body is not None and not isinstance(body, bytes):
                data = json.dumps(body).encode()
                hdrs.setdefault("Content-Type", "application/json")
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            out = resp.read()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, out
        finally:
            conn.close()

    def api(self, method, path, body=None, token="test-token", scheme="token",
            headers=None):
        """A REST call as a client makes it -> (status, headers, parsed JSON or None)."""
        hdrs = {"Accept": "application/vnd.github+json", "User-Agent": "github-sim-test"}
        if token is not None:
            hdrs["Authorization"] = "%s %s" % (scheme, token)
        hdrs.update(headers or {})
        if path.startswith("http"):
            u = urlsplit(path)
            path = u.path + ("?" + u.query if u.query else "")
        status, h, raw = self.http(method, path, body, hdrs)
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        return status, h, parsed

    def control(self, method, path, body=None, **query):
        q = {k: v for k, v in query.items() if v is not None}
        status, _, raw = self.http(method, "/_sim/" + path + ("?" + urlencode(q) if q else ""),
                                   body if body is not None else ({} if method != "GET"
                                                                  else None))
        out = json.loads(raw) if raw else None
        if status >= 400:
            raise SimControlError(status, out)
        return out

    # --- seeding ---

    def add_repo(self, full_name, **kw):
        return self.control("POST", "repos", dict(kw, full_name=full_name))

    def set_permission(self, repo, login, permission):
        return self.control("POST", "repos/%s/collaborators" % repo,
                            {"login": login, "permission": permission})

    def add_issues(self, repo, **kw):
        return self.control("POST", "repos/%s/issues" % repo, kw)["numbers"]

    def add_pull(self, repo, **kw):
        return self.control("POST", "repos/%s/pulls" % repo, kw)["number"]

    def edit_pull(self, repo, number, **kw):
        return self.control("PATCH", "repos/%s/pulls/%d" % (repo, number), kw)

    def push(self, repo, number, sha):
        return self.control("POST", "repos/%s/pulls/%d/push" % (repo, number), {"sha": sha})

    def label(self, repo, number, labels, actor):
        return self.control("POST", "repos/%s/issues/%d/labels" % (repo, number),
                            {"labels": list(labels), "actor": actor})

    def unlabel(self, repo, number, name, actor):
        return self.control("DELETE", "repos/%s/issues/%d/labels/%s" % (repo, number, name),
                            {"actor": actor})

    def comment(self, repo, number, user, body):
        return self.control("POST", "repos/%s/issues/%d/comments" % (repo, number),
                            {"user": user, "body": body})["id"]

    def set_ref(self, repo, ref, sha):
        return self.control("POST", "repos/%s/refs" % repo, {"ref": ref, "sha": sha})

    def add_token(self, token, login="kernelbot", kind="pat", installation_id=None, **kw):
        return self.control("POST", "tokens", dict(kw, token=token, login=login, kind=kind,
                                                   installation_id=installation_id))

    def expire_tokens(self, kind="installation", token=None):
        """Make tokens expire now: the next call with one gets 401."""
        body = {"kind": kind} if token is None else {"token": token}
        return self.control("POST", "tokens/expire", body)["expired"]

    def on_installation_token(self, fn):
        """In-process only: fn(token, expires_at) is called for each new
        installation token before it is handed out (a test's git server can
        then accept it)."""
        if self.core is None:
            raise RuntimeError("on_installation_token needs an in-process simulator")
        self.core.api.on_installation_token = fn

    def set_ratelimit(self, token, **kw):
        return self.control("POST", "ratelimit", dict(kw, token=token))

    def set_app(self, app_id, public_key_pem, slug="kernelbot", client_id=None):
        return self.control("POST", "app", {"app_id": app_id, "public_key": public_key_pem,
                                            "slug": slug, "client_id": client_id})

    def set_clock(self, offset):
        return self.control("POST", "clock", {"offset": offset})

    def config(self, **kw):
        return self.control("POST", "config", kw)

    def reset(self):
        return self.control("POST", "reset")

    # --- faults, read back ---

    def fault(self, kind, path=".*", method="*", count=1, **kw):
        return self.control("POST", "faults", dict(kw, kind=kind, path=path, method=method,
                                                   count=count))

    def faults(self):
        return self.control("GET", "faults")["faults"]

    def clear_faults(self):
        return self.control("DELETE", "faults")

    def state(self):
        return self.control("GET", "state")

    def repo_state(self, repo):
        return self.state()["repos"][repo.lower()]

    def requests(self, since=0):
        return self.control("GET", "requests", since=since)["requests"]

    def clear_requests(self):
        return self.control("DELETE", "requests")

    # --- webhooks ---

    def payload(self, event, **query):
        return self.control("GET", "payload/" + event, **query)

    @staticmethod
    def send_webhook(url, event, payload, secret=None, **kw):
        return webhook.deliver(url, event, payload, secret, **kw)


def main(argv=None):
    ap = argparse.ArgumentParser(description="GitHub REST simulator on loopback")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--state-file", help="persist state here (atomic rename per mutation)")
    ap.add_argument("--fixtures", help="github-fixtures folder (default ../shared/...)")
    ap.add_argument("--token", action="append", default=[],
                    help="accepted personal access token, TOKEN or TOKEN:LOGIN")
    ap.add_argument("--app-id", type=int)
    ap.add_argument("--app-key-pub", help="the App's public key: a PEM file or PEM text")
    ap.add_argument("--app-slug", default="kernelbot")
    ap.add_argument("--app-client-id", help="also accepted as the JWT's iss")
    ap.add_argument("--token-ttl", type=int, default=3600,
                    help="installation token lifetime in seconds")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args(argv)
    if (a.app_id is None) != (a.app_key_pub is None):
        ap.error("--app-id and --app-key-pub go together")
    core = Core(a.state_file, a.fixtures, a.token, a.app_id, a.app_key_pub, a.app_slug,
                a.token_ttl, a.app_client_id)
    server = Server(core, a.host, a.port, a.verbose)

    def stop(signo, frame):
        threading.Thread(target=server.shutdown, daemon=True).start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print("listening http://%s:%d" % (a.host, server.server_address[1]), flush=True)
    try:
        server.serve_forever(0.1)
    finally:
        server.server_close()
        core.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
