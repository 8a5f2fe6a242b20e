"""Small copies of the examples, for the CPU backend and for tests.

The examples carry GPU sizes (4096 x 4096 and up). The harness always
evaluates a KernelBench file's own sizes and a robust-kbench folder's own
configs, whatever max_numel says (max_numel only caps the scaled variants),
and a 4096^3 fp32 matmul takes tens of seconds on a small CPU. This writes
copies with every size divided by FACTOR and nothing else changed:

    python3 examples/shrink.py OUTDIR [--factor 32] [NAME...]

gives OUTDIR/kernelbench/NAME.py and OUTDIR/robust-kbench/NAME/. A size is
a top-level `NAME = INT` of a KernelBench file, or an int value in a
robust-kbench config JSON, above 8 and not named like a hyper-parameter
(the harness's rule, verifier/harness/kernelbot_harness/configs.py). An odd size stays
odd, so odd-size configs keep testing tails. No torch needed.
"""
import argparse
import ast
import json
import os
import re
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
KERNELBENCH = os.path.join(HERE, "kernelbench")
ROBUST_KBENCH = os.path.join(HERE, "robust-kbench")
SMALL = 8
HYPER = re.compile(r"kernel|stride|pad|dilat|group|head|axis|layer|eps|seed"
                   r"|iter|step|top_?k|^k$|num_class", re.I)


def shrink_value(name, value, factor):
    """value // factor (at least 1), odd when value is odd; kept when small
    or a hyper-parameter."""
    if isinstance(value, bool) or not isinstance(value, int):
        return value
    if value <= SMALL or HYPER.search(name):
        return value
    v = max(1, value // factor)
    return v | 1 if value % 2 else v


def _size_assignments(tree):
    """Top-level `NAME = INT` nodes: (name, value node)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name) and \
                isinstance(node.value, ast.Constant) and \
                type(node.value.value) is int:
            yield node.targets[0].id, node.value


def shrink_kernelbench_source(src, factor):
    """(new source, {name: (old, new)}) with the size constants divided."""
    tree = ast.parse(src)
    lines = src.splitlines(keepends=True)
    changed = {}
    # right to left within a line, bottom to top: offsets stay valid
    edits = sorted(_size_assignments(tree), key=lambda e: (e[1].lineno, e[1].col_offset),
                   reverse=True)
    for name, node in edits:
        old = node.value
        new = shrink_value(name, old, factor)
        if new == old:
            continue
        if node.lineno != node.end_lineno:
            raise ValueError("constant '%s' spans lines" % name)
        i = node.lineno - 1
        line = lines[i]
        lines[i] = line[:node.col_offset] + str(new) + line[node.end_col_offset:]
        changed[name] = (old, new)
    return "".join(lines), changed


def shrink_config(cfg, factor):
    """A robust-kbench config object with every size in every config divided."""
    out = {}
    for key, configs in cfg.items():
        if isinstance(configs, list):
            out[key] = [{k: shrink_value(k, v, factor) for k, v in c.items()}
                        if isinstance(c, dict) else c for c in configs]
        else:
            out[key] = configs
    return out


def shrink_kernelbench(src_path, dst_path, factor):
    with open(src_path) as f:
        src, changed = shrink_kernelbench_source(f.read(), factor)
    with open(dst_path, "w") as f:
        f.write(src)
    return changed


def shrink_robust_kbench(src_dir, dst_dir, factor):
    """Copy the folder; config_*.json rewritten, the rest as is."""
    os.makedirs(dst_dir, exist_ok=True)
    for name in sorted(os.listdir(src_dir)):
        src = os.path.join(src_dir, name)
        if not os.path.isfile(src) or name.endswith(".pyc"):
            continue
        dst = os.path.join(dst_dir, name)
        if name.startswith("config_") and name.endswith(".json"):
            with open(src) as f:
                cfg = json.load(f)
            with open(dst, "w") as f:
                json.dump(shrink_config(cfg, factor), f, indent=2)
                f.write("\n")
        else:
            shutil.copyfile(src, dst)


def names():
    """Every example's name (each exists in both formats)."""
    return sorted(f[:-3] for f in os.listdir(KERNELBENCH) if f.endswith(".py"))


def shrink_all(out_dir, factor=32, only=None):
    """Write small copies of the examples (or of `only`) under out_dir;
    returns the names written."""
    todo = list(only) if only else names()
    kb_out = os.path.join(out_dir, "kernelbench")
    rk_out = os.path.join(out_dir, "robust-kbench")
    os.makedirs(kb_out, exist_ok=True)
    for name in todo:
        kb = os.path.join(KERNELBENCH, name + ".py")
        rk = os.path.join(ROBUST_KBENCH, name)
        if not os.path.isfile(kb) or not os.path.isdir(rk):
            raise ValueError("no example '%s'" % name)
        shrink_kernelbench(kb, os.path.join(kb_out, name + ".py"), factor)
        shrink_robust_kbench(rk, os.path.join(rk_out, name), factor)
    return todo


def main(argv):
    p = argparse.ArgumentParser(description="small copies of the examples")
    p.add_argument("out_dir")
    p.add_argument("--factor", type=int, default=32)
    p.add_argument("names", nargs="*")
    a = p.parse_args(argv)
    if a.factor < 1:
        p.error("factor must be at least 1")
    try:
        done = shrink_all(a.out_dir, a.factor, a.names)
    except (OSError, ValueError) as e:
        sys.stderr.write("shrink: %s\n" % e)
        return 1
    for n in done:
        print("%s/kernelbench/%s.py %s/robust-kbench/%s" % (a.out_dir, n, a.out_dir, n))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
