"""One graph capture (``capture``) and one op table (``optable``) for the simulation, inspect and export."""
