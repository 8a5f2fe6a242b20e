"""Recorded exchanges (shared/github-fixtures/rest/*.json, octokit) served
as they were recorded, for requests no stateful route handles: same
method, path and query give the recorded status, body, link and location,
with api.github.com replaced by the simulator's own address."""

import glob
import json
import os

RECORDED_HOST = "https://api.github.com"


class Replay:
    def __init__(self, fixtures_dir):
        self.exchanges = {}
        for path in sorted(glob.glob(os.path.join(fixtures_dir or "", "rest", "*.json"))):
            try:
                with open(path, encoding="utf-8") as f:
                    items = json.load(f)
            except (OSError, ValueError):
                continue
            for ex in items if isinstance(items, list) else []:
                if not isinstance(ex, dict) or "path" not in ex:
                    continue
                key = (ex.get("method", "get").upper(), ex["path"])
                # the first recording of a path wins (later ones follow mutations)
                self.exchanges.setdefault(key, ex)

    def lookup(self, method, target, base):
        """-> (status, body bytes, headers) or None."""
        ex = self.exchanges.get((method, target))
        if ex is None:
            return None
        resp = ex.get("response")
        if isinstance(resp, (dict, list)):
            body = json.dumps(resp).replace(RECORDED_HOST, base).encode()
            ctype = "application/json; charset=utf-8"
        else:
            body = str(resp or "").encode()
            ctype = "text/plain; charset=utf-8"
        headers = {"content-type": ctype}
        for k in ("link", "location"):
            v = (ex.get("headers") or {}).get(k)
            if v:
                headers[k] = v.replace(RECORDED_HOST, base)
        return int(ex.get("status", 200)), body, headers
