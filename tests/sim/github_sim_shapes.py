"""GitHub's JSON shapes, built from the simulator's state records.

Keys and nesting follow the recorded responses and webhook payloads in
shared/github-fixtures (octokit); API URLs use the simulator's own base so a
client that follows them stays on loopback, html_url points at github.com.
"""

import base64
from urllib.parse import quote

HTML = "https://github.com"
PERM_ORDER = ["read", "triage", "write", "maintain", "admin"]


def node_id(kind, ident):
    return base64.b64encode(("0%d:%s%d" % (len(kind), kind, ident)).encode()).decode()


def user_json(base, u):
    login, uid = u["login"], u["id"]
    url = "%s/users/%s" % (base, quote(login))
    return {"login": login, "id": uid, "node_id": node_id("User", uid),
            "avatar_url": "https://avatars.githubusercontent.com/u/%d?v=4" % uid,
            "gravatar_id": "", "url": url, "html_url": "%s/%s" % (HTML, login),
            "followers_url": url + "/followers",
            "following_url": url + "/following{/other_user}",
            "gists_url": url + "/gists{/gist_id}",
            "starred_url": url + "/starred{/owner}{/repo}",
            "subscriptions_url": url + "/subscriptions",
            "organizations_url": url + "/orgs", "repos_url": url + "/repos",
            "events_url": url + "/events{/privacy}",
            "received_events_url": url + "/received_events",
            "type": u.get("type", "User"), "site_admin": False}


def user_by_login(base, store, login):
    return user_json(base, store.user(login))


def permissions_json(role):
    level = PERM_ORDER.index(role) if role in PERM_ORDER else -1
    return {"admin": level >= 4, "maintain": level >= 3, "push": level >= 2,
            "triage": level >= 1, "pull": level >= 0}


def repo_json(base, store, r, role=None):
    full = "%s/%s" % (r["owner"], r["name"])
    u = "%s/repos/%s" % (base, full)
    h = "%s/%s" % (HTML, full)
    open_issues = sum(1 for it in r["issues"].values() if it["state"] == "open")
    out = {"id": r["id"], "node_id": node_id("Repository", r["id"]), "name": r["name"],
           "full_name": full, "private": r["private"],
           "owner": user_by_login(base, store, r["owner"]), "html_url": h,
           "description": None, "fork": False, "url": u}
    for k, suffix in (
            ("forks_url", "/forks"), ("keys_url", "/keys{/key_id}"),
            ("collaborators_url", "/collaborators{/collaborator}"),
            ("teams_url", "/teams"), ("hooks_url", "/hooks"),
            ("issue_events_url", "/issues/events{/number}"), ("events_url", "/events"),
            ("assignees_url", "/assignees{/user}"), ("branches_url", "/branches{/branch}"),
            ("tags_url", "/tags"), ("blobs_url", "/git/blobs{/sha}"),
            ("git_tags_url", "/git/tags{/sha}"), ("git_refs_url", "/git/refs{/sha}"),
            ("trees_url", "/git/trees{/sha}"), ("statuses_url", "/statuses/{sha}"),
            ("languages_url", "/languages"), ("stargazers_url", "/stargazers"),
            ("contributors_url", "/contributors"), ("subscribers_url", "/subscribers"),
            ("subscription_url", "/subscription"), ("commits_url", "/commits{/sha}"),
            ("git_commits_url", "/git/commits{/sha}"), ("comments_url", "/comments{/number}"),
            ("issue_comment_url", "/issues/comments{/number}"),
            ("contents_url", "/contents/{+path}"), ("compare_url", "/compare/{base}...{head}"),
            ("merges_url", "/merges"), ("archive_url", "/{archive_format}{/ref}"),
            ("downloads_url", "/downloads"), ("issues_url", "/issues{/number}"),
            ("pulls_url", "/pulls{/number}"), ("milestones_url", "/milestones{/number}"),
            ("notifications_url", "/notifications{?since,all,participating}"),
            ("labels_url", "/labels{/name}"), ("releases_url", "/releases{/id}"),
            ("deployments_url", "/deployments")):
        out[k] = u + suffix
    out.update({
        "created_at": r["created_at"], "updated_at": r["pushed_at"], "pushed_at": r["pushed_at"],
        "git_url": "git://github.com/%s.git" % full, "ssh_url": "git@github.com:%s.git" % full,
        "clone_url": h + ".git", "svn_url": h, "homepage": None, "size": 0,
        "stargazers_count": 0, "watchers_count": 0, "language": "Python",
        "has_issues": True, "has_projects": True, "has_downloads": True, "has_wiki": True,
        "has_pages": False, "forks_count": 0, "mirror_url": None, "archived": False,
        "disabled": False, "open_issues_count": open_issues, "license": None,
        "allow_forking": True, "is_template": False, "web_commit_signoff_required": False,
        "topics": [], "visibility": "private" if r["private"] else "public",
        "forks": 0, "open_issues": open_issues, "watchers": 0,
        "default_branch": r["default_branch"]})
    if role is not None:
        out["permissions"] = permissions_json(role)
    out.update({"temp_clone_token": "", "allow_squash_merge": True, "allow_merge_commit": True,
                "allow_rebase_merge": True, "allow_auto_merge": False,
                "delete_branch_on_merge": False, "allow_update_branch": False,
                "use_squash_pr_title_as_default": False, "network_count": 0,
                "subscribers_count": 0})
    return out


