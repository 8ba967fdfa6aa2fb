"""
Tests of netfaults.py: three namespaces with a TCP echo / UDP recorder in
each (nsprobe.py); connectivity, a partition, an isolated member, a bridge,
a one-way drop, heal; pause / resume / kill of a spawned process; and that
nothing is left behind, also after an exception, Ctrl-C or SIGTERM.

Needs root, iproute2 and nftables; skipped otherwise.  Only the addresses
inside the namespaces the test creates are ever contacted.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(HERE, "nsprobe.py")
PORT = 7725
PY = sys.executable


def _why_not():
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return "%s not found (apt-get install iproute2 nftables; scripts/deps.sh)" % tool
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, timeout=10)
    if r.returncode:
        return "ip netns unavailable: %s" % r.stderr.decode().strip()
    return None


pytestmark = pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")

import netfaults  # noqa: E402  (imported after the skip check for a clearer report)


def ours():
    return [ns for ns in netfaults.list_namespaces()
            if ns.startswith("%s%d-" % (netfaults.PREFIX, os.getpid()))]


@pytest.fixture(scope="module")
def cluster():
    with netfaults.Cluster(["n1", "n2", "n3"]) as c:
        for m in c.members:
            p = c.spawn(m, [PY, PROBE, "serve", str(PORT), "--seconds", "120"],
                        stdout=subprocess.PIPE, text=True)
            assert p.stdout.readline().strip() == "ready"
        yield c
    assert ours() == [], "namespaces left behind"


def tcp(c, src, timeout=0.5):
    """What src gets from each other member's echo server: {dst: result}."""
    targets = {"%s:%d" % (c.addr[m], PORT): m for m in c.members if m != src}
    r = c.run(src, [PY, PROBE, "tcp", *targets, "--timeout", str(timeout)], timeout=20)
    assert r.returncode == 0, r.stderr
    return {targets[t]: v for t, v in json.loads(r.stdout).items()}


def reach(c):
    """{(src, dst): True if a TCP echo works}."""
    out = {}
    for s in c.members:
        for d, v in tcp(c, s).items():
            assert v in ("ok", "timeout"), (s, d, v)
            out[(s, d)] = v == "ok"
    return out


def expect(c, cut):
    """All directed pairs work except those in cut (which time out)."""
    got = reach(c)
    want = {(s, d): (s, d) not in cut for s in c.members for d in c.members if s != d}
    assert got == want, {k: v for k, v in got.items() if want[k] != v}


def both(*pairs):
    return {(a, b) for a, b in pairs} | {(b, a) for a, b in pairs}


def udp_arrives(c, src, dst, token):
    c.run(src, [PY, PROBE, "udp-send", "%s:%d" % (c.addr[dst], PORT), token], timeout=10)
    r = c.run(dst, [PY, PROBE, "udp-seen", str(PORT), token], timeout=10)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip() == "yes"


def test_all_connected_and_addresses_only_inside(cluster):
    expect(cluster, set())
    # The addresses and the bridge exist only inside the namespaces.
    root = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True,
                          timeout=10).stdout
    assert netfaults.SUBNET not in root
    assert cluster.addr["n1"] in cluster.run("n1", ["ip", "-o", "addr"], timeout=10).stdout


def test_partition_and_heal(cluster):
    cluster.partition([["n1"], ["n2", "n3"]])
    expect(cluster, both(("n1", "n2"), ("n1", "n3")))
    cluster.heal()
    expect(cluster, set())


def test_isolate(cluster):
    cluster.isolate("n2")
    expect(cluster, both(("n2", "n1"), ("n2", "n3")))
    cluster.heal()


def test_bridge(cluster):
    cluster.bridge("n2", ["n1"], ["n3"])
    expect(cluster, both(("n1", "n3")))
    assert "10.250.25.1" in cluster.rules("n3")
    cluster.heal()
    expect(cluster, set())


