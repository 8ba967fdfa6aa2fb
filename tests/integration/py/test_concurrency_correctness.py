"""
Concurrency correctness: many clients changing the same documents lose no
update.  $inc counters end at the sum of the acknowledged increments;
findAndModify queue consumers never take the same item twice and together
take every item; of concurrent inserts of one _id (or of one value under a
unique index) exactly one succeeds.  Each thread has its own client, so the
operations really run in parallel on the server.
"""

import random
import threading

import pymongo
import pytest
from pymongo.errors import DuplicateKeyError, OperationFailure


def run_threads(n, fn):
    """Run fn(i) on n threads started together; re-raise the first failure."""
    barrier = threading.Barrier(n, timeout=60)
    errors = []

    def body(i):
        try:
            barrier.wait()
            fn(i)
        except Exception as e:  # reported below
            errors.append("thread %d: %r" % (i, e))
            try:
                barrier.abort()
            except Exception:
                pass

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads), "threads did not finish"
    assert not errors, errors[:5]


def test_inc_counters_sum_of_acknowledged(server, db):
    nthreads, ndocs, ops = 12, 5, 150
    db.ctr.insert_many([{"_id": i, "n": 0, "m": 0} for i in range(ndocs)])
    sums = [[0] * ndocs for _ in range(nthreads)]
    clients = [server.client(retryWrites=False) for _ in range(nthreads)]

    def work(t):
        coll = clients[t][db.name].ctr
        rng = random.Random(t)
        for _ in range(ops):
            i = rng.randrange(ndocs)
            amount = rng.randint(1, 9)
            r = coll.update_one({"_id": i}, {"$inc": {"n": amount}})
            assert r.matched_count == 1 and r.modified_count == 1
            sums[t][i] += amount

    try:
        run_threads(nthreads, work)
    finally:
        for c in clients:
            c.close()
    for i in range(ndocs):
        assert db.ctr.find_one({"_id": i})["n"] == sum(s[i] for s in sums)


def test_update_many_inc_reaches_every_document(server, db):
    nthreads, ndocs, ops = 8, 20, 40
    db.um.insert_many([{"_id": i, "m": 0} for i in range(ndocs)])
    clients = [server.client(retryWrites=False) for _ in range(nthreads)]

    def work(t):
        coll = clients[t][db.name].um
        for _ in range(ops):
            r = coll.update_many({}, {"$inc": {"m": 1}})
            assert r.matched_count == ndocs and r.modified_count == ndocs

    try:
        run_threads(nthreads, work)
    finally:
        for c in clients:
            c.close()
    assert sorted(d["m"] for d in db.um.find()) == [nthreads * ops] * ndocs


def test_find_and_modify_queue_no_item_twice(server, db):
    nthreads, nitems = 10, 400
    db.q.insert_many([{"_id": i, "state": "ready"} for i in range(nitems)])
    taken = [[] for _ in range(nthreads)]
    clients = [server.client(retryWrites=False) for _ in range(nthreads)]

    def work(t):
        coll = clients[t][db.name].q
        while True:
            d = coll.find_one_and_update({"state": "ready"},
                                         {"$set": {"state": "taken", "by": t}},
                                         return_document=pymongo.ReturnDocument.AFTER)
            if d is None:
                return
            assert d["by"] == t and d["state"] == "taken"
            taken[t].append(d["_id"])

    try:
        run_threads(nthreads, work)
    finally:
        for c in clients:
            c.close()
    every = [i for lst in taken for i in lst]
    assert len(every) == len(set(every)), "an item was handed out twice"
    assert sorted(every) == list(range(nitems))
    for d in db.q.find():
        assert d["state"] == "taken" and d["_id"] in taken[d["by"]]


def test_find_and_modify_counter_hands_out_unique_numbers(server, db):
    nthreads, ops = 8, 60
    db.seq.insert_one({"_id": "s", "next": 0})
    got = [[] for _ in range(nthreads)]
    clients = [server.client(retryWrites=False) for _ in range(nthreads)]

    def work(t):
        coll = clients[t][db.name].seq
        for _ in range(ops):
            d = coll.find_one_and_update({"_id": "s"}, {"$inc": {"next": 1}},
                                         return_document=pymongo.ReturnDocument.AFTER)
            got[t].append(d["next"])

    try:
        run_threads(nthreads, work)
    finally:
        for c in clients:
            c.close()
    every = sorted(n for lst in got for n in lst)
    assert every == list(range(1, nthreads * ops + 1))


