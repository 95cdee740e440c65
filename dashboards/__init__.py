"""lockbench dashboards."""
