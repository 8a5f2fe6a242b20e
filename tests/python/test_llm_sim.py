"""The LLM simulator (tests/sim/llm_sim.py) and its corpus
(tests/sim/llm_corpus): both protocols with their validation and error
shapes, auth, every fault kind, the script FIFO, stats and the request log,
classification of verifier / rewrite / template / kernel requests, seeded
determinism and coverage, and the corpus kernels themselves (they compile,
with g++ here and nvcc when present; the CPU ones earn their verdicts in
the real harness)."""

import concurrent.futures
import hashlib
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

TOP = os.environ.get("KB_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
SIM_DIR = os.path.join(TOP, "tests", "sim")
CORPUS = os.path.join(SIM_DIR, "llm_corpus")
sys.path.insert(0, SIM_DIR)

import llm_sim_corpus as C  # noqa: E402
from llm_sim import LLMSim, SimControlError, read_log  # noqa: E402

KEY = "sk-test-0123456789abcdef"
RELU_SRC = open(os.path.join(TOP, "tests", "operators", "kb_relu.py")).read()
SOFTMAX_SRC = open(os.path.join(TOP, "tests", "operators", "kb_softmax.py")).read()
OPS = C.load_corpus(CORPUS)


def kernel_prompt(src=RELU_SRC, backend="cpu", extra=""):
    return ("Write a kernel for this operator.\nbackend: %s\n\n```python\n%s\n```\n%s"
            % (backend, src, extra))


def verify_prompt(code, kind="memory"):
    return ("You are the %s verifier. Review the kernel below.\n\n```cpp\n%s\n```\n\n"
            "Finish your answer with one line: VERDICT: PASS or VERDICT: FAIL." % (kind, code))


REWRITE_PROMPT = ("Rewrite the prompt sections below from these failures: unwritten_output, "
                  "precision.\n\n## strategies\nvectorise\n\n## pitfalls\nnone yet\n\n"
                  "## analysis\nlook at the checks\n\nAnswer with the rewritten sections under "
                  "the same headings.")


def entry(op, name):
    return next(e for e in OPS[op].entries if e.name == name)


def text_of(provider, body):
    if provider == "openai":
        return body["choices"][0]["message"]["content"]
    return "".join(b["text"] for b in body["content"] if b["type"] == "text")


@pytest.fixture
def sim(tmp_path):
    s = LLMSim(api_key=KEY, seed=7, log=str(tmp_path / "llm.log")).start()
    s.log_path = str(tmp_path / "llm.log")
    yield s
    s.stop()


# --- protocols ---

def test_openai_reply_shape_and_usage(sim):
    prompt = kernel_prompt()
    st, h, body = sim.chat(prompt, model="gpt-sim", temperature=0.2, max_tokens=4000)
    assert st == 200, body
    assert body["object"] == "chat.completion" and body["model"] == "gpt-sim"
    assert body["id"].startswith("chatcmpl-") and h["x-request-id"].startswith("req_")
    ch = body["choices"][0]
    assert ch["index"] == 0 and ch["message"]["role"] == "assistant"
    assert ch["finish_reason"] == "stop"
    text = ch["message"]["content"]
    u = body["usage"]
    assert u["prompt_tokens"] == (len(prompt) + 3) // 4
    assert u["completion_tokens"] == (len(text) + 3) // 4
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    # also without /v1, and with a system message counted in the prompt
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": prompt}]
    st, _, body = sim.chat(msgs, path="/chat/completions")
    assert st == 200
    assert body["usage"]["prompt_tokens"] == (len("be brief\n" + prompt) + 3) // 4


def test_openai_reasoning_tokens_are_billed(sim):
    st, _, body = sim.chat(kernel_prompt(), reasoning_effort="high")
    assert st == 200
    u = body["usage"]
    assert u["completion_tokens_details"]["reasoning_tokens"] == 1024
    text = body["choices"][0]["message"]["content"]
    assert u["completion_tokens"] == (len(text) + 3) // 4 + 1024


def test_anthropic_reply_shape_thinking_and_truncation(sim):
    st, h, body = sim.messages(kernel_prompt(), model="claude-sim", system="you write kernels")
    assert st == 200, body
    assert body["type"] == "message" and body["role"] == "assistant"
    assert body["model"] == "claude-sim" and body["id"].startswith("msg_")
    assert body["stop_reason"] == "end_turn" and "request-id" in h
    assert set(body["usage"]) >= {"input_tokens", "output_tokens"}
    # extended thinking: a thinking block before the text, billed as output
    st, _, body = sim.messages(kernel_prompt(), max_tokens=8000,
                               thinking={"type": "enabled", "budget_tokens": 2048})
    assert st == 200, body
    kinds = [b["type"] for b in body["content"]]
    assert kinds[0] == "thinking" and "text" in kinds
    # max_tokens cuts the reply: a truncated reply, stop_reason max_tokens
    st, _, body = sim.messages(kernel_prompt(), max_tokens=10)
    assert st == 200
    assert body["stop_reason"] == "max_tokens"
    assert len(text_of("anthropic", body)) <= 40
    st, _, body = sim.chat(kernel_prompt(), max_completion_tokens=5)
    assert body["choices"][0]["finish_reason"] == "length"
    assert len(body["choices"][0]["message"]["content"]) <= 20


def test_auth_openai(sim):
    st, _, body = sim.chat("hi", key="")
    assert st == 401
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error" and "didn't provide an API key" in err["message"]
    st, _, body = sim.chat("hi", key="sk-wrong-key-0000000000")
    assert st == 401 and body["error"]["code"] == "invalid_api_key"
    assert "sk-wrong-key-0000000000" not in body["error"]["message"]  # masked
    st, _, _ = sim.chat("hi")
    assert st == 200
    # no --api-key: anything goes
    with LLMSim() as open_sim:
        assert open_sim.chat("hi", key="")[0] == 200


def test_auth_and_headers_anthropic(sim):
    st, _, body = sim.messages("hi", key=False)
    assert st == 401
    assert body["type"] == "error" and body["error"]["type"] == "authentication_error"
    assert body["error"]["message"] == "x-api-key header is required"
    st, _, body = sim.messages("hi", key="nope")
    assert st == 401 and body["error"]["message"] == "invalid x-api-key"
    st, _, body = sim.messages("hi", version=None)
    assert st == 400 and body["error"]["type"] == "invalid_request_error"
    assert "anthropic-version" in body["error"]["message"]
    st, _, body = sim.messages("hi", max_tokens=None)
    assert st == 400 and body["error"]["message"] == "max_tokens: Field required"


@pytest.mark.parametrize("kw,status,needle", [
    ({"messages": []}, 400, "empty array"),
    ({"temperature": 3}, 400, "decimal above maximum value"),
    ({"max_tokens": 0}, 400, "integer below minimum value"),
    ({"frobnicate": 1}, 400, "Unrecognized request argument supplied: frobnicate"),
    ({"reasoning_effort": "extreme"}, 400, "Supported values are"),
    ({"stream": True}, 400, "does not stream"),
    ({"model": ""}, 400, "you must provide a model parameter"),
])
def test_openai_validation(sim, kw, status, needle):
    body = {"model": "sim", "messages": [{"role": "user", "content": "hi"}]}
    body.update(kw)
    st, _, out = sim._json("POST", "/v1/chat/completions", body,
                           {"Authorization": "Bearer " + KEY})
    assert st == status and needle in out["error"]["message"], out
    assert out["error"]["type"] == "invalid_request_error"


def test_openai_bad_json_and_roles(sim):
    hdr = {"Authorization": "Bearer " + KEY, "Content-Type": "application/json"}
    st, _, raw = sim.http("POST", "/v1/chat/completions", b"{not json", hdr)
    assert st == 400 and "could not parse the JSON body" in json.loads(raw)["error"]["message"]
    st, _, out = sim._json("POST", "/v1/chat/completions",
                           {"model": "m", "messages": [{"role": "wizard", "content": "x"}]}, hdr)
    assert st == 400 and out["error"]["param"] == "messages[0].role"
    assert out["error"]["code"] == "invalid_value"
    st, _, out = sim._json("POST", "/v1/chat/completions",
                           {"model": "m", "messages": [{"role": "user"}]}, hdr)
    assert st == 400 and out["error"]["code"] == "missing_required_parameter"
    st, _, out = sim._json("POST", "/v1/nothing", {}, hdr)
    assert st == 404 and out["error"]["message"] == "Invalid URL (POST /v1/nothing)"


@pytest.mark.parametrize("kw,needle", [
    ({"messages": [{"role": "system", "content": "x"}]}, 'Unexpected role "system"'),
    ({"messages": []}, "at least one message"),
    ({"temperature": 1.5}, "temperature: Input should be less than or equal to 1"),
    ({"thinking": {"type": "enabled", "budget_tokens": 100}}, "greater than or equal to 1024"),
    ({"thinking": {"type": "enabled", "budget_tokens": 5000}}, "must be greater than"),
    ({"thinking": {"type": "enabled", "budget_tokens": 1024}, "temperature": 0.5,
      "max_tokens": 4096}, "`temperature` may only be set to 1"),
    ({"top_k": -1}, "top_k"),
    ({"nonsense": True}, "nonsense: Extra inputs are not permitted"),
    ({"messages": [{"role": "user", "content": ""}]}, "non-empty content"),
])
def test_anthropic_validation(sim, kw, needle):
    body = {"model": "sim", "max_tokens": 4096, "messages": [{"role": "user", "content": "hi"}]}
    body.update(kw)
    st, _, out = sim._json("POST", "/v1/messages", body,
                           {"x-api-key": KEY, "anthropic-version": "2023-06-01"})
    assert st == 400, out
    assert out["type"] == "error" and out["error"]["type"] == "invalid_request_error"
    assert needle in out["error"]["message"], out


# --- faults ---

def test_fault_statuses_in_each_providers_shape(sim):
    sim.faults({"status": 429, "retry_after": "1"}, {"status": 429, "retry_after": 2},
               {"status": 500}, {"status": 503}, {"status": 529}, {"status": 502})
    st, h, body = sim.chat("hi")
    assert st == 429 and h["retry-after"] == "1"
    assert body["error"]["code"] == "rate_limit_exceeded"
    st, h, body = sim.messages("hi")
    assert st == 429 and h["retry-after"] == "2" and body["error"]["type"] == "rate_limit_error"
    st, h, body = sim.messages("hi")
    assert st == 500 and body["error"]["type"] == "api_error" and "retry-after" not in h
    st, _, body = sim.chat("hi")
    assert st == 503 and body["error"]["type"] == "server_error"
    st, _, body = sim.messages("hi")
    assert st == 529 and body["error"] == {"type": "overloaded_error", "message": "Overloaded"}
    st, h, raw = sim.http("POST", "/v1/chat/completions",
                          {"model": "m", "messages": [{"role": "user", "content": "x"}]},
                          {"Authorization": "Bearer " + KEY})
    assert st == 502 and h["content-type"].startswith("text/html") and b"Bad Gateway" in raw
    assert sim.chat("hi")[0] == 200  # the FIFO is drained
    assert sim.stats()["faults"] == 6


def test_fault_body_empty_truncate_delay_drop(sim):
    sim.faults({"body": "{not json"}, {"empty": True}, {"empty": True}, {"truncate": True},
               {"delay_ms": 300}, {"drop": True})
    st, _, raw = sim.http("POST", "/v1/chat/completions",
                          {"model": "m", "messages": [{"role": "user", "content": "x"}]},
                          {"Authorization": "Bearer " + KEY})
    assert st == 200 and raw == b"{not json"
    st, _, body = sim.chat(kernel_prompt())
    assert st == 200 and body["choices"][0]["message"]["content"] == ""
    assert body["usage"]["completion_tokens"] == 0
    st, _, body = sim.messages(kernel_prompt())
    assert st == 200 and body["content"] == [] and body["usage"]["output_tokens"] == 0
    st, _, body = sim.chat(kernel_prompt())
    assert st == 200 and body is None  # half a JSON document
    t = time.time()
    assert sim.chat("hi")[0] == 200
    assert time.time() - t >= 0.3
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
        sim.chat("hi")
    assert sim.chat("hi")[0] == 200
    statuses = [r["status"] for r in sim.requests()]
    assert statuses == [200, 200, 200, 200, 200, 0, 200]


def test_fault_count_purpose_provider_and_fifo(sim):
    sim.faults({"status": 503, "count": 2}, {"status": 500, "purpose": "verify"},
               {"status": 429, "provider": "anthropic"})
    assert len(sim.pending_faults()) == 3
    assert sim.chat(kernel_prompt())[0] == 503
    assert sim.chat(kernel_prompt())[0] == 503
    assert sim.chat(kernel_prompt())[0] == 200          # not verify, not anthropic
    assert sim.messages(kernel_prompt())[0] == 429      # the anthropic one
    code = entry("kb_relu", "fast_omp_simd").code
    assert sim.chat(verify_prompt(code))[0] == 500
    assert sim.pending_faults() == []
    with pytest.raises(SimControlError) as e:
        sim.faults({"stauts": 500})
    assert e.value.status == 400
    sim.faults({"status": 500})
    sim.control("DELETE", "faults")
    assert sim.chat("hi")[0] == 200


def test_random_faults_are_seeded():
    def run(seed):
        with LLMSim(seed=seed, fault_rate=0.5, fault_kinds="429,500,empty") as s:
            out = []
            for _ in range(40):
                st, _, body = s.chat("hi")  # no operator: a non-empty prose answer
                out.append("empty" if st == 200 and body["choices"][0]["message"]["content"] == ""
                           else st)
            return out
    a, b, c = run(3), run(3), run(4)
    assert a == b and a != c
    faults = [x for x in a if x != 200]
    assert 8 <= len(faults) <= 32 and {429, 500, "empty"} == set(faults)


# --- script ---

def test_script_fifo_before_corpus(sim):
    sim.script("first", {"text": "for a verifier\nVERDICT: FAIL", "purpose": "verify"}, "second")
    assert text_of("openai", sim.chat(kernel_prompt())[2]) == "first"
    code = entry("kb_relu", "fast_omp_simd").code
    st, _, body = sim.messages(verify_prompt(code))
    assert text_of("anthropic", body).endswith("VERDICT: FAIL")  # the scripted one, not PASS
    assert text_of("openai", sim.chat(kernel_prompt())[2]) == "second"
    sim.chat(kernel_prompt())  # the FIFO is empty: the corpus answers
    assert sim.control("GET", "script")["replies"] == []
    recs = sim.requests()
    assert [r["scripted"] for r in recs] == [True, True, True, False]
    assert sim.stats()["scripted"] == 3


def test_faults_come_before_the_script(sim):
    sim.script("canned")
    sim.faults({"status": 503})
    assert sim.chat("hi")[0] == 503
    assert text_of("openai", sim.chat("hi")[2]) == "canned"


# --- stats, log, reset ---

def test_stats_and_log(sim):
    code = entry("kb_relu", "unwritten").code
    sim.chat(kernel_prompt())
    sim.messages(kernel_prompt(SOFTMAX_SRC))
    sim.chat(verify_prompt(code))
    sim.chat(REWRITE_PROMPT)
    sim.chat("hi", key="bad")
    st = sim.stats()
    assert st["requests"] == 5
    assert st["by_path"] == {"/v1/chat/completions": 4, "/v1/messages": 1}
    assert st["by_status"] == {"200": 4, "401": 1}
    assert st["by_purpose"] == {"kernel": 3, "verify": 1, "rewrite": 1}
    recs = read_log(sim.log_path)
    assert len(recs) == 5 and [r["seq"] for r in recs] == [1, 2, 3, 4, 5]
    assert recs[0]["operator"] == "kb_relu" and recs[0]["entry"]
    assert recs[1]["operator"] == "kb_softmax" and recs[1]["provider"] == "anthropic"
    assert recs[2]["purpose"] == "verify" and recs[2]["entry"] == "unwritten"
    assert recs[2]["verdict"] == "FAIL" and recs[2]["verifier"] == "memory"
    assert recs[4]["status"] == 401 and "error" in recs[4]
    ok = [r for r in recs if r["status"] == 200]
    assert st["prompt_tokens"] == sum(r["prompt_tokens"] for r in ok)
    assert st["completion_tokens"] == sum(r["completion_tokens"] for r in ok)
    assert sum(st["by_entry"].values()) == 2
    sim.reset()
    st = sim.stats()
    assert st["requests"] == 0 and st["by_purpose"] == {}
    assert sim.requests() == []
    sim.chat("hi")
    assert read_log(sim.log_path)[-1]["seq"] == 6  # seq never restarts; the file keeps all


def test_concurrent_requests_are_all_counted(sim):
    def one(i):
        return (sim.chat if i % 2 else sim.messages)(kernel_prompt())[0]
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        statuses = list(ex.map(one, range(40)))
    assert statuses == [200] * 40
    st = sim.stats()
    assert st["requests"] == 40 and sum(st["by_entry"].values()) == 40
    # 40 draws over 26 entries: one full permutation plus 14 of the next
    assert set(st["by_entry"]) == {"kb_relu/" + e.name for e in OPS["kb_relu"].entries}


# --- classification ---

def test_verifier_verdicts_follow_the_manifest(sim):
    for op in ("kb_relu", "kb_softmax_cuda"):
        for e in OPS[op].entries:
            if not e.code:
                continue
            for kind in C.VERIFIER_KINDS:
                body = sim.chat(verify_prompt(e.code, kind))[2]
                text = text_of("openai", body)
                assert text.rstrip().splitlines()[-1] == "VERDICT: " + e.verdict_for(kind), \
                    (op, e.name, kind)
    # per-verifier verdicts differ where the manifest says so
    oob = entry("kb_relu", "out_of_bounds")
    assert oob.verdict_for("memory") == "FAIL" and oob.verdict_for("numerics") == "PASS"
    # an unknown kernel passes
    text = text_of("openai", sim.chat(verify_prompt("int kb_forward() { return 0; }"))[2])
    assert text.rstrip().endswith("VERDICT: PASS")
    # a rendered template point (defines prepended) is still recognised
    t = entry("kb_relu", "tuned_template").code
    rendered = "#define KB_P_THREADS 2\n#define KB_P_BLOCK 1024\n" + t
    rec_before = len(sim.requests())
    sim.chat(verify_prompt(rendered))
    assert sim.requests()[rec_before]["entry"] == "tuned_template"


def test_verifier_noise_flips_some_verdicts():
    with LLMSim(seed=1, verifier_noise=0.5) as s:
        flipped = 0
        for e in OPS["kb_relu"].entries:
            if e.code:
                text = text_of("openai", s.chat(verify_prompt(e.code, "numerics"))[2])
                flipped += not text.rstrip().endswith(e.verdict_for("numerics"))
        assert 3 <= flipped <= 18


def test_rewrite_reply_has_the_three_sections(sim):
    text = text_of("openai", sim.chat(REWRITE_PROMPT)[2])
    heads = re.findall(r"^## (\w+)$", text, re.M)
    assert heads == ["strategies", "pitfalls", "analysis"]
    assert "poisons outputs" in text and "fp16/bf16" in text  # from the named checks
    for part in re.split(r"^## \w+$", text, flags=re.M)[1:]:
        assert part.strip() and len(part) < 8192
    # without the word "rewrite" it is a kernel request
    plain = REWRITE_PROMPT.replace("Rewrite", "Use").replace("rewritten", "new")
    assert C.classify(plain) == "kernel"


def test_template_request_gets_a_tunable_kernel(sim):
    prompt = kernel_prompt(extra="Rewrite the kernel with tunable parameters, one line "
                                 "`// kb-tune NAME: V1 V2 ...` per parameter.")
    assert C.classify(prompt) == "template"
    text = text_of("openai", sim.chat(prompt)[2])
    assert "// kb-tune KB_P_THREADS:" in text
    assert sim.requests()[-1]["purpose"] == "template"


PROMPTS = os.path.join(TOP, "bot", "search", "prompts")


def _render(name, cuda, code):
    """A bot prompt template (bot/search/prompts) with plausible values."""
    with open(os.path.join(PROMPTS, name)) as f:
        t = f.read()
    t = re.sub(r"\{\{#(\w+)\}\}.*?\{\{/\1\}\}", "", t, flags=re.S)
    values = {"language": "CUDA C++" if cuda else "C++ (OpenMP)",
              "lang_tag": "cuda" if cuda else "cpp", "file_kind": ".cu" if cuda else ".cpp",
              "device": "NVIDIA H200" if cuda else "cpu (2 cores)",
              "operator_source": RELU_SRC, "candidate_source": code, "parent_source": code,
              "diagnoses": "- unwritten_output: 12 elements never written",
              "strategies": "vectorise", "pitfalls": "guard tails", "analysis": "read figures"}
    return re.sub(r"\{\{(\w+)\}\}", lambda m: values.get(m.group(1), "x"), t)


@pytest.mark.parametrize("cuda", [False, True])
def test_the_bots_prompts_are_classified(cuda):
    """The search's own prompt templates reach the right branch of the
    simulator (a test that fails when either side changes)."""
    if not os.path.isdir(PROMPTS):
        pytest.skip("bot/search/prompts not present")
    op = "kb_relu_cuda" if cuda else "kb_relu"
    code = entry(op, "unwritten").code
    want = {"verify_compile.md": "verify", "verify_numerics.md": "verify",
            "verify_memory.md": "verify", "meta_rewrite.md": "rewrite",
            "templatize.md": "template", "translate.md": "kernel", "mutate.md": "kernel",
            "repair.md": "kernel", "crossover.md": "kernel"}
    for name, purpose in want.items():
        if not os.path.exists(os.path.join(PROMPTS, name)):
            continue
        text = _render(name, cuda, code)
        assert C.classify(text) == purpose, name
        if purpose == "verify":
            assert C.verifier_kind(text) == name[len("verify_"):-3], name
        if purpose in ("kernel", "template"):
            assert C.prompt_backend(text, "auto") == ("cuda" if cuda else "cpu"), name
    with LLMSim(seed=1) as s:
        s.chat(_render("verify_memory.md", cuda, code))
        s.chat(_render("translate.md", cuda, code))
        recs = s.requests()
    assert recs[0]["entry"] == "unwritten" and recs[0]["verdict"] == "FAIL"
    assert recs[1]["operator"] == op


def test_kernel_requests_pick_operator_and_backend(sim):
    sim.chat(kernel_prompt(SOFTMAX_SRC, "cuda"))
    sim.chat(kernel_prompt(SOFTMAX_SRC, "cpu"))
    sim.chat(kernel_prompt(RELU_SRC, "cuda"))
    sim.chat("Write a CUDA kernel for\n```python\nreturn torch.relu(x)\n```\n"
             "Like this example: __global__ void k() {}")
    sim.chat("Write a kernel for some operator nobody knows.")
    recs = sim.requests()
    assert [r["operator"] for r in recs] == ["kb_softmax_cuda", "kb_softmax", "kb_relu_cuda",
                                            "kb_relu_cuda", None]
    assert recs[-1]["entry"] is None
    assert C.extract_kernel(text_of("openai", sim.chat("unknown operator")[2])) is None
    with LLMSim(backend="cuda") as s:
        s.chat(kernel_prompt(RELU_SRC, "cpu"))
        assert s.requests()[0]["operator"] == "kb_relu_cuda"


def test_answers_are_deterministic_per_seed():
    def names(seed, n=30):
        with LLMSim(seed=seed) as s:
            for i in range(n):
                s.chat(kernel_prompt() if i % 3 else kernel_prompt(SOFTMAX_SRC))
            return [(r["operator"], r["entry"]) for r in s.requests()]
    a, b, c = names(11), names(11), names(12)
    assert a == b and a != c


@pytest.mark.parametrize("op", sorted(OPS))
def test_every_entry_proposed_within_n_requests(op):
    o = OPS[op]
    src = open(os.path.join(TOP, o.operator)).read()
    with LLMSim(seed=5) as s:
        for _ in range(len(o.entries)):
            st, _, body = s.chat(kernel_prompt(src, o.backend))
            assert st == 200
        got = [r["entry"] for r in s.requests()]
    assert sorted(got) == sorted(e.name for e in o.entries)
    # the reply is the entry's text, byte for byte
    assert body["choices"][0]["message"]["content"] == entry(op, got[-1]).text


def test_vary_makes_reproposals_new_kernels(tmp_path):
    o = OPS["kb_relu"]
    n = len(o.entries)
    with LLMSim(seed=4, vary=True) as s:
        texts = [text_of("openai", s.chat(kernel_prompt())[2]) for _ in range(2 * n)]
        recs = s.requests()
        first = {r["entry"]: t for r, t in zip(recs[:n], texts[:n])}
        for r, t in zip(recs[n:], texts[n:]):
            e = entry("kb_relu", r["entry"])
            if e.code:
                assert t != first[e.name] and C.variant_line(1) in C.extract_kernel(t)
                assert r["variant"] == 1
            else:
                assert t == first[e.name]
        varied = next(t for r, t in zip(recs[n:], texts[n:]) if r["entry"] == "unwritten")
        body = s.chat(verify_prompt(C.extract_kernel(varied)))[2]
        assert text_of("openai", body).rstrip().endswith("VERDICT: FAIL")
    if shutil.which("g++"):
        src = tmp_path / "v.cpp"
        src.write_text(C.extract_kernel(varied))
        p = subprocess.run(["g++", "-fsyntax-only", "-fopenmp", "-I",
                            os.path.join(TOP, "verifier", "include"), str(src)],
                           capture_output=True, text=True)
        assert p.returncode == 0, p.stderr


def test_only_restricts_the_draw():
    with LLMSim(seed=2, only=["right"]) as s:
        for _ in range(10):
            s.chat(kernel_prompt())
        assert {r["kind"] for r in s.requests()} == {"right"}
        s.only(["crash", "malformed_unclosed"])
        for _ in range(4):
            s.chat(kernel_prompt())
        assert {r["entry"] for r in s.requests()[10:]} == {"crash", "malformed_unclosed"}
        assert len(s.corpus()) == sum(len(o.entries) for o in OPS.values())


def test_command_line_port_file_log_and_sigterm(tmp_path):
    port_file = str(tmp_path / "port")
    log = str(tmp_path / "sim.log")
    s = LLMSim.spawn(port_file, ["--api-key", KEY, "--seed", "3", "--log", log,
                                 "--backend", "cpu"])
    try:
        assert open(port_file).read().strip() == str(s.port)
        assert not [f for f in os.listdir(tmp_path) if ".tmp." in f]
        s.api_key = KEY
        assert s.chat(kernel_prompt())[0] == 200
        assert s.messages(kernel_prompt(), key="x")[0] == 401
        proc = s.proc
    finally:
        s.stop()
    assert proc.returncode == 0
    recs = read_log(log)
    assert [r["status"] for r in recs] == [200, 401] and recs[0]["entry"]


def test_command_line_rejects_a_bad_corpus(tmp_path):
    p = subprocess.run([sys.executable, os.path.join(SIM_DIR, "llm_sim.py"), "--corpus",
                        str(tmp_path), "--port-file", str(tmp_path / "p")],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "has no manifest.json" in p.stderr
    assert not os.path.exists(tmp_path / "p")


# --- the corpus itself ---

def _tparams(code):
    """kb-tune parameters as bot/search/extract.h defines them."""
    out = {}
    for m in re.finditer(r"^\s*//\s*kb-tune\s+([A-Za-z_]\w*)\s*:\s*(.*)$", code, re.M):
        name, vals = m.group(1), m.group(2).split()
        assert name not in out and 1 <= len(vals) <= 16
        assert all(re.fullmatch(r"-?\d+", v) for v in vals)
        assert re.search(r"#ifndef %s\n#define %s %s\n#endif" % (name, name, vals[0]), code), name
        out[name] = vals
    assert len(out) <= 8
    return out


def test_corpus_manifests_cover_every_kind():
    assert {"kb_relu", "kb_softmax", "kb_relu_cuda", "kb_softmax_cuda"} <= set(OPS)
    for key, op in OPS.items():
        assert os.path.isfile(os.path.join(TOP, op.operator)), op.operator
        with open(os.path.join(TOP, op.operator)) as f:
            assert op.match in f.read(), key
        kinds = {e.kind for e in op.entries}
        assert kinds == set(C.KINDS), (key, kinds)
        assert len([e for e in op.entries if e.kind == "right"]) >= 2
        assert len([e for e in op.entries if e.kind == "wrong"]) >= 3
        assert any(e.code and "kb-tune" in e.code for e in op.entries), key
        for e in op.entries:
            if e.kind in ("right", "wrong", "nocompile"):
                assert e.code, (key, e.name)
            else:
                assert e.code is None, (key, e.name)
            if e.kind == "empty":
                assert not e.text.strip()
            if e.kind == "right":
                assert "kb_forward" in e.code and e.verdict == "PASS"
            if e.code and "kb-tune" in e.code:
                assert _tparams(e.code)
            if e.duplicate_of:
                dup = entry(key, e.duplicate_of)
                assert e.code != dup.code  # differs in layout and comments only
    relu = {e.expect for e in OPS["kb_relu"].entries if e.kind == "wrong"}
    assert {"unwritten_output", "out_of_bounds", "input_mutation", "cached_result", "shape",
            "precision", "nondeterminism", "crash", "kernel_error", "static",
            "correctness"} <= relu
    cuda = {e.expect for e in OPS["kb_relu_cuda"].entries if e.kind == "wrong"}
    assert {"unwritten_output", "out_of_bounds", "input_mutation", "cached_result", "shape",
            "precision", "nondeterminism", "crash", "kernel_error", "static"} <= cuda
    # a reply with two blocks, one without prose
    relu_e = OPS["kb_relu"].entries
    assert any(len(C.code_blocks(e.text)) == 2 for e in relu_e)
    assert any(e.text.lstrip().startswith(("```", "~~~")) and e.code for e in relu_e)


def _cache_dir():
    base = os.path.dirname(os.environ["KB_BIN"]) if os.environ.get("KB_BIN") else \
        tempfile.gettempdir()
    d = os.path.join(base, "test-cache", "llm_corpus")
    os.makedirs(d, exist_ok=True)
    return d


def _abi_hash():
    h = hashlib.sha256()
    with open(os.path.join(TOP, "verifier", "include", "kernelbot_abi.h"), "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def _compile(cmd_base, code, suffix, cache, tag):
    """(ok, log, symbols) of compiling code; cached by content and command."""
    key = hashlib.sha256(("%s\0%s\0%s\0%s" % (" ".join(cmd_base), tag, _abi_hash(), code))
                         .encode()).hexdigest()[:32]
    memo = os.path.join(cache, key + ".json")
    if os.path.exists(memo):
        with open(memo) as f:
            return tuple(json.load(f))
    work = tempfile.mkdtemp(dir=cache)
    try:
        src = os.path.join(work, "k" + suffix)
        with open(src, "w") as f:
            f.write(code + "\n")
        obj = os.path.join(work, "k.o")
        p = subprocess.run(cmd_base + [src, "-o", obj], capture_output=True, text=True,
                           timeout=300)
        syms = ""
        if p.returncode == 0 and shutil.which("nm"):
            syms = subprocess.run(["nm", "--defined-only", obj], capture_output=True,
                                  text=True).stdout
        out = (p.returncode == 0, p.stderr[-2000:], syms)
    finally:
        shutil.rmtree(work, True)
    with open(memo + ".tmp", "w") as f:
        json.dump(out, f)
    os.replace(memo + ".tmp", memo)
    return out


def _jobs(backend):
    jobs = []
    for key, op in OPS.items():
        if op.backend != backend:
            continue
        for e in op.entries:
            if not e.code:
                continue
            jobs.append((key, e, e.code))
            if "kb-tune" in e.code:  # the last value of every parameter too
                tp = _tparams(e.code)
                defs = "".join("#define %s %s\n" % (n, v[-1]) for n, v in tp.items())
                jobs.append((key, e, defs + e.code))
    return jobs


def _check_compiled(jobs, results):
    bad = []
    for (key, e, _), (ok, log, syms) in zip(jobs, results):
        if e.kind == "nocompile":
            if ok:
                bad.append("%s/%s compiled but must not" % (key, e.name))
        elif not ok:
            bad.append("%s/%s:\n%s" % (key, e.name, log))
        elif e.kind == "right" and syms and not re.search(r" T kb_forward$", syms, re.M):
            bad.append("%s/%s does not define kb_forward" % (key, e.name))
    assert not bad, "\n".join(bad)


def test_cpu_corpus_compiles():
    if not shutil.which("g++"):
        pytest.skip("g++ not on PATH")
    inc = ["-I", os.path.join(TOP, "verifier", "include")]
    if os.environ.get("KB_BIN"):
        inc += ["-I", os.path.join(os.path.dirname(os.environ["KB_BIN"]), "include")]
    cmd = ["g++", "-O1", "-std=c++17", "-fopenmp", "-fPIC", "-c"] + inc
    jobs = _jobs("cpu")
    cache = _cache_dir()
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        results = list(ex.map(lambda j: _compile(cmd, j[2], ".cpp", cache, "g++"), jobs))
    _check_compiled(jobs, results)


def test_cuda_corpus_compiles():
    nvcc = shutil.which("nvcc")
    if not nvcc:
        pytest.skip("nvcc not on PATH")
    ver = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    cmd = [nvcc, "-O3", "-std=c++17", "-arch=sm_90", "-c", "-I",
           os.path.join(TOP, "verifier", "include")]
    jobs = _jobs("cuda")
    cache = _cache_dir()
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        results = list(ex.map(lambda j: _compile(cmd, j[2], ".cu", cache, ver), jobs))
    _check_compiled(jobs, results)


def _verify(op_key, tmp):
    """kernelbot verify on every CPU kernel of op_key, one harness worker."""
    op = OPS[op_key]
    kdir = os.path.join(tmp, op_key)
    os.makedirs(kdir)
    names = []
    for e in op.entries:
        if e.code and "kb_forward" in e.code:
            with open(os.path.join(kdir, e.name + ".cpp"), "w") as f:
                f.write(e.code + "\n")
            names.append(e.name)
    cfg = os.path.join(tmp, "small.ini")
    with open(cfg, "w") as f:
        f.write("[harness]\nseeds = 2\nmax_configs = 6\n")
    ev = os.path.join(tmp, op_key + "-ev") + "/"
    cmd = [os.environ["KB_BIN"], "verify", "-c", cfg, os.path.join(TOP, op.operator)] + \
        [os.path.join(kdir, n + ".cpp") for n in names] + \
        ["--backend", "cpu", "--no-timing", "--json", ev]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    out = {}
    for n in names:
        path = os.path.join(ev, n + ".cpp.json")
        if os.path.exists(path):
            with open(path) as f:
                out[n] = json.load(f)
    return op, out, p


def test_cpu_corpus_earns_its_verdicts(tmp_path):
    """Right kernels verified, wrong and non-compiling ones rejected for the
    reason the manifest names, by the real bot and harness (seeds 2, at
    most 6 configs: the search may screen with less than the defaults)."""
    if not os.environ.get("KB_BIN") or not os.access(os.environ["KB_BIN"], os.X_OK):
        pytest.skip("needs the kernelbot binary (KB_BIN, set by tests/run.sh)")
    keys = [k for k, o in OPS.items() if o.backend == "cpu"]
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        runs = list(ex.map(lambda k: _verify(k, str(tmp_path / k)), keys))
    bad = []
    for op, evs, p in runs:
        for e in op.entries:
            if not e.code:
                continue
            if "kb_forward" not in e.code:  # the static check's missing_entry
                assert e.expect == "static", e.name
                continue
            ev = evs.get(e.name)
            if ev is None:
                bad.append("%s/%s: no evidence\n%s" % (op.key, e.name, p.stderr[-1500:]))
                continue
            checks = {r["check"] for r in ev.get("reasons") or []}
            if e.kind == "right" and ev["verdict"] != "verified":
                bad.append("%s/%s: %s %s" % (op.key, e.name, ev["verdict"], sorted(checks)))
            if e.kind != "right" and (ev["verdict"] != "rejected" or e.expect not in checks):
                bad.append("%s/%s: %s %s, expected %s" % (op.key, e.name, ev["verdict"],
                                                          sorted(checks), e.expect))
    assert not bad, "\n".join(bad)


def test_latency_counts_only_calls_the_client_waits_for(sim):
    """A call its client gave up (a deadline, a stop) stops counting as in flight at once,
    so a peak of calls in flight is the client's; one waited for counts until answered."""
    import socket
    sim.latency(3000)
    try:
        body = json.dumps({"model": "sim", "messages": [{"role": "user", "content": kernel_prompt()}]})
        s = socket.create_connection(("127.0.0.1", sim.port))
        s.sendall(("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                   "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                   % (KEY, len(body), body)).encode())
        for _ in range(100):
            if sim.stats()["in_flight"] == 1:
                break
            time.sleep(0.02)
        assert sim.stats()["in_flight"] == 1
        s.close()   # the client gives the call up
        for _ in range(50):   # well within the latency
            st = sim.stats()
            if st["in_flight"] == 0:
                break
            time.sleep(0.02)
        assert st["in_flight"] == 0 and st["abandoned"] == 1, st
        # a call waited for is answered after the latency and counted meanwhile
        with concurrent.futures.ThreadPoolExecutor(1) as ex:
            fut = ex.submit(sim.chat, kernel_prompt())
            for _ in range(100):
                if sim.stats()["in_flight"] == 1:
                    break
                time.sleep(0.02)
            assert sim.stats()["in_flight"] == 1
            status, _, _ = fut.result(timeout=30)
        assert status == 200 and sim.stats()["in_flight"] == 0
        assert sim.stats()["abandoned"] == 1 and sim.stats()["peak_in_flight"] == 1
    finally:
        sim.latency(0)
