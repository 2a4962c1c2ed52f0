"""The layout's dependency direction (DESIGN.md), for every app installed now or written later:

(a) the engine (`approvals`) imports no project app: only itself, Django, DRF, Celery and libraries;
(b) a project app other than the engine imports of the engine only its public interface,
    `approvals.plugin` (its migrations too: they name engine models by app label, never by import);
(c) project apps do not import each other (an action is independent of the other actions).

A project app is any installed AppConfig whose files are inside the repository, found at run time:
no app is named here. Imports are read from the source (ast), lazy ones inside functions included.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.apps import apps
from django.conf import settings

ENGINE = "approvals"
PUBLIC_INTERFACE = "approvals.plugin"
REPOSITORY = Path(settings.BASE_DIR).resolve()


@dataclass(frozen=True)
class App:
    name: str  # the dotted module name of the app (its AppConfig.name)
    path: Path  # the app's directory


@dataclass(frozen=True)
class Violation:
    file: Path
    line: int
    imported: str
    rule: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} imports {self.imported} ({self.rule})"


def _installed_library(path: Path) -> bool:
    """A package installed into an environment (a `.venv` may sit inside the repository)."""
    return path.is_relative_to(Path(sys.prefix).resolve()) or bool({"site-packages", "dist-packages"} & set(path.parts))


def project_apps(root: Path = REPOSITORY) -> list[App]:
    """Every installed app whose files are inside `root` (not an installed library), the engine included."""
    found = []
    for config in apps.get_app_configs():
        path = Path(config.path).resolve()
        if path.is_relative_to(root) and not _installed_library(path):
            found.append(App(config.name, path))
    return found


def _module_name(file: Path, app: App) -> str:
    """The dotted name of a file of `app`, for resolving its relative imports."""
    parts = [*app.name.split("."), *file.relative_to(app.path).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(file: Path, module: str) -> list[tuple[int, str, list[str]]]:
    """(line, absolute module, imported names) of every import statement in the file, lazy ones
    inside functions included; the names are empty for `import x`."""
    tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
    package = (module if file.name == "__init__.py" else module.rpartition(".")[0]).split(".")
    found: list[tuple[int, str, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package[: len(package) - node.level + 1]
                base = ".".join([*parent, node.module] if node.module else parent)
            found.append((node.lineno, base, [alias.name for alias in node.names]))
    return found


def _is_within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def boundary_violations(project: list[App], engine: str = ENGINE) -> list[Violation]:
    """Every import in `project`'s files that breaks rule (a), (b) or (c)."""
    interface = f"{engine}.plugin"
    roots = {app.name for app in project}

    def owner(module: str) -> App | None:
        owners = [app for app in project if _is_within(module, app.name)]
        return max(owners, key=lambda app: len(app.name)) if owners else None

    violations: list[Violation] = []
    for app in project:
        nested = [o.path for o in project if o.path != app.path and o.path.is_relative_to(app.path)]
        files = sorted(p for p in app.path.rglob("*.py") if "__pycache__" not in p.parts)
        for file in files:
            if any(file.is_relative_to(n) for n in nested):
                continue  # a file of an app inside this one's directory: checked as that app's
            for line, base, names in imports_of(file, _module_name(file, app)):
                # `from approvals import models` imports the module approvals.models.
                candidates = [f"{base}.{name}" for name in names] if names and base in roots else [base]
                for imported in candidates:
                    target = owner(imported)
                    if target is None or target is app or imported == engine:
                        continue
                    if app.name == engine:
                        rule = f"the engine imports the app {target.name}"
                    elif target.name == engine:
                        if _is_within(imported, interface):
                            continue
                        rule = f"{app.name} imports the engine outside {interface}"
                    else:
                        rule = f"{app.name} imports the app {target.name}"
                    violations.append(Violation(file, line, imported, rule))
    return violations


# The project as installed ---------------------------------------------------------------------


def test_the_project_apps_are_found_without_naming_them():
    project = project_apps()
    assert ENGINE in {a.name for a in project}
    assert len(project) >= 2, "no app plugs into the engine?"
    assert all(a.path.is_relative_to(REPOSITORY) for a in project)


def test_the_engine_and_the_apps_keep_the_dependency_direction():
    violations = boundary_violations(project_apps())
    assert not violations, "\n".join(map(str, violations))


# The checker on a project written for the test -----------------------------------------------


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


@pytest.fixture
def toy_project(tmp_path):
    """An engine and two apps that keep every rule."""
    _write(
        tmp_path,
        {
            "engine/__init__.py": "",
            "engine/plugin.py": "from .registry import Action\n",
            "engine/registry.py": "import django.db\nfrom rest_framework import serializers\n",
            "engine/models.py": "from django.db import models\nfrom . import registry\n",
            "shop/__init__.py": "",
            "shop/actions.py": (
                "from engine.plugin import Action\nfrom engine import plugin\nfrom .models import Shop\n"
            ),
            "shop/models.py": "from django.db import models\n",
            "shop/migrations/__init__.py": "",
            "shop/migrations/0001_initial.py": "from django.db import migrations\nDEP = ('engine', '0001')\n",
            "mail/__init__.py": "",
            "mail/actions.py": "import engine.plugin\n\ndef later():\n    from engine.plugin import registry\n",
        },
    )
    return tmp_path


def _apps(root: Path, *names: str) -> list[App]:
    return [App(name, root / name.replace(".", "/")) for name in names]


def _check(root: Path) -> list[str]:
    return sorted(
        f"{v.file.relative_to(root)}:{v.line} {v.imported}"
        for v in boundary_violations(_apps(root, "engine", "shop", "mail"), engine="engine")
    )


def test_a_project_that_keeps_the_rules_passes(toy_project):
    assert _check(toy_project) == []


def test_the_engine_importing_an_app_fails(toy_project):
    _write(toy_project, {"engine/views.py": "import os\n\ndef page():\n    from shop.models import Shop\n"})
    assert _check(toy_project) == ["engine/views.py:4 shop.models"]


def test_an_app_importing_engine_internals_fails(toy_project):
    _write(
        toy_project,
        {
            "mail/services.py": "from engine.registry import Action\nfrom engine import models\n",
            "shop/migrations/0002_data.py": "from engine.models import Thing\n",
        },
    )
    assert _check(toy_project) == [
        "mail/services.py:1 engine.registry",
        "mail/services.py:2 engine.models",
        "shop/migrations/0002_data.py:1 engine.models",
    ]


def test_an_app_importing_another_app_fails(toy_project):
    _write(toy_project, {"mail/render.py": "from shop.models import Shop\n"})
    assert _check(toy_project) == ["mail/render.py:1 shop.models"]


def test_an_app_nobody_listed_is_covered(toy_project):
    """A third app, written after the check: it is found as installed and held to the same rules."""
    _write(
        toy_project,
        {
            "subscriptions/__init__.py": "",
            "subscriptions/actions.py": "from engine.rows import fetch_one\n",
            "engine/checks.py": "import subscriptions\n",
        },
    )
    found = sorted(
        f"{v.file.relative_to(toy_project)}:{v.line} {v.imported}"
        for v in boundary_violations(
            _apps(toy_project, "engine", "shop", "mail", "subscriptions"),
            engine="engine",
        )
    )
    assert found == ["engine/checks.py:1 subscriptions", "subscriptions/actions.py:1 engine.rows"]
