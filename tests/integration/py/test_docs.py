"""
The documentation lists everything the server accepts: every command of the
command table (src/cmd/table.c) has a row in docs/commands.md (and every row
there is a real command), and every query operator, update operator,
aggregation stage, accumulator and expression operator the code knows is
named in the matching section of docs/operators.md or docs/aggregation.md
(and every $-operator a find projection recognises, in docs/operators.md).

The names are read from the C sources, so the test needs no server and runs
in well under a second.  If the sources change shape so that a table cannot be
found (or yields implausibly few names), the test fails and says so instead
of passing on nothing.
"""
import os
import re

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def c_block(text, opener, what):
    """The text between `opener` (e.g. 'cmd_table[] = {') and the next '};'."""
    start = text.find(opener)
    assert start >= 0, "%s: '%s' not found (the table moved? update test_docs.py)" % (
        what, opener)
    end = text.find("};", start)
    assert end > start, "%s: end of the table not found" % what
    return text[start:end]


def at_least(names, n, what):
    assert len(names) >= n, "%s: only %d names extracted (%s); the table's shape changed?" % (
        what, len(names), sorted(names))
    return names


# ---- what the code accepts --------------------------------------------------------------

def code_commands():
    block = c_block(read("src/cmd/table.c"), "cmd_table[] = {", "commands")
    return at_least(set(re.findall(r'\{"(\w+)",\s*sbl_\w+', block)), 60, "commands")


def code_query_operators():
    text = read("src/query/match_parse.c")
    names = set()
    for opener in ("field_ops[] = {", "top_ops[] = {"):
        names |= set(re.findall(r'\{"(\$\w+)"', c_block(text, opener, "query operators")))
    return at_least(names, 30, "query operators")


def code_update_operators():
    block = c_block(read("src/update/upd_ops.c"), "ops[] = {", "update operators")
    return at_least(set(re.findall(r'\{"(\$\w+)"', block)), 12, "update operators")


def code_expression_operators():
    block = c_block(read("src/expr/expr.c"), "op_table[] = {", "expression operators")
    names = {"$" + n for n in re.findall(r'\b(?:P|NM|DP)\((\w+)', block)}
    names |= set(re.findall(r'\{"(\$\w+)"', block))
    return at_least(names, 100, "expression operators")


def code_accumulators():
    block = c_block(read("src/agg/group.c"), "acc_table[] = {", "accumulators")
    return at_least(set(re.findall(r'\{"(\$\w+)"', block)), 8, "accumulators")


def code_projection_operators():
    """The $-operators a find projection compares its value's first key against."""
    text = read("src/query/project.c")
    return at_least(set(re.findall(r'strcmp\(op,\s*"(\$\w+)"\)\s*==\s*0', text)), 3,
                    "projection operators")


def code_stages():
    """Every stage name the pipeline's stage dispatcher compares against: the
    function of src/agg/pipeline.c that ends in 'Unrecognized pipeline stage
    name' (other files answer that error too, for stages they refuse)."""
    text = read(os.path.join("src", "agg", "pipeline.c"))
    end = text.find("Unrecognized pipeline stage name")
    if end < 0:
        pytest.fail("stages: src/agg/pipeline.c no longer holds 'Unrecognized pipeline stage name'")
    start = text.rfind("\n{\n", 0, end)  # the opening brace of that function
    assert start >= 0, "stages: start of the stage dispatcher not found in pipeline.c"
    names = set(re.findall(r'strcmp\(\w+,\s*"(\$\w+)"\)\s*==\s*0', text[start:end]))
    return at_least(names, 20, "stages")


# ---- what the docs list -----------------------------------------------------------------

def doc_section(rel, heading):
    """The lines of `heading` in docs file rel, up to the next heading of the same
    or a higher level."""
    lines = read(rel).splitlines()
    level = len(heading) - len(heading.lstrip("#"))
    for i, line in enumerate(lines):
        if line.strip() == heading:
            out = []
            for nxt in lines[i + 1:]:
                m = re.match(r"(#+) ", nxt)
                if m and len(m.group(1)) <= level:
                    break
                out.append(nxt)
            return "\n".join(out)
    pytest.fail("%s has no heading '%s'" % (rel, heading))


def code_spans(text):
    """Every $name inside `code spans` of text (a span may list several)."""
    names = set()
    for span in re.findall(r"`([^`]+)`", text):
        names |= set(re.findall(r"\$[A-Za-z][A-Za-z0-9]*", span))
    return names


def doc_commands():
    return set(re.findall(r"^\| `(\w+)` \|", read("docs/commands.md"), re.M))


SECTIONS = [
    ("query operators", code_query_operators, "docs/operators.md", "## Query operators"),
    ("update operators", code_update_operators, "docs/operators.md", "## Update operators"),
    ("projection operators", code_projection_operators, "docs/operators.md",
     "## Projection operators (find)"),
    ("aggregation stages", code_stages, "docs/aggregation.md", "## Stages"),
    ("accumulators", code_accumulators, "docs/aggregation.md", "## Accumulators"),
    ("expression operators", code_expression_operators, "docs/aggregation.md",
     "## Expressions"),
]


def test_every_command_has_a_row():
    code, docs = code_commands(), doc_commands()
    missing = sorted(code - docs)
    assert not missing, "commands in src/cmd/table.c without a row in docs/commands.md: %s" % (
        missing)


def test_every_documented_command_exists():
    extra = sorted(doc_commands() - code_commands())
    assert not extra, "docs/commands.md lists commands src/cmd/table.c does not have: %s" % extra


@pytest.mark.parametrize("what,code,rel,heading", SECTIONS, ids=[s[0] for s in SECTIONS])
def test_every_operator_is_listed(what, code, rel, heading):
    missing = sorted(code() - code_spans(doc_section(rel, heading)))
    assert not missing, "%s the code accepts but %s ('%s') does not list: %s" % (
        what, rel, heading, missing)
