"""State of the GitHub simulator: repositories, issues and pull requests,
labels, comments, reviews, check runs, statuses, refs, tokens.

Everything lives in one JSON-able dict (Store.data) guarded by Store.lock;
save() writes it atomically (temp file + rename) when a path was given, so
a restarted simulator carries on where the last one stopped.
"""

import hashlib
import json
import os
import tempfile
import threading
import time

ROLES = ("admin", "maintain", "write", "triage", "read", "none")


class SimError(Exception):
    """A request the simulator refuses: HTTP status plus GitHub's JSON body."""

    def __init__(self, status, message, errors=None, doc="https://docs.github.com/rest"):
        super().__init__(message)
        self.status = status
        self.body = {"message": message, "documentation_url": doc}
        if errors is not None:
            self.body = {"message": message, "errors": errors, "documentation_url": doc}


def fake_sha(text):
    return hashlib.sha1(text.encode()).hexdigest()


def empty_state():
    return {"version": 1, "next_id": 1000, "clock_offset": 0.0,
            "repos": {}, "users": {}, "tokens": {}}


class Store:
    def __init__(self, path=None):
        self.path = path
        self.lock = threading.RLock()
        self.data = empty_state()
        if path and os.path.exists(path) and os.path.getsize(path) > 0:
            with open(path, encoding="utf-8") as f:
                self.data = json.load(f)

    # --- persistence, clock, ids ---

    def save(self):
        if not self.path:
            return
        with self.lock:
            d = os.path.dirname(os.path.abspath(self.path))
            fd, tmp = tempfile.mkstemp(prefix=".github_sim.", dir=d)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(self.data, f)
                os.replace(tmp, self.path)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise

    def reset(self):
        with self.lock:
            keep = {t: v for t, v in self.data["tokens"].items() if v.get("static")}
            self.data = empty_state()
            self.data["tokens"] = keep

    def now(self):
        return time.time() + self.data.get("clock_offset", 0.0)

    def iso(self, t=None):
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.now() if t is None else t))

    def new_id(self):
        with self.lock:
            self.data["next_id"] += 1
            return self.data["next_id"]

    # --- users, tokens ---

    def user(self, login, kind=None):
        with self.lock:
            users = self.data["users"]
            if login not in users:
                users[login] = {"login": login, "id": self.new_id(),
                                "type": kind or ("Bot" if login.endswith("[bot]") else "User")}
            return users[login]

    def add_token(self, token, login="kernelbot", kind="pat", installation_id=None,
                  expires_at=None, static=False, limit=5000):
        if kind not in ("pat", "installation"):
            raise SimError(422, "token kind must be 'pat' or 'installation'")
        with self.lock:
            self.user(login)
            self.data["tokens"][token] = {
                "login": login, "kind": kind, "installation_id": installation_id,
                "expires_at": expires_at, "static": static, "limit": limit}
            return self.data["tokens"][token]

    # --- repositories ---

    def repo(self, full, must=True):
        r = self.data["repos"].get(full.lower())
        if r is None and must:
            raise SimError(404, "Not Found")
        return r

    def repo_by_id(self, rid):
        for r in self.data["repos"].values():
            if r["id"] == rid:
                return r
        return None

    def add_repo(self, full, default_branch="main", installation_id=1, private=True,
                 refs=None, collaborators=None):
        owner, _, name = full.partition("/")
        if not owner or not name or "/" in name:
            raise SimError(422, "repository must be 'owner/name'")
        with self.lock:
            r = self.repo(full, must=False)
            if r is None:
                now = self.iso()
                r = {"id": self.new_id(), "owner": owner, "name": name,
                     "default_branch": default_branch, "private": bool(private),
                     "installation_id": installation_id, "created_at": now, "pushed_at": now,
                     "collaborators": {}, "labels": {}, "issues": {}, "next_number": 1,
                     "comments": {}, "reviews": {}, "review_comments": {},
                     "check_runs": {}, "statuses": [],
                     "refs": {"refs/heads/" + default_branch: fake_sha(full + default_branch)}}
                self.data["repos"][full.lower()] = r
                self.user(owner)
            for ref, sha in (refs or {}).items():
                r["refs"][ref if ref.startswith("refs/") else "refs/" + ref] = sha
            for login, role in (collaborators or {}).items():
                self.set_permission(full, login, role)
            return r

    def set_permission(self, full, login, role):
        if role not in ROLES:
            raise SimError(422, "permission must be one of " + ", ".join(ROLES))
        with self.lock:
            self.user(login)
            self.repo(full)["collaborators"][login] = role

    def role(self, r, login):
        if login in r["collaborators"]:
            return r["collaborators"][login]
        if login == r["owner"]:
            return "admin"
        return None

    def ensure_label(self, r, name, color="ededed", description=None):
        for lab in r["labels"].values():
            if lab["name"].lower() == name.lower():
                return lab
        lab = {"id": self.new_id(), "name": name, "color": color,
               "description": description, "default": False}
        r["labels"][name] = lab
        return lab

    # --- issues and pull requests (one number space, like GitHub) ---

    def issue(self, r, number, must=True):
        it = r["issues"].get(str(number))
        if it is None and must:
            raise SimError(404, "Not Found")
        return it

    def add_issue(self, full, title="issue", user=None, body=None, labels=(),
                  state="open", number=None, labeled_by=None, pr=None):
        with self.lock:
            r = self.repo(full)
            if number is None:
                number = r["next_number"]
            if str(number) in r["issues"]:
                raise SimError(422, "issue %d already exists" % number)
            r["next_number"] = max(r["next_number"], number + 1)
            user = user or r["owner"]
            self.user(user)
            now = self.iso()
            it = {"number": number, "id": self.new_id(), "title": title, "body": body,
                  "user": user, "state": state, "labels": [], "events": [],
                  "created_at": now, "updated_at": now,
                  "closed_at": now if state == "closed" else None, "pr": pr}
            r["issues"][str(number)] = it
            if labels:
                self.label_issue(full, number, labels, labeled_by or user)
            return it

    def add_pull(self, full, title="pull request", user=None, body=None, head=None,
                 base=None, files=(), labels=(), labeled_by=None, draft=False,
                 state="open", number=None):
        with self.lock:
            r = self.repo(full)
            head = dict(head or {})
            head.setdefault("ref", "feature")
            head.setdefault("repo", full)
            head.setdefault("sha", fake_sha(full + head["ref"] + str(self.now())))
            base = dict(base or {})
            base.setdefault("ref", r["default_branch"])
            base.setdefault("sha", r["refs"].get("refs/heads/" + base["ref"],
                                                 fake_sha(full + base["ref"])))
            if head["repo"].lower() == full.lower():
                r["refs"]["refs/heads/" + head["ref"]] = head["sha"]
            pr = {"id": self.new_id(), "head": head, "base": base, "draft": bool(draft),
                  "merged": False, "files": [self._file(f) for f in files],
                  "maintainer_can_modify": False}
            return self.add_issue(full, title, user, body, labels, state, number,
                                  labeled_by, pr)

    @staticmethod
    def _file(f):
        if isinstance(f, str):
            f = {"filename": f}
        f = dict(f)
        f.setdefault("status", "modified")
        f.setdefault("additions", 1)
        f.setdefault("deletions", 0)
        f.setdefault("changes", f["additions"] + f["deletions"])
        f.setdefault("patch", "@@ -0,0 +1 @@\n+x")
        f.setdefault("sha", fake_sha(f["filename"]))
        return f

    def _event(self, it, kind, actor, label):
        self.user(actor)
        it["events"].append({"id": self.new_id(), "event": kind, "actor": actor,
                             "label": {"name": label["name"], "color": label["color"]},
                             "created_at": self.iso()})

    def label_issue(self, full, number, names, actor):
        """Adds labels (creating unknown ones) and records 'labeled' events."""
        with self.lock:
            r = self.repo(full)
            it = self.issue(r, number)
            for name in names:
                lab = self.ensure_label(r, name)
                if lab["name"] not in it["labels"]:
                    it["labels"].append(lab["name"])
                    self._event(it, "labeled", actor, lab)
            it["updated_at"] = self.iso()
            return it

    def unlabel_issue(self, full, number, name, actor):
        with self.lock:
            r = self.repo(full)
            it = self.issue(r, number)
            for have in it["labels"]:
                if have.lower() == name.lower():
                    it["labels"].remove(have)
                    self._event(it, "unlabeled", actor, self.ensure_label(r, have))
                    it["updated_at"] = self.iso()
                    return it
            raise SimError(404, "Label does not exist")

    def add_comment(self, full, number, user, body):
        with self.lock:
            r = self.repo(full)
            it = self.issue(r, number)
            self.user(user)
            now = self.iso()
            c = {"id": self.new_id(), "issue": it["number"], "user": user, "body": body,
                 "created_at": now, "updated_at": now}
            r["comments"][str(c["id"])] = c
            it["updated_at"] = now   # as GitHub: a comment updates its issue
            return c

    def push(self, full, number, sha):
        """A new commit on the pull request's head branch."""
        with self.lock:
            r = self.repo(full)
            it = self.issue(r, number)
            if not it["pr"]:
                raise SimError(422, "#%d is not a pull request" % number)
            it["pr"]["head"]["sha"] = sha
            if it["pr"]["head"]["repo"].lower() == full.lower():
                r["refs"]["refs/heads/" + it["pr"]["head"]["ref"]] = sha
            it["updated_at"] = self.iso()
            return it
