"""
Linearizability checker for single-key register histories (read, write,
compare-and-set), in the format of history.py.

The search is Wing & Gong's, with Lowe's memoisation ("Testing for
linearizability", 2017) as Knossos and Porcupine (checker.go) implement it:
call and return entries in one doubly linked list ordered by time (calls
before returns at equal times); walking from the head, an op whose call is
met is tried against the model and, if legal and the pair (set of
linearized ops, model state) was not seen before, lifted out of the list and
pushed; meeting a return entry means that op cannot be placed yet, so the
last choice is undone.  The history is linearizable once every ok op is
lifted.

What each outcome means here:
- ok: must be linearized between its call and return;
- fail: did not happen, dropped (as Knossos does);
- info: a write or cas that may take effect at any time after its call, or
  never: it is optional (need not be lifted); an info read tells nothing
  and is dropped.

Three things keep info ops from blowing the search up (each is exact, and
the unit tests cross-check the verdicts against a brute-force search): an
optional op whose new value nothing reads or expects is dropped (the next
op to touch the register after it must be a write); one whose value is
observed gets a deadline entry at its last observer's return, where it is
skipped if not yet placed; and at each step required ops are tried before
optional ones.  The memo stores the linearized set as (count of leading
ops all done, the frontier bits, the bits of optional ops without a
deadline), which keeps it small on long histories.

Keys are checked independently (a register per key).  For a failure the
report gives a small witness: the shortest failing prefix (cut after the
k-th completion; ops still running at the cut become info), then the
latest quiescent point before it from which the rest still fails when the
register may hold any value there, then ok reads dropped one by one while it
still fails.  Each step only weakens the history, so the witness is itself
non-linearizable and so is the whole history.

Must stay true: every search loop is bounded by a deadline (verdict
"unknown" when it runs out), and values are compared as JSON (1 != true).
"""
import time

from history import OK, FAIL, INFO, by_key, outcome_counts, pair, read_events

READ, WRITE, CAS = 0, 1, 2
_CODES = {"read": READ, "write": WRITE, "cas": CAS}


class _Any:
    """The register may hold any value (the state at a cut of the witness)."""
    def __repr__(self):
        return "any"


ANY = _Any()


def freeze(v):
    """A hashable form of a JSON value that keeps JSON's distinctions."""
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, list):
        return ("list",) + tuple(freeze(x) for x in v)
    if isinstance(v, dict):
        return ("doc",) + tuple((k, freeze(x)) for k, x in sorted(v.items()))
    return v


class _Entry:
    """An op as the search sees it: code, argument(s), call time, and
    either required (opt False: placed by ret) or optional (opt True: placed
    by ret, ret None for no bound, or skipped)."""
    __slots__ = ("op", "code", "a", "b", "call", "ret", "opt")

    def __init__(self, op, code, a, b, call, ret, opt=False):
        self.op, self.code, self.a, self.b = op, code, a, b
        self.call, self.ret, self.opt = call, ret, opt


def _entries(ops):
    """Search entries for one key's ops: fail ops and info reads dropped."""
    out = []
    for op in ops:
        code = _CODES.get(op.f)
        if code is None:
            raise ValueError("register history: unknown f %r in %s" % (op.f, op.describe()))
        if op.type == FAIL or (op.type == INFO and code == READ):
            continue
        if code == READ:
            a, b = freeze(op.out), None
        elif code == WRITE:
            a, b = freeze(op.value), None
        else:
            if not (isinstance(op.value, list) and len(op.value) == 2):
                raise ValueError("cas value must be [expected, new]: %s" % op.describe())
            a, b = freeze(op.value[0]), freeze(op.value[1])
        if op.type == OK:
            out.append(_Entry(op, code, a, b, op.call, op.ret))
        else:
            out.append(_Entry(op, code, a, b, op.call, None, True))
    return out


