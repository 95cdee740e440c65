"""What breaks during a case: server faults, network partitions, and the matrix's safety scenarios."""
