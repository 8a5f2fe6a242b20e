"""The GitHub simulator (tests/sim/github_sim.py): endpoints and their
shapes against the octokit fixtures, auth, ETag/304, Link pagination,
quotas, every fault, the App JWT flow, persistence, webhooks."""

import base64
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

TOP = os.environ.get("KB_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
SIM_DIR = os.path.join(TOP, "tests", "sim")
sys.path.insert(0, SIM_DIR)

import github_sim_webhook as W  # noqa: E402
from github_sim import GitHubSim, SimControlError  # noqa: E402

FIXTURES = W.default_fixtures_dir()
REPO = "acme/ops"
TOKEN = "test-token"


def fixture(rel):
    path = os.path.join(FIXTURES, rel)
    if not os.path.exists(path):
        pytest.skip("github fixtures not found at %s" % FIXTURES)
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def recorded(rel, index=0):
    return fixture("rest/" + rel)[index]["response"]


def seed(sim):
    sim.add_repo(REPO, collaborators={"alice": "write", "mallory": "read",
                                      "max": "maintain", "tri": "triage", "nobody": "none"})
    n = sim.add_pull(REPO, title="add relu", user="carol", body="please",
                     head={"ref": "relu", "sha": "a" * 40},
                     files=["ops/relu.py", {"filename": "README.md", "additions": 3}],
                     labels=["optimize-kernel"], labeled_by="alice")
    assert n == 1
    return n


@pytest.fixture
def sim():
    s = GitHubSim(tokens=(TOKEN, "other-token:alice")).start()
    seed(s)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def app_keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("appkey")
    key, pub, other = str(d / "key.pem"), str(d / "pub.pem"), str(d / "other.pem")
    for k in (key, other):
        subprocess.run(["openssl", "genrsa", "-out", k, "2048"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run(["openssl", "rsa", "-in", key, "-pubout", "-out", pub], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return key, pub, other


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def make_jwt(key, claims):
    head = b64url(json.dumps({"alg": "RS256", "typ": "JWT"}).encode())
    body = b64url(json.dumps(claims).encode())
    signing_input = (head + "." + body).encode()
    sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", key], input=signing_input,
                         stdout=subprocess.PIPE, check=True).stdout
    return head + "." + body + "." + b64url(sig)


def links(headers):
    out = {}
    for part in headers.get("link", "").split(","):
        if not part.strip():
            continue
        url, rel = part.split(";")
        out[rel.strip().split("=")[1].strip('"')] = url.strip()[1:-1]
    return out


# --- basics: auth, repository ---

def test_repository_shape_and_auth(sim):
    st, h, repo = sim.api("GET", "/repos/" + REPO)
    assert st == 200
    assert h["content-type"] == "application/json; charset=utf-8"
    assert h["x-github-request-id"] and h["etag"].startswith('W/"')
    assert set(recorded("get-repository.json")) - {"organization"} == set(repo)
    assert repo["full_name"] == REPO and repo["private"] is True
    assert repo["owner"]["login"] == "acme" and repo["default_branch"] == "main"
    # Bearer works like token; unknown token 401; no token on a private repo: 404 like GitHub
    assert sim.api("GET", "/repos/" + REPO, scheme="Bearer")[0] == 200
    st, _, body = sim.api("GET", "/repos/" + REPO, token="nope")
    assert st == 401 and body["message"] == "Bad credentials"
    st, _, body = sim.api("GET", "/repos/" + REPO, token=None)
    assert st == 404 and body["message"] == "Not Found"
    assert sim.api("GET", "/repos/acme/missing")[0] == 404
    # GitHub Enterprise layout and GitHub's /repositories/{id} form reach the same repository
    assert sim.api("GET", "/api/v3/repos/" + REPO)[2]["url"].startswith(sim.url + "/api/v3/")
    assert sim.api("GET", "/repositories/%d" % repo["id"])[2]["full_name"] == REPO
    st, _, body = sim.api("POST", "/repos/%s/issues/1/comments" % REPO, b"{not json")
    assert st == 400 and body["message"] == "Problems parsing JSON"


def test_user_shape_matches_fixture(sim):
    st, _, me = sim.api("GET", "/user")
    assert st == 200 and me["login"] == "kernelbot"
    assert set(me) == set(recorded("create-status.json")["creator"])


# --- issues, pagination, ETag ---

def test_issues_list_filters_and_shapes(sim):
    sim.add_issues(REPO, title="plain", labels=["bug"], labeled_by="alice")
    sim.add_issues(REPO, title="closed", state="closed")
    st, _, items = sim.api("GET", "/repos/%s/issues?labels=optimize-kernel&state=open" % REPO)
    assert st == 200 and [i["number"] for i in items] == [1]
    assert items[0]["pull_request"]["url"].endswith("/pulls/1")
    assert items[0]["labels"][0]["name"] == "optimize-kernel"
    _, _, items = sim.api("GET", "/repos/%s/issues" % REPO)
    assert [i["number"] for i in items] == [2, 1]           # newest first, open only
    plain = items[0]
    assert "pull_request" not in plain
    assert set(plain) == set(recorded("paginate-issues.json")[0])
    assert set(plain["labels"][0]) == set(recorded("labels.json", 1))
    _, _, items = sim.api("GET", "/repos/%s/issues?state=all" % REPO)
    assert [i["number"] for i in items] == [3, 2, 1]
    _, _, items = sim.api("GET", "/repos/%s/issues?state=closed" % REPO)
    assert [i["number"] for i in items] == [3]


def test_pagination_follows_link_over_250_issues(sim):
    sim.add_issues(REPO, title="bulk", count=249)
    url = "/repos/%s/issues?state=all&per_page=100" % REPO
    seen, calls = [], 0
    while url:
        st, h, items = sim.api("GET", url)
        assert st == 200
        calls += 1
        seen += [i["number"] for i in items]
        rels = links(h)
        if calls == 1:
            assert set(rels) == {"next", "last"}
            assert rels["last"].startswith(sim.url + "/repositories/")
            assert "page=3" in rels["last"]
        url = rels.get("next")
    assert calls == 3 and len(seen) == 250 and sorted(seen) == list(range(1, 251))
    # default 30 a page, 100 at most
    _, h, items = sim.api("GET", "/repos/%s/issues?state=all" % REPO)
    assert len(items) == 30 and "page=9" in links(h)["last"]
    _, h, items = sim.api("GET", "/repos/%s/issues?state=all&per_page=500" % REPO)
    assert len(items) == 100
    _, h, items = sim.api("GET", "/repos/%s/issues?state=all&per_page=100&page=3" % REPO)
    assert len(items) == 50 and set(links(h)) == {"prev", "first"}


def test_etag_304_costs_no_quota(sim):
    path = "/repos/%s/issues?labels=optimize-kernel" % REPO
    st, h, _ = sim.api("GET", path)
    etag, left = h["etag"], int(h["x-ratelimit-remaining"])
    for _ in range(3):
        st, h2, body = sim.api("GET", path, headers={"If-None-Match": etag})
        assert st == 304 and body is None
        assert int(h2["x-ratelimit-remaining"]) == left
    st, h3, raw = sim.http("GET", path, headers={"Authorization": "token " + TOKEN,
                                                 "If-None-Match": etag})
    assert st == 304 and raw == b""
    # a change gives a new body, a new etag, and costs one request
    sim.comment(REPO, 1, "alice", "hi")
    st, h4, _ = sim.api("GET", path, headers={"If-None-Match": etag})
    assert st == 200 and h4["etag"] != etag
    assert int(h4["x-ratelimit-remaining"]) == left - 1
    log = [e for e in sim.requests() if e["path"] == "/repos/%s/issues" % REPO]
    assert [e["status"] for e in log] == [200, 304, 304, 304, 304, 200]
    assert log[1]["if_none_match"] == etag and log[1]["auth"] == "token"


def test_quota_decreases_per_token_and_runs_out(sim):
    _, h, _ = sim.api("GET", "/repos/" + REPO)
    _, h2, _ = sim.api("GET", "/repos/" + REPO)
    assert int(h["x-ratelimit-limit"]) == 5000
    assert int(h2["x-ratelimit-remaining"]) == int(h["x-ratelimit-remaining"]) - 1
    assert int(h2["x-ratelimit-used"]) == int(h["x-ratelimit-used"]) + 1
    _, other, _ = sim.api("GET", "/repos/" + REPO, token="other-token")
    assert int(other["x-ratelimit-remaining"]) == 4999      # its own quota
    sim.set_ratelimit(TOKEN, remaining=1, reset_in=120)
    assert sim.api("GET", "/repos/" + REPO)[0] == 200
    st, h, body = sim.api("GET", "/repos/" + REPO)
    assert st == 403 and h["x-ratelimit-remaining"] == "0"
    assert body["message"].startswith("API rate limit exceeded")
    assert int(h["x-ratelimit-reset"]) - time.time() > 60
    st, _, rl = sim.api("GET", "/rate_limit")
    assert st == 200 and rl["resources"]["core"]["remaining"] == 0


# --- events, permissions, labels ---

def test_events_and_permissions(sim):
    sim.unlabel(REPO, 1, "optimize-kernel", "mallory")
    sim.label(REPO, 1, ["optimize-kernel"], "mallory")
    st, _, evs = sim.api("GET", "/repos/%s/issues/1/events" % REPO)
    assert st == 200
    assert [(e["event"], e["actor"]["login"], e["label"]["name"]) for e in evs] == [
        ("labeled", "alice", "optimize-kernel"), ("unlabeled", "mallory", "optimize-kernel"),
        ("labeled", "mallory", "optimize-kernel")]
    legacy = {"alice": ("write", "write"), "mallory": ("read", "read"),
              "max": ("write", "maintain"), "tri": ("read", "triage"),
              "nobody": ("none", "none"), "acme": ("admin", "admin"),
              "carol": ("none", "none")}
    for login, (perm, role) in legacy.items():
        st, _, p = sim.api("GET", "/repos/%s/collaborators/%s/permission" % (REPO, login))
        assert st == 200 and (p["permission"], p["role_name"]) == (perm, role), login
        assert p["user"]["login"] == login
    st, _, p = sim.api("GET", "/repos/%s/collaborators/ghost/permission" % REPO)
    assert st == 404


def test_labels_add_and_remove(sim):
    st, _, labs = sim.api("POST", "/repos/%s/issues/1/labels" % REPO,
                          {"labels": ["kernelbot:running"]})
    assert st == 200 and [x["name"] for x in labs] == ["optimize-kernel", "kernelbot:running"]
    assert set(labs[0]) == set(recorded("add-labels-to-issue.json", 1)[0])
    st, _, labs = sim.api("POST", "/repos/%s/issues/1/labels" % REPO, ["kernelbot:done"])
    assert st == 200 and len(labs) == 3
    st, _, labs = sim.api("DELETE", "/repos/%s/issues/1/labels/kernelbot%%3Arunning" % REPO)
    assert st == 200 and [x["name"] for x in labs] == ["optimize-kernel", "kernelbot:done"]
    st, _, body = sim.api("DELETE", "/repos/%s/issues/1/labels/absent" % REPO)
    assert st == 404 and body["message"] == "Label does not exist"
    evs = sim.api("GET", "/repos/%s/issues/1/events" % REPO)[2]
    assert [(e["event"], e["actor"]["login"]) for e in evs[1:]] == [
        ("labeled", "kernelbot"), ("labeled", "kernelbot"), ("unlabeled", "kernelbot")]
    assert sim.api("POST", "/repos/%s/issues/1/labels" % REPO, {"labels": []})[0] == 422


# --- pull requests ---

def test_pull_request_get_files_list(sim):
    st, _, pr = sim.api("GET", "/repos/%s/pulls/1" % REPO)
    assert st == 200
    hook_pr = fixture("webhooks/pull_request.labeled.json")["pull_request"]
    assert set(pr) == set(hook_pr)
    assert set(pr["head"]) == set(hook_pr["head"])
    assert pr["head"]["sha"] == "a" * 40 and pr["head"]["ref"] == "relu"
    assert pr["head"]["label"] == "acme:relu" and pr["base"]["ref"] == "main"
    assert pr["user"]["login"] == "carol" and pr["changed_files"] == 2
    st, _, files = sim.api("GET", "/repos/%s/pulls/1/files" % REPO)
    assert [f["filename"] for f in files] == ["ops/relu.py", "README.md"]
    assert {"sha", "filename", "status", "additions", "deletions", "changes", "blob_url",
            "raw_url", "contents_url", "patch"} == set(files[0])
    _, _, found = sim.api("GET", "/repos/%s/pulls?head=acme:relu&state=all" % REPO)
    assert [p["number"] for p in found] == [1]
    _, _, found = sim.api("GET", "/repos/%s/pulls?head=acme:other&state=all" % REPO)
    assert found == []
    assert sim.api("GET", "/repos/%s/pulls/9" % REPO)[0] == 404
    sim.push(REPO, 1, "b" * 40)
    assert sim.api("GET", "/repos/%s/pulls/1" % REPO)[2]["head"]["sha"] == "b" * 40


def test_create_pull_duplicate_and_update(sim):
    req = {"title": "kernelbot: relu 2.00x faster", "head": "kernelbot/pr-1/relu",
           "base": "relu", "body": "table", "draft": False}
    st, h, pr = sim.api("POST", "/repos/%s/pulls" % REPO, req)
    assert st == 201 and h["location"] == pr["url"]
    assert pr["user"]["login"] == "kernelbot" and pr["base"]["ref"] == "relu"
    st, _, err = sim.api("POST", "/repos/%s/pulls" % REPO, req)
    assert st == 422 and err["message"] == "Validation Failed"
    assert err["errors"][0]["message"] == \
        "A pull request already exists for acme:kernelbot/pr-1/relu."
    found = sim.api("GET", "/repos/%s/pulls?head=acme:kernelbot/pr-1/relu&state=all"
                    % REPO)[2]
    assert [p["number"] for p in found] == [pr["number"]]
    st, _, upd = sim.api("PATCH", "/repos/%s/pulls/%d" % (REPO, pr["number"]),
                         {"body": "new table", "title": "kernelbot: relu 3.00x faster"})
    assert st == 200 and upd["body"] == "new table"
    big = dict(req, head="other", body="x" * 65537)
    st, _, err = sim.api("POST", "/repos/%s/pulls" % REPO, big)
    assert st == 422 and "too long" in err["errors"][0]["message"]
    assert sim.api("POST", "/repos/%s/pulls" % REPO, {"title": "t", "head": "x"})[0] == 422
    # once closed, the same head may be opened again
    sim.api("PATCH", "/repos/%s/pulls/%d" % (REPO, pr["number"]), {"state": "closed"})
    assert sim.api("POST", "/repos/%s/pulls" % REPO, req)[0] == 201
    st = sim.repo_state(REPO)
    assert st["issues"][str(pr["number"])]["body"] == "new table"


# --- comments, reviews ---

def test_issue_comments_create_list_edit(sim):
    human = sim.comment(REPO, 1, "alice", "/kernelbot stop")
    st, h, c = sim.api("POST", "/repos/%s/issues/1/comments" % REPO,
                       {"body": "<!-- kernelbot:progress -->\nstarted"})
    assert st == 201 and h["location"] == c["url"]
    assert set(c) == set(fixture("webhooks/issue_comment.created.with-installation.json")
                         ["comment"])
    st, _, c2 = sim.api("PATCH", "/repos/%s/issues/comments/%d" % (REPO, c["id"]),
                        {"body": "<!-- kernelbot:progress -->\ndone"})
    assert st == 200 and c2["body"].endswith("done") and c2["id"] == c["id"]
    _, _, cs = sim.api("GET", "/repos/%s/issues/1/comments?per_page=1" % REPO)
    assert [x["id"] for x in cs] == [human]
    _, _, cs = sim.api("GET", "/repos/%s/issues/1/comments" % REPO)
    assert [x["user"]["login"] for x in cs] == ["alice", "kernelbot"]
    st, _, err = sim.api("POST", "/repos/%s/issues/1/comments" % REPO, {"body": "x" * 65537})
    assert st == 422
    assert sim.api("PATCH", "/repos/%s/issues/comments/999999" % REPO, {"body": "x"})[0] == 404
    state = sim.repo_state(REPO)
    assert len(state["comments"]) == 2
    assert state["comments"][str(c["id"])]["body"].endswith("done")


def test_repository_comments_since_sort_etag_and_link(sim):
    # comments on two issues, a minute apart on the simulator's clock
    sim.add_issues(REPO, title="plain")
    ids = []
    for i, (n, who) in enumerate([(1, "alice"), (2, "carol"), (1, "alice"), (2, "alice")]):
        sim.set_clock(60 * i)
        ids.append(sim.comment(REPO, n, who, "c%d" % i))
    base = "/repos/%s/issues/comments" % REPO
    st, _, cs = sim.api("GET", base)
    assert st == 200 and [c["id"] for c in cs] == ids          # default: oldest first
    assert cs[1]["issue_url"].endswith("/repos/%s/issues/2" % REPO)
    _, _, cs = sim.api("GET", base + "?sort=updated&direction=desc")
    assert [c["id"] for c in cs] == ids[::-1]
    since = cs[1]["updated_at"]                                  # inclusive, as GitHub
    _, _, cs = sim.api("GET", base + "?sort=updated&direction=desc&since=" + since)
    assert [c["id"] for c in cs] == [ids[3], ids[2]]
    # an edit moves a comment to the front of sort=updated
    sim.set_clock(600)
    sim.api("PATCH", "%s/%d" % (base, ids[0]), {"body": "edited"})
    _, h, cs = sim.api("GET", base + "?sort=updated&direction=desc&since=" + since)
    assert [c["id"] for c in cs] == [ids[0], ids[3], ids[2]]
    # conditional: a 304 until a comment comes, free of quota
    etag, left = h["etag"], int(h["x-ratelimit-remaining"])
    path = base + "?sort=updated&direction=desc&since=" + since
    st, h, _ = sim.api("GET", path, headers={"If-None-Match": etag})
    assert st == 304 and int(h["x-ratelimit-remaining"]) == left
    # a comment updates its issue, so the labelled-issues list changes too
    _, h, _ = sim.api("GET", "/repos/%s/issues?labels=optimize-kernel" % REPO)
    list_etag = h["etag"]
    sim.set_clock(660)
    sim.comment(REPO, 1, "alice", "/kernelbot stop")
    st, _, _ = sim.api("GET", path, headers={"If-None-Match": etag})
    assert st == 200
    st, _, issues = sim.api("GET", "/repos/%s/issues?labels=optimize-kernel" % REPO,
                            headers={"If-None-Match": list_etag})
    assert st == 200 and issues[0]["comments"] == 3
    # pages by Link (by repository id), newest first across pages
    _, h, cs = sim.api("GET", base + "?sort=updated&direction=desc&per_page=2")
    rels = links(h)
    assert len(cs) == 2 and "/repositories/" in rels["next"]
    _, _, cs2 = sim.api("GET", rels["next"][len(sim.url):])
    assert len(cs2) == 2 and cs2[0]["updated_at"] <= cs[-1]["updated_at"]
    assert sim.api("GET", base + "?sort=bogus")[0] == 422


def test_expired_installation_tokens_and_the_token_hook(sim, app_keys):
    key, pub, _ = app_keys
    with open(pub) as f:
        sim.set_app(4242, f.read())
    seen = []
    sim.on_installation_token(lambda tok, exp: seen.append((tok, exp)))
    now = int(time.time())
    jwt = make_jwt(key, {"iat": now - 60, "exp": now + 540, "iss": 4242})
    _, _, tok = sim.api("POST", "/app/installations/1/access_tokens", token=jwt,
                        scheme="Bearer")
    assert [t for t, _ in seen] == [tok["token"]] and seen[0][1] > now + 3500
    assert sim.api("GET", "/repos/" + REPO, token=tok["token"])[0] == 200
    assert sim.expire_tokens() == 1
    st, _, err = sim.api("GET", "/repos/" + REPO, token=tok["token"])
    assert st == 401 and err["message"] == "Bad credentials"
    assert sim.api("GET", "/repos/" + REPO)[0] == 200          # a --token PAT never expires
    _, _, tok2 = sim.api("POST", "/app/installations/1/access_tokens", token=jwt,
                         scheme="Bearer")
    assert tok2["token"] != tok["token"] and len(seen) == 2
    assert sim.api("GET", "/repos/" + REPO, token=tok2["token"])[0] == 200


def test_reviews_and_review_comments(sim):
    st, _, rv = sim.api("POST", "/repos/%s/pulls/1/reviews" % REPO, {
        "event": "COMMENT", "body": "new best: 2.1x", "commit_id": "a" * 40,
        "comments": [{"path": "ops/relu.py", "line": 1, "side": "RIGHT", "body": "here"}]})
    assert st == 200 and rv["state"] == "COMMENTED" and rv["commit_id"] == "a" * 40
    assert {"id", "node_id", "user", "body", "state", "html_url", "pull_request_url",
            "author_association", "_links", "submitted_at", "commit_id"} == set(rv)
    st, _, err = sim.api("POST", "/repos/%s/pulls/1/reviews" % REPO, {
        "event": "COMMENT", "body": "b",
        "comments": [{"path": "nope.py", "line": 1, "body": "x"}]})
    assert st == 422 and err["errors"] == ["Path could not be resolved"]
    st, h, rc = sim.api("POST", "/repos/%s/pulls/1/comments" % REPO, {
        "body": "2.3x now", "commit_id": "a" * 40, "path": "ops/relu.py", "line": 1,
        "side": "RIGHT"})
    assert st == 201 and rc["path"] == "ops/relu.py" and rc["line"] == 1
    assert sim.api("POST", "/repos/%s/pulls/1/comments" % REPO, {"body": "x"})[0] == 422
    _, _, listed = sim.api("GET", "/repos/%s/pulls/1/comments" % REPO)
    assert [c["body"] for c in listed] == ["here", "2.3x now"]
    state = sim.repo_state(REPO)
    assert len(state["reviews"]) == 2 and len(state["review_comments"]) == 2


# --- statuses, check runs, refs ---

def test_statuses(sim):
    sha = "a" * 40
    st, h, s = sim.api("POST", "/repos/%s/statuses/%s" % (REPO, sha), {
        "state": "pending", "context": "kernelbot", "description": "searching",
        "target_url": "https://example.invalid/job/1"})
    assert st == 201 and s["state"] == "pending" and s["creator"]["login"] == "kernelbot"
    assert set(s) == set(recorded("create-status.json"))
    assert sim.api("POST", "/repos/%s/statuses/%s" % (REPO, sha), {"state": "great"})[0] == 422
    assert sim.api("POST", "/repos/%s/statuses/%s" % (REPO, sha),
                   {"state": "success", "description": "d" * 141})[0] == 422
    _, _, listed = sim.api("GET", "/repos/%s/commits/%s/statuses" % (REPO, sha))
    assert [x["context"] for x in listed] == ["kernelbot"]
    assert sim.repo_state(REPO)["statuses"][0]["description"] == "searching"


def test_check_runs_refused_for_pat(sim):
    st, _, err = sim.api("POST", "/repos/%s/check-runs" % REPO,
                         {"name": "kernelbot", "head_sha": "a" * 40})
    assert st == 403
    assert err["message"] == "Resource not accessible by personal access token"
    assert sim.repo_state(REPO)["check_runs"] == {}


def test_git_refs(sim):
    st, _, ref = sim.api("GET", "/repos/%s/git/ref/heads/relu" % REPO)
    assert st == 200 and ref["object"]["sha"] == "a" * 40
    assert set(ref) == set(recorded("git-refs.json", 1))
    assert sim.api("GET", "/repos/%s/git/ref/heads/none" % REPO)[0] == 404
    new = {"ref": "refs/heads/kernelbot/x", "sha": "c" * 40}
    assert sim.api("POST", "/repos/%s/git/refs" % REPO, new)[0] == 201
    assert sim.api("POST", "/repos/%s/git/refs" % REPO, new)[0] == 422
    st, _, ref = sim.api("PATCH", "/repos/%s/git/refs/heads/kernelbot/x" % REPO,
                         {"sha": "d" * 40, "force": True})
    assert st == 200 and ref["object"]["sha"] == "d" * 40
    assert sim.api("DELETE", "/repos/%s/git/refs/heads/kernelbot/x" % REPO)[0] == 204
    assert "refs/heads/kernelbot/x" not in sim.repo_state(REPO)["refs"]


def test_app_jwt_installation_token_and_check_runs(sim, app_keys):
    key, pub, other = app_keys
    with open(pub) as f:
        sim.set_app(4242, f.read())
    now = int(time.time())
    jwt = make_jwt(key, {"iat": now - 60, "exp": now + 540, "iss": 4242})
    st, _, inst = sim.api("GET", "/repos/%s/installation" % REPO, token=jwt, scheme="Bearer")
    assert st == 200 and inst["id"] == 1 and inst["app_id"] == 4242
    st, _, app = sim.api("GET", "/app", token=jwt, scheme="Bearer")
    assert st == 200 and app["slug"] == "kernelbot"
    st, _, tok = sim.api("POST", "/app/installations/1/access_tokens", token=jwt,
                         scheme="Bearer")
    assert st == 201 and tok["token"].startswith("ghs_")
    expires = time.mktime(time.strptime(tok["expires_at"], "%Y-%m-%dT%H:%M:%SZ")) \
        - time.timezone
    assert 3500 < expires - time.time() <= 3601
    for bad in (make_jwt(other, {"iat": now - 60, "exp": now + 540, "iss": 4242}),
                make_jwt(key, {"iat": now - 60, "exp": now + 660, "iss": 4242}),
                make_jwt(key, {"iat": now - 700, "exp": now - 100, "iss": 4242}),
                make_jwt(key, {"iat": now - 60, "exp": now + 540, "iss": 1}),
                jwt[:-4] + "AAAA", "not.a.jwt"):
        st, _, err = sim.api("POST", "/app/installations/1/access_tokens", token=bad,
                             scheme="Bearer")
        assert st == 401, err
    st, _, err = sim.api("POST", "/app/installations/1/access_tokens")   # a PAT
    assert st == 401
    assert sim.api("POST", "/app/installations/77/access_tokens", token=jwt,
                   scheme="Bearer")[0] == 404
    with open(pub) as f:
        sim.set_app(4242, f.read(), client_id="Iv1.cafe")
    by_client_id = make_jwt(key, {"iat": now - 60, "exp": now + 540, "iss": "Iv1.cafe"})
    assert sim.api("POST", "/app/installations/1/access_tokens", token=by_client_id,
                   scheme="Bearer")[0] == 201
    # the installation token: check runs, with GitHub's limits
    it = tok["token"]
    st, _, cr = sim.api("POST", "/repos/%s/check-runs" % REPO, token=it, body={
        "name": "kernelbot", "head_sha": "a" * 40, "status": "in_progress",
        "output": {"title": "searching", "summary": "gen 1"}})
    assert st == 201 and cr["status"] == "in_progress" and cr["app"]["id"] == 4242
    hook = fixture("webhooks/check_run.created.json")["check_run"]
    assert set(cr) == set(hook) and set(cr["output"]) == set(hook["output"])
    path = "/repos/%s/check-runs/%d" % (REPO, cr["id"])
    st, _, err = sim.api("PATCH", path, token=it, body={
        "output": {"title": "t", "summary": "s" * 65536}})
    assert st == 422 and "65535" in err["message"]
    st, _, err = sim.api("PATCH", path, token=it, body={
        "output": {"title": "t", "summary": "s", "text": "x" * 65536}})
    assert st == 422
    st, _, done = sim.api("PATCH", path, token=it, body={
        "conclusion": "success", "output": {"title": "2.0x", "summary": "s" * 65535}})
    assert st == 200 and done["status"] == "completed" and done["completed_at"]
    assert sim.repo_state(REPO)["check_runs"][str(cr["id"])]["conclusion"] == "success"
    # listed for the commit (any token may read): newest first, by name, latest or all
    st, _, cr2 = sim.api("POST", "/repos/%s/check-runs" % REPO, token=it, body={
        "name": "kernelbot", "head_sha": "a" * 40, "external_id": "check:7"})
    assert st == 201 and cr2["external_id"] == "check:7"
    st, h, listed = sim.api("GET", "/repos/%s/commits/%s/check-runs?check_name=kernelbot"
                            "&filter=all&per_page=1" % (REPO, "a" * 40))
    assert st == 200 and listed["total_count"] == 2 and 'rel="next"' in h["link"]
    assert [c["external_id"] for c in listed["check_runs"]] == ["check:7"]
    _, _, latest = sim.api("GET", "/repos/%s/commits/%s/check-runs" % (REPO, "a" * 40))
    assert [c["id"] for c in latest["check_runs"]] == [cr2["id"]]
    _, _, other = sim.api("GET", "/repos/%s/commits/%s/check-runs?check_name=x" % (REPO, "a" * 40))
    assert other == {"total_count": 0, "check_runs": []}
    _, _, c = sim.api("POST", "/repos/%s/issues/1/comments" % REPO, token=it, body={"body": "b"})
    assert c["user"]["login"] == "kernelbot[bot]" and c["user"]["type"] == "Bot"
    # scoped to its installation; expires after an hour
    sim.add_repo("elsewhere/repo", installation_id=2)
    assert sim.api("GET", "/repos/elsewhere/repo", token=it)[0] == 404
    sim.set_clock(3601)
    st, _, err = sim.api("GET", "/repos/" + REPO, token=it)
    assert st == 401 and err["message"] == "Bad credentials"


# --- faults ---

def test_fault_primary_rate_limit(sim):
    sim.fault("primary", path=r"^/repos/acme/ops/issues", method="GET", count=2, reset_in=30)
    for _ in range(2):
        st, h, body = sim.api("GET", "/repos/%s/issues" % REPO)
        assert st == 403 and h["x-ratelimit-remaining"] == "0"
        assert 20 < int(h["x-ratelimit-reset"]) - time.time() <= 31
        assert "rate limit exceeded" in body["message"]
    assert sim.api("GET", "/repos/%s/issues" % REPO)[0] == 200
    assert sim.faults() == []


@pytest.mark.parametrize("status", [403, 429])
def test_fault_secondary_rate_limit(sim, status):
    sim.fault("secondary", path="/comments$", method="POST", status=status, retry_after=7)
    assert sim.api("GET", "/repos/%s/issues/1/comments" % REPO)[0] == 200  # GET unaffected
    st, h, body = sim.api("POST", "/repos/%s/issues/1/comments" % REPO, {"body": "x"})
    assert st == status and h["retry-after"] == "7"
    assert body["message"].startswith("You have exceeded a secondary rate limit")
    assert sim.repo_state(REPO)["comments"] == {}       # refused before it happened
    assert sim.api("POST", "/repos/%s/issues/1/comments" % REPO, {"body": "x"})[0] == 201
    sim.fault("secondary", retry_after=None)
    st, h, _ = sim.api("GET", "/repos/" + REPO)
    assert st == 403 and "retry-after" not in h


@pytest.mark.parametrize("status", [500, 502, 503])
def test_fault_server_errors(sim, status):
    sim.fault("error", status=status)
    st, h, _ = sim.api("GET", "/repos/" + REPO)
    assert st == status
    assert sim.api("GET", "/repos/" + REPO)[0] == 200


def test_fault_after_applies_the_request_first(sim):
    sim.fault("error", path="/comments$", method="POST", status=502, after=True)
    assert sim.api("POST", "/repos/%s/issues/1/comments" % REPO, {"body": "x"})[0] == 502
    assert len(sim.repo_state(REPO)["comments"]) == 1   # the lost-response case


def test_fault_slow_after_answers_late(sim):
    """Handled at once, answered late: a client that gave up never heard
    that its comment was made (the retry that makes a second one)."""
    sim.fault("slow", path="/comments$", method="POST", delay=1.0, after=True)
    t = time.monotonic()
    with pytest.raises((TimeoutError, OSError)):
        sim.http("POST", "/repos/%s/issues/1/comments" % REPO, body={"body": "x"},
                 headers={"Authorization": "token " + TOKEN}, timeout=0.3)
    assert time.monotonic() - t < 0.9
    assert [c["body"] for c in sim.repo_state(REPO)["comments"].values()] == ["x"]
    assert [(e["fault"], e["status"]) for e in sim.requests()] == [("slow", 201)]


def test_fault_slow_malformed_drop(sim):
    sim.fault("slow", delay=0.4)
    t = time.monotonic()
    assert sim.api("GET", "/repos/" + REPO)[0] == 200
    assert time.monotonic() - t >= 0.4
    sim.fault("malformed")
    st, _, raw = sim.http("GET", "/repos/" + REPO, headers={"Authorization": "token " + TOKEN})
    assert st == 200
    with pytest.raises(ValueError):
        json.loads(raw)
    sim.fault("drop", count=2)
    for _ in range(2):
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            sim.api("GET", "/repos/" + REPO)
    assert sim.api("GET", "/repos/" + REPO)[0] == 200
    faults = [e["fault"] for e in sim.requests()]
    assert faults == ["slow", "malformed", "drop", "drop", None]
    assert [e["status"] for e in sim.requests()][2:4] == [0, 0]


def test_control_errors_and_reset(sim):
    with pytest.raises(SimControlError) as e:
        sim.fault("meteor")
    assert e.value.status == 422
    with pytest.raises(SimControlError):
        sim.set_permission(REPO, "x", "superuser")
    with pytest.raises(SimControlError) as e:
        sim.add_pull("acme/none")
    assert e.value.status == 404
    sim.reset()
    assert sim.state()["repos"] == {}
    assert sim.api("GET", "/user")[0] == 200        # tokens given at start survive


# --- persistence ---

def test_state_persists_across_restart(tmp_path):
    path = str(tmp_path / "state.json")
    s = GitHubSim(state_file=path).start()
    seed(s)
    st, _, c = s.api("POST", "/repos/%s/issues/1/comments" % REPO, {"body": "progress"})
    assert st == 201
    with open(path) as f:
        assert json.load(f)["repos"]["acme/ops"]["comments"][str(c["id"])]["body"] == "progress"
    s.stop()
    s2 = GitHubSim(state_file=path).start()
    try:
        _, _, cs = s2.api("GET", "/repos/%s/issues/1/comments" % REPO)
        assert [x["id"] for x in cs] == [c["id"]]
        st, _, c2 = s2.api("POST", "/repos/%s/issues/1/comments" % REPO, {"body": "more"})
        assert c2["id"] > c["id"]                      # ids keep counting
        assert s2.api("POST", "/repos/%s/pulls" % REPO,
                      {"title": "t", "head": "kernelbot/a", "base": "main"})[0] == 201
    finally:
        s2.stop()
    assert not [n for n in os.listdir(str(tmp_path)) if n.startswith(".github_sim.")]


def test_cli_prints_port_serves_and_stops_on_sigterm(tmp_path, app_keys):
    path = str(tmp_path / "state.json")
    p = subprocess.Popen([sys.executable, os.path.join(SIM_DIR, "github_sim.py"), "--port",
                          "0", "--state-file", path, "--token", "cli-token:botty",
                          "--app-id", "99", "--app-key-pub", app_keys[1]],
                         stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline().strip()
        assert line.startswith("listening http://127.0.0.1:")
        s = GitHubSim(url=line.split()[1])
        s.add_repo(REPO)
        st, _, me = s.api("GET", "/user", token="cli-token")
        assert st == 200 and me["login"] == "botty"
        s.comment(REPO, s.add_issues(REPO)[0], "alice", "kept")
        now = int(time.time())
        jwt = make_jwt(app_keys[0], {"iat": now - 60, "exp": now + 540, "iss": 99})
        st, _, app = s.api("GET", "/app", token=jwt, scheme="Bearer")
        assert st == 200 and app["id"] == 99
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(10) == 0
    with open(path) as f:
        assert len(json.load(f)["repos"]["acme/ops"]["comments"]) == 1


# --- replayed recordings ---

def test_recorded_exchange_replayed(sim):
    fixture("rest/get-repository.json")
    st, _, repo = sim.api("GET", "/repos/octokit-fixture-org/hello-world")
    assert st == 200 and repo["full_name"] == "octokit-fixture-org/hello-world"
    assert repo["url"].startswith(sim.url)
    assert sim.api("GET", "/repos/octokit-fixture-org/hello-world", token=None)[0] == 404


# --- webhooks ---

def test_hmac_test_vector():
    assert W.signature("It's a Secret to Everybody", b"Hello, World!") == \
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


class _Receiver(BaseHTTPRequestHandler):
    got = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Receiver.got.append((self.headers, body))
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


def test_labeled_payload_and_signed_delivery(sim):
    fx = fixture("webhooks/pull_request.labeled.json")
    p = sim.payload("pull_request", repo=REPO, number=1, label="optimize-kernel",
                    sender="alice")
    assert list(p) == list(fx)
    assert set(p["pull_request"]) == set(fx["pull_request"])
    assert p["action"] == "labeled" and p["number"] == 1
    assert p["label"]["name"] == "optimize-kernel" and p["sender"]["login"] == "alice"
    assert p["pull_request"]["head"]["sha"] == "a" * 40
    assert p["repository"]["full_name"] == REPO and p["installation"]["id"] == 1
    srv = HTTPServer(("127.0.0.1", 0), _Receiver)
    t = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    t.start()
    try:
        url = "http://127.0.0.1:%d/webhook" % srv.server_address[1]
        st, _, _ = GitHubSim.send_webhook(url, "pull_request", p, secret="s3cret")
        assert st == 202
        st, _, _ = W.deliver(url, "pull_request", p, "s3cret", sig="sha256=" + "0" * 64)
        assert st == 202
    finally:
        srv.shutdown()
        srv.server_close()
    (h1, b1), (h2, b2) = _Receiver.got[-2:]
    assert h1["X-GitHub-Event"] == "pull_request" and len(h1["X-GitHub-Delivery"]) == 36
    assert h1["X-Hub-Signature-256"] == W.signature("s3cret", b1)
    assert json.loads(b1)["pull_request"]["number"] == 1
    assert h2["X-Hub-Signature-256"] != W.signature("s3cret", b2)
    cid = sim.comment(REPO, 1, "alice", "/kernelbot stop")
    c = sim.payload("issue_comment", repo=REPO, number=1, comment_id=cid)
    assert c["comment"]["body"] == "/kernelbot stop" and c["sender"]["login"] == "alice"
    assert "pull_request" in c["issue"]
    un = sim.payload("pull_request", repo=REPO, number=1, action="unlabeled",
                     label="optimize-kernel", sender="alice")
    assert un["action"] == "unlabeled"


def test_webhook_cli_sign(tmp_path):
    f = tmp_path / "body"
    f.write_bytes(b"Hello, World!")
    out = subprocess.run([sys.executable, os.path.join(SIM_DIR, "github_sim_webhook.py"),
                          "sign", "--secret", "It's a Secret to Everybody", str(f)],
                         stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    assert out.endswith("e17") and out.startswith("sha256=757107ea")
