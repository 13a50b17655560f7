"""Extracting uploaded package archives by measured size (spec 004 插件与世界安装 / ZIP 激活前的校验).

A zip's headers say how large each member is, and a hostile archive lies: small declared sizes that
inflate to gigabytes, or true sizes whose compression ratio turns kilobytes into hundreds of
megabytes. So nothing here trusts a header for a limit. Each member is inflated in fixed chunks and
the bytes actually written are counted against the archive total, the member's own declared size
and a compression-ratio cap; the first breach stops the inflation. Memory stays flat (one chunk at a
time) and a failed extraction removes everything it wrote. The standard library's zipfile does the
parsing and decompression; only the metering around it is ours.
"""
from __future__ import annotations

import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True)
class ArchiveLimits:
    """max_total_bytes: inflated bytes of all members together. max_entries: members (directories
    included). max_ratio: inflated/compressed bytes of one member, checked once the member has
    written more than ratio_floor_bytes (small files compress arbitrarily well and are harmless)."""

    max_total_bytes: int
    max_entries: int
    max_ratio: int = 200
    ratio_floor_bytes: int = 1024 * 1024


class ArchiveRejected(Exception):
    """The archive breaks a limit or cannot be read. ``reason``: too-large | too-many-entries |
    ratio | size-mismatch | invalid; ``member``: the member being inflated, if any."""

    def __init__(self, reason: str, message: str, member: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.member = member


def _copy_metered(source: BinaryIO, target: BinaryIO, member: zipfile.ZipInfo, limits: ArchiveLimits,
                  written_so_far: int) -> int:
    """Copy one member chunk by chunk; returns the bytes it wrote. Raises ArchiveRejected."""
    written = 0
    while True:
        chunk = source.read(CHUNK_BYTES)
        if not chunk:
            return written
        written += len(chunk)
        if written_so_far + written > limits.max_total_bytes:
            raise ArchiveRejected("too-large", f"archive inflates beyond {limits.max_total_bytes} bytes", member.filename)
        if written > member.file_size:
            raise ArchiveRejected("size-mismatch", "member inflates beyond its declared size", member.filename)
        if written > limits.ratio_floor_bytes and written > limits.max_ratio * max(member.compress_size, 1):
            raise ArchiveRejected("ratio", f"member compression ratio exceeds {limits.max_ratio}:1", member.filename)
        target.write(chunk)


def zip_extract_metered(archive: zipfile.ZipFile, destination: Path, limits: ArchiveLimits) -> int:
    """Extract every member of ``archive`` (names already checked for zip-slip by the caller) into
    ``destination`` (created; must not exist yet), metering the real inflated size. Returns the
    total bytes written. Raises ArchiveRejected; then ``destination`` has been removed again."""
    members = archive.infolist()
    if len(members) > limits.max_entries:
        raise ArchiveRejected("too-many-entries", f"archive has more than {limits.max_entries} entries")
    if sum(m.file_size for m in members) > limits.max_total_bytes:
        raise ArchiveRejected("too-large", f"archive declares more than {limits.max_total_bytes} bytes")
    destination.mkdir(parents=True)
    root = destination.resolve()
    total = 0
    try:
        for member in members:
            target = root / member.filename
            if member.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as source, open(target, "wb") as sink:
                total += _copy_metered(source, sink, member, limits, total)
    except ArchiveRejected:
        shutil.rmtree(destination, ignore_errors=True)
        raise
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError, RuntimeError) as exc:
        # Corrupt data, CRC mismatch (a member shorter than it claims), unsupported or encrypted
        # compression: the archive is unreadable, not our fault.
        shutil.rmtree(destination, ignore_errors=True)
        raise ArchiveRejected("invalid", f"archive member could not be read ({exc.__class__.__name__})") from None
    return total
