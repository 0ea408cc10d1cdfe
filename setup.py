"""The one build step pyproject.toml cannot declare: the docs ship inside the wheel.

``--help`` texts name ``docs/NAME.md``; after a pip install there is no checkout to find them
in, so ``docs/*.md`` are copied into the built package as ``harness/docs/`` (package data
must live inside a package, and the docs stay at the top of the repository).
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithDocs(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "harness" / "docs"
        self.mkpath(str(target))
        for doc in sorted((Path(__file__).resolve().parent / "docs").glob("*.md")):
            self.copy_file(str(doc), str(target / doc.name))


setup(cmdclass={"build_py": BuildWithDocs})
