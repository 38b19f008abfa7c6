"""The blocking client is generated from the asyncio one: the committed
``client/sync.py`` must be what ``scripts/gen_sync_client.py`` writes from
``client/aio.py`` (edit aio.py, then run the script), and the generator's rules
do what its docstring says."""

from __future__ import annotations

import inspect
from pathlib import Path
from types import ModuleType

from delayq.client import aio, aiosubscription, subscription, sync
from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    return load_script("gen_sync_client")


def test_committed_sync_client_is_what_the_generator_writes() -> None:
    gen = _generator()
    assert len(gen.TWINS) == 4
    for source, (target, _) in gen.TWINS.items():
        committed = target.read_text()
        assert committed == gen.generate(source), f"{target.name} is stale: run the generator"
    assert gen.main(["--check"]) == 0


def test_unasync_drops_async_and_renames_names_but_not_prose() -> None:
    gen = _generator()
    src = (
        "async def f(x: AsyncIterator[int]) -> AsyncClient:\n"
        '    """await the async client"""  # await this\n'
        "    async with x:\n"
        "        async for y in await x.aclose():\n"
        "            yield await io.sleep(1)\n"
        '__all__ = ["AsyncClient", "AsyncClients"]\n'
    )
    assert gen.unasync(src) == (
        "def f(x: Iterator[int]) -> Client:\n"
        '    """await the async client"""  # await this\n'
        "    with x:\n"
        "        for y in x.close():\n"
        "            yield io.sleep(1)\n"
        '__all__ = ["Client", "AsyncClients"]\n'
    )


def test_the_twins_have_the_same_public_methods() -> None:
    def public(cls: type) -> dict[str, list[str]]:
        return {
            name: list(inspect.signature(fn).parameters)
            for name, fn in inspect.getmembers(cls, inspect.isfunction)
            if not name.startswith("_")
        }

    a, s = public(aio.AsyncClient), public(sync.Client)
    assert set(s) - set(a) == {"producer"}, "only the blocking client has a producer"
    assert {k: v for k, v in s.items() if k != "producer"} == a
    sub = public(aiosubscription.AsyncSubscription)
    sub["close"] = sub.pop("aclose")
    assert sub == public(subscription.Subscription)
    assert inspect.iscoroutinefunction(aio.AsyncClient.lookup)
    assert not inspect.iscoroutinefunction(sync.Client.lookup)
    assert inspect.iscoroutinefunction(aio.AsyncClient.create_schedule)  # (a base's)
    assert not inspect.iscoroutinefunction(sync.Client.create_schedule)
