"""``flux run "PROMPT"``: one agent turn through the envelope.

``flux run "PROMPT" --model scripted:FILE|openai:MODEL [--base-url URL]
[--api-key secret:env/KEY] [--allow-host H] [--allow-private CIDR] [--allow-port PORT]
[--workspace DIR | --substrate unix:PATH]
[--approve prompt|deny|auto-low] [--policy FILE]... [--evidence FILE]
[--max-model-calls N] [--max-iterations N] [--show-loop] [--resume ID]
[--sandbox off|on|require] [--profile P]``

The answer goes to stdout; the session id, the batch to approve (``--approve
prompt`` reads ``y``/``yes`` from stdin) and the evidence summary go to stderr. The
evidence log is verified before the command exits. Processes the agent runs go through
the sandbox (default ``require``, profile ``default``); when no sandbox backend is
available they are *unserved* (a process operation fails clearly) unless
``--sandbox off`` is given — never a silent unsandboxed run. With ``--substrate``,
the far side's own guards and sandbox apply.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any

EXIT_DONE = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_QUESTION = 3
EXIT_CODES = """exit codes (flux run):
  0    the turn finished; the answer is on stdout
  1    the turn failed closed (the reason is on stderr and in the evidence)
  3    the model asked a question: answer with --resume ID "answer"
  2    usage or set-up error (model, workspace, policy, session store, evidence)"""

__all__ = ["register"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "run",
        help="run one agent turn through the envelope",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("prompt", metavar="PROMPT", help="the request (with --resume: the answer)")
    p.add_argument("--model", required=True, metavar="scripted:FILE|openai:MODEL")
    p.add_argument("--base-url", default="https://api.openai.com/v1", metavar="URL")
    p.add_argument(
        "--api-key",
        default=None,
        metavar="secret:env/KEY",
        help="the provider's key, as a secret: reference (none by default)",
    )
    p.add_argument("--allow-host", action="append", default=[], metavar="H")
    p.add_argument("--allow-private", action="append", default=[], metavar="CIDR")
    p.add_argument(
        "--allow-port",
        action="append",
        default=[],
        type=int,
        metavar="PORT",
        help="a port the agent's own HTTP may reach besides 80 and 443",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--workspace", default=".", metavar="DIR")
    where.add_argument("--substrate", default=None, metavar="unix:PATH")
    p.add_argument("--approve", choices=("prompt", "deny", "auto-low"), default="prompt")
    p.add_argument("--policy", action="append", default=[], metavar="FILE")
    p.add_argument("--evidence", default=None, metavar="FILE")
    p.add_argument("--max-model-calls", type=int, default=50, metavar="N")
    p.add_argument("--max-iterations", type=int, default=50, metavar="N")
    p.add_argument("--show-loop", action="store_true", help="one line per model call")
    p.add_argument("--resume", default=None, metavar="ID")
    p.add_argument("--sandbox", choices=("off", "on", "require"), default="require")
    p.add_argument("--profile", default="default", metavar="P")
    p.add_argument("--state", default=None, metavar="FILE", help="session store (SQLite)")
    p.set_defaults(func=_main)


def _err(msg: str) -> None:
    from flux_runtime.cli._text import shown_text

    print(f"flux run: {shown_text(msg)}", file=sys.stderr)


def _sandbox(args: argparse.Namespace, ws: Any) -> Any:
    """The System for native processes, or None (processes unserved)."""
    from flux_system import FluxSystemError, System

    if args.sandbox == "off":
        return System(ws)
    from flux_system.sandbox import Sandbox, SandboxSettings

    try:
        # The protected-path audit runs for the runtime as for flux exec (DESIGN §2.5).
        settings = SandboxSettings(mode=args.sandbox, profile=args.profile, audit=True)
        return System(ws, sandbox=Sandbox.resolve(settings))
    except (FluxSystemError, TypeError, ValueError) as exc:
        # A layer the profile requires is missing (or a bad profile): processes stay
        # unserved, said out loud — never a silent unconfined run.
        _err(
            f"sandbox {args.sandbox}: {exc}; process operations are unserved "
            "(see flux doctor; --sandbox off runs them unconfined)"
        )
        return None


def _writable_trees(args: argparse.Namespace) -> list[str]:
    """Every tree the agent may write on a native workspace: the workspace and, unless
    ``--sandbox off``, the profile's writable extra paths (``filesystem.read_write``),
    read from the profile itself, so a sandbox that did not resolve still counts them.
    The session store and the evidence log must lie outside all of them (resolved:
    a symlink into one counts as inside). With ``--sandbox off`` the agent's processes
    run unconfined and can write wherever the user can: only the workspace is checked.
    """
    from flux_system import FluxSystemError
    from flux_system.sandbox import load_profile

    trees = [args.workspace]
    # No profile: no sandbox, so no process at all (said by _sandbox).
    with contextlib.suppress(FluxSystemError, TypeError, ValueError):
        if args.sandbox != "off":
            trees += load_profile(args.profile).read_write
    return trees


def _openai(args: argparse.Namespace, model: str, secrets: Any) -> Any:
    """The chat-completions provider; its traffic crosses the egress guard, reaching
    only the base URL's host (plus --allow-host), private ranges only by --allow-private."""
    from urllib.parse import urlsplit

    from flux_runtime._openai import ChatCompletionsProvider
    from flux_system.net import EgressPolicy, PrivateNetAllow, guarded_client
    from flux_system.port import GuardedHttp

    url = urlsplit(args.base_url)
    host = url.hostname or ""
    port = url.port or (443 if url.scheme == "https" else 80)
    allow = PrivateNetAllow(hosts=args.allow_host, cidrs=args.allow_private)
    client = guarded_client(
        allow=allow, ports=[port], policy=EgressPolicy(allow_hosts=[host, *args.allow_host])
    )
    key = None
    if args.api_key:
        key = secrets.resolve(args.api_key).expose_secret()  # registered with the redactor
        key = key if isinstance(key, str) else key.decode()
    return ChatCompletionsProvider(
        GuardedHttp(client), base_url=args.base_url, model=model, api_key=key
    )


