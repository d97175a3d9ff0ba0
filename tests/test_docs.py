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