def test_concurrent_inserts_same_id_exactly_one_wins(server, db):
    nthreads, rounds = 8, 25
    wins = [[] for _ in range(nthreads)]
    dups = [0] * nthreads
    clients = [server.client(retryWrites=False) for _ in range(nthreads)]
    barrier = threading.Barrier(nthreads, timeout=60)

    def work(t):
        coll = clients[t][db.name].ins
        for r in range(rounds):
            barrier.wait()
            try:
                coll.insert_one({"_id": r, "t": t})
                wins[t].append(r)
            except DuplicateKeyError:
                dups[t] += 1

    try:
        run_threads(nthreads, work)
    finally:
        for c in clients:
            c.close()
    for r in range(rounds):
        winners = [t for t in range(nthreads) if r in wins[t]]
        assert len(winners) == 1, (r, winners)
        assert db.ins.find_one({"_id": r})["t"] == winners[0]
    assert sum(dups) == rounds * (nthreads - 1)
    assert db.ins.count_documents({}) == rounds


def test_unique_index_admits_no_duplicates_under_concurrency(server, db):
    try:
        db.uq.create_index("email", unique=True)
    except OperationFailure as e:
        pytest.skip("unique secondary indexes not available: %s" % e)
    nthreads, rounds = 8, 20
    ok = [[] for _ in range(nthreads)]
    clients = [server.client(retryWrites=False) for _ in range(nthreads)]
    barrier = threading.Barrier(nthreads, timeout=60)

    def work(t):
        coll = clients[t][db.name].uq
        for r in range(rounds):
            barrier.wait()
            try:
                coll.insert_one({"_id": "%d-%d" % (r, t), "email": "u%d@x" % r})
                ok[t].append(r)
            except DuplicateKeyError:
                pass

    try:
        run_threads(nthreads, work)
    finally:
        for c in clients:
            c.close()
    for r in range(rounds):
        assert sum(1 for t in range(nthreads) if r in ok[t]) == 1, r
        assert db.uq.count_documents({"email": "u%d@x" % r}) == 1
    v = db.command("validate", "uq")
    assert v["valid"], v


def test_validate_after_concurrent_churn(server, db):
    nthreads = 6
    clients = [server.client(retryWrites=False) for _ in range(nthreads)]

    def work(t):
        coll = clients[t][db.name].churn
        rng = random.Random(100 + t)
        for _ in range(150):
            k = rng.randrange(60)
            op = rng.random()
            if op < 0.4:
                coll.replace_one({"_id": k}, {"v": t, "pad": "x" * rng.randrange(500)}, upsert=True)
            elif op < 0.7:
                coll.update_one({"_id": k}, {"$inc": {"n": 1}})
            else:
                coll.delete_one({"_id": k})

    try:
        run_threads(nthreads, work)
    finally:
        for c in clients:
            c.close()
    v = db.command("validate", "churn", full=True)
    assert v["valid"] and v["errors"] == [] and v["nInvalidDocuments"] == 0, v
    assert v["nrecords"] == db.churn.count_documents({})
    assert v["ns"] == db.name + ".churn" and v["repaired"] is False


def test_concurrent_upserts_of_one_id_create_one_document(server, db):
    """Upserts with $inc racing on an _id that does not exist yet: one of them
    inserts, the others update it (as MongoDB retries an upsert that lost the
    race on a unique key); the count equals the acknowledged operations."""
    nthreads, rounds = 8, 15
    done = [0] * nthreads
    clients = [server.client(retryWrites=False) for _ in range(nthreads)]
    each_round = threading.Barrier(nthreads, timeout=60)

    def work(t):
        coll = clients[t][db.name].ups
        for r in range(rounds):
            each_round.wait()  # all threads race on the same new _id
            coll.update_one({"_id": "k%d" % r}, {"$inc": {"n": 1}}, upsert=True)
            done[t] += 1

    try:
        run_threads(nthreads, work)
    finally:
        for c in clients:
            c.close()
    assert db.ups.count_documents({}) == rounds
    for r in range(rounds):
        assert db.ups.find_one({"_id": "k%d" % r})["n"] == nthreads
    assert sum(done) == nthreads * rounds
