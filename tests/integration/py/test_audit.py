"""
test_audit.py: the audit log (--auditDestination file) through pymongo.

What users rely on: every event type in MongoDB's shape (atype, ts, uuid,
local, remote, users, roles, param, result); failed authorization audited
always and successful commands with auditAuthorizationSuccess (settable at
run time); the filter at start-up and changed with setAuditConfig; JSON and
BSON files (BSON read back with sable-audit); logRotate / SIGUSR1 rotation
under writes with no event lost or duplicated; after kill -9, every
acknowledged insert has its authCheck event; an audit file that cannot be
written refuses audited writes with a clear error and recovers by itself.
"""

import json
import os
import signal
import subprocess
import threading
import time
import uuid

import pymongo
import pytest
from bson import json_util
from pymongo.errors import OperationFailure

from sabled import Sabled, sabled_path

ROOT_USER, ROOT_PWD = "root", "r00t-Pw"


def sable_audit_path():
    return os.environ.get("SABLE_AUDIT") or os.path.join(os.path.dirname(sabled_path()),
                                                         "sable-audit")


def read_json_events(*paths):
    """Events of JSON audit files; a torn last line (kill -9) is skipped."""
    out = []
    for p in paths:
        if not os.path.exists(p):
            continue
        with open(p) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    out.append(json_util.loads(line))
                except ValueError:
                    pass
    return out


def wait_events(path, pred, timeout=10):
    """Poll the file until pred(events) holds; returns the events."""
    deadline = time.time() + timeout
    while True:
        ev = read_json_events(path)
        if pred(ev) or time.time() > deadline:
            return ev
        time.sleep(0.05)


def of_type(events, atype):
    return [e for e in events if e["atype"] == atype]


def start(extra, auth=False, fmt="JSON"):
    s = Sabled()
    path = os.path.join(s.root, "audit." + fmt.lower())
    args = ["--auditDestination", "file", "--auditFormat", fmt, "--auditPath", path] + extra
    if auth:
        args.append("--auth")
    s.start(args)
    return s, path


def connect(s, user=None, pwd=None, **kw):
    if user:
        return pymongo.MongoClient("mongodb://%s:%s@127.0.0.1:%d/?authSource=admin"
                                   % (user, pwd, s.port), directConnection=True,
                                   serverSelectionTimeoutMS=10000, **kw)
    return pymongo.MongoClient("127.0.0.1", s.port, directConnection=True,
                               serverSelectionTimeoutMS=10000, **kw)


@pytest.fixture(scope="module")
def auth_audit():
    s, path = start(["--setParameter", "auditAuthorizationSuccess=true"], auth=True)
    try:
        c = connect(s)
        c.admin.command("createUser", ROOT_USER, pwd=ROOT_PWD, roles=["root"])
        c.close()
        yield s, path
    finally:
        s.cleanup()


