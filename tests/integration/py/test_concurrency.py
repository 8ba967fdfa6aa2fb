"""
Many clients at once: 300 connections busy with finds and updates at the
same time all succeed; 1000 idle connections open at once and the server
still serves.
"""

import threading
import time

import pymongo

import wire


def test_300_concurrent_busy_connections(server, client):
    n = 300
    ops = 20
    client.conc.t.drop()
    client.conc.t.insert_many([{"_id": i, "n": 0} for i in range(n)])
    barrier = threading.Barrier(n + 1, timeout=120)  # all connected
    go = threading.Barrier(n + 1, timeout=120)  # counted: start working
    errors = []
    done = []

    def worker(i):
        try:
            # One socket per thread, opened before anyone starts working, so
            # that all 300 connections are live at the same time.
            s = wire.connect(server.port, timeout=60)
            try:
                assert wire.command(s, {"hello": 1})["ok"] == 1
                barrier.wait()
                go.wait()  # nobody closes before the count below
                for k in range(ops):
                    r = wire.command(s, {"update": "t", "updates": [
                        {"q": {"_id": i}, "u": {"$inc": {"n": 1}}}]}, "conc")
                    assert r["ok"] == 1 and r["nModified"] == 1, r
                    r = wire.command(s, {"find": "t", "filter": {"_id": {"$in": [i, (i + 1) % n]}},
                                         "sort": {"_id": 1}}, "conc")
                    assert r["ok"] == 1 and len(r["cursor"]["firstBatch"]) == 2, r
                done.append(i)
            finally:
                s.close()
        except Exception as e:  # reported below
            errors.append("worker %d: %r" % (i, e))
            for b in (barrier, go):
                try:
                    b.abort()
                except Exception:
                    pass

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    cur = None
    try:
        barrier.wait()
        # Everyone is connected now, and waits for the count to be taken.
        cur = client.admin.command("serverStatus")["connections"]["current"]
        go.wait()
    except threading.BrokenBarrierError:
        pass
    finally:
        for t in threads:
            t.join(timeout=180)
    assert not errors, errors[:5]
    assert cur is not None and cur >= n, "only %r connections open" % cur
    assert len(done) == n
    counts = [d["n"] for d in client.conc.t.find().sort("_id", 1)]
    assert counts == [ops] * n
    client.drop_database("conc")


def test_300_pymongo_threads_one_pool(server):
    c = pymongo.MongoClient("127.0.0.1", server.port, maxPoolSize=300,
                            serverSelectionTimeoutMS=20000, directConnection=True)
    errors = []
    try:
        coll = c.conc2.t
        coll.insert_one({"_id": "ctr", "n": 0})

        def worker(i):
            try:
                for _ in range(10):
                    coll.update_one({"_id": "ctr"}, {"$inc": {"n": 1}})
                    coll.insert_one({"w": i})
                    assert coll.find_one({"_id": "ctr"})["n"] >= 1
            except Exception as e:
                errors.append(repr(e))

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(300)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=180)
        assert not errors, errors[:5]
        assert coll.find_one({"_id": "ctr"})["n"] == 3000
        assert coll.count_documents({"w": {"$exists": True}}) == 3000
        c.drop_database("conc2")
    finally:
        c.close()


def test_1000_idle_connections(server, client):
    socks = []
    try:
        for _ in range(1000):
            socks.append(wire.connect(server.port, timeout=30))
        # Each of them is really accepted and served...
        for s in socks[::50]:
            assert wire.command(s, {"ping": 1})["ok"] == 1
        # ...and a busy client is not slowed to a halt by the idle ones.
        t0 = time.monotonic()
        for i in range(200):
            client.idle.t.insert_one({"i": i})
        assert client.idle.t.count_documents({}) == 200
        assert time.monotonic() - t0 < 30
        cur = client.admin.command("serverStatus")["connections"]["current"]
        assert cur >= 1000
        # the last one opened also works
        assert wire.command(socks[-1], {"hello": 1})["ok"] == 1
    finally:
        for s in socks:
            s.close()
    client.drop_database("idle")
    # after they all go away, new connections still work
    deadline = time.monotonic() + 10
    while client.admin.command("serverStatus")["connections"]["current"] > 50:
        assert time.monotonic() < deadline, "closed connections are not released"
        time.sleep(0.1)
