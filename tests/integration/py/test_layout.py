"""
The source tree keeps the shape docs/ARCHITECTURE.md describes:

- the modules under src/ (one folder each) include each other without a
  circle, so each can be read and changed knowing only the ones below it;
- nothing below the command layer includes a src/cmd header (only src/cmd
  itself and src/sabled, the program on top);
- a module's private headers (anything but its public header `<m>/<m>.h`;
  every header of src/common is public) are included only inside the module
  (and by unit tests, which test internals on purpose);
- every module folder has a row in docs/ARCHITECTURE.md's module table and
  every row names a folder that exists;
- no source file is over 1,200 lines;
- no file under src/ but src/doc calls libbson's bson_append_value or
  bson_append_iter (or their BSON_APPEND_ macros), which cut a code value at
  an embedded NUL byte: values are copied with sbl_append_value and
  sbl_append_iter (src/doc/doc.h);
- every source path the docs name (`src/<m>/<file>.c|h`) exists;
- the measurement references (docs/BENCHMARKS.md, docs/audit.md) stay under 400
  lines: new figures replace old ones, the history lives in git.

The test reads files only: no server, well under a second.  Includes are
read from `#include "x/y.h"` lines, the project's only form.
"""
import os
import re

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SRC = os.path.join(ROOT, "src")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_0-9]+)/([a-z_0-9]+\.h)"', re.M)
MAX_LINES = 1200


def modules():
    return sorted(d for d in os.listdir(SRC) if os.path.isdir(os.path.join(SRC, d)))


def sources(top, exts=(".c", ".h")):
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if d not in ("node_modules", "corpus") and
                       not d.startswith("build")]
        for fn in filenames:
            if fn.endswith(exts):
                yield os.path.join(dirpath, fn)


def includes():
    """(including module, file, included module, header) for every project include in src/."""
    out = []
    for m in modules():
        for path in sources(os.path.join(SRC, m)):
            with open(path, encoding="utf-8") as f:
                for inc_mod, header in INCLUDE.findall(f.read()):
                    out.append((m, os.path.relpath(path, ROOT), inc_mod, header))
    return out


def test_the_tree_has_modules():
    mods = modules()
    assert {"cmd", "exec", "agg", "op", "storage"} <= set(mods), mods
    assert len(includes()) > 100, "includes not found: did the include style change?"


def test_no_circle_between_modules():
    graph = {m: set() for m in modules()}
    for m, _, inc, _ in includes():
        if inc != m and inc in graph:
            graph[m].add(inc)
    # Depth-first search; report one circle with its path.
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                circle = stack[stack.index(n):] + [n]
                raise AssertionError("modules include each other in a circle: " +
                                     " -> ".join(circle))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_nothing_below_cmd_includes_cmd():
    bad = [f for m, f, inc, _ in includes() if inc == "cmd" and m not in ("cmd", "sabled")]
    assert not bad, "files below the command layer include a src/cmd header: %s" % bad


def test_private_headers_stay_inside_their_module():
    bad = []
    for m, f, inc, header in includes():
        public = inc == "common" or header == inc + ".h"
        if inc != m and not public:
            bad.append("%s includes %s/%s" % (f, inc, header))
    assert not bad, "private headers used outside their module: %s" % bad


def test_architecture_lists_every_module():
    with open(os.path.join(ROOT, "docs", "ARCHITECTURE.md"), encoding="utf-8") as f:
        text = f.read()
    start = text.find("## Modules and layers")
    assert start >= 0, "docs/ARCHITECTURE.md: no '## Modules and layers' section"
    end = text.find("\n## ", start + 1)
    text = text[start:end if end >= 0 else len(text)]
    rows = set(re.findall(r"^\|\s*`([a-z_0-9]+)/`\s*\|", text, re.M))
    assert rows, "docs/ARCHITECTURE.md: no module table rows (| `name/` | ...) found"
    missing = sorted(set(modules()) - rows)
    extra = sorted(rows - set(modules()))
    assert not missing, "modules without a row in docs/ARCHITECTURE.md: %s" % missing
    assert not extra, "docs/ARCHITECTURE.md lists folders src/ does not have: %s" % extra


def test_no_source_file_over_the_limit():
    exts = (".c", ".h", ".py", ".mjs", ".js", ".java", ".sh")
    long_files = []
    for top in ("src", "tools", "tests", "bench", "scripts"):
        for path in sources(os.path.join(ROOT, top), exts):
            with open(path, encoding="utf-8", errors="replace") as f:
                n = sum(1 for _ in f)
            if n > MAX_LINES:
                long_files.append("%s (%d lines)" % (os.path.relpath(path, ROOT), n))
    # bench/ scripts have no extension: count those too.
    for fn in os.listdir(os.path.join(ROOT, "bench")):
        path = os.path.join(ROOT, "bench", fn)
        if os.path.isfile(path) and "." not in fn:
            with open(path, encoding="utf-8", errors="replace") as f:
                n = sum(1 for _ in f)
            if n > MAX_LINES:
                long_files.append("bench/%s (%d lines)" % (fn, n))
    assert not long_files, "source files over %d lines: %s" % (MAX_LINES, long_files)


LIBBSON_COPY = re.compile(r"\b(bson_append_value|bson_append_iter|BSON_APPEND_VALUE|"
                          r"BSON_APPEND_ITER)\s*\(")


def test_values_are_copied_with_the_sbl_appenders():
    calls = []
    for m in modules():
        if m == "doc":
            continue
        for path in sources(os.path.join(SRC, m)):
            with open(path, encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    if LIBBSON_COPY.search(line):
                        calls.append("%s:%d" % (os.path.relpath(path, ROOT), n))
    assert not calls, ("libbson's bson_append_value/bson_append_iter cut code values at a NUL "
                       "byte; use sbl_append_value/sbl_append_iter (doc/doc.h): %s" % calls)


def test_docs_name_only_existing_sources():
    paths = [os.path.join(ROOT, "README.md")]
    docs = os.path.join(ROOT, "docs")
    paths += [os.path.join(docs, f) for f in sorted(os.listdir(docs)) if f.endswith(".md")]
    missing = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                for src in re.findall(r"\bsrc/[a-z_0-9]+/[a-z_0-9]+\.[ch]\b", line):
                    if not os.path.exists(os.path.join(ROOT, src)):
                        missing.append("%s:%d: %s" % (os.path.relpath(path, ROOT), n, src))
    assert not missing, "docs name source files that do not exist: %s" % missing


def test_measurement_docs_stay_references():
    for name in ("BENCHMARKS.md", "audit.md"):
        with open(os.path.join(ROOT, "docs", name), encoding="utf-8") as f:
            n = sum(1 for _ in f)
        assert n < 400, "docs/%s has %d lines: replace old figures instead of adding" % (name, n)
