"""``bench matrix``: every impl under every safety scenario, its tables and the catalog's expectations."""
