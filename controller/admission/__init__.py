"""colo-controller's mutating admission webhook: colocation profiles turn existing jobs into offline pods."""
