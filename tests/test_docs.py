"""The documentation promises of issue 25: a README that documents (at most 250 lines, with a project-structure
section and links into docs/ that resolve) and no reference to a document the repository does not hold."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_readme_is_short_has_a_structure_section_and_its_doc_links_resolve():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    assert "## Project structure" in text
    links = re.findall(r"\]\((docs/[^)#]+)", text)
    assert links and all((REPO / link).is_file() for link in links), links


def test_no_reference_to_documents_outside_the_repository():
    r = subprocess.run(
        ["git", "grep", "-n", "-I", r"FACTS\|CALIBRATION\|ARCHITECTURE\|preamble", "--", ".", ":!tests/test_docs.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert r.stdout == ""


# a reported p-value ("p = 0.047", "p < 1e-5"; not a rule such as "p < 0.05") or a date (a result's day)
_RESULT = re.compile(r"\bp\s*(?:=\s*\d|<\s*\d+(?:\.\d+)?e-\d)|\b20\d\d-[01]\d-[0-3]\d\b")


def _prose_of_python(path: Path) -> list[tuple[int, str]]:
    """Comments and docstrings of a Python file, with their first line numbers."""
    import ast
    import io
    import tokenize

    src = path.read_text("utf-8")
    out = [
        (t.start[0], t.string)
        for t in tokenize.generate_tokens(io.StringIO(src).readline)
        if t.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                out.append((node.body[0].lineno, doc))
    return out


def test_no_results_in_code_or_config_comments():
    """Results (p-values, dated findings) live in docs/experiments.md and result tables, not in src/, stages/ or
    conf/ comments, where they go stale silently (issue 64)."""
    found = []
    for f in sorted([*(REPO / "src").rglob("*.py"), *(REPO / "stages").rglob("*.py")]):
        for line, text in _prose_of_python(f):
            found += [f"{f.relative_to(REPO)}:{line}: {m.group(0)!r}" for m in _RESULT.finditer(text)]
    for f in sorted((REPO / "conf").rglob("*.yaml")):
        for i, row in enumerate(f.read_text("utf-8").splitlines(), 1):
            comment = row[row.index("#") :] if "#" in row else ""
            found += [f"{f.relative_to(REPO)}:{i}: {m.group(0)!r}" for m in _RESULT.finditer(comment)]
    assert not found, found
