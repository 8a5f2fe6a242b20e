"""Shared pieces of the simulator's REST handlers: request and response
objects, GitHub's validation errors, Link pagination."""

from urllib.parse import parse_qsl, urlencode

from github_sim_store import SimError

MAX_BODY = 65536            # issue, pull request and comment bodies
DOC = "https://docs.github.com/rest"


class Req:
    def __init__(self, method, path, query, body, base, ident, headers=None):
        self.method = method
        self.path = path            # without query, without an /api/v3 prefix
        self.query = query          # list of (key, value) in request order
        self.body = body            # parsed JSON or None
        self.base = base            # http://host[:port][/api/v3]
        self.ident = ident
        self.headers = headers or {}

    def q(self, key, default=None):
        for k, v in self.query:
            if k == key:
                return v
        return default


class Resp:
    def __init__(self, status, body=None, headers=None):
        self.status = status
        self.body = body
        self.headers = headers or {}


def validation_failed(resource, field, code="missing_field", message=None):
    err = {"resource": resource, "code": code, "field": field}
    if message:
        err["message"] = message
    return SimError(422, "Validation Failed", [err])


def invalid(msg):
    return SimError(422, "Invalid request.\n\n" + msg)


def obj_body(req):
    if not isinstance(req.body, dict):
        raise invalid("The request body must be a JSON object.")
    return req.body


def check_body_len(resource, body):
    if body is not None and len(body) > MAX_BODY:
        raise validation_failed(resource, "body", "custom",
                                "body is too long (maximum is %d characters)" % MAX_BODY)


def int_q(req, key, default, lo, hi):
    try:
        v = int(req.q(key, default))
    except ValueError:
        v = default
    return max(lo, min(hi, v))


def paged(req, r, items):
    """One page of items with GitHub's Link header (absolute URLs)."""
    per_page = int_q(req, "per_page", 30, 1, 100)
    page = int_q(req, "page", 1, 1, 1 << 30)
    last = max(1, -(-len(items) // per_page))
    chunk = items[(page - 1) * per_page: page * per_page]
    path = req.path
    if r is not None and path.startswith("/repos/"):
        # like GitHub, page links name the repository by id
        parts = path.split("/", 4)
        path = "/repositories/%d" % r["id"] + ("/" + parts[4] if len(parts) > 4 else "")

    def url(p):
        q = [(k, v) for k, v in req.query if k != "page"] + [("page", str(p))]
        return "<%s%s?%s>" % (req.base, path, urlencode(q))
    links = []
    if page > 1:
        links.append('%s; rel="prev"' % url(min(page - 1, last)))
    if page < last:
        links.append('%s; rel="next"' % url(page + 1))
        links.append('%s; rel="last"' % url(last))
    if page > 1:
        links.append('%s; rel="first"' % url(1))
    return Resp(200, chunk, {"link": ", ".join(links)} if links else {})


def parse_query(qs):
    return parse_qsl(qs, keep_blank_values=True)
