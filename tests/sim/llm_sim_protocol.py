"""The two wire protocols the LLM simulator speaks: OpenAI chat completions
and the Anthropic Messages API. Request validation with the providers'
messages, their error shapes, and their reply shapes. Pure functions."""

import json
import secrets
import time

OPENAI_PARAMS = {
    "model", "messages", "temperature", "top_p", "n", "stream", "stream_options", "stop",
    "max_tokens", "max_completion_tokens", "presence_penalty", "frequency_penalty",
    "logit_bias", "logprobs", "top_logprobs", "user", "response_format", "seed", "tools",
    "tool_choice", "parallel_tool_calls", "reasoning_effort", "service_tier", "store",
    "metadata", "modalities", "prediction", "verbosity", "prompt_cache_key",
    "safety_identifier",
}
OPENAI_ROLES = ("system", "assistant", "user", "function", "tool", "developer")
OPENAI_EFFORTS = ("minimal", "low", "medium", "high")
# completion tokens a reasoning model spends thinking, per effort
OPENAI_REASONING_TOKENS = {"minimal": 0, "low": 64, "medium": 256, "high": 1024}

ANTHROPIC_PARAMS = {
    "model", "messages", "max_tokens", "system", "temperature", "top_p", "top_k",
    "stop_sequences", "stream", "metadata", "tools", "tool_choice", "thinking",
    "service_tier", "container", "mcp_servers", "context_management",
}
ANTHROPIC_VERSIONS = ("2023-06-01", "2023-01-01")

ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
    403: "permission_error", 404: "not_found_error", 413: "request_too_large",
    429: "rate_limit_error", 500: "api_error", 504: "timeout_error", 529: "overloaded_error",
}
ANTHROPIC_MESSAGES = {
    429: "Number of request tokens has exceeded your per-minute rate limit "
         "(https://docs.claude.com/en/api/rate-limits); see the response headers for current "
         "usage. Please reduce the prompt length or the maximum tokens requested, or try again "
         "later. You may also contact sales at https://www.anthropic.com/contact-sales to "
         "discuss your options for a rate limit increase.",
    500: "Internal server error",
    503: "Service unavailable",
    504: "Request timed out",
    529: "Overloaded",
}
OPENAI_ERRORS = {
    429: ("Rate limit reached for requests per min (RPM): Limit 500, Used 500, Requested 1. "
          "Please try again in 120ms.", "requests", "rate_limit_exceeded"),
    500: ("The server had an error while processing your request. Sorry about that!",
          "server_error", None),
    503: ("The engine is currently overloaded, please try again later.", "server_error", None),
    529: ("The engine is currently overloaded, please try again later.", "server_error", None),
}

BAD_GATEWAY = ("<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
               "<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>cloudflare</center>\r\n"
               "</body>\r\n</html>\r\n")


class ApiError(Exception):
    """An error answer: status, message and, for OpenAI, param and code."""

    def __init__(self, status, message, etype=None, param=None, code=None):
        super().__init__(message)
        self.status, self.message, self.etype = status, message, etype
        self.param, self.code = param, code


def tokens(chars):
    """The simulator's tokenizer: a token per 4 characters, rounded up."""
    return (chars + 3) // 4


def request_id(prefix):
    return prefix + secrets.token_hex(12)


