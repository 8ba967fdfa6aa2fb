"""
A primary serves the tail of its oplog (a secondary's fetcher: a tailable,
awaitData find on local.oplog.rs) on the connection's network loop when the
getMore reads only what the few commits since its last one brought
(docs/replication.md, "Secondaries": the fetcher): with every worker thread
busy, a tailing getMore still brings a new write as soon as it commits,
where it used to wait for a worker.
"""
import threading
import time

import pymongo
from pymongo import CursorType
from pymongo.write_concern import WriteConcern

from sabled import Sabled
from test_replset3 import direct, last_oplog_ts, state, wait_for

WORKERS = 2
SLEEP_MS = 15000


def busy_worker(m):
    """A find that sleeps on a worker thread ($where runs JavaScript) until
    it is killed."""
    try:
        with direct(m) as d:
            list(d.t.js.find({"$where": "sleep(%d) || true" % SLEEP_MS}))
    except pymongo.errors.OperationFailure:
        pass


def where_ops(d):
    """The sleeping finds (currentOp runs on the loop, not on a worker)."""
    return [op for op in d.admin.command("currentOp")["inprog"]
            if "$where" in str(op.get("command", {}).get("filter", {}))]


def test_oplog_tail_getmore_runs_while_every_worker_is_busy(monkeypatch):
    monkeypatch.setenv("UV_THREADPOOL_SIZE", str(WORKERS))
    with Sabled() as m:
        m.start(["--replSet", "rs0", "--setParameter", "enableTestCommands=1"])
        with direct(m) as d:
            d.admin.command("replSetInitiate", {
                "_id": "rs0", "members": [{"_id": 0, "host": "127.0.0.1:%d" % m.port}]})
        wait_for(lambda: state(m) == 1, timeout=30)
        with direct(m) as d:
            d.t.js.insert_one({"_id": 1})
            d.t.create_collection("c")
            last = last_oplog_ts(d)
            tail = d.local.oplog.rs.find({"ts": {"$gt": last}},
                                         cursor_type=CursorType.TAILABLE_AWAIT
                                         ).max_await_time_ms(30000)
            assert next(tail, None) is None   # the find: nothing newer yet
            busy = [threading.Thread(target=busy_worker, args=(m,)) for _ in range(WORKERS)]
            for th in busy:
                th.start()
            try:
                wait_for(lambda: len(where_ops(d)) == WORKERS, timeout=20)
                got = {}

                def insert_soon():
                    time.sleep(0.3)   # while the getMore below waits
                    d.t.c.with_options(write_concern=WriteConcern(w=1)).insert_one(
                        {"_id": "new"})
                ins = threading.Thread(target=insert_soon)
                ins.start()
                got["doc"] = next(tail, None)
                ins.join(30)
                # it came while both workers were still asleep
                assert len(where_ops(d)) == WORKERS
                assert all(th.is_alive() for th in busy)
                doc = got["doc"]
                assert doc is not None and doc["ns"] == "t.c" and doc["o"] == {"_id": "new"}, doc
            finally:
                for op in where_ops(d):
                    d.admin.command("killOp", op=op["opid"])
                for th in busy:
                    th.join(60)
