"""lockbench workloads."""
