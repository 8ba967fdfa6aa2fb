"""
Tiny network endpoints for testing netfaults.py, run inside a member's
namespace with `ip netns exec`:

    nsprobe.py serve PORT [--seconds S]   TCP echo (a line back) and UDP
                                          recorder on PORT; exits after S s
    nsprobe.py tcp ADDR:PORT... [--timeout T]   JSON {target: "ok" |
                                          "timeout" | "refused" | "error: ..."}
    nsprobe.py udp-send ADDR:PORT TOKEN   three datagrams
    nsprobe.py udp-seen PORT TOKEN        asks the local server: "yes" / "no"

A TCP line "SEEN token" asks the server whether a datagram with that token
arrived.  Every wait has a timeout; the server stops by itself.
"""
import argparse
import json
import socket
import sys
import threading
import time


def serve(port, seconds):
    seen = set()
    lock = threading.Lock()
    tcp = socket.socket()
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind(("0.0.0.0", port))
    tcp.listen(64)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("0.0.0.0", port))
    end = time.monotonic() + seconds

    def udp_loop():
        udp.settimeout(0.5)
        while time.monotonic() < end:
            try:
                data, _ = udp.recvfrom(512)
            except socket.timeout:
                continue
            with lock:
                seen.add(data.decode(errors="replace").strip())

    def handle(conn):
        with conn:
            conn.settimeout(5)
            try:
                line = conn.makefile("rb").readline(512).decode(errors="replace")
                if line.startswith("SEEN "):
                    with lock:
                        reply = "yes" if line[5:].strip() in seen else "no"
                    conn.sendall(reply.encode() + b"\n")
                else:
                    conn.sendall(line.encode())
            except OSError:
                pass

    threading.Thread(target=udp_loop, daemon=True).start()
    tcp.settimeout(0.5)
    print("ready", flush=True)
    while time.monotonic() < end:
        try:
            conn, _ = tcp.accept()
        except socket.timeout:
            continue
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def ask(addr, port, line, timeout):
    with socket.create_connection((addr, port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(line.encode() + b"\n")
        return s.makefile("rb").readline(512).decode().strip()


def tcp_probe(targets, timeout):
    out = {}

    def one(t):
        addr, port = t.rsplit(":", 1)
        try:
            got = ask(addr, int(port), "ping " + t, timeout)
            out[t] = "ok" if got == "ping " + t else "error: echo %r" % got
        except socket.timeout:
            out[t] = "timeout"
        except ConnectionRefusedError:
            out[t] = "refused"
        except OSError as e:
            out[t] = "error: %s" % e

    threads = [threading.Thread(target=one, args=(t,)) for t in targets]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout * 3 + 1)
    return {t: out.get(t, "timeout") for t in targets}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["serve", "tcp", "udp-send", "udp-seen"])
    ap.add_argument("args", nargs="+")
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--timeout", type=float, default=1.0)
    a = ap.parse_args()
    if a.cmd == "serve":
        serve(int(a.args[0]), a.seconds)
    elif a.cmd == "tcp":
        print(json.dumps(tcp_probe(a.args, a.timeout)))
    elif a.cmd == "udp-send":
        addr, port = a.args[0].rsplit(":", 1)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for _ in range(3):
                s.sendto(a.args[1].encode(), (addr, int(port)))
                time.sleep(0.02)
    else:
        time.sleep(0.2)     # let the datagrams arrive
        print(ask("127.0.0.1", int(a.args[0]), "SEEN " + a.args[1], a.timeout))


if __name__ == "__main__":
    sys.exit(main())
