"""Data: sources (``open_source``, ``SOURCES``) and batching (``split``, ``iter_batches``)."""
