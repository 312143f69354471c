"""The Python on the pages users read runs as shown: docs/python.md's `>>>` sessions as doctests,
and the README's Python example as a script."""

import doctest
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _page(name):
    path = os.path.join(ROOT, name)
    if not os.path.exists(path):
        pytest.skip(f"{name} is not in this tree (an installed package without its sources)")
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_python_page_sessions(monkeypatch):
    text = _page("docs/python.md")
    sessions = re.findall(r"```python\n(>>> .*?)```", text, flags=re.S)
    assert len(sessions) >= 2, "docs/python.md lost its >>> sessions"
    monkeypatch.chdir(ROOT)  # the sessions name files by their path in the repository
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
                                   | doctest.IGNORE_EXCEPTION_DETAIL)
    import ppsched

    for i, session in enumerate(sessions):
        test = parser.get_doctest(session, {"ppsched": ppsched}, f"docs/python.md session {i + 1}", "docs/python.md", 0)
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_python_page_error_text_is_the_libraries():
    # IGNORE_EXCEPTION_DETAIL lets the session above pass whatever the message: hold it here.
    import ppsched

    text = _page("docs/python.md")
    shown = re.search(r"ppsched\.Error: (.*?)\n```", text, flags=re.S).group(1)
    with pytest.raises(ppsched.Error) as raised:
        ppsched.make_schedule("1f1b", ranks=4, microbatches=8, chunks=2)
    assert " ".join(shown.split()) == " ".join(str(raised.value).split())


def test_readme_example_runs(tmp_path):
    text = _page("README.md")
    block = re.search(r"## From Python.*?```python\n(.*?)```", text, flags=re.S).group(1)
    done = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    written = (tmp_path / "zb-h1.csv").read_text()
    assert written.count("\n") == 4 and "0F0" in written