def _optional_deadlines(entries):
    """For each optional write/cas: until when its effect can matter.

    An optional op's new value matters only to ops that observe that value
    (a read of it, a cas expecting it).  Placed after every observer has
    returned, or with no observer at all, it might as well not have
    happened: the next op to touch the register must be a write (or the
    end).  So it is dropped when nothing observes it, and must be placed by
    min(its own bound, the last observer's return) or be skipped.  Returns
    {index: deadline} (None: no bound) for the optional ops to keep.
    """
    inf = float("inf")
    obs = {}
    for e in entries:
        if e.code == READ or e.code == CAS:
            t = inf if e.ret is None else e.ret
            if t > obs.get(e.a, -inf):
                obs[e.a] = t
    out = {}
    for i, e in enumerate(entries):
        if not e.opt or e.code == READ:
            continue
        d = obs.get(e.a if e.code == WRITE else e.b)
        if d is None or d < e.call:
            continue
        if e.ret is not None and e.ret < d:
            d = e.ret
        out[i] = None if d == inf else d
    return out


def search(entries, init=None, deadline=None):
    """Wing-Gong-Lowe search over entries (see the module docstring).

    init is the register's first value (None: no document; ANY: unknown).
    Returns (verdict, stats): verdict True (linearizable), False, or None
    when the deadline (time.monotonic()) passed; stats counts steps and
    cache size.

    Info ops whose effect can still matter are optional: a call entry and,
    when they have one, a deadline entry; meeting the deadline of one not
    yet placed skips it (a choice undone like a placement).
    """
    while True:         # dropping an info cas may leave more unobserved
        keep = _optional_deadlines(entries)
        n_before = len(entries)
        order = [i for i, e in enumerate(entries) if not e.opt or i in keep]
        entries = [entries[i] for i in order]
        if len(entries) == n_before:
            break
    # Ops that may stay unplaced to the end take the top bits (see cache).
    order.sort(key=lambda i: (i in keep and keep[i] is None, entries[i].call))
    entries = [entries[i] for i in order]
    optional = set(i for i, e in enumerate(entries) if e.opt)
    dl = _optional_deadlines(entries)
    n = len(entries)
    # Linked list nodes: 0 is the head; 1..m the call/return/deadline entries.
    evs = []
    for i, e in enumerate(entries):
        evs.append((e.call, 0, i))
        if not e.opt:
            evs.append((e.ret, 1, i))
        elif dl.get(i) is not None:
            evs.append((dl[i], 2, i))
    evs.sort()
    m = len(evs)
    nxt = list(range(1, m + 1)) + [-1]
    nxt[m] = -1
    prv = [-1] + list(range(0, m))
    is_call = [False] * (m + 1)
    op_of = [0] * (m + 1)
    ret_node = [-1] * n
    call_node = [-1] * n
    for pos, (_, kind, i) in enumerate(evs, 1):
        op_of[pos] = i
        if kind == 0:
            is_call[pos] = True
            call_node[i] = pos
        else:
            ret_node[i] = pos
    code = [e.code for e in entries]
    arg_a = [e.a for e in entries]
    arg_b = [e.b for e in entries]
    ok_left = n - len(optional)
    stats = {"steps": 0, "cache": 0, "ops": n}
    if ok_left == 0:
        return True, stats

    def unlink(p):
        q, r = prv[p], nxt[p]
        nxt[q] = r
        if r != -1:
            prv[r] = q

    def relink(p):
        q, r = prv[p], nxt[p]
        nxt[q] = p
        if r != -1:
            prv[r] = p

    state = init
    linearized = 0
    stack = []          # (call node, state before, skipped?, pass)
    # Memo of (linearized set, state) tried.  The set is a bit per op (ops
    # in call order, those without a deadline last), stored as (number of
    # low bits all set, the rest up to the ops without a deadline, those):
    # the rest is the short frontier, which keeps the memo small.
    n_bounded = n - sum(1 for i in optional if dl.get(i) is None)
    bounded = (1 << n_bounded) - 1
    cache = set()
    entry = nxt[0]
    steps = 0
    # Candidates are the calls before the first return (or deadline) entry.
    # Required ops are tried first (pass 1), optional ones after (pass 2),
    # then skipping an optional op whose deadline this is: placing an info
    # write only when a later op needs it avoids most backtracking.
    second = False
    two_passes = bool(optional)
    while True:
        steps += 1
        if deadline is not None and not steps & 4095 and time.monotonic() > deadline:
            stats.update(steps=steps, cache=len(cache))
            return None, stats
        if entry != -1 and is_call[entry]:
            i = op_of[entry]
            if two_passes and (i in optional) != second:
                entry = nxt[entry]
                continue
            c = code[i]
            if c == READ:
                if state is ANY:
                    legal, new = True, arg_a[i]
                else:
                    legal, new = state == arg_a[i], state
            elif c == WRITE:
                legal, new = True, arg_a[i]
            else:
                legal = state is ANY or state == arg_a[i]
                new = arg_b[i]
            if legal:
                lin = linearized | (1 << i)
                main = lin & bounded
                low = (~main & (main + 1)).bit_length() - 1
                k = (low, main >> low, lin >> n_bounded, new)
                if k not in cache:
                    cache.add(k)
                    stack.append((entry, state, False, second))
                    state, linearized = new, lin
                    unlink(entry)
                    r = ret_node[i]
                    if r != -1:
                        unlink(r)
                    if i not in optional:
                        ok_left -= 1
                        if ok_left == 0:
                            stats.update(steps=steps, cache=len(cache))
                            return True, stats
                    second = False
                    entry = nxt[0]
                    continue
            entry = nxt[entry]
            continue
        if two_passes and not second:
            second = True
            entry = nxt[0]
            continue
        if entry != -1 and op_of[entry] in optional:
            # The deadline of an optional op not placed: skip it, if not tried.
            i = op_of[entry]
            lin = linearized | (1 << i)
            main = lin & bounded
            low = (~main & (main + 1)).bit_length() - 1
            k = (low, main >> low, lin >> n_bounded, state)
            if k not in cache:
                cache.add(k)
                stack.append((call_node[i], state, True, second))
                linearized = lin
                unlink(call_node[i])
                unlink(entry)
                second = False
                entry = nxt[0]
                continue
        # A return entry (or a deadline already tried): undo the last choice.
        if not stack:
            stats.update(steps=steps, cache=len(cache))
            return False, stats
        node, state, skipped, second = stack.pop()
        i = op_of[node]
        linearized &= ~(1 << i)
        r = ret_node[i]
        if r != -1:
            relink(r)
        relink(node)
        if i not in optional:
            ok_left += 1
        entry = r if skipped else nxt[node]