def json_type(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "decimal"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _article(t):
    return ("an " if t[0] in "aeiou" else "a ") + t


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


# --- errors ---

def openai_error_body(status, message, etype=None, param=None, code=None):
    if etype is None:
        if status in OPENAI_ERRORS:
            _, etype, code = OPENAI_ERRORS[status]
        else:
            etype = "server_error" if status >= 500 else "invalid_request_error"
    return {"error": {"message": message, "type": etype, "param": param, "code": code}}


def anthropic_error_body(status, message, etype=None):
    if etype is None:
        etype = ANTHROPIC_ERROR_TYPES.get(status, "api_error" if status >= 500
                                          else "invalid_request_error")
    return {"type": "error", "error": {"type": etype, "message": message},
            "request_id": request_id("req_")}


def fault_error(provider, status):
    """(content type, body bytes) of an injected error status."""
    if status == 502:
        return "text/html", BAD_GATEWAY.encode()
    if provider == "anthropic":
        msg = ANTHROPIC_MESSAGES.get(status, "simulated error %d" % status)
        body = anthropic_error_body(status, msg)
    else:
        msg = OPENAI_ERRORS.get(status, ("simulated error %d" % status, None, None))[0]
        body = openai_error_body(status, msg)
    return "application/json", json.dumps(body).encode()


def error_body(provider, err):
    if provider == "anthropic":
        return anthropic_error_body(err.status, err.message, err.etype)
    return openai_error_body(err.status, err.message, err.etype, err.param, err.code)


def mask_key(key):
    if len(key) <= 8:
        return "*" * len(key)
    return key[:4] + "*" * (len(key) - 8) + key[-4:]


# --- auth ---

def openai_auth(headers, api_key):
    """None, or the ApiError a wrong or missing key gets (only with a key set)."""
    if api_key is None:
        return None
    auth = headers.get("authorization") or ""
    if not auth.strip():
        return ApiError(401, "You didn't provide an API key. You need to provide your API key "
                        "in an Authorization header using Bearer auth (i.e. Authorization: "
                        "Bearer YOUR_KEY), or as the password field (with blank username) if "
                        "you're accessing the API from your browser and are prompted for a "
                        "username. You can obtain an API key from "
                        "https://platform.openai.com/account/api-keys.",
                        "invalid_request_error")
    scheme, _, key = auth.strip().partition(" ")
    if scheme.lower() != "bearer" or key.strip() != api_key:
        return ApiError(401, "Incorrect API key provided: %s. You can find your API key at "
                        "https://platform.openai.com/account/api-keys." % mask_key(key.strip()),
                        "invalid_request_error", None, "invalid_api_key")
    return None


def anthropic_headers(headers, api_key):
    """None, or the ApiError for a missing/wrong x-api-key or anthropic-version."""
    key = headers.get("x-api-key")
    if key is None or not key.strip():
        return ApiError(401, "x-api-key header is required")
    if api_key is not None and key.strip() != api_key:
        return ApiError(401, "invalid x-api-key")
    version = headers.get("anthropic-version")
    if version is None or not version.strip():
        return ApiError(400, "anthropic-version: header is required")
    if version.strip() not in ANTHROPIC_VERSIONS:
        return ApiError(400, "anthropic-version: invalid version '%s'" % version.strip())
    return None


def parse_body(provider, raw):
    try:
        body = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        if provider == "anthropic":
            raise ApiError(400, "There was an error parsing the body of your request. "
                           "Please check the body is valid JSON.")
        raise ApiError(400, "We could not parse the JSON body of your request. (HINT: This likely "
                       "means you aren't using your HTTP library correctly. The OpenAI API "
                       "expects a JSON payload, but what was sent was not valid JSON. If you "
                       "have trouble figuring out how to fix this, please contact us through "
                       "our help center at help.openai.com.)", "invalid_request_error")
    if not isinstance(body, dict):
        if provider == "anthropic":
            raise ApiError(400, "Input should be a valid dictionary")
        raise ApiError(400, "Invalid type for request body: expected an object, but got %s "
                       "instead." % _article(json_type(body)), "invalid_request_error",
                       None, "invalid_type")
    return body


# --- OpenAI validation ---

def _oa_missing(param):
    return ApiError(400, "Missing required parameter: '%s'." % param, "invalid_request_error",
                    param, "missing_required_parameter")


def _oa_type(param, expected, v):
    return ApiError(400, "Invalid type for '%s': expected %s, but got %s instead."
                    % (param, expected, _article(json_type(v))), "invalid_request_error",
                    param, "invalid_type")


def _oa_range(param, v, lo=None, hi=None, integer=False):
    kind = "integer" if integer else "decimal"
    if lo is not None and v < lo:
        return ApiError(400, "Invalid '%s': %s below minimum value. Expected a value >= %s, but "
                        "got %s instead." % (param, kind, lo, v), "invalid_request_error",
                        param, "%s_below_min_value" % kind)
    if hi is not None and v > hi:
        return ApiError(400, "Invalid '%s': %s above maximum value. Expected a value <= %s, but "
                        "got %s instead." % (param, kind, hi, v), "invalid_request_error",
                        param, "%s_above_max_value" % kind)
    return None


def _oa_content(param, c, required):
    if c is None:
        if required:
            raise _oa_missing(param)
        return
    if isinstance(c, str):
        return
    if not isinstance(c, list):
        raise _oa_type(param, "one of a string or array of objects", c)
    for j, part in enumerate(c):
        p = "%s[%d]" % (param, j)
        if not isinstance(part, dict):
            raise _oa_type(p, "an object", part)
        if "type" not in part:
            raise _oa_missing(p + ".type")
        if part["type"] == "text" and not isinstance(part.get("text"), str):
            raise _oa_missing(p + ".text") if "text" not in part else \
                _oa_type(p + ".text", "a string", part["text"])


def openai_validate(body):
    """Raise ApiError as the API would; return the checked request."""
    for k in body:
        if k not in OPENAI_PARAMS:
            raise ApiError(400, "Unrecognized request argument supplied: %s" % k,
                           "invalid_request_error")
    if "model" not in body or body["model"] in (None, ""):
        raise ApiError(400, "you must provide a model parameter", "invalid_request_error")
    if not isinstance(body["model"], str):
        raise _oa_type("model", "a string", body["model"])
    if "messages" not in body:
        raise _oa_missing("messages")
    msgs = body["messages"]
    if not isinstance(msgs, list):
        raise _oa_type("messages", "an array", msgs)
    if not msgs:
        raise ApiError(400, "Invalid 'messages': empty array. Expected an array with minimum "
                       "length 1, but got an empty array instead.", "invalid_request_error",
                       "messages", "empty_array")
    for i, m in enumerate(msgs):
        p = "messages[%d]" % i
        if not isinstance(m, dict):
            raise _oa_type(p, "an object", m)
        if "role" not in m:
            raise _oa_missing(p + ".role")
        if m["role"] not in OPENAI_ROLES:
            raise ApiError(400, "Invalid value: '%s'. Supported values are: 'system', "
                           "'assistant', 'user', 'function', 'tool', and 'developer'."
                           % m["role"], "invalid_request_error", p + ".role", "invalid_value")
        _oa_content(p + ".content", m.get("content"), m["role"] != "assistant")
    t = body.get("temperature")
    if t is not None:
        if not is_number(t):
            raise _oa_type("temperature", "a decimal", t)
        err = _oa_range("temperature", t, 0, 2)
        if err:
            raise err
    if body.get("top_p") is not None:
        if not is_number(body["top_p"]):
            raise _oa_type("top_p", "a decimal", body["top_p"])
        err = _oa_range("top_p", body["top_p"], 0, 1)
        if err:
            raise err
    for k in ("max_tokens", "max_completion_tokens"):
        v = body.get(k)
        if v is not None:
            if not is_int(v):
                raise _oa_type(k, "an integer", v)
            err = _oa_range(k, v, 1, integer=True)
            if err:
                raise err
    n = body.get("n")
    if n is not None and (not is_int(n) or n != 1):
        raise ApiError(400, "Invalid 'n': the simulator answers one choice (n = 1).",
                       "invalid_request_error", "n", "invalid_value")
    eff = body.get("reasoning_effort")
    if eff is not None and eff not in OPENAI_EFFORTS:
        raise ApiError(400, "Invalid value: '%s'. Supported values are: 'minimal', 'low', "
                       "'medium', and 'high'." % eff, "invalid_request_error",
                       "reasoning_effort", "invalid_value")
    if body.get("stream"):
        raise ApiError(400, "Invalid 'stream': the simulator does not stream; send stream "
                       "false or leave it out.", "invalid_request_error", "stream",
                       "invalid_value")
    return body


def openai_reply(model, text, prompt_tokens, finish, reasoning_tokens=0):
    completion = tokens(len(text)) + reasoning_tokens
    return {
        "id": request_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0,
                     "message": {"role": "assistant", "content": text, "refusal": None,
                                 "annotations": []},
                     "logprobs": None, "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                  "total_tokens": prompt_tokens + completion,
                  "prompt_tokens_details": {"cached_tokens": 0},
                  "completion_tokens_details": {"reasoning_tokens": reasoning_tokens}},
        "service_tier": "default",
        "system_fingerprint": "fp_kbsim",
    }