def foreign_repo_json(base, store, full):
    """A head repository the simulator was not told about (a fork)."""
    owner, _, name = full.partition("/")
    fake = {"id": 900000 + (sum(full.encode()) % 99999), "owner": owner, "name": name,
            "private": False, "created_at": "2020-01-01T00:00:00Z",
            "pushed_at": "2020-01-01T00:00:00Z", "issues": {}, "default_branch": "main"}
    return repo_json(base, store, fake)


def label_json(base, r, lab):
    return {"id": lab["id"], "node_id": node_id("Label", lab["id"]),
            "url": "%s/repos/%s/%s/labels/%s" % (base, r["owner"], r["name"],
                                                 quote(lab["name"], safe="")),
            "name": lab["name"], "color": lab["color"], "default": lab.get("default", False),
            "description": lab.get("description")}


def issue_labels_json(base, store, r, it):
    return [label_json(base, r, store.ensure_label(r, n)) for n in it["labels"]]


def reactions_json(url):
    out = {"url": url + "/reactions", "total_count": 0}
    for k in ("+1", "-1", "laugh", "hooray", "confused", "heart", "rocket", "eyes"):
        out[k] = 0
    return out


def author_association(store, r, login):
    if login == r["owner"]:
        return "OWNER"
    return "COLLABORATOR" if store.role(r, login) not in (None, "none") else "NONE"


def issue_json(base, store, r, it):
    full = "%s/%s" % (r["owner"], r["name"])
    ru = "%s/repos/%s" % (base, full)
    u = "%s/issues/%d" % (ru, it["number"])
    n_comments = sum(1 for c in r["comments"].values() if c["issue"] == it["number"])
    out = {"url": u, "repository_url": ru, "labels_url": u + "/labels{/name}",
           "comments_url": u + "/comments", "events_url": u + "/events",
           "html_url": "%s/%s/%s/%d" % (HTML, full, "pull" if it["pr"] else "issues",
                                        it["number"]),
           "id": it["id"], "node_id": node_id("Issue", it["id"]), "number": it["number"],
           "title": it["title"], "user": user_by_login(base, store, it["user"]),
           "labels": issue_labels_json(base, store, r, it), "state": it["state"],
           "locked": False, "assignee": None, "assignees": [], "milestone": None,
           "comments": n_comments, "created_at": it["created_at"],
           "updated_at": it["updated_at"], "closed_at": it["closed_at"],
           "author_association": author_association(store, r, it["user"]),
           "active_lock_reason": None, "body": it["body"],
           "reactions": reactions_json(u), "timeline_url": u + "/timeline",
           "performed_via_github_app": None, "state_reason": None}
    if it["pr"]:
        pu = "%s/pulls/%d" % (ru, it["number"])
        h = "%s/%s/pull/%d" % (HTML, full, it["number"])
        out["draft"] = it["pr"]["draft"]
        out["pull_request"] = {"url": pu, "html_url": h, "diff_url": h + ".diff",
                               "patch_url": h + ".patch", "merged_at": None}
    return out


