"""The bot end to end, driving the real binaries on the CPU backend.

GitHub is the simulator (tests/sim/github_sim.py, in this process), the git
remote a real smart-HTTP server (tests/gitserver/git-http-server.sh,
lighttpd + git-http-backend, private: the token is needed to fetch and to
push), and every job a real `kernelbot run` child on a tiny operator with
tuning kept small. Covered:

- a label from a writer: job, bot pull request with kernel, binding and
  evidence on kernelbot/pr-1/<op> against the labelled branch, body with
  the table and marker, one progress comment edited in place, commit
  status, labels;
- the daemon SIGKILLed while its `kernelbot run` child is busy: the child
  dies with it, a restart resumes the job, and there is still exactly one
  pull request and one progress comment;
- a label from someone without write access: no job, nothing posted;
- webhooks: a bad or missing signature refused with nothing stored, ping,
  a duplicate delivery ignored, `/kernelbot stop` from a writer cancelling
  a running job (its child killed);
- a signed `labeled` body replayed after the label was removed (and the
  Actions step with it): nothing starts, the label is checked on GitHub;
- a push during the job: the kernel is published as a draft that says the
  head moved and how to re-run, and so does the progress comment; that
  comment's first reply lost after the client's timeout: still one;
- the same commands read by polling the repository's comments (GitHub and
  the local forge): a reader's ignored, a writer's stop cancels and the
  still-labelled pull request is not started again, `/kernelbot run`
  re-runs, each command acted on once, a quiet repository one 304 a cycle;
- a time budget that ends mid-search: the best kernel so far is published
  and the pull request says the budget cut the search short;
- [bot] max_jobs = 2: two operators of one pull request searched at the
  same time, two pull requests, one progress comment; with [harness]
  devices = 0,1 each job on a device of its own, as its evidence says;
- the bot as a GitHub App: JWT, installation tokens (one expired mid-job
  and renewed, the push made with the new one), a check run with the
  summary and no commit status;
- `kernelbot action` with a real event payload: GITHUB_OUTPUT and the
  step summary;
- the local forge demo (examples/demo-bot.sh) end to end, and the Reproduce
  command of its pull request run on a clone of the bot's branch: the same
  verdict, and speedups within the noise band the body states.
"""

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

TOP = os.environ.get("KB_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
KB = os.environ.get("KB_BIN") or os.path.join(TOP, "build", "kernelbot")
sys.path.insert(0, os.path.join(TOP, "tests", "sim"))

import github_sim_webhook as W  # noqa: E402
from github_sim import GitHubSim  # noqa: E402

REPO = "acme/ops"
TOKEN = "ghp_e2eTok3n4kernelbot"
SECRET = "hook-secret-e2e-91"
OP = "ops/kb_relu.py"
SLUG = "kb_relu"
BRANCH = "kernelbot/pr-1/" + SLUG
MARKER = "<!-- kernelbot:progress pr=1 -->"
BOT_EMAIL = "kernelbot@example.com"


def _backend():
    try:
        out = subprocess.run(["git", "--exec-path"], capture_output=True, text=True)
    except OSError:
        return None
    path = os.path.join(out.stdout.strip(), "git-http-backend")
    return path if os.access(path, os.X_OK) else None


pytestmark = [
    pytest.mark.skipif(not os.access(KB, os.X_OK), reason="no kernelbot binary at " + KB),
    pytest.mark.skipif(not os.path.isdir(W.default_fixtures_dir()),
                       reason="github fixtures not found"),
]
needs_gitserver = pytest.mark.skipif(
    not os.access("/usr/sbin/lighttpd", os.X_OK) or _backend() is None,
    reason="lighttpd or git-http-backend missing")


def git(*args, cwd=None, check=True):
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", GIT_CONFIG_NOSYSTEM="1",
               GIT_AUTHOR_NAME="Alice", GIT_AUTHOR_EMAIL="alice@example.com",
               GIT_COMMITTER_NAME="Alice", GIT_COMMITTER_EMAIL="alice@example.com",
               HOME=cwd or "/nonexistent")
    p = subprocess.run(["git", "-c", "init.defaultBranch=main", "-c", "credential.helper=",
                        "-c", "commit.gpgsign=false", *args], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=60)
    if check and p.returncode:
        raise AssertionError("git %s: %s" % (" ".join(args), p.stderr))
    return p.stdout.strip()


def wait_for(what, pred, timeout=120, interval=0.2):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    raise AssertionError("timed out waiting for " + what)


APP_ID = 4242