def test_event_shape_and_types(auth_audit):
    s, path = auth_audit
    c = connect(s, ROOT_USER, ROOT_PWD)
    db = c.shapes
    db.create_collection("a")                       # createDatabase + createCollection
    db.a.create_index("x", name="x_1")              # createIndex
    db.a.drop_index("x_1")                          # dropIndex
    db.a.rename("b")                                # renameCollection
    db.b.drop()                                     # dropCollection
    db.create_collection("c")
    c.drop_database("shapes")                       # dropDatabase
    c.admin.command("createUser", "u1", pwd="pw-1234", roles=["read"])
    c.admin.command("updateUser", "u1", pwd="pw-5678")
    c.admin.command("grantRolesToUser", "u1", roles=["readWrite"])
    c.admin.command("createRole", "r1", privileges=[], roles=[])
    c.admin.command("dropRole", "r1")
    c.admin.command("logApplicationMessage", "hello auditors")
    c.shapes2.t.insert_one({"_id": 1})              # authCheck for insert

    bad = connect(s, "u1", "wrong-password")
    with pytest.raises(OperationFailure):
        bad.admin.command("ping")
    bad.close()
    ro = connect(s, "u1", "pw-5678")
    with pytest.raises(OperationFailure) as ei:
        ro.shapes2.t.drop()                         # read/readWrite on admin only: 13
    assert ei.value.code == 13
    ro.admin.command("logout")
    ro.close()
    c.admin.command("dropUser", "u1")

    want = ["startup", "clientMetadata", "authenticate", "authCheck", "createDatabase",
            "createCollection", "createIndex", "dropIndex", "renameCollection",
            "dropCollection", "dropDatabase", "createUser", "updateUser", "grantRolesToUser",
            "createRole", "dropRole", "applicationMessage", "logout", "dropUser"]
    ev = wait_events(path, lambda e: all(of_type(e, t) for t in want))
    for t in want:
        assert of_type(ev, t), "no %s event" % t

    for e in ev:
        assert set(["atype", "ts", "local", "remote", "users", "roles", "param",
                    "result"]) <= set(e), e
    ins = [e for e in of_type(ev, "authCheck") if e["param"]["command"] == "insert"]
    assert ins and ins[-1]["param"]["ns"] == "shapes2.t"
    assert ins[-1]["param"]["args"]["documents"] == [{"_id": 1}]
    assert ins[-1]["result"] == 0
    assert ins[-1]["users"] == [{"user": ROOT_USER, "db": "admin"}]
    assert {"role": "root", "db": "admin"} in ins[-1]["roles"]
    assert isinstance(ins[-1]["uuid"], uuid.UUID)   # {$binary: ..., subType: "04"}
    assert ins[-1]["local"] == {"ip": "127.0.0.1", "port": s.port}
    assert ins[-1]["remote"]["ip"] == "127.0.0.1"

    denied = [e for e in of_type(ev, "authCheck") if e["result"] == 13]
    assert any(e["param"]["command"] == "drop" and e["param"]["ns"] == "shapes2.t"
               for e in denied)
    auths = of_type(ev, "authenticate")
    assert any(e["param"]["user"] == "u1" and e["result"] == 18 for e in auths)
    assert any(e["param"]["user"] == ROOT_USER and e["result"] == 0 and
               e["param"]["mechanism"].startswith("SCRAM") for e in auths)
    upd = of_type(ev, "updateUser")[-1]
    assert upd["param"]["user"] == "u1" and upd["param"]["passwordChanged"] is True
    # Passwords never reach the audit log.
    assert all("pw-1234" not in json.dumps(json_util.dumps(e)) for e in ev)
    assert of_type(ev, "createDatabase")[0]["param"]["ns"] == "shapes"
    assert any(e["param"] == {"old": "shapes.a", "new": "shapes.b"}
               for e in of_type(ev, "renameCollection"))
    assert of_type(ev, "applicationMessage")[-1]["param"]["msg"] == "hello auditors"
    md = of_type(ev, "clientMetadata")[-1]
    assert md["param"]["clientMetadata"]["driver"]["name"].startswith("PyMongo")
    c.close()


def test_auth_success_at_run_time(auth_audit):
    s, path = auth_audit
    c = connect(s, ROOT_USER, ROOT_PWD)
    assert c.admin.command("setParameter", 1, auditAuthorizationSuccess=False)["was"] is True
    assert c.admin.command("getParameter", 1,
                           auditAuthorizationSuccess=1)["auditAuthorizationSuccess"] is False
    c.rt.t.insert_one({"_id": "not-audited"})
    c.admin.command("setParameter", 1, auditAuthorizationSuccess=True)
    c.rt.t.insert_one({"_id": "audited"})
    ev = wait_events(path, lambda e: any("audited" in json_util.dumps(x) for x in e))
    text = "\n".join(json_util.dumps(e) for e in of_type(ev, "authCheck"))
    assert '"audited"' in text and "not-audited" not in text
    with pytest.raises(OperationFailure):
        c.admin.command("setParameter", 1, noSuchParameter=1)
    c.close()


