"""An on-disk cache of compiled artifacts, keyed by content hash.

Every backend gets one as ``self.cache``. A vendor hands it the material that determines the
artifact (generated source and compiler flags, a serialized graph, ...) and a ``build``
function; the cache adds the backend's name, version and options and the torch version to the
key, so a new backend release, other options or another torch never see a stale artifact.

How it stays correct:

- **Atomic writes.** ``build`` writes to a private temporary path in the cache directory; the
  cache then ``os.replace`` s it into place. Two processes building the same key at once both
  succeed; each reader sees one whole artifact, never a half-written one.
- **Corruption is detected.** Next to each artifact lies ``<name>.sha256``, the digest of its
  bytes, written after the artifact. An entry whose bytes do not match (a truncated file, a
  disk error, a hand edit) is rebuilt, with one warning.

Example::

    >>> import pathlib, tempfile
    >>> cache = ArtifactCache(tempfile.mkdtemp(), namespace="demo-backend/1")
    >>> def build(path: str) -> None:
    ...     pathlib.Path(path).write_text("compiled!")
    >>> p = cache.get_or_build("source code v1", build, suffix=".txt")
    >>> pathlib.Path(p).read_text(), cache.stats["built"], cache.stats["hit"]
    ('compiled!', 1, 0)
    >>> cache.get_or_build("source code v1", build, suffix=".txt") == p, cache.stats["hit"]
    (True, 1)
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

__all__ = ["ArtifactCache", "default_cache_dir", "content_hash"]


def default_cache_dir() -> Path:
    """``$TORCHVENDOR_CACHE_DIR``, else ``$XDG_CACHE_HOME/torchvendor``, else ``~/.cache/torchvendor``.

    >>> isinstance(default_cache_dir(), Path)
    True
    """
    if os.environ.get("TORCHVENDOR_CACHE_DIR"):
        return Path(os.environ["TORCHVENDOR_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "torchvendor"


def content_hash(*parts: str | bytes) -> str:
    """A stable hex digest of ``parts`` (each length-prefixed, so ``("ab", "c") != ("a", "bc")``).

    >>> content_hash("ab", "c") != content_hash("a", "bc")
    True
    """
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else bytes(part)
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class ArtifactCache:
    """Compiled artifacts on disk under ``root/<namespace hash>/``.

    Args:
        root: the cache directory (created on first write); default :func:`default_cache_dir`.
        namespace: what makes this cache's keys distinct from every other backend's and
            release's (the SDK passes backend name, version, options and torch version).

    ``stats`` counts ``hit``, ``built`` and ``rebuilt`` (corrupt entries) for reports and tests.
    """

    def __init__(self, root: str | os.PathLike[str] | None = None, namespace: str = "") -> None:
        self.root = Path(root) if root is not None else default_cache_dir()
        self.namespace = namespace
        self.directory = self.root / content_hash(namespace)[:16]
        self.stats = {"hit": 0, "built": 0, "rebuilt": 0}

    def path_for(self, key: str | bytes, suffix: str = "") -> Path:
        """Where the artifact for ``key`` lives (whether or not it exists yet)."""
        return self.directory / (content_hash(self.namespace, key)[:40] + suffix)

    def lookup(self, key: str | bytes, suffix: str = "") -> Path | None:
        """The artifact's path if a valid entry exists (a hit, counted), else None (a corrupt entry
        is removed). Use the path it returns: each lookup reads and hashes the whole file."""
        path = self.path_for(key, suffix)
        digest = path.with_name(path.name + ".sha256")
        try:
            expected = digest.read_text().strip()
        except OSError:
            return None
        try:
            ok = path.is_file() and _file_digest(path) == expected
        except OSError:
            ok = False
        if ok:
            self.stats["hit"] += 1
            return path
        warnings.warn(f"torchvendor: cache entry {path} is corrupt (its checksum does not match); rebuilding it",
                      RuntimeWarning, stacklevel=3)
        self.stats["rebuilt"] += 1
        for p in (digest, path):
            try:
                p.unlink()
            except OSError:
                pass
        return None

    def get_or_build(self, key: str | bytes, build: Callable[[str], None], suffix: str = "") -> str:
        """The path of the artifact for ``key``, calling ``build(tmp_path)`` to make it if needed.

        ``build`` must write the whole artifact to ``tmp_path`` (a fresh path in the cache
        directory, ending in ``suffix``) or raise; on success the file is moved into place
        atomically and its checksum recorded. An exception from ``build`` propagates and leaves
        nothing behind.
        """
        found = self.lookup(key, suffix)
        if found is not None:
            return str(found)
        path = self.path_for(key, suffix)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise OSError(f"torchvendor: cannot create the artifact cache directory {self.directory} ({e}); set "
                          f"TORCHVENDOR_CACHE_DIR to a writable directory") from e
        fd, tmp = tempfile.mkstemp(prefix=path.stem + ".", suffix=".tmp" + suffix, dir=self.directory)
        os.close(fd)
        try:
            build(tmp)
            digest = _file_digest(Path(tmp))
            os.replace(tmp, path)
            # The checksum is written after the artifact: a reader that sees the checksum sees
            # a complete artifact (its own replace was atomic, and a concurrent writer's bytes
            # are identical for the same key).
            fd, tmp_digest = tempfile.mkstemp(prefix=path.stem + ".", suffix=".sha256.tmp", dir=self.directory)
            with os.fdopen(fd, "w") as f:
                f.write(digest)
            os.replace(tmp_digest, path.with_name(path.name + ".sha256"))
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        self.stats["built"] += 1
        return str(path)

    def get_or_build_value(self, key: str | bytes, build: Callable[[], Any], encode: Callable[[Any], bytes],
                           decode: Callable[[bytes], Any], suffix: str = "") -> Any:
        """An in-memory value cached as bytes: a hit returns ``decode(bytes)``; a miss returns
        ``build()``'s value itself (no round trip through the bytes) and stores ``encode(value)``.

        >>> import tempfile
        >>> c = ArtifactCache(tempfile.mkdtemp(), namespace="x")
        >>> c.get_or_build_value("k", lambda: [1, 2], lambda v: bytes(v), list), c.get_or_build_value("k", None, bytes, list)
        ([1, 2], [1, 2])
        """
        found = self.lookup(key, suffix)
        if found is not None:
            return decode(found.read_bytes())
        value = build()
        self.get_or_build(key, lambda path: Path(path).write_bytes(encode(value)), suffix)
        return value

    def get_or_build_bytes(self, key: str | bytes, build: Callable[[], bytes], suffix: str = "") -> bytes:
        """Like :meth:`get_or_build` for an artifact produced in memory; returns its bytes.

        >>> import tempfile
        >>> c = ArtifactCache(tempfile.mkdtemp(), namespace="x")
        >>> c.get_or_build_bytes("k", lambda: b"blob")
        b'blob'
        """
        def write(path: str) -> None:
            Path(path).write_bytes(build())

        return Path(self.get_or_build(key, write, suffix)).read_bytes()


def graph_key(gm: Any, examples: Sequence[Any], *extra: str) -> str:
    """The text a graph's compiled artifact is keyed by: ``extra``, the graph's code, and each
    example's dtype, shape, stride and offset (any other value by its repr)."""
    def describe(v: Any) -> str:
        shape, stride = getattr(v, "shape", None), getattr(v, "stride", None)
        if shape is not None and callable(stride):
            return f"{v.dtype}{tuple(map(str, shape))}{tuple(map(str, stride()))}{v.storage_offset()}"
        return repr(v)

    return "\n".join([*extra, gm.code, *map(describe, examples)])
