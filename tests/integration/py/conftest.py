"""
Fixtures for the pymongo integration tests.

server / client: one sabled per test module (started once, cleaned up after
the module even when tests fail).  fresh_server: a sabled of the test's own,
for tests that restart, kill or reconfigure it.  db: a database private to
the test on the module's server, so tests sharing a server do not see each
other's data.

A SIGTERM ends the session as Ctrl-C does (sabled.exit_cleanly_on_sigterm),
so the servers it started are stopped and their directories removed.
"""

import os
import re
import resource
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from sabled import Sabled, exit_cleanly_on_sigterm, sabled_path  # noqa: E402


def pytest_configure(config):
    exit_cleanly_on_sigterm()
    # The concurrency tests open >1000 sockets from this process.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        pass


def pytest_sessionstart(session):
    if not os.path.exists(sabled_path()):
        raise pytest.UsageError("sabled not found at %s: build it (scripts/build.sh) or set SABLED"
                                % sabled_path())


@pytest.fixture(scope="module")
def server():
    s = Sabled()
    try:
        s.start()
        yield s
    finally:
        s.cleanup()


@pytest.fixture(scope="module")
def client(server):
    c = server.client()
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def fresh_server():
    s = Sabled()
    try:
        yield s
    finally:
        s.cleanup()


_counter = [0]


@pytest.fixture
def db(client, request):
    _counter[0] += 1
    name = re.sub(r"[^A-Za-z0-9_]", "_", request.node.name)[:40] + "_%d" % _counter[0]
    d = client[name]
    try:
        yield d
    finally:
        try:
            client.drop_database(name)
        except Exception:
            pass
