"""The test git server (tests/gitserver/git-http-server.sh): lighttpd and
git-http-backend on loopback with token auth. Public mode serves fetches to
anyone and pushes to the token only; private mode wants the token for
everything. The git CLI is the client here; the bot's libgit2 side is
tested in tests/unit/test_git.c."""

import os
import signal
import subprocess
import time

import pytest

TOP = os.environ.get("KB_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(TOP, "tests", "gitserver", "git-http-server.sh")
TOKEN = "tok-51a9e0c2"


def _backend():
    try:
        out = subprocess.run(["git", "--exec-path"], capture_output=True, text=True)
    except OSError:
        return None
    path = os.path.join(out.stdout.strip(), "git-http-backend")
    return path if os.access(path, os.X_OK) else None


pytestmark = pytest.mark.skipif(
    not os.access("/usr/sbin/lighttpd", os.X_OK) or _backend() is None,
    reason="lighttpd or git-http-backend missing")


def git(*args, cwd=None, check=True):
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", GIT_CONFIG_NOSYSTEM="1",
               GIT_ASKPASS="/bin/false", SSH_ASKPASS="/bin/false")
    env["HOME"] = cwd or "/nonexistent"
    p = subprocess.run(["git", "-c", "init.defaultBranch=main", "-c", "credential.helper=",
                        *args], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=30)
    if check and p.returncode:
        raise AssertionError("git %s: %s" % (" ".join(args), p.stderr))
    return p


def listening(port):
    want = "0100007F:%04X" % port
    with open("/proc/net/tcp") as f:
        return any(line.split()[1] == want and line.split()[3] == "0A"
                   for line in f.readlines()[1:])


class Server:
    def __init__(self, tmp, private):
        self.root = tmp / "srv"
        self.root.mkdir()
        git("init", "-q", "--bare", str(self.root / "demo.git"))
        self.proc = subprocess.Popen(
            ["sh", SCRIPT, "-r", str(self.root), "-t", TOKEN, "-d", str(tmp / "conf")]
            + (["-p"] if private else []),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True)
        self.base = self.proc.stdout.readline().strip()
        assert self.base.startswith("http://127.0.0.1:"), self.proc.stderr.read()
        self.port = int(self.base.split(":")[2].split("/")[0])
        self.url = self.base + "/demo.git"
        host = self.base[len("http://"):]
        self.url_token = "http://x-access-token:%s@%s/demo.git" % (TOKEN, host)
        self.url_wrong = "http://x-access-token:wrong-token@%s/demo.git" % host

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=10)
        self.proc.stdout.close()
        self.proc.stderr.close()


@pytest.fixture
def work(tmp_path):
    w = tmp_path / "work"
    w.mkdir()
    git("init", "-q", cwd=str(w))
    (w / "a.txt").write_text("a\n")
    git("add", "a.txt", cwd=str(w))
    git("-c", "user.name=T", "-c", "user.email=t@example.com", "commit", "-q", "-m", "a",
        cwd=str(w))
    return str(w)


def test_public_fetch_open_push_needs_token(tmp_path, work):
    s = Server(tmp_path, private=False)
    try:
        assert git("ls-remote", s.url).stdout == ""
        p = git("push", s.url, "HEAD:refs/heads/main", cwd=work, check=False)
        assert p.returncode != 0
        p = git("push", s.url_wrong, "HEAD:refs/heads/main", cwd=work, check=False)
        assert p.returncode != 0
        assert "wrong-token" not in open(tmp_path / "conf" / "error.log").read()
        git("push", s.url_token, "HEAD:refs/heads/main", cwd=work)
        head = git("rev-parse", "HEAD", cwd=work).stdout.strip()
        listed = git("ls-remote", s.url, "refs/heads/main").stdout.split()
        assert listed == [head, "refs/heads/main"]
        assert git("--git-dir", str(s.root / "demo.git"), "rev-parse",
                   "main").stdout.strip() == head
    finally:
        s.stop()


def test_private_needs_token_to_read(tmp_path, work):
    s = Server(tmp_path, private=True)
    try:
        git("push", s.url_token, "HEAD:refs/heads/main", cwd=work)
        assert git("ls-remote", s.url, check=False).returncode != 0
        assert "refs/heads/main" in git("ls-remote", s.url_token).stdout
        clone = tmp_path / "clone"
        git("clone", "-q", s.url_token, str(clone))
        assert (clone / "a.txt").read_text() == "a\n"
    finally:
        s.stop()


def test_term_stops_lighttpd(tmp_path):
    s = Server(tmp_path, private=False)
    assert listening(s.port)
    s.stop()
    assert s.proc.returncode == 0
    deadline = time.time() + 5
    while listening(s.port) and time.time() < deadline:
        time.sleep(0.05)
    assert not listening(s.port)


def test_parent_gone_stops_server(tmp_path):
    """A test that dies without cleaning up leaves no server behind."""
    root = tmp_path / "srv"
    root.mkdir()
    url = tmp_path / "url"
    # the intermediate shell is the server's parent: it exits once the URL is out
    p = subprocess.run(
        ["sh", "-c", 'sh "$0" -r "$1" -t "$2" -d "$3" -f 3 3>"$4" & '
         'while [ ! -s "$4" ]; do sleep 0.05; done', SCRIPT, str(root), TOKEN,
         str(tmp_path / "conf"), str(url)], timeout=30)
    assert p.returncode == 0
    port = int(url.read_text().strip().split(":")[2].split("/")[0])
    deadline = time.time() + 5
    while listening(port) and time.time() < deadline:
        time.sleep(0.05)
    assert not listening(port)


def test_bad_usage(tmp_path):
    p = subprocess.run(["sh", SCRIPT, "-r", str(tmp_path / "nothere"), "-t", TOKEN],
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 2
    p = subprocess.run(["sh", SCRIPT, "-r", str(tmp_path), "-t", "ab"],
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 2
    p = subprocess.run(["sh", SCRIPT, "-r", str(tmp_path), "-t", "a:bcdef"],
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 2


def test_missing_lighttpd_says_skip(tmp_path):
    p = subprocess.run(["sh", SCRIPT, "-r", str(tmp_path), "-t", TOKEN],
                       env=dict(os.environ, LIGHTTPD=str(tmp_path / "no-lighttpd")),
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 77
    assert "missing" in p.stderr
