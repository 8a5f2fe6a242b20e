"""The LLM simulator's brain: the corpus of canned replies, how a request is
classified (kernel, verify, rewrite), and what each gets as an answer.
Deterministic: the same seed and the same order of requests give the same
answers. Standard library only."""

import hashlib
import json
import os
import random
import re

KINDS = ("right", "wrong", "nocompile", "malformed", "empty")
VERDICTS = ("PASS", "FAIL")
SPEEDS = ("fast", "medium", "slow")
VERIFIER_KINDS = ("compile", "numerics", "memory")
SECTIONS = ("strategies", "pitfalls", "analysis")

DEFAULT_CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llm_corpus")

_FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})(.*)$")
_WS = re.compile(r"\s+")
_HEADING = {s: re.compile(r"^##[ \t]+%s[ \t]*$" % s, re.I | re.M) for s in SECTIONS}
_BACKEND = re.compile(r"\bbackend\s*[:=]\s*[`'\"]?(cuda|cpu)\b", re.I)


class CorpusError(Exception):
    pass


def code_blocks(text):
    """Fenced blocks of a reply as (info, body, closed) in order, CommonMark
    style: a fence of 3+ backticks or tildes, closed by a fence of the same
    character at least as long."""
    blocks = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info = m.group(1), m.group(2).strip()
        body = []
        i += 1
        closed = False
        while i < len(lines):
            c = _FENCE.match(lines[i])
            if c and c.group(1)[0] == fence[0] and len(c.group(1)) >= len(fence) \
                    and not c.group(2).strip():
                closed = True
                i += 1
                break
            body.append(lines[i])
            i += 1
        blocks.append((info, "\n".join(body), closed))
    return blocks


def extract_kernel(text):
    """The kernel of a reply, by bot/search/extract.h's rule (the block that
    defines kb_forward or PYBIND11_MODULE, the longest of those, else the
    longest); None when the reply has no usable block."""
    blocks = [b for b in code_blocks(text) if b[2] and b[1].strip()]
    if not blocks or any(not b[2] for b in code_blocks(text)):
        return None
    entry = [b for b in blocks if "kb_forward" in b[1] or "PYBIND11_MODULE" in b[1]]
    pick = max(entry or blocks, key=lambda b: len(b[1]))
    return pick[1]


def normalise(code):
    return _WS.sub(" ", code).strip()


def stable_hash(*parts):
    h = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(h[:8], "big")


class Entry:
    def __init__(self, op, spec, text):
        self.op = op
        self.name = spec["name"]
        self.file = spec["file"]
        self.kind = spec["kind"]
        self.expect = spec.get("expect")
        self.verdict = spec["verdict"]
        self.verdicts = spec.get("verdicts") or {}
        self.speed = spec.get("speed")
        self.duplicate_of = spec.get("duplicate_of")
        self.text = text
        self.code = extract_kernel(text)
        self.norm = normalise(self.code) if self.code else None

    def verdict_for(self, verifier_kind):
        return self.verdicts.get(verifier_kind, self.verdict)

    def describe(self):
        return {"name": self.name, "file": self.file, "kind": self.kind, "expect": self.expect,
                "verdict": self.verdict, "speed": self.speed, "operator": self.op.key,
                "backend": self.op.backend}


class Operator:
    def __init__(self, key, manifest, entries):
        self.key = key
        self.operator = manifest["operator"]
        self.match = manifest["match"]
        self.backend = manifest.get("backend", "cpu")
        self.entries = entries


def _check_manifest(path, m):
    where = "'%s'" % path
    for k in ("operator", "match", "entries"):
        if k not in m:
            raise CorpusError("manifest %s lacks '%s'" % (where, k))
    if m.get("backend", "cpu") not in ("cpu", "cuda"):
        raise CorpusError("manifest %s: backend must be cpu or cuda" % where)
    names = set()
    for e in m["entries"]:
        for k in ("name", "file", "kind", "verdict"):
            if k not in e:
                raise CorpusError("manifest %s: entry %r lacks '%s'" % (where, e.get("name"), k))
        if e["name"] in names:
            raise CorpusError("manifest %s: entry '%s' twice" % (where, e["name"]))
        names.add(e["name"])
        if e["kind"] not in KINDS:
            raise CorpusError("manifest %s: entry '%s' has kind '%s'" % (where, e["name"], e["kind"]))
        if e["verdict"] not in VERDICTS:
            raise CorpusError("manifest %s: entry '%s' has verdict '%s'"
                              % (where, e["name"], e["verdict"]))
        if e["kind"] == "right" and e.get("speed") not in SPEEDS:
            raise CorpusError("manifest %s: right entry '%s' needs a speed" % (where, e["name"]))
        if e["kind"] != "right" and not e.get("expect"):
            raise CorpusError("manifest %s: entry '%s' needs an expect" % (where, e["name"]))


