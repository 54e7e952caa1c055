"""One graph capture (``capture``) for the simulation, inspect and export; what each call is comes from the op list (``pipeline.ops``)."""