def _prefix(entries, k):
    """Entries cut just after the k-th ok completion: ok ops completed by then
    stay ok, ops called by then and still open become info (reads dropped)."""
    rets = sorted((e.ret, idx) for idx, e in enumerate(entries) if not e.opt)
    t, last = rets[k - 1]
    done = set(idx for _, idx in rets[:k])
    out = []
    for idx, e in enumerate(entries):
        if idx in done:
            out.append(e)
        elif e.call <= t and not (e.opt and e.ret is not None and e.ret <= t):
            if e.code == READ:
                continue
            out.append(_Entry(e.op, e.code, e.a, e.b, e.call, None, True))
    return out, entries[last]


def _after_cut(entries, t):
    """The history from time t on, weakened so that if it is not
    linearizable from any value, neither is the whole: ops completed by t
    are dropped; ops open at t become optional within their own bounds
    (they may have taken effect before t, absorbed into the unknown value)
    and reads open at t are dropped; ops called after t stay as they are."""
    out = []
    for e in entries:
        if e.call > t or (e.opt and e.ret is None):
            out.append(e)
        elif e.ret is not None and e.ret > t and e.code != READ:
            out.append(_Entry(e.op, e.code, e.a, e.b, e.call, e.ret, True))
    return out


def _witness(entries, init, deadline):
    """A small non-linearizable sub-history (see the module docstring).
    Returns (entries, failing entry, initial value, prefix ok count)."""
    n_ok = sum(1 for e in entries if not e.opt)
    lo, hi = 1, n_ok          # the k-th prefix fails for k = hi
    while lo < hi and time.monotonic() < deadline:
        mid = (lo + hi) // 2
        v, _ = search(_prefix(entries, mid)[0], init, deadline)
        if v is False:
            hi = mid
        elif v is True:
            lo = mid + 1
        else:
            break
    cur, failing = _prefix(entries, hi)
    start = init
    cuts = sorted(set(e.ret for e in cur if e.ret is not None and e.ret < failing.call))
    lo, hi = 0, len(cuts)     # number of cuts known to keep it failing: lo
    while lo < hi and time.monotonic() < deadline:
        mid = (lo + hi + 1) // 2
        v, _ = search(_after_cut(cur, cuts[mid - 1]), ANY, deadline)
        if v is False:
            lo = mid
        else:
            hi = mid - 1
    if lo:
        cur, start = _after_cut(cur, cuts[lo - 1]), ANY
    for e in list(cur):
        if time.monotonic() > deadline:
            break
        if e is failing or e.code != READ:
            continue
        trial = [x for x in cur if x is not e]
        if search(trial, start, deadline)[0] is False:
            cur = trial
    keep = _optional_deadlines(cur)      # what the search itself would ignore
    cur = [e for i, e in enumerate(cur) if not e.opt or i in keep]
    return cur, failing, start, n_ok


