"""--wiredTigerJournalCompressor (storage.wiredTiger.engineConfig.journalCompressor):
none (sabled's default), snappy or zlib compress the journal's log records;
anything else is refused at startup.  Log records written compressed are
recovered after kill -9 whatever the next start chooses."""
import pymongo
import pytest
from pymongo import WriteConcern

from sabled import Sabled, run_sabled


def _client(s):
    return pymongo.MongoClient("127.0.0.1", s.port, directConnection=True,
                               serverSelectionTimeoutMS=10000)


@pytest.mark.parametrize("first,second", [("snappy", "none"), ("zlib", "snappy"), ("none", "zlib")])
def test_recovery_across_compressors(first, second):
    s = Sabled()
    try:
        s.start(["--wiredTigerJournalCompressor", first])
        c = _client(s)
        coll = c.t.get_collection("c", write_concern=WriteConcern(j=True))
        coll.insert_many([{"_id": i, "x": "y" * 1000} for i in range(300)])
        coll.update_one({"_id": 7}, {"$set": {"x": "updated"}})
        c.close()
        s.kill9()  # no checkpoint: the documents come back from the journal
        s.start(["--wiredTigerJournalCompressor", second])
        c = _client(s)
        assert c.t.c.count_documents({}) == 300
        assert c.t.c.find_one({"_id": 7})["x"] == "updated"
        opts = c.admin.command("getCmdLineOpts")["parsed"]
        assert opts["storage"]["wiredTiger"]["engineConfig"]["journalCompressor"] == second
        c.close()
    finally:
        s.stop()


@pytest.mark.parametrize("value,msg", [("zstd", "no zstd extension"), ("lz4", "expected none")])
def test_bad_compressor_refused(value, msg):
    r = run_sabled(["--dbpath", "/nonexistent", "--wiredTigerJournalCompressor", value])
    assert r.returncode != 0
    assert msg in r.stdout + r.stderr
