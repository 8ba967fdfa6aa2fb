"""
find with returnKey: each result is the key of the index the plan scans (the
_id index for _id-ordered plans), {} for a collection scan; projection is
ignored then, as in mongod.
"""


def run(db, **kw):
    cmd = {"find": "c"}
    cmd.update(kw)
    return db.command(cmd)["cursor"]["firstBatch"]


def test_return_key(db):
    db.c.insert_many([{"_id": i, "x": 10 * i, "y": {"z": i}} for i in range(1, 4)])
    db.c.create_index([("x", 1), ("y.z", -1)])
    assert run(db, filter={}, sort={"_id": 1}, returnKey=True, showRecordId=True) == \
        [{"_id": 1}, {"_id": 2}, {"_id": 3}]
    assert run(db, filter={"_id": 2}, returnKey=True) == [{"_id": 2}]
    assert run(db, filter={"x": {"$gte": 20}}, sort={"x": 1}, returnKey=True,
               projection={"x": 0}) == [{"x": 20, "y.z": 2}, {"x": 30, "y.z": 3}]
    assert run(db, filter={"y.z": 1}, returnKey=True) == [{}]  # collection scan
    assert run(db, filter={"x": 10}, returnKey=False) == [{"_id": 1, "x": 10, "y": {"z": 1}}]