# --- Anthropic validation ---

def _an(msg):
    return ApiError(400, msg)


def _an_content(param, c, allow_empty):
    if isinstance(c, str):
        if not c and not allow_empty:
            raise _an("%s: all messages must have non-empty content except for the optional "
                      "final assistant message" % param.rsplit(".", 1)[0])
        return
    if not isinstance(c, list):
        raise _an("%s: Input should be a valid list" % param)
    if not c and not allow_empty:
        raise _an("%s: all messages must have non-empty content except for the optional final "
                  "assistant message" % param.rsplit(".", 1)[0])
    for j, b in enumerate(c):
        p = "%s.%d" % (param, j)
        if not isinstance(b, dict):
            raise _an("%s: Input should be a valid dictionary or object to extract fields from"
                      % p)
        if "type" not in b:
            raise _an("%s.type: Field required" % p)
        if b["type"] == "text":
            if "text" not in b:
                raise _an("%s.text.text: Field required" % p)
            if not isinstance(b["text"], str):
                raise _an("%s.text.text: Input should be a valid string" % p)
            if not b["text"]:
                raise _an("%s: text content blocks must be non-empty" % param)


def anthropic_validate(body):
    for k in body:
        if k not in ANTHROPIC_PARAMS:
            raise _an("%s: Extra inputs are not permitted" % k)
    for k in ("model", "messages", "max_tokens"):
        if k not in body:
            raise _an("%s: Field required" % k)
    if not isinstance(body["model"], str) or not body["model"]:
        raise _an("model: Input should be a valid string")
    mt = body["max_tokens"]
    if not is_int(mt):
        raise _an("max_tokens: Input should be a valid integer")
    if mt < 1:
        raise _an("max_tokens: Input should be greater than or equal to 1")
    msgs = body["messages"]
    if not isinstance(msgs, list):
        raise _an("messages: Input should be a valid list")
    if not msgs:
        raise _an("messages: at least one message is required")
    for i, m in enumerate(msgs):
        p = "messages.%d" % i
        if not isinstance(m, dict):
            raise _an("%s: Input should be a valid dictionary" % p)
        if m.get("role") == "system":
            raise _an('messages: Unexpected role "system". The Messages API accepts a top-level '
                      '`system` parameter, not "system" as an input message role.')
        if "role" not in m:
            raise _an("%s.role: Field required" % p)
        if m["role"] not in ("user", "assistant"):
            raise _an("%s.role: Input should be 'user' or 'assistant'" % p)
        if "content" not in m:
            raise _an("%s.content: Field required" % p)
        last_assistant = i == len(msgs) - 1 and m["role"] == "assistant"
        _an_content(p + ".content", m["content"], last_assistant)
    sysp = body.get("system")
    if sysp is not None:
        if isinstance(sysp, list):
            for j, b in enumerate(sysp):
                if not isinstance(b, dict) or b.get("type") != "text" or \
                        not isinstance(b.get("text"), str):
                    raise _an("system.%d: Input should be a valid text block" % j)
        elif not isinstance(sysp, str):
            raise _an("system: Input should be a valid string")
    t = body.get("temperature")
    if t is not None:
        if not is_number(t):
            raise _an("temperature: Input should be a valid number")
        if t < 0:
            raise _an("temperature: Input should be greater than or equal to 0")
        if t > 1:
            raise _an("temperature: Input should be less than or equal to 1")
    if body.get("top_p") is not None and (not is_number(body["top_p"]) or
                                          not 0 <= body["top_p"] <= 1):
        raise _an("top_p: Input should be a number between 0 and 1")
    if body.get("top_k") is not None and (not is_int(body["top_k"]) or body["top_k"] < 0):
        raise _an("top_k: Input should be greater than or equal to 0")
    th = body.get("thinking")
    if th is not None:
        if not isinstance(th, dict) or th.get("type") not in ("enabled", "disabled"):
            raise _an("thinking: Input tag '%s' found using 'type' does not match any of the "
                      "expected tags: 'enabled', 'disabled'"
                      % (th.get("type") if isinstance(th, dict) else th))
        if th["type"] == "enabled":
            bt = th.get("budget_tokens")
            if bt is None:
                raise _an("thinking.enabled.budget_tokens: Field required")
            if not is_int(bt):
                raise _an("thinking.enabled.budget_tokens: Input should be a valid integer")
            if bt < 1024:
                raise _an("thinking.enabled.budget_tokens: Input should be greater than or "
                          "equal to 1024")
            if mt <= bt:
                raise _an("`max_tokens` must be greater than `thinking.budget_tokens`. Please "
                          "consult our documentation at https://docs.claude.com/en/docs/"
                          "build-with-claude/extended-thinking#max-tokens-and-context-window-"
                          "size")
            if t is not None and t != 1:
                raise _an("`temperature` may only be set to 1 when thinking is enabled. Please "
                          "consult our documentation at https://docs.claude.com/en/docs/"
                          "build-with-claude/extended-thinking#feature-compatibility")
    if body.get("stream"):
        raise _an("stream: the simulator does not stream; send false or leave it out")
    return body


THINKING = ("Let me look at the operator, the ABI and what the harness checks before I write "
            "the kernel: every output element written, inputs untouched, float32 throughout.")


def anthropic_reply(model, text, input_tokens, stop_reason, thinking=False):
    content = []
    out = tokens(len(text))
    if thinking:
        content.append({"type": "thinking", "thinking": THINKING,
                        "signature": secrets.token_hex(24)})
        out += tokens(len(THINKING))
    if text:
        content.append({"type": "text", "text": text})
    return {
        "id": request_id("msg_01"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": out,
                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                  "service_tier": "standard"},
    }
