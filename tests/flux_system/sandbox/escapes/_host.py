"""The host side of the escape suite: listeners that record, victims, snapshots.

Everything here lives outside the sandbox and observes it: a listener records every
byte that reaches it (so "the connect failed" is checked where it matters, on the
host), a victim is a real host process of the same uid as the sandbox's caller, and a
snapshot is a whole tree's content, modes and types before and after a run.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import selectors
import socket
import stat
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

_RECV = 65536
_IDLE_POLL_S = 0.05  # the recorder's select timeout: one idle round
_SETTLE_GUARD_S = 10.0  # hang guard for settle()
_KILL_GRACE_S = 0.3  # a SIGKILL sent is delivered well within this
_VICTIM_LIFETIME_S = "600"  # the victims are killed by the fixture long before


@dataclass
class Recorder:
    """Loopback/host listeners on one selector thread; ``seen(token)`` names who got it."""

    _sel: selectors.DefaultSelector = field(default_factory=selectors.DefaultSelector)
    _got: dict[str, bytearray] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _socks: list[socket.socket] = field(default_factory=list)
    _thread: threading.Thread | None = None
    _stop: bool = False
    answers: dict[str, str] = field(default_factory=dict)  # DNS name -> IPv4 address
    _idle: threading.Condition = field(default_factory=threading.Condition)
    _idle_rounds: int = 0

    def _listen(self, name: str, sock: socket.socket, kind: str) -> None:
        sock.setblocking(False)
        self._socks.append(sock)
        self._got.setdefault(name, bytearray())
        self._sel.register(sock, selectors.EVENT_READ, (name, kind))

    def tcp(self, name: str, host: str, port: int = 0, *, dual_stack: bool = False) -> int:
        """Listen on TCP *host*:*port* (*dual_stack*: IPv4-mapped too); return the port."""
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if dual_stack:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        s.bind((host, port))
        s.listen(16)
        self._listen(name, s, "accept")
        return int(s.getsockname()[1])

    def udp(self, name: str, host: str, port: int = 0, *, dns: bool = False) -> int:
        """Receive datagrams on *host*:*port* (answering as a DNS server when *dns*:
        the names of :attr:`answers` with their A record, any other NXDOMAIN)."""
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_DGRAM)
        s.bind((host, port))
        self._listen(name, s, "dns" if dns else "dgram")
        return int(s.getsockname()[1])

    def unix(self, name: str, address: str | bytes) -> None:
        """Listen on a pathname (str, made connectable by anyone) or abstract (bytes)."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(address)
        if isinstance(address, str):
            os.chmod(address, 0o777)
        s.listen(16)
        self._listen(name, s, "accept")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="escape-recorder", daemon=True)
        self._thread.start()

    def _record(self, name: str, data: bytes) -> None:
        with self._lock:
            self._got[name] += data

    def _loop(self) -> None:
        while not self._stop:
            events = self._sel.select(timeout=_IDLE_POLL_S)
            for key, _ in events:
                name, kind = key.data
                sock: socket.socket = key.fileobj  # type: ignore[assignment]
                with contextlib.suppress(OSError):
                    self._handle(sock, name, kind)
            if not events:
                with self._idle:
                    self._idle_rounds += 1
                    self._idle.notify_all()

    def settle(self) -> None:
        """Return once everything already queued to the listeners has been read.

        Two idle rounds that began after this call: a connection already queued is
        accepted, read and closed before the loop can go idle again.
        """
        with self._idle:
            target = self._idle_rounds + 2
            ok = self._idle.wait_for(lambda: self._idle_rounds >= target, _SETTLE_GUARD_S)
        assert ok, "the host listeners did not settle (recorder thread stuck?)"

    def _handle(self, sock: socket.socket, name: str, kind: str) -> None:
        if kind == "accept":
            conn, _ = sock.accept()
            conn.setblocking(False)
            self._record(name, b"<connect>")
            self._sel.register(conn, selectors.EVENT_READ, (name, "conn"))
        elif kind == "conn":
            data = sock.recv(_RECV)
            if not data:
                self._sel.unregister(sock)
                sock.close()
                return
            self._record(name, data)
            if name.startswith("http"):  # the proxy cases' upstream: any request is a 200
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            elif name.startswith("dns"):  # a TCP DNS query: answer so the client sees one
                reply = self._dns_reply(data[2:])
                sock.sendall(len(reply).to_bytes(2, "big") + reply)
        else:
            data, peer = sock.recvfrom(_RECV)
            self._record(name, data)
            if kind == "dns":
                sock.sendto(self._dns_reply(data), peer)

    def _dns_reply(self, query: bytes) -> bytes:
        """An A answer for a name of :attr:`answers`, an empty one for its other types,
        NXDOMAIN for anything else (or for what does not parse as a query)."""
        import dns.message
        import dns.rcode
        import dns.rdatatype
        import dns.rrset

        try:
            msg = dns.message.from_wire(query)
        except Exception:
            return _nxdomain(query)
        reply = dns.message.make_response(msg)
        question = msg.question[0] if msg.question else None
        name = question.name.to_text(omit_final_dot=True).lower() if question else ""
        if name not in self.answers:
            reply.set_rcode(dns.rcode.NXDOMAIN)
        elif question is not None and question.rdtype == dns.rdatatype.A:
            reply.answer.append(
                dns.rrset.from_text(question.name, 60, "IN", "A", self.answers[name])
            )
        return bytes(reply.to_wire())

    def seen(self, token: str) -> dict[str, bytes]:
        """Listeners that received *token*, after everything queued was read."""
        self.settle()
        needle = token.encode()
        with self._lock:
            return {n: bytes(d) for n, d in self._got.items() if needle in d}

    def close(self) -> None:
        self._stop = True
        if self._thread is not None:
            self._thread.join(timeout=5)
        for s in self._socks:
            s.close()
        self._sel.close()