def test_filter_at_start_and_at_run_time():
    s, path = start(["--auditFilter", '{"atype": {"$in": ["createCollection"]}}'])
    try:
        c = connect(s)
        c.f.create_collection("one")
        c.f.one.drop()
        assert c.admin.command("getAuditConfig")["filter"] == {
            "atype": {"$in": ["createCollection"]}}
        c.admin.command("setAuditConfig", filter={"atype": "dropCollection",
                                                  "param.ns": "f.two"})
        c.f.create_collection("two")
        c.f.create_collection("three")
        c.f.two.drop()
        c.f.three.drop()
        ev = wait_events(path, lambda e: of_type(e, "dropCollection"))
        assert [(e["atype"], e["param"]["ns"]) for e in ev] == [
            ("createCollection", "f.one"), ("dropCollection", "f.two")]
        # $expr over param.args (the filter sees the whole event), then bench/audit's
        # kind of filter (it sees atype and param only; repeated decisions are
        # remembered per loop thread, and forgotten when the filter changes).
        c.admin.command("setParameter", 1, auditAuthorizationSuccess=True)
        c.admin.command("setAuditConfig", filter={"$expr": {"$eq": ["$param.args.filter.k", 2]}})
        for k in (1, 2, 1, 2):
            list(c.f.t.find({"k": k}))
        c.admin.command("setAuditConfig", filter={"atype": "authCheck",
                                                  "param.command": {"$in": ["insert", "update"]}})
        for i in range(3):
            c.f.t.insert_one({"i": i})
            list(c.f.t.find({"i": i}))
        c.f.t.update_one({"i": 0}, {"$set": {"j": 1}})
        ev = wait_events(path, lambda e: len(of_type(e, "authCheck")) >= 6)
        assert [(e["param"]["command"], e["param"]["args"].get("filter"))
                for e in of_type(ev, "authCheck")] == [
            ("find", {"k": 2}), ("find", {"k": 2}), ("insert", None), ("insert", None),
            ("insert", None), ("update", None)]
        with pytest.raises(OperationFailure):
            c.admin.command("setAuditConfig", filter={"atype": {"$bogus": 1}})
        c.close()
    finally:
        s.cleanup()