def load_corpus(root):
    """Every <root>/<dir>/manifest.json -> {key: Operator}, key the dir name."""
    ops = {}
    if not os.path.isdir(root):
        raise CorpusError("corpus '%s' is not a directory" % root)
    for d in sorted(os.listdir(root)):
        path = os.path.join(root, d, "manifest.json")
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            m = json.load(f)
        _check_manifest(path, m)
        op = Operator(d, m, [])
        for spec in m["entries"]:
            with open(os.path.join(root, d, spec["file"]), encoding="utf-8") as f:
                op.entries.append(Entry(op, spec, f.read()))
        ops[d] = op
    if not ops:
        raise CorpusError("corpus '%s' has no manifest.json" % root)
    return ops


def prompt_text(system, messages):
    """All the text a model sees, in order (system first)."""
    parts = []

    def add(c):
        if isinstance(c, str):
            parts.append(c)
        elif isinstance(c, list):
            for b in c:
                if isinstance(b, dict) and isinstance(b.get("text"), str):
                    parts.append(b["text"])
    add(system)
    for m in messages:
        if isinstance(m, dict):
            add(m.get("content"))
    return "\n".join(parts)


def classify(text):
    """'verify', 'rewrite', 'template' or 'kernel' (README: how a request
    is classified)."""
    if "VERDICT: PASS" in text and "VERDICT: FAIL" in text:
        return "verify"
    if all(_HEADING[s].search(text) for s in SECTIONS) and re.search(r"rewrit", text, re.I):
        return "rewrite"
    if "kb-tune" in text and ("kb-tune NAME" in text or
                              re.search(r"tunable parameter", text, re.I)):
        return "template"
    return "kernel"


def verifier_kind(text):
    """The verifier a prompt asks for: the earliest of the words compile,
    numerics, memory in it (None when none appears)."""
    low = text.lower()
    best = None
    for kind, word in (("compile", "compil"), ("numerics", "numeric"), ("memory", "memory")):
        i = low.find(word)
        if i >= 0 and (best is None or i < best[0]):
            best = (i, kind)
    return best[1] if best else None


def prompt_backend(text, forced):
    """cpu or cuda: --backend, else a "backend: X" line, else the prompt's
    first line naming CUDA or OpenMP/CPU (the bot's prompts open with the
    language), else CUDA syntax anywhere."""
    if forced in ("cpu", "cuda"):
        return forced
    m = _BACKEND.search(text)
    if m:
        return m.group(1).lower()
    head = text.lstrip().split("\n", 1)[0][:400].lower()
    if "cuda" in head:
        return "cuda"
    if "openmp" in head or "cpu" in head:
        return "cpu"
    return "cuda" if ("__global__" in text or "<<<" in text) else "cpu"


_STRATEGIES = [
    "Vectorise the innermost loop; keep loads and stores contiguous.",
    "Split the work so every core (or block) gets an equal share.",
    "Fuse passes over the same data so each element is read once.",
    "Keep per-row state (max, sum) in registers; write each output once.",
    "Prefer a grid-stride loop over one thread per element for large sizes.",
    "Make tunable sizes explicit so an autotuner can pick them.",
    "Use the online max/sum recurrence for row-wise reductions.",
    "Hoist shape arithmetic out of the inner loop.",
]
_PITFALLS = {
    "unwritten_output": "Write every output element: the harness poisons outputs with NaN.",
    "out_of_bounds": "Never write past the output's numel: guard bands are checked.",
    "input_mutation": "Inputs are read-only; compute into the output or a local buffer.",
    "cached_result": "Never keep results between calls: inputs change every trial.",
    "shape": "Read every size from the tensors; never bake in the example's shape.",
    "precision": "Compute and store in float32; no fp16/bf16 rounding in fp32 tasks.",
    "nondeterminism": "The same inputs must give the same outputs on every call.",
    "nan_mismatch": "Propagate NaN exactly like torch (comparisons with NaN are false).",
    "correctness": "Check the formula against the reference on edge values.",
    "kernel_error": "Return 0 on success; check the argument counts the ABI gives.",
    "crash": "Check pointers and sizes before dereferencing; no null writes.",
    "static": "No threads, processes, file or environment access in a kernel.",
    "build": "Include kernelbot_abi.h and only standard headers; compile-check the syntax.",
    "timeout": "Every loop must terminate; no spinning on memory.",
}
_ANALYSIS = [
    "Compare each failure's check name with the construct that causes it.",
    "Rank kernels by geometric-mean speedup over all configs, not the largest one.",
    "When a kernel is memory bound, count bytes moved per element first.",
    "Read the build log's first error only; later ones usually follow from it.",
]


def variant_line(epoch):
    """An unused constant (valid C++ and CUDA) that makes a re-proposed kernel new."""
    return "static const int kb_sim_variant_%d = %d;" % (epoch, epoch)


def rewrite_reply(seed, n, text):
    """Rewritten meta-prompt sections: pitfalls for every harness check the
    prompt names, strategies and analysis drawn from (seed, n)."""
    rng = random.Random("rewrite/%s/%d" % (seed, n))
    seen = [c for c in _PITFALLS if re.search(r"\b%s\b" % c, text)]
    strategies = rng.sample(_STRATEGIES, 3)
    pitfalls = [_PITFALLS[c] for c in seen] or [_PITFALLS[rng.choice(sorted(_PITFALLS))]]
    analysis = rng.sample(_ANALYSIS, 2)
    lines = ["Here are the rewritten sections (revision %d)." % (n + 1), "", "## strategies"]
    lines += ["- " + s for s in strategies]
    lines += ["", "## pitfalls"] + ["- " + p for p in pitfalls[:8]]
    lines += ["", "## analysis"] + ["- " + a for a in analysis]
    return "\n".join(lines) + "\n"


