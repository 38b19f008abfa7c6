"""A TCP relay that delays one direction (``netfaults.Net.relay``): run in the
sender's namespace, where nftables redirects the sender's connections to it.

For each connection it finds the original destination (``SO_ORIGINAL_DST``),
connects there with its own sockets marked (``--mark``: the redirect skips
them), and copies both ways: what the sender sends is held for the delay the
``--delays`` file gives that destination address (JSON ``{"10.231.5.11": 900}``,
read again whenever it changes), in order; replies pass at once. Closing
either side closes the other.

    python -m tests.support.relay --port 17001 --mark 42 --delays FILE
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import struct
import time
from pathlib import Path

SO_ORIGINAL_DST = 80
CHUNK = 65536


class Delays:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._mtime = 0.0
        self._table: dict[str, int] = {}

    def of(self, address: str) -> float:
        """The delay (s) for what is sent to ``address`` now."""
        try:
            mtime = self.path.stat().st_mtime
            if mtime != self._mtime:
                self._table, self._mtime = json.loads(self.path.read_text()), mtime
        except (OSError, ValueError):
            pass  # (being replaced: the last table holds)
        return self._table.get(address, 0) / 1000


def _original_dst(sock: socket.socket) -> tuple[str, int]:
    raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    port, packed = struct.unpack_from("!2xH4s", raw)
    return socket.inet_ntoa(packed), port


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


async def _connection(
    delays: Delays, mark: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    client = writer.get_extra_info("socket")
    host, port = _original_dst(client)
    out = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    out.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, mark)
    out.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(out, (host, port))
    except OSError:
        out.close()
        writer.close()
        return
    up_reader, up_writer = await asyncio.open_connection(sock=out)

    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def forward() -> None:
        # the delay is read per chunk, so a change applies to open connections too
        while True:
            data = await reader.read(CHUNK)
            queue.put_nowait((time.monotonic() + delays.of(host), data))
            if not data:
                return

    async def send() -> None:
        while True:
            due, data = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                up_writer.close()
                return
            up_writer.write(data)
            await up_writer.drain()

    tasks = [
        asyncio.create_task(forward()),
        asyncio.create_task(send()),
        asyncio.create_task(_pipe(up_reader, writer)),
    ]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for t in tasks:
            t.cancel()
        writer.close()
        up_writer.close()


async def main(port: int, mark: int, delays_path: Path) -> None:
    delays = Delays(delays_path)
    server = await asyncio.start_server(
        lambda r, w: _connection(delays, mark, r, w), "0.0.0.0", port, reuse_address=True
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--mark", type=int, required=True)
    p.add_argument("--delays", type=Path, required=True)
    a = p.parse_args()
    asyncio.run(main(a.port, a.mark, a.delays))
