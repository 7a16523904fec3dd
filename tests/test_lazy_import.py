"""common/lazy_import.py on a package made for the test: what runs its `__init__`, what does not, and names
imported from a deferred module. Each case runs in a fresh interpreter with the package on its path."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def make_package(tmp: Path) -> Path:
    """`lazypkg`: an __init__ that records its runs, two submodules; `uses_heavy` imports from `heavymod`."""
    pkg = tmp / "lazypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        textwrap.dedent("""
            import builtins
            builtins.lazypkg_inits = getattr(builtins, "lazypkg_inits", 0) + 1
            from lazypkg import heavy
            from lazypkg.thing import Thing
            EXTRA = "from the real __init__"
        """)
    )
    (pkg / "thing.py").write_text("class Thing:\n    pass\n")
    (pkg / "heavy.py").write_text("LOADED = True\n")
    (tmp / "heavymod.py").write_text("def answer():\n    return 42\n")
    (tmp / "uses_heavy.py").write_text("from heavymod import answer, missing_later\n")
    return tmp


def run(tmp: Path, code: str) -> str:
    prelude = "import builtins, sys\nfrom common.lazy_import import import_deferring, lean_package\n"
    out = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=ROOT,
        env={"PYTHONPATH": f"{tmp}:{ROOT}", "PATH": "/usr/bin:/bin"},
    )
    return out.stdout.strip()


def test_a_lean_package_runs_its_init_only_for_a_name_it_alone_defines(tmp_path: Path) -> None:
    tmp = make_package(tmp_path)
    code = f"""
        pkg = lean_package("lazypkg", "{tmp}/lazypkg", {{"Thing": "thing"}})
        import lazypkg.thing
        from lazypkg import Thing, heavy
        print(getattr(builtins, "lazypkg_inits", 0), Thing is lazypkg.thing.Thing, heavy.LOADED)
        print(pkg.EXTRA, builtins.lazypkg_inits)
        pkg.EXTRA
        try:
            pkg.nothing
        except AttributeError as err:
            print("AttributeError", builtins.lazypkg_inits)
    """
    assert run(tmp, code).splitlines() == ["0 True True", "from the real __init__ 1", "AttributeError 1"]


def test_names_from_a_deferred_module_import_it_on_first_use(tmp_path: Path) -> None:
    tmp = make_package(tmp_path)
    code = """
        mod = import_deferring("uses_heavy", ("heavymod",))
        print("heavymod" in sys.modules, "uses_heavy" in sys.modules)
        print(mod.answer(), "heavymod" in sys.modules)
        try:
            mod.missing_later()
        except ImportError:
            print("ImportError")
        print(import_deferring("uses_heavy", ()) is mod)
    """
    assert run(tmp, code).splitlines() == ["False True", "42 True", "ImportError", "True"]
