"""MCPManager: connects to every configured MCP server and routes tool calls by name.

Each server connection lives in its own background task that holds the MCP client in
an `AsyncExitStack` until `close()`: the SDK's task groups must be entered and exited
by the same task, and this lets `start()`/`close()` be called from anywhere (Bolt's
handlers, test fixtures). A server that fails to start is logged and skipped; one whose
connection closes later (the process died) is started again by the next call that finds
it closed, and a read-only or idempotent call is then sent once more.

Arguments are made encodable first: a lone surrogate (half an emoji, cut by a model or
pasted) made the stdio writer fail and close the connection for every later call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import mcp_types as types
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from slack_router.mcp_config import ServerConfig, load_servers, resolve_command

logger = logging.getLogger(__name__)

ProgressCallback = Callable[[float, float | None, str | None], Awaitable[None]]

_SDK_ERROR_PREFIX = re.compile(r"^Error executing tool \S+: ")
_CLOSE_TIMEOUT_SEC = 10.0
_PROBE_TIMEOUT_SEC = 5.0
RESTART_BACKOFF_SEC = 30.0
"""After a failed start, calls fail at once for this long instead of each trying again."""
_SURROGATE = re.compile("[\ud800-\udfff]")
_CLOSED_ERRORS = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)


class MCPToolNotFoundError(LookupError):
    """No running MCP server exposes the requested tool."""


class MCPCallError(RuntimeError):
    """The tool call could not complete (server gone, timeout, protocol error);
    `connection_lost`: the server's session had closed; `restarted`: it has been started
    again, so the same call may now work."""

    def __init__(
        self, message: str, *, connection_lost: bool = False, restarted: bool = False
    ) -> None:
        super().__init__(message)
        self.connection_lost = connection_lost
        self.restarted = restarted


def encodable(value: Any) -> Any:
    """`value` with every lone surrogate in its strings (keys too) replaced by U+FFFD; a
    surrogate pair written as two code points becomes the one character it encodes."""
    if isinstance(value, str):
        if _SURROGATE.search(value) is None:
            return value
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, dict):
        return {encodable(k): encodable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encodable(v) for v in value]
    return value


def _closed(err: BaseException) -> bool:
    """The call failed because the connection to the server is closed."""
    if isinstance(err, BaseExceptionGroup):
        return any(_closed(e) for e in err.exceptions)
    if isinstance(err, MCPError):
        return err.code == types.CONNECTION_CLOSED
    return isinstance(err, _CLOSED_ERRORS)


def _safe_to_repeat(tool: types.Tool) -> bool:
    hints = tool.annotations
    return bool(hints and (hints.read_only_hint or hints.idempotent_hint))


@dataclass(frozen=True)
class ToolResult:
    """What a tool returned: its text content, the error flag and structured content."""

    text: str
    is_error: bool
    structured: dict[str, Any] | None = None


def to_tool_result(result: types.CallToolResult) -> ToolResult:
    """Flatten a `CallToolResult`: text blocks joined, the SDK's error prefix removed."""
    texts = [block.text for block in result.content if isinstance(block, types.TextContent)]
    text = "\n".join(texts).strip()
    if result.is_error:
        text = _SDK_ERROR_PREFIX.sub("", text)
    structured = result.structured_content if isinstance(result.structured_content, dict) else None
    return ToolResult(text=text, is_error=bool(result.is_error), structured=structured)


def _one_line(err: BaseException) -> str:
    if isinstance(err, BaseExceptionGroup) and err.exceptions:
        return _one_line(err.exceptions[0])
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return text[:300]


