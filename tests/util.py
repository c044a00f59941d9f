"""Structured-grid operators for the algebra tests: see hofem.bakeoff.structured."""

from functools import partial

from hofem.bakeoff.structured import box_coordinates as grid_coords  # noqa: F401
from hofem.bakeoff.structured import box_offsets as grid_offsets  # noqa: F401
from hofem.bakeoff.structured import box_operator

mass_operator = partial(box_operator, form="mass")
poisson_operator = partial(box_operator, form="diffusion")
