"""Coverage-guided fuzzing of the egress URL guard (atheris).

Run: ``python fuzz/fuzz_url_guard.py [corpus_dir] -max_total_time=60``.

Properties checked on every input (any other outcome is a crash):
- ``guard_url`` either returns a target or raises ``EgressDeniedError`` with an
  ``EgressReason`` (never another exception for a str input);
- every returned address is outside the block table (``classify_address`` is None);
- the returned ``url`` is accepted again and yields the same target (idempotent);
- the returned host is ASCII, lower case, with no userinfo, backslash or control byte;
- an error never repeats the URL's query.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Sequence
from ipaddress import IPv4Address, IPv6Address, ip_address

#: Answers the fuzz resolver hands out: public ones and blocked ones, so a name is
#: sometimes allowed and sometimes denied depending on its hash.
POOL = tuple(
    ip_address(a)
    for a in (
        "93.184.216.34",
        "8.8.8.8",
        "2606:4700:4700::1111",
        "127.0.0.1",
        "169.254.169.254",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
        "10.0.0.1",
        "2001:db8::1",
        "fd00::1",
    )
)

SEEDS = (
    "http://example.com/",
    "https://Example.COM:443/a/b?c=d#e",
    "http://127.0.0.1/",
    "http://2130706433/",
    "http://0x7f.1/",
    "http://[::ffff:127.0.0.1]:80/",
    "http://[fe80::1%25eth0]/",
    "http://user:pw@example.com/",
    "http://example.com\\@127.0.0.1/",
    "http://b\u00fccher.example/",
    "http://xn--bcher-kva.example/",
    "http://127\u30020\u30020\u30021/",
    "http://localhost./",
    "http://a.b.c.d.e.f.example:80/?q=SECRET",
    "https://[2606:4700:4700::1111]/",
)


class HashResolver:
    """Deterministic: a name maps to 1..3 pool answers chosen by its hash."""

    def resolve(self, host: str, port: int) -> Sequence[IPv4Address | IPv6Address]:
        digest = hashlib.blake2b(host.encode(), digest_size=4).digest()
        count = 1 + digest[0] % 3
        return tuple(POOL[b % len(POOL)] for b in digest[1 : 1 + count])


def check_url(text: str) -> None:
    """Run the guard on *text* and assert the properties in the module docstring."""
    from flux_system import EgressDeniedError, EgressReason
    from flux_system.net import classify_address, guard_url

    resolver = HashResolver()
    try:
        target = guard_url(text, resolver=resolver)
    except EgressDeniedError as exc:
        assert isinstance(exc.reason, EgressReason)
        query = text.partition("?")[2].partition("#")[0]
        if len(query) >= 4:
            assert query not in str(exc) and query not in repr(exc), "query leaked"
        return
    assert target.addresses
    for address in target.addresses:
        assert classify_address(address) is None, f"blocked address allowed: {address}"
    assert target.host.isascii() and target.host == target.host.lower()
    assert target.url is not None
    head = target.url.split("/", 3)[2]
    assert "@" not in head and "\\" not in target.url
    assert all(ord(c) > 0x20 and ord(c) != 0x7F for c in target.url)
    again = guard_url(target.url, resolver=resolver)
    assert again == target, "guard is not idempotent on its own output"


def test_one_input(data: bytes) -> None:
    """atheris entry point: decode the bytes (lossily) and check them as a URL."""
    text = data.decode("utf-8", "replace")
    check_url(text)
    for seed in SEEDS[: 1 + len(data) % 4]:
        check_url(seed[: len(data) % (len(seed) + 1)] + text)


def main() -> None:
    import atheris

    # Third-party code first, uninstrumented; then only the project's own modules.
    import dns.resolver  # noqa: F401
    import httpx  # noqa: F401
    import idna  # noqa: F401

    with atheris.instrument_imports(include=["flux_system"]):
        import flux_system.net  # noqa: F401

    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
