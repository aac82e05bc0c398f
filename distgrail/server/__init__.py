"""A resident query server and its client: ``distgrail serve INDEX`` opens an index once and
answers batches over HTTP (aiohttp, the ``serve`` extra); ``distgrail.connect(url)`` and
``distgrail query --server URL PAIRS`` ask it (standard library only). The wire format is in
:mod:`distgrail.server.wire`."""

from .client import Client, ServerError, connect

__all__ = ["connect", "Client", "ServerError"]