def verify_reply(entry, vkind, verdict):
    if entry is None:
        why = "I see no problem in this kernel."
    elif verdict == "PASS":
        why = "The kernel reads its inputs only, writes every output element inside its " \
              "bounds, and computes in float32. It should %s." % (
                  "compile cleanly" if vkind == "compile" else "be correct")
    else:
        why = "This kernel has a problem the harness would catch (%s)." % (entry.expect or "bug")
    return "%s\n\nVERDICT: %s\n" % (why, verdict)


class Brain:
    """Answers model requests from the corpus. Not thread-safe: the server
    holds its lock around answer()."""

    def __init__(self, corpus_dir=None, seed=0, backend="auto", only=None, verifier_noise=0.0,
                 vary=False):
        self.corpus_dir = corpus_dir or DEFAULT_CORPUS
        self.ops = load_corpus(self.corpus_dir)
        self.seed = seed
        self.backend = backend
        self.verifier_noise = verifier_noise
        self.vary = vary
        self.only = None
        self.set_only(only)
        self.reset()

    def reset(self):
        self.kernel_count = {}
        self.template_count = {}
        self.rewrites = 0

    def set_only(self, only):
        """Restrict kernel answers to entries whose name or kind is listed."""
        self.only = set(only) if only else None

    def _entries(self, op):
        if not self.only:
            return op.entries
        return [e for e in op.entries if e.name in self.only or e.kind in self.only]

    def find_operator(self, text):
        backend = prompt_backend(text, self.backend)
        hits = [op for op in self.ops.values() if op.match in text]
        same = [op for op in hits if op.backend == backend]
        hits = same or hits
        # the longest match is the most specific operator
        return max(hits, key=lambda o: len(o.match)) if hits else None

    def entry_in(self, text):
        """The corpus entry whose kernel appears in text (the longest)."""
        norm = normalise(text)
        best = None
        for op in self.ops.values():
            for e in op.entries:
                if e.norm and e.norm in norm and (best is None or len(e.norm) > len(best.norm)):
                    best = e
        return best

    def draw(self, op):
        """(entry, epoch): entries of op in a seeded permutation per epoch,
        so every entry is proposed once in each run of len(entries) kernel
        requests."""
        entries = self._entries(op)
        if not entries:
            return None, 0
        k = self.kernel_count.get(op.key, 0)
        self.kernel_count[op.key] = k + 1
        epoch, pos = divmod(k, len(entries))
        perm = list(range(len(entries)))
        random.Random("draw/%s/%s/%d" % (self.seed, op.key, epoch)).shuffle(perm)
        return entries[perm[pos]], epoch

    def draw_template(self, op):
        """A kernel with kb-tune parameters (in turn), else a right one."""
        pool = [e for e in op.entries if e.code and "kb-tune" in e.code] or \
            [e for e in op.entries if e.kind == "right"]
        if not pool:
            return None
        k = self.template_count.get(op.key, 0)
        self.template_count[op.key] = k + 1
        return pool[k % len(pool)]

    def answer(self, purpose, text):
        """(reply text, info dict for the log)."""
        info = {"purpose": purpose}
        if purpose == "verify":
            e = self.entry_in(text)
            vkind = verifier_kind(text)
            verdict = e.verdict_for(vkind) if e else "PASS"
            if e and self.verifier_noise > 0:
                r = random.Random("noise/%s/%s/%s" % (self.seed, e.op.key, e.name)).random()
                if r < self.verifier_noise:
                    verdict = "FAIL" if verdict == "PASS" else "PASS"
            info.update(verifier=vkind, verdict=verdict,
                        operator=e.op.key if e else None, entry=e.name if e else None,
                        kind=e.kind if e else None)
            return verify_reply(e, vkind, verdict), info
        if purpose == "rewrite":
            n = self.rewrites
            self.rewrites += 1
            return rewrite_reply(self.seed, n, text), info
        op = self.find_operator(text)
        epoch = 0
        if purpose == "template":
            e = self.draw_template(op) if op else None
        else:
            e, epoch = self.draw(op) if op else (None, 0)
        if e is None:
            info.update(operator=op.key if op else None, entry=None)
            return ("I could not tell which operator you want a kernel for; please include "
                    "its PyTorch source.\n"), info
        info.update(operator=op.key, entry=e.name, kind=e.kind, expect=e.expect, speed=e.speed)
        if self.vary and epoch > 0 and e.code:
            # a new kernel to the search (its normalised hash differs), same behaviour
            info["variant"] = epoch
            return e.text.replace(e.code, "%s\n%s" % (e.code, variant_line(epoch)), 1), info
        return e.text, info
