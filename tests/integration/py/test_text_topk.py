"""
$text top-k early stop: a query sorted by textScore with a small limit reads
each term's index entries highest score first and stops once no unread entry
can change the top k.  The results must be exactly the best k (the scores a
full read gives), and far fewer entries must be examined than the terms have.
"""

import random

from pymongo import TEXT


def top(db, search, limit):
    cur = db.c.find({"$text": {"$search": search}}, {"s": {"$meta": "textScore"}})
    cur = cur.sort([("s", {"$meta": "textScore"})])
    if limit:
        cur = cur.limit(limit)
    return [(d["s"], d["_id"]) for d in cur]


def test_top_k_exact_and_early(db):
    rnd = random.Random(29)
    words = ["w%03d" % i for i in range(300)]
    weights = [1.0 / (i + 1) for i in range(300)]
    docs = []
    for i in range(4000):
        n = rnd.randint(4, 14)
        docs.append({"_id": i, "t": " ".join(rnd.choices(words, weights, k=n))})
    db.c.insert_many(docs)
    db.c.create_index([("t", TEXT)])
    for search in ["w000 w001", "w002 w010", "w005", "w000 w001 w003", "w150 w003"]:
        full = top(db, search, 0)
        for k in (1, 10, 40):
            got = top(db, search, k)
            assert [s for s, _ in got] == [s for s, _ in full[:k]], (search, k)
            # the same documents, up to the order of equal scores
            cut = full[k - 1][0]
            assert {i for s, i in got if s > cut} == {i for s, i in full[:k] if s > cut}
            assert all(i in {j for s, j in full if s == sc} for sc, i in got)
    # a frequent word alone: the top 10 reads a small part of its entries (pairs
    # of frequent words have flat summed scores and read everything, forward)
    for search, frac in (("w005", 0.25), ("w000", 0.25)):
        ex = db.command("explain", {"find": "c", "filter": {"$text": {"$search": search}},
                                    "projection": {"s": {"$meta": "textScore"}},
                                    "sort": {"s": {"$meta": "textScore"}}, "limit": 10},
                        verbosity="executionStats")["executionStats"]
        entries = sum(db.c.count_documents({"t": {"$regex": r"\b%s\b" % w}})
                      for w in search.split())
        assert ex["nReturned"] == 10
        assert 0 < ex["totalKeysExamined"] < entries * frac, (search, ex, entries)
