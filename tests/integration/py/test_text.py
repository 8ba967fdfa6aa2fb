"""
Text search: text indexes (spec shape, options, one per collection), $text
with stemming, stop words, phrases, negation, case and diacritic sensitivity,
languages, weights, compound prefixes, textScore in projections, sorts and
aggregation, and the index kept in step with updates and deletes.
"""

import pytest
from pymongo import TEXT
from pymongo.errors import OperationFailure


def ids(cursor):
    return sorted(d["_id"] for d in cursor)


def search(coll, s, **kw):
    q = {"$search": s}
    q.update(kw)
    return ids(coll.find({"$text": q}))


@pytest.fixture
def articles(db):
    c = db.articles
    c.insert_many([
        {"_id": 1, "subject": "coffee", "author": "xyz", "views": 50},
        {"_id": 2, "subject": "Coffee Shopping", "author": "efg", "views": 5},
        {"_id": 3, "subject": "Baking a cake", "author": "abc", "views": 90},
        {"_id": 4, "subject": "baking", "author": "xyz", "views": 100},
        {"_id": 5, "subject": "Café Con Leche", "author": "abc", "views": 200},
        {"_id": 6, "subject": "Сырники", "author": "jkl", "views": 80},
        {"_id": 7, "subject": "coffee and cream", "author": "efg", "views": 10},
        {"_id": 8, "subject": "Cafe con Leche", "author": "xyz", "views": 10},
        {"_id": 9, "subject": "The dogs are running in the park", "author": "abc", "views": 1},
    ])
    c.create_index([("subject", TEXT)])
    return c


def test_create_and_list_shape(db):
    name = db.t.create_index([("b", TEXT)])
    assert name == "b_text"
    spec = [ix for ix in db.t.list_indexes() if ix["name"] == "b_text"][0]
    assert spec["key"] == {"_fts": "text", "_ftsx": 1}
    assert spec["weights"] == {"b": 1}
    assert spec["default_language"] == "english"
    assert spec["language_override"] == "language"
    assert spec["textIndexVersion"] == 3
    # the same index again is no error
    db.t.create_index([("b", TEXT)])


def test_options_and_compound_shape(db):
    db.t.create_index([("a", 1), ("title", TEXT), ("body", TEXT)],
                      weights={"title": 10}, default_language="spanish",
                      language_override="idioma", name="tx")
    spec = [ix for ix in db.t.list_indexes() if ix["name"] == "tx"][0]
    assert spec["key"] == {"a": 1, "_fts": "text", "_ftsx": 1}
    assert spec["weights"] == {"body": 1, "title": 10}
    assert spec["default_language"] == "spanish"
    assert spec["language_override"] == "idioma"


def test_one_text_index_per_collection(db):
    db.t.create_index([("a", TEXT)])
    with pytest.raises(OperationFailure) as e:
        db.t.create_index([("b", TEXT)])
    assert e.value.code == 85
    assert "only one text index" in str(e.value)


def test_bad_specs(db):
    with pytest.raises(OperationFailure) as e:
        db.t.create_index([("a", TEXT)], default_language="klingon")
    assert e.value.code == 67
    with pytest.raises(OperationFailure) as e:
        db.t.create_index([("a", TEXT)], weights={"a": 0})
    assert e.value.code == 67


def test_no_text_index(db):
    db.t.insert_one({"a": "x"})
    with pytest.raises(OperationFailure) as e:
        list(db.t.find({"$text": {"$search": "x"}}))
    assert e.value.code == 27
    assert "text index required for $text query" in str(e.value)


def test_bad_text_queries(articles):
    with pytest.raises(OperationFailure) as e:
        list(articles.find({"$or": [{"$text": {"$search": "a"}}, {"views": 1}]}))
    assert e.value.code == 2
    with pytest.raises(OperationFailure) as e:
        list(articles.find({"$text": {"$search": "a", "$language": "klingon"}}))
    assert e.value.code == 2
    with pytest.raises(OperationFailure) as e:
        list(articles.find({"$text": {"search": "a"}}))
    assert e.value.code == 2
    with pytest.raises(OperationFailure) as e:
        list(articles.find({}, sort=[("s", {"$meta": "textScore"})]))
    assert e.value.code == 40218


def test_terms_and_stemming(articles):
    assert search(articles, "coffee") == [1, 2, 7]
    assert search(articles, "bake") == [3, 4]           # "baking" stems to "bake"
    assert search(articles, "runs") == [9]              # "running" and "runs": "run"
    assert search(articles, "coffee cake") == [1, 2, 3, 7]


def test_stop_words_ignored(articles):
    assert search(articles, "the and a") == []
    assert search(articles, "the park") == [9]


def test_phrases_and_negation(articles):
    assert search(articles, '"coffee shop"') == [2]
    assert search(articles, "coffee -shop") == [1, 7]
    assert search(articles, 'coffee -"and cream"') == [1, 2]


