"""The cgroup parts Colo changes, each declared once (koordlet's registered resource updaters): what its
ledger record holds and how it is taken before Colo's first write, how it is put back, and whether it
protects online pods, holds offline pods down, or is a pod's own limit (never recorded, never put back).

The cgroup writes themselves are the knobs of agent/enforce/actions.py and of the part modules (`Knob`: the file,
how to read and compare it, how to write it, which level it is on and how two wishes of a pass merge).
The executor, the ledger, the recording of originals and restore are generic over `registry.PARTS`; strategies import
the parts they use; nothing here imports a strategy or the executor.

Importing this package imports every module in it, and each part's module registers its spec with its place
in the restore order (registry.py), as the collectors do. Adding a part: one module here (its `PartSpec` and
its `register(...)`, and its knob if no existing one writes its file), its strategy's module under
agent/enforce/strategies/ (which registers itself the same way), its config key.
"""

from common.plugins import import_modules

import_modules(__name__, __path__, skip=("registry", "spec"))