def _branch_json(base, store, side, default_repo):
    full = side.get("repo") or default_repo
    owner = full.split("/")[0]
    r = store.repo(full, must=False)
    repo = repo_json(base, store, r) if r else foreign_repo_json(base, store, full)
    return {"label": "%s:%s" % (owner, side["ref"]), "ref": side["ref"], "sha": side["sha"],
            "user": user_by_login(base, store, owner), "repo": repo}


def pull_json(base, store, r, it):
    full = "%s/%s" % (r["owner"], r["name"])
    ru = "%s/repos/%s" % (base, full)
    n = it["number"]
    u = "%s/pulls/%d" % (ru, n)
    h = "%s/%s/pull/%d" % (HTML, full, n)
    pr = it["pr"]
    sha = pr["head"]["sha"]
    n_comments = sum(1 for c in r["comments"].values() if c["issue"] == n)
    n_review_comments = sum(1 for c in r["review_comments"].values() if c["pull"] == n)
    links = {"self": u, "html": h, "issue": "%s/issues/%d" % (ru, n),
             "comments": "%s/issues/%d/comments" % (ru, n), "review_comments": u + "/comments",
             "review_comment": ru + "/pulls/comments{/number}", "commits": u + "/commits",
             "statuses": "%s/statuses/%s" % (ru, sha)}
    files = pr["files"]
    return {
        "url": u, "id": pr["id"], "node_id": node_id("PullRequest", pr["id"]),
        "html_url": h, "diff_url": h + ".diff", "patch_url": h + ".patch",
        "issue_url": links["issue"], "number": n, "state": it["state"], "locked": False,
        "title": it["title"], "user": user_by_login(base, store, it["user"]),
        "body": it["body"], "created_at": it["created_at"], "updated_at": it["updated_at"],
        "closed_at": it["closed_at"], "merged_at": None, "merge_commit_sha": None,
        "assignee": None, "assignees": [], "requested_reviewers": [], "requested_teams": [],
        "labels": issue_labels_json(base, store, r, it), "milestone": None,
        "commits_url": links["commits"], "review_comments_url": links["review_comments"],
        "review_comment_url": links["review_comment"], "comments_url": links["comments"],
        "statuses_url": links["statuses"],
        "head": _branch_json(base, store, pr["head"], full),
        "base": _branch_json(base, store, dict(pr["base"], repo=full), full),
        "_links": {k: {"href": v} for k, v in links.items()},
        "author_association": author_association(store, r, it["user"]),
        "auto_merge": None, "active_lock_reason": None, "draft": pr["draft"],
        "merged": pr["merged"], "mergeable": True, "rebaseable": True,
        "mergeable_state": "clean", "merged_by": None, "comments": n_comments,
        "review_comments": n_review_comments,
        "maintainer_can_modify": pr["maintainer_can_modify"], "commits": 1,
        "additions": sum(f["additions"] for f in files),
        "deletions": sum(f["deletions"] for f in files), "changed_files": len(files)}


