"""The package installs into a fresh venv without a network: its build
backend (tools/build_backend.py) needs nothing but the standard library."""

import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest
import zipfile

PYTHON_ROOT = pathlib.Path(__file__).resolve().parents[1]


def backend():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("build_backend", PYTHON_ROOT / "tools" / "build_backend.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Install(unittest.TestCase):
    def tmp(self) -> str:
        d = tempfile.mkdtemp(prefix="lc-python-install-")
        self.addCleanup(shutil.rmtree, d, True)
        return d

    def test_offline_install_into_a_fresh_venv(self) -> None:
        d = self.tmp()
        subprocess.run([sys.executable, "-m", "venv", d], check=True)
        py = os.path.join(d, "bin", "python")
        p = subprocess.run([py, "-m", "pip", "install", "--no-index", str(PYTHON_ROOT)], capture_output=True,
                           text=True, cwd=d)  # fmt: skip
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        p = subprocess.run([py, "-c", "import lockingcenter, pathlib; p = pathlib.Path(lockingcenter.__file__);"
                            "print(p.parent.parent.name, (p.parent / 'py.typed').exists())"],
                           capture_output=True, text=True, cwd=d)  # fmt: skip
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.split(), ["site-packages", "True"])

    def test_wheel_sdist_and_editable(self) -> None:
        b, d = backend(), self.tmp()
        with zipfile.ZipFile(os.path.join(d, b.build_wheel(d))) as z:
            names = z.namelist()
            self.assertIn("lockingcenter/py.typed", names)
            self.assertIn("lockingcenter/__init__.py", names)
            record = z.read([n for n in names if n.endswith("RECORD")][0]).decode()
            self.assertEqual(len(record.splitlines()), len(names))
        with tarfile.open(os.path.join(d, b.build_sdist(d))) as t:
            self.assertTrue(any(n.endswith("/tools/build_backend.py") for n in t.getnames()))
        with zipfile.ZipFile(os.path.join(d, b.build_editable(d))) as z:
            (pth,) = [n for n in z.namelist() if n.endswith(".pth")]
            self.assertEqual(z.read(pth).decode().strip(), str(PYTHON_ROOT / "src"))


if __name__ == "__main__":
    unittest.main()
