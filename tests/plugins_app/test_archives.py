"""Archive extraction by measured size (plugins_app/archives.py): lying headers, high-ratio members
and too many entries are refused while inflating, memory stays flat, nothing is left behind."""
from __future__ import annotations

import io
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from plugins_app.archives import ArchiveLimits, ArchiveRejected, zip_extract_metered

LIMITS = ArchiveLimits(max_total_bytes=200 * 1024 * 1024, max_entries=5000)
REPO = Path(__file__).resolve().parents[2]


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def lying_zip(inflated_bytes: int, declared_bytes: int) -> bytes:
    """A one-member zip whose local and central headers declare ``declared_bytes`` for a member that
    inflates to ``inflated_bytes`` (the sizes a hostile archive would forge)."""
    data = bytearray(_zip({"world.yaml": b"\0" * inflated_bytes}))
    local = data.find(b"PK\x03\x04")
    struct.pack_into("<I", data, local + 22, declared_bytes)  # local header: uncompressed size
    central = data.find(b"PK\x01\x02")
    struct.pack_into("<I", data, central + 24, declared_bytes)  # central directory: uncompressed size
    return bytes(data)


def _extract(data: bytes, tmp_path: Path, limits: ArchiveLimits = LIMITS) -> Path:
    target = tmp_path / "pkg"
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        zip_extract_metered(archive, target, limits)
    return target


def test_an_ordinary_package_extracts(tmp_path):
    target = _extract(_zip({"world.yaml": b"id: a\n", "characters/a.json": b"{}", "data/": b""}), tmp_path)
    assert (target / "world.yaml").read_bytes() == b"id: a\n" and (target / "characters" / "a.json").is_file()


def test_declared_sizes_over_the_limit_are_refused_before_writing(tmp_path):
    with pytest.raises(ArchiveRejected) as refused:
        _extract(_zip({"a.bin": b"x" * 2048}), tmp_path, ArchiveLimits(max_total_bytes=1024, max_entries=10))
    assert refused.value.reason == "too-large" and not (tmp_path / "pkg").exists()


def test_a_member_inflating_past_its_declared_size_is_refused(tmp_path):
    with pytest.raises(ArchiveRejected) as refused:
        _extract(lying_zip(inflated_bytes=8 * 1024 * 1024, declared_bytes=100), tmp_path)
    assert refused.value.reason in ("size-mismatch", "invalid") and not (tmp_path / "pkg").exists()


def test_a_high_ratio_member_is_refused_while_inflating(tmp_path):
    # 150 MiB of zeros compress to ~150 KiB: within the total, far beyond a 200:1 ratio
    bomb = _zip({"data/blob.bin": b"\0" * (150 * 1024 * 1024)})
    assert len(bomb) < 200 * 1024
    with pytest.raises(ArchiveRejected) as refused:
        _extract(bomb, tmp_path)
    assert refused.value.reason == "ratio" and refused.value.member == "data/blob.bin"
    assert not (tmp_path / "pkg").exists()


def test_too_many_entries_are_refused(tmp_path):
    with pytest.raises(ArchiveRejected) as refused:
        _extract(_zip({f"f{i}.txt": b"" for i in range(12)}), tmp_path, ArchiveLimits(max_total_bytes=10**6, max_entries=10))
    assert refused.value.reason == "too-many-entries"


def test_memory_stays_flat_while_a_bomb_is_refused(tmp_path):
    # given a fresh interpreter (ru_maxrss is a high-water mark) extracting a 150 MiB bomb
    (tmp_path / "bomb.zip").write_bytes(_zip({"blob.bin": b"\0" * (150 * 1024 * 1024)}))
    code = (
        "import resource, sys, zipfile; from pathlib import Path\n"
        "from plugins_app.archives import ArchiveLimits, ArchiveRejected, zip_extract_metered\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "try:\n"
        "    with zipfile.ZipFile(sys.argv[1]) as a: zip_extract_metered(a, Path(sys.argv[2]),"
        " ArchiveLimits(max_total_bytes=200 * 2**20, max_entries=10))\n"
        "except ArchiveRejected as exc: print(exc.reason)\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "bomb.zip"), str(tmp_path / "out")],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    reason, growth_kib = done.stdout.split()
    # then it is refused and the process grew by less than 16 MiB (the bomb inflates to 150 MiB)
    assert reason == "ratio", done.stderr
    assert int(growth_kib) < 16 * 1024, f"RSS grew {int(growth_kib) // 1024} MiB"
