"""Import what a program uses of a library, not what the library's `__init__` files load for everyone.

A long-lived process keeps every module it ever imported. Two libraries Colo depends on import far more at
their top than Colo takes from them: uvicorn's `__init__` loads its command line (click) and process
supervisors for `Config` and `Server`, the kubernetes client's load its kubeconfig and API packages.
Two tools, used by `kube.lean` and `serving.uvicorn_package`:

- `lean_package` registers a package as a plain module pointing at its installed directory, without running
  its `__init__`: its submodules import as usual, the names listed as `exports` come from the submodule
  that defines them, and any other name runs the real `__init__` (once, from its cached bytecode, as an
  import would) and is served from it. Nothing is lost; what is never asked for is never loaded.
- `import_deferring` imports a module while some of its imports are stand-ins: a name it takes from them
  (`from dateutil.parser import parse`) imports the real module on first use.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def run_init(module: types.ModuleType) -> None:
    """Run a lean package's own `__init__` in its module (once)."""
    if module.__dict__.get("_colo_full"):
        return
    module.__dict__["_colo_full"] = True
    # through the loader, so from the cached bytecode: compiling kubernetes/client/__init__.py (2,800 lines)
    # from source took 5.5 MiB at its peak, 3 MiB of which the process kept
    loader = importlib.machinery.SourceFileLoader(module.__name__, module.__file__ or "")
    code = loader.get_code(module.__name__)
    if code is None:
        raise ImportError(f"no code for {module.__name__}")
    exec(code, module.__dict__)


def installed_directory(package: str) -> str:
    """Where an installed top-level package lives (without importing it)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"{package} is not installed")
    return next(iter(spec.submodule_search_locations))


def lean_package(name: str, directory: str, exports: Mapping[str, str] | None = None) -> types.ModuleType:
    """Register package `name` (installed in `directory`) without running its `__init__`; `exports` maps a
    name of the package to the submodule (relative) that defines it. Attached to its parent if that is
    registered. Returns the module."""
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [directory]
    module = importlib.util.module_from_spec(spec)
    module.__file__ = os.path.join(directory, "__init__.py")
    where = dict(exports or {})

    def __getattr__(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        if attr in where and not module.__dict__.get("_colo_full"):
            value = getattr(importlib.import_module(f"{name}.{where[attr]}"), attr)
            setattr(module, attr, value)
            return value
        if os.path.isfile(os.path.join(directory, f"{attr}.py")) or os.path.isdir(os.path.join(directory, attr)):
            return importlib.import_module(f"{name}.{attr}")  # `from package import submodule`
        run_init(module)
        if attr in module.__dict__:
            return module.__dict__[attr]
        lazy = module.__dict__.get("__getattr__")  # the real __init__'s own (kubernetes>=37 resolves lazily)
        if lazy is not None and lazy is not __getattr__:
            return lazy(attr)
        raise AttributeError(f"module {name!r} has no attribute {attr!r}")

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent in sys.modules:
        setattr(sys.modules[parent], child, module)
    return module


def _resolve(module: str, attr: str) -> Any:
    """`module.attr` from the real module, importing it (or its submodule `attr`) now."""
    real = importlib.import_module(module)
    try:
        return getattr(real, attr)
    except AttributeError:
        return importlib.import_module(f"{module}.{attr}")


class _DeferredName:
    """A name taken from a deferred module (`OAuth2Session`, `parse`): the real one on first use."""

    def __init__(self, module: str, attr: str) -> None:
        self._where = (module, attr)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        real: Callable[..., Any] = _resolve(*self._where)
        return real(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(_resolve(*self._where), name)


class _Deferred(types.ModuleType):
    """Stands in for a module while another is imported; afterwards any attribute imports the real one."""

    importing = False

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        if self.importing:
            return _DeferredName(self.__name__, attr)
        return _resolve(self.__name__, attr)


def import_deferring(name: str, deferred: Iterable[str]) -> types.ModuleType:
    """Import module `name` with the modules `deferred` (those not imported yet) as stand-ins."""
    if name in sys.modules:
        return sys.modules[name]
    stand_ins = {m: _Deferred(m) for m in deferred if m not in sys.modules}
    for stand_in in stand_ins.values():
        stand_in.importing = True
    sys.modules.update(stand_ins)
    try:
        return importlib.import_module(name)
    finally:
        for m, stand_in in stand_ins.items():
            stand_in.importing = False
            if sys.modules.get(m) is stand_in:
                del sys.modules[m]