def app_keys(tmp):
    """An RSA key pair for the GitHub App (openssl): (private, public) paths."""
    key, pub = str(tmp / "app.pem"), str(tmp / "app.pub")
    subprocess.run(["openssl", "genrsa", "-out", key, "2048"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run(["openssl", "rsa", "-in", key, "-pubout", "-out", pub], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return key, pub


class World:
    """A git server with acme/ops, the simulator seeded with the pull request.

    extra_ops: more operators in the pull request, (file in tests/operators,
    path in the repository); files: more files, {path: text}. app: (private key, public key) paths: the
    simulator is a GitHub App's world, and the git server takes the latest
    installation token the simulator handed out (its user file is read on
    every request), so a stale token fails a push as it would on GitHub.
    """

    def __init__(self, tmp, labeled_by="alice", private=True, extra_ops=(), app=None,
                 files=None):
        self.tmp = tmp
        self.work = str(tmp / "work")
        os.makedirs(self.work)
        git("init", "-q", cwd=self.work)
        with open(os.path.join(self.work, "README.md"), "w") as f:
            f.write("# ops\n")
        git("add", "-A", cwd=self.work)
        git("commit", "-q", "-m", "start", cwd=self.work)
        self.main_sha = git("rev-parse", "HEAD", cwd=self.work)
        git("checkout", "-q", "-b", "feature", cwd=self.work)
        os.makedirs(os.path.join(self.work, "ops"))
        with open(os.path.join(TOP, "tests", "operators", "kb_relu.py")) as f:
            src = f.read()
        with open(os.path.join(self.work, OP), "w") as f:
            f.write(src)
        with open(os.path.join(self.work, "ops", "notes.py"), "w") as f:
            f.write("# not an operator\n")
        extra = {}
        for src, dst in extra_ops:
            with open(os.path.join(TOP, "tests", "operators", src)) as f:
                extra[dst] = f.read()
        extra.update(files or {})
        for dst, text in extra.items():
            os.makedirs(os.path.dirname(os.path.join(self.work, dst)), exist_ok=True)
            with open(os.path.join(self.work, dst), "w") as f:
                f.write(text)
        git("add", "-A", cwd=self.work)
        git("commit", "-q", "-m", "add relu", cwd=self.work)
        self.head_sha = git("rev-parse", "HEAD", cwd=self.work)

        self.srv = str(tmp / "srv")
        self.bare = os.path.join(self.srv, "acme", "ops.git")
        os.makedirs(os.path.dirname(self.bare))
        git("init", "-q", "--bare", self.bare)
        git("push", "-q", self.bare, "main", "feature", "feature:refs/pull/1/head",
            cwd=self.work)
        self.gitsrv = subprocess.Popen(
            ["sh", os.path.join(TOP, "tests", "gitserver", "git-http-server.sh"), "-r",
             self.srv, "-t", TOKEN, "-d", str(tmp / "gitconf")] + (["-p"] if private else []),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True)
        self.git_url = self.gitsrv.stdout.readline().strip()
        assert self.git_url.startswith("http://127.0.0.1:"), self.gitsrv.stderr.read()

        self.app = app
        if app:
            self.sim = GitHubSim(tokens=(TOKEN + ":kernelbot",), app_id=APP_ID,
                                 app_key_pub=app[1]).start()
            users = str(tmp / "gitconf" / "users")

            def accept(token, expires_at):
                with open(users + ".tmp", "w") as f:
                    f.write("x-access-token:%s\n" % token)
                os.replace(users + ".tmp", users)
            self.sim.on_installation_token(accept)
        else:
            self.sim = GitHubSim(tokens=(TOKEN + ":kernelbot",)).start()
        self.sim.add_repo(REPO, collaborators={"alice": "write", "mallory": "read"})
        self.sim.add_pull(REPO, number=1, title="Add relu", user="alice",
                          head={"ref": "feature", "sha": self.head_sha},
                          base={"ref": "main"},
                          files=[OP, "ops/notes.py"] + list(extra),
                          labels=["optimize-kernel"] if labeled_by else [],
                          labeled_by=labeled_by)
        self.state = str(tmp / "state")
        self.daemons = []

    def config(self, name="bot.ini", poll=1, webhook=False, token=True, slow=False,
               budget=600, max_jobs=1, points=2, build_jobs=0, wire_min_speedup=0,
               devices=None):
        """devices: [harness] devices, leased to the jobs; the backend is then auto
        (the cpu backend leases nothing), which is cpu on a machine without a GPU."""
        path = str(self.tmp / name)
        with open(path, "w") as f:
            f.write("[core]\nstate_dir = %s\nlog_level = debug\n" % self.state)
            f.write("[harness]\npython = %s\nbackend = %s\nseeds = 1\nmax_configs = 2\n"
                    "timeout_s = 120\n" % (sys.executable, "auto" if devices else "cpu"))
            if devices:
                f.write("devices = %s\n" % devices)
            if build_jobs:
                f.write("build_jobs = %d\n" % build_jobs)
            f.write("[bench]\nwarmup = 1\nmin_time_ms = %d\nmax_reps = %d\nbaselines = eager\n"
                    % ((1500, 100000) if slow else (5, 20)))
            f.write("[templates]\nmax_points = %d\nexhaustive_limit = %d\nrefine_rounds = 0\n"
                    % (points, points))
            if self.app:
                f.write("[github]\napi_url = %s\napp_id = %d\nprivate_key_file = %s\n"
                        "webhook_secret = ${KB_E2E_SECRET}\n" % (self.sim.url, APP_ID, self.app[0]))
            else:
                f.write("[github]\napi_url = %s\ntoken = %s\nwebhook_secret = ${KB_E2E_SECRET}\n"
                        % (self.sim.url, "${KB_E2E_TOKEN}" if token else ""))
            f.write("[bot]\nforge = github\nrepositories = %s\npoll_interval_s = %d\n"
                    "progress_interval_s = 0\nmin_speedup = 0\ngit_url = %s\n"
                    "author_email = %s\ntime_budget_s = %d\nmax_jobs = %d\n"
                    "wire_min_speedup = %g\n"
                    % (REPO, poll, self.git_url, BOT_EMAIL, budget, max_jobs, wire_min_speedup))
            if webhook:
                f.write("webhook_listen = 127.0.0.1:0\n")
        return path

    def env(self):
        return dict(os.environ, KB_E2E_TOKEN=TOKEN, KB_E2E_SECRET=SECRET)

    def daemon(self, cfg, *args):
        log = open(str(self.tmp / ("daemon%d.log" % len(self.daemons))), "w")
        p = subprocess.Popen([KB, "daemon", "-c", cfg, *args], stdout=log,
                             stderr=subprocess.STDOUT, env=self.env(), start_new_session=True)
        log.close()
        self.daemons.append(p)
        return p

    def log(self, i=-1):
        with open(str(self.tmp / ("daemon%d.log" % (len(self.daemons) + i if i < 0 else i)))) as f:
            return f.read()

    def db(self, sql, *args):
        path = os.path.join(self.state, "kernelbot.db")
        if not os.path.exists(path):
            return []
        con = sqlite3.connect(path, timeout=10)
        try:
            return con.execute(sql, args).fetchall()
        except sqlite3.OperationalError as e:
            if "no such table" in str(e):   # not migrated yet
                return []
            raise
        finally:
            con.close()

    def close(self):
        for p in self.daemons:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        self.sim.stop()
        if self.gitsrv.poll() is None:
            self.gitsrv.send_signal(signal.SIGTERM)
            self.gitsrv.wait(10)
        self.gitsrv.stdout.close()
        self.gitsrv.stderr.close()

    # --- what the simulator holds ---

    def repo_state(self):
        return self.sim.repo_state(REPO)

    def bot_prs(self):
        st = self.repo_state()
        return [it for it in st["issues"].values()
                if it["pr"] and it["pr"]["head"]["ref"].startswith("kernelbot/")]

    def progress_comments(self):
        return [c for c in self.repo_state()["comments"].values() if MARKER in c["body"]]


@pytest.fixture
def world(tmp_path):
    w = World(tmp_path)
    yield w
    w.close()


def children_of(pid):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                out.append(int(d))
        except (OSError, IndexError, ValueError):
            pass
    return out


def alive(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("State:"):
                    return "Z" not in line.split()[1]
    except OSError:
        return False
    return True


def procs_using(path):
    """Live processes whose command line names path (the search and its harness workers)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if path in cmd and alive(int(d)):
            out.append(cmd)
    return out


def check_published(w):
    """The one bot pull request and what it holds."""
    prs = w.bot_prs()
    assert len(prs) == 1, [p["pr"]["head"]["ref"] for p in prs]
    pr = prs[0]
    assert pr["pr"]["head"]["ref"] == BRANCH
    assert pr["pr"]["base"]["ref"] == "feature"   # same repository: onto the labelled branch
    assert re.match(r"kernelbot: (slower than eager on \d+ of \d+ configs: )?kb_relu",
                    pr["title"]), pr["title"]
    assert "<!-- kernelbot:pr " in pr["body"]
    assert "| --- |" in pr["body"] or "|---" in pr["body"] or "| ---:" in pr["body"]
    # the branch on the real git server: kernel, binding, evidence on the labelled head
    files = git("--git-dir", w.bare, "ls-tree", "-r", "--name-only", BRANCH).split("\n")
    for name in ("kernel.cpp", "binding.py", "evidence.json", "kernel.json", "report.md"):
        assert "kernelbot/%s/%s" % (SLUG, name) in files, files
    assert OP in files
    assert git("--git-dir", w.bare, "rev-parse", BRANCH + "^") == w.head_sha
    assert git("--git-dir", w.bare, "log", "-1", "--format=%ae %ce", BRANCH) == \
        "%s %s" % (BOT_EMAIL, BOT_EMAIL)
    ev = json.loads(git("--git-dir", w.bare, "show", "%s:kernelbot/%s/evidence.json"
                        % (BRANCH, SLUG)))
    assert ev["verdict"] == "verified"
    return pr


def check_progress_and_labels(w, state="done"):
    comments = w.progress_comments()
    assert len(comments) == 1, "progress comments: %d" % len(comments)
    cid = comments[0]["id"]
    edits = [r for r in w.sim.requests() if r["method"] == "PATCH" and
             r["path"] == "/repos/%s/issues/comments/%s" % (REPO, cid)]
    assert edits, "the progress comment was never edited"
    posts = [r for r in w.sim.requests() if r["method"] == "POST" and
             r["path"] == "/repos/%s/issues/1/comments" % REPO]
    assert len(posts) == 1
    labels = w.repo_state()["issues"]["1"]["labels"]
    assert "kernelbot:%s" % state in labels, labels
    assert "kernelbot:running" not in labels, labels
    return comments[0]


@needs_gitserver
def test_label_by_writer_opens_pull_request(world):
    p = world.daemon(world.config(), "--until-idle")
    assert p.wait(240) == 0, world.log()
    pr = check_published(world)
    comment = check_progress_and_labels(world)
    assert "done" in comment["body"]
    assert "#%d" % pr["number"] in comment["body"]
    statuses = [s for s in world.repo_state()["statuses"]
                if s["sha"] == world.head_sha and s["context"] == "kernelbot / " + SLUG]
    assert [s["state"] for s in statuses][0] == "pending"
    assert statuses[-1]["state"] == "success", statuses
    jobs = world.db("SELECT operator, state, attempts FROM jobs")
    assert jobs == [(OP, "done", 0)]          # ops/notes.py is no operator
    # a push after labelling does not re-run it; later looks change nothing:
    # only reads, and an idle poll is one 304
    world.sim.push(REPO, 1, "f" * 40)
    before = len(world.sim.requests())
    p = world.daemon(world.config(), "--cycles", "2")
    assert p.wait(60) == 0, world.log()
    reqs = world.sim.requests()[before:]
    assert all(r["method"] == "GET" for r in reqs), reqs
    assert (reqs[-1]["status"], reqs[-1]["path"]) == (304, "/repos/%s/issues" % REPO), reqs
    assert len(world.bot_prs()) == 1
    assert world.db("SELECT count(*) FROM jobs") == [(1,)]


@needs_gitserver
def test_runner_killed_mid_job_resumes(world):
    cfg = world.config()
    p = world.daemon(cfg)
    wait_for("the search to start", lambda: world.db(
        "SELECT 1 FROM jobs WHERE stage = 'search'") and
        os.path.exists(os.path.join(world.state, "jobs", "1", "progress.json")))
    kids = wait_for("the run child", lambda: children_of(p.pid), timeout=30)
    time.sleep(1.0)
    assert p.poll() is None
    p.kill()                                   # SIGKILL: no cleanup at all
    p.wait(10)
    # the kernel tells the child (PR_SET_PDEATHSIG); it stops its own work
    wait_for("the orphaned search to stop", lambda: not any(alive(k) for k in kids), timeout=30)
    # and it took its harness workers with it
    wait_for("its workers to stop", lambda: not procs_using(world.state), timeout=30)
    assert world.db("SELECT state FROM jobs") == [("running",)]

    p = world.daemon(cfg, "--until-idle")
    assert p.wait(240) == 0, world.log()
    assert "queued again" in world.log()
    check_published(world)
    check_progress_and_labels(world)
    assert world.db("SELECT state, attempts FROM jobs") == [("done", 1)]
    opened = [r for r in world.sim.requests()
              if r["method"] == "POST" and r["path"] == "/repos/%s/pulls" % REPO]
    assert len(opened) == 1


def test_label_without_write_access_ignored(tmp_path):
    w = World(tmp_path, labeled_by="mallory", private=False)
    try:
        p = w.daemon(w.config(), "--cycles", "2")
        assert p.wait(60) == 0, w.log()
        assert "'mallory' has read access, not write; ignored" in w.log()
        assert w.db("SELECT count(*) FROM jobs") == [(0,)]
        assert w.db("SELECT count(*) FROM triggers") == [(0,)]
        st = w.repo_state()
        assert st["comments"] == {}
        assert not w.bot_prs()
        assert st["issues"]["1"]["labels"] == ["optimize-kernel"]
        # nothing was written to GitHub at all
        assert not [r for r in w.sim.requests() if r["method"] != "GET"]
    finally:
        w.close()


@needs_gitserver
def test_webhooks_signature_duplicates_and_stop(tmp_path):
    w = World(tmp_path, labeled_by=None)
    try:
        p = w.daemon(w.config(poll=0, webhook=True, slow=True))
        info = wait_for("daemon.json", lambda: os.path.exists(
            os.path.join(w.state, "daemon.json")) and json.load(
            open(os.path.join(w.state, "daemon.json"))), timeout=30)
        url = "http://127.0.0.1:%d/webhook" % info["webhook_port"]

        w.sim.label(REPO, 1, ["optimize-kernel"], "mallory")
        ev = w.sim.payload("pull_request", repo=REPO, number=1, action="labeled",
                           label="optimize-kernel", sender="mallory")
        # bad signature, no signature, a signature with another secret: 401, nothing stored
        st, _, _ = W.deliver(url, "pull_request", ev, SECRET, delivery="bad-1",
                             sig="sha256=" + "0" * 64)
        assert st == 401
        st, _, _ = W.deliver(url, "pull_request", ev, None, delivery="bad-2")
        assert st == 401
        st, _, _ = W.deliver(url, "pull_request", ev, "not-the-secret", delivery="bad-3")
        assert st == 401
        assert w.db("SELECT count(*) FROM webhook_deliveries") == [(0,)]
        assert w.db("SELECT count(*) FROM webhook_events") == [(0,)]
        st, _, body = W.deliver(url, "ping", w.sim.payload("ping", repo=REPO), SECRET)
        assert st == 200 and b"pong" in body

        # a reader's label: stored once, acted on never
        st, _, _ = W.deliver(url, "pull_request", ev, SECRET, delivery="d-1")
        assert st == 202
        st, _, body = W.deliver(url, "pull_request", ev, SECRET, delivery="d-1")
        assert st == 200 and b"duplicate" in body
        assert w.db("SELECT count(*) FROM webhook_events") == [(1,)]
        wait_for("the event to be handled", lambda: w.db(
            "SELECT count(*) FROM webhook_events WHERE handled_at IS NULL") == [(0,)])
        assert w.db("SELECT count(*) FROM jobs") == [(0,)]

        # a writer's label starts the job; '/kernelbot stop' from a writer cancels it
        w.sim.label(REPO, 1, ["optimize-kernel"], "alice")
        ev = w.sim.payload("pull_request", repo=REPO, number=1, action="labeled",
                           label="optimize-kernel", sender="alice")
        assert W.deliver(url, "pull_request", ev, SECRET, delivery="d-2")[0] == 202
        wait_for("the search to start", lambda: w.db(
            "SELECT 1 FROM jobs WHERE stage = 'search'"))
        kids = wait_for("the run child", lambda: children_of(p.pid), timeout=30)
        cid = w.sim.comment(REPO, 1, "mallory", "/kernelbot stop")
        ev = w.sim.payload("issue_comment", repo=REPO, number=1, comment_id=cid)
        assert W.deliver(url, "issue_comment", ev, SECRET, delivery="d-3")[0] == 202
        wait_for("the reader's stop to be handled", lambda: w.db(
            "SELECT count(*) FROM webhook_events WHERE handled_at IS NULL") == [(0,)])
        assert w.db("SELECT state FROM jobs") == [("running",)]
        cid = w.sim.comment(REPO, 1, "alice", "/kernelbot stop")
        ev = w.sim.payload("issue_comment", repo=REPO, number=1, comment_id=cid)
        assert W.deliver(url, "issue_comment", ev, SECRET, delivery="d-4")[0] == 202
        wait_for("the job to be cancelled", lambda: w.db(
            "SELECT state FROM jobs") == [("cancelled",)], timeout=60)
        wait_for("the search to stop", lambda: not any(alive(k) for k in kids), timeout=30)
        wait_for("its workers to stop", lambda: not procs_using(w.state), timeout=30)
        assert w.db("SELECT state FROM triggers") == [("cancelled",)]
        comments = w.progress_comments()
        assert len(comments) == 1 and "cancelled" in comments[0]["body"]
        assert "kernelbot:running" not in w.repo_state()["issues"]["1"]["labels"]
        assert not w.bot_prs()

        # '/kernelbot run' re-runs on the current head (a push since): a new trigger
        w.sim.push(REPO, 1, w.head_sha)   # same commit: the server has it
        cid = w.sim.comment(REPO, 1, "alice", "/kernelbot run")
        ev = w.sim.payload("issue_comment", repo=REPO, number=1, comment_id=cid)
        assert W.deliver(url, "issue_comment", ev, SECRET, delivery="d-5")[0] == 202
        wait_for("the re-run to start", lambda: w.db(
            "SELECT state, stage FROM jobs") == [("running", "search")], timeout=60)
        assert w.db("SELECT state, source, actor FROM triggers ORDER BY id") == [
            ("cancelled", "webhook", "alice"), ("active", "command", "alice")]
        kids = wait_for("the run child", lambda: children_of(p.pid), timeout=30)
        # SIGTERM: the child stops, the daemon exits 0, the job waits for the next start
        p.send_signal(signal.SIGTERM)
        assert p.wait(30) == 0
        assert not any(alive(k) for k in kids)
        assert w.db("SELECT state FROM jobs") == [("running",)]
        assert not os.path.exists(os.path.join(w.state, "daemon.json"))
        assert "stopping (signal 15)" in w.log()
    finally:
        w.close()


@needs_gitserver
def test_replayed_label_event_after_removal_starts_nothing(tmp_path):
    """A signed `labeled` body delivered again under a new delivery id after
    the label was removed (or an Actions run that starts after it): the
    sender still has write access, but the label is not on the pull request
    as the API shows it, so nothing starts."""
    w = World(tmp_path)
    try:
        p = w.daemon(w.config(poll=0, webhook=True))
        info = wait_for("daemon.json", lambda: os.path.exists(
            os.path.join(w.state, "daemon.json")) and json.load(
            open(os.path.join(w.state, "daemon.json"))), timeout=30)
        url = "http://127.0.0.1:%d/webhook" % info["webhook_port"]
        ev = w.sim.payload("pull_request", repo=REPO, number=1, action="labeled",
                           label="optimize-kernel", sender="alice")
        w.sim.unlabel(REPO, 1, "optimize-kernel", "alice")
        assert W.deliver(url, "pull_request", ev, SECRET, delivery="replayed-1")[0] == 202
        wait_for("the event to be handled", lambda: w.db(
            "SELECT count(*) FROM webhook_events WHERE handled_at IS NULL") == [(0,)])
        p.send_signal(signal.SIGTERM)
        assert p.wait(30) == 0, w.log()
        assert "label 'optimize-kernel' is not on it" in w.log(), w.log()
        assert w.db("SELECT count(*) FROM triggers") == [(0,)]
        assert w.db("SELECT count(*) FROM jobs") == [(0,)]
        # the Actions step with that event, run after the removal: nothing either
        event = w.tmp / "event.json"
        event.write_text(json.dumps(ev))
        out, summary = w.tmp / "output", w.tmp / "summary.md"
        env = dict(w.env(), GITHUB_EVENT_PATH=str(event), GITHUB_REPOSITORY=REPO,
                   GITHUB_API_URL=w.sim.url, GITHUB_TOKEN=TOKEN,
                   GITHUB_OUTPUT=str(out), GITHUB_STEP_SUMMARY=str(summary))
        a = subprocess.run([KB, "action", "-c", w.config(name="action.ini", token=False)],
                           env=env, capture_output=True, text=True, timeout=120)
        assert a.returncode == 0, a.stdout + a.stderr
        assert "is not on it" in a.stderr + a.stdout
        assert "label is no longer on it" in summary.read_text()
        assert w.db("SELECT count(*) FROM triggers") == [(0,)]
        # nothing was written to GitHub
        assert not [r for r in w.sim.requests() if r["method"] != "GET"]
        assert w.repo_state()["comments"] == {} and not w.bot_prs()
    finally:
        w.close()


@needs_gitserver
def test_push_during_job_and_a_lost_reply(world):
    """A push to the labelled pull request while its job searches: the
    kernel, verified at the pinned sha, is published as a draft whose body
    says the head moved and how to re-run; so does the progress comment.
    And the progress comment's first POST is answered after the client's
    timeout: the retry finds it by its marker, so there is still one."""
    w = world
    cfg = w.config(slow=True)
    with open(cfg, "a") as f:
        f.write("[github]\ntimeout_s = 1\n")
    w.sim.fault("slow", path="/issues/1/comments$", method="POST", delay=2.5, after=True)
    p = w.daemon(cfg, "--until-idle")
    wait_for("the search to start", lambda: w.db("SELECT 1 FROM jobs WHERE stage = 'search'"))
    with open(os.path.join(w.work, OP), "a") as f:
        f.write("\n# tweaked after labelling\n")
    git("commit", "-q", "-am", "tweak relu", cwd=w.work)
    moved = git("rev-parse", "HEAD", cwd=w.work)
    git("push", "-q", w.bare, "feature", "feature:refs/pull/1/head", cwd=w.work)
    w.sim.push(REPO, 1, moved)
    assert p.wait(240) == 0, w.log()
    assert w.db("SELECT state FROM jobs") == [("done",)], w.log()
    pr = check_published(w)      # on the pinned head, not the new one
    assert pr["pr"]["draft"] is True
    body = pr["body"]
    assert body.startswith("> [!WARNING]"), body[:300]
    assert w.head_sha[:12] in body and moved[:12] in body
    assert "`/kernelbot run`" in body
    # one progress comment although its first POST's reply was lost; it says it too
    comment = check_progress_and_labels(w)
    assert "The head moved to `%s`" % moved[:12] in comment["body"], comment["body"]
    assert "draft" in comment["body"] and "/kernelbot run" in comment["body"]
    assert "the reply was lost, but it was made" in w.log()
    assert [r["fault"] for r in w.sim.requests() if r["method"] == "POST" and
            r["path"] == "/repos/%s/issues/1/comments" % REPO] == ["slow"]


@needs_gitserver
def test_polled_slash_commands(world):
    """No webhook: the daemon reads `/kernelbot stop|run` by polling the
    repository's comments, conditionally, only while something may listen."""
    w = world
    p = w.daemon(w.config(poll=1, slow=True))
    wait_for("the search to start", lambda: w.db("SELECT 1 FROM jobs WHERE stage = 'search'"))
    kids = wait_for("the run child", lambda: children_of(p.pid), timeout=30)
    # a reader's stop: read, checked, ignored
    w.sim.comment(REPO, 1, "mallory", "/kernelbot stop")
    wait_for("the reader's stop to be read", lambda: "'/kernelbot stop' from 'mallory'"
             in w.log(), timeout=30)
    wait_for("it to be handled", lambda: w.db(
        "SELECT count(*) FROM webhook_events WHERE handled_at IS NULL") == [(0,)])
    assert w.db("SELECT state FROM jobs") == [("running",)]
    # a writer's stop cancels the job and kills its search
    w.sim.comment(REPO, 1, "alice", "/kernelbot stop\nplease")
    wait_for("the job to be cancelled", lambda: w.db(
        "SELECT state FROM jobs") == [("cancelled",)], timeout=60)
    wait_for("the search to stop", lambda: not any(alive(k) for k in kids), timeout=30)
    assert w.db("SELECT state, source, actor FROM triggers") == [("cancelled", "poll", "alice")]
    # the label is still on: later polls must not start it again
    time.sleep(3.5)
    assert w.db("SELECT count(*) FROM triggers") == [(1,)]
    assert w.db("SELECT state FROM jobs") == [("cancelled",)]
    comments = w.progress_comments()
    assert len(comments) == 1 and "cancelled" in comments[0]["body"]
    # the comments were read with since= and conditionally; a quiet repository stays a 304
    reads = [r for r in w.sim.requests() if r["path"] == "/repos/%s/issues/comments" % REPO]
    assert reads and all("since=" in r["query"] and "sort=updated" in r["query"] for r in reads)
    before = len(w.sim.requests())
    time.sleep(2.5)
    quiet = w.sim.requests()[before:]
    assert quiet and all(r["status"] == 304 and r["path"] == "/repos/%s/issues" % REPO
                         for r in quiet), [(r["path"], r["status"]) for r in quiet]
    # '/kernelbot run' from a writer re-runs it
    w.sim.comment(REPO, 1, "alice", "/kernelbot run")
    wait_for("the re-run to start", lambda: w.db(
        "SELECT state, stage FROM jobs") == [("running", "search")], timeout=60)
    assert w.db("SELECT state, source, actor FROM triggers ORDER BY id") == [
        ("cancelled", "poll", "alice"), ("active", "command", "alice")]
    # each command acted on once, however many polls saw it
    assert w.log().count("'/kernelbot stop' from 'alice'") == 1
    assert w.log().count("'/kernelbot run' from 'alice'") == 1
    p.send_signal(signal.SIGTERM)
    assert p.wait(30) == 0
    assert w.db("SELECT state FROM jobs") == [("running",)]
    assert len(w.progress_comments()) == 1


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@needs_gitserver
def test_tiny_budget_publishes_the_best_so_far(world):
    """A budget that ends mid-search: the child stops trying points, gives
    its best one the final check, and the bot opens the pull request, which
    says the budget cut the search short."""
    w = world
    for bad in ("0", "-3", "soon"):
        p = subprocess.run([KB, "run", "--time-budget", bad, os.path.join(TOP, "tests",
                            "operators", "kb_relu.py")], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 2 and "--time-budget '%s'" % bad in p.stderr, p.stderr
    # six points in chunks of two: the budget (1 s) ends after the first chunk
    p = w.daemon(w.config(budget=1, points=6, build_jobs=2), "--until-idle")
    assert p.wait(240) == 0, w.log()
    assert w.db("SELECT state FROM jobs") == [("done",)]
    pr = check_published(w)
    assert "The time budget (1s) cut the search short" in pr["body"], pr["body"]
    kj = json.loads(git("--git-dir", w.bare, "show", "%s:kernelbot/%s/kernel.json"
                        % (BRANCH, SLUG)))
    assert kj["tuning"]["cut_short"] is True
    assert 1 <= kj["tuning"]["points_tried"] < kj["template"]["space_size"]
    assert kj["verdict"] == "verified"
    report = git("--git-dir", w.bare, "show", "%s:kernelbot/%s/report.md" % (BRANCH, SLUG))
    assert "time budget cut the search short" in report
    with open(os.path.join(w.state, "jobs", "1", "run.log")) as f:
        run_log = f.read()
    assert "time budget reached" in run_log and "[final check] verified" in run_log
    assert "--time-budget 1 " in w.log() or "time budget" in run_log
    comment = check_progress_and_labels(w)
    assert "time budget" in comment["body"]


@needs_gitserver
def test_two_jobs_at_once(tmp_path):
    """[bot] max_jobs = 2 and two operators in one labelled pull request:
    both searches run at the same time, both pull requests open, one
    progress comment. [harness] devices = 0,1: each job leases a device of
    its own (devices_per_job auto: 2 / 2), its children get it (run.ini,
    KB_DEVICE_LEASE, which the evidence records as an exclusive lease)."""
    w = World(tmp_path, extra_ops=[("kb_softmax.py", "ops/kb_softmax.py")])
    try:
        p = w.daemon(w.config(max_jobs=2, devices="0,1"), "--until-idle")
        most, seen_both = 0, None
        end = time.time() + 300
        while p.poll() is None and time.time() < end:
            runs = [k for k in children_of(p.pid)
                    if alive(k) and " run " in cmdline(k) and "--progress-file" in cmdline(k)]
            if len(runs) >= 2 and seen_both is None:
                seen_both = sorted(cmdline(k).split()[-1] for k in runs)
            most = max(most, len(runs))
            time.sleep(0.05)
        assert p.wait(10) == 0, w.log()
        assert most == 2, "never two searches at once (most %d)" % most
        assert [os.path.basename(x) for x in seen_both] == ["kb_relu.py", "kb_softmax.py"]
        assert sorted(w.db("SELECT operator, state FROM jobs")) == [
            (OP, "done"), ("ops/kb_softmax.py", "done")]
        prs = w.bot_prs()
        assert sorted(pr["pr"]["head"]["ref"] for pr in prs) == [
            "kernelbot/pr-1/kb_relu", "kernelbot/pr-1/kb_softmax"]
        assert all(pr["pr"]["base"]["ref"] == "feature" for pr in prs)
        for slug in ("kb_relu", "kb_softmax"):
            files = git("--git-dir", w.bare, "ls-tree", "-r", "--name-only",
                        "kernelbot/pr-1/" + slug).split("\n")
            assert "kernelbot/%s/evidence.json" % slug in files
        # two devices, one each: the log, the child's config and its evidence agree
        leased = dict(re.findall(r"job (\d+): devices (\S+), its own until it ends", w.log()))
        assert sorted(leased.values()) == ["0", "1"], w.log()
        for job_id, op in w.db("SELECT id, operator FROM jobs"):
            dev = leased[str(job_id)]
            with open(os.path.join(w.state, "jobs", str(job_id), "run.ini")) as f:
                assert re.search(r"^devices = %s$" % dev, f.read(), re.M)
            slug = os.path.basename(op)[:-3]
            ev = json.loads(git("--git-dir", w.bare, "show", "kernelbot/pr-1/%s:kernelbot/%s/"
                                "evidence.json" % (slug, slug)))
            assert ev["kernelbot"]["placement"] == {
                "device": "cpu", "fresh": True, "shared_with": [],
                "lease": {"devices": [dev], "exclusive": True}}, ev["kernelbot"]
        opened = [r for r in w.sim.requests()
                  if r["method"] == "POST" and r["path"] == "/repos/%s/pulls" % REPO]
        assert len(opened) == 2
        # one progress comment for both jobs, no review posted twice
        comment = check_progress_and_labels(w)
        assert "kb_relu" in comment["body"] and "kb_softmax" in comment["body"]
        reviews = [rv["body"] for rv in w.repo_state()["reviews"].values()]
        assert len(reviews) == len(set(reviews))
        statuses = w.repo_state()["statuses"]
        for slug in ("kb_relu", "kb_softmax"):
            mine = [st["state"] for st in statuses if st["context"] == "kernelbot / " + slug]
            assert mine and mine[-1] == "success", statuses
    finally:
        w.close()


@needs_gitserver
def test_github_app_check_run_and_token_renewal(tmp_path):
    """The bot as a GitHub App: RS256 JWT -> installation token -> a check
    run (never a commit status) with the summary; the simulator stops taking
    the installation token mid-job and the bot renews it (its pushes use the
    new one)."""
    w = World(tmp_path, app=app_keys(tmp_path))
    try:
        p = w.daemon(w.config())
        wait_for("the search to start", lambda: w.db(
            "SELECT 1 FROM jobs WHERE stage = 'search'"), timeout=120)
        # the next poll (a second away) is refused and renews the token, long
        # before the search ends and the branch is pushed
        assert w.sim.expire_tokens() >= 1
        wait_for("the job to finish", lambda: w.db("SELECT state FROM jobs") == [("done",)],
                 timeout=180)
        p.send_signal(signal.SIGTERM)
        assert p.wait(30) == 0, w.log()
        check_published(w)
        st = w.repo_state()
        assert st["statuses"] == []
        runs = list(st["check_runs"].values())
        assert len(runs) == 1, runs                     # created once, then updated
        cr = runs[0]
        assert cr["name"] == "kernelbot / " + SLUG and cr["head_sha"] == w.head_sha
        assert cr["status"] == "completed" and cr["conclusion"] in ("success", "neutral")
        out = cr["output"]
        assert out["title"].startswith("kb_relu"), out
        assert out["summary"].startswith("**kernelbot** finished `ops/kb_relu.py`"), out
        assert "pull request" in out["summary"] and "| " in out["summary"], out
        reqs = w.sim.requests()
        made = [r for r in reqs if r["method"] == "POST" and r["path"] == "/repos/%s/check-runs" % REPO]
        edits = [r for r in reqs if r["method"] == "PATCH" and "/check-runs/" in r["path"]]
        assert len(made) == 1 and edits
        # every call with App credentials: the JWT for /app, tokens elsewhere, never the PAT
        kinds = {r.get("token_kind") for r in reqs if r["status"] != 401}
        assert kinds == {"app", "installation"}, kinds
        assert all(r.get("token_kind") == "app" for r in reqs if r["path"].startswith("/app"))
        tokens = [r for r in reqs if r["path"] == "/app/installations/1/access_tokens"]
        assert len(tokens) >= 2 and all(r["status"] == 201 for r in tokens)
        assert any(r["status"] == 401 for r in reqs)    # the expired token, refused once
        comments = w.progress_comments()
        assert len(comments) == 1 and comments[0]["user"] == "kernelbot[bot]"
    finally:
        w.close()


@needs_gitserver
def test_action_entry_point(world):
    event = world.tmp / "event.json"
    event.write_text(json.dumps(world.sim.payload(
        "pull_request", repo=REPO, number=1, action="labeled", label="optimize-kernel",
        sender="alice")))
    out, summary = world.tmp / "output", world.tmp / "summary.md"
    env = dict(world.env(), GITHUB_EVENT_PATH=str(event), GITHUB_REPOSITORY=REPO,
               GITHUB_API_URL=world.sim.url, GITHUB_TOKEN=TOKEN,
               GITHUB_OUTPUT=str(out), GITHUB_STEP_SUMMARY=str(summary))
    p = subprocess.run([KB, "action", "-c", world.config(token=False), "--time-budget", "600"],
                       env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    pr = check_published(world)
    check_progress_and_labels(world)
    # name<<DELIM / value / DELIM, a random delimiter
    lines = out.read_text().split("\n")
    outputs = {}
    i = 0
    while i < len(lines) and lines[i]:
        name, delim = lines[i].split("<<")
        assert delim.startswith("ghadelimiter_") and len(delim) > 20
        assert lines[i + 2] == delim
        outputs[name] = lines[i + 1]
        i += 3
    assert outputs["pr-url"].endswith("/pull/%d" % pr["number"]), outputs
    assert float(outputs["speedup"]) > 0
    text = summary.read_text()
    assert "| `%s` | done" % OP in text, text
    assert outputs["pr-url"] in text
    # not our label: nothing to do, outputs empty
    event.write_text(json.dumps(world.sim.payload(
        "pull_request", repo=REPO, number=1, action="labeled", label="bug", sender="alice")))
    out.write_text("")
    p = subprocess.run([KB, "action", "-c", world.config(token=False)], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "pr-url<<ghadelimiter_" in out.read_text()
    assert len(world.bot_prs()) == 1


def test_local_forge_polled_commands(tmp_path):
    """The local forge: `/kernelbot stop|run` comments (records under the
    state dir) reach the daemon by polling, the same way as on GitHub."""
    work, bare, state = str(tmp_path / "work"), str(tmp_path / "ops.git"), str(tmp_path / "state")
    os.makedirs(os.path.join(work, "ops"))
    git("init", "-q", cwd=work)
    with open(os.path.join(work, "README.md"), "w") as f:
        f.write("# ops\n")
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "start", cwd=work)
    git("checkout", "-q", "-b", "feature", cwd=work)
    with open(os.path.join(TOP, "tests", "operators", "kb_relu.py")) as f:
        src = f.read()
    with open(os.path.join(work, OP), "w") as f:
        f.write(src)
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "add relu", cwd=work)
    git("init", "-q", "--bare", bare)
    git("push", "-q", bare, "main", "feature", cwd=work)
    cfg = str(tmp_path / "bot.ini")
    with open(cfg, "w") as f:
        f.write("[core]\nstate_dir = %s\nlog_level = debug\n" % state)
        f.write("[harness]\npython = %s\nbackend = cpu\nseeds = 1\nmax_configs = 2\n"
                % sys.executable)
        f.write("[bench]\nwarmup = 1\nmin_time_ms = 1500\nmax_reps = 100000\n"
                "baselines = eager\n")
        f.write("[templates]\nmax_points = 2\nexhaustive_limit = 2\nrefine_rounds = 0\n")
        f.write("[bot]\nforge = local\nrepositories = %s\npoll_interval_s = 1\n"
                "progress_interval_s = 0\nmin_speedup = 0\n" % REPO)

    def lk(*args):
        p = subprocess.run([KB, "local", "-c", cfg, *args], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, p.stderr
        return p.stdout.strip()

    def db(sql):
        con = sqlite3.connect(os.path.join(state, "kernelbot.db"), timeout=10)
        try:
            return con.execute(sql).fetchall()
        except sqlite3.OperationalError:
            return []
        finally:
            con.close()

    lk("add-repo", REPO, bare)
    lk("permit", REPO, "alice", "write")
    lk("permit", REPO, "mallory", "read")
    pr = lk("--as", "alice", "open-pr", REPO, "feature", "main", "Add relu")
    assert pr == "1"
    lk("--as", "alice", "label", REPO, pr, "optimize-kernel")
    log_path = str(tmp_path / "daemon.log")
    with open(log_path, "w") as log:
        p = subprocess.Popen([KB, "daemon", "-c", cfg], stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)

    def log():
        with open(log_path) as f:
            return f.read()
    try:
        wait_for("the search to start", lambda: db("SELECT 1 FROM jobs WHERE stage = 'search'"))
        kids = wait_for("the run child", lambda: children_of(p.pid), timeout=30)
        lk("--as", "mallory", "comment", REPO, pr, "/kernelbot stop")
        wait_for("the reader's stop", lambda: "'mallory', who has read access" in log(),
                 timeout=30)
        assert db("SELECT state FROM jobs") == [("running",)]
        lk("--as", "alice", "comment", REPO, pr, "/kernelbot stop")
        wait_for("the job to be cancelled", lambda: db("SELECT state FROM jobs") ==
                 [("cancelled",)], timeout=60)
        wait_for("the search to stop", lambda: not any(alive(k) for k in kids), timeout=30)
        time.sleep(3)     # still labelled: polls must not start it again
        assert db("SELECT state, source FROM triggers") == [("cancelled", "poll")]
        lk("--as", "alice", "comment", REPO, pr, "/kernelbot run")
        wait_for("the re-run", lambda: db("SELECT state, stage FROM jobs") ==
                 [("running", "search")], timeout=60)
        assert db("SELECT state, source, actor FROM triggers ORDER BY id") == [
            ("cancelled", "poll", "alice"), ("active", "command", "alice")]
        with open(lk("show", REPO, pr)) as f:
            md = f.read()
        assert md.count("<!-- kernelbot:progress pr=1 -->") == 1
        p.send_signal(signal.SIGTERM)
        assert p.wait(30) == 0, log()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)


def test_local_forge_demo(tmp_path):
    env = dict(os.environ, KB_BUILD=os.path.dirname(KB), KB_DEMO_DIR=str(tmp_path / "demo"),
               KB_DEMO_OPS="fused_pointwise", KB_DEMO_FAST="1")
    p = subprocess.run(["sh", os.path.join(TOP, "examples", "demo-bot.sh")], env=env,
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    shown = [l.split(": ", 1)[1] for l in p.stdout.splitlines()
             if l.startswith("== the bot's pull request: ")]
    assert len(shown) == 1, p.stdout
    with open(shown[0]) as f:
        md = f.read()
    # a tiny CPU kernel is often slower than eager: the title's first words say so
    assert re.match(r"# #2 kernelbot: (slower than eager on \d+ of \d+ configs: )?"
                    r"fused_pointwise", md), md[:200]
    assert "kernelbot/pr-1/fused_pointwise" in md
    labelled = [l.split(": ", 1)[1] for l in p.stdout.splitlines()
                if l.startswith("== the labelled pull request")][0]
    with open(labelled) as f:
        md = f.read()
    assert md.count("<!-- kernelbot:progress pr=1 -->") == 1
    assert "kernelbot:done" in md
    # never silent (issue 14): the job's progress as it happens, and status lists the run
    assert re.search(r"^      job 1 \[verify \d+/\d+\]", p.stdout, re.M), p.stdout
    assert re.search(r"^      job 1 \[final check\] verified", p.stdout, re.M), p.stdout
    assert re.search(r"^run +job +operator", p.stdout, re.M), p.stdout
    assert not list((tmp_path / "demo").glob(".shown-*"))


def _body_speedups(body):
    """{config: speedup vs eager} from the body's Speedup table."""
    table = body.split("### Speedup", 1)[1].split("\n\n", 2)[1]
    rows = re.findall(r"^\| `([^`]+)` \| [^|]+ \| [^|]+ \| [^|]+ \| ([0-9.]+)x", table, re.M)
    return {name: float(x) for name, x in rows}


def _bench_speedups(out):
    """{config: speedup vs eager} from `kernelbot bench`'s table."""
    table = out.split("\nconfig ", 1)[1].split("\ngeomean ", 1)[0]
    rows = re.findall(r"^(\S+)\s+\S+\s+\S+\s+\S+\s+([0-9.]+)x", table, re.M)
    return {name: float(x) for name, x in rows}


def test_demo_reproduce_matches_body(tmp_path):
    """The demo's pull request (issue 14): its body leads with the headline
    on the operator's own shapes, names the worst config and every config
    the verifier left out, and its Reproduce command, run on a clone of the
    bot's branch, prints the same verdict and every config's speedup within
    the noise band the body states."""
    demo = tmp_path / "demo"
    env = dict(os.environ, KB_BUILD=os.path.dirname(KB), KB_DEMO_DIR=str(demo),
               KB_DEMO_OPS="fused_pointwise", KB_DEMO_FAST="1")
    p = subprocess.run(["sh", os.path.join(TOP, "examples", "demo-bot.sh")], env=env,
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    shown = [l.split(": ", 1)[1] for l in p.stdout.splitlines()
             if l.startswith("== the bot's pull request: ")]
    assert len(shown) == 1, p.stdout
    with open(shown[0]) as f:
        body = f.read()
    branch = "kernelbot/pr-1/fused_pointwise"
    ev = json.loads(git("--git-dir", str(demo / "demo.git"), "show",
                        branch + ":kernelbot/fused_pointwise/evidence.json"))
    timed = [c for c in ev["configs"] if c.get("timing")]
    assert timed

    # the worst config and every config left out, with its reason
    worst = min(timed, key=lambda c: c["timing"]["speedup_eager"])
    assert "the worst config, `%s`, runs at **%.2fx**" % (
        worst["name"], worst["timing"]["speedup_eager"]) in body
    plain = body.replace("\\", "")
    for d in ev["dropped_configs"]:
        assert "`%s`" % d["name"] in body and d["reason"][:60] in plain, d
    assert ("left out** by the verifier" in body) == bool(ev["dropped_configs"])

    # the Reproduce command, the verdict and the band it promises
    repro = re.search(r"### Reproduce\n\n[^\n]*\n\n```sh\n(.*?)```\n\n([^\n]*)", body, re.S)
    assert repro, body
    script, promise = repro.group(1), repro.group(2)
    assert "\nkernelbot bench " in "\n" + script, script
    verdict = re.search(r"the verdict `(\w+)`", promise).group(1)
    band = float(re.search(r"within \*\*±([0-9.]+)%\*\*", promise).group(1)) / 100
    assert verdict == ev["verdict"] == "verified"
    want = _body_speedups(body)
    assert set(want) == {c["name"] for c in timed}

    # run it as a reviewer would: a clone, `kernelbot` on PATH, a config of their own
    clone = str(tmp_path / "clone")
    git("clone", "-q", str(demo / "demo.git"), clone)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.symlink(KB, str(bindir / "kernelbot"))
    with open(os.path.join(clone, "config.ini"), "w") as f:
        f.write("[core]\nstate_dir = %s\n[harness]\npython = %s\n"
                % (tmp_path / "reviewer-state", sys.executable))
    env = dict(os.environ, PATH="%s:%s" % (bindir, os.environ.get("PATH", "")),
               GIT_CONFIG_NOSYSTEM="1", HOME=str(tmp_path))
    # A busy machine (make test beside other work) stretches one run now and
    # then: as a reviewer would, run it again, up to 3 times, and judge each
    # config's median over the runs so far against the promised band.
    runs = []
    for _ in range(3):
        r = subprocess.run(["sh", "-ec", script], cwd=clone, env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "verdict: %s\n" % verdict in r.stdout, r.stdout
        got = _bench_speedups(r.stdout)
        assert set(got) == set(want), (got, want)
        runs.append(got)
        med = {n: sorted(g[n] for g in runs)[(len(runs) - 1) // 2] if len(runs) != 2
               else (runs[0][n] + runs[1][n]) / 2 for n in want}
        # both printed with two decimals: half a unit of the last digit each way
        missed = [(n, med[n], x) for n, x in want.items() if abs(med[n] - x) > band * x + 0.01]
        if not missed:
            break
    assert not missed, (missed, band, runs)


def test_action_and_workflow_files():
    yaml = pytest.importorskip("yaml")
    with open(os.path.join(TOP, "actions", "optimize-kernel", "action.yml")) as f:
        text = f.read()
    action = yaml.safe_load(text)
    assert action["runs"]["using"] == "composite"
    assert set(action["inputs"]) >= {"token", "config", "time-budget"}
    assert action["inputs"]["token"]["required"] is True
    assert set(action["outputs"]) == {"pr-url", "speedup"}
    for name in ("pr-url", "speedup"):
        assert action["outputs"][name]["value"] == "${{ steps.run.outputs.%s }}" % name
    runs = [s for s in action["runs"]["steps"] if "run" in s]
    assert runs and all(s.get("shell") for s in runs)
    assert any("action" in s["run"] for s in runs)
    assert "INPUT_" not in text
    # inputs reach the script through env, never pasted into it
    for s in runs:
        assert "${{" not in s["run"]
    with open(os.path.join(TOP, ".github", "workflows", "optimize-kernel.yml")) as f:
        wf = yaml.safe_load(f)
    on = wf.get("on", wf.get(True))
    assert on == {"pull_request": {"types": ["labeled"]}}
    job = next(iter(wf["jobs"].values()))
    assert job["runs-on"] == ["self-hosted", "gpu"]
    step = [s for s in job["steps"] if "optimize-kernel" in s.get("uses", "")][0]
    assert step["with"]["token"] == "${{ secrets.GITHUB_TOKEN }}"