def file_json(base, r, it, f):
    full = "%s/%s" % (r["owner"], r["name"])
    sha = it["pr"]["head"]["sha"]
    path = quote(f["filename"])
    out = {"sha": f["sha"], "filename": f["filename"], "status": f["status"],
           "additions": f["additions"], "deletions": f["deletions"], "changes": f["changes"],
           "blob_url": "%s/%s/blob/%s/%s" % (HTML, full, sha, path),
           "raw_url": "%s/%s/raw/%s/%s" % (HTML, full, sha, path),
           "contents_url": "%s/repos/%s/contents/%s?ref=%s" % (base, full, path, sha),
           "patch": f["patch"]}
    if f.get("previous_filename"):
        out["previous_filename"] = f["previous_filename"]
    return out


def event_json(base, store, r, it, ev):
    full = "%s/%s" % (r["owner"], r["name"])
    return {"id": ev["id"], "node_id": node_id("LabeledEvent", ev["id"]),
            "url": "%s/repos/%s/issues/events/%d" % (base, full, ev["id"]),
            "actor": user_by_login(base, store, ev["actor"]), "event": ev["event"],
            "commit_id": None, "commit_url": None, "created_at": ev["created_at"],
            "label": dict(ev["label"]), "performed_via_github_app": None}


def comment_json(base, store, r, c):
    full = "%s/%s" % (r["owner"], r["name"])
    u = "%s/repos/%s/issues/comments/%d" % (base, full, c["id"])
    it = r["issues"].get(str(c["issue"]))
    kind = "pull" if it and it["pr"] else "issues"
    return {"url": u,
            "html_url": "%s/%s/%s/%d#issuecomment-%d" % (HTML, full, kind, c["issue"], c["id"]),
            "issue_url": "%s/repos/%s/issues/%d" % (base, full, c["issue"]),
            "id": c["id"], "node_id": node_id("IssueComment", c["id"]),
            "user": user_by_login(base, store, c["user"]), "created_at": c["created_at"],
            "updated_at": c["updated_at"],
            "author_association": author_association(store, r, c["user"]),
            "body": c["body"], "reactions": reactions_json(u),
            "performed_via_github_app": None}


def review_json(base, store, r, rv):
    full = "%s/%s" % (r["owner"], r["name"])
    pu = "%s/repos/%s/pulls/%d" % (base, full, rv["pull"])
    h = "%s/%s/pull/%d#pullrequestreview-%d" % (HTML, full, rv["pull"], rv["id"])
    return {"id": rv["id"], "node_id": node_id("PullRequestReview", rv["id"]),
            "user": user_by_login(base, store, rv["user"]), "body": rv["body"] or "",
            "state": rv["state"], "html_url": h, "pull_request_url": pu,
            "author_association": author_association(store, r, rv["user"]),
            "_links": {"html": {"href": h}, "pull_request": {"href": pu}},
            "submitted_at": rv["submitted_at"], "commit_id": rv["commit_id"]}


def review_comment_json(base, store, r, c):
    full = "%s/%s" % (r["owner"], r["name"])
    u = "%s/repos/%s/pulls/comments/%d" % (base, full, c["id"])
    pu = "%s/repos/%s/pulls/%d" % (base, full, c["pull"])
    h = "%s/%s/pull/%d#discussion_r%d" % (HTML, full, c["pull"], c["id"])
    return {"url": u, "pull_request_review_id": c["review_id"], "id": c["id"],
            "node_id": node_id("PullRequestReviewComment", c["id"]),
            "diff_hunk": "@@ -1 +1 @@", "path": c["path"], "position": c.get("position"),
            "original_position": c.get("position"), "commit_id": c["commit_id"],
            "original_commit_id": c["commit_id"],
            "user": user_by_login(base, store, c["user"]), "body": c["body"],
            "created_at": c["created_at"], "updated_at": c["updated_at"], "html_url": h,
            "pull_request_url": pu,
            "author_association": author_association(store, r, c["user"]),
            "_links": {"self": {"href": u}, "html": {"href": h},
                       "pull_request": {"href": pu}},
            "start_line": c.get("start_line"), "original_start_line": c.get("start_line"),
            "start_side": c.get("start_side"), "line": c.get("line"),
            "original_line": c.get("line"), "side": c.get("side"),
            "in_reply_to_id": c.get("in_reply_to"), "subject_type": "line",
            "reactions": reactions_json(u)}


