"""The wheel: only the package, its metadata and license, typed, versioned in one place.

The wheel is built once per run (`pip wheel . --no-deps`, the same build a user's
`pip install .` does), then inspected, then installed into a scratch directory to
run the README's first example against the installed copy rather than the source
tree.
"""

from __future__ import annotations

import ast
import email.parser
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import lift

ROOT = Path(__file__).resolve().parent.parent
RUNTIME_DEPENDENCIES = {"jax", "jaxlib", "wrapt", "typing-extensions"}
PIP = (sys.executable, "-m", "pip", "--disable-pip-version-check", "-q")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [*PIP, "wheel", str(ROOT), "--no-deps", "-w", str(out)],
        check=True,
        capture_output=True,
    )
    (built,) = out.glob("*.whl")
    return built


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(z.read(name).decode())


def test_wheel_contains_only_the_package(wheel: Path):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    dist_info = f"jax_lift-{lift.__version__}.dist-info"
    assert {name.split("/")[0] for name in names} == {"lift", dist_info}
    assert f"{dist_info}/licenses/LICENSE" in names
    assert "lift/__init__.py" in names
    assert "lift/py.typed" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".so"))]
    sources = {p.relative_to(ROOT).as_posix() for p in (ROOT / "lift").glob("*.py")}
    assert sources <= set(names), "a module of lift/ is missing from the wheel"


def test_wheel_version_is_lift_version(wheel: Path):
    assert wheel.name.startswith(f"jax_lift-{lift.__version__}-py3-none-any")
    assert _metadata(wheel)["Version"] == lift.__version__


def test_version_is_the_changelogs_newest_entry():
    # The changelog's first entry describes what is installed: while it is
    # unreleased, the version is its development release (`0.2.0.dev0`).
    text = (ROOT / "docs" / "changelog.md").read_text()
    match = re.search(r"^## (\S+) — (.+)$", text, flags=re.MULTILINE)
    assert match is not None, "docs/changelog.md has no version heading"
    version, status = match[1], match[2].strip()
    expected = f"{version}.dev0" if status == "unreleased" else version
    assert lift.__version__ == expected


def test_wheel_metadata(wheel: Path):
    metadata = _metadata(wheel)
    assert metadata["Name"] == "jax-lift"
    requires = metadata.get_all("Requires-Dist") or []
    runtime = {
        re.split(r"[<>=!~ ;\[]", req, maxsplit=1)[0].lower().replace("_", "-")
        for req in requires
        if "extra ==" not in req
    }
    assert runtime == RUNTIME_DEPENDENCIES
    extras = set(metadata.get_all("Provides-Extra") or [])
    assert {"docs", "test"} <= extras
    assert "Typing :: Typed" in (metadata.get_all("Classifier") or [])
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata.get_all("License-File") == ["LICENSE"]
    # No URL until the project has a public home: none may point nowhere.
    assert metadata.get_all("Project-URL") is None
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith("entry_points.txt"))
        entry_points = z.read(name).decode()
    assert re.search(r"\[pytest11\]\s*\nlift = lift\._leaks\.plugin", entry_points)


def test_license_is_the_apache_text_and_goes_in_the_sdist():
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License\n")
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    with open(ROOT / "pyproject.toml", "rb") as f:
        sdist = tomllib.load(f)["tool"]["hatch"]["build"]["targets"]["sdist"]
    assert {"LICENSE", "README.md", "lift"} <= set(sdist["include"])


