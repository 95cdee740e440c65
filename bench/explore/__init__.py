"""``bench explore`` and ``bench replay``: random combined fault schedules, shrunk and replayed (issue 41)."""
