"""The simulator's control API under /_sim/ (no auth): seed state, inject
faults, move the clock, read back state and the request log, build webhook
payloads. README.md in this folder documents every call."""

import re
from urllib.parse import unquote

import github_sim_webhook as W
from github_sim_store import SimError

R = r"/_sim/repos/(?P<o>[^/]+)/(?P<r>[^/]+)"


def _full(g):
    return "%s/%s" % (g["o"], g["r"])


class Control:
    def __init__(self, core):
        self.core = core
        self.routes = [(m, re.compile(p + "$"), fn) for m, p, fn in (
            ("GET", "/_sim/health", self.health),
            ("GET", "/_sim/state", self.state),
            ("POST", "/_sim/reset", self.reset),
            ("POST", "/_sim/config", self.config),
            ("POST", "/_sim/repos", self.add_repo),
            ("POST", R + "/collaborators", self.collaborator),
            ("POST", R + "/issues", self.add_issues),
            ("POST", R + "/pulls", self.add_pull),
            ("PATCH", R + r"/pulls/(?P<n>\d+)", self.edit_pull),
            ("POST", R + r"/pulls/(?P<n>\d+)/push", self.push),
            ("POST", R + r"/issues/(?P<n>\d+)/labels", self.label),
            ("DELETE", R + r"/issues/(?P<n>\d+)/labels/(?P<name>[^/]+)", self.unlabel),
            ("POST", R + r"/issues/(?P<n>\d+)/comments", self.comment),
            ("POST", R + "/refs", self.ref),
            ("POST", "/_sim/tokens", self.token),
            ("POST", "/_sim/tokens/expire", self.tokens_expire),
            ("POST", "/_sim/ratelimit", self.ratelimit),
            ("POST", "/_sim/app", self.app),
            ("POST", "/_sim/clock", self.clock),
            ("GET", "/_sim/faults", self.faults_list),
            ("POST", "/_sim/faults", self.faults_add),
            ("DELETE", "/_sim/faults", self.faults_clear),
            ("GET", "/_sim/requests", self.requests),
            ("DELETE", "/_sim/requests", self.requests_clear),
            ("GET", r"/_sim/payload/(?P<event>[a-z_]+)", self.payload))]

    def dispatch(self, method, path, query, body, base):
        """-> (status, JSON-able body, mutated)."""
        q = dict(query)
        for m, rx, fn in self.routes:
            mt = rx.match(path)
            if mt and m == method:
                g = {k: unquote(v) for k, v in mt.groupdict().items()}
                b = body if body is not None else {}
                try:
                    with self.core.store.lock:
                        out = fn(g, b, q, base)
                except SimError as e:
                    return e.status, {"error": e.body["message"]}, False
                except (KeyError, TypeError, ValueError) as e:
                    return 400, {"error": "bad control request: %s: %s"
                                 % (type(e).__name__, e)}, False
                return 200, out, method != "GET"
        return 404, {"error": "no control route %s %s" % (method, path)}, False

    # --- state ---

    def health(self, g, b, q, base):
        return {"ok": True, "url": base}

    def state(self, g, b, q, base):
        return self.core.store.data

    def reset(self, g, b, q, base):
        self.core.store.reset()
        self.core.quotas.clear()
        self.core.faults.clear()
        self.core.clear_log()
        return {"ok": True}

    def config(self, g, b, q, base):
        if "token_ttl" in b:
            self.core.api.token_ttl = int(b["token_ttl"])
        return {"token_ttl": self.core.api.token_ttl}

    def add_repo(self, g, b, q, base):
        full = b.get("full_name") or "%s/%s" % (b["owner"], b["name"])
        r = self.core.store.add_repo(full, b.get("default_branch", "main"),
                                     b.get("installation_id", 1), b.get("private", True),
                                     b.get("refs"), b.get("collaborators"))
        return {"full_name": full, "id": r["id"], "installation_id": r["installation_id"]}

    def collaborator(self, g, b, q, base):
        self.core.store.set_permission(_full(g), b["login"], b["permission"])
        return {"login": b["login"], "permission": b["permission"]}

    def add_issues(self, g, b, q, base):
        st = self.core.store
        count = int(b.get("count", 1))
        nums = []
        for i in range(count):
            title = b.get("title", "issue")
            if count > 1:
                title = "%s %d" % (title, i + 1)
            it = st.add_issue(_full(g), title, b.get("user"), b.get("body"),
                              b.get("labels", ()), b.get("state", "open"),
                              b.get("number") if count == 1 else None, b.get("labeled_by"))
            nums.append(it["number"])
        return {"numbers": nums}

    def add_pull(self, g, b, q, base):
        it = self.core.store.add_pull(
            _full(g), b.get("title", "pull request"), b.get("user"), b.get("body"),
            b.get("head"), b.get("base"), b.get("files", ()), b.get("labels", ()),
            b.get("labeled_by"), b.get("draft", False), b.get("state", "open"),
            b.get("number"))
        return {"number": it["number"], "head": it["pr"]["head"], "base": it["pr"]["base"]}

    def edit_pull(self, g, b, q, base):
        st = self.core.store
        r = st.repo(_full(g))
        it = st.issue(r, int(g["n"]))
        for key in ("title", "body", "state"):
            if key in b:
                it[key] = b[key]
        if "state" in b:
            it["closed_at"] = st.iso() if b["state"] == "closed" else None
        if "files" in b and it["pr"]:
            it["pr"]["files"] = [st._file(f) for f in b["files"]]
        if "merged" in b and it["pr"]:
            it["pr"]["merged"] = bool(b["merged"])
        it["updated_at"] = st.iso()
        return {"number": it["number"], "state": it["state"]}

    def push(self, g, b, q, base):
        it = self.core.store.push(_full(g), int(g["n"]), b["sha"])
        return {"number": it["number"], "sha": it["pr"]["head"]["sha"]}

    def label(self, g, b, q, base):
        it = self.core.store.label_issue(_full(g), int(g["n"]), b["labels"], b["actor"])
        return {"labels": it["labels"]}

    def unlabel(self, g, b, q, base):
        actor = b.get("actor") or q.get("actor")
        if not actor:
            raise SimError(400, "actor is required")
        it = self.core.store.unlabel_issue(_full(g), int(g["n"]), g["name"], actor)
        return {"labels": it["labels"]}

    def comment(self, g, b, q, base):
        c = self.core.store.add_comment(_full(g), int(g["n"]), b["user"], b["body"])
        return {"id": c["id"]}

    def ref(self, g, b, q, base):
        r = self.core.store.repo(_full(g))
        ref = b["ref"] if b["ref"].startswith("refs/") else "refs/" + b["ref"]
        r["refs"][ref] = b["sha"]
        return {"ref": ref, "sha": b["sha"]}

    def token(self, g, b, q, base):
        t = self.core.store.add_token(b["token"], b.get("login", "kernelbot"),
                                      b.get("kind", "pat"), b.get("installation_id"),
                                      b.get("expires_at"), limit=int(b.get("limit", 5000)))
        return dict(t, token=b["token"])

    def tokens_expire(self, g, b, q, base):
        """Expire tokens now (renewal tests): `token` one, else every one of
        `kind` (default installation). Static (--token) tokens never."""
        now = int(self.core.store.now())
        n = 0
        for tok, t in self.core.store.data["tokens"].items():
            if t.get("static") or ("token" in b and tok != b["token"]):
                continue
            if "token" not in b and t["kind"] != b.get("kind", "installation"):
                continue
            t["expires_at"] = now - 1
            n += 1
        return {"expired": n}

    def ratelimit(self, g, b, q, base):
        return self.core.set_quota(b["token"], b.get("limit"), b.get("remaining"),
                                   b.get("reset_in"))

    def app(self, g, b, q, base):
        self.core.set_app(int(b["app_id"]), b["public_key"], b.get("slug", "kernelbot"),
                          b.get("client_id"))
        return {"app_id": int(b["app_id"])}

    def clock(self, g, b, q, base):
        self.core.store.data["clock_offset"] = float(b.get("offset", 0))
        return {"offset": self.core.store.data["clock_offset"],
                "now": int(self.core.store.now())}

    # --- faults, request log ---

    def faults_list(self, g, b, q, base):
        return {"faults": self.core.faults.list()}

    def faults_add(self, g, b, q, base):
        return self.core.faults.add(b)

    def faults_clear(self, g, b, q, base):
        self.core.faults.clear()
        return {"ok": True}

    def requests(self, g, b, q, base):
        since = int(q.get("since", 0))
        return {"requests": [e for e in self.core.log_snapshot() if e["seq"] > since]}

    def requests_clear(self, g, b, q, base):
        self.core.clear_log()
        return {"ok": True}

    # --- webhook payloads ---

    def payload(self, g, b, q, base):
        st = self.core.store
        fx = self.core.fixtures
        inst = int(q["installation"]) if q.get("installation") else None
        if g["event"] == "pull_request":
            return W.pull_request_payload(st, base, q["repo"], int(q["number"]),
                                          q.get("action", "labeled"), q.get("label"),
                                          q.get("sender"), inst, fx)
        if g["event"] == "issue_comment":
            return W.issue_comment_payload(st, base, q["repo"], int(q["number"]),
                                           int(q["comment_id"]), q.get("sender"), inst, fx)
        if g["event"] == "ping":
            return W.ping_payload(st, base, q["repo"], q.get("sender"), fx)
        raise SimError(404, "no payload builder for '%s'" % g["event"])