def _first_example() -> str:
    readme = ROOT / "README.md"
    text = readme.read_text()
    match = re.search(r"^```python\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)
    assert match is not None, "README.md has no python example"
    return match[1]


def test_installed_wheel_runs_the_readme_example(wheel: Path, tmp_path: Path):
    target = tmp_path / "site"
    subprocess.run(
        [*PIP, "install", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    check = (
        "import lift, pathlib\n"
        f"assert pathlib.Path(lift.__file__).is_relative_to({str(target)!r}), "
        "lift.__file__\n"
    )
    env = {**os.environ, "PYTHONPATH": str(target), "JAX_CHECK_TRACER_LEAKS": "0"}
    run = subprocess.run(
        [sys.executable, "-c", check + _first_example()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr


def test_wheel_ships_the_errors_page_that_explain_prints(wheel: Path, tmp_path: Path):
    # Every message ends `Docs: python -m lift explain <anchor>`: the installed
    # package prints the entry from its own copy of docs/errors.md.
    with zipfile.ZipFile(wheel) as z:
        shipped = z.read("lift/errors.md")
    assert shipped == (ROOT / "docs" / "errors.md").read_bytes()
    target = tmp_path / "site"
    subprocess.run(
        [*PIP, "install", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    run = subprocess.run(
        [sys.executable, "-m", "lift", "explain", "leak-report", "--markdown"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    from lift._base.explain import entry

    assert run.stdout == entry("leak-report", shipped.decode())
    assert run.stdout.startswith("### `N tracers escaped")


# -- where the suite runs ---------------------------------------------------------


def _venv_sh(snippet: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `snippet` after sourcing the functions of scripts/_venv.sh (not its
    body, which would make a virtualenv)."""
    head = (ROOT / "scripts" / "_venv.sh").read_text().split("\npython=")[0]
    functions = head.replace('extra="$1"', "") + f"\nroot={ROOT}\n"
    return subprocess.run(
        ["bash", "-c", functions + snippet],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=ROOT,
    )


def test_the_oldest_jax_is_the_one_pyproject_declares():
    with open(ROOT / "pyproject.toml", "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    (declared,) = (d.removeprefix("jax>=") for d in deps if d.startswith("jax>="))
    done = _venv_sh("lift_oldest_jax")
    assert done.stdout.strip() == declared


def test_a_missing_python_fails_loudly_naming_what_to_install():
    done = _venv_sh('lift_find_python 3.99 && echo "found"', PATH="/usr/bin:/bin")
    assert done.returncode != 0
    assert "found" not in done.stdout
    assert "Python 3.99 is needed" in done.stderr
    assert "pyenv install 3.99" in done.stderr


def test_the_running_python_is_found_as_ci_finds_it():
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    done = _venv_sh(
        f'"$(lift_find_python {version})" -c "import sys; print(sys.version)"'
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(version + ".")


def test_classifiers_name_the_pythons_between_the_ends_ci_runs():
    with open(ROOT / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    listed = {
        c.rsplit(" ", 1)[1]
        for c in project["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    }
    ci = (ROOT / ".ci" / "run").read_text() + (ROOT / "scripts" / "test.sh").read_text()
    # CI runs the two ends (`--ends`: the oldest JAX on the oldest Python, the
    # newest on the newest); the classifiers name every Python between them.
    ends = dict(re.findall(r'"(3\.\d+) (oldest|newest)"', ci))
    assert sorted(ends.values()) == ["newest", "oldest"]
    low, high = (int(v.split(".")[1]) for v in sorted(ends, key=lambda v: int(v[2:])))
    assert (
        listed == {f"3.{m}" for m in range(low, high + 1)} == {"3.11", "3.12", "3.13"}
    )
    assert project["requires-python"] == ">=3.11"


def test_the_package_is_a_few_concept_folders_of_modules_under_500_lines():
    # The layout the code is held to: at most 11 private concept folders beside
    # the public modules, and no module over 500 lines (the import contract,
    # `lint-imports`, holds the folders' order).
    package = ROOT / "lift"
    folders = sorted(p.name for p in package.iterdir() if (p / "__init__.py").exists())
    assert len(folders) <= 11, folders
    assert all(name.startswith("_") for name in folders), folders
    long = {
        str(path.relative_to(ROOT)): n
        for path in package.rglob("*.py")
        if (n := len(path.read_text().splitlines())) > 500
    }
    assert not long, long


@pytest.mark.parametrize(
    "folder",
    sorted(p.name for p in (ROOT / "lift").iterdir() if (p / "__init__.py").exists()),
)
def test_each_folder_names_exactly_its_modules_in_its_docstring_and_readme(folder):
    # A newcomer reads a folder's `__init__` docstring or README to find a
    # module by the question it answers: both list every module, and only those.
    path = ROOT / "lift" / folder
    modules = {p.stem for p in path.glob("*.py") if p.stem != "__init__"}
    doc = ast.get_docstring(ast.parse((path / "__init__.py").read_text())) or ""
    assert set(re.findall(r"^- `(\w+)`:", doc, re.M)) == modules
    readme = (path / "README.md").read_text()
    assert set(re.findall(r"^\| `(\w+)\.py` \|", readme, re.M)) == modules


def test_dir_lists_every_public_name_and_an_unknown_one_is_an_attributeerror():
    # `lift`'s names are imported when first read: `dir` (a shell's completion)
    # lists them all the same.
    assert set(lift.__all__) <= set(dir(lift))
    with pytest.raises(
        AttributeError, match=r"^module 'lift' has no attribute 'lfit'$"
    ):
        lift.lfit  # noqa: B018
