"""
What a standalone mongod refuses, Sable refuses the same way: snapshot read
concern (NotAReplicaSet 123) and change streams (40573); local and majority
read concerns still work.
"""

import pytest
from pymongo.errors import OperationFailure


def test_snapshot_read_concern_is_refused(db):
    db.c.insert_one({"_id": 1, "x": 1})
    for cmd in ({"find": "c", "readConcern": {"level": "snapshot"}},
                {"aggregate": "c", "pipeline": [], "cursor": {}, "readConcern": {"level": "snapshot"}},
                {"distinct": "c", "key": "x", "readConcern": {"level": "snapshot"}},
                {"count": "c", "readConcern": {"level": "snapshot"}}):
        with pytest.raises(OperationFailure) as e:
            db.command(cmd)
        assert e.value.code == 123, cmd
        assert "readConcern: snapshot" in str(e.value)
    for level in ("local", "majority", "available"):
        r = db.command({"find": "c", "readConcern": {"level": level}})
        assert r["cursor"]["firstBatch"] == [{"_id": 1, "x": 1}]


def test_change_streams_need_a_replica_set(db):
    db.c.insert_one({"_id": 1})
    with pytest.raises(OperationFailure) as e:
        db.c.watch()
    assert e.value.code == 40573
