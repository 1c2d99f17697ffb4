#!/usr/bin/env python3
"""CTest `lengths`: no function over 150 lines and no file over 800 (so that each reads in one sitting).

  scripts/check-lengths.py [--all] [--limit N] [ROOT]

Scans src/ (*.cpp, *.h, *.cu), tests/ (*.cpp, *.h), python/mutwo/*.py, and
the Python under tests/ and bench/. Exits 1 listing `file:line name length`
for each function over FUNCTION_LIMIT lines and each file over FILE_LIMIT
lines that EXCEPTIONS below does not name; --all lists every function over
--limit (default 100, the size to aim for) without failing.

A function's length runs from the first line of its header (template line
included) to its closing brace or last statement, comments inside included.

Detectors (plain Python 3, no dependencies), good enough for this code base:
- C++: comments, string and character literals (raw strings too) and
  preprocessor lines are blanked; then a brace at namespace, class or
  `extern "C"` scope whose header (the text since the previous `;`, `{` or
  `}`) has a parenthesis and no `=` outside parentheses is a function body
  (TEST(...) and TORCH_LIBRARY(...) bodies count as functions; a brace
  inside parentheses is an argument, skipped). Class,
  struct, union, enum and namespace bodies are entered; any other brace at
  those scopes (an initializer) is skipped whole. A lambda inside a function
  counts toward that function.
- Python: the standard `ast` module; every def, nested ones included (an
  outer function's length includes its nested ones).
"""
import argparse
import ast
import os
import re
import sys

FUNCTION_LIMIT = 150
FILE_LIMIT = 800

# (path, function name) -> why it may stay long. Keep each to one line.
EXCEPTIONS = {
}
# path -> why the file may stay long.
FILE_EXCEPTIONS = {
}

CPP_SUFFIXES = (".cpp", ".h", ".cu")


def source_files(root):
    """The files the check reads, relative to ROOT, sorted."""
    out = []
    for top, suffixes in (("src", CPP_SUFFIXES), ("tests", CPP_SUFFIXES + (".py",)), ("bench", (".py",))):
        for d, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(x for x in dirs if x != "__pycache__" and not x.startswith("."))
            out += [os.path.relpath(os.path.join(d, f), root) for f in files if f.endswith(suffixes)]
    pkg = os.path.join(root, "python", "mutwo")
    out += [os.path.join("python", "mutwo", f) for f in os.listdir(pkg) if f.endswith(".py")]
    return sorted(out)


