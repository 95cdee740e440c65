"""lockbench bench."""