class _Connection:
    """One server: a task that opens the client, lists tools, and waits for `stop()`."""

    def __init__(self, config: ServerConfig, start_timeout: float) -> None:
        self.config = config
        self.client: Client | None = None
        self.tools: list[types.Tool] = []
        self.instructions: str | None = None
        self.error: str | None = None
        self._start_timeout = start_timeout
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._restarting = asyncio.Lock()
        self.lost = False
        """Its connection was lost after it had started (a call may start it again)."""
        self._failed_at: float | None = None

    @property
    def alive(self) -> bool:
        return self.client is not None and self._task is not None and not self._task.done()

    def _make_client(self) -> Client:
        cfg = self.config
        target: StdioServerParameters | str
        if cfg.transport == "stdio":
            assert cfg.command is not None  # checked by ServerConfig
            target = StdioServerParameters(
                command=resolve_command(cfg.command), args=cfg.args, env=cfg.env, cwd=cfg.cwd
            )
        else:
            assert cfg.url is not None
            target = cfg.url
        return Client(target, read_timeout_seconds=self._start_timeout)

    async def _run(self) -> None:
        try:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(self._make_client())
                listing = await client.list_tools()
                self.tools = list(listing.tools)
                self.instructions = client.instructions
                self.client = client
                self._ready.set()
                await self._stop.wait()
        except Exception as err:
            self.error = _one_line(err)
            if not self._ready.is_set():
                logger.error(
                    "MCP server %r failed to start (%s); skipped", self.config.name, self.error
                )
            elif not self._stop.is_set():
                logger.error("MCP server %r stopped (%s)", self.config.name, self.error)
        finally:
            self.client = None
            self._ready.set()

    async def start(self, within: float | None = None) -> bool:
        """Start and wait until the tools are listed (at most the start timeout, or
        `within` s when shorter); False (logged) when it failed."""
        limit = self._start_timeout if within is None else min(self._start_timeout, within)
        self._task = asyncio.create_task(self._run(), name=f"mcp-{self.config.name}")
        try:
            await asyncio.wait_for(self._ready.wait(), timeout=max(limit, 0.0))
        except TimeoutError:
            logger.error("MCP server %r did not start within %g s", self.config.name, limit)
            await self._cancel()
            return False
        return self.alive

    async def gone(self, client: Client, within: float | None) -> bool:
        """The session of `client` has closed, not one request of it (a cut HTTP stream
        ends one call while the session goes on): a closed client refuses to list its
        tools (ping is gone from the protocol)."""
        if self.client is not client or not self.alive:
            return True
        limit = _PROBE_TIMEOUT_SEC if within is None else min(_PROBE_TIMEOUT_SEC, within)
        try:
            await asyncio.wait_for(client.list_tools(), timeout=max(limit, 0.0))
        except TimeoutError:
            return True
        except Exception as err:
            return _closed(err)  # any other answer came from a live session
        return False

    async def restart(self, failed: Client | None, within: float | None = None) -> bool:
        """Start the server again after the session of `failed` (None: the server is
        down) closed; once for all the callers that saw the same loss, and not again
        within `RESTART_BACKOFF_SEC` of a start that failed."""
        async with self._restarting:
            if self.alive and self.client is not failed:
                return True  # another caller has started it again already
            failed_lately = self._failed_at is not None and (
                time.monotonic() - self._failed_at < RESTART_BACKOFF_SEC
            )
            if failed_lately:
                return False  # it failed a moment ago: do not make every caller wait
            self.lost = True
            logger.warning("MCP server %r is down; starting it again", self.config.name)
            await self.stop()
            self.client, self.error = None, None
            self._ready, self._stop = asyncio.Event(), asyncio.Event()
            started = await self.start(within)
            self._failed_at = None if started else time.monotonic()
            return started

    async def stop(self) -> None:
        self._stop.set()
        if self._task is None or self._task.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout=_CLOSE_TIMEOUT_SEC)
        except TimeoutError:
            await self._cancel()

    async def _cancel(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


class MCPManager:
    """Starts the configured MCP servers and calls their tools by name.

    Use as `async with MCPManager(servers) as manager:` or call `start()`/`close()`.
    """

    def __init__(
        self,
        servers: Sequence[ServerConfig],
        *,
        start_timeout: float = 30.0,
        tool_timeout: float | None = 1800.0,
    ) -> None:
        self._connections = [_Connection(cfg, start_timeout) for cfg in servers]
        self._tool_timeout = tool_timeout
        self._started = False

    @classmethod
    def from_config_file(cls, path: str | Path, **kwargs: Any) -> MCPManager:
        """Build from `config/mcp_servers.json`; raises `MCPConfigError` on a broken file."""
        return cls(load_servers(path), **kwargs)

    async def start(self) -> None:
        """Start every server concurrently; failures are logged and skipped."""
        if self._started:
            return
        self._started = True
        results = await asyncio.gather(*(conn.start() for conn in self._connections))
        for conn, ok in zip(self._connections, results, strict=True):
            if ok:
                names = ", ".join(tool.name for tool in conn.tools) or "none"
                logger.info("MCP server %r started; tools: %s", conn.config.name, names)

    async def close(self) -> None:
        """Stop every server (closes stdio pipes, ends the processes)."""
        await asyncio.gather(*(conn.stop() for conn in self._connections))

    async def __aenter__(self) -> MCPManager:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def server_names(self) -> list[str]:
        """Names of the servers that are up."""
        return [conn.config.name for conn in self._connections if conn.alive]

    @property
    def instructions(self) -> list[str]:
        """Instruction texts the running servers sent at connect time."""
        return [conn.instructions for conn in self._connections if conn.alive and conn.instructions]

    def list_tools(self) -> list[types.Tool]:
        """Every tool of every running server (first server wins on a duplicate name)."""
        seen: dict[str, types.Tool] = {}
        for conn in self._connections:
            if conn.alive:
                for tool in conn.tools:
                    seen.setdefault(tool.name, tool)
        return list(seen.values())

    def _find(self, name: str, stopped: bool = False) -> tuple[_Connection, types.Tool] | None:
        """The running server offering `name`; with `stopped`, else one that offered it
        before its connection was lost."""
        for wanted in (True, False) if stopped else (True,):
            for conn in self._connections:
                if conn.alive == wanted and (wanted or conn.lost):
                    for tool in conn.tools:
                        if tool.name == name:
                            return conn, tool
        return None

    def get_tool(self, name: str) -> types.Tool | None:
        """The tool's definition (name, description, input schema), or None."""
        found = self._find(name, stopped=True)
        return found[1] if found else None

    def has_tool(self, name: str) -> bool:
        """A running server offers `name`, or one that did until it was lost (the call
        starts it again)."""
        return self._find(name, stopped=True) is not None

    async def call_tool(
        self,
        name: str,
        args: dict[str, Any] | None = None,
        progress_callback: ProgressCallback | None = None,
        timeout: float | None = None,
    ) -> ToolResult:
        """Call `name` on the server that exposes it.

        Raises `MCPToolNotFoundError` when no running server has the tool and
        `MCPCallError` when the call cannot complete; a tool-level failure is a
        `ToolResult` with `is_error=True`. `timeout` (s) replaces the manager's tool
        timeout for this call, a restart of the server and a second try included.
        """
        found = self._find(name, stopped=True)
        if found is None:
            raise MCPToolNotFoundError(f"No MCP server offers the tool {name!r}.")
        conn, tool = found
        budget = self._tool_timeout if timeout is None else timeout
        deadline = None if budget is None else time.monotonic() + budget

        def left() -> float | None:
            return None if deadline is None else deadline - time.monotonic()

        if not conn.alive and not await conn.restart(None, left()):
            raise MCPCallError(
                f"the MCP server {conn.config.name!r} could not be started again "
                f"({conn.error or 'no reason given'})",
                connection_lost=True,
            )
        arguments = encodable(args or {})
        for attempt in (1, 2):
            client = conn.client
            if client is None:
                raise MCPToolNotFoundError(f"The MCP server {conn.config.name!r} is not running.")
            remaining = left()
            try:
                if remaining is not None and remaining <= 0:
                    raise TimeoutError("no time left for it")
                result = await client.call_tool(
                    name,
                    arguments,
                    read_timeout_seconds=remaining,
                    progress_callback=progress_callback,
                )
            except Exception as err:
                reason = _one_line(err)
                logger.warning("MCP call %s on %r failed: %s", name, conn.config.name, reason)
                lost = _closed(err) and await conn.gone(client, left())
                restarted = lost and attempt == 1 and await conn.restart(client, left())
                if restarted and _safe_to_repeat(tool):
                    continue  # the request may never have reached the server: send it again
                raise MCPCallError(
                    f"the MCP server {conn.config.name!r} did not complete {name} ({reason})",
                    connection_lost=lost,
                    restarted=restarted,
                ) from err
            return to_tool_result(result)
        raise AssertionError("unreachable")
