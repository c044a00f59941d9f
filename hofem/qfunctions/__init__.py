"""The QFunction gallery (libCEED's names and fields), registered on import.

Each module registers its entries in :mod:`hofem.qfunction_registry`, whose lookup
(``Ceed.QFunctionByName``) imports this package the first time; nothing here
is imported when ``hofem`` is.
"""

from . import geometry, identity, mass, poisson, vector  # noqa: F401  (registration side effects)
