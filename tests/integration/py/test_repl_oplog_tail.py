"""
A primary serves the tail of its oplog (a secondary's fetcher: a tailable,
awaitData find on local.oplog.rs) on the connection's network loop when the
getMore reads only what the few commits since its last one brought
(docs/replication.md, "Secondaries": the fetcher): with every worker thread
busy, a tailing getMore still brings a new write as soon as it commits,
where it used to wait for a worker.

A tail read over many small getMores while several clients write returns
every entry from its start exactly once, in ts order: the getMore path reads
on from where the last one stopped, steps from one entry's document to the
next and decides {ts: {$gte|$gt: T}} from the entry's key (docs/replication.md,
"Secondaries").
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


def tail_all(d, flt, want, batch_size):
    """Read a tailable awaitData cursor on the oplog with filter flt in
    batches of batch_size until it has brought want entries of t.c (or 60 s
    pass): every entry it returned."""
    tail = d.local.oplog.rs.find(flt, cursor_type=CursorType.TAILABLE_AWAIT,
                                 batch_size=batch_size).max_await_time_ms(200)
    got, seen_c, deadline = [], 0, time.time() + 60
    while seen_c < want and time.time() < deadline and tail.alive:
        for e in tail:
            got.append(e)
            seen_c += e.get("ns") == "t.c" and e.get("op") == "i"
            if seen_c >= want:
                break
    tail.close()
    return got


def test_oplog_tail_returns_each_entry_once_across_getmores_and_writers():
    with Sabled() as m:
        m.start(["--replSet", "rs0"])
        with direct(m) as d:
            d.admin.command("replSetInitiate", {
                "_id": "rs0", "members": [{"_id": 0, "host": "127.0.0.1:%d" % m.port}]})
        wait_for(lambda: state(m) == 1, timeout=30)
        with direct(m) as d:
            d.t.c.insert_one({"_id": "first"})
            start = last_oplog_ts(d)
            writers, per = 4, 150
            want = writers * per

            def write(w):
                with direct(m) as dw:
                    c = dw.t.c.with_options(write_concern=WriteConcern(w=1))
                    for i in range(per):
                        c.insert_one({"_id": "%d-%d" % (w, i)})
            results = {}

            def read(name, flt, batch_size):
                with direct(m) as dr:   # $gte: "first" too
                    results[name] = tail_all(dr, flt, want + (name != "gt"), batch_size)
            readers = [threading.Thread(target=read, args=a) for a in [
                ("gte", {"ts": {"$gte": start}}, 3),
                ("gt", {"ts": {"$gt": start}}, 0),
                ("ns", {"ts": {"$gte": start}, "ns": "t.c"}, 7)]]
            for th in readers:
                th.start()
            time.sleep(0.2)   # the readers' finds run first, then tail the writes
            ths = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
            for th in ths:
                th.start()
            for th in ths + readers:
                th.join(120)
            ids = {"%d-%d" % (w, i) for w in range(writers) for i in range(per)}
            for name, got in results.items():
                ts = [e["ts"] for e in got]
                assert ts == sorted(ts) and len(set(ts)) == len(ts), name  # once, in order
                if name == "gt":
                    assert ts[0] > start, name
                else:
                    assert ts[0] == start, name                            # $gte: T itself
                inserted = [e["o"]["_id"] for e in got if e.get("ns") == "t.c"]
                assert sorted(inserted) == sorted(ids | ({"first"} if name != "gt" else set())), \
                    name
                if name == "ns":
                    assert all(e["ns"] == "t.c" for e in got)
            # the same entries as one plain read of the oplog from start
            every = [e["ts"] for e in d.local.oplog.rs.find({"ts": {"$gte": start}})]
            assert every[:len(results["gte"])] == [e["ts"] for e in results["gte"]]
