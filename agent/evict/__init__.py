"""Evict by watermarks: the evictor (Volcano's keys and defaults), which offline pods go (`choice`), and the
Kubernetes actions that carry it out (evictions, Events, the taint)."""
