"""Issue 37: the agent client installs from the repository as an agent developer would install it:
`pip install ./clients/python` and `pip install "git+file://…#subdirectory=clients/python"` (pip builds the
wheel in its own isolated environment, as it does for them), with both clients, the SDK glue as extras, and
its type information."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CLIENT = ROOT / "clients" / "python"
MODULES = {
    "approval_gateway_client/__init__.py",
    "approval_gateway_client/openai_agents.py",
    "approval_gateway_client/claude_agent_sdk.py",
    "approval_gateway_client/py.typed",
}


def pip(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def built_wheel(source: str, directory: Path) -> Path:
    pip("wheel", "--no-deps", "--quiet", "--wheel-dir", str(directory), source)
    (wheel,) = directory.glob("approval_gateway_client-*.whl")
    return wheel


def check_wheel(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert MODULES <= names, MODULES - names
    assert not any(name.startswith(("tests/", "approvals/")) for name in names)
    lines = metadata.splitlines()
    assert "Requires-Dist: httpx>=0.27" in lines
    assert "Provides-Extra: openai-agents" in lines and "Provides-Extra: claude-agent-sdk" in lines
    assert 'Requires-Dist: openai-agents>=0.24; extra == "openai-agents"' in lines


def test_pip_installs_the_client_from_its_directory(tmp_path):
    wheel = built_wheel(str(CLIENT), tmp_path / "wheels")
    check_wheel(wheel)
    target = tmp_path / "site"
    pip("install", "--no-deps", "--quiet", "--target", str(target), str(wheel))
    # A fresh interpreter that finds the client only where pip put it (httpx comes from this environment).
    probe = (
        "import approval_gateway_client as c, sys; "
        "print(c.__file__); print(c.AsyncGatewayClient.withdraw.__qualname__, c.GatewayClient.withdraw.__qualname__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    location, methods = done.stdout.splitlines()
    assert location == str(target / "approval_gateway_client" / "__init__.py")
    assert methods == "AsyncGatewayClient.withdraw GatewayClient.withdraw"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_pip_builds_the_client_from_a_git_url_with_its_subdirectory(tmp_path):
    repository = tmp_path / "repository"
    shutil.copytree(CLIENT, repository / "clients" / "python", ignore=shutil.ignore_patterns("*.egg-info", "build"))
    git = ["git", "-C", str(repository), "-c", "user.name=t", "-c", "user.email=t@example.test"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "client"]):
        subprocess.run([*git, *command], check=True, capture_output=True, timeout=60)

    wheel = built_wheel(f"git+file://{repository}#subdirectory=clients/python", tmp_path / "wheels")

    check_wheel(wheel)
