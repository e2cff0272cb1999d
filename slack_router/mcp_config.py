"""The MCP client configuration file (`config/mcp_servers.json`).

When that default file is absent from the working folder, the example bundled in the
package is used (`rag-mcp` over stdio), so an installed bot works without the repository.

Format (spec 000): `{"mcpServers": {"rag": {"transport": "stdio", "command": "rag-mcp",
"args": [], "env": {}}}}`; a streamable-HTTP entry has `"transport": "streamable-http"`
and `"url"`. A broken file is one clear error; a broken entry is logged and skipped so
the other servers still start.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from slack_router.settings import DEFAULT_MCP_SERVERS_CONFIG

logger = logging.getLogger(__name__)
EXAMPLE_CONFIG = "mcp_servers.json"

Transport = Literal["stdio", "streamable-http", "http"]


class MCPConfigError(ValueError):
    """The config file is missing or not valid JSON; the message names the file and the fix."""


class ServerConfig(BaseModel):
    """One entry of `mcpServers`."""

    model_config = ConfigDict(extra="ignore")

    name: str
    transport: Transport = "stdio"
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None

    @model_validator(mode="after")
    def _check_transport(self) -> ServerConfig:
        if self.transport == "stdio" and not self.command:
            raise ValueError("a stdio server needs a 'command'")
        if self.transport != "stdio" and not self.url:
            raise ValueError(f"a {self.transport} server needs a 'url'")
        return self


def resolve_command(command: str) -> str:
    """Find `command` on PATH, else next to this Python (a venv's `bin/` when not activated)."""
    found = shutil.which(command)
    if found:
        return found
    beside = Path(sys.executable).parent / command
    if beside.exists():
        return str(beside)
    return command


def parse_servers(data: object, source: str = "MCP config") -> list[ServerConfig]:
    """Valid server entries of a decoded config; invalid ones are logged and skipped."""
    if not isinstance(data, dict) or not isinstance(data.get("mcpServers", {}), dict):
        raise MCPConfigError(f"{source} must be a JSON object with an 'mcpServers' object.")
    servers: list[ServerConfig] = []
    for name, entry in data.get("mcpServers", {}).items():
        if not isinstance(entry, dict):
            logger.error("MCP server %r in %s is not an object; skipped", name, source)
            continue
        try:
            servers.append(ServerConfig(name=name, **entry))
        except ValidationError as err:
            reason = str(err.errors()[0].get("msg", "invalid entry")).removeprefix("Value error, ")
            logger.error("MCP server %r in %s is invalid (%s); skipped", name, source, reason)
    return servers


def example_config_path() -> Path:
    """The bundled example configuration (found through importlib.resources)."""
    from importlib.resources import files

    return Path(str(files("slack_router.data").joinpath(EXAMPLE_CONFIG)))


def config_path(configured: str) -> Path:
    """The file to read: the configured one, or the bundled example when the default
    `config/mcp_servers.json` is not in the working folder."""
    path = Path(configured)
    if configured == DEFAULT_MCP_SERVERS_CONFIG and not path.exists():
        logger.info("%s not found; using the bundled example (rag-mcp over stdio)", configured)
        return example_config_path()
    return path


def load_servers(path: str | Path) -> list[ServerConfig]:
    """Read the config file; raise `MCPConfigError` when it is missing or not JSON."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MCPConfigError(
            f"MCP config file {file} not found; create it or point MCP_SERVERS_CONFIG at it."
        ) from None
    except OSError as err:
        raise MCPConfigError(f"MCP config file {file} cannot be read ({err.strerror}).") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise MCPConfigError(
            f"MCP config file {file} is not valid JSON (line {err.lineno}: {err.msg})."
        ) from None
    return parse_servers(data, str(file))
