"""Compile boundary: DPU target registry (``targets``), the ``vai_c_xir`` runner (``vai_c``) and the
compile plan written when the compiler is not installed (``plan``)."""
