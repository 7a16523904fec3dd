"""The official client without its package `__init__` files.

`import kubernetes` runs `kubernetes/__init__.py`, which imports every sub-package (dynamic, stream with
websocket, watch, informer, leaderelection, utils with create_from_yaml...), and `kubernetes.config` imports
the kubeconfig loader with oauthlib and requests: about 12 MiB of a node agent's memory for a few classes.
kube/ needs only the ApiClient, its Configuration, the REST layer, exceptions and the two config loaders.

So the four packages are registered as plain package modules pointing at the installed directories, and
only the submodules kube/ names are imported. Nothing is lost: any other attribute of a package (say
`kubernetes.client.CoreV1Api`) runs the real `__init__` on first use and is then served from it.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import types
from typing import Any

PACKAGES = ("kubernetes", "kubernetes.client", "kubernetes.config", "kubernetes.utils")


def _real_init(module: types.ModuleType) -> None:
    """Run the package's own __init__ in its module (once), for code that wants more than kube/ loaded."""
    if module.__dict__.get("_colo_full"):
        return
    module.__dict__["_colo_full"] = True
    with open(module.__file__ or "", encoding="utf-8") as f:
        code = compile(f.read(), module.__file__ or "", "exec")
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
        try:
            return module.__dict__[attr]
        except KeyError:
            raise AttributeError(f"module {name!r} has no attribute {attr!r}") from None

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    return module


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
