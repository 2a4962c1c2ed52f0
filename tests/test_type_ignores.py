"""The type checker's one rule that mypy can't enforce itself (docs/development.md): every
`# type: ignore` names its error code and says why on the same line, as in
`# type: ignore[attr-defined]  # set by the queryset annotation`. mypy checks the code part
(`ignore-without-code`) and unused ignores; this checks the reason."""

import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECKED = ("approvals", "refunds", "invoices", "config")
EXPLAINED = re.compile(r"#\s*type:\s*ignore\[[a-z0-9-]+(?:,\s*[a-z0-9-]+)*\]\s+#\s*\S")


def unexplained_ignores(source: str) -> list[int]:
    """Line numbers of the `type: ignore` comments in `source` without a code and a reason."""
    lines = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT and re.search(r"type:\s*ignore", token.string):
            if not EXPLAINED.match(token.string):
                lines.append(token.start[0])
    return lines


def test_the_check_tells_an_explained_ignore_from_others() -> None:
    assert unexplained_ignores("x = f()  # type: ignore[attr-defined]  # set by the annotation\n") == []
    assert unexplained_ignores("x = f()  # type: ignore[arg-type, union-attr]  # the stubs say str\n") == []
    assert unexplained_ignores("x = f()  # type: ignore\n") == [1]
    assert unexplained_ignores("x = f()  # type: ignore[attr-defined]\n") == [1]
    assert unexplained_ignores("x = f()  # type: ignore  # no code\n") == [1]
    assert unexplained_ignores('x = "# type: ignore"\n') == []


def test_every_type_ignore_has_a_code_and_a_reason() -> None:
    found = []
    for package in CHECKED:
        for path in sorted((ROOT / package).rglob("*.py")):
            for line in unexplained_ignores(path.read_text(encoding="utf-8")):
                found.append(f"{path.relative_to(ROOT)}:{line}")
    assert found == [], "type: ignore without `[code]  # reason`:\n" + "\n".join(found)