def check_key(ops, init=None, time_limit=60.0):
    """Check one key's ops.  Returns a dict: valid (True/False/"unknown"),
    ops, seconds, steps, and for a failure: witness (ops, ordered by call),
    failing (the op whose completion the witness cannot fit), initial."""
    t0 = time.monotonic()
    deadline = t0 + time_limit
    entries = _entries(ops)
    verdict, stats = search(entries, freeze(init), deadline)
    res = {"valid": {True: True, False: False, None: "unknown"}[verdict],
           "ops": len(ops), "steps": stats["steps"], "cache": stats["cache"]}
    if verdict is False:
        # Minimising gets its own budget: a failure is worth explaining.
        w, failing, start, _ = _witness(entries, freeze(init), time.monotonic() + time_limit)
        res["witness"] = sorted((e.op for e in w), key=lambda o: (o.call, o.index))
        res["witness_open_at_cut"] = set(e.op.index for e in w if e.opt and e.op.type == OK)
        res["failing"] = failing.op
        res["initial"] = "any value" if start is ANY else init
    res["seconds"] = round(time.monotonic() - t0, 3)
    return res


def check(ops, init=None, time_limit=60.0):
    """Check every key of a register history (ops from history.pair).
    Returns {valid, keys: {key: check_key result}, counts}; valid is False if
    any key fails, "unknown" if none fails but one ran out of time."""
    keys = {}
    for key, kops in sorted(by_key(ops).items(), key=lambda kv: str(kv[0])):
        keys[key] = check_key(kops, init, time_limit)
    vals = [r["valid"] for r in keys.values()]
    valid = False if False in vals else ("unknown" if "unknown" in vals else True)
    return {"valid": valid, "keys": keys, "counts": outcome_counts(ops)}


def report(result):
    """Human-readable lines for a check() result."""
    lines = ["register: %s (%s)" % (result["valid"], result["counts"])]
    for key, r in result["keys"].items():
        lines.append("  key %s: %s, %d ops, %.3f s, %d steps"
                     % (key, r["valid"], r["ops"], r["seconds"], r["steps"]))
        if r["valid"] is False:
            lines.append("    cannot linearize: %s" % r["failing"].describe())
            lines.append("    witness (%d ops, register starting as %s):"
                         % (len(r["witness"]), r["initial"]))
            for op in r["witness"]:
                note = (" (open at the cut: may have taken effect before it)"
                        if op.index in r["witness_open_at_cut"] else "")
                lines.append("      " + op.describe() + note)
    return lines


def check_file(path, init=None, time_limit=60.0):
    """Parse a JSON-lines history file and check it."""
    ops, _ = pair(read_events(path))
    return check(ops, init, time_limit)
