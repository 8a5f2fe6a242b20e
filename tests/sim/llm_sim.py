#!/usr/bin/env python3
"""An LLM simulator on loopback for kernelbot's tests and benchmarks.

    python3 tests/sim/llm_sim.py --port-file F [--host 127.0.0.1] [--port 0]
        [--corpus DIR] [--api-key KEY] [--seed N] [--log FILE] [--backend auto|cpu|cuda]
        [--only NAMES] [--fault-rate P] [--fault-kinds K,..] [--verifier-noise P] [--vary]

speaks OpenAI chat completions (POST /v1/chat/completions) and the Anthropic
Messages API (POST /v1/messages), answers from a corpus of kernels
(tests/sim/llm_corpus), injects faults on demand, and writes its port to F
once listening. From Python, LLMSim (below) runs it in a thread, in a
process, or drives one by url. Behaviour: tests/sim/README.md.
Standard library only.
"""

import argparse
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from llm_sim_corpus import DEFAULT_CORPUS, CorpusError  # noqa: E402
from llm_sim_server import DEFAULT_RANDOM_FAULTS, Core, Server  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


class SimControlError(Exception):
    def __init__(self, status, body):
        super().__init__("llm_sim control: %d %s" % (status, body))
        self.status = status
        self.body = body


class LLMSim:
    """LLMSim(...).start() serves in a thread of this process;
    LLMSim(url=...) drives one started elsewhere; LLMSim.spawn(...) starts
    the command line in a subprocess (stop() ends it)."""

    def __init__(self, corpus=None, seed=0, api_key=None, log=None, backend="auto", only=None,
                 fault_rate=0.0, fault_kinds=DEFAULT_RANDOM_FAULTS, verifier_noise=0.0,
                 vary=False, url=None, verbose=False):
        self.args = dict(corpus=corpus, seed=seed, api_key=api_key, log_path=log,
                         backend=backend, only=only, fault_rate=fault_rate,
                         fault_kinds=fault_kinds, verifier_noise=verifier_noise, vary=vary)
        self.api_key = api_key
        self.verbose = verbose
        self.url = url
        self.core = self.server = self.thread = self.proc = None

    # --- lifecycle ---

    def start(self):
        self.core = Core(**self.args)
        self.server = Server(self.core, "127.0.0.1", 0, self.verbose)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       name="llm_sim", daemon=True)
        self.thread.start()
        return self

    @classmethod
    def spawn(cls, port_file, args=(), python=None, timeout=20):
        """Run llm_sim.py as a process; returns an LLMSim whose stop() ends it."""
        if os.path.exists(port_file):
            os.unlink(port_file)
        cmd = [python or sys.executable, os.path.join(HERE, "llm_sim.py"),
               "--port-file", port_file] + list(args)
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
        deadline = time.time() + timeout
        while not os.path.exists(port_file):
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                proc.wait()
                raise RuntimeError("llm_sim did not start (exit %s)" % proc.returncode)
            time.sleep(0.02)
        with open(port_file) as f:
            port = int(f.read().strip())
        sim = cls(url="http://127.0.0.1:%d" % port)
        sim.proc = proc
        return sim

    def stop(self):
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.thread.join(5)
            self.core.close()
            self.server = None
        if self.proc:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def __enter__(self):
        return self.start() if self.url is None else self

    def __exit__(self, *exc):
        self.stop()

    @property
    def port(self):
        return urlsplit(self.url).port

    @property
    def base_url(self):
        return self.url + "/v1"

    # --- raw HTTP ---

    def http(self, method, path, body=None, headers=None, timeout=30):
        """One request -> (status, headers with lower-case names, body bytes)."""
        u = urlsplit(self.url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
        try:
            data = body
            hdrs = dict(headers or {})
            if body is not None and not isinstance(body, bytes):
                data = json.dumps(body).encode()
                hdrs.setdefault("Content-Type", "application/json")
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def _json(self, method, path, body, headers):
        status, h, raw = self.http(method, path, body, headers)
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        return status, h, parsed

    def chat(self, prompt, model="sim", key=None, path="/v1/chat/completions", **kw):
        """An OpenAI chat completion -> (status, headers, JSON or None)."""
        msgs = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        hdrs = {}
        key = self.api_key if key is None else key
        if key:
            hdrs["Authorization"] = "Bearer " + key
        return self._json("POST", path, dict(kw, model=model, messages=msgs), hdrs)

    def messages(self, prompt, model="sim", key=None, max_tokens=4096, version="2023-06-01",
                 path="/v1/messages", **kw):
        """An Anthropic Messages call -> (status, headers, JSON or None)."""
        msgs = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        hdrs = {"anthropic-version": version} if version else {}
        key = self.api_key if key is None else key
        if key is not False:
            hdrs["x-api-key"] = key or "sk-ant-sim"
        body = dict(kw, model=model, messages=msgs)
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        return self._json("POST", path, body, hdrs)

    # --- control ---

    def control(self, method, path, body=None):
        status, _, raw = self.http(method, "/_sim/" + path,
                                   body if body is not None else ({} if method != "GET"
                                                                  else None))
        out = json.loads(raw) if raw else None
        if status >= 400:
            raise SimControlError(status, out)
        return out

    def faults(self, *faults):
        return self.control("POST", "faults", {"faults": list(faults)})

    def pending_faults(self):
        return self.control("GET", "faults")["faults"]

    def script(self, *replies):
        return self.control("POST", "script", {"replies": list(replies)})

    def reset(self):
        return self.control("POST", "reset")

    def stats(self):
        return self.control("GET", "stats")

    def latency(self, ms):
        """Every model request answers after ms (a real model's latency)."""
        return self.control("POST", "latency", {"ms": ms})

    def requests(self, since=0):
        return self.control("GET", "log?since=%d" % since)["requests"]

    def corpus(self):
        return self.control("GET", "corpus")["entries"]

    def only(self, names):
        return self.control("POST", "corpus", {"only": names})

    def config(self, **kw):
        return self.control("POST", "config", kw)


def read_log(path):
    """The --log file's records, oldest first."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _write_port(path, port):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write("%d\n" % port)
    os.rename(tmp, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description="LLM simulator (OpenAI + Anthropic) on loopback")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", help="write the port here once listening (tmp + rename)")
    ap.add_argument("--corpus", default=DEFAULT_CORPUS, help="corpus directory")
    ap.add_argument("--api-key", help="required key (Bearer / x-api-key); none: any")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log", help="append one JSON line per model request here")
    ap.add_argument("--backend", choices=("auto", "cpu", "cuda"), default="auto",
                    help="which corpus backend answers kernel requests")
    ap.add_argument("--only", help="comma list of entry names or kinds kernel requests draw from")
    ap.add_argument("--fault-rate", type=float, default=0.0,
                    help="share of model requests that get a random fault (seeded)")
    ap.add_argument("--fault-kinds", default=DEFAULT_RANDOM_FAULTS,
                    help="random fault kinds: 429,500,502,503,529,malformed,empty,drop,delay")
    ap.add_argument("--fault-retry-after", default="0",
                    help="retry-after of random 429/503/529 faults (seconds)")
    ap.add_argument("--fault-delay-ms", type=int, default=200)
    ap.add_argument("--verifier-noise", type=float, default=0.0,
                    help="share of corpus kernels whose verifier verdict is flipped (seeded)")
    ap.add_argument("--vary", action="store_true",
                    help="re-proposed kernels (second epoch on) get a variant line: new to the search")
    ap.add_argument("--latency-ms", type=int, default=0,
                    help="every model request answers after this long (a real model's latency)")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args(argv)
    if not 0 <= a.fault_rate <= 1 or not 0 <= a.verifier_noise <= 1:
        ap.error("--fault-rate and --verifier-noise are shares in [0, 1]")
    try:
        core = Core(a.corpus, a.seed, a.api_key, a.log, a.backend,
                    a.only.split(",") if a.only else None, a.fault_rate, a.fault_kinds,
                    a.fault_retry_after, a.fault_delay_ms, a.verifier_noise, a.vary,
                    max(0, a.latency_ms))
    except (CorpusError, ValueError, OSError) as e:
        print("llm_sim: %s" % e, file=sys.stderr)
        return 2
    server = Server(core, a.host, a.port, a.verbose)

    def stop(signo, frame):
        threading.Thread(target=server.shutdown, daemon=True).start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    port = server.server_address[1]
    if a.port_file:
        _write_port(a.port_file, port)
    print("listening http://%s:%d" % (a.host, port), flush=True)
    try:
        server.serve_forever(0.1)
    finally:
        server.server_close()
        core.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
