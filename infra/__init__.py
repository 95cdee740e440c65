"""Local servers on loopback for lockbench: install, start on free ports, wait until ready, stop."""
