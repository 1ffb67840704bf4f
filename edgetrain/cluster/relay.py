"""A TCP relay from the `kubernetes` Service's address to the API server on 127.0.0.1: how pods
of a real node reach the API server with no kube-proxy and no iptables rule.

    python -m edgetrain.cluster.relay LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT
"""

from __future__ import annotations

import asyncio
import contextlib
import sys

CHUNK_BYTES = 65536


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK_BYTES):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def serve(listen_host: str, listen_port: int, target_host: str, target_port: int) -> None:
    """Relay every connection until cancelled."""

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(target_host, target_port)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(_pipe(client_r, server_w), _pipe(server_r, client_w))

    server = await asyncio.start_server(handle, listen_host, listen_port, reuse_address=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> None:
    """Entry point: the four positional arguments above."""
    listen_host, listen_port, target_host, target_port = argv
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(listen_host, int(listen_port), target_host, int(target_port)))


if __name__ == "__main__":
    main(sys.argv[1:])
