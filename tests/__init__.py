"""The test suite: one package per area of the pipeline (map: tests/README.md), helpers in
``tests.support``, reference data in tests/data/."""
