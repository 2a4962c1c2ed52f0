"""The type checker's rules that mypy can't enforce itself (docs/development.md):

* it checks every local installed app, `config` and the tests' helper modules (`tests/*.py` that
  are not test modules): mypy's `packages` and `modules` in pyproject.toml are a list, and a new app
  left out of it would never be type-checked;
* every `# type: ignore` names its error code and says why on the same line, as in
  `# type: ignore[attr-defined]  # set by the queryset annotation`. mypy checks the code part
  (`ignore-without-code`) and unused ignores; this checks the reason."""

import io
import re
import sys
import tokenize
import tomllib
from pathlib import Path

from django.apps import apps

ROOT = Path(__file__).resolve().parent.parent
EXPLAINED = re.compile(r"#\s*type:\s*ignore\[[a-z0-9-]+(?:,\s*[a-z0-9-]+)*\]\s+#\s*\S")
MYPY = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
PACKAGES: list[str] = MYPY.get("packages", [])
MODULES: list[str] = MYPY.get("modules", [])


def unchecked(names: list[str], packages: list[str], modules: list[str]) -> list[str]:
    """The dotted names neither listed as a module nor inside a listed package."""
    return [
        name
        for name in names
        if name not in modules and not any(name == p or name.startswith(f"{p}.") for p in packages)
    ]


def must_be_checked() -> list[str]:
    """config, every installed app whose code is in this repository, and the tests' helper modules."""
    # The virtual environment may live inside the checkout (make's .venv): its packages are not ours.
    venv = Path(sys.prefix).resolve()
    local_apps = [
        c.name
        for c in apps.get_app_configs()
        if Path(c.path).resolve().is_relative_to(ROOT) and not Path(c.path).resolve().is_relative_to(venv)
    ]
    helpers = [
        f"tests.{path.stem}"
        for path in sorted((ROOT / "tests").glob("*.py"))
        if not path.name.startswith("test_") and path.name != "__init__.py"
    ]
    return ["config", *local_apps, *helpers]


def test_the_coverage_check_reports_what_mypy_would_skip() -> None:
    assert unchecked(["approvals", "approvals.agents.api", "tests.factories"], ["approvals"], ["tests.factories"]) == []
    assert unchecked(["subscriptions", "tests.helpers"], ["approvals", "subscriptions_old"], []) == [
        "subscriptions",
        "tests.helpers",
    ]


def test_mypy_checks_every_local_installed_app_config_and_the_tests_helpers() -> None:
    assert {"approvals", "refunds", "invoices", "tests.toy_action", "tests.conftest"} <= set(must_be_checked())
    missing = unchecked(must_be_checked(), PACKAGES, MODULES)
    assert missing == [], f"add to [tool.mypy] packages or modules in pyproject.toml: {missing}"


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
    paths = [path for package in PACKAGES for path in sorted((ROOT / package.replace(".", "/")).rglob("*.py"))]
    paths += [ROOT / f"{module.replace('.', '/')}.py" for module in MODULES]
    assert len(paths) > 100, "the paths mypy checks were not found"
    for path in paths:
        for line in unexplained_ignores(path.read_text(encoding="utf-8")):
            found.append(f"{path.relative_to(ROOT)}:{line}")
    assert found == [], "type: ignore without `[code]  # reason`:\n" + "\n".join(found)
