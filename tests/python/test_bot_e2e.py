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
- `kernelbot action` with a real event payload: GITHUB_OUTPUT and the
  step summary;
- the local forge demo (examples/demo-bot.sh) end to end.
"""

import json
import os
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


class World:
    """A git server with acme/ops, the simulator seeded with the pull request."""

    def __init__(self, tmp, labeled_by="alice", private=True):
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

        self.sim = GitHubSim(tokens=(TOKEN + ":kernelbot",)).start()
        self.sim.add_repo(REPO, collaborators={"alice": "write", "mallory": "read"})
        self.sim.add_pull(REPO, number=1, title="Add relu", user="alice",
                          head={"ref": "feature", "sha": self.head_sha},
                          base={"ref": "main"}, files=[OP, "ops/notes.py"],
                          labels=["optimize-kernel"] if labeled_by else [],
                          labeled_by=labeled_by)
        self.state = str(tmp / "state")
        self.daemons = []

    def config(self, name="bot.ini", poll=1, webhook=False, token=True, slow=False):
        path = str(self.tmp / name)
        with open(path, "w") as f:
            f.write("[core]\nstate_dir = %s\nlog_level = debug\n" % self.state)
            f.write("[harness]\npython = %s\nbackend = cpu\nseeds = 1\nmax_configs = 2\n"
                    "timeout_s = 120\n" % sys.executable)
            f.write("[bench]\nwarmup = 1\nmin_time_ms = %d\nmax_reps = %d\nbaselines = eager\n"
                    % ((1500, 100000) if slow else (5, 20)))
            f.write("[templates]\nmax_points = 2\nexhaustive_limit = 2\nrefine_rounds = 0\n")
            f.write("[github]\napi_url = %s\ntoken = %s\nwebhook_secret = ${KB_E2E_SECRET}\n"
                    % (self.sim.url, "${KB_E2E_TOKEN}" if token else ""))
            f.write("[bot]\nforge = github\nrepositories = %s\npoll_interval_s = %d\n"
                    "progress_interval_s = 0\nmin_speedup = 0\ngit_url = %s\n"
                    "author_email = %s\ntime_budget_s = 600\n"
                    % (REPO, poll, self.git_url, BOT_EMAIL))
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
    assert pr["title"].startswith("kernelbot: kb_relu"), pr["title"]
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
    assert md.startswith("# #2 kernelbot: fused_pointwise"), md[:200]
    assert "kernelbot/pr-1/fused_pointwise" in md
    labelled = [l.split(": ", 1)[1] for l in p.stdout.splitlines()
                if l.startswith("== the labelled pull request")][0]
    with open(labelled) as f:
        md = f.read()
    assert md.count("<!-- kernelbot:progress pr=1 -->") == 1
    assert "kernelbot:done" in md


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
