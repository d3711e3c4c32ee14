"""Where records live: a local path, or an fsspec URL (`gs://bucket/results`,
`s3://...`, `memory://...`), so that a TPU VM, a GPU box and CI write to and read from
one bucket without a mount. Local paths go through pathlib as before; a URL through
fsspec, whose driver for the store is an optional extra (`pip install 'bench[gcs]'`:
gcsfs; `bench[s3]`: s3fs).

Writes are atomic where the store allows: on an object store (gs, s3, Azure) one PUT
of the whole object under a name no other run uses (a record's file name holds its run
id); on any other filesystem, a temporary name in the same folder, then a rename.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from harness.basics.errors import SpecError

# Stores whose single write is atomic (an object appears whole or not at all) and
# whose "rename" is a copy: written in place, under a unique name.
OBJECT_STORES = {"gs", "gcs", "s3", "s3a", "az", "abfs", "abfss", "adl"}
EXTRAS = {"gs": "gcs", "gcs": "gcs", "s3": "s3", "s3a": "s3"}


def is_url(location) -> bool:
    """A URL other than a local `file://` one (those, and plain paths, stay local)."""
    text = str(location)
    return "://" in text and not text.startswith("file://") and not isinstance(location, Path)


def location(text: str) -> str | Path:
    """A command line's results location: the URL as given, or a local Path."""
    return text if is_url(text) else Path(text)


def filesystem(url: str):
    """(the fsspec filesystem, the path within it); a store whose driver is missing is
    refused naming the extra that installs it."""
    try:
        import fsspec
    except ImportError:  # pragma: no cover - a core dependency
        raise SpecError(url, "", "reading a URL needs fsspec: pip install fsspec") from None
    protocol = url.split("://", 1)[0]
    try:
        return fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:
        extra = EXTRAS.get(protocol)
        how = f"pip install 'bench[{extra}]'" if extra else f"install fsspec's driver for {protocol}://"
        raise SpecError(url, "", f"no filesystem for {protocol}:// here ({exc}); {how}") from None


def exists(url: str) -> bool:
    fs, path = filesystem(url)
    return fs.exists(path)


def is_dir(url: str) -> bool:
    fs, path = filesystem(url)
    return fs.isdir(path)


def files_under(url: str, suffix: str) -> list[str]:
    """Files ending in `suffix` under `url` (recursively; a file URL is itself), as URLs,
    sorted; hidden folders and temporary files left out, as the local reader does."""
    fs, root = filesystem(url)
    if not fs.isdir(root):
        return [url] if fs.exists(root) and root.endswith(suffix) else []
    root = root.rstrip("/")
    found = []
    for path in sorted(fs.find(root)):
        parts = path[len(root) :].strip("/").split("/")
        if (
            path.endswith(suffix)
            and not any(p.startswith(".") for p in parts[:-1])
            and not parts[-1].startswith(".tmp-")
        ):
            found.append(join(url, "/".join(parts)))  # spelt as the user spelt the folder
    return found


def read_text(url: str) -> str:
    fs, path = filesystem(url)
    with fs.open(path, "r", encoding="utf-8") as f:
        return f.read()


def join(url: str, name: str) -> str:
    return url.rstrip("/") + "/" + name


def write_text(url: str, text: str) -> str:
    """Write `text` to `url` atomically where the store allows (the module's docstring);
    returns the URL."""
    fs, path = filesystem(url)
    parent = path.rsplit("/", 1)[0]
    if parent:
        fs.makedirs(parent, exist_ok=True)
    if fs.protocol and set([fs.protocol] if isinstance(fs.protocol, str) else fs.protocol) & OBJECT_STORES:
        fs.pipe_file(path, text.encode())
        return url
    temporary = f"{parent}/.tmp-{uuid.uuid4().hex}-{path.rsplit('/', 1)[-1]}"
    fs.pipe_file(temporary, text.encode())
    try:
        fs.mv(temporary, path)
    except BaseException:
        fs.rm(temporary)
        raise
    return url


def check_writable(url: str, where: str) -> None:
    """A results URL this process can write: tried with a real object, removed again."""
    fs, path = filesystem(url)
    probe = f"{path.rstrip('/')}/.tmp-bench-preflight-{uuid.uuid4().hex}"
    try:
        fs.makedirs(path, exist_ok=True)
        fs.pipe_file(probe, b"")
        fs.rm(probe)
    except Exception as exc:  # every store raises its own errors: each is a refusal here
        raise SpecError(where, "", f"cannot write in {url}: {type(exc).__name__}: {exc}") from None
