#!/usr/bin/env python3
"""Client side of the metrics tests: scrapes and checks the exposition
format, drives the rendezvous store and refused handshakes over ddprun's
wire protocol, and sends bad HTTP requests. Every socket has a timeout; a
failure exits 1 with one line on stderr.

  mclient.py metrics PORT         check /metrics; print "# TYPE name type"
                                  for each family, "name{labels} value"
                                  for each series
  mclient.py get PORT PATH        print the status code, then the body
  mclient.py store PORT RUN_ID    a fixed sequence of store requests
  mclient.py refuse PORT RUN_ID   one handshake refused for each reason
  mclient.py silent PORT SECS     connect, send nothing, expect a close
                                  within SECS; print how long it took
  mclient.py bad PORT DEADLINE_S  bad, huge and slow HTTP requests
  mclient.py slots PORT N         N clients that never finish their head,
                                  then a scrape that must succeed at once
"""
import re
import socket
import struct
import sys
import time

TIMEOUT = 10.0


def die(msg):
    print("mclient: " + msg, file=sys.stderr)
    sys.exit(1)


def http(port, raw, timeout=TIMEOUT):
    """Sends raw bytes; returns (status, headers dict, body) of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(raw)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        die("no complete HTTP answer to %r: %r" % (raw[:40], data[:200]))
    lines = head.decode("latin-1").split("\r\n")
    m = re.match(r"HTTP/1\.1 (\d{3}) ", lines[0])
    if not m:
        die("bad status line %r" % lines[0])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    if int(headers.get("content-length", "-1")) != len(body):
        die("Content-Length %s but %d body bytes" %
            (headers.get("content-length"), len(body)))
    if headers.get("connection") != "close":
        die("no Connection: close")
    return int(m.group(1)), headers, body


def get(port, path):
    return http(port, ("GET %s HTTP/1.1\r\nHost: test\r\n\r\n" % path).encode())


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)')


def parse_exposition(text, families=None):
    """Checks the text format 0.0.4; returns [(name, labels, value)], and
    appends (name, type) of each family to the list families if given."""
    if not text.endswith("\n"):
        die("exposition does not end with a newline")
    helps, types, seen, out = set(), {}, set(), []
    for line in text.split("\n")[:-1]:
        if line.startswith("# HELP "):
            name = line.split(" ")[2]
            if name in helps:
                die("two HELP lines for " + name)
            helps.add(name)
            continue
        if line.startswith("# TYPE "):
            parts = line.split(" ")
            if len(parts) != 4 or parts[3] not in ("counter", "gauge"):
                die("bad TYPE line %r" % line)
            if parts[2] not in helps:
                die("TYPE before HELP for " + parts[2])
            types[parts[2]] = parts[3]
            if families is not None:
                families.append((parts[2], parts[3]))
            continue
        m = SAMPLE.match(line)
        if not m:
            die("not a sample line: %r" % line)
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        if name not in types:
            die("sample %s without a TYPE line before it" % name)
        if types[name] == "counter" and not name.endswith("_total"):
            die("counter %s does not end in _total" % name)
        if labels:
            inner, pos = labels[1:-1], 0
            while pos < len(inner):
                lm = LABEL.match(inner, pos)
                if not lm:
                    die("bad labels %r" % labels)
                pos = lm.end()
        try:
            v = float(value)
        except ValueError:
            die("value %r of %s is not a number" % (value, name))
        if types[name] == "counter" and (v < 0 or v != int(v)):
            die("counter %s has value %s" % (name, value))
        if (name, labels) in seen:
            die("series %s%s twice" % (name, labels))
        seen.add((name, labels))
        out.append((name, labels, value))
    return out


def cmd_metrics(port):
    code, headers, body = get(port, "/metrics")
    if code != 200:
        die("/metrics answered %d" % code)
    if not headers.get("content-type", "").startswith(
            "text/plain; version=0.0.4"):
        die("Content-Type %r" % headers.get("content-type"))
    families = []
    samples = parse_exposition(body.decode("utf-8"), families)
    for name, mtype in families:
        print("# TYPE %s %s" % (name, mtype))
    for name, labels, value in samples:
        print("%s%s %s" % (name, labels, value))


def cmd_get(port, path):
    code, _, body = get(port, path)
    print(code)
    sys.stdout.write(body.decode("utf-8", "replace"))


# ---- the wire protocol (proto/wire.h) ----------------------------------

MSG = {"HELLO": 1, "WELCOME": 2, "OK": 4, "ERROR": 5, "SET": 6, "GET": 7,
       "VALUE": 8, "ADD": 9, "INT": 10, "CAS": 11, "DELETE": 12,
       "MULTI_GET": 13, "VALUES": 14, "CHECK": 15, "BARRIER": 16}


def frame(mtype, req, fields, version=5):
    body = b""
    for f in fields:
        if isinstance(f, int):
            body += struct.pack(">BQ", 1, f)
        elif isinstance(f, bytes):
            body += struct.pack(">BI", 2, len(f)) + f
        else:
            body += struct.pack(">BI", 3, len(f))
            for item in f:
                body += struct.pack(">I", len(item)) + item
    return struct.pack(">HBBII", 0x4452, version, MSG[mtype], req,
                       len(body)) + body


def recv_exact(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def recv_frame(s):
    hdr = recv_exact(s, 12)
    if hdr is None:
        return None
    _, _, mtype, req, n = struct.unpack(">HBBII", hdr)
    body = recv_exact(s, n)
    if body is None:
        die("connection closed inside a frame")
    return mtype, req, body


def connect(port, run_id):
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    s.sendall(frame("HELLO", 1, [run_id.encode(), b"mclient"]))
    reply = recv_frame(s)
    if reply is None or reply[0] != MSG["WELCOME"]:
        die("no WELCOME: %r" % (reply,))
    return s


def request(s, req, mtype, fields, want):
    s.sendall(frame(mtype, req, fields))
    reply = recv_frame(s)
    if reply is None or reply[0] != MSG[want] or reply[1] != req:
        die("%s #%d: expected %s, got %r" % (mtype, req, want, reply))


def cmd_store(port, run_id):
    """Job scope (generation 0): 3 SET, 2 GET, 1 MULTI_GET, 2 ADD, 1 CAS,
    1 DELETE, 1 CHECK, 1 BARRIER; leaves keys a, c, d. Then one GET of a
    generation that is not current, refused as stale."""
    s = connect(port, run_id)
    request(s, 2, "SET", [0, b"mc/a", b"1"], "OK")
    request(s, 3, "SET", [0, b"mc/b", b"2"], "OK")
    request(s, 4, "SET", [0, b"mc/d", b"4"], "OK")
    request(s, 5, "GET", [0, b"mc/a", 1000], "VALUE")
    request(s, 6, "GET", [0, b"mc/b", 1000], "VALUE")
    request(s, 7, "MULTI_GET", [0, [b"mc/a", b"mc/b"], 1000], "VALUES")
    request(s, 8, "ADD", [0, b"mc/c", 5], "INT")
    request(s, 9, "ADD", [0, b"mc/c", 2], "INT")
    request(s, 10, "CAS", [0, b"mc/d", b"4", b"5"], "VALUE")
    request(s, 11, "DELETE", [0, b"mc/b"], "INT")
    request(s, 12, "CHECK", [0, [b"mc/a"]], "INT")
    request(s, 13, "BARRIER", [0, b"mc/bar", 1, 1000], "OK")
    request(s, 14, "GET", [99, b"mc/a", 0], "ERROR")
    s.close()


def refused(port, raw, what):
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
        s.sendall(raw)
        reply = recv_frame(s)
        if reply is None or reply[0] != MSG["ERROR"]:
            die("%s: expected an ERROR, got %r" % (what, reply))
        if recv_frame(s) is not None:
            die("%s: the connection stayed open" % what)


def cmd_refuse(port, run_id):
    """One refusal each: run id, version, malformed."""
    refused(port, frame("HELLO", 1, [b"not-" + run_id.encode(), b"mc"]),
            "run id")
    refused(port, frame("HELLO", 1, [run_id.encode(), b"mc"], version=9),
            "version")
    refused(port, frame("SET", 1, [0, b"k", b"v"]), "SET before HELLO")


def cmd_silent(port, secs):
    t = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=secs + 5) as s:
        try:
            data = s.recv(4096)
        except socket.timeout:
            die("a silent connection was not closed within %s s" % secs)
        if data:
            # The server may say why before it closes.
            while s.recv(4096):
                pass
    took = time.monotonic() - t
    if took > secs:
        die("a silent connection was closed after %.2f s, over %s s" %
            (took, secs))
    print("a silent connection was closed after %.2f s" % took)


def cmd_bad(port, deadline_s):
    cases = [
        (b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 405),
        (b"GET /nope HTTP/1.1\r\n\r\n", 404),
        (b"\x16\x03\x01\x00\xa5\x01\x00\x00", 400),
        (b"GET /metrics HTTP/9.9\r\n\r\n", 400),
        # A head far over the cap, sent whole: answered once the cap is
        # reached, and the rest is drained so that the answer arrives.
        (b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"a" * (1 << 20) + b"\r\n\r\n",
         431),
    ]
    for raw, want in cases:
        code, headers, _ = http(port, raw)
        if code != want:
            die("%r... answered %d, not %d" % (raw[:24], code, want))
        if want == 405 and headers.get("allow") != "GET":
            die("405 without Allow: GET")
    # Slow clients: each holds a partial head; scrapes go on meanwhile.
    slow = []
    t0 = time.monotonic()
    for _ in range(8):
        s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        s.sendall(b"GET /metr")
        slow.append(s)
    for _ in range(5):
        t = time.monotonic()
        code, _, _ = get(port, "/metrics")
        if code != 200:
            die("a scrape beside slow clients answered %d" % code)
        if time.monotonic() - t > 1.0:
            die("a scrape beside slow clients took %.2f s" %
                (time.monotonic() - t))
    # Each slow client is answered 408 and closed after the deadline.
    for s in slow:
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        s.close()
        if not data.startswith(b"HTTP/1.1 408 "):
            die("a slow client got %r, not 408" % data[:40])
    waited = time.monotonic() - t0
    if waited < deadline_s * 0.9 or waited > deadline_s + 3:
        die("slow clients were answered after %.2f s; the deadline is %s s"
            % (waited, deadline_s))
    print("slow clients answered 408 after %.2f s (deadline %s s)" %
          (waited, deadline_s))


def cmd_slots(port, n):
    """Every connection slot held by a client that never finishes its
    request head: a scrape after them still succeeds, at once."""
    slow = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        s.sendall(b"GET /metr")
        slow.append(s)
    # The server has taken them all (an answered HTTP round trip on a
    # connection of its own would need a slot: look at the counter instead
    # of racing the accept queue).
    time.sleep(0.2)
    t = time.monotonic()
    try:
        code, _, body = get(port, "/metrics")
    except OSError as e:
        die("a scrape after %d slow clients failed: %s" % (n, e))
    took = time.monotonic() - t
    if code != 200:
        die("a scrape after %d slow clients answered %d" % (n, code))
    if took > 1.0:
        die("a scrape after %d slow clients took %.2f s" % (n, took))
    # The oldest slow client gave its place: it was closed unanswered.
    time.sleep(0.2)
    closed = 0
    for s in slow:
        s.setblocking(False)
        try:
            if s.recv(4096) == b"":
                closed += 1
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
        s.close()
    if closed < 1:
        die("no slow client gave its place to the scrape")
    print("a scrape after %d slow clients: 200 in %.3f s; %d slow clients "
          "closed for it" % (n, took, closed))


def main(argv):
    if len(argv) < 3:
        die("usage: see the top of this file")
    cmd, port = argv[1], int(argv[2])
    if cmd == "metrics":
        cmd_metrics(port)
    elif cmd == "get" and len(argv) == 4:
        cmd_get(port, argv[3])
    elif cmd == "store" and len(argv) == 4:
        cmd_store(port, argv[3])
    elif cmd == "refuse" and len(argv) == 4:
        cmd_refuse(port, argv[3])
    elif cmd == "silent" and len(argv) == 4:
        cmd_silent(port, float(argv[3]))
    elif cmd == "bad" and len(argv) == 4:
        cmd_bad(port, float(argv[3]))
    elif cmd == "slots" and len(argv) == 4:
        cmd_slots(port, int(argv[3]))
    else:
        die("unknown command or arguments: %s" % " ".join(argv[1:]))


if __name__ == "__main__":
    main(sys.argv)
