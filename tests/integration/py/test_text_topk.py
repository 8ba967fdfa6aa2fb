"""
$text top-k early stop: a query sorted by textScore with a small limit reads
each term's index entries highest score first and stops once no unread entry
can change the top k.  The results must be exactly the best k (the scores a
full read gives), and far fewer entries must be examined than the terms have.
"""

import random
import re

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


def ref_scores(doc, fields):
    """Term scores of a document computed in Python (language "none": no stemming, no
    stop words), as docs/text-search.md gives them."""
    out = {}
    for f, w in fields.items():
        s = doc.get(f)
        if not isinstance(s, str):
            continue
        toks = [t for t in re.split(r"[^0-9a-z]+", s.lower()) if t]
        for t in set(toks):
            c = toks.count(t)
            freq = sum(0.5 ** i for i in range(c))
            adj = 1.1 if t == s.lower() else 1.0
            out[t] = out.get(t, 0.0) + w * freq * (0.5 * c / len(toks) + 0.5) * adj
    return out


def check_top(got, ref, k, what):
    """got: the server's top k (score, _id); ref: every match, best first."""
    assert len(got) == min(k, len(ref)), what
    for (a, _), (b, _) in zip(got, ref):
        assert abs(a - b) < 1e-9, (what, got, ref[:k])
    if got:
        cut = got[-1][0]
        assert {i for s, i in got if s > cut + 1e-9} == {i for s, i in ref[:k] if s > cut + 1e-9}, what
        scores = {i: s for s, i in ref}
        assert all(abs(scores[i] - s) < 1e-9 for s, i in got), what


def test_top_k_random_corpora_against_python(db):
    """Random corpora with flat and skewed scores, two weighted fields, whole-string
    bonuses and repeated words; random queries of 1-3 words, some with a negated word,
    on a plain and a compound text index: the top k equals a full evaluation in Python."""
    rnd = random.Random(2929)
    fields = {"a": 3, "b": 1}
    for skew in (0.0, 1.0):
        words = ["v%02d" % i for i in range(40)]
        weights = [1.0 / (i + 1) ** skew for i in range(40)]
        docs = []
        for i in range(2500):
            d = {"_id": i, "g": i % 3}
            if rnd.random() < 0.1:
                d["a"] = rnd.choice(words[:8])  # the whole string: x1.1
            elif rnd.random() < 0.9:
                d["a"] = " ".join(rnd.choices(words, weights, k=rnd.randint(1, 6)))
            d["b"] = " ".join(rnd.choices(words, weights, k=rnd.randint(3, 15)))
            docs.append(d)
        rnd.shuffle(docs)
        coll = db["c%d" % skew]
        coll.insert_many(docs)
        comp = db["p%d" % skew]
        comp.insert_many(docs)
        coll.create_index([("a", TEXT), ("b", TEXT)], weights=fields, default_language="none")
        comp.create_index([("g", 1), ("a", TEXT), ("b", TEXT)], weights=fields,
                          default_language="none")
        terms = [ref_scores(d, fields) for d in docs]
        for _ in range(25):
            pos = rnd.sample(words[:20], rnd.randint(1, 3))
            neg = rnd.sample(words, 1) if rnd.random() < 0.3 else []
            neg = [w for w in neg if w not in pos]
            search = " ".join(pos + ["-" + w for w in neg])
            g = rnd.randrange(3)
            for target, extra in ((coll, {}), (comp, {"g": g})):
                ref = sorted(((sum(t.get(w, 0.0) for w in pos), d["_id"])
                              for d, t in zip(docs, terms)
                              if any(w in t for w in pos) and not any(w in t for w in neg)
                              and all(d.get(f) == v for f, v in extra.items())),
                             key=lambda p: (-p[0], p[1]))
                for k in (1, 10, 35):
                    q = dict(extra, **{"$text": {"$search": search}})
                    cur = target.find(q, {"s": {"$meta": "textScore"}}).sort(
                        [("s", {"$meta": "textScore"})]).limit(k)
                    check_top([(d["s"], d["_id"]) for d in cur], ref, k, (search, extra, k))


def test_top_k_phrases_and_languages_equal_full_read(db):
    """Phrases, negations and stemmed languages (english, spanish): the top k by score
    equals the first k of the whole result (read to the end and sorted by the
    client)."""
    rnd = random.Random(77)
    en = ["running", "runner", "runs", "coffee", "shop", "tea", "cake", "baking", "leaf",
          "green", "strong", "house", "the", "and", "of", "market", "garden"]
    es = ["corriendo", "leche", "caf\u00e9", "casa", "jard\u00edn", "verde", "fuerte", "el", "la"]
    docs = []
    for i in range(2500):
        es_doc = i % 4 == 0
        vocab = es if es_doc else en
        d = {"_id": i, "t": " ".join(rnd.choices(vocab, k=rnd.randint(2, 12)))}
        if es_doc:
            d["language"] = "spanish"
        docs.append(d)
    db.c.insert_many(docs)
    db.c.create_index([("t", TEXT)])
    searches = ["coffee shop", "\"coffee shop\"", "runs tea -cake", "running \"green tea\"",
                "baking cake leaf", "house -market", "strong", "garden market shop tea"]
    for search, lang in [(s, None) for s in searches] + [("leche casa", "spanish"),
                                                         ("corriendo -verde", "es")]:
        spec = {"$search": search}
        if lang:
            spec["$language"] = lang
        full = [(d["s"], d["_id"]) for d in db.c.find({"$text": spec}, {"s": {"$meta": "textScore"}})]
        full.sort(key=lambda p: (-p[0], p[1]))
        for k in (1, 10, 50):
            got = top_q(db, spec, k)
            check_top(got, full, k, (search, k))


def top_q(db, spec, limit):
    cur = db.c.find({"$text": spec}, {"s": {"$meta": "textScore"}})
    return [(d["s"], d["_id"]) for d in cur.sort([("s", {"$meta": "textScore"})]).limit(limit)]
