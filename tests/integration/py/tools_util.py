"""
tools_util.py: helpers for the tests of sable-dump, sable-restore,
sable-export and sable-import: where the binaries are (beside sabled, or
$SABLE_TOOLS_DIR), running one, and comparing two servers' databases exactly
(documents as raw BSON bytes, collection options and
types, and indexes).
"""

import os
import subprocess

import bson
from bson.raw_bson import RawBSONDocument

from sabled import sabled_path


def tool_path(name):
    d = os.environ.get("SABLE_TOOLS_DIR") or os.path.dirname(sabled_path())
    return os.path.join(d, name)


def run_tool(name, *args, timeout=120, input=None):
    """Run a tool to completion; returns the CompletedProcess (stdout as bytes)."""
    return subprocess.run([tool_path(name)] + [str(a) for a in args], capture_output=True,
                          timeout=timeout, input=input)


def ok(p):
    assert p.returncode == 0, "exit %s\nstdout: %r\nstderr: %s" % (
        p.returncode, p.stdout[-2000:], p.stderr.decode("utf-8", "replace"))
    return p


def raw_docs(coll, natural=False):
    """Every document as raw BSON bytes, in _id order (or natural order)."""
    c = coll.with_options(codec_options=bson.CodecOptions(document_class=RawBSONDocument))
    cur = c.find() if natural else c.find().sort("_id", 1)
    return [d.raw for d in cur]


def describe_db(client, name):
    """{collection: (type, options, indexes, documents)} of one database."""
    out = {}
    db = client[name]
    for info in db.list_collections():
        cname = info["name"]
        kind = info.get("type", "collection")
        indexes = []
        docs = None
        if kind == "collection":
            indexes = sorted((dict(ix) for ix in db[cname].list_indexes()),
                             key=lambda ix: ix["name"])
            for ix in indexes:
                ix.pop("ns", None)
            docs = raw_docs(db[cname], natural=bool(info.get("options", {}).get("capped")))
        out[cname] = (kind, dict(info.get("options", {})), indexes, docs)
    return out


def assert_same_db(a, b, name, name_b=None):
    da, db_ = describe_db(a, name), describe_db(b, name_b or name)
    assert sorted(da) == sorted(db_), (sorted(da), sorted(db_))
    for cname in da:
        ka, oa, ia, xa = da[cname]
        kb, ob, ib, xb = db_[cname]
        assert (ka, oa) == (kb, ob), cname
        assert ia == ib, cname
        assert xa == xb, "documents of %s differ" % cname


def users_of(client, db):
    r = client[db].command("usersInfo", 1, showCredentials=True)
    return sorted(r["users"], key=lambda u: u["_id"])


def roles_of(client, db):
    r = client[db].command("rolesInfo", 1, showPrivileges=True)
    return sorted(r["roles"], key=lambda u: u["_id"] if "_id" in u else u["role"])
