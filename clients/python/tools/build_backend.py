"""The package's build backend (PEP 517 and PEP 660), standard library only,
so that ``pip install ./clients/python`` needs nothing from a package index:
the package is pure Python, and building it is putting its files in a
zip (a wheel) or a tarball (an sdist) with their metadata, read from
pyproject.toml's [project] table."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import pathlib
import re
import tarfile
import time
import zipfile
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = "lockingcenter"
TAG = "py3-none-any"


def _project() -> dict[str, Any]:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    try:
        import tomllib
    except ImportError:  # Python 3.10: the few forms [project] uses here
        return _read_project(text)
    return tomllib.loads(text)["project"]


def _read_project(text: str) -> dict[str, Any]:
    project: dict[str, Any] = {}
    table = ""
    for m in re.finditer(r'^\[([^\]]+)\]\s*$|^(\w[\w-]*)\s*=\s*("[^"]*"|\[[^\]]*\])', text, re.M):
        if m.group(1):
            table = m.group(1)
        elif table.startswith("project"):
            value: Any = re.findall(r'"([^"]*)"', m.group(3)) if m.group(3).startswith("[") else m.group(3)[1:-1]
            (project.setdefault("urls", {}) if table == "project.urls" else project)[m.group(2)] = value
    return project


def _metadata() -> str:
    p = _project()
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}"]
    if p.get("description"):
        lines.append(f"Summary: {p['description']}")
    if p.get("requires-python"):
        lines.append(f"Requires-Python: {p['requires-python']}")
    lines += [f"Classifier: {c}" for c in p.get("classifiers", [])]
    lines += [f"Project-URL: {k}, {v}" for k, v in p.get("urls", {}).items()]
    readme = p.get("readme")
    if readme:
        lines.append("Description-Content-Type: text/markdown")
        return "\n".join(lines) + "\n\n" + (ROOT / readme).read_text(encoding="utf-8")
    return "\n".join(lines) + "\n"


def _name() -> str:
    p = _project()
    return f"{p['name']}-{p['version']}"


def _sources() -> list[pathlib.Path]:
    src = ROOT / "src" / PACKAGE
    return sorted(f for f in src.rglob("*") if f.is_file() and "__pycache__" not in f.parts)


def _wheel(directory: str, files: dict[str, bytes]) -> str:
    """Write a wheel of files (archive name: bytes) and its dist-info."""
    dist_info = f"{_name()}.dist-info"
    files = dict(files)
    files[f"{dist_info}/METADATA"] = _metadata().encode()
    files[f"{dist_info}/WHEEL"] = f"Wheel-Version: 1.0\nGenerator: {PACKAGE} tools/build_backend.py\n" \
        f"Root-Is-Purelib: true\nTag: {TAG}\n".encode()  # fmt: skip
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    filename = f"{_name()}-{TAG}.whl"
    stamp = time.localtime(int(os.environ.get("SOURCE_DATE_EPOCH", "315532800")))[:6]
    with zipfile.ZipFile(os.path.join(directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return filename


def build_wheel(wheel_directory: str, config_settings: Any = None, metadata_directory: Any = None) -> str:
    src = ROOT / "src"
    return _wheel(wheel_directory, {f.relative_to(src).as_posix(): f.read_bytes() for f in _sources()})


def build_editable(wheel_directory: str, config_settings: Any = None, metadata_directory: Any = None) -> str:
    """A wheel that puts src on the path: the sources are used in place."""
    return _wheel(wheel_directory, {f"{PACKAGE}.pth": (str(ROOT / "src") + "\n").encode()})


def build_sdist(sdist_directory: str, config_settings: Any = None) -> str:
    name = _name()
    filename = f"{name}.tar.gz"
    files = [ROOT / "pyproject.toml", ROOT / "README.md", ROOT / "tools" / "build_backend.py", *_sources()]
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for f in files:
            t.add(f, arcname=f"{name}/{f.relative_to(ROOT).as_posix()}")
        data = _metadata().encode()
        info = tarfile.TarInfo(f"{name}/PKG-INFO")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return filename


def get_requires_for_build_wheel(config_settings: Any = None) -> list[str]:
    return []


def get_requires_for_build_editable(config_settings: Any = None) -> list[str]:
    return []


def get_requires_for_build_sdist(config_settings: Any = None) -> list[str]:
    return []
