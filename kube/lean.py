"""The official client without its package `__init__` files (the tools: `common.lazy_import`).

`import kubernetes` runs `kubernetes/__init__.py`, which imports every sub-package (dynamic, stream with
websocket, watch, informer, leaderelection, utils with create_from_yaml...), and `kubernetes.config` imports
the kubeconfig loader with oauthlib and requests: about 12 MiB of a node agent's memory for a few classes.
kube/ needs only the ApiClient, its Configuration, the REST layer, exceptions and the two config loaders.

So the packages (and `kubernetes.client.models`, whose `__init__` lists 900 models that only deserialising
would look up) are registered as plain package modules pointing at the installed directories, and only the
submodules kube/ names are imported; `ApiClient` and `Configuration`, which the kubeconfig loader takes
from `kubernetes.client`, come from their own submodules. Nothing is lost: any other attribute of a package
(say `kubernetes.client.CoreV1Api`) runs the real `__init__` on first use and is then served from it.

Two libraries are imported at the top of a module for one rarely taken path, and deferred: what the module
takes from them is a stand-in that imports the real module on first use.
- The kubeconfig loader (`kubernetes.config.kube_config`) imports requests-oauthlib and oauthlib to refresh
  an `oidc` auth provider's token: 177 modules and about 4.6 MiB. `kube_config()` imports the loader with
  those deferred, so a kubeconfig with an `oidc` user works as before and any other never loads them.
- The ApiClient imports python-dateutil's parser to turn dates into model attributes: kube/ reads plain
  JSON and never asks it for models (about 0.5 MiB).
"""

from __future__ import annotations

import os
import sys
import types

from common.lazy_import import import_deferring, installed_directory, lean_package

PACKAGES = ("kubernetes", "kubernetes.client", "kubernetes.client.models", "kubernetes.config", "kubernetes.utils")
#: Names the kubeconfig loader imports from `kubernetes.client`, by the submodule that defines them.
EXPORTS = {"kubernetes.client": {"ApiClient": "api_client", "Configuration": "configuration"}}
OIDC_ONLY = ("requests_oauthlib", "oauthlib", "oauthlib.oauth2")  # kube_config's imports for `oidc` only
MODELS_ONLY = ("dateutil.parser",)  # the ApiClient's import for deserialising into models only


def kube_config() -> types.ModuleType:
    """`kubernetes.config.kube_config`, imported without loading the oidc refresh's libraries (see above)."""
    return import_deferring("kubernetes.config.kube_config", OIDC_ONLY)


def install() -> None:
    """Register the lean packages and import the ApiClient, unless the client was already imported the
    usual way."""
    if "kubernetes" in sys.modules:
        return
    root = installed_directory("kubernetes")
    for name in PACKAGES:
        lean_package(name, os.path.join(root, *name.split(".")[1:]), EXPORTS.get(name))
    import_deferring("kubernetes.client.api_client", MODELS_ONLY)


install()