def test_bson_format_and_reader():
    s, path = start(["--setParameter", "auditAuthorizationSuccess=true"], fmt="BSON")
    try:
        c = connect(s)
        for i in range(20):
            c.b.t.insert_one({"_id": i})
        c.b.t.drop()
        c.close()
        assert s.stop() == 0
        out = subprocess.run([sable_audit_path(), path], capture_output=True, text=True,
                             timeout=30)
        assert out.returncode == 0, out.stderr
        ev = [json_util.loads(l) for l in out.stdout.splitlines()]
        assert ev[0]["atype"] == "startup" and ev[-1]["atype"] == "shutdown"
        ins = [e for e in ev if e["atype"] == "authCheck" and e["param"]["command"] == "insert"]
        assert [e["param"]["args"]["documents"][0]["_id"] for e in ins] == list(range(20))
        out = subprocess.run([sable_audit_path(), "--filter",
                              '{"atype": "authCheck", "param.command": "insert", '
                              '"param.args.documents._id": {"$gte": 15}}', path],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert len(out.stdout.splitlines()) == 5
        # A torn tail is reported, the complete events before it still printed.
        with open(path, "rb") as f:
            data = f.read()
        torn = path + ".torn"
        with open(torn, "wb") as f:
            f.write(data[:-7])
        out = subprocess.run([sable_audit_path(), torn], capture_output=True, text=True,
                             timeout=30)
        assert out.returncode == 1 and "offset" in out.stderr
        assert len(out.stdout.splitlines()) == len(ev) - 1
    finally:
        s.cleanup()


def insert_load(s, stop, acked, prefix, w=1):
    c = connect(s, w=w)
    i = 0
    try:
        while not stop.is_set():
            _id = "%s-%d" % (prefix, i)
            c.load.t.insert_one({"_id": _id})
            acked.append(_id)
            i += 1
    except Exception:
        pass
    finally:
        c.close()


def insert_ids(events):
    ids = []
    for e in events:
        if e["atype"] == "authCheck" and e["param"]["command"] == "insert":
            ids.extend(d["_id"] for d in e["param"]["args"]["documents"])
    return ids


def test_rotation_under_load():
    s, path = start(["--setParameter", "auditAuthorizationSuccess=true",
                     "--auditFilter", '{"param.command": "insert"}'])
    try:
        stop, acked, threads = threading.Event(), [], []
        for k in range(3):
            t = threading.Thread(target=insert_load, args=(s, stop, acked, "t%d" % k))
            t.start()
            threads.append(t)
        c = connect(s)
        for i in range(6):
            time.sleep(0.2)
            if i % 2:
                s.signal(signal.SIGUSR1)
            else:
                c.admin.command("logRotate")
        stop.set()
        for t in threads:
            t.join()
        c.close()
        assert s.stop() == 0
        files = sorted(os.path.join(s.root, f) for f in os.listdir(s.root)
                       if f.startswith("audit.json"))
        assert len(files) >= 4, files
        ids = insert_ids(read_json_events(*files))
        assert len(ids) == len(set(ids)), "duplicated events"
        assert set(acked) <= set(ids)
        assert len(ids) == len(acked)
    finally:
        s.cleanup()


def test_kill9_every_acknowledged_insert_is_audited():
    s, path = start(["--setParameter", "auditAuthorizationSuccess=true"])
    try:
        stop, acked, threads = threading.Event(), [], []
        for k in range(4):
            t = threading.Thread(target=insert_load, args=(s, stop, acked, "k%d" % k))
            t.start()
            threads.append(t)
        time.sleep(1.5)
        s.kill9()
        stop.set()
        for t in threads:
            t.join()
        assert len(acked) > 50
        ids = set(insert_ids(read_json_events(path)))
        missing = [i for i in acked if i not in ids]
        assert not missing, "acknowledged without an audit event: %s" % missing[:5]
    finally:
        s.cleanup()


def test_journaled_write_with_audit():
    s, path = start(["--setParameter", "auditAuthorizationSuccess=true"])
    try:
        c = connect(s)
        c.j.t.with_options(write_concern=pymongo.WriteConcern(j=True)).insert_one({"_id": 7})
        ev = read_json_events(path)   # already written: the reply waited for it
        assert 7 in insert_ids(ev)
        c.close()
    finally:
        s.cleanup()


def test_journaled_writes_with_audit_path_a_fifo():
    """An audit path that is a FIFO (a log shipper reads the events) or a
    device (/dev/null): the group commit's sync of the audit file does not
    apply to it.  Before, fdatasync's EINVAL failed the j:true writes of
    every group commit that found the file written since the last one."""
    s = Sabled()
    fifo = os.path.join(s.root, "audit.pipe")
    os.mkfifo(fifo)
    rfd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # sabled's open waits for a reader
    got, done = bytearray(), threading.Event()

    def drain():
        while not done.is_set():
            try:
                chunk = os.read(rfd, 1 << 16)
            except BlockingIOError:
                time.sleep(0.005)
                continue
            got.extend(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        s.start(["--auditDestination", "file", "--auditFormat", "JSON", "--auditPath", fifo,
                 "--setParameter", "auditAuthorizationSuccess=true"])
        c = connect(s)
        coll = c.fifo.t.with_options(write_concern=pymongo.WriteConcern(j=True))
        errors = []

        def writer(base):
            for i in range(50):
                try:
                    coll.insert_one({"_id": base + i})
                    time.sleep(0.004)  # spread over several group commits
                except OperationFailure as e:
                    errors.append(str(e))

        threads = [threading.Thread(target=writer, args=(k * 1000,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [], errors[:3]
        assert c.fifo.t.count_documents({}) == 200
        deadline = time.time() + 10
        while time.time() < deadline:
            events = [json_util.loads(line) for line in bytes(got).decode().splitlines()
                      if line.endswith("}")]
            if len(insert_ids(events)) >= 200:
                break
            time.sleep(0.05)
        assert sorted(insert_ids(events)) == sorted(k * 1000 + i for k in range(4) for i in range(50))
        c.close()
        with open(s.logpath) as f:
            assert "audit log sync failed" not in f.read()
    finally:
        s.cleanup()
        done.set()
        reader.join()
        os.close(rfd)


def _cached_bytes(path):
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", path],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


def test_synced_audit_file_leaves_the_page_cache():
    """The journal flusher's sync of the audit file (every 100 ms) also drops
    what it synced from the page cache: the file is never read back, and
    fresh page-cache pages were what made an audited insert expensive here
    (docs/audit.md, "Designs measured and rejected").  The events are all still in the file."""
    s, path = start(["--setParameter", "auditAuthorizationSuccess=true"])
    try:
        c = connect(s)
        blob = "x" * 1000
        for i in range(0, 4000, 10):  # 10 KB commands: recorded whole
            c.pc.t.insert_many([{"_id": i + j, "v": blob} for j in range(10)])
        size = os.path.getsize(path)
        assert size > 2 << 20, size
        deadline = time.time() + 10
        while _cached_bytes(path) > size // 4 and time.time() < deadline:
            time.sleep(0.1)
        cached = _cached_bytes(path)
        assert cached <= size // 4, "%d of %d bytes of the audit file still cached" % (cached, size)
        assert len(insert_ids(read_json_events(path))) == 4000
        c.close()
    finally:
        s.cleanup()


def test_unwritable_audit_file_refuses_then_recovers():
    """The audit path points at /dev/full (every write: ENOSPC), then at a
    real file: audited writes are refused with 14031 meanwhile, and work
    again on their own once the file can be written."""
    s = Sabled()
    try:
        link = os.path.join(s.root, "audit.json")
        real = os.path.join(s.root, "real-audit.json")
        os.symlink("/dev/full", link)
        s.start(["--auditDestination", "file", "--auditPath", link,
                 "--setParameter", "auditAuthorizationSuccess=true"])
        c = connect(s)
        with pytest.raises(OperationFailure) as ei:
            c.full.t.insert_one({"_id": "refused"})
        assert ei.value.code == 14031
        assert "audit log write failed" in str(ei.value)
        os.unlink(link)
        os.symlink(real, link)
        deadline = time.time() + 10
        while True:
            try:
                c.full.t.insert_one({"_id": "after"})
                break
            except OperationFailure:
                assert time.time() < deadline, "audit log did not recover"
                time.sleep(0.1)
        ev = read_json_events(real)
        ids = insert_ids(ev)
        assert "after" in ids and "refused" not in ids
        assert c.full.t.count_documents({"_id": "refused"}) == 0
        c.close()
    finally:
        s.cleanup()


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_directory_refuses_then_recovers():
    s = Sabled()
    try:
        d = os.path.join(s.root, "auditdir")
        os.mkdir(d)
        os.chmod(d, 0o555)
        path = os.path.join(d, "audit.json")
        s.start(["--auditDestination", "file", "--auditPath", path,
                 "--setParameter", "auditAuthorizationSuccess=true"])
        c = connect(s)
        with pytest.raises(OperationFailure) as ei:
            c.ro.t.insert_one({"_id": 1})
        assert "audit log write failed" in str(ei.value)
        os.chmod(d, 0o755)
        deadline = time.time() + 10
        while True:
            try:
                c.ro.t.insert_one({"_id": 2})
                break
            except OperationFailure:
                assert time.time() < deadline
                time.sleep(0.1)
        assert 2 in insert_ids(read_json_events(path))
        c.close()
    finally:
        s.cleanup()


def test_yaml_config_and_bad_options(tmp_path):
    s = Sabled()
    try:
        path = os.path.join(s.root, "audit.json")
        conf = os.path.join(s.root, "sabled.yaml")
        with open(conf, "w") as f:
            f.write("auditLog:\n  destination: file\n  format: JSON\n  path: %s\n"
                    "  filter: '{\"atype\": \"createCollection\"}'\n"
                    "setParameter:\n  auditAuthorizationSuccess: true\n" % path)
        s.start(["--config", conf])
        c = connect(s)
        cfg = c.admin.command("getAuditConfig")
        assert cfg["filter"] == {"atype": "createCollection"}
        assert cfg["auditAuthorizationSuccess"] is True
        assert cfg["destination"] == "file" and cfg["path"] == path
        c.y.create_collection("z")
        ev = wait_events(path, lambda e: of_type(e, "createCollection"))
        assert [e["atype"] for e in ev] == ["createCollection"]
        c.close()
    finally:
        s.cleanup()
    from sabled import run_sabled
    for bad in (["--auditDestination", "nowhere"], ["--auditFormat", "XML"],
                ["--auditFilter", "{not json"]):
        r = run_sabled(["--dbpath", str(tmp_path)] + bad)
        assert r.returncode != 0 and "audit" in (r.stderr + r.stdout), bad
    r = run_sabled(["--dbpath", str(tmp_path), "--auditDestination", "file"])
    assert r.returncode != 0 and "auditLog.path" in r.stderr


def test_console_destination():
    s = Sabled()
    try:
        s.start(["--auditDestination", "console"])
        c = connect(s)
        c.con.create_collection("x")
        c.close()
        assert s.stop() == 0
        with open(os.path.join(s.root, "stdout.txt")) as f:
            ev = [json_util.loads(l) for l in f if l.startswith('{"atype"')]
        assert [e["atype"] for e in ev if e["atype"] in ("startup", "createCollection",
                                                         "shutdown")] == [
            "startup", "createCollection", "shutdown"]
    finally:
        s.cleanup()


def test_implicit_creation_events():
    """A first insert (or upsert, or $merge) into a collection that does not
    exist emits createCollection, and createDatabase when the database is new,
    before the write is acknowledged (the file holds them at the reply)."""
    s, path = start(["--auditFilter", '{"atype": {"$in": ["createCollection", '
                     '"createDatabase"]}}'])
    try:
        c = connect(s)
        c.newdb.first.insert_one({"_id": 1})          # new database and collection
        assert [(e["atype"], e["param"]["ns"]) for e in read_json_events(path)] == [
            ("createDatabase", "newdb"), ("createCollection", "newdb.first")]
        c.newdb.first.insert_one({"_id": 2})          # exists: nothing
        c.newdb.second.update_one({"_id": 1}, {"$set": {"a": 1}}, upsert=True)
        c.newdb.second.update_one({"_id": 2}, {"$set": {"a": 1}}, upsert=True)
        list(c.newdb.first.aggregate([{"$merge": {"into": "third"}}]))
        c.otherdb.t.insert_many([{"_id": i} for i in range(3)])
        ev = [(e["atype"], e["param"]["ns"]) for e in read_json_events(path)]
        assert ev == [("createDatabase", "newdb"), ("createCollection", "newdb.first"),
                      ("createCollection", "newdb.second"),
                      ("createCollection", "newdb.third"),
                      ("createDatabase", "otherdb"), ("createCollection", "otherdb.t")]
        c.close()
    finally:
        s.cleanup()


def test_all_user_and_role_commands_are_audited():
    s, path = start(["--auditFilter", '{"atype": {"$nin": ["authCheck", "clientMetadata", '
                     '"startup", "authenticate"]}}'])
    try:
        c = connect(s)
        a = c.admin
        a.command("createUser", "v1", pwd="secret-v1", roles=["read"])
        a.command("updateUser", "v1", customData={"team": "x"})
        a.command("grantRolesToUser", "v1", roles=["readWrite"])
        a.command("revokeRolesFromUser", "v1", roles=["readWrite"])
        a.command("createRole", "q1", privileges=[], roles=[])
        a.command("updateRole", "q1", roles=["read"])
        a.command("grantRolesToRole", "q1", roles=["readWrite"])
        a.command("revokeRolesFromRole", "q1", roles=["readWrite"])
        priv = [{"resource": {"db": "x", "collection": "y"}, "actions": ["find"]}]
        a.command("grantPrivilegesToRole", "q1", privileges=priv)
        a.command("revokePrivilegesFromRole", "q1", privileges=priv)
        a.command("dropRole", "q1")
        a.command("dropUser", "v1")
        c.other.command("createUser", "v2", pwd="secret-v2", roles=[])
        c.other.command("createRole", "q2", privileges=[], roles=[])
        c.other.command("dropAllUsersFromDatabase")
        c.other.command("dropAllRolesFromDatabase")
        c.admin.command("setAuditConfig", filter={})
        want = ["createUser", "updateUser", "grantRolesToUser", "revokeRolesFromUser",
                "createRole", "updateRole", "grantRolesToRole", "revokeRolesFromRole",
                "grantPrivilegesToRole", "revokePrivilegesFromRole", "dropRole", "dropUser",
                "createUser", "createRole", "dropAllUsersFromDatabase",
                "dropAllRolesFromDatabase", "auditConfigChange"]
        ev = read_json_events(path)   # each reply waited for its event
        assert [e["atype"] for e in ev] == want
        assert ev[0]["param"]["user"] == "v1" and ev[0]["param"]["db"] == "admin"
        assert ev[1]["param"]["customData"] == {"team": "x"}
        assert ev[8]["param"]["role"] == "q1" and ev[8]["param"]["privileges"] == priv
        assert ev[14]["param"]["db"] == "other"
        assert ev[16]["param"]["config"]["filter"] == {}
        assert "secret-v" not in open(path).read()
        c.close()
    finally:
        s.cleanup()


def test_unusable_audit_directory_refuses_then_recovers():
    """The audit path's directory cannot hold the file (here: it is a regular
    file, which stops root too): audited writes are refused, then work on
    their own once the directory exists."""
    s = Sabled()
    try:
        d = os.path.join(s.root, "auditdir")
        with open(d, "w") as f:
            f.write("not a directory\n")
        path = os.path.join(d, "audit.json")
        s.start(["--auditDestination", "file", "--auditPath", path,
                 "--setParameter", "auditAuthorizationSuccess=true"])
        c = connect(s)
        with pytest.raises(OperationFailure) as ei:
            c.ud.t.insert_one({"_id": 1})
        assert "audit log write failed" in str(ei.value) and path in str(ei.value)
        os.unlink(d)
        os.mkdir(d)
        deadline = time.time() + 10
        while True:
            try:
                c.ud.t.insert_one({"_id": 2})
                break
            except OperationFailure:
                assert time.time() < deadline, "audit log did not recover"
                time.sleep(0.1)
        assert 2 in insert_ids(read_json_events(path))
        assert 1 not in insert_ids(read_json_events(path))
        c.close()
    finally:
        s.cleanup()
