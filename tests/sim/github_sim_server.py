"""HTTP side of the GitHub simulator: auth, per-token quotas, ETag/304,
faults, the request log, then the REST routes (github_sim_api) or the
control API (github_sim_control)."""

import hashlib
import json
import random
import re
import socket
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from github_sim_api import Api
from github_sim_api_common import Req, Resp, parse_query
from github_sim_auth import AppKey, identify, parse_authorization
from github_sim_control import Control
from github_sim_faults import PRIMARY_DOC, Faults, fault_response
from github_sim_replay import Replay
from github_sim_store import SimError, Store
from github_sim_webhook import default_fixtures_dir

JSON_TYPE = "application/json; charset=utf-8"
LOG_BODY_MAX = 64 * 1024
ANON_LIMIT = 60


def etag_of(body):
    return 'W/"%s"' % hashlib.sha256(body).hexdigest()


def etag_matches(header, etag):
    if not header:
        return False
    if header.strip() == "*":
        return True
    want = etag[2:] if etag.startswith("W/") else etag
    for tag in header.split(","):
        tag = tag.strip()
        if (tag[2:] if tag.startswith("W/") else tag) == want:
            return True
    return False


class Core:
    """Everything one simulator instance holds; shared by handler threads."""

    def __init__(self, state_file=None, fixtures=None, tokens=(), app_id=None,
                 app_key_pub=None, app_slug="kernelbot", token_ttl=3600, app_client_id=None):
        self.store = Store(state_file)
        self.faults = Faults()
        self.quotas = {}
        self.qlock = threading.Lock()
        self.log = []
        self.log_lock = threading.Lock()
        self.seq = 0
        self.app = None
        self.fixtures = fixtures or default_fixtures_dir()
        self.replay = Replay(self.fixtures)
        self.api = Api(self.store, lambda: self.app, token_ttl)
        self.control = Control(self)
        for spec in tokens:
            tok, _, login = spec.partition(":")
            self.store.add_token(tok, login or "kernelbot", "pat", static=True)
        if app_id is not None and app_key_pub:
            self.set_app(int(app_id), app_key_pub, app_slug, app_client_id)

    def close(self):
        if self.app:
            self.app.close()

    def set_app(self, app_id, pem, slug="kernelbot", client_id=None):
        if not pem.lstrip().startswith("-----BEGIN"):
            with open(pem, encoding="utf-8") as f:
                pem = f.read()
        if self.app:
            self.app.close()
        self.app = AppKey(app_id, pem, slug, client_id=client_id)

    # --- quotas (in memory: a restart gives every token a fresh hour) ---

    def quota(self, key, limit):
        now = self.store.now()
        with self.qlock:
            q = self.quotas.get(key)
            if q is None or now >= q["reset"]:
                q = {"limit": limit, "used": 0, "reset": int(now) + 3600}
                self.quotas[key] = q
            return q

    def set_quota(self, token, limit=None, remaining=None, reset_in=None):
        tok = self.store.data["tokens"].get(token)
        q = self.quota(token, tok.get("limit", 5000) if tok else 5000)
        with self.qlock:
            if limit is not None:
                q["limit"] = int(limit)
            if remaining is not None:
                q["used"] = q["limit"] - int(remaining)
            if reset_in is not None:
                q["reset"] = int(self.store.now()) + int(reset_in)
            return dict(q)

    # --- request log ---

    def log_add(self, entry):
        with self.log_lock:
            self.seq += 1
            entry["seq"] = self.seq
            self.log.append(entry)

    def log_snapshot(self):
        with self.log_lock:
            return list(self.log)

    def clear_log(self):
        with self.log_lock:
            self.log = []