def app_json(base, store, app):
    owner = user_by_login(base, store, app["owner"])
    return {"id": app["app_id"], "slug": app["slug"],
            "node_id": node_id("Integration", app["app_id"]), "owner": owner,
            "name": app["slug"], "description": "", "external_url": "https://example.invalid",
            "html_url": "%s/apps/%s" % (HTML, app["slug"]),
            "created_at": "2020-01-01T00:00:00Z", "updated_at": "2020-01-01T00:00:00Z",
            "permissions": INSTALL_PERMISSIONS,
            "events": ["pull_request", "issue_comment", "check_run"]}


INSTALL_PERMISSIONS = {"checks": "write", "contents": "write", "issues": "write",
                       "metadata": "read", "pull_requests": "write", "statuses": "write"}


def check_run_json(base, store, r, cr, app):
    full = "%s/%s" % (r["owner"], r["name"])
    u = "%s/repos/%s/check-runs/%d" % (base, full, cr["id"])
    out = dict(cr["output"])
    out.setdefault("title", None)
    out.setdefault("summary", None)
    out.setdefault("text", None)
    out["annotations_count"] = 0
    out["annotations_url"] = u + "/annotations"
    out.pop("annotations", None)
    out.pop("images", None)
    return {"id": cr["id"], "head_sha": cr["head_sha"],
            "node_id": node_id("CheckRun", cr["id"]), "external_id": cr["external_id"],
            "url": u, "html_url": "%s/%s/runs/%d" % (HTML, full, cr["id"]),
            "details_url": cr["details_url"], "status": cr["status"],
            "conclusion": cr["conclusion"], "started_at": cr["started_at"],
            "completed_at": cr["completed_at"], "output": out, "name": cr["name"],
            "check_suite": {"id": cr["suite_id"]}, "app": app, "pull_requests": []}


def status_json(base, store, r, st):
    full = "%s/%s" % (r["owner"], r["name"])
    creator = store.user(st["creator"])
    return {"url": "%s/repos/%s/statuses/%s" % (base, full, st["sha"]),
            "avatar_url": "https://avatars.githubusercontent.com/u/%d?v=4" % creator["id"],
            "id": st["id"], "node_id": node_id("StatusContext", st["id"]),
            "state": st["state"], "description": st["description"],
            "target_url": st["target_url"], "context": st["context"],
            "created_at": st["created_at"], "updated_at": st["created_at"],
            "creator": user_json(base, creator)}


def ref_json(base, r, ref, sha):
    full = "%s/%s" % (r["owner"], r["name"])
    return {"ref": ref, "node_id": node_id("Ref", sum(ref.encode())),
            "url": "%s/repos/%s/git/%s" % (base, full, ref),
            "object": {"sha": sha, "type": "commit",
                       "url": "%s/repos/%s/git/commits/%s" % (base, full, sha)}}


def installation_json(base, store, inst_id, account, app):
    acc = user_by_login(base, store, account)
    return {"id": inst_id, "account": acc, "repository_selection": "selected",
            "access_tokens_url": "%s/app/installations/%d/access_tokens" % (base, inst_id),
            "repositories_url": "%s/installation/repositories" % base,
            "html_url": "%s/settings/installations/%d" % (HTML, inst_id),
            "app_id": app["app_id"], "app_slug": app["slug"], "target_id": acc["id"],
            "target_type": acc["type"], "permissions": INSTALL_PERMISSIONS,
            "events": ["pull_request", "issue_comment", "check_run"],
            "created_at": "2020-01-01T00:00:00Z", "updated_at": "2020-01-01T00:00:00Z",
            "single_file_name": None, "has_multiple_single_files": False,
            "single_file_paths": [], "suspended_by": None, "suspended_at": None}
