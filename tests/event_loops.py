"""An event loop run on a test's own thread, and the database connections opened under it."""

import asyncio
from typing import Any

from django.db import connections


def run(coroutine: Any) -> Any:
    """asyncio.run, closing the database connections that synchronous ORM calls made under the loop
    opened (an MCP client's callback confirming as the customer, say).

    While a loop runs on the thread, Django's connection handler (asgiref's Local) keeps connections in
    the loop's context instead of the thread's; the test database's teardown never sees them, and left
    open they keep PostgreSQL from dropping the database. The handler's storage is made here, in the
    outermost task, so that the tasks the coroutine starts share it and close_all finds their connections."""

    async def closing() -> Any:
        connections["default"]  # noqa: B018 - creates the storage the tasks inherit
        try:
            return await coroutine
        finally:
            connections.close_all()

    return asyncio.run(closing())
