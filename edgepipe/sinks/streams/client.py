"""Reading a :class:`~edgepipe.sinks.streams.tcp.TcpStream`: :func:`messages` in code, and on
the command line one JSON line per message::

    python -m edgepipe.sinks.streams.client 127.0.0.1 9000
    python -m edgepipe.sinks.streams.client 192.0.2.10 9000 --token "$EDGEPIPE_TOKEN" --count 10

It ends when the pipeline does (exit 0), or after ``--count`` messages; a connection that cannot
be made, or a stream that breaks inside a message, exits 1 with one line saying why.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any

from edgepipe.sinks.streams.framing import HEADER, MAX_MESSAGE_BYTES
from edgepipe.wire.exposure import TOKEN_ENV
from edgepipe.wire.messages import unpack
from edgepipe.wire.results import to_jsonable


async def read_messages(reader: asyncio.StreamReader) -> AsyncIterator[dict[str, Any]]:
    """The messages of a stream until it ends. Raises ``ValueError`` for a stream that breaks
    inside a message, a length over :data:`MAX_MESSAGE_BYTES`, or a message that is not a
    version 1 map."""
    while True:
        try:
            header = await reader.readexactly(HEADER.size)
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                raise ValueError("the stream ended inside a message's length") from None
            return
        (length,) = HEADER.unpack(header)
        if length > MAX_MESSAGE_BYTES:
            raise ValueError(f"a message of {length} bytes: not a stream of edgepipe messages")
        try:
            payload = await reader.readexactly(length)
        except asyncio.IncompleteReadError:
            raise ValueError("the stream ended inside a message") from None
        yield unpack(payload)


async def messages(host: str, port: int, *, token: str | None = None) -> AsyncIterator[dict[str, Any]]:
    """Connect to a stream (sending ``token`` first when given) and yield its messages until it
    ends. Raises ``OSError`` when it cannot connect, ``ValueError`` as :func:`read_messages`."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        if token:
            writer.write(token.encode() + b"\n")
        async for message in read_messages(reader):
            yield message
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def _print(host: str, port: int, token: str | None, count: int | None) -> None:
    seen = 0
    async for message in messages(host, port, token=token):
        sys.stdout.write(json.dumps(message, default=to_jsonable, separators=(",", ":")) + "\n")
        sys.stdout.flush()
        seen += 1
        if count is not None and seen >= count:
            return


def _count(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a count of at least 1, got {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m edgepipe.sinks.streams.client",
        description="Print a TcpStream's messages as JSON lines.",
    )
    parser.add_argument("host", help="the stream's address (127.0.0.1)")
    parser.add_argument("port", type=int, help="the stream's port")
    token = os.environ.get(TOKEN_ENV)
    parser.add_argument("--token", default=token, help=f"sent first (default ${TOKEN_ENV})")
    parser.add_argument("--count", type=_count, default=None, help="stop after this many messages")
    args = parser.parse_args(argv)
    try:
        asyncio.run(_print(args.host, args.port, args.token, args.count))
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):  # | head: the reader has gone, not an error
            devnull = os.open(os.devnull, os.O_WRONLY)
            with contextlib.suppress(OSError, ValueError):  # nothing fails again at exit's flush
                os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
            return 0
        # asyncio's connect errors carry the errno; their strerror is "Connect call failed (...)"
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        print(f"tcp://{args.host}:{args.port}: {reason}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"tcp://{args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
