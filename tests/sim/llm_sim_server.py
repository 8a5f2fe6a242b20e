"""HTTP side of the LLM simulator: the model endpoints of both providers,
faults (a FIFO and seeded random ones), the script FIFO, stats, the request
log, and the /_sim/ control API."""

import hashlib
import json
import random
import select
import socket
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import llm_sim_protocol as proto
from llm_sim_corpus import Brain, classify, prompt_text

ROUTES = {
    "/v1/chat/completions": "openai", "/chat/completions": "openai",
    "/v1/messages": "anthropic", "/messages": "anthropic",
}
FAULT_KEYS = {"status", "retry_after", "delay_ms", "body", "empty", "drop", "truncate",
              "count", "purpose", "provider"}
RANDOM_FAULT_KINDS = ("429", "500", "502", "503", "529", "malformed", "empty", "drop", "delay")
DEFAULT_RANDOM_FAULTS = "429,500,503,529,malformed,empty"
MAX_BODY = 64 << 20


class ControlError(Exception):
    pass


def _check_fault(f):
    if not isinstance(f, dict):
        raise ControlError("a fault must be an object")
    bad = set(f) - FAULT_KEYS
    if bad:
        raise ControlError("unknown fault key '%s'" % sorted(bad)[0])
    if "status" in f and (not proto.is_int(f["status"]) or not 100 <= f["status"] <= 599):
        raise ControlError("fault status must be an HTTP status")
    if "delay_ms" in f and (not proto.is_number(f["delay_ms"]) or f["delay_ms"] < 0):
        raise ControlError("fault delay_ms must be a number >= 0")
    if "count" in f and (not proto.is_int(f["count"]) or f["count"] < 1):
        raise ControlError("fault count must be an integer >= 1")
    if "body" in f and not isinstance(f["body"], str):
        raise ControlError("fault body must be a string")
    if "provider" in f and f["provider"] not in ("openai", "anthropic"):
        raise ControlError("fault provider must be openai or anthropic")
    g = dict(f)
    if "retry_after" in g and g["retry_after"] is not None:
        g["retry_after"] = str(g["retry_after"])
    g["count"] = g.get("count", 1)
    return g


