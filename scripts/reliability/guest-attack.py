#!/usr/bin/python3
"""guest-attack.py - crafted vgpu frames from a root process inside the guest.

Runs in a test guest (guest-faults.sh). It opens its own AF_VSOCK stream to
the host's vGPU port (CID 2, port 0x7667) from a privileged source port --
as only root (or the vgpu.ko driver) can -- and sends frames the driver
would never send: guest-physical ranges outside RAM (read from /proc/iomem),
in the MMIO hole below 4 GiB, wrapping around, crossing the end of RAM;
foreign and freed device pointers; freed streams and events; double frees;
huge counts; a truncated frame; a flood of connections from every
privileged port. Each must get its documented CUresult and the connection
must keep serving. Then the same segments from an
unprivileged port: the backend refuses the connection. Exit 1 on any
surprise.
"""
import os, socket, struct, sys, time

MAGIC, PORT, HOST_CID = 0x55504756, 0x7667, 2
F_SEGS = 1 << 1
OP = dict(PING=0x0005, MEM_ALLOC=0x0201, MEM_FREE=0x0202, HTOD=0x0203, DTOH=0x0204, DTOD=0x0205,
          STREAM_CREATE=0x0501, STREAM_DESTROY=0x0502, STREAM_SYNC=0x0503,
          EVENT_CREATE=0x0601, EVENT_DESTROY=0x0602, EVENT_RECORD=0x0603)
BUF_SEGMENTS = 2
bad = 0


def ram_ranges():
    rs = []
    for line in open('/proc/iomem'):
        if line.startswith(' '):
            continue
        rng, _, name = line.strip().partition(' : ')
        if name == 'System RAM':
            lo, hi = (int(x, 16) for x in rng.split('-'))
            rs.append((lo, hi + 1))
    return rs


class Conn:
    def __init__(self, port):
        self.s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
        self.s.bind((socket.VMADDR_CID_ANY, port))
        self.s.settimeout(30)
        self.s.connect((HOST_CID, PORT))
        self.id = 0

    def frame(self, op, payload=b'', segs=(), flags=0, rid=None):
        if rid is None:
            self.id += 1
            rid = self.id
        pad = (-len(payload)) % 8
        if segs:
            flags |= F_SEGS
        h = struct.pack('<IBBHIIQIi', MAGIC, 1, 0, op, flags, len(segs), rid, len(payload), 0)
        return h + payload + b'\0' * pad + b''.join(struct.pack('<QQ', g, n) for g, n in segs), rid

    def recvn(self, n):
        b = b''
        while len(b) < n:
            c = self.s.recv(n - len(b))
            if not c:
                raise EOFError('backend closed the connection')
            b += c
        return b

    def reply(self, rid):
        while True:
            h = self.recvn(32)
            magic, _, _, op, flags, nsegs, r, plen, status = struct.unpack('<IBBHIIQIi', h)
            body = self.recvn(plen + (-plen) % 8 + 16 * nsegs)[:plen]
            if flags & (1 << 4):  # notification
                continue
            if r == rid:
                return status, body

    def call(self, op, payload=b'', segs=()):
        b, rid = self.frame(op, payload, segs)
        self.s.sendall(b)
        return self.reply(rid)


def bufref(kind, index=0, region=0, offset=0, length=0):
    return struct.pack('<IIQQQ', kind, index, region, offset, length)


def htod(dst, n, stream=0):
    return struct.pack('<QQII', dst, stream, 0, 0) + bufref(BUF_SEGMENTS, length=n)


def dtoh(src, n):
    return struct.pack('<QQII', src, 0, 0, 0) + bufref(BUF_SEGMENTS, length=n)


def expect(name, got, want):
    global bad
    ok = got == want
    if not ok:
        bad += 1
    print('ATTACK %-44s status %4d want %4d %s' % (name, got, want, 'ok' if ok else 'UNEXPECTED'))


def privileged_conn():
    last = None
    for port in range(1023, 600, -1):
        try:
            return Conn(port), port
        except OSError as e:
            last = e
    raise last


