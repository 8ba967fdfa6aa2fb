"""
wire.py: the MongoDB wire protocol by hand, for tests that must control the
exact bytes (legacy OP_QUERY, checksums, compression, malformed messages).

Messages are built with pymongo's bson package; nothing here validates what
the server sends beyond what is needed to parse it, so tests can assert on it.
"""

import itertools
import socket
import struct
import zlib

import bson
from bson.codec_options import CodecOptions
from bson.son import SON

OP_REPLY = 1
OP_QUERY = 2004
OP_COMPRESSED = 2012
OP_MSG = 2013

CHECKSUM_PRESENT = 1 << 0
MORE_TO_COME = 1 << 1

MAX_MESSAGE_SIZE = 48000000

_ids = itertools.count(1)
_CODEC = CodecOptions(document_class=SON)


class WireError(Exception):
    pass


def connect(port, timeout=10):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def enc(doc):
    return bson.encode(doc) if not isinstance(doc, (bytes, bytearray)) else bytes(doc)


# -- CRC-32C (Castagnoli), as OP_MSG checksums use ---------------------------

def _crc_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc_table()


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = _CRC32C[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


# -- building messages -------------------------------------------------------

def header(length, request_id, response_to, opcode):
    return struct.pack("<iiii", length, request_id, response_to, opcode)


def op_msg(body, flags=0, sequences=(), checksum=False, request_id=None, raw_body=None):
    """An OP_MSG: kind-0 body (a dict, or raw_body bytes as given), optional
    kind-1 sequences [(identifier, [docs])], optional CRC-32C."""
    rid = request_id if request_id is not None else next(_ids)
    if checksum:
        flags |= CHECKSUM_PRESENT
    payload = struct.pack("<I", flags) + b"\x00" + (raw_body if raw_body is not None else enc(body))
    for ident, docs in sequences:
        inner = ident.encode() + b"\x00" + b"".join(enc(d) for d in docs)
        payload += b"\x01" + struct.pack("<i", 4 + len(inner)) + inner
    length = 16 + len(payload) + (4 if checksum else 0)
    msg = header(length, rid, 0, OP_MSG) + payload
    if checksum:
        msg += struct.pack("<I", crc32c(msg))
    return msg


def op_query(full_collection_name, query, flags=0, skip=0, number_to_return=-1,
             request_id=None):
    rid = request_id if request_id is not None else next(_ids)
    payload = (struct.pack("<i", flags) + full_collection_name.encode() + b"\x00"
               + struct.pack("<ii", skip, number_to_return) + enc(query))
    return header(16 + len(payload), rid, 0, OP_QUERY) + payload


def op_compressed(msg, compressor):
    """Wrap a complete message (header included) in OP_COMPRESSED.
    compressor: 'noop', 'snappy', 'zlib' or 'zstd'."""
    length, rid, rto, opcode = struct.unpack("<iiii", msg[:16])
    body = msg[16:]
    cid = {"noop": 0, "snappy": 1, "zlib": 2, "zstd": 3}[compressor]
    if compressor == "zlib":
        data = zlib.compress(body)
    elif compressor == "snappy":
        data = snappy_compress_literal(body)
    elif compressor == "zstd":
        data = zstd_compress_raw(body)
    else:
        data = body
    payload = struct.pack("<iiB", opcode, len(body), cid) + data
    return header(16 + len(payload), rid, rto, OP_COMPRESSED) + payload


# -- snappy and zstd without client libraries -------------------------------
# Snappy's format allows a stream made only of literals, and zstd's allows a
# frame made only of raw blocks: both are valid input any decoder must accept.

def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def snappy_compress_literal(data):
    out = bytearray(_varint(len(data)))
    pos = 0
    while pos < len(data):
        chunk = data[pos:pos + 65536]
        n = len(chunk) - 1
        if n < 60:
            out.append(n << 2)
        elif n < 256:
            out += bytes([60 << 2, n])
        else:
            out += bytes([61 << 2]) + struct.pack("<H", n)
        out += chunk
        pos += len(chunk)
    return bytes(out)


def snappy_decompress(data):
    pos = 0
    shift = 0
    total = 0
    while True:
        b = data[pos]
        pos += 1
        total |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            break
    out = bytearray()
    while pos < len(data):
        tag = data[pos]
        pos += 1
        kind = tag & 3
        if kind == 0:
            n = tag >> 2
            if n >= 60:
                nb = n - 59
                n = int.from_bytes(data[pos:pos + nb], "little")
                pos += nb
            n += 1
            out += data[pos:pos + n]
            pos += n
            continue
        if kind == 1:
            length = ((tag >> 2) & 7) + 4
            offset = ((tag >> 5) << 8) | data[pos]
            pos += 1
        elif kind == 2:
            length = (tag >> 2) + 1
            offset = struct.unpack("<H", data[pos:pos + 2])[0]
            pos += 2
        else:
            length = (tag >> 2) + 1
            offset = struct.unpack("<I", data[pos:pos + 4])[0]
            pos += 4
        if offset == 0 or offset > len(out):
            raise WireError("bad snappy offset")
        for _ in range(length):
            out.append(out[-offset])
    if len(out) != total:
        raise WireError("snappy length mismatch")
    return bytes(out)


def zstd_compress_raw(data):
    # Frame: magic, descriptor (single segment, 4-byte content size), raw blocks.
    out = bytearray(struct.pack("<I", 0xFD2FB528))
    out.append(0b10100000)  # FCS flag=2 (4 bytes), single segment
    out += struct.pack("<I", len(data))
    pos = 0
    blocks = [data[i:i + 65536] for i in range(0, len(data), 65536)] or [b""]
    for i, blk in enumerate(blocks):
        last = 1 if i == len(blocks) - 1 else 0
        hdr = (len(blk) << 3) | (0 << 1) | last  # type 0 = raw
        out += struct.pack("<I", hdr)[:3] + blk
        pos += len(blk)
    return bytes(out)


def zstd_decompress(data):
    """zstd decompression through the zstd command-line tool (if present)."""
    import shutil
    import subprocess
    exe = shutil.which("zstd")
    if not exe:
        raise WireError("zstd tool not installed")
    return subprocess.run([exe, "-d", "-c", "-q"], input=data, capture_output=True,
                          check=True).stdout


# -- reading replies ----------------------------------------------------------

def recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise WireError("connection closed after %d of %d bytes" % (len(buf), n))
        buf += chunk
    return bytes(buf)


def read_message(sock):
    """Read one whole message; returns (header tuple, raw bytes incl. header)."""
    hdr = recv_exact(sock, 16)
    length, rid, rto, opcode = struct.unpack("<iiii", hdr)
    if length < 16 or length > MAX_MESSAGE_SIZE:
        raise WireError("bad reply length %d" % length)
    return (length, rid, rto, opcode), hdr + recv_exact(sock, length - 16)


def decompress(raw):
    """If raw is OP_COMPRESSED, return (compressor name, the original message);
    else (None, raw)."""
    length, rid, rto, opcode = struct.unpack("<iiii", raw[:16])
    if opcode != OP_COMPRESSED:
        return None, raw
    orig_op, orig_size, cid = struct.unpack("<iiB", raw[16:25])
    data = raw[25:]
    name = {0: "noop", 1: "snappy", 2: "zlib", 3: "zstd"}.get(cid, str(cid))
    if cid == 0:
        body = data
    elif cid == 1:
        body = snappy_decompress(data)
    elif cid == 2:
        body = zlib.decompress(data)
    elif cid == 3:
        body = zstd_decompress(data)
    else:
        raise WireError("unknown compressor id %d" % cid)
    if len(body) != orig_size:
        raise WireError("uncompressedSize %d but got %d bytes" % (orig_size, len(body)))
    return name, header(16 + len(body), rid, rto, orig_op) + body


class Reply:
    def __init__(self, raw):
        self.compressor, self.raw = decompress(raw)
        self.length, self.request_id, self.response_to, self.opcode = struct.unpack(
            "<iiii", self.raw[:16])
        self.flags = None
        self.checksum = None
        self.docs = []
        if self.opcode == OP_MSG:
            self.flags = struct.unpack("<I", self.raw[16:20])[0]
            end = len(self.raw) - (4 if self.flags & CHECKSUM_PRESENT else 0)
            if self.flags & CHECKSUM_PRESENT:
                self.checksum = struct.unpack("<I", self.raw[end:])[0]
            pos = 20
            while pos < end:
                kind = self.raw[pos]
                pos += 1
                if kind == 0:
                    n = struct.unpack("<i", self.raw[pos:pos + 4])[0]
                    self.docs.append(bson.decode(self.raw[pos:pos + n], _CODEC))
                    pos += n
                else:
                    n = struct.unpack("<i", self.raw[pos:pos + 4])[0]
                    pos += n
        elif self.opcode == OP_REPLY:
            (self.response_flags, self.cursor_id, self.starting_from,
             self.number_returned) = struct.unpack("<iqii", self.raw[16:36])
            self.docs = bson.decode_all(self.raw[36:], _CODEC)
        else:
            raise WireError("unexpected reply opcode %d" % self.opcode)

    @property
    def doc(self):
        return self.docs[0]

    def checksum_ok(self):
        return self.checksum == crc32c(self.raw[:-4])


def roundtrip(sock, msg):
    """Send msg and read one reply; returns a Reply."""
    sock.sendall(msg)
    _, raw = read_message(sock)
    return Reply(raw)


def command(sock, cmd, db="admin", **kw):
    """Run one command over OP_MSG; returns the reply document."""
    body = SON(cmd) if not isinstance(cmd, SON) else cmd
    body = SON(list(body.items()) + [("$db", db)])
    return roundtrip(sock, op_msg(body, **kw)).doc


def expect_error_or_close(sock, timeout=10):
    """After sending something bad: the server must either answer with an
    error (ok: 0 / OP_REPLY with $err / QueryFailure) or close the
    connection.  Returns 'closed' or the reply document.  Raises
    AssertionError when the server neither answers nor closes in time."""
    sock.settimeout(timeout)
    try:
        _, raw = read_message(sock)
    except WireError:
        return "closed"
    except (ConnectionResetError, BrokenPipeError):
        return "closed"
    except socket.timeout:
        raise AssertionError("server neither replied nor closed the connection within %ss"
                             % timeout)
    reply = Reply(raw)
    doc = reply.doc if reply.docs else {}
    ok = doc.get("ok")
    # An error is ok: 0, a legacy $err, or (for writes) per-statement writeErrors.
    assert ok in (0, 0.0, None) or "$err" in doc or doc.get("writeErrors"), \
        "expected an error reply, got %r" % (doc,)
    return doc
