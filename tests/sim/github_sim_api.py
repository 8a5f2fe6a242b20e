"""The GitHub REST endpoints the simulator serves, over Store state.

Each handler gets the request (Req) and the route's match and returns a
Resp or raises SimError; the server around it does auth, quotas, ETags,
faults and the request log. Handlers live in github_sim_api_{issues,pulls,
checks}.py; this module holds the route table and access rules.
"""

import re
from urllib.parse import unquote

import github_sim_shapes as S
from github_sim_api_checks import ChecksMixin
from github_sim_api_common import DOC, Resp
from github_sim_api_issues import IssuesMixin
from github_sim_api_pulls import PullsMixin
from github_sim_store import SimError


class Api(IssuesMixin, PullsMixin, ChecksMixin):
    def __init__(self, store, app_holder, token_ttl=3600):
        self.store = store
        self.app_holder = app_holder    # callable -> AppKey or None
        self.token_ttl = token_ttl
        self.on_installation_token = None   # in-process hook: fn(token, expires_at)
        self.routes = []
        R = r"/repos/(?P<o>[^/]+)/(?P<r>[^/]+)"
        N = r"(?P<n>\d+)"
        for method, pattern, fn in (
                ("GET", R, self.get_repo),
                ("GET", R + "/issues", self.list_issues),
                ("GET", R + "/issues/" + N, self.get_issue),
                ("GET", R + "/issues/" + N + "/events", self.list_events),
                ("GET", R + "/issues/" + N + "/comments", self.list_comments),
                ("POST", R + "/issues/" + N + "/comments", self.create_comment),
                ("GET", R + "/issues/comments", self.list_repo_comments),
                ("GET", R + r"/issues/comments/(?P<id>\d+)", self.get_comment),
                ("PATCH", R + r"/issues/comments/(?P<id>\d+)", self.update_comment),
                ("DELETE", R + r"/issues/comments/(?P<id>\d+)", self.delete_comment),
                ("GET", R + "/issues/" + N + "/labels", self.list_issue_labels),
                ("POST", R + "/issues/" + N + "/labels", self.add_labels),
                ("DELETE", R + "/issues/" + N + "/labels/(?P<name>[^/]+)", self.remove_label),
                ("GET", R + "/labels", self.list_labels),
                ("POST", R + "/labels", self.create_label),
                ("GET", R + "/collaborators/(?P<user>[^/]+)/permission", self.get_permission),
                ("GET", R + "/pulls", self.list_pulls),
                ("POST", R + "/pulls", self.create_pull),
                ("GET", R + "/pulls/" + N, self.get_pull),
                ("PATCH", R + "/pulls/" + N, self.update_pull),
                ("GET", R + "/pulls/" + N + "/files", self.list_files),
                ("GET", R + "/pulls/" + N + "/reviews", self.list_reviews),
                ("POST", R + "/pulls/" + N + "/reviews", self.create_review),
                ("GET", R + "/pulls/" + N + "/comments", self.list_review_comments),
                ("POST", R + "/pulls/" + N + "/comments", self.create_review_comment),
                ("POST", R + "/check-runs", self.create_check_run),
                ("GET", R + r"/check-runs/(?P<id>\d+)", self.get_check_run),
                ("PATCH", R + r"/check-runs/(?P<id>\d+)", self.update_check_run),
                ("GET", R + "/commits/(?P<ref>[^/]+)/check-runs", self.list_check_runs),
                ("POST", R + "/statuses/(?P<sha>[0-9a-fA-F]{7,40})", self.create_status),
                ("GET", R + "/commits/(?P<ref>[^/]+)/statuses", self.list_statuses),
                ("GET", R + "/git/ref/(?P<ref>.+)", self.get_ref),
                ("POST", R + "/git/refs", self.create_ref),
                ("PATCH", R + "/git/refs/(?P<ref>.+)", self.update_ref),
                ("DELETE", R + "/git/refs/(?P<ref>.+)", self.delete_ref),
                ("GET", R + "/installation", self.get_installation),
                ("POST", r"/app/installations/(?P<id>\d+)/access_tokens", self.create_token),
                ("GET", r"/app", self.get_app),
                ("GET", r"/user", self.get_user)):
            self.routes.append((method, re.compile(pattern + "$"), fn))

    def dispatch(self, req):
        """-> Resp, or None when no route matches the path."""
        allowed = False
        for method, rx, fn in self.routes:
            m = rx.match(req.path)
            if not m:
                continue
            if method != req.method:
                allowed = True
                continue
            groups = {k: unquote(v) for k, v in m.groupdict().items()}
            with self.store.lock:
                return fn(req, groups)
        if allowed:
            return Resp(404, {"message": "Not Found", "documentation_url": DOC})
        return None

    # --- access ---

    def repo(self, req, g):
        """The repository, if this identity may see it (private: 404 otherwise)."""
        ident = req.ident
        r = self.store.repo("%s/%s" % (g["o"], g["r"]), must=False)
        if ident.kind == "app":
            raise SimError(403, "Resource not accessible by integration")
        if r is None or ident.kind is None:
            raise SimError(404, "Not Found")
        if ident.kind == "installation" and r.get("installation_id") != ident.installation_id:
            raise SimError(404, "Not Found")
        return r

    def issue(self, req, g):
        r = self.repo(req, g)
        return r, self.store.issue(r, int(g["n"]))

    def pull(self, req, g):
        r, it = self.issue(req, g)
        if not it["pr"]:
            raise SimError(404, "Not Found")
        return r, it

    def app_json(self, req):
        app = self.app_holder()
        if app is None:
            return None
        d = app.as_dict()
        self.store.user(d["owner"])
        return S.app_json(req.base, self.store, d)
