"""A tiny, literal HTTP/1.1 client for talking to the egress proxy in tests.

Written out by hand so each test controls the exact bytes it sends (request lines
the proxy must refuse, heads with smuggled headers) and sees the proxy's raw answer.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass

TIMEOUT = 10.0  # hang guard for every socket in these tests


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


def connect_unix(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(TIMEOUT)
    sock.connect(path)
    return sock


def connect_tcp(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    return sock


def read_answer(sock: socket.socket | ssl.SSLSocket, *, head_only: bool = False) -> Answer:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1]) if lines and lines[0] else 0
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if head_only:
        return Answer(status, headers, body)
    length = headers.get("content-length")
    if length is not None:
        while len(body) < int(length):
            chunk = sock.recv(4096)
            if not chunk:
                break
            body += chunk
    else:
        while chunk := sock.recv(4096):
            body += chunk
    return Answer(status, headers, body)


def request(sock: socket.socket | ssl.SSLSocket, raw: bytes) -> Answer:
    sock.sendall(raw)
    return read_answer(sock)


def get(sock: socket.socket, url: str, *, host: str, extra: str = "") -> Answer:
    return request(sock, f"GET {url} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n".encode())


def connect_tunnel(sock: socket.socket, authority: str) -> Answer:
    sock.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
    return read_answer(sock, head_only=True)