def main():
    rs = ram_ranges()
    ram_end = max(hi for _, hi in rs)
    low = [r for r in rs if r[0] < 1 << 32]
    # Firmware reserves the last pages of low RAM (not "System RAM" in
    # /proc/iomem, yet guest RAM): low RAM really ends at the next MiB.
    low_end = (max(hi for _, hi in low) + 0xfffff) & ~0xfffff
    ram_end = max(ram_end, low_end)
    print('guest RAM (System RAM in /proc/iomem):', ', '.join('%#x-%#x' % r for r in rs))
    hole = low_end + 0x100000 if low_end + 0x100000 < 1 << 32 else 0xfec00000
    c, port = privileged_conn()
    print('connected from privileged port', port)
    expect('ping', c.call(OP['PING'])[0], 0)
    st, b = c.call(OP['MEM_ALLOC'], struct.pack('<IIQ', 0, 0, 1 << 20))
    expect('alloc 1 MiB', st, 0)
    p = struct.unpack('<Q', b[:8])[0]
    # A valid guest-physical range (kernel RAM; reading it into our own
    # device memory is harmless): the control.
    good = (low[-1][0] + 0x100000) & ~0xfff
    expect('htod from guest RAM (control)', c.call(OP['HTOD'], htod(p, 4096), [(good, 4096)])[0], 0)
    cases = [
        ('gpa beyond guest RAM', [(ram_end + (1 << 30), 4096)], 1),
        ('gpa at 1 TiB', [(1 << 40, 4096)], 1),
        ('gpa in the MMIO hole below 4 GiB', [(hole, 4096)], 1),
        ('gpa at the IOAPIC (MMIO)', [(0xfec00000, 4096)], 1),
        ('segment crossing the end of low RAM', [(low_end - 2048, 4096)], 1),
        ('segment crossing the end of RAM', [(ram_end - 2048, 4096)], 1),
        ('gpa wrap-around', [(2**64 - 2048, 4096)], 1),
        ('segment length 2^63', [(good, 1 << 63)], 1),
    ]
    for name, segs, want in cases:
        n = sum(x for _, x in segs) & (2**64 - 1)
        expect(name, c.call(OP['HTOD'], htod(p, min(n, 2**64 - 1)), segs)[0], want)
        expect('write: ' + name, c.call(OP['DTOH'], dtoh(p, min(n, 2**64 - 1)), segs)[0], want)
    st, b = c.call(OP['MEM_ALLOC'], struct.pack('<IIQ', 0, 0, 4096))
    q = struct.unpack('<Q', b[:8])[0]
    expect('free', c.call(OP['MEM_FREE'], struct.pack('<Q', q))[0], 0)
    expect('double free', c.call(OP['MEM_FREE'], struct.pack('<Q', q))[0], 1)
    expect('htod into a freed pointer', c.call(OP['HTOD'], htod(q, 4096), [(good, 4096)])[0], 1)
    expect('htod into a foreign pointer', c.call(OP['HTOD'], htod(p + (64 << 30), 4096), [(good, 4096)])[0], 1)
    expect('dtod past the end of an allocation', c.call(OP['DTOD'], struct.pack('<QQQQII', p, p + 4096, 1 << 20, 0, 0, 0))[0], 1)
    st, b = c.call(OP['STREAM_CREATE'], struct.pack('<IIiI', 0, 0, 0, 0))
    s = struct.unpack('<Q', b[:8])[0]
    expect('stream destroy', c.call(OP['STREAM_DESTROY'], struct.pack('<Q', s))[0], 0)
    expect('freed stream synchronize', c.call(OP['STREAM_SYNC'], struct.pack('<Q', s))[0], 400)
    expect('stream destroyed twice', c.call(OP['STREAM_DESTROY'], struct.pack('<Q', s))[0], 400)
    expect('copy on a freed stream', c.call(OP['HTOD'], htod(p, 4096, stream=s), [(good, 4096)])[0], 400)
    st, b = c.call(OP['EVENT_CREATE'], struct.pack('<II', 0, 0))
    e = struct.unpack('<Q', b[:8])[0]
    expect('event destroy', c.call(OP['EVENT_DESTROY'], struct.pack('<Q', e))[0], 0)
    expect('freed event record', c.call(OP['EVENT_RECORD'], struct.pack('<QQII', e, 0, 0, 0))[0], 400)
    expect('allocation of 2^62 bytes', c.call(OP['MEM_ALLOC'], struct.pack('<IIQ', 0, 0, 1 << 62))[0], 2)
    expect('unknown opcode', c.call(0x7bad)[0], 801)
    expect('ping: still serving', c.call(OP['PING'])[0], 0)
    # A truncated frame, then hang up: the backend ends the session.
    b, _ = c.frame(OP['HTOD'], htod(p, 4096), [(good, 4096)])
    c.s.sendall(b[:40])
    c.s.close()
    c2, _ = privileged_conn()
    expect('new connection after a truncated frame', c2.call(OP['PING'])[0], 0)
    c2.s.close()
    # Connection flood: every privileged port this process can bind. The
    # backend caps a VM's connections (vsock.DefaultMaxConns, 256) and
    # resets the rest; with a worker per guest process it also serves at
    # most --max-processes of them and closes the others at once. Held: the
    # connections that still answer. After they close, a new connection
    # works.
    conns, refused = [], 0
    for port in range(1022, 0, -1):
        try:
            x = Conn(port)
            conns.append(x)
        except OSError:
            refused += 1
    held = 0
    for x in conns:
        try:
            x.s.settimeout(20)
            if x.call(OP['PING'])[0] == 0:
                held += 1
        except (EOFError, OSError):
            pass
    for x in conns:
        x.s.close()
    print('ATTACK %-44s %d connected, %d held (answer), %d refused or port busy ok' % ('connection flood', len(conns), held, refused))
    if held > 256:
        expect('connection flood: at most 256 held', held, 256)
    for i in range(50):
        try:
            c3, _ = privileged_conn()
            break
        except OSError:
            time.sleep(0.2)
    expect('new connection after the flood', c3.call(OP['PING'])[0], 0)
    c3.s.close()
    # Unprivileged source port: the backend refuses the connection itself.
    try:
        u = Conn(40000 + os.getpid() % 1000)
        try:
            st, _ = u.call(OP['HTOD'], htod(p, 4096), [(good, 4096)])
            expect('segments from an unprivileged port', st, 800)
        except (EOFError, OSError) as e:
            print('ATTACK %-44s refused (%s) ok' % ('unprivileged port', e))
    except OSError as e:
        print('ATTACK %-44s connection refused (%s) ok' % ('unprivileged port', e))
    print('guest-attack: %d unexpected' % bad)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
