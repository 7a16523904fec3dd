"""The capacity predictors: each module says what the node's online pods will take at their peak, from the
statistics the windows keep, and registers itself (`registry`). Importing this package registers them all, so
a new predictor is one module here (and its name in the configuration's `predictor` keys)."""

from common.plugins import import_modules

import_modules(__name__, __path__, skip=("registry",))
