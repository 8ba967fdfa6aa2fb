"""
History format shared by the fault-test workload runners and the checkers
(issue 25), and the parser that turns events into operations.

A history is a file of JSON lines, one event per line, in the order the
runner recorded them (completion events after their invocation):

    {"process": 3, "type": "invoke", "f": "write", "key": "k1", "value": 7, "time": 1200}
    {"process": 3, "type": "ok",     "f": "write", "key": "k1", "value": 7, "time": 1950}

Fields:

  process  int or string: the client thread.  A process has at most one
           operation outstanding: its next event after an invoke is that
           operation's completion.  After an "info" completion a runner should
           continue under a new process id (Jepsen's convention); reusing it is
           accepted, the old operation then simply stays open forever.
  type     "invoke", then one of
             "ok"   the operation took effect exactly once, between its
                    invocation and its completion;
             "fail" it certainly did not take effect (duplicate key, a
                    compare-and-set whose expected value did not match, an
                    error returned before anything was done);
             "info" unknown (timeout, network error, write-concern error): it
                    may or may not have taken effect, at any time after its
                    invocation, with no upper bound (even after the run).
           An invoke with no completion by the end of the file counts as info.
  f        register workload: "read", "write", "cas";
           set workload:      "add", "read", "final-read";
           append workload:   "append", "read", "final-read".
           ("final-read": the reads after healing, one per member.)
  key      the register / set / document the operation is on (a JSON scalar;
           absent means null).  Checkers check each key on its own.
  value    on invoke, the argument: write: the value; cas: [expected, new];
           add / append: the element (unique per key); read: null.
           On completion of a read, what was read: register: the value (null:
           no document); set / append: the list of elements (null: no
           document, same as []).  Other completions may repeat the argument
           or omit it (the invoke's value is used).
  time     a number from a monotonic clock, one unit for the whole file (the
           runners write integer nanoseconds, time.monotonic_ns()).
  node     optional: the member that served the operation.

Other fields are kept and ignored.  Events whose process is "nemesis" record
the faults ("partition", "heal", "kill", "pause", ...); checkers skip them and
reports count them.
"""
import json

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"
NEMESIS = "nemesis"


class HistoryError(ValueError):
    """The history breaks the format (a completion without invoke, ...)."""


class Op:
    """One operation: invocation and completion merged.

    type is ok, fail or info; ret is None for info (no upper bound).
    value is the invocation's argument, out the completion's value (reads).
    """
    __slots__ = ("index", "process", "type", "f", "key", "value", "out",
                 "call", "ret", "node")

    def __init__(self, index, process, type_, f, key, value, out, call, ret, node=None):
        self.index, self.process, self.type, self.f = index, process, type_, f
        self.key, self.value, self.out = key, value, out
        self.call, self.ret, self.node = call, ret, node

    def describe(self):
        """One human-readable line: process, f, argument/result, times, outcome."""
        if self.f in ("read", "final-read"):
            what = "%s -> %s" % (self.f, json.dumps(self.out))
        else:
            what = "%s %s" % (self.f, json.dumps(self.value))
        end = "..." if self.ret is None else str(self.ret)
        node = " on %s" % self.node if self.node is not None else ""
        return "p%s %s key=%s [%s, %s] %s%s" % (self.process, what, json.dumps(self.key),
                                                self.call, end, self.type, node)

    def events(self):
        """The op back as two history events (for writing a sub-history)."""
        inv = {"process": self.process, "type": INVOKE, "f": self.f, "key": self.key,
               "value": self.value, "time": self.call}
        if self.ret is None:
            return [inv]
        done = dict(inv, type=self.type, time=self.ret)
        if self.f in ("read", "final-read"):
            done["value"] = self.out
        return [inv, done]

    def __repr__(self):
        return "<Op %s>" % self.describe()


def read_events(path_or_file):
    """Parse a JSON-lines history (a path, '-' for stdin is the caller's job,
    or an open file) into a list of event dicts; blank lines are skipped."""
    if hasattr(path_or_file, "read"):
        lines = path_or_file.read().splitlines()
    else:
        with open(path_or_file, encoding="utf-8") as f:
            lines = f.read().splitlines()
    events = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            events.append(json.loads(line))
        except ValueError as e:
            raise HistoryError("line %d: not JSON: %s" % (n, e)) from None
    return events


def write_events(events, path):
    """Write events as JSON lines."""
    with open(path, "w", encoding="utf-8") as f:
        for e in events:
            f.write(json.dumps(e, separators=(",", ":")) + "\n")


def _hashable(p):
    return json.dumps(p) if isinstance(p, (list, dict)) else p


def pair(events):
    """Merge invocations with their completions.

    Returns (ops, nemesis): ops in invocation order, nemesis the list of
    nemesis events.  Raises HistoryError on a completion without an open
    invocation, a second invocation while one is open (unless the open one
    completed with info) or a completion whose f or key differs.
    """
    open_ = {}
    ops, nemesis = [], []
    for n, e in enumerate(events, 1):
        try:
            proc, typ, t = e["process"], e["type"], e["time"]
        except (KeyError, TypeError):
            raise HistoryError("event %d lacks process, type or time: %r" % (n, e)) from None
        if proc == NEMESIS:
            nemesis.append(e)
            continue
        p = _hashable(proc)
        f, key = e.get("f"), e.get("key")
        if typ == INVOKE:
            if p in open_:
                raise HistoryError("event %d: process %r invokes while op %r is open"
                                   % (n, proc, open_[p].describe()))
            op = Op(len(ops), proc, INFO, f, key, e.get("value"), None, t, None, e.get("node"))
            open_[p] = op
            ops.append(op)
        elif typ in (OK, FAIL, INFO):
            op = open_.pop(p, None)
            if op is None:
                raise HistoryError("event %d: %s of process %r without an invoke" % (n, typ, proc))
            if f != op.f or key != op.key:
                raise HistoryError("event %d: completion %s/%r does not match invoke %s/%r"
                                   % (n, f, key, op.f, op.key))
            if t < op.call:
                raise HistoryError("event %d: completes before it was invoked" % n)
            op.type = typ
            if op.node is None:
                op.node = e.get("node")
            if typ == INFO:
                op.ret = None
            else:
                op.ret = t
                op.out = e.get("value", op.value)
        else:
            raise HistoryError("event %d: unknown type %r" % (n, typ))
    return ops, nemesis


def by_key(ops):
    """Group ops by key, keeping order: {key: [op, ...]} (keys made hashable)."""
    out = {}
    for op in ops:
        out.setdefault(_hashable(op.key), []).append(op)
    return out


def outcome_counts(ops):
    """{'ok': n, 'fail': n, 'info': n} over all ops."""
    c = {OK: 0, FAIL: 0, INFO: 0}
    for op in ops:
        c[op.type] += 1
    return c