def _nxdomain(query: bytes) -> bytes:
    if len(query) < 12:
        return b""
    flags = bytes([0x81, 0x83])  # response, recursion desired/available, NXDOMAIN
    return query[:2] + flags + query[4:6] + b"\x00\x00\x00\x00\x00\x00" + query[12:]


def host_addresses() -> tuple[list[str], list[str]]:
    """This host's own non-loopback, non-link-local IPv4 and IPv6 addresses."""
    import psutil

    v4: list[str] = []
    v6: list[str] = []
    for name, addrs in psutil.net_if_addrs().items():
        if name == "lo":
            continue
        for a in addrs:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                v4.append(a.address)
            elif a.family == socket.AF_INET6 and not a.address.lower().startswith("fe80"):
                v6.append(a.address.split("%")[0])
    return v4, v6


def user_prefix(uid: int | None) -> list[str]:
    """argv prefix that runs a command as *uid* (``None``: as this process)."""
    if uid is None:
        return []
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]


def start_victim(uid: int | None, token: str) -> subprocess.Popen[bytes]:
    """A host process of *uid* in its own session, holding *token* in its environment."""
    return subprocess.Popen(
        [*user_prefix(uid), "/bin/sleep", _VICTIM_LIFETIME_S],
        env={"PATH": "/usr/bin:/bin", "FLUX_ESCAPE_VICTIM_SECRET": token},
        start_new_session=True,
        stdin=subprocess.DEVNULL,
    )


_IPC_CREAT, _IPC_RMID, _IPC_NOWAIT = 0o1000, 0, 0o4000


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    return libc


def make_ipc(uid: int | None, token: str) -> dict[str, int]:
    """A System V shared-memory segment and message queue of *uid* (mode 0600), each
    holding *token*, as a host process of that user would have them.

    Made in a forked child that takes *uid* first, so the objects are its own (as
    their creator). Returns their keys and ids; :func:`remove_ipc` removes them.
    """
    key = 0x5EC00000 | (int(token[-5:], 16) & 0xFFFFF)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.close(r)
            if uid is not None:
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
            libc = _libc()
            shm = libc.shmget(key, 4096, _IPC_CREAT | 0o600)
            addr = libc.shmat(shm, None, 0)
            data = f"shm:{token}".encode()
            ctypes.memmove(addr, data, len(data))
            libc.shmdt(ctypes.c_void_p(addr))
            msg = libc.msgget(key + 1, _IPC_CREAT | 0o600)
            body = b"\x01\0\0\0\0\0\0\0" + f"msg:{token}".encode()  # long mtype = 1
            libc.msgsnd(msg, body, len(body) - 8, _IPC_NOWAIT)
            os.write(w, f"{shm} {msg}".encode())
            code = 0 if shm >= 0 and msg >= 0 else 1
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        shm, msg = (int(x) for x in f.read().split())
    os.waitpid(pid, 0)
    return {"shm_key": key, "shm_id": shm, "msg_key": key + 1, "msg_id": msg}


def remove_ipc(ipc: dict[str, int]) -> None:
    libc = _libc()
    libc.shmctl(ipc["shm_id"], _IPC_RMID, None)
    libc.msgctl(ipc["msg_id"], _IPC_RMID, None)


def alive_after_grace(procs: dict[str, subprocess.Popen[bytes]]) -> dict[str, bool]:
    """Which victims still live, after a grace for a SIGKILL already sent to land."""
    time.sleep(_KILL_GRACE_S)
    return {name: p.poll() is None for name, p in procs.items()}


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            p.kill()
        p.wait(timeout=10)


Entry = tuple[
    str, int, int, str, int, int, str
]  # type, mode, size, sha256/target, uid, mtime_ns, xattrs


def snapshot(root: Path) -> dict[str, Entry]:
    """Every entry beneath *root* (root included): type, permission bits, size, content."""
    out: dict[str, Entry] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in ["", *dirnames, *filenames]:
            path = Path(dirpath, name) if name else Path(dirpath)
            rel = str(path.relative_to(root))
            if name == "" and rel != ".":
                continue
            st = path.lstat()
            mode = stat.S_IMODE(st.st_mode)
            meta = (st.st_uid, st.st_mtime_ns, _xattrs(path))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", mode, 0, os.readlink(path), st.st_uid, 0, "")
            elif stat.S_ISREG(st.st_mode):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                out[rel] = ("file", mode, st.st_size, digest, *meta)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", mode, 0, "", st.st_uid, 0, meta[2])  # dir mtime: see diff
            else:
                out[rel] = ("other", mode, st.st_size, "", *meta)
    return out


def _xattrs(path: Path) -> str:
    try:
        return ",".join(sorted(os.listxattr(path, follow_symlinks=False)))
    except OSError:
        return "?"


def diff(before: dict[str, Entry], after: dict[str, Entry]) -> dict[str, str]:
    """What changed between two snapshots, by relative path."""
    changes: dict[str, str] = {}
    for rel in sorted(before.keys() | after.keys()):
        if rel not in after:
            changes[rel] = "removed"
        elif rel not in before:
            changes[rel] = "created"
        elif before[rel] != after[rel]:
            changes[rel] = "changed"
    return changes


def processes_with(marker: str) -> list[int]:
    """Pids whose command line holds *marker* (the daemon case's survivors)."""
    found = []
    needle = marker.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            if needle in Path("/proc", entry, "cmdline").read_bytes():
                found.append(int(entry))
    return found
