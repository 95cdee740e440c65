"""Running cases: planning ``bench run``, Locust processes (cold, warm, remote, on test hosts), reset, calibration, live progress."""