def test_one_way_drop(cluster):
    cluster.drop("n1", "n3")
    assert not udp_arrives(cluster, "n1", "n3", "t1")
    assert udp_arrives(cluster, "n3", "n1", "t2")
    assert udp_arrives(cluster, "n1", "n2", "t3")
    # TCP needs both directions: the handshake fails either way.
    expect(cluster, both(("n1", "n3")))
    cluster.heal()
    assert udp_arrives(cluster, "n1", "n3", "t4")
    expect(cluster, set())
    assert [w for _, w in cluster.log][-2:] == ["drop n1 -> n3", "heal"]


def test_pause_resume_kill(cluster):
    p = cluster.spawn("n1", ["sleep", "60"])

    def state():
        with open("/proc/%d/stat" % p.pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]

    cluster.pause(p)
    deadline = time.monotonic() + 5
    while state() != "T" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert state() == "T"
    cluster.resume(p.pid)
    while state() == "T" and time.monotonic() < deadline:
        time.sleep(0.01)
    # Running again: asleep, runnable, or for a moment in an uninterruptible
    # wait (D: a page fault or I/O on a busy machine; CI saw it once).
    assert state() in ("S", "R", "D")
    assert cluster.kill(p) == -signal.SIGKILL
    with pytest.raises(ProcessLookupError):
        cluster.pause(p)
    with pytest.raises(ValueError):
        cluster.pause(os.getpid())       # never a process it did not start


def test_paused_server_does_not_answer(cluster):
    server = [pid for pid, p in cluster._procs.items()
              if p.args[-4:-2] == ["serve", str(PORT)] and p.args[3] == cluster.ns["n2"]][0]
    cluster.pause(server)
    try:
        assert tcp(cluster, "n1")["n2"] == "timeout"
    finally:
        cluster.resume(server)
    assert tcp(cluster, "n1")["n2"] == "ok"


def test_exception_inside_with_cleans_up():
    tag = "%s%dx" % (netfaults.PREFIX, os.getpid())

    def mine():
        return [ns for ns in netfaults.list_namespaces() if ns.startswith(tag + "-")]

    with pytest.raises(RuntimeError):
        with netfaults.Cluster(["a", "b"], tag=tag) as c:
            p = c.spawn("a", ["sleep", "60"])
            assert len(mine()) == 3
            raise RuntimeError("boom")
    assert mine() == []
    assert p.poll() == -signal.SIGKILL


SCRIPT = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, %r)
    import netfaults
    with netfaults.Cluster(["a", "b"]) as c:
        s = c.spawn("a", ["sleep", "60"])
        c.partition([["a"], ["b"]])
        print(c.tag, s.pid, flush=True)
        time.sleep(30)
""" % HERE)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_harness_cleans_up(sig):
    p = subprocess.Popen([PY, "-c", SCRIPT], stdout=subprocess.PIPE, text=True)
    try:
        tag, sleeper = p.stdout.readline().split()
        assert tag.startswith(netfaults.PREFIX)
        assert sum(ns.startswith(tag + "-") for ns in netfaults.list_namespaces()) == 3
        p.send_signal(sig)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert [ns for ns in netfaults.list_namespaces() if ns.startswith(tag + "-")] == []
    assert not os.path.exists("/proc/%s" % sleeper) or _zombie(sleeper)


def _zombie(pid):
    with open("/proc/%s/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "Z"


def test_cleanup_stale_removes_a_dead_harness_leftovers():
    # A harness killed with SIGKILL cannot clean up; the next one does.
    p = subprocess.Popen([PY, "-c", SCRIPT], stdout=subprocess.PIPE, text=True)
    tag, sleeper = p.stdout.readline().split()
    p.kill()
    p.wait(timeout=10)
    os.kill(int(sleeper), signal.SIGKILL)     # the dead harness's child, started by this test
    left = [ns for ns in netfaults.list_namespaces() if ns.startswith(tag + "-")]
    assert len(left) == 3
    assert set(netfaults.cleanup_stale()) >= set(left)
    assert [ns for ns in netfaults.list_namespaces() if ns.startswith(tag + "-")] == []
