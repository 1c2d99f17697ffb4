#!/usr/bin/env python3
"""CTest `docs_paths`: every repository path the docs quote exists (docs that point nowhere mislead).

  scripts/check-doc-paths.py [ROOT]

Reads README.md and docs/*.md (not their subfolders, such as docs/results/,
which hold what runs wrote). The rule: a span in backticks is a path into the
repository when its first word (a command's arguments after it are ignored)
starts with one of PREFIXES, and then it must exist under ROOT:
- `{a,b}` braces are expanded, each alternative checked (`foo_{a,b}.jsonl`);
- a glob (`*`, `?`, `[...]`) must match at least one file or folder, and a
  placeholder in angle brackets (`tests/golden/<name>.ir`) is read as `*`;
- a trailing `/` names a folder; a trailing `:LINE` or `:NAME` is dropped;
- spans inside fenced code blocks (```) are read the same way.
Paths that a build or a run writes (BUILT, with why) count as there.
Exits 1 listing `file:line: path` for each one missing.
"""
import glob
import os
import re
import sys

PREFIXES = ("src/", "tests/", "scripts/", "bench/", "python/", "docs/", "data/", "examples/", ".ci/")

# Written by the build, not committed, yet worth quoting.
BUILT = {
    "python/mutwo/libmutwo_torch.so": "the extension, copied there by the build (src/torchext/CMakeLists.txt)",
}


def expand_braces(text):
    """`a_{x,y}.b` -> [`a_x.b`, `a_y.b`], nested and repeated braces included."""
    m = re.search(r"\{([^{}]*)\}", text)
    if not m:
        return [text]
    out = []
    for alt in m.group(1).split(","):
        out += expand_braces(text[:m.start()] + alt + text[m.end():])
    return out


def candidate(span):
    """The path a backticked span names, or None when it is not one."""
    word = span.strip().split()[0] if span.strip() else ""
    word = word.rstrip(".,;)")
    if word.startswith("./"):
        word = word[2:]
    if not word.startswith(PREFIXES):
        return None
    word = re.sub(r":[\w-]*$", "", word)  # src/x.cpp:120, tests/t.py:test_name
    return re.sub(r"<[^<>/]+>", "*", word)


def exists(root, path):
    if path in BUILT:
        return True
    full = os.path.join(root, path)
    if any(c in path for c in "*?["):
        return bool(glob.glob(full))
    return os.path.isdir(full) if path.endswith("/") else os.path.exists(full)


def documents(argv):
    """The repository's root (argv[1], else this script's parent) and its docs:
    README.md and docs/*.md, relative to the root (scripts/check-doc-lengths.py
    reads the same)."""
    root = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    return root, ["README.md"] + sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "*.md")))


def main():
    root, docs = documents(sys.argv)
    missing, checked = [], 0
    for doc in docs:
        with open(os.path.join(root, doc), encoding="utf-8") as f:
            lines = f.read().split("\n")
        for no, line in enumerate(lines, 1):
            for span in re.findall(r"`([^`]+)`", line):
                path = candidate(span)
                if path is None:
                    continue
                for p in expand_braces(path):
                    checked += 1
                    if not exists(root, p):
                        missing.append(f"{doc}:{no}: {p}" + (f" (in `{span}`)" if p != span else ""))
    if missing:
        print("\n".join(missing))
        print(f"docs_paths: {len(missing)} quoted path(s) missing: fix the doc, or the path")
        return 1
    print(f"docs_paths: {checked} quoted paths in {len(docs)} files, all there")
    return 0


if __name__ == "__main__":
    sys.exit(main())
