"""Files shipped inside the package: the demo samples and the example settings.

Found through `importlib.resources`, so an installed wheel has them wherever a command
runs; `python -m rag_app.data` lists them, prints one, or prints where one is.
"""

from __future__ import annotations

from pathlib import Path

SAMPLES = "samples"  # the demo folder `make demo` indexes
ENV_EXAMPLE = "env.example"  # every setting with its default; copy it to `.env`


def bundled_path(package: str, name: str) -> Path:
    """`name` inside `package` as a path on disk (a wheel installs packages as folders)."""
    from importlib.resources import files  # here, so `--help` of the commands skips it

    resource = files(package).joinpath(name)
    if not isinstance(resource, Path) or not resource.exists():
        raise FileNotFoundError(f"{package} has no bundled file {name!r} on disk")
    return resource


def data_path(name: str) -> Path:
    """One of this folder's files or folders (`SAMPLES`, `ENV_EXAMPLE`)."""
    return bundled_path(__name__, name)
