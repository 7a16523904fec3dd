"""The official client without its package `__init__` files.

`import kubernetes` runs `kubernetes/__init__.py`, which imports every sub-package (dynamic, stream with
websocket, watch, informer, leaderelection, utils with create_from_yaml...), and `kubernetes.config` imports
the kubeconfig loader with oauthlib and requests: about 12 MiB of a node agent's memory for a few classes.
kube/ needs only the ApiClient, its Configuration, the REST layer, exceptions and the two config loaders.

So the packages (and `kubernetes.client.models`, whose `__init__` lists 900 models that only deserialising
would look up) are registered as plain package modules pointing at the installed directories, and only the
submodules kube/ names are imported. Nothing is lost: any other attribute of a package (say
`kubernetes.client.CoreV1Api`) runs the real `__init__` on first use and is then served from it (or from
the `__getattr__` it defines: kubernetes>=37 resolves its names lazily). The real `__init__` is run from its
cached bytecode, as an import would: compiling `kubernetes/client/__init__.py` from source cost 5.5 MiB at
its peak, 3 MiB of which the process kept.

The kubeconfig loader (`kubernetes.config.kube_config`) imports requests-oauthlib and oauthlib at its top for
one path, refreshing an `oidc` auth provider's token: 177 modules and about 4.6 MiB. `kube_config()` imports
the loader with those two deferred: what it takes from them is a stand-in that imports the real module on
first use, so a kubeconfig with an `oidc` user works as before and any other kubeconfig never loads them.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import types
from collections.abc import Callable
from typing import Any

PACKAGES = ("kubernetes", "kubernetes.client", "kubernetes.client.models", "kubernetes.config", "kubernetes.utils")


def _real_init(module: types.ModuleType) -> None:
    """Run the package's own __init__ in its module (once), for code that wants more than kube/ loaded."""
    if module.__dict__.get("_colo_full"):
        return
    module.__dict__["_colo_full"] = True
    # through the loader, so from the cached bytecode (see above), not compiled again from source
    loader = importlib.machinery.SourceFileLoader(module.__name__, module.__file__ or "")
    code = loader.get_code(module.__name__)
    if code is None:
        raise ImportError(f"no code for {module.__name__}")
    exec(code, module.__dict__)


def _package(name: str, directory: str) -> types.ModuleType:
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [directory]
    module = importlib.util.module_from_spec(spec)
    module.__file__ = os.path.join(directory, "__init__.py")

    def __getattr__(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        _real_init(module)
        if attr in module.__dict__:
            return module.__dict__[attr]
        lazy = module.__dict__.get("__getattr__")  # the real __init__'s own (kubernetes>=37 resolves names lazily)
        if lazy is not None and lazy is not __getattr__:
            return lazy(attr)
        raise AttributeError(f"module {name!r} has no attribute {attr!r}")

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    return module


DEFERRED = ("requests_oauthlib", "oauthlib", "oauthlib.oauth2")  # kube_config's imports for `oidc` only
_importing = False  # True while kube_config itself is being imported


def _resolve(module: str, attr: str) -> Any:
    """`module.attr` from the real module, importing it (or its submodule `attr`) now."""
    real = importlib.import_module(module)
    try:
        return getattr(real, attr)
    except AttributeError:
        return importlib.import_module(f"{module}.{attr}")


class _DeferredName:
    """A name the loader imported from a deferred module (`OAuth2Session`): the real one on first use."""

    def __init__(self, module: str, attr: str) -> None:
        self._where = (module, attr)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        real: Callable[..., Any] = _resolve(*self._where)
        return real(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(_resolve(*self._where), name)


class _Deferred(types.ModuleType):
    """Stands in for a module while the loader is imported; afterwards any attribute imports the real one."""

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        if _importing:
            return _DeferredName(self.__name__, attr)
        return _resolve(self.__name__, attr)


def kube_config() -> types.ModuleType:
    """`kubernetes.config.kube_config`, imported without loading the oidc refresh's libraries (see above)."""
    global _importing
    name = "kubernetes.config.kube_config"
    if name in sys.modules:
        return sys.modules[name]
    stand_ins = {m: _Deferred(m) for m in DEFERRED if m not in sys.modules}
    sys.modules.update(stand_ins)
    _importing = True
    try:
        return importlib.import_module(name)
    finally:
        _importing = False
        for m, stand_in in stand_ins.items():
            if sys.modules.get(m) is stand_in:
                del sys.modules[m]


def install() -> None:
    """Register the lean packages, unless the client was already imported the usual way."""
    if "kubernetes" in sys.modules:
        return
    spec = importlib.util.find_spec("kubernetes")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the kubernetes client is not installed")
    root = next(iter(spec.submodule_search_locations))
    for name in PACKAGES:
        directory = os.path.join(root, *name.split(".")[1:])
        module = _package(name, directory)
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)


install()