def ratelimit_headers(q):
    return {"x-ratelimit-limit": str(q["limit"]),
            "x-ratelimit-remaining": str(max(0, q["limit"] - q["used"])),
            "x-ratelimit-used": str(q["used"]), "x-ratelimit-reset": str(q["reset"]),
            "x-ratelimit-resource": "core"}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def version_string(self):
        return "GitHub.com"

    def log_message(self, fmt, *args):
        if self.server.verbose:
            sys.stderr.write("github_sim: " + (fmt % args) + "\n")

    def do_GET(self):
        self.handle_one()

    do_POST = do_PATCH = do_PUT = do_DELETE = do_GET

    # --- I/O ---

    def read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def send(self, status, body, headers):
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        if status not in (204, 304):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and status not in (204, 304):
            self.wfile.write(body)

    def drop(self):
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # --- one request ---

    def handle_one(self):
        try:
            self._handle_one()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _handle_one(self):
        core = self.server.core
        raw = self.read_body()
        url = urlsplit(self.path)
        path, qs = url.path or "/", url.query
        method = self.command
        host = self.headers.get("Host") or "127.0.0.1:%d" % self.server.server_address[1]
        if path == "/_sim" or path.startswith("/_sim/"):
            self.control(core, method, path, qs, raw, "http://" + host)
            return
        prefix = ""
        if path == "/api/v3" or path.startswith("/api/v3/"):   # GitHub Enterprise layout
            prefix, path = "/api/v3", path[len("/api/v3"):] or "/"
        base = "http://" + host + prefix
        scheme, _ = parse_authorization(self.headers.get("Authorization"))
        entry = {"time": time.time(), "method": method, "path": path, "query": qs,
                 "auth": scheme, "login": None,
                 "if_none_match": self.headers.get("If-None-Match"),
                 "accept": self.headers.get("Accept"),
                 "user_agent": self.headers.get("User-Agent"),
                 "api_version": self.headers.get("X-GitHub-Api-Version"),
                 "content_type": self.headers.get("Content-Type"),
                 "body": raw[:LOG_BODY_MAX].decode("utf-8", "replace") if raw else None,
                 "fault": None, "status": None}
        rid = "%04X:%05X:%06X:%07X:%08X" % tuple(random.getrandbits(32) & m for m in
                                                 (0xFFFF, 0xFFFFF, 0xFFFFFF, 0xFFFFFFF,
                                                  0xFFFFFFFF))
        fault = core.faults.take(method, path + ("?" + qs if qs else ""))
        if fault:
            entry["fault"] = fault["kind"]
            if fault["kind"] == "slow" and not fault["after"]:
                time.sleep(fault["delay"])
        early = fault and not fault["after"]
        if early and fault["kind"] == "drop":
            entry["status"] = 0
            core.log_add(entry)
            self.drop()
            return
        if early and fault["kind"] in ("primary", "secondary", "error"):
            self.refuse(core, fault, rid, entry)
            return
        status, body, headers = self.process(core, method, path, qs, raw, base, entry)
        headers["x-github-request-id"] = rid
        if fault and fault["kind"] == "drop":
            entry["status"] = 0
            core.log_add(entry)
            self.drop()
            return
        if fault and fault["kind"] in ("primary", "secondary", "error"):
            self.refuse(core, fault, rid, entry)
            return
        if fault and fault["kind"] == "malformed":
            body = body[:len(body) // 2] if len(body) > 8 else b'{"message": '
            headers.pop("etag", None)
            if status in (204, 304):
                status = 200
        entry["status"] = status
        core.log_add(entry)
        if fault and fault["kind"] == "slow" and fault["after"]:
            # done (and logged), answered late: a client whose timeout is
            # shorter never hears that it happened
            time.sleep(fault["delay"])
        self.send(status, body, headers)

    def refuse(self, core, fault, rid, entry):
        q = {"limit": 5000, "used": 0, "reset": int(core.store.now()) + 3600}
        status, body, headers = fault_response(fault, core.store.now(), rid, q)
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            headers.setdefault("content-type", JSON_TYPE)
        else:
            body = body.encode()
        headers["x-github-request-id"] = rid
        entry["status"] = status
        core.log_add(entry)
        self.send(status, body, headers)

    def control(self, core, method, path, qs, raw, base):
        try:
            body = json.loads(raw) if raw.strip() else None
        except ValueError:
            self.send(400, b'{"error":"control body is not JSON"}', {"content-type": JSON_TYPE})
            return
        with core.store.lock:
            status, out, mutated = core.control.dispatch(method, path, parse_query(qs), body,
                                                         base)
            data = json.dumps(out).encode()
            if mutated and status < 400:
                core.store.save()
        self.send(status, data, {"content-type": JSON_TYPE})

    def process(self, core, method, path, qs, raw, base, entry):
        """The REST request proper -> (status, body bytes, headers)."""
        headers = {"content-type": JSON_TYPE, "x-github-media-type": "github.v3; format=json",
                   "cache-control": "private, max-age=60, s-maxage=60",
                   "vary": "Accept, Authorization, Cookie, X-GitHub-OTP",
                   "access-control-expose-headers": "ETag, Link, Location, Retry-After, "
                   "X-GitHub-OTP, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Used, "
                   "X-RateLimit-Resource, X-RateLimit-Reset, X-GitHub-Request-Id"}
        m = re.match(r"/repositories/(\d+)(/.*)?$", path)
        if m:
            r = core.store.repo_by_id(int(m.group(1)))
            if r is not None:
                path = "/repos/%s/%s%s" % (r["owner"], r["name"], m.group(2) or "")
        try:
            ident = identify(core.store, core.app, self.headers.get("Authorization"))
        except SimError as e:
            q = core.quota("ip:" + self.client_address[0], ANON_LIMIT)
            q["used"] += 1
            headers.update(ratelimit_headers(q))
            return e.status, json.dumps(e.body).encode(), headers
        entry["login"] = ident.login
        entry["token_kind"] = ident.kind
        if ident.kind is None:
            key, limit = "ip:" + self.client_address[0], ANON_LIMIT
        elif ident.kind == "app":
            key, limit = "app", 5000
        else:
            key = ident.token
            limit = core.store.data["tokens"][ident.token].get("limit", 5000)
        q = core.quota(key, limit)
        if path == "/rate_limit":
            core_q = {"limit": q["limit"], "used": q["used"],
                      "remaining": max(0, q["limit"] - q["used"]), "reset": q["reset"],
                      "resource": "core"}
            headers.update(ratelimit_headers(q))
            return 200, json.dumps({"resources": {"core": core_q}, "rate": core_q}).encode(), \
                headers
        if q["used"] >= q["limit"]:
            headers.update(ratelimit_headers(q))
            who = ("user ID %d" % core.store.user(ident.login)["id"]) if ident.login \
                else self.client_address[0]
            body = {"message": "API rate limit exceeded for %s." % who,
                    "documentation_url": PRIMARY_DOC}
            return 403, json.dumps(body).encode(), headers
        resp = self.run_api(core, method, path, qs, raw, base, ident)
        if isinstance(resp, tuple):         # a replayed recording
            status, body, extra = resp
            headers.update(extra)
        else:
            status = resp.status
            headers.update(resp.headers)
            body = b"" if resp.body is None else json.dumps(resp.body).encode()
        if method == "GET" and status == 200:
            tag = etag_of(body)
            headers["etag"] = tag
            if etag_matches(self.headers.get("If-None-Match"), tag):
                headers.update(ratelimit_headers(q))
                headers.pop("content-type", None)
                return 304, b"", headers      # costs no quota
        with core.qlock:
            q["used"] += 1
        headers.update(ratelimit_headers(q))
        if method != "GET" and status < 400:
            core.store.save()
        return status, body, headers

    def run_api(self, core, method, path, qs, raw, base, ident):
        try:
            body = json.loads(raw) if raw.strip() else None
        except ValueError:
            return Resp(400, {"message": "Problems parsing JSON",
                              "documentation_url": "https://docs.github.com/rest"})
        req = Req(method, path, parse_query(qs), body, base, ident, self.headers)
        try:
            resp = core.api.dispatch(req)
        except SimError as e:
            resp = Resp(e.status, e.body)
        except Exception as e:   # a simulator bug: say so loudly, answer 500
            traceback.print_exc()
            return Resp(500, {"message": "github_sim internal error: %s: %s"
                              % (type(e).__name__, e)})
        if (resp is None or resp.status == 404) and ident.kind is not None:
            # what the state cannot answer, a recording may
            replayed = core.replay.lookup(method, path + ("?" + qs if qs else ""), base)
            if replayed is not None:
                return replayed
        if resp is None:
            resp = Resp(404, {"message": "Not Found",
                              "documentation_url": "https://docs.github.com/rest"})
        return resp


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, core, host="127.0.0.1", port=0, verbose=False):
        self.core = core
        self.verbose = verbose
        super().__init__((host, port), Handler)


