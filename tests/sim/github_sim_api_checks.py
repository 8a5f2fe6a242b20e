"""REST handlers: check runs (App installations only), commit statuses,
git refs, and the GitHub App endpoints (mixed into github_sim_api.Api)."""

import secrets
import string

import re

import github_sim_shapes as S
from github_sim_api_common import Resp, invalid, obj_body, paged, validation_failed
from github_sim_store import SimError

MAX_CHECK_TEXT = 65535      # check run output.summary and output.text
CHECK_STATUSES = ("queued", "in_progress", "completed", "waiting", "requested", "pending")
CHECK_CONCLUSIONS = ("action_required", "cancelled", "failure", "neutral", "success",
                     "skipped", "stale", "timed_out")


class ChecksMixin:
    # --- check runs (App installations only) and commit statuses ---

    def check_app_token(self, req):
        if req.ident.kind == "pat":
            raise SimError(403, "Resource not accessible by personal access token",
                           doc="https://docs.github.com/rest/checks/runs#create-a-check-run")

    def apply_check_fields(self, cr, body):
        if "status" in body:
            if body["status"] not in CHECK_STATUSES:
                raise invalid("%r is not a member of %s." % (body["status"], CHECK_STATUSES))
            cr["status"] = body["status"]
        if "conclusion" in body and body["conclusion"] is not None:
            if body["conclusion"] not in CHECK_CONCLUSIONS:
                raise invalid("%r is not a member of %s." % (body["conclusion"],
                                                            CHECK_CONCLUSIONS))
            cr["conclusion"] = body["conclusion"]
            cr["status"] = "completed"
        if cr["status"] == "completed" and not cr["conclusion"]:
            raise invalid("\"conclusion\" wasn't supplied.")
        if "output" in body:
            out = body["output"]
            if not isinstance(out, dict) or not out.get("title") or not out.get("summary"):
                raise invalid("\"title\", \"summary\" weren't supplied.")
            for key in ("summary", "text"):
                v = out.get(key)
                if v is not None and len(v) > MAX_CHECK_TEXT:
                    raise invalid("Only %d characters are allowed; %d were supplied."
                                  % (MAX_CHECK_TEXT, len(v)))
            cr["output"] = {k: out.get(k) for k in ("title", "summary", "text")}
        for key in ("name", "details_url", "external_id", "started_at", "completed_at"):
            if key in body:
                cr[key] = body[key]
        if cr["status"] == "completed" and not cr["completed_at"]:
            cr["completed_at"] = self.store.iso()

    def create_check_run(self, req, g):
        r = self.repo(req, g)
        self.check_app_token(req)
        body = obj_body(req)
        for field in ("name", "head_sha"):
            if not isinstance(body.get(field), str) or not body[field]:
                raise invalid("\"%s\" wasn't supplied." % field)
        cr = {"id": self.store.new_id(), "suite_id": self.store.new_id(),
              "head_sha": body["head_sha"], "name": body["name"], "status": "queued",
              "conclusion": None, "details_url": None, "external_id": "",
              "started_at": self.store.iso(), "completed_at": None,
              "output": {"title": None, "summary": None, "text": None}}
        self.apply_check_fields(cr, body)
        r["check_runs"][str(cr["id"])] = cr
        out = S.check_run_json(req.base, self.store, r, cr, self.app_json(req))
        return Resp(201, out, {"location": out["url"]})

    def check_run(self, req, g):
        r = self.repo(req, g)
        cr = r["check_runs"].get(g["id"])
        if cr is None:
            raise SimError(404, "Not Found")
        return r, cr

    def get_check_run(self, req, g):
        r, cr = self.check_run(req, g)
        return Resp(200, S.check_run_json(req.base, self.store, r, cr, self.app_json(req)))

    def update_check_run(self, req, g):
        r, cr = self.check_run(req, g)
        self.check_app_token(req)
        body = obj_body(req)
        new = dict(cr, output=dict(cr["output"]))
        self.apply_check_fields(new, body)   # validate on a copy: a refusal changes nothing
        cr.update(new)
        return Resp(200, S.check_run_json(req.base, self.store, r, cr, self.app_json(req)))

    def list_check_runs(self, req, g):
        """GET /repos/{o}/{r}/commits/{ref}/check-runs: {"total_count", "check_runs"},
        newest first; check_name, status, filter (latest: the newest of each
        name, GitHub's default; all), per_page, page with Link."""
        r = self.repo(req, g)
        sha = r["refs"].get("refs/heads/" + g["ref"], g["ref"]).lower()
        runs = sorted((cr for cr in r["check_runs"].values()
                       if cr["head_sha"].lower() == sha), key=lambda cr: -cr["id"])
        name, status = req.q("check_name"), req.q("status")
        if req.q("filter", "latest") not in ("latest", "all"):
            raise invalid("%r is not a member of ['latest', 'all']." % req.q("filter"))
        if req.q("filter", "latest") == "latest":
            seen = set()
            runs = [cr for cr in runs if not (cr["name"] in seen or seen.add(cr["name"]))]
        runs = [cr for cr in runs if (name is None or cr["name"] == name) and
                (status is None or cr["status"] == status)]
        resp = paged(req, r, runs)
        resp.body = {"total_count": len(runs),
                     "check_runs": [S.check_run_json(req.base, self.store, r, cr,
                                                     self.app_json(req)) for cr in resp.body]}
        return resp

    def create_status(self, req, g):
        r = self.repo(req, g)
        body = obj_body(req)
        if body.get("state") not in ("error", "failure", "pending", "success"):
            raise validation_failed("Status", "state", "custom",
                                    "state is not included in the list")
        desc = body.get("description")
        if desc is not None and len(desc) > 140:
            raise validation_failed("Status", "description", "custom",
                                    "description is too long (maximum is 140 characters)")
        st = {"id": self.store.new_id(), "sha": g["sha"].lower(), "state": body["state"],
              "description": desc, "target_url": body.get("target_url"),
              "context": body.get("context") or "default", "creator": req.ident.login,
              "created_at": self.store.iso()}
        r["statuses"].append(st)
        out = S.status_json(req.base, self.store, r, st)
        return Resp(201, out, {"location": out["url"]})

    def list_statuses(self, req, g):
        r = self.repo(req, g)
        sha = r["refs"].get("refs/heads/" + g["ref"], g["ref"]).lower()
        sts = [s for s in reversed(r["statuses"]) if s["sha"] == sha]
        resp = paged(req, r, sts)
        resp.body = [S.status_json(req.base, self.store, r, s) for s in resp.body]
        return resp

    # --- git refs ---

    def get_ref(self, req, g):
        r = self.repo(req, g)
        ref = "refs/" + g["ref"]
        if ref not in r["refs"]:
            raise SimError(404, "Not Found")
        return Resp(200, S.ref_json(req.base, r, ref, r["refs"][ref]))

    def create_ref(self, req, g):
        r = self.repo(req, g)
        body = obj_body(req)
        ref, sha = body.get("ref"), body.get("sha")
        if not isinstance(ref, str) or not ref.startswith("refs/") or ref.count("/") < 2:
            raise SimError(422, "Reference name must start with 'refs/' and have at least "
                                "two slashes.")
        if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{40}", sha):
            raise SimError(422, "Object does not exist")
        if ref in r["refs"]:
            raise SimError(422, "Reference already exists")
        r["refs"][ref] = sha
        out = S.ref_json(req.base, r, ref, sha)
        return Resp(201, out, {"location": out["url"]})

    def update_ref(self, req, g):
        r = self.repo(req, g)
        ref = "refs/" + g["ref"]
        sha = obj_body(req).get("sha")
        if ref not in r["refs"]:
            raise SimError(422, "Reference does not exist")
        if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{40}", sha):
            raise SimError(422, "Object does not exist")
        r["refs"][ref] = sha
        return Resp(200, S.ref_json(req.base, r, ref, sha))

    def delete_ref(self, req, g):
        r = self.repo(req, g)
        ref = "refs/" + g["ref"]
        if ref not in r["refs"]:
            raise SimError(422, "Reference does not exist")
        del r["refs"][ref]
        return Resp(204)

    # --- GitHub App ---

    def need_app(self, req):
        if req.ident.kind != "app":
            raise SimError(401, "A JSON web token could not be decoded")
        return self.app_holder()

    def get_installation(self, req, g):
        app = self.need_app(req)
        r = self.store.repo("%s/%s" % (g["o"], g["r"]), must=False)
        if r is None or r.get("installation_id") is None:
            raise SimError(404, "Not Found")
        self.store.user(r["owner"])
        return Resp(200, S.installation_json(req.base, self.store, r["installation_id"],
                                             r["owner"], app.as_dict()))

    def create_token(self, req, g):
        app = self.need_app(req)
        inst = int(g["id"])
        if not any(r.get("installation_id") == inst for r in self.store.data["repos"].values()):
            raise SimError(404, "Not Found")
        alphabet = string.ascii_letters + string.digits
        token = "ghs_" + "".join(secrets.choice(alphabet) for _ in range(36))
        expires = int(self.store.now()) + self.token_ttl
        self.store.add_token(token, app.slug + "[bot]", "installation", inst, expires)
        if self.on_installation_token:
            self.on_installation_token(token, expires)
        return Resp(201, {"token": token, "expires_at": self.store.iso(expires),
                          "permissions": S.INSTALL_PERMISSIONS,
                          "repository_selection": "selected"})

    def get_app(self, req, g):
        self.need_app(req)
        return Resp(200, self.app_json(req))

    def get_user(self, req, g):
        if req.ident.kind is None:
            raise SimError(401, "Requires authentication")
        if req.ident.kind != "pat":
            raise SimError(403, "Resource not accessible by integration")
        return Resp(200, S.user_by_login(req.base, self.store, req.ident.login))