def test_case_and_diacritic_sensitivity(articles):
    assert search(articles, "Coffee", **{"$caseSensitive": True}) == [2]
    assert search(articles, "café") == [5, 8]
    assert search(articles, "café", **{"$diacriticSensitive": True}) == [5]
    assert search(articles, "сырники") == [6]


def test_languages_and_override(db):
    c = db.quotes
    c.insert_many([
        {"_id": 1, "language": "spanish", "q": "los niños corren"},
        {"_id": 2, "language": "english", "q": "the children run"},
        {"_id": 3, "idioma": "es", "q": "el perro"},
    ])
    c.create_index([("q", TEXT)])
    # Spanish stop words ("los") are dropped only in Spanish documents
    assert search(c, "corren", **{"$language": "spanish"}) == [1]
    assert search(c, "running") == [2]
    assert search(c, "los", **{"$language": "spanish"}) == []
    with pytest.raises(OperationFailure) as e:
        c.insert_one({"_id": 4, "language": "klingon", "q": "x"})
    assert e.value.code == 17262


def test_language_none(db):
    c = db.t
    c.insert_many([{"_id": 1, "s": "the running"}, {"_id": 2, "s": "runs"}])
    c.create_index([("s", TEXT)], default_language="none")
    assert search(c, "the") == [1]        # no stop words
    assert search(c, "running") == [1]    # no stemming


def scores(coll, s, **extra):
    cur = coll.find({"$text": {"$search": s}}, {"score": {"$meta": "textScore"}},
                    **extra).sort([("score", {"$meta": "textScore"})])
    return [(d["_id"], round(d["score"], 6)) for d in cur]


def test_scores_as_mongod(articles):
    # mongod's formula: weight * freq * (0.5 * count / tokens + 0.5), and 1.1 times
    # that when the whole string is the (stemmed) term; "coffee" stems to "coffe"
    got = scores(articles, "coffee")
    assert got[0] == (1, 1.0)
    assert sorted(got[1:]) == [(2, 0.75), (7, 0.75)]
    articles.insert_one({"_id": 10, "subject": "cake"})
    assert scores(articles, "cake")[0] == (10, 1.1)
    # repeated terms: freq 1 + 1/2, coeff 0.5 * 2 / 3 + 0.5
    articles.insert_one({"_id": 11, "subject": "tea tea leaf"})
    assert scores(articles, "tea") == [(11, round(1.5 * (0.5 * 2 / 3 + 0.5), 6))]


def test_score_projection_and_sort(articles):
    cur = articles.find({"$text": {"$search": "coffee"}},
                        {"score": {"$meta": "textScore"}, "subject": 1}).sort(
        [("score", {"$meta": "textScore"})]).limit(2)
    docs = list(cur)
    assert [d["_id"] for d in docs] == [1, 2]
    assert set(docs[0]) == {"_id", "subject", "score"}
    # without $meta the score is never returned
    d = articles.find_one({"$text": {"$search": "coffee"}})
    assert set(d) == {"_id", "subject", "author", "views"}
    # sorted by score then by another key
    cur = articles.find({"$text": {"$search": "coffee cake"}},
                        {"s": {"$meta": "textScore"}}).sort(
        [("s", {"$meta": "textScore"}), ("views", -1)])
    got = [(d["_id"], d["s"]) for d in cur]
    assert got == sorted(got, key=lambda x: -x[1])


def test_weights_change_order(db):
    c = db.t
    c.insert_many([{"_id": 1, "title": "apple", "body": "pear pear"},
                   {"_id": 2, "title": "pear", "body": "apple apple"}])
    c.create_index([("title", TEXT), ("body", TEXT)], weights={"title": 10})
    assert [i for i, _ in scores(c, "apple")] == [1, 2]
    assert [i for i, _ in scores(c, "pear")] == [2, 1]


def test_wildcard(db):
    c = db.t
    c.insert_many([{"_id": 1, "a": "red fox"}, {"_id": 2, "b": {"c": ["lazy dog"]}},
                   {"_id": 3, "n": 5}])
    c.create_index([("$**", TEXT)])
    spec = [ix for ix in c.list_indexes() if ix["name"] == "$**_text"][0]
    assert spec["weights"] == {"$**": 1}
    assert search(c, "fox dogs") == [1, 2]


def test_compound_prefix(db):
    c = db.t
    c.insert_many([{"_id": 1, "shop": "a", "s": "green tea"},
                   {"_id": 2, "shop": "b", "s": "green tea"},
                   {"_id": 3, "shop": "a", "s": "black coffee"}])
    c.create_index([("shop", 1), ("s", TEXT)])
    assert ids(c.find({"shop": "a", "$text": {"$search": "tea"}})) == [1]
    assert ids(c.find({"shop": {"$eq": "b"}, "$text": {"$search": "tea coffee"}})) == [2]
    with pytest.raises(OperationFailure) as e:
        list(c.find({"$text": {"$search": "tea"}}))
    assert e.value.code == 2
    # other queries never use the text index
    assert ids(c.find({"shop": "a"})) == [1, 3]


