"""REST handlers: pull requests, their files, reviews and review comments
(mixed into github_sim_api.Api)."""

import github_sim_shapes as S
from github_sim_api_common import (Resp, check_body_len, invalid, obj_body, paged,
                                   validation_failed)
from github_sim_store import SimError, fake_sha


class PullsMixin:
    # --- pull requests ---

    def list_pulls(self, req, g):
        r = self.repo(req, g)
        state = req.q("state", "open")
        head = req.q("head")
        base = req.q("base")
        out = []
        for it in sorted(r["issues"].values(), key=lambda i: -i["number"]):
            pr = it["pr"]
            if not pr or (state != "all" and it["state"] != state):
                continue
            if base and pr["base"]["ref"] != base:
                continue
            if head:
                owner, _, ref = head.partition(":")
                if not ref:   # GitHub wants user:ref; a bare ref matches nothing useful
                    owner, ref = r["owner"], head
                if pr["head"]["ref"] != ref or \
                        pr["head"]["repo"].split("/")[0].lower() != owner.lower():
                    continue
            out.append(it)
        if req.q("direction") == "asc":
            out.reverse()
        resp = paged(req, r, out)
        resp.body = [S.pull_json(req.base, self.store, r, it) for it in resp.body]
        return resp

    def get_pull(self, req, g):
        r, it = self.pull(req, g)
        return Resp(200, S.pull_json(req.base, self.store, r, it))

    def create_pull(self, req, g):
        r = self.repo(req, g)
        body = obj_body(req)
        for field in ("title", "head", "base"):
            if not isinstance(body.get(field), str) or not body[field]:
                raise validation_failed("PullRequest", field)
        text = body.get("body")
        check_body_len("Issue", text)
        full = "%s/%s" % (r["owner"], r["name"])
        owner, _, ref = body["head"].partition(":")
        if not ref:
            owner, ref = r["owner"], body["head"]
        head_repo = body.get("head_repo") or "%s/%s" % (owner, r["name"])
        if head_repo.lower() == full.lower() and ref == body["base"]:
            raise validation_failed("PullRequest", "head", "custom",
                                    "No commits between %s and %s" % (body["base"], ref))
        for it in r["issues"].values():
            pr = it["pr"]
            if pr and it["state"] == "open" and pr["head"]["ref"] == ref and \
                    pr["head"]["repo"].lower() == head_repo.lower() and \
                    pr["base"]["ref"] == body["base"]:
                raise SimError(422, "Validation Failed", [{
                    "resource": "PullRequest", "code": "custom",
                    "message": "A pull request already exists for %s:%s." % (owner, ref)}],
                    doc="https://docs.github.com/rest/pulls/pulls#create-a-pull-request")
        sha = r["refs"].get("refs/heads/" + ref) if head_repo.lower() == full.lower() else None
        it = self.store.add_pull(full, body["title"], req.ident.login, text,
                                 {"ref": ref, "repo": head_repo,
                                  "sha": sha or fake_sha(head_repo + ref)},
                                 {"ref": body["base"]}, draft=bool(body.get("draft")))
        it["pr"]["maintainer_can_modify"] = bool(body.get("maintainer_can_modify", False))
        out = S.pull_json(req.base, self.store, r, it)
        return Resp(201, out, {"location": out["url"]})

    def update_pull(self, req, g):
        r, it = self.pull(req, g)
        body = obj_body(req)
        if "title" in body:
            if not isinstance(body["title"], str) or not body["title"]:
                raise validation_failed("PullRequest", "title", "invalid")
            it["title"] = body["title"]
        if "body" in body:
            check_body_len("Issue", body["body"])
            it["body"] = body["body"]
        if "state" in body:
            if body["state"] not in ("open", "closed"):
                raise validation_failed("PullRequest", "state", "invalid")
            it["state"] = body["state"]
            it["closed_at"] = self.store.iso() if body["state"] == "closed" else None
        if "base" in body:
            it["pr"]["base"]["ref"] = body["base"]
        if "maintainer_can_modify" in body:
            it["pr"]["maintainer_can_modify"] = bool(body["maintainer_can_modify"])
        it["updated_at"] = self.store.iso()
        return Resp(200, S.pull_json(req.base, self.store, r, it))

    def list_files(self, req, g):
        r, it = self.pull(req, g)
        resp = paged(req, r, it["pr"]["files"])
        resp.body = [S.file_json(req.base, r, it, f) for f in resp.body]
        return resp

    # --- reviews and review comments ---

    def check_path(self, it, path):
        files = it["pr"]["files"]
        if files and path not in [f["filename"] for f in files]:
            raise SimError(422, "Unprocessable Entity", ["Path could not be resolved"])

    def list_reviews(self, req, g):
        r, it = self.pull(req, g)
        rvs = sorted((v for v in r["reviews"].values() if v["pull"] == it["number"]),
                     key=lambda v: v["id"])
        resp = paged(req, r, rvs)
        resp.body = [S.review_json(req.base, self.store, r, v) for v in resp.body]
        return resp

    def create_review(self, req, g):
        r, it = self.pull(req, g)
        body = obj_body(req)
        event = body.get("event")
        states = {"COMMENT": "COMMENTED", "APPROVE": "APPROVED",
                  "REQUEST_CHANGES": "CHANGES_REQUESTED", None: "PENDING"}
        if event not in states:
            raise invalid("%r is not a member of [\"APPROVE\", \"REQUEST_CHANGES\", "
                          "\"COMMENT\"]." % event)
        comments = body.get("comments") or []
        text = body.get("body")
        check_body_len("PullRequestReview", text)
        if event in ("COMMENT", "REQUEST_CHANGES") and not text and not comments:
            raise SimError(422, "Unprocessable Entity",
                           ["Review body is required when submitting a %s review" % event])
        for c in comments:
            if not isinstance(c, dict) or not c.get("path") or not c.get("body"):
                raise invalid("\"path\" and \"body\" are required in each comment.")
            self.check_path(it, c["path"])
        now = self.store.iso()
        rv = {"id": self.store.new_id(), "pull": it["number"], "user": req.ident.login,
              "body": text, "state": states[event],
              "commit_id": body.get("commit_id") or it["pr"]["head"]["sha"],
              "submitted_at": now if event else None}
        r["reviews"][str(rv["id"])] = rv
        for c in comments:
            self._review_comment(r, it, c, rv["id"], rv["commit_id"], req.ident.login)
        return Resp(200, S.review_json(req.base, self.store, r, rv))

    def _review_comment(self, r, it, c, review_id, commit_id, login):
        now = self.store.iso()
        rc = {"id": self.store.new_id(), "pull": it["number"], "review_id": review_id,
              "user": login, "body": c["body"], "path": c["path"], "commit_id": commit_id,
              "line": c.get("line"), "side": c.get("side", "RIGHT" if c.get("line") else None),
              "start_line": c.get("start_line"), "start_side": c.get("start_side"),
              "position": c.get("position"), "in_reply_to": c.get("in_reply_to"),
              "created_at": now, "updated_at": now}
        r["review_comments"][str(rc["id"])] = rc
        return rc

    def list_review_comments(self, req, g):
        r, it = self.pull(req, g)
        cs = sorted((c for c in r["review_comments"].values() if c["pull"] == it["number"]),
                    key=lambda c: c["id"])
        resp = paged(req, r, cs)
        resp.body = [S.review_comment_json(req.base, self.store, r, c) for c in resp.body]
        return resp

    def create_review_comment(self, req, g):
        r, it = self.pull(req, g)
        body = obj_body(req)
        if not body.get("in_reply_to"):
            for field in ("body", "commit_id", "path"):
                if not body.get(field):
                    raise validation_failed("PullRequestReviewComment", field)
            if body.get("line") is None and body.get("position") is None:
                raise validation_failed("PullRequestReviewComment", "line")
            self.check_path(it, body["path"])
        elif not body.get("body"):
            raise validation_failed("PullRequestReviewComment", "body")
        check_body_len("PullRequestReviewComment", body.get("body"))
        if body.get("in_reply_to"):
            parent = r["review_comments"].get(str(body["in_reply_to"]))
            if parent is None:
                raise SimError(404, "Not Found")
            body = dict(body, path=parent["path"], commit_id=parent["commit_id"],
                        line=parent["line"])
        rv = {"id": self.store.new_id(), "pull": it["number"], "user": req.ident.login,
              "body": "", "state": "COMMENTED", "commit_id": body["commit_id"],
              "submitted_at": self.store.iso()}
        r["reviews"][str(rv["id"])] = rv
        rc = self._review_comment(r, it, body, rv["id"], body["commit_id"], req.ident.login)
        out = S.review_comment_json(req.base, self.store, r, rc)
        return Resp(201, out, {"location": out["url"]})