def blank_cpp(text):
    """TEXT with comments, literals and preprocessor lines replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    line_start = True  # only whitespace since the last newline
    while i < n:
        c = text[i]
        if line_start and c == "#":  # a preprocessor line, with its continuations
            j = i
            while j < n and text[j] != "\n":
                j = j + 2 if text[j] == "\\" and j + 1 < n else j + 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c == "/" and text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif c == "/" and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif c == "R" and text.startswith('R"', i) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
        elif c in "\"'":
            if c == "'" and i and text[i - 1].isalnum():  # a digit separator, 1'000
                out.append(c)
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j += 1
        else:
            out.append(c)
            if c == "\n":
                line_start = True
            elif not c.isspace():
                line_start = False
            i += 1
            continue
        out.append(re.sub(r"[^\n]", " ", text[i:j]))
        line_start = False
        i = j
    return "".join(out)


SCOPE_RE = re.compile(r"^(template\s*<.*>\s*)?(namespace|class|struct|union|enum)\b|^extern\s*$", re.S)


def depth0(header, chars):
    """Whether HEADER has one of CHARS outside parentheses, brackets and angle-free braces."""
    d = 0
    for c in header:
        if c in "([":
            d += 1
        elif c in ")]":
            d -= 1
        elif d == 0 and c in chars:
            return True
    return False


def function_name(header):
    """The name a function header declares: what precedes its parameter list."""
    h = re.sub(r"^\s*template\s*<[^{};]*?>\s*", "", header)
    m = re.match(r"\s*(TEST(_F|_P)?|TORCH_LIBRARY\w*)\s*\(([^)]*)\)", h)
    if m:
        return f"{m.group(1)}({re.sub(r'[ ]+', ' ', m.group(3).strip())})"
    m = re.search(r"(operator\s*(\(\)|[^\s(]+)|[~\w:]+)\s*\(", h)
    return m.group(1) if m else h.strip().split("\n")[0][:40]


def cpp_functions(text):
    """(first line, last line, name) of each function defined in C++ TEXT."""
    code = blank_cpp(text)
    line_of = [0] * (len(code) + 1)
    ln = 1
    for k, c in enumerate(code):
        line_of[k] = ln
        if c == "\n":
            ln += 1
    line_of[len(code)] = ln

    def matching(k):  # the index of the brace that closes the one at k
        d = 0
        for j in range(k, len(code)):
            if code[j] == "{":
                d += 1
            elif code[j] == "}":
                d -= 1
                if d == 0:
                    return j
        return len(code) - 1

    found = []
    header_start = 0
    k = 0
    while k < len(code):
        c = code[k]
        if c in ";}":
            header_start = k + 1
        elif c == "{":
            header = code[header_start:k]
            stripped = header.strip()
            # a class's access labels end the header too: "public:" before a member function
            stripped = re.sub(r"^(public|private|protected)\s*:(?!:)\s*", "", stripped)
            if stripped.count("(") != stripped.count(")"):
                k = matching(k)  # a brace inside parentheses: an argument, as a lambda's body
            elif SCOPE_RE.match(stripped) and not depth0(stripped, "("):
                header_start = k + 1  # enter the scope: its members are found as we go
            elif "(" in stripped and not depth0(stripped, "="):
                end = matching(k)
                first = header_start + (len(header) - len(header.lstrip()))
                found.append((line_of[first], line_of[end], function_name(stripped)))
                k, header_start = end, end + 1
            elif depth0(stripped, "=") and re.search(r"=\s*\[[^\]]*\]\s*(\([^)]*\))?[^;]*$", stripped):
                end = matching(k)  # a lambda at namespace scope: auto f = [](...) { ... };
                first = header_start + (len(header) - len(header.lstrip()))
                name = re.search(r"(\w+)\s*=", stripped)
                found.append((line_of[first], line_of[end], name.group(1) if name else "lambda"))
                k, header_start = end, end + 1
            else:  # an initializer at namespace or class scope
                k = matching(k)
                # the statement goes on to its ';'
        k += 1
    return found


def python_functions(text, path):
    tree = ast.parse(text, path)
    out = []

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                out.append((first, child.end_lineno, prefix + child.name))
                walk(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                walk(child, prefix + child.name + ".")
            else:
                walk(child, prefix)

    walk(tree, "")
    return out


def functions(path, text):
    return python_functions(text, path) if path.endswith(".py") else cpp_functions(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", nargs="?", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--all", action="store_true", help="list every function over --limit, and do not fail")
    ap.add_argument("--limit", type=int, default=100)
    args = ap.parse_args()
    root = os.path.abspath(args.root)

    failures, listed, used = [], [], set()
    nfiles = nfuncs = 0
    for path in source_files(root):
        with open(os.path.join(root, path), encoding="utf-8") as f:
            text = f.read()
        nfiles += 1
        lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        if lines > FILE_LIMIT:
            if path in FILE_EXCEPTIONS:
                used.add(path)
            else:
                failures.append(f"{path}:1 (file) {lines} lines, over {FILE_LIMIT}")
        for first, last, name in functions(path, text):
            nfuncs += 1
            length = last - first + 1
            if args.all and length > args.limit:
                listed.append((length, f"{path}:{first} {name} {length}"))
            if length > FUNCTION_LIMIT:
                if (path, name) in EXCEPTIONS:
                    used.add((path, name))
                else:
                    failures.append(f"{path}:{first} {name} {length} lines, over {FUNCTION_LIMIT}")
    if args.all:
        for _, text in sorted(listed, reverse=True):
            print(text)
        return 0
    stale = [e for e in list(EXCEPTIONS) + list(FILE_EXCEPTIONS) if e not in used]
    for e in stale:
        failures.append(f"exception {e} is no longer needed: remove it from scripts/check-lengths.py")
    if failures:
        print("\n".join(failures))
        print(f"lengths: {len(failures)} problem(s); split the function or file "
              "(aim for under 100 lines), or add an exception with its reason to scripts/check-lengths.py")
        return 1
    print(f"lengths: {nfiles} files, {nfuncs} functions, none over {FUNCTION_LIMIT} lines, "
          f"no file over {FILE_LIMIT} ({len(used)} listed exceptions)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