def test_filter_with_text(articles):
    assert ids(articles.find({"$text": {"$search": "coffee"}, "views": {"$gt": 6}})) == [1, 7]


def test_aggregation(articles):
    out = list(articles.aggregate([
        {"$match": {"$text": {"$search": "coffee cake"}}},
        {"$sort": {"score": {"$meta": "textScore"}}},
        {"$project": {"subject": 1, "score": {"$meta": "textScore"}}},
        {"$limit": 2},
    ]))
    assert out[0]["_id"] == 1 and len(out) == 2
    assert [d["score"] for d in out] == [1.0, 0.75]
    assert set(out[1]) == {"_id", "subject", "score"}
    out = list(articles.aggregate([{"$match": {"$text": {"$search": "coffee"}}},
                                   {"$group": {"_id": None, "n": {"$sum": 1}}}]))
    assert out[0]["n"] == 3
    # the score never leaks when not asked for
    out = list(articles.aggregate([{"$match": {"$text": {"$search": "coffee"}}}]))
    assert all(set(d) == {"_id", "subject", "author", "views"} for d in out)
    with pytest.raises(OperationFailure) as e:
        list(articles.aggregate([{"$match": {"views": 1}},
                                 {"$match": {"$text": {"$search": "coffee"}}}]))
    assert e.value.code == 17313


def test_updates_and_deletes_maintain_index(articles):
    articles.update_one({"_id": 1}, {"$set": {"subject": "tea"}})
    assert search(articles, "coffee") == [2, 7]
    assert search(articles, "tea") == [1]
    articles.delete_one({"_id": 2})
    assert search(articles, "coffee") == [7]
    articles.replace_one({"_id": 7}, {"subject": "espresso"})
    assert search(articles, "coffee") == []
    assert search(articles, "espresso") == [7]


def test_index_built_on_existing_and_dropped(db):
    c = db.t
    c.insert_many([{"_id": i, "s": "word%d common" % i} for i in range(50)])
    c.create_index([("s", TEXT)])
    assert len(search(c, "common")) == 50
    c.drop_index("s_text")
    with pytest.raises(OperationFailure) as e:
        search(c, "common")
    assert e.value.code == 27


def test_explain_and_other_commands(articles, db):
    e = db.command("explain", {"find": "articles", "filter": {"$text": {"$search": "coffee"}}},
                   verbosity="executionStats")
    assert e["queryPlanner"]["winningPlan"]["stage"] == "TEXT_MATCH"
    assert e["executionStats"]["nReturned"] == 3
    assert e["executionStats"]["totalKeysExamined"] == 3
    assert articles.count_documents({"$text": {"$search": "coffee"}}) == 3
    assert sorted(articles.distinct("_id", {"$text": {"$search": "bake"}})) == [3, 4]
    assert articles.update_many({"$text": {"$search": "coffee"}},
                                {"$set": {"hot": True}}).modified_count == 3
    assert articles.count_documents({"hot": True}) == 3
    # the score field never reaches a stored document
    assert all(set(d) <= {"_id", "subject", "author", "views", "hot"} for d in articles.find())
    assert articles.delete_many({"$text": {"$search": "cake"}}).deleted_count == 1


def test_index_survives_restart(fresh_server):
    fresh_server.start()
    c = fresh_server.client()
    coll = c.db.t
    coll.insert_many([{"_id": 1, "s": "running shoes"}, {"_id": 2, "s": "blue sky"}])
    coll.create_index([("s", TEXT)], weights={"s": 3})
    c.close()
    fresh_server.restart()
    c = fresh_server.client()
    coll = c.db.t
    assert search(coll, "run") == [1]
    coll.insert_one({"_id": 3, "s": "runner runs"})
    assert search(coll, "runs") == [1, 3]
    spec = [ix for ix in coll.list_indexes() if ix["name"] == "s_text"][0]
    assert spec["weights"] == {"s": 3}
    c.close()


def test_text_in_top_level_and(articles):
    assert ids(articles.find({"$and": [{"$text": {"$search": "coffee"}},
                                       {"views": {"$gt": 6}}]})) == [1, 7]
    assert ids(articles.find({"$and": [{"$text": {"$search": "bake"}}]})) == [3, 4]
    with pytest.raises(OperationFailure) as e:
        list(articles.find({"$text": {"$search": "a"},
                            "$and": [{"$text": {"$search": "b"}}]}))
    assert e.value.code == 2
