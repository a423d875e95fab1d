"""The README's Python example runs as written."""

import pathlib
import re
import subprocess
import sys

README = pathlib.Path(__file__).resolve().parents[3] / "README.md"


def blocks():
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Python\n", 1)[1].split("\n## ", 1)[0]
    found = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(found) == 2 and all(len(b.splitlines()) <= 20 for b in found)
    return found


def test_readme_world_example_runs_as_four_ranks(accio_bin):
    p = subprocess.run(
        [accio_bin, "run", "-n", "4", sys.executable, "-c", blocks()[0]],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    lines = sorted(p.stdout.splitlines())
    assert len(lines) == 4, p.stdout
    for r, line in enumerate(lines):
        assert line.startswith(f"{r} shm same node "), line


def test_readme_python_example_runs():
    exec(compile(blocks()[1], str(README) + ":python", "exec"), {})