class Core:
    """One simulator's state, shared by the handler threads."""

    def __init__(self, corpus=None, seed=0, api_key=None, log_path=None, backend="auto",
                 only=None, fault_rate=0.0, fault_kinds=DEFAULT_RANDOM_FAULTS,
                 fault_retry_after="0", fault_delay_ms=200, verifier_noise=0.0, vary=False,
                 latency_ms=0):
        self.lock = threading.Lock()
        # every model request answers after this long (a real model's latency)
        self.latency_ms = latency_ms
        self.in_flight = 0
        self.brain = Brain(corpus, seed, backend, only, verifier_noise, vary)
        self.seed = seed
        self.api_key = api_key
        self.fault_rate = fault_rate
        self.fault_kinds = self._kinds(fault_kinds)
        self.fault_retry_after = fault_retry_after
        self.fault_delay_ms = fault_delay_ms
        self.log_file = open(log_path, "a", encoding="utf-8") if log_path else None
        self.seq = 0
        self.reset()

    @staticmethod
    def _kinds(spec):
        kinds = [k.strip() for k in (spec.split(",") if isinstance(spec, str) else spec)
                 if k.strip()]
        for k in kinds:
            if k not in RANDOM_FAULT_KINDS:
                raise ValueError("unknown random fault kind '%s' (%s)"
                                 % (k, ", ".join(RANDOM_FAULT_KINDS)))
        return kinds

    def reset(self):
        with self.lock:
            self.faults = []
            self.script = []
            self.log = []
            self.rng = random.Random("faults/%s" % self.seed)
            self.brain.reset()
            self.stats = {"requests": 0, "by_path": {}, "by_status": {}, "by_purpose": {},
                          "by_entry": {}, "faults": 0, "scripted": 0, "prompt_tokens": 0,
                          "completion_tokens": 0, "in_flight": 0, "peak_in_flight": 0,
                          "abandoned": 0}

    def close(self):
        if self.log_file:
            self.log_file.close()
            self.log_file = None

    # --- model requests ---

    def take_fault(self, provider, purpose):
        """The next FIFO fault this request matches, else maybe a random one."""
        with self.lock:
            for i, f in enumerate(self.faults):
                if f.get("purpose") not in (None, purpose):
                    continue
                if f.get("provider") not in (None, provider):
                    continue
                f["count"] -= 1
                if f["count"] <= 0:
                    del self.faults[i]
                return {k: v for k, v in f.items() if k not in ("count", "purpose", "provider")}
            if self.fault_rate > 0 and self.fault_kinds and self.rng.random() < self.fault_rate:
                return self._random_fault(self.rng.choice(self.fault_kinds))
        return None

    def _random_fault(self, kind):
        if kind.isdigit():
            f = {"status": int(kind)}
            if kind in ("429", "529", "503"):
                f["retry_after"] = self.fault_retry_after
            return f
        if kind == "malformed":
            return {"truncate": True}
        if kind == "delay":
            return {"delay_ms": self.fault_delay_ms}
        return {kind: True}

    def take_script(self, purpose):
        with self.lock:
            for i, s in enumerate(self.script):
                if s.get("purpose") in (None, purpose):
                    del self.script[i]
                    return s["text"]
        return None

    def answer(self, purpose, text):
        with self.lock:
            return self.brain.answer(purpose, text)

    def record(self, rec):
        with self.lock:
            self.seq += 1
            rec = dict(seq=self.seq, time=round(time.time(), 3), **rec)
            st = self.stats
            st["requests"] += 1
            st["by_path"][rec["path"]] = st["by_path"].get(rec["path"], 0) + 1
            key = str(rec["status"])
            st["by_status"][key] = st["by_status"].get(key, 0) + 1
            if rec.get("purpose"):
                st["by_purpose"][rec["purpose"]] = st["by_purpose"].get(rec["purpose"], 0) + 1
            if rec.get("entry") and rec.get("purpose") == "kernel" and not rec.get("scripted"):
                k = "%s/%s" % (rec["operator"], rec["entry"])
                st["by_entry"][k] = st["by_entry"].get(k, 0) + 1
            if rec.get("fault"):
                st["faults"] += 1
            if rec.get("scripted"):
                st["scripted"] += 1
            if rec["status"] == 200:
                st["prompt_tokens"] += rec.get("prompt_tokens") or 0
                st["completion_tokens"] += rec.get("completion_tokens") or 0
            self.log.append(rec)
            if self.log_file:
                self.log_file.write(json.dumps(rec, sort_keys=True) + "\n")
                self.log_file.flush()

    # --- control ---

    def control(self, method, path, query, body):
        """(status, JSON) for a /_sim/ call."""
        name = path[len("/_sim/"):].strip("/")
        if name == "health" and method == "GET":
            return 200, {"ok": True}
        if name == "reset" and method == "POST":
            self.reset()
            return 200, {"ok": True}
        if name == "faults":
            if method == "POST":
                items = body.get("faults") if isinstance(body, dict) and "faults" in body \
                    else [body]
                if not isinstance(items, list):
                    raise ControlError("faults must be a list")
                checked = [_check_fault(f) for f in items]
                with self.lock:
                    self.faults.extend(checked)
                    return 200, {"pending": len(self.faults)}
            if method == "GET":
                with self.lock:
                    return 200, {"faults": [dict(f) for f in self.faults]}
            if method == "DELETE":
                with self.lock:
                    self.faults = []
                return 200, {"pending": 0}
        if name == "script":
            if method == "POST":
                items = body.get("replies") if isinstance(body, dict) else None
                if not isinstance(items, list):
                    raise ControlError("script needs {\"replies\": [...]}")
                checked = []
                for r in items:
                    if isinstance(r, str):
                        checked.append({"text": r})
                    elif isinstance(r, dict) and isinstance(r.get("text"), str) and \
                            set(r) <= {"text", "purpose"}:
                        checked.append(dict(r))
                    else:
                        raise ControlError("a scripted reply is a string or "
                                           "{\"text\", \"purpose\"}")
                with self.lock:
                    self.script.extend(checked)
                    return 200, {"pending": len(self.script)}
            if method == "GET":
                with self.lock:
                    return 200, {"replies": [dict(s) for s in self.script]}
            if method == "DELETE":
                with self.lock:
                    self.script = []
                return 200, {"pending": 0}
        if name == "stats" and method == "GET":
            with self.lock:
                return 200, json.loads(json.dumps(dict(self.stats, in_flight=self.in_flight)))
        if name == "latency":
            if method == "POST":
                ms = body.get("ms") if isinstance(body, dict) else None
                if not proto.is_number(ms) or ms < 0:
                    raise ControlError("latency ms must be a number >= 0")
                with self.lock:
                    self.latency_ms = ms
            with self.lock:
                return 200, {"ms": self.latency_ms}
        if name == "log" and method == "GET":
            try:
                since = int((query.get("since") or ["0"])[0])
            except ValueError:
                raise ControlError("since must be a sequence number")
            with self.lock:
                return 200, {"requests": [r for r in self.log if r["seq"] > since]}
        if name == "corpus":
            if method == "GET":
                with self.lock:
                    return 200, {"only": sorted(self.brain.only) if self.brain.only else None,
                                 "entries": [e.describe() for op in self.brain.ops.values()
                                             for e in op.entries]}
            if method == "POST":
                only = body.get("only") if isinstance(body, dict) else None
                if only is not None and (not isinstance(only, list) or
                                         not all(isinstance(x, str) for x in only)):
                    raise ControlError("only must be a list of entry names or kinds, or null")
                with self.lock:
                    self.brain.set_only(only)
                return 200, {"only": only}
        if name == "config" and method == "POST":
            if not isinstance(body, dict):
                raise ControlError("config needs an object")
            with self.lock:
                for k, v in body.items():
                    if k == "fault_rate" and proto.is_number(v) and 0 <= v <= 1:
                        self.fault_rate = v
                    elif k == "fault_kinds":
                        try:
                            self.fault_kinds = self._kinds(v)
                        except ValueError as e:
                            raise ControlError(str(e))
                    elif k == "verifier_noise" and proto.is_number(v) and 0 <= v <= 1:
                        self.brain.verifier_noise = v
                    elif k == "backend" and v in ("auto", "cpu", "cuda"):
                        self.brain.backend = v
                    elif k == "vary" and isinstance(v, bool):
                        self.brain.vary = v
                    elif k == "api_key" and (v is None or isinstance(v, str)):
                        self.api_key = v
                    else:
                        raise ControlError("bad config key or value '%s'" % k)
            return 200, {"ok": True}
        raise ControlError("no control call %s %s" % (method, path))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kbsim-llm/1"
    sys_version = ""

    def setup(self):
        super().setup()
        # headers and body go out in two writes: without this, Nagle and the
        # client's delayed ACK add 40 ms to every answer
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, fmt, *args):
        if self.server.verbose:
            super().log_message(fmt, *args)

    # --- plumbing ---

    def _body(self):
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
                if len(out) > MAX_BODY:
                    raise ValueError("body too large")
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            raise ValueError("body too large")
        return self.rfile.read(n) if n > 0 else b""

    def _send(self, status, body, ctype="application/json", headers=None):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        # a model call stops counting as in flight before its answer leaves:
        # the client may ask its next call the moment it reads the answer
        self._uncount()
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _headers(self):
        return {k.lower(): v for k, v in self.headers.items()}

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def do_PUT(self):
        self._dispatch("PUT")

    def _dispatch(self, method):
        u = urlsplit(self.path)
        try:
            raw = self._body()
        except ValueError:
            self.close_connection = True
            return self._send(413, {"error": "request body too large"})
        try:
            if u.path.startswith("/_sim/"):
                return self._control(method, u, raw)
            provider = ROUTES.get(u.path)
            if provider is None or method != "POST":
                return self._unknown(method, u.path, provider)
            return self._model(provider, u.path, raw)
        except Exception:  # a simulator bug: say so loudly, answer 500
            traceback.print_exc()
            return self._send(500, {"error": "simulator failure"})

    def _control(self, method, u, raw):
        body = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                return self._send(400, {"error": "control body is not JSON"})
        try:
            status, out = self.server.core.control(method, u.path, parse_qs(u.query), body)
        except ControlError as e:
            status, out = 400, {"error": str(e)}
        return self._send(status, out)

    def _unknown(self, method, path, provider):
        if path.endswith("/messages") or provider == "anthropic":
            body = proto.anthropic_error_body(404 if provider is None else 405,
                                              "Not Found" if provider is None else
                                              "Method Not Allowed")
            return self._send(404 if provider is None else 405, body)
        body = proto.openai_error_body(404, "Invalid URL (%s %s)" % (method, path),
                                       "invalid_request_error")
        return self._send(404, body)

    # --- one model request ---

    def _uncount(self):
        if getattr(self, "_counted", False):
            self._counted = False
            with self.server.core.lock:
                self.server.core.in_flight -= 1

    def _model(self, provider, path, raw):
        core = self.server.core
        with core.lock:
            core.in_flight += 1
            core.stats["peak_in_flight"] = max(core.stats["peak_in_flight"], core.in_flight)
            latency = core.latency_ms
        self._counted = True
        try:
            if latency and not self._latency(latency / 1000.0):
                # the client gave the call up (its deadline, a stop): no longer in flight
                # from its side, so not from ours; nobody reads an answer
                with core.lock:
                    core.stats["abandoned"] = core.stats.get("abandoned", 0) + 1
                self.close_connection = True
                return None
            return self._model_answer(provider, path, raw)
        finally:
            self._uncount()

    def _latency(self, seconds):
        """Wait the configured latency; False when the client hung up meanwhile."""
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return True
            readable, _, _ = select.select([self.connection], [], [], left)
            if not readable:
                continue
            try:
                data = self.connection.recv(1, socket.MSG_PEEK)
            except OSError:
                return False
            if not data:
                return False
            # bytes of a next request on this connection: no hang-up; wait out the rest
            time.sleep(max(0.0, end - time.monotonic()))
            return True

    def _model_answer(self, provider, path, raw):
        core = self.server.core
        hdrs = self._headers()
        rid = proto.request_id("req_")
        id_header = {"request-id" if provider == "anthropic" else "x-request-id": rid}
        rec = {"path": path, "provider": provider, "status": None, "purpose": None,
               "model": None, "scripted": False, "fault": None, "request_id": rid}
        body = None
        try:
            body = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            pass
        text = ""
        if isinstance(body, dict) and isinstance(body.get("messages"), list):
            text = prompt_text(body.get("system"), body["messages"])
            rec["purpose"] = classify(text)
            rec["prompt_sha"] = hashlib.sha256(text.encode()).hexdigest()[:16]
            if isinstance(body.get("model"), str):
                rec["model"] = body["model"]

        fault = core.take_fault(provider, rec["purpose"])
        if fault:
            rec["fault"] = fault
            if fault.get("delay_ms"):
                time.sleep(fault["delay_ms"] / 1000.0)
            if fault.get("drop"):
                rec["status"] = 0
                core.record(rec)
                self.close_connection = True
                return None
            if "status" in fault or "body" in fault:
                status = fault.get("status", 200)
                extra = dict(id_header)
                if fault.get("retry_after") is not None:
                    extra["retry-after"] = fault["retry_after"]
                if "body" in fault:
                    ctype, out = "application/json", fault["body"].encode()
                else:
                    ctype, out = proto.fault_error(provider, status)
                rec["status"] = status
                core.record(rec)
                return self._send(status, out, ctype, extra)

        try:
            err = proto.openai_auth(hdrs, core.api_key) if provider == "openai" else \
                proto.anthropic_headers(hdrs, core.api_key)
            if err:
                raise err
            body = proto.parse_body(provider, raw)
            if provider == "openai":
                proto.openai_validate(body)
            else:
                proto.anthropic_validate(body)
        except proto.ApiError as e:
            rec["status"] = e.status
            rec["error"] = e.message
            core.record(rec)
            return self._send(e.status, proto.error_body(provider, e), headers=id_header)

        if fault and fault.get("empty"):
            reply, info = "", {}
        else:
            reply = core.take_script(rec["purpose"])
            if reply is not None:
                info = {}
                rec["scripted"] = True
            else:
                reply, info = core.answer(rec["purpose"], text)
        rec.update({k: v for k, v in info.items() if k != "purpose"})

        prompt_tokens = proto.tokens(len(text))
        limit = body.get("max_tokens") if provider == "anthropic" else \
            (body.get("max_completion_tokens") or body.get("max_tokens"))
        finished = True
        if limit is not None and proto.tokens(len(reply)) > limit:
            reply = reply[:limit * 4]
            finished = False
        if provider == "openai":
            eff = body.get("reasoning_effort")
            out = proto.openai_reply(body["model"], reply, prompt_tokens,
                                     "stop" if finished else "length",
                                     proto.OPENAI_REASONING_TOKENS.get(eff, 0) if eff else 0)
            completion = out["usage"]["completion_tokens"]
        else:
            th = body.get("thinking")
            out = proto.anthropic_reply(body["model"], reply, prompt_tokens,
                                        "end_turn" if finished else "max_tokens",
                                        bool(th) and th.get("type") == "enabled")
            completion = out["usage"]["output_tokens"]
        rec.update(status=200, prompt_tokens=prompt_tokens, completion_tokens=completion,
                   finish="stop" if finished else "length", reply_chars=len(reply))
        data = json.dumps(out).encode()
        if fault and fault.get("truncate"):
            data = data[:len(data) // 2]
        core.record(rec)
        return self._send(200, data, headers=id_header)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, core, host="127.0.0.1", port=0, verbose=False):
        self.core = core
        self.verbose = verbose
        super().__init__((host, port), Handler)
