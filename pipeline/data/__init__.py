"""Data: the ``Source`` protocol and ``Batch`` (``base``), the sources (``open_source``, ``SOURCES``;
``memory``, ``image_folder``, ``stream``; file readers in ``readers``, image decoding in ``decode``),
batching (``split``, ``split_rows``, ``iter_batches``) and the feed that takes batches from the source
through the stages to the quantizer boundary (``feed.DataFeed``)."""
