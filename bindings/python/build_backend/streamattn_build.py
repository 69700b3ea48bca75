"""An in-tree PEP 517 build backend, so `pip install ./bindings/python` works offline.

With the usual backends (setuptools, flit, hatch), pip first downloads the backend into an
isolated build environment, which fails without a package index. The package is pure Python, so
a wheel is just a zip of src/streamattn plus metadata: this file writes it with the standard
library alone, and build-system.requires is empty.

Option: `pip install ./bindings/python -C library=/path/to/libstreamattn.so.0` copies the
library into the package (the binding then finds it "next to itself"); the wheel is then tagged
for this platform instead of py3-none-any.
"""

import base64
import hashlib
import io
import os
import pathlib
import re
import sysconfig
import tarfile
import zipfile

_ROOT = pathlib.Path(__file__).resolve().parent.parent
_PACKAGE = _ROOT / "src" / "streamattn"


def _project():
    text = (_ROOT / "pyproject.toml").read_text()
    try:
        import tomllib  # Python 3.11+
        return tomllib.loads(text)["project"]
    except ImportError:  # older Pythons: the few plain fields this file reads
        return {key: value for key, value in re.findall(r'^(\w[\w-]*) = "(.*)"$', text, re.M)}


def _metadata(project):
    lines = ["Metadata-Version: 2.1", "Name: " + project["name"],
             "Version: " + project["version"], "Summary: " + project.get("description", ""),
             "Requires-Python: " + project.get("requires-python", ">=3")]
    lines += ["Requires-Dist: " + d for d in project.get("dependencies", [])]
    for extra, deps in project.get("optional-dependencies", {}).items():
        lines.append("Provides-Extra: " + extra)
        lines += ['Requires-Dist: %s; extra == "%s"' % (d, extra) for d in deps]
    return "\n".join(lines) + "\n"


def _dist_name(project):
    return "%s-%s" % (project["name"].replace("-", "_"), project["version"])


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (path, digest, len(data))


def _write_wheel(wheel_directory, files, tag, purelib):
    project = _project()
    dist = _dist_name(project)
    info = dist + ".dist-info"
    files = dict(files)
    files[info + "/METADATA"] = _metadata(project).encode()
    files[info + "/WHEEL"] = ("Wheel-Version: 1.0\nGenerator: streamattn_build\n"
                              "Root-Is-Purelib: %s\nTag: %s\n"
                              % ("true" if purelib else "false", tag)).encode()
    files[info + "/top_level.txt"] = b"streamattn\n"
    record = [_record_line(p, d) for p, d in sorted(files.items())]
    record.append(info + "/RECORD,,")
    files[info + "/RECORD"] = ("\n".join(record) + "\n").encode()
    name = "%s-%s.whl" % (dist, tag)
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            z.writestr(path, data)
    return name


def _package_files():
    return {"streamattn/" + p.name: p.read_bytes() for p in sorted(_PACKAGE.glob("*.py"))}


def _platform_tag():
    return "py3-none-" + sysconfig.get_platform().replace("-", "_").replace(".", "_")


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = _package_files()
    library = (config_settings or {}).get("library")
    if not library:
        return _write_wheel(wheel_directory, files, "py3-none-any", True)
    library = pathlib.Path(library).resolve()  # follows libstreamattn.so -> .so.0 -> .so.0.1.0
    # Stored under its SONAME, the name the binding looks for beside itself.
    files["streamattn/libstreamattn.so.0"] = library.read_bytes()
    return _write_wheel(wheel_directory, files, _platform_tag(), False)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """PEP 660: a wheel holding only a .pth file that puts src/ on sys.path."""
    pth = {"streamattn_editable.pth": (str(_ROOT / "src") + "\n").encode()}
    return _write_wheel(wheel_directory, pth, "py3-none-any", True)


def build_sdist(sdist_directory, config_settings=None):
    project = _project()
    base = "%s-%s" % (project["name"], project["version"])
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as tar:
        for rel in ["pyproject.toml", "README.md", "build_backend/streamattn_build.py"] + [
                "src/streamattn/" + p.name for p in sorted(_PACKAGE.glob("*.py"))]:
            path = _ROOT / rel
            if path.exists():
                tar.add(str(path), arcname=base + "/" + rel)
        pkg_info = _metadata(project).encode()
        entry = tarfile.TarInfo(base + "/PKG-INFO")
        entry.size = len(pkg_info)
        tar.addfile(entry, io.BytesIO(pkg_info))
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []
