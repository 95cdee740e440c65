"""The machinery every locustfile shares: Locust glue, recording, clock offsets, scheduling, resource, arrivals, the workload catalog."""
