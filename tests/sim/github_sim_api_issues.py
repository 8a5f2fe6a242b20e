"""REST handlers: repository, issues, events, permissions, labels, issue
comments (mixed into github_sim_api.Api)."""

import re

import github_sim_shapes as S
from github_sim_api_common import (Resp, check_body_len, invalid, obj_body, paged,
                                   validation_failed)
from github_sim_store import SimError

LEGACY_PERMISSION = {"admin": "admin", "maintain": "write", "write": "write",
                     "triage": "read", "read": "read", "none": "none"}


class IssuesMixin:
    # --- repository, issues, events, permission ---

    def get_repo(self, req, g):
        r = self.repo(req, g)
        role = self.store.role(r, req.ident.login) or "admin"
        return Resp(200, S.repo_json(req.base, self.store, r, role))

    def list_issues(self, req, g):
        r = self.repo(req, g)
        state = req.q("state", "open")
        want = [x.strip().lower() for x in req.q("labels", "").split(",") if x.strip()]
        out = []
        for it in sorted(r["issues"].values(), key=lambda i: -i["number"]):
            if state != "all" and it["state"] != state:
                continue
            have = [x.lower() for x in it["labels"]]
            if any(w not in have for w in want):
                continue
            out.append(it)
        if req.q("direction") == "asc":
            out.reverse()
        resp = paged(req, r, out)
        resp.body = [S.issue_json(req.base, self.store, r, it) for it in resp.body]
        return resp

    def get_issue(self, req, g):
        r, it = self.issue(req, g)
        return Resp(200, S.issue_json(req.base, self.store, r, it))

    def list_events(self, req, g):
        r, it = self.issue(req, g)
        resp = paged(req, r, it["events"])
        resp.body = [S.event_json(req.base, self.store, r, it, e) for e in resp.body]
        return resp

    def get_permission(self, req, g):
        r = self.repo(req, g)
        login = g["user"]
        if login not in self.store.data["users"]:
            raise SimError(404, "%s is not a user" % login)
        role = self.store.role(r, login) or "none"
        user = S.user_by_login(req.base, self.store, login)
        user["permissions"] = S.permissions_json(role)
        user["role_name"] = role
        return Resp(200, {"permission": LEGACY_PERMISSION[role], "role_name": role,
                          "user": user})

    # --- labels ---

    def list_issue_labels(self, req, g):
        r, it = self.issue(req, g)
        return paged(req, r, S.issue_labels_json(req.base, self.store, r, it))

    def add_labels(self, req, g):
        r, it = self.issue(req, g)
        body = req.body
        if isinstance(body, dict):
            body = body.get("labels")
        if not isinstance(body, list) or not body:
            raise invalid("No subschema in \"anyOf\" matched.")
        names = [x.get("name") if isinstance(x, dict) else x for x in body]
        if not all(isinstance(x, str) and x for x in names):
            raise invalid("No subschema in \"anyOf\" matched.")
        full = "%s/%s" % (r["owner"], r["name"])
        self.store.label_issue(full, it["number"], names, req.ident.login)
        return Resp(200, S.issue_labels_json(req.base, self.store, r, it))

    def remove_label(self, req, g):
        r, it = self.issue(req, g)
        full = "%s/%s" % (r["owner"], r["name"])
        self.store.unlabel_issue(full, it["number"], g["name"], req.ident.login)
        return Resp(200, S.issue_labels_json(req.base, self.store, r, it))

    def list_labels(self, req, g):
        r = self.repo(req, g)
        return paged(req, r, [S.label_json(req.base, r, lab) for lab in r["labels"].values()])

    def create_label(self, req, g):
        r = self.repo(req, g)
        body = obj_body(req)
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise validation_failed("Label", "name")
        if any(lab["name"].lower() == name.lower() for lab in r["labels"].values()):
            raise validation_failed("Label", "name", "already_exists")
        color = body.get("color", "ededed")
        if not re.fullmatch(r"[0-9a-fA-F]{6}", str(color)):
            raise validation_failed("Label", "color", "invalid")
        lab = self.store.ensure_label(r, name, color, body.get("description"))
        return Resp(201, S.label_json(req.base, r, lab),
                    {"location": S.label_json(req.base, r, lab)["url"]})

    # --- issue comments ---

    def comment(self, req, g):
        r = self.repo(req, g)
        c = r["comments"].get(g["id"])
        if c is None:
            raise SimError(404, "Not Found")
        return r, c

    def list_comments(self, req, g):
        r, it = self.issue(req, g)
        since = req.q("since")
        cs = [c for c in r["comments"].values() if c["issue"] == it["number"]
              and (since is None or c["updated_at"] >= since)]
        cs.sort(key=lambda c: c["id"])
        resp = paged(req, r, cs)
        resp.body = [S.comment_json(req.base, self.store, r, c) for c in resp.body]
        return resp

    def list_repo_comments(self, req, g):
        """Every comment of the repository: `since` (updated at or after),
        `sort` created/updated, `direction` asc/desc (GitHub ignores it
        without `sort`); by id, oldest first, by default."""
        r = self.repo(req, g)
        since = req.q("since")
        sort = req.q("sort")
        if sort not in (None, "created", "updated"):
            raise invalid("sort must be created or updated")
        direction = req.q("direction", "desc") if sort else "asc"
        if direction not in ("asc", "desc"):
            raise invalid("direction must be asc or desc")
        cs = [c for c in r["comments"].values() if since is None or c["updated_at"] >= since]
        key = "updated_at" if sort == "updated" else "created_at"
        cs.sort(key=lambda c: (c[key], c["id"]) if sort else c["id"],
                reverse=direction == "desc")
        resp = paged(req, r, cs)
        resp.body = [S.comment_json(req.base, self.store, r, c) for c in resp.body]
        return resp

    def create_comment(self, req, g):
        r, it = self.issue(req, g)
        body = obj_body(req).get("body")
        if not isinstance(body, str) or not body:
            raise validation_failed("IssueComment", "body")
        check_body_len("IssueComment", body)
        c = self.store.add_comment("%s/%s" % (r["owner"], r["name"]), it["number"],
                                   req.ident.login, body)
        out = S.comment_json(req.base, self.store, r, c)
        return Resp(201, out, {"location": out["url"]})

    def get_comment(self, req, g):
        r, c = self.comment(req, g)
        return Resp(200, S.comment_json(req.base, self.store, r, c))

    def update_comment(self, req, g):
        r, c = self.comment(req, g)
        body = obj_body(req).get("body")
        if not isinstance(body, str) or not body:
            raise validation_failed("IssueComment", "body")
        check_body_len("IssueComment", body)
        c["body"] = body
        c["updated_at"] = self.store.iso()
        return Resp(200, S.comment_json(req.base, self.store, r, c))

    def delete_comment(self, req, g):
        r, c = self.comment(req, g)
        del r["comments"][str(c["id"])]
        return Resp(204)
