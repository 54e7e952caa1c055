"""The driver room: the run folder (``folder.py``), status.json (``status.py``), the driver that runs
the asked steps on it (``driver.py``), and report.json/.md (``report.py``)."""
