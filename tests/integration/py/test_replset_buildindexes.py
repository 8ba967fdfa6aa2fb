"""
Members with buildIndexes: false, as mongod 7.0 has them (issue 24): such a
member must have priority 0 and keeps it for life (a reconfig may not flip
it: remove, then re-add), and holds the _id index only: replicated
createIndexes entries are not applied on it (a dropIndexes of an index it
lacks is harmless) and its initial sync clones no other index.  Its
documents are the primary's all the same.
"""
import pytest
from pymongo.errors import OperationFailure
from pymongo.write_concern import WriteConcern

from sabled import set_members
from test_replset3 import direct, state, wait_for
from test_replset_members import config_error, host, initiate


def index_names(m, coll="c"):
    with direct(m) as c:
        return sorted(ix["name"] for ix in c.test[coll].list_indexes())


def docs(m, coll="c"):
    with direct(m) as c:
        return list(c.test[coll].find({}, sort=[("_id", 1)]))


@pytest.fixture
def four():
    with set_members(4) as members:
        yield members


def test_build_indexes_false(four):
    m0, m1, m2, late = four
    a, b = host(m0), host(m1)
    e = config_error(four, [{"_id": 0, "host": a}, {"_id": 1, "host": b, "buildIndexes": False}])
    assert e.code == 93 and "priority must be 0 when buildIndexes=false" in str(e)

    initiate([m0, m1, m2], extra={1: {"priority": 0}, 2: {"priority": 0, "buildIndexes": False}},
             electable=1)
    wait_for(lambda: state(m0) == 1)
    with direct(m0) as c:
        cfg = c.admin.command("replSetGetConfig")["config"]
        assert [x["buildIndexes"] for x in cfg["members"]] == [True, True, False]
        cfg["version"] += 1
        cfg["members"][2]["buildIndexes"] = True
        with pytest.raises(OperationFailure) as ei:
            c.admin.command("replSetReconfig", cfg)
        assert ei.value.code == 103 and (
            "differ in the setting of the buildIndexes field for member %s; to make this "
            "change, remove then re-add the member" % host(m2)) in str(ei.value)

        coll = c.test.get_collection("c", write_concern=WriteConcern(w=3, wtimeout=20000))
        coll.insert_many([{"_id": i, "x": i % 7, "s": "v%d" % i} for i in range(200)])
        coll.create_index("x")
        coll.create_index([("s", 1), ("x", -1)], unique=True, name="s_x")
        coll.update_many({"x": 3}, {"$set": {"y": 1}})
        assert index_names(m0) == ["_id_", "s_x", "x_1"]
    assert index_names(m1) == ["_id_", "s_x", "x_1"]
    assert index_names(m2) == ["_id_"]
    assert docs(m2) == docs(m0) == docs(m1)

    # a dropIndexes of an index m2 never built is applied (as nothing) and
    # replication goes on
    with direct(m0) as c:
        coll = c.test.get_collection("c", write_concern=WriteConcern(w=3, wtimeout=20000))
        coll.drop_index("x_1")
        coll.insert_one({"_id": 1000, "x": 1, "s": "late"})
    assert index_names(m1) == ["_id_", "s_x"]
    assert index_names(m2) == ["_id_"]
    assert docs(m2) == docs(m0)
    assert state(m2) == 2

    # a member added later with buildIndexes: false clones no secondary index
    with direct(m0) as c:
        cfg = c.admin.command("replSetGetConfig")["config"]
        cfg["version"] += 1
        cfg["members"].append({"_id": 3, "host": host(late), "priority": 0, "votes": 0,
                               "buildIndexes": False})
        c.admin.command("replSetReconfig", cfg)
    wait_for(lambda: state(late) == 2, timeout=30)
    with direct(m0) as c:
        c.test.get_collection("c", write_concern=WriteConcern(w=4, wtimeout=20000)).insert_one(
            {"_id": 1001})
    assert index_names(late) == ["_id_"]
    assert docs(late) == docs(m0)