def _agent_http(args: argparse.Namespace) -> Any:
    """The agent's own HTTP (``http.request``, ``web.fetch``) on a native workspace.

    Every request crosses the egress guard of ``flux_system.net``: public addresses
    only, a private or internal one only when ``--allow-host`` / ``--allow-private``
    grant it (the grants the provider's traffic gets too), on ports 80 and 443 and
    those ``--allow-port`` adds. No redirect is followed: a 3xx comes back with its
    ``location``, and going there is a new request the policy decides on. Whether a
    request is made
    at all is the policy's and the approver's decision (the default policy asks
    before each one).
    """
    from flux_runtime._builtins_system import HTTP_BODY_CAP
    from flux_system.net import PrivateNetAllow, RequestLimits, guarded_client
    from flux_system.port import GuardedHttp

    grants = PrivateNetAllow(hosts=tuple(args.allow_host), cidrs=tuple(args.allow_private))
    client = guarded_client(
        allow=grants,
        ports={80, 443, *args.allow_port},
        limits=RequestLimits(max_body=HTTP_BODY_CAP),  # read no further than the cap
        follow_redirects=False,  # each hop a new request, decided by the policy
    )
    return GuardedHttp(client)


def _main(args: argparse.Namespace) -> int:
    from flux_evidence import EvidenceError, EvidenceLog, verify
    from flux_policy import IndexedEvaluator, PolicyLoadError, load_policies
    from flux_runtime import (
        AutoLowApprover,
        Bounds,
        EnvelopeError,
        Executor,
        HeadlessApprover,
        ScriptedProvider,
        SessionStore,
        TerminalApprover,
        Turn,
        default_catalog,
        default_policy,
        default_store_path,
    )
    from flux_runtime._session import check_outside
    from flux_runtime.cli._text import shown_text
    from flux_secret import Redactor, SecretError, SecretResolver
    from flux_system import FluxSystemError, Workspace
    from flux_system.port import Substrate, Unserved

    bad = [p for p in args.allow_port if not 0 < p < 65536]
    if bad:
        _err(f"--allow-port must be 1-65535, not {bad[0]}")
        return EXIT_USAGE
    kind, _, target = args.model.partition(":")
    if kind not in ("scripted", "openai") or not target:
        _err(f"--model must be scripted:FILE or openai:MODEL, not {args.model!r}")
        return EXIT_USAGE
    redactor = Redactor()
    secrets = SecretResolver(environ=dict(os.environ), redactor=redactor)
    try:
        bounds = Bounds(args.max_model_calls, args.max_iterations)
        if kind == "scripted":
            provider: Any = ScriptedProvider.from_file(target)
        else:
            provider = _openai(args, target, secrets)
        policy = load_policies(args.policy) if args.policy else default_policy()
    except (EnvelopeError, PolicyLoadError, SecretError, ValueError, FluxSystemError) as exc:
        _err(str(exc))
        return EXIT_USAGE
    closers: list[Any] = []
    try:
        if args.substrate:
            from flux_system.remote import connect

            substrate = connect(args.substrate)
            roots: list[str] = []
        else:
            ws = Workspace(args.workspace)
            closers.append(ws)
            system = _sandbox(args, ws)
            if system is not None:
                closers.append(system)
            substrate = Substrate.native(
                ws,
                processes=system
                if system is not None
                else Unserved(f"this run (--sandbox {args.sandbox}: no sandbox available)"),
                http=_agent_http(args),
            )
            roots = _writable_trees(args)
        closers.append(substrate)
        state = args.state or default_store_path()
        check_outside(state, roots)
        store = SessionStore(state)
        closers.append(store)
        evidence_path = args.evidence or os.path.join(os.path.dirname(state), "evidence.jsonl")
        if roots:
            check_outside(evidence_path, roots, "evidence log")
        log = EvidenceLog.open(evidence_path)
        closers.append(log)
    except (FluxSystemError, EnvelopeError, EvidenceError, OSError) as exc:
        _err(str(exc))
        for c in reversed(closers):
            c.close()
        return EXIT_USAGE
    executor = Executor(
        substrate,
        default_catalog(),
        evaluator=IndexedEvaluator(policy, cache=4096),
        policy_digest=policy.digest,
        redactor=redactor,
        evidence=log,
        secrets=secrets,
    )
    approver: Any = {
        "prompt": lambda: TerminalApprover(redact=redactor.redact),
        "deny": HeadlessApprover,
        "auto-low": AutoLowApprover,
    }[args.approve]()
    show = (lambda line: print(line, file=sys.stderr)) if args.show_loop else None
    turn = Turn(executor, provider, store, approver, bounds=bounds, show=show)
    try:
        result = turn.resume(args.resume, args.prompt) if args.resume else turn.start(args.prompt)
    except EnvelopeError as exc:
        result = None
        _err(str(exc))
    finally:
        for c in reversed(closers):
            c.close()
    try:
        checked = verify(evidence_path)
        print(
            f"flux run: evidence {evidence_path}: {checked.head.size} records verified",
            file=sys.stderr,
        )
    except EvidenceError as exc:
        _err(f"evidence {evidence_path} does not verify: {exc}")
        return EXIT_FAILED
    if result is None:
        return EXIT_USAGE
    print(f"flux run: session {result.session}: {result.status}", file=sys.stderr)
    for o in result.outcomes:
        mark = "ok" if o.get("ok") else f"FAILED ({o.get('reason')}): {o.get('error') or ''}"[:300]
        print(shown_text(f"  {o.get('op')}: {mark}"), file=sys.stderr)
    if result.status == "done":
        print(shown_text(result.answer or ""))
        return EXIT_DONE
    if result.status == "suspended":
        print(shown_text(result.question or ""))
        print(
            f"flux run: answer with: flux run --model {args.model} --resume {result.session} "
            '"ANSWER"',
            file=sys.stderr,
        )
        return EXIT_QUESTION
    _err(str(result.error))
    return EXIT_FAILED
