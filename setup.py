"""The wheel carries the checkout's root files (template.yaml, the state machines, ...) as
package data of `rigbench`, so that an installed rigbench finds them through its package
(rigbench/project_files.py). Everything else is in pyproject.toml."""

import runpy
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

# read by path: importing the rigbench package would need its dependencies in the build
_project_files = runpy.run_path(str(Path(__file__).parent / "rigbench" / "project_files.py"))
PACKAGED_DIR: str = _project_files["PACKAGED_DIR"]
ROOT_FILES: tuple[str, ...] = _project_files["ROOT_FILES"]


class BuildPyWithProjectFiles(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "rigbench" / PACKAGED_DIR
        for name in ROOT_FILES:
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(name, target / name)


setup(cmdclass={"build_py": BuildPyWithProjectFiles})
