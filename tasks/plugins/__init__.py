"""Bring your own variant: the plugin loader (``--user-dir``), ``zoo new-variant``'s scaffold and ``zoo check``.

A plugin's own tests import the three calls they need from here, the stable path: ``load_user_dir`` (register
the plugin folder's variants), ``check_variant`` and ``render`` (the conformance suite and its table).
"""

from tasks.plugins.check import check_variant, render
from tasks.plugins.loader import load_user_dir

__all__ = ["check_variant", "load_user_dir", "render"]
