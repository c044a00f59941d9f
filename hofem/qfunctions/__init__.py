"""The QFunction gallery (libCEED's names and fields), registered on import.

``Ceed.QFunctionByName`` imports this package on first lookup; nothing here
is imported when ``hofem`` is.
"""

from . import geometry, identity, mass, poisson, vector  # noqa: F401  (registration side effects)
