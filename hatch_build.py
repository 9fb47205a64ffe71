"""Builds riverbed's C extensions:

- ``riverbed.spark._columnar``, the Spark source's record decoder (see its module
  docstring in ``riverbed/spark/columnar.py``);
- ``riverbed.protocol._fastpath``, the specialised codecs of the metadata records a
  snapshot is made of (see ``riverbed/protocol/fastpath.py``);
- ``riverbed.server._tlsread``, a TLS listener's read of every buffered record in one
  call (see ``riverbed/server/tls.py``).

Two callers, one recipe (the C compiler of this Python's sysconfig, its headers, -O2):

- ``make`` runs ``python hatch_build.py`` to build them in place next to their sources
  (``src/riverbed/spark/_columnar.<EXT_SUFFIX>``...), which the editable install imports;
- hatchling runs :class:`ColumnarBuildHook` when it builds a wheel (``uv build``) or the
  editable install (``uv sync``), so a wheel carries the compiled modules.

A missing compiler is not fatal: riverbed then decodes records in pure Python (slower) and
says so in the executor's log.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
SOURCE = ROOT / "src" / "riverbed" / "spark" / "_columnar.c"
#: every extension's C source, by its package directory under src/
SOURCES = (
    SOURCE,
    ROOT / "src" / "riverbed" / "protocol" / "_fastpath.c",
    ROOT / "src" / "riverbed" / "server" / "_tlsread.c",
)


def extension_path(out_dir: Path, source: Path = SOURCE) -> Path:
    return out_dir / f"{source.stem}{sysconfig.get_config_var('EXT_SUFFIX')}"


def build(out_dir: Path | None = None, source: Path = SOURCE) -> Path:
    """Compile ``source`` into ``out_dir`` (default: next to it); returns the module's path."""
    target = extension_path(source.parent if out_dir is None else out_dir, source)
    partial = target.with_name(target.name + ".partial")
    cc = shlex.split(sysconfig.get_config_var("CC") or "cc")
    command = [
        *cc,
        "-O2",
        "-shared",
        "-fPIC",
        "-Wall",
        f"-I{sysconfig.get_paths()['include']}",
        str(source),
        "-o",
        str(partial),
    ]
    subprocess.run(command, check=True)
    # a rename: Python workers that have the old module loaded keep their copy
    os.replace(partial, target)
    return target


try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # run by make, outside a build environment
    pass
else:

    class ColumnarBuildHook(BuildHookInterface):  # type: ignore[type-arg]
        def initialize(self, version: str, build_data: dict[str, Any]) -> None:
            try:
                if version == "editable":
                    for source in SOURCES:
                        build(source=source)  # the editable install imports from src/
                    return
                targets = [(s, build(Path(self.directory), s)) for s in SOURCES]
            except (OSError, subprocess.CalledProcessError) as e:
                print(
                    f"riverbed: C extension not built ({e}); records decode in Python",
                    file=sys.stderr,
                )
                return
            for source, target in targets:
                package = source.parent.relative_to(ROOT / "src").as_posix()
                build_data["force_include"][str(target)] = f"{package}/{target.name}"
            build_data["pure_python"] = False
            build_data["infer_tag"] = True


if __name__ == "__main__":
    for path in SOURCES:
        print(build(source=path))
