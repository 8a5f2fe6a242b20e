"""Faults on demand: the next N requests whose method and path match answer
with a rate limit, a server error, a slow or malformed response, or a
dropped connection. Kept in memory only (a restart clears them)."""

import re
import threading

from github_sim_store import SimError

KINDS = ("primary", "secondary", "error", "slow", "malformed", "drop")
SECONDARY_MESSAGE = ("You have exceeded a secondary rate limit. Please wait a few minutes "
                     "before you try again. If you reach out to GitHub Support for help, "
                     "please include the request ID %s.")
SECONDARY_DOC = ("https://docs.github.com/free-pro-team@latest/rest/overview/"
                 "rate-limits-for-the-rest-api#about-secondary-rate-limits")
PRIMARY_DOC = ("https://docs.github.com/rest/overview/"
               "rate-limits-for-the-rest-api#about-primary-rate-limits")


class Faults:
    def __init__(self):
        self.lock = threading.Lock()
        self.items = []
        self.next_id = 1

    def add(self, spec):
        kind = spec.get("kind")
        if kind not in KINDS:
            raise SimError(422, "fault kind must be one of " + ", ".join(KINDS))
        f = {"id": 0, "kind": kind, "method": str(spec.get("method", "*")).upper(),
             "path": spec.get("path", ".*"), "count": int(spec.get("count", 1)),
             "after": bool(spec.get("after", False)), "hits": 0}
        try:
            f["regex"] = re.compile(f["path"])
        except re.error as e:
            raise SimError(422, "bad path regex: %s" % e) from None
        if kind == "primary":
            f["status"] = int(spec.get("status", 403))
            f["reset_in"] = int(spec.get("reset_in", 60))
        elif kind == "secondary":
            f["status"] = int(spec.get("status", 403))
            f["retry_after"] = spec.get("retry_after", 1)
        elif kind == "error":
            f["status"] = int(spec.get("status", 500))
            f["body"] = spec.get("body")
        elif kind == "slow":
            f["delay"] = float(spec.get("delay", 2.0))
        if f.get("status") is not None and not 400 <= f["status"] <= 599:
            raise SimError(422, "fault status must be 4xx or 5xx")
        with self.lock:
            f["id"] = self.next_id
            self.next_id += 1
            self.items.append(f)
        return self.public(f)

    @staticmethod
    def public(f):
        return {k: v for k, v in f.items() if k != "regex"}

    def list(self):
        with self.lock:
            return [self.public(f) for f in self.items]

    def clear(self):
        with self.lock:
            self.items = []

    def take(self, method, target):
        """The first fault matching method and path (with query), used once."""
        with self.lock:
            for f in self.items:
                if f["method"] not in ("*", method):
                    continue
                if not f["regex"].search(target):
                    continue
                f["count"] -= 1
                f["hits"] += 1
                if f["count"] <= 0:
                    self.items.remove(f)
                return dict(f)
        return None


def fault_response(f, now, request_id, quota):
    """-> (status, body dict or str, headers) for a refusing fault."""
    headers = {}
    if f["kind"] == "primary":
        headers.update({"x-ratelimit-limit": str(quota["limit"]), "x-ratelimit-remaining": "0",
                        "x-ratelimit-used": str(quota["limit"]),
                        "x-ratelimit-reset": str(int(now) + f["reset_in"]),
                        "x-ratelimit-resource": "core"})
        body = {"message": "API rate limit exceeded for user ID 1.",
                "documentation_url": PRIMARY_DOC}
        return f["status"], body, headers
    if f["kind"] == "secondary":
        if f["retry_after"] is not None:
            headers["retry-after"] = str(f["retry_after"])
        return f["status"], {"message": SECONDARY_MESSAGE % request_id,
                             "documentation_url": SECONDARY_DOC}, headers
    # error
    if f.get("body") is not None:
        return f["status"], f["body"], headers
    if f["status"] in (502, 503, 504):
        html = ("<html><body><h1>%d</h1><p>Unicorn! GitHub is taking too long.</p>"
                "</body></html>\n" % f["status"])
        return f["status"], html, {"content-type": "text/html; charset=utf-8"}
    return f["status"], {"message": "Server Error"}, headers
